"""The swap planner's arena mode (hybrid.swap.addresses): plans laid out as they are planned.

Every plan the address-aware walk makes is an `arena` allocation whose offsets pass the validator (rule 5:
one offset per tensor, copies live together never overlap, workspaces beside the arena), on random graphs and
memories; on captured models they run in the CPU executor with no compaction, bitwise like eager.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid.errors import InfeasibleError
from hybrid.graph.info import unswapped_peak
from hybrid.graph.order import program_order
from hybrid.graph.synthetic import random_dag, training_graph
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.planner import SwapPlanner
from hybrid.swap.pools import arena_pool, byte_pool
from hybrid.swap.to_plan import to_plan
from hybrid.validator import validate

OPTIONS = {"belady": PlannerOptions(), "lru": PlannerOptions(victim="lru", passes=3),
           "recompute": PlannerOptions(recompute_ratio=1.0), "naive": PlannerOptions(overlap=False),
           "keep persistent": PlannerOptions(keep_persistent=True),
           # --addresses turns the long-chain planner on (hybrid.pipeline.optimize)
           "long chains": PlannerOptions(recompute_ratio=1.0, recompute_depth=24, long_chains=True)}


def _arena_plan(g, device, opt: PlannerOptions):
    order = program_order(g)
    aug = SwapPlanner(g, device).plan(order, arena_pool(g, device), opt)
    return to_plan(aug, {"name": "arena walk"})


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(["training", "random"]), seed=st.integers(0, 10_000), size=st.integers(3, 14),
       fraction=st.floats(0.35, 1.1), option=st.sampled_from(sorted(OPTIONS)))
def test_every_address_aware_plan_validates_with_its_offsets(kind: str, seed: int, size: int, fraction: float,
                                                              option: str) -> None:
    if kind == "training":
        g = training_graph(size, seed=seed, workspace_prob=0.2, impls_prob=0.2)
    else:
        g = random_dag(4 * size, seed=seed)
    device = dataclasses.replace(g.device, memory_bytes=max(1, int(unswapped_peak(g) * fraction)), reserve_bytes=0)
    try:
        plan = _arena_plan(g, device, OPTIONS[option])
    except InfeasibleError as e:   # refused, naming the op and what it needs
        assert "memory" in str(e) or "schedule" in str(e), str(e)
        return
    assert plan.allocation.kind == "arena"
    report = validate(g, plan)
    assert report.valid, report.violations[:3]
    align = device.alignment_bytes
    assert all(o % align == 0 for o in plan.allocation.offsets.values())
    ws = int(g.arrays.op_ws.max(initial=0))
    assert plan.allocation.arena_bytes + ws <= device.usable_bytes


def test_a_roomy_arena_plans_like_the_byte_budget() -> None:
    """With memory for everything nothing moves: the same makespan as the byte budget, offsets disjoint."""
    g = training_graph(8, seed=2)
    device = dataclasses.replace(g.device, memory_bytes=4 * unswapped_peak(g), reserve_bytes=0)
    order = program_order(g)
    planner = SwapPlanner(g, device)
    bytes_s = planner.makespan(order, byte_pool(g, device))
    plan = _arena_plan(g, device, PlannerOptions())
    assert plan.makespan_s == pytest.approx(bytes_s)
    assert plan.metrics["swap_ins"] == 0 and validate(g, plan).valid


def test_swapped_tensors_come_back_to_their_own_offset() -> None:
    """At a tight memory tensors leave and return; each keeps one offset, and the plan validates."""
    g = training_graph(10, seed=1)
    device = dataclasses.replace(g.device, memory_bytes=int(unswapped_peak(g) * 0.6), reserve_bytes=0)
    plan = _arena_plan(g, device, PlannerOptions())
    assert plan.metrics["swap_ins"] > 0
    swapped = {e.tensor for e in plan.events if e.kind == "swap_in"}
    assert swapped <= set(plan.allocation.offsets)
    assert validate(g, plan).valid


def test_arena_makespan_is_the_fitness() -> None:
    """`SwapPlanner.makespan` on an arena pool is the makespan of the plan it writes (no layout step after)."""
    g = training_graph(9, seed=4)
    device = dataclasses.replace(g.device, memory_bytes=int(unswapped_peak(g) * 0.7), reserve_bytes=0)
    order = program_order(g)
    planner = SwapPlanner(g, device)
    fit = planner.makespan(order, arena_pool(g, device))
    assert np.isfinite(fit)
    assert _arena_plan(g, device, PlannerOptions()).makespan_s == pytest.approx(fit)


@pytest.mark.torch
@pytest.mark.parametrize("fraction", [0.5, 0.7])
def test_arena_plans_run_in_the_executor_without_compaction(fraction: float) -> None:
    torch = pytest.importorskip("torch")
    import copy

    import torch.nn.functional as F

    from executor.api import Executor
    from executor.check import compare, train_eager
    from hybrid.capture.api import capture

    torch.manual_seed(0)
    layers = [torch.nn.Linear(13, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
              torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5)]
    base = torch.nn.Sequential(*layers)
    x = torch.randn(6, 13, generator=torch.Generator().manual_seed(1))
    y = torch.randint(5, (6,), generator=torch.Generator().manual_seed(2))
    g = capture(base, (x,), F.cross_entropy, y, optimizer="adam", lr=0.01, name="mlp")
    ref = train_eager(g, copy.deepcopy(base), (x,), y, F.cross_entropy, 2, 3)
    device = dataclasses.replace(g.device, memory_bytes=int(unswapped_peak(g) * fraction), reserve_bytes=0)
    ran = 0
    for opt in (PlannerOptions(), PlannerOptions(recompute_ratio=1e6),
                PlannerOptions(recompute_ratio=1e6, recompute_depth=24, long_chains=True)):
        try:
            plan = _arena_plan(g, device, opt)
        except InfeasibleError:
            continue
        assert validate(g, plan).valid
        ex = Executor(g, plan, "cpu", sanitize=True)
        ex.load(copy.deepcopy(base), (x,), y)
        ex.run(2, seed=3)
        assert ex.runtime.pool.stats.compactions == 0
        cmp = compare(ex.losses, ex.state(), ref)
        assert cmp.bitwise, (cmp.mismatched[:5], cmp.max_abs_diff)
        ran += 1
    assert ran >= 1


def test_optimize_writes_the_plan_it_scored_and_compares_laid_out_baselines() -> None:
    """The search's fitness is the arena walk: the written plan is the search's best as scored (no layout step,
    no fallback), and the baselines beside it are arenas too, with the byte budget as the relaxation row."""
    from ga import GAConfig
    from hybrid.pipeline import OptimizeOptions, run_optimize

    g = training_graph(10, seed=3)
    device = dataclasses.replace(g.device, memory_bytes=int(unswapped_peak(g) * 0.7), reserve_bytes=0)
    res = run_optimize(g, device, 120.0, OptimizeOptions(config=GAConfig(population=6, children=6, seed=2),
                                                         generations=2, workers=1, refine="none", baselines=True,
                                                         addresses=True))
    assert res.plan.allocation.kind == "arena" and res.layout is None
    assert res.plan.makespan_s == pytest.approx(res.search.best.makespan)
    assert validate(g, res.plan).valid
    rows = {r["plan"]: r for r in res.baselines.rows}
    assert "byte budget, fragmentation-free (relaxation)" in rows and "optimize" in rows
    assert rows["belady"]["makespan_s"] >= res.plan.makespan_s * (1 - 1e-9)   # its genes are among the seeds
    from hybrid.swap.baselines import run_baseline

    assert run_baseline(g, device, "belady", addresses=True).allocation.kind == "arena"


@given(seed=st.integers(0, 10_000))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_a_segment_search_from_any_hint_finds_the_segment_holding_the_byte(seed: int) -> None:
    """`find` walks from a tensor's hint (a segment since split, merged away or reused) either way; whatever the
    hint, it must land on the one segment holding the byte, as a search from the lowest address does."""
    from hybrid.swap import addresses as A

    rng = np.random.default_rng(seed)
    ar = A.scratch(40, 4)
    lo, hi, occ, cl, c2, nx = ar[:6]
    capacity = 1000
    A.reset(capacity, ar)

    def segments() -> list[int]:
        out, k = [], ar[8][0]
        while k >= 0:
            out.append(int(k))
            k = nx[k]
        return out

    for _ in range(200):
        live = segments()
        k = live[rng.integers(len(live))]
        if rng.random() < 0.6 and hi[k] - lo[k] > 1:
            A._split(k, int(rng.integers(lo[k] + 1, hi[k])), ar)
            occ[k] = int(rng.integers(-1, 5))     # the upper piece gets another occupant: merges stay possible
        elif nx[k] >= 0:
            j = nx[k]
            occ[j], cl[j], c2[j] = occ[k], cl[k], c2[k]
            A._merge_next(k, ar)
        live = segments()
        assert [int(lo[s]) for s in live][0] == 0 and int(hi[live[-1]]) == capacity
        for _ in range(5):
            a = int(rng.integers(0, capacity))
            hint = int(rng.integers(-1, len(lo)))
            k = A.find(a, hint, ar)
            assert k == A.find(a, -1, ar)
            assert lo[k] <= a < hi[k], (a, hint, int(lo[k]), int(hi[k]))
