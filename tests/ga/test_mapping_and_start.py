"""The unrestricted size-class mapping (the paper's Figure 9c) and the random-order start (its Figure 10)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ga import GAConfig, optimize
from ga.algorithm import GeneticSearch
from ga.crossover import cross_allocations
from ga.encoding import SearchSpace, canonical_free
from ga.evaluation import SerialEvaluator
from ga.mutation import mutate_cls
from ga.population import random_allocation
from ga.repair import floor_bytes, repair
from hybrid.errors import HybridError
from hybrid.graph.order import is_topological, program_order
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.pools import class_pool
from hybrid.validator import check
from tests.ga.graphs import small_training


@pytest.fixture(scope="module")
def training():
    from dataclasses import replace

    g, dev = small_training(14, seed=2)
    return g, replace(dev, memory_bytes=2 * dev.memory_bytes)  # room for pools other than the lowest floor


def monotone(cls: np.ndarray) -> bool:
    return bool(np.all(np.diff(cls) >= 0))


def test_canonical_free_numbers_by_first_appearance() -> None:
    assert canonical_free(np.array([5, 2, 5, 9, 2])).tolist() == [0, 1, 0, 2, 1]
    assert canonical_free(np.array([0, 0, 1])).tolist() == [0, 0, 1]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=2, max_size=12), st.integers(0, 2**31))
def test_free_operators_keep_a_gapless_mapping(raw: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    cls = canonical_free(np.array(raw))
    cnt = rng.integers(1, 5, size=int(cls.max()) + 1)
    new, ncnt = mutate_cls(cls, cnt, 0.5, rng, free=True)
    assert np.array_equal(np.unique(new), np.arange(int(new.max()) + 1)) and len(ncnt) == int(new.max()) + 1
    (c1, n1), (c2, n2) = cross_allocations(cls, cnt, new, ncnt, 1 + seed % (len(raw) - 1), free=True)
    for c, n in ((c1, n1), (c2, n2)):
        assert np.array_equal(c, canonical_free(c)) and len(n) == int(c.max()) + 1


def test_free_mapping_reaches_non_monotone_pools_that_the_planner_runs(training) -> None:
    g, dev = training
    space = SearchSpace.build(g, dev)
    assert space.n_sizes >= 3
    rng = np.random.default_rng(1)
    seen_non_monotone = False
    for _ in range(30):
        cls, cnt = random_allocation(space, program_order(g), rng, free=True)
        seen_non_monotone |= not monotone(cls)
        cls, cnt, ok = repair(space, cls, cnt, free=True)
        if ok:
            assert floor_bytes(space, cls) <= space.budget
            pool = class_pool(g, cls, cnt, space.ts, align=dev.alignment_bytes)
            # every tensor's class holds it: object size = the largest size mapped there
            assert np.all(pool.class_bytes[pool.t_class] >= g.arrays.t_bytes)
    assert seen_non_monotone
    # the monotone operators never leave the monotone space
    for _ in range(10):
        cls, _ = random_allocation(space, program_order(g), rng)
        assert monotone(cls)


def test_free_search_is_valid_and_deterministic(training) -> None:
    g, dev = training
    cfg = GAConfig(population=8, children=8, seed=4, pool="classes", class_mapping="free")
    one = optimize(g, dev, cfg, generations=3)
    two = optimize(g, dev, cfg, generations=3)
    assert one.makespan_s == two.makespan_s and np.array_equal(one.best.cls, two.best.cls)
    plan = one.to_plan()
    check(g, plan)
    assert plan.planner["class_mapping"] == "free" and plan.allocation.kind == "size_classes"
    search = GeneticSearch(SearchSpace.build(g, dev), cfg, SerialEvaluator(g, dev, PlannerOptions()))
    search.initialize()
    children = search._children() + search._children()
    assert any(not monotone(i.cls) for i in children if not i.by_bytes)  # the search proposes them
    mono = GeneticSearch(SearchSpace.build(g, dev), GAConfig(population=8, children=8, seed=4, pool="classes"),
                         SerialEvaluator(g, dev, PlannerOptions()))
    mono.initialize()
    assert all(monotone(i.cls) for i in mono._children() + mono._children())


def test_random_start_seeds_a_random_order_instead_of_the_program_order(training) -> None:
    g, dev = training
    prog = program_order(g)
    cfg = GAConfig(population=8, children=8, seed=5, search="allocation", start="random")
    r = optimize(g, dev, cfg, generations=2)
    assert is_topological(g, r.best.schedule) and not np.array_equal(r.best.schedule, prog)
    check(g, r.to_plan())
    assert r.to_plan().planner["start"] == "random"
    again = optimize(g, dev, cfg, generations=2)
    assert np.array_equal(again.best.schedule, r.best.schedule)
    other = optimize(g, dev, GAConfig(population=8, children=8, seed=6, search="allocation", start="random"),
                     generations=2)
    assert not np.array_equal(other.best.schedule, r.best.schedule)


@pytest.mark.parametrize("kw, flag", [({"class_mapping": "any"}, "--class-mapping"), ({"start": "dfs"}, "--start")])
def test_bad_values_name_the_flag(kw, flag) -> None:
    with pytest.raises(HybridError, match=flag):
        GAConfig(**kw)


def test_optimize_cli_flags(training, tmp_path) -> None:
    from hybrid.plan import Plan
    from tests.cli.helpers import run

    g, dev = training
    gpath = tmp_path / "g.json"
    gpath.write_text(g.dumps())
    out = tmp_path / "p.json"
    r = run("optimize", "--graph", gpath, "--memory", f"{dev.memory_bytes}B", "--generations", 2, "--population", 8,
            "--refine", "none", "--workers", 1, "--pool", "classes", "--class-mapping", "free", "--start", "random",
            "--quiet", "--out", out)
    assert r.exit_code == 0, r.output
    plan = Plan.load(out)
    assert plan.planner["class_mapping"] == "free" and plan.planner["start"] == "random"
    check(g, plan)
