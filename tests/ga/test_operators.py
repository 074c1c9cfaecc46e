"""Crossover, mutation and repair keep individuals valid: topological schedules, canonical CLS, feasible pools."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ga.crossover import cross_allocations, cross_schedules
from ga.encoding import SearchSpace, canonical_cls, collapse_cnt, extend_cnt
from ga.mutation import mutate_cls, mutate_cnt, mutate_schedule, random_schedule
from ga.repair import check_feasible, fit_counts, floor_bytes, min_floor_cls, repair
from hybrid.swap.pools import class_pool
from hybrid.errors import InfeasibleError
from hybrid.graph.order import depth_first_order, program_order
from hybrid.swap.planner import SwapPlanner
from tests.ga.graphs import MB, assert_topological, small_random, small_training, two_size_graph


def is_canonical(cls: np.ndarray) -> bool:
    return len(cls) == 0 or (cls[0] == 0 and bool(np.isin(np.diff(cls), (0, 1)).all()))


# ---- schedules ---------------------------------------------------------------------------------------------

def test_schedule_crossover_follows_figure_4() -> None:
    # Figure 4: SCH1 = [1,2,3,4,5], SCH2 = [2,3,4,1,5], CR = 3 -> SCH_C1 = [2,3,4,1,5]; SCH_C2 = [1,2,3,4,5].
    s1 = np.array([0, 1, 2, 3, 4], dtype=np.int32)
    s2 = np.array([1, 2, 3, 0, 4], dtype=np.int32)
    c1, c2 = cross_schedules(s1, s2, 3)
    assert c1.tolist() == [1, 2, 3, 0, 4]
    assert c2.tolist() == [0, 1, 2, 3, 4]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 60), p=st.floats(0.0, 1.0))
def test_schedule_operators_stay_topological(seed: int, n: int, p: float) -> None:
    # random_dag has in-place updates: their ordering edges must hold too.
    g, dev = small_random(n, seed)
    sp = SearchSpace.build(g, dev)
    rng = np.random.default_rng(seed)
    a, b = random_schedule(sp, rng), depth_first_order(g)
    assert_topological(g, a)
    for cr in (0, 1, n // 2, n):
        for child in cross_schedules(a, b, cr):
            assert_topological(g, child)
    assert_topological(g, mutate_schedule(sp, a, p, rng))


def test_mutation_with_zero_rate_keeps_the_parent_and_rate_one_moves_ops() -> None:
    g, dev = small_training(20, seed=1)
    sp = SearchSpace.build(g, dev)
    rng = np.random.default_rng(0)
    parent = depth_first_order(g)
    assert np.array_equal(mutate_schedule(sp, parent, 0.0, rng), parent)
    moved = [not np.array_equal(mutate_schedule(sp, parent, 1.0, rng), parent) for _ in range(5)]
    assert any(moved)


def test_mutation_is_reproducible_from_the_generator_state() -> None:
    g, dev = small_training(20, seed=1)
    sp = SearchSpace.build(g, dev)
    parent = program_order(g)
    one = mutate_schedule(sp, parent, 0.3, np.random.default_rng(5))
    two = mutate_schedule(sp, parent, 0.3, np.random.default_rng(5))
    assert np.array_equal(one, two)


# ---- CLS / CNT ---------------------------------------------------------------------------------------------

def test_allocation_crossover_follows_figure_5() -> None:
    # Figure 5 (classes numbered from 0): CLS1 = [0,0,0,0], CNT1 = [4]; CLS2 = [0,1,1,1], CNT2 = [8,1]; CR = 2.
    (cls_c1, cnt_c1), (cls_c2, cnt_c2) = cross_allocations(
        np.array([0, 0, 0, 0]), np.array([4]), np.array([0, 1, 1, 1]), np.array([8, 1]), 2)
    assert cls_c1.tolist() == [0, 1, 1, 1]      # [0,1,0,0] raised minimally to stay monotone
    assert cnt_c1.tolist() == [8, 3]            # CNT_EXT_C1 = [8,1,4,4]; class 1 averages (1,4,4)
    assert cls_c2.tolist() == [0, 0, 1, 1]
    assert cnt_c2.tolist() == [4, 1]            # CNT_EXT_C2 = [4,4,1,1]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=12), st.lists(st.integers(0, 6), min_size=1, max_size=12),
       st.integers(0, 12), st.integers(0, 1000))
def test_cls_operators_keep_it_canonical(raw1: list[int], raw2: list[int], cr: int, seed: int) -> None:
    n = min(len(raw1), len(raw2))
    c1, c2 = canonical_cls(np.array(raw1[:n])), canonical_cls(np.array(raw2[:n]))
    assert is_canonical(c1) and is_canonical(c2)
    rng = np.random.default_rng(seed)
    n1 = rng.integers(0, 20, size=int(c1[-1]) + 1)
    n2 = rng.integers(0, 20, size=int(c2[-1]) + 1)
    for cls, cnt in cross_allocations(c1, n1, c2, n2, min(cr, n)):
        assert is_canonical(cls) and len(cnt) == int(cls[-1]) + 1
    m_cls, m_cnt = mutate_cls(c1, n1, 0.5, rng)
    assert is_canonical(m_cls) and len(m_cnt) == int(m_cls[-1]) + 1
    assert (mutate_cnt(n1, 0.5, 0.2, rng) >= 0).all()


def test_cnt_ext_round_trip() -> None:
    cls = np.array([0, 0, 1, 2, 2])
    cnt = np.array([3, 7, 2])
    assert extend_cnt(cls, cnt).tolist() == [3, 3, 7, 2, 2]
    assert np.array_equal(collapse_cnt(cls, extend_cnt(cls, cnt)), cnt)


# ---- repair ------------------------------------------------------------------------------------------------

def test_repair_lowers_counts_in_inverse_proportion_to_size() -> None:
    # §5.3: CNT [8, 3] over 1 MB and 4 MB classes is 20 MB in a 12 MB memory; repaired it is [4, 2].
    g = two_size_graph(12 * MB)
    sp = SearchSpace.build(g, g.device)
    cnt, ok = fit_counts(sp, np.array([0, 1]), np.array([8, 3]))
    assert ok and cnt.tolist() == [4, 2]


def test_repair_raises_classes_to_what_one_op_needs() -> None:
    g, dev = small_training(15, seed=3)
    sp = SearchSpace.build(g, dev)
    cls = np.zeros(sp.n_sizes, dtype=np.int64)
    cls, cnt, ok = repair(sp, cls, np.zeros(1, dtype=np.int64))
    assert ok
    assert (cnt >= sp.class_need(cls)).all() and sp.pool_bytes(cls, cnt) <= sp.budget


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(3, 40), boundaries=st.integers(0, 2**16), scale=st.floats(0, 50))
def test_repaired_pools_always_run(seed: int, n: int, boundaries: int, scale: float) -> None:
    g, dev = small_random(n, seed)
    sp = SearchSpace.build(g, dev)
    steps = np.array([(boundaries >> i) & 1 for i in range(sp.n_sizes - 1)], dtype=np.int64)
    cls = np.concatenate([[0], np.cumsum(steps)]).astype(np.int64)
    cnt = np.full(int(cls[-1]) + 1, int(scale))
    cls, cnt, ok = repair(sp, cls, cnt)
    assert ok and is_canonical(cls)
    assert (cnt >= sp.class_need(cls)).all()
    assert sp.pool_bytes(cls, cnt) + int(g.arrays.op_ws.max(initial=0)) <= dev.usable_bytes
    planner = SwapPlanner(g, dev)
    assert np.isfinite(planner.makespan(program_order(g), class_pool(g, cls, cnt, sp.ts, align=dev.alignment_bytes)))


def test_min_floor_cls_is_the_lowest_over_all_monotone_mappings() -> None:
    g, dev = small_random(25, seed=7)
    sp = SearchSpace.build(g, dev)
    cls, floor = min_floor_cls(sp)
    assert is_canonical(cls) and floor == floor_bytes(sp, cls)
    n = sp.n_sizes
    for mask in range(2 ** (n - 1)):
        steps = np.array([(mask >> i) & 1 for i in range(n - 1)], dtype=np.int64)
        other = np.concatenate([[0], np.cumsum(steps)]).astype(np.int64)
        assert floor_bytes(sp, other) >= floor


def test_check_feasible_names_the_shortfall() -> None:
    g = two_size_graph(3 * MB)   # the 4 MB tensor alone does not fit
    with pytest.raises(InfeasibleError, match="no size-class pool fits"):
        check_feasible(SearchSpace.build(g, g.device))


# ---- planner settings ----------------------------------------------------------------------------------------

def test_planner_gene_round_trip_and_mutation_bounds() -> None:
    from ga.encoding import N_PLANNER_GENES, POLICIES, PlannerGene, planner_options
    from ga.mutation import mutate_planner
    from hybrid.swap.augmented import PlannerOptions

    for code in range(N_PLANNER_GENES):
        assert PlannerGene.unpack(code).pack() == code
    base = PlannerOptions()
    seed_gene = PlannerGene.of(base, POLICIES.index("lru"))
    opts = planner_options(base, seed_gene.pack())
    assert opts == PlannerOptions(victim="lru")           # seeds reproduce the base options exactly
    assert planner_options(base, PlannerGene.of(base, 2).pack()).keep_persistent
    rng = np.random.default_rng(0)
    code = seed_gene.pack()
    for _ in range(200):
        code = mutate_planner(code, (0, 1), True, 0.5, rng)
        assert PlannerGene.unpack(code).policy in (0, 1)
    fixed = PlannerGene.of(base, 0).pack()
    for _ in range(50):
        g = PlannerGene.unpack(mutate_planner(fixed, (0, 1), False, 0.9, rng))
        assert (g.recency, g.lookahead, g.write_back) == (PlannerGene.of(base, 0).recency,
                                                          PlannerGene.of(base, 0).lookahead, 1)
    off = PlannerOptions(write_back=False)
    assert planner_options(off, PlannerGene.of(off, 0).pack()) == off
    seen = {PlannerGene.unpack(mutate_planner(fixed, (0,), True, 0.5, rng)).write_back for _ in range(50)}
    assert seen == {0, 1}                                 # the search may switch write-back either way


def test_copies_do_not_crowd_out_distinct_candidates() -> None:
    from ga.algorithm import _distinct
    from ga.encoding import Individual

    a = Individual(np.arange(3, dtype=np.int32), np.array([0]), np.array([2]), makespan=1.0)
    b = Individual(np.array([1, 0, 2], dtype=np.int32), np.array([0]), np.array([2]), makespan=2.0)
    out = _distinct([a, a.copy(), a.copy(), b], 2)
    assert [x.makespan for x in out] == [1.0, 2.0]
    assert len(_distinct([a, a.copy(), b], 3)) == 3      # repeats return only to fill the population


@pytest.mark.parametrize("pool", ["both", "bytes", "classes"])
def test_seeds_walk_every_recompute_setting_where_reruns_are_allowed(pool) -> None:
    from ga.encoding import RECOMPUTE, PlannerGene
    from ga.population import seeded
    from hybrid.swap.augmented import PlannerOptions

    g, dev = small_training()
    rc = SearchSpace.build(g, dev, PlannerOptions(recompute_ratio=1.0, long_chains=True))
    seeds = seeded(rc, pool, (0, 1))
    got = {PlannerGene.unpack(s.planner).recompute for s in seeds if s.by_bytes}
    # on the byte budget every chain setting starts from the program order; size classes keep their two seeds
    assert got == (set(range(len(RECOMPUTE))) if pool != "classes" else set())
    first = program_order(g)
    assert all(np.array_equal(s.schedule, first) for s in seeds if s.by_bytes
               and PlannerGene.unpack(s.planner).recompute not in (0, PlannerGene.of(rc.options, 0).recompute))
    swap_only = seeded(SearchSpace.build(g, dev), pool, (0, 1))
    assert {PlannerGene.unpack(s.planner).recompute for s in swap_only} == {PlannerGene.of(PlannerOptions(), 0).recompute}


@pytest.mark.parametrize("pool", ["both", "bytes", "classes"])
def test_without_long_chains_the_recompute_gene_keeps_its_first_eight_settings(pool) -> None:
    """PlannerOptions.long_chains off (the default): the seeds, random draws and mutation steps of the recompute
    gene are those made before the longer chains were appended, so the search's streams are unchanged."""
    from ga.encoding import RECOMPUTE, SHORT_CHAINS, PlannerGene
    from ga.mutation import mutate_planner
    from ga.population import random_individuals, seeded
    from hybrid.swap.augmented import PlannerOptions
    from dataclasses import replace

    g, dev = small_training()
    short = SearchSpace.build(g, dev, PlannerOptions(recompute_ratio=1.0))
    long = SearchSpace.build(g, dev, PlannerOptions(recompute_ratio=1.0, long_chains=True))
    assert SHORT_CHAINS == 8 < len(RECOMPUTE)
    # seeds: the base setting and swap-only per seed, no extra program-order walks
    base = PlannerGene.of(short.options, 0).recompute
    assert {PlannerGene.unpack(s.planner).recompute for s in seeded(short, pool, (0, 1))} == {0, base}
    assert len(seeded(long, pool, (0, 1))) - len(seeded(short, pool, (0, 1))) == (
        0 if pool == "classes" else len(RECOMPUTE) - 2)
    # random individuals draw only the short settings
    fixed = seeded(short, pool, (0,))[0]
    a = random_individuals(short, 60, "both", pool, (0, 1), np.random.default_rng(3), fixed)
    b = random_individuals(long, 60, "both", pool, (0, 1), np.random.default_rng(3), fixed)
    assert {PlannerGene.unpack(x.planner).recompute for x in a} == set(range(SHORT_CHAINS))
    assert max(PlannerGene.unpack(x.planner).recompute for x in b) >= SHORT_CHAINS
    # mutation steps stop at the last short setting; with long chains they go on
    top = PlannerGene(0, 2, 0, 1, SHORT_CHAINS - 1).pack()
    rng = np.random.default_rng(0)
    off = {PlannerGene.unpack(mutate_planner(top, (0,), True, 0.9, rng, SHORT_CHAINS)).recompute for _ in range(100)}
    on = {PlannerGene.unpack(mutate_planner(top, (0,), True, 0.9, rng, len(RECOMPUTE))).recompute for _ in range(100)}
    assert off == {SHORT_CHAINS - 2, SHORT_CHAINS - 1} and SHORT_CHAINS in on
    # the nearest table setting to a base depth beyond the short table's
    deep = PlannerOptions(recompute_ratio=1.0, recompute_depth=40)
    assert RECOMPUTE[PlannerGene.of(deep, 0).recompute] == (1.0, 12)
    assert RECOMPUTE[PlannerGene.of(replace(deep, long_chains=True), 0).recompute] == (1.0, 24)
