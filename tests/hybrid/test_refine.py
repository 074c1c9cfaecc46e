"""CP-SAT refinement: the sequence walk, the search loop, and its guarantees (never worse, always valid)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid.swap.pools import byte_pool, class_pool, per_size_pool
from hybrid.graph.liveness import distinct_sizes
from hybrid.device import Device
from hybrid.errors import HybridError, InfeasibleError
from hybrid.swap.to_plan import to_plan
from hybrid.refine import RefineOptions, refine
from hybrid.refine import lns as lns_mod
from hybrid.refine.model import WindowSolution
from hybrid.plan.events import FREE, SWAP_OUT
from hybrid.swap.rewalk import Problem, SequenceError, rebuild, to_augmented
from hybrid.graph.order import program_order, random_order
from hybrid.simulator import simulate
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.planner import SwapPlanner
from hybrid.graph.synthetic import random_dag, training_graph
from hybrid.validator import check

from .paper_examples import figure1

FAST = RefineOptions(window_time_s=0.1, max_windows=5)


def _plan(g, pool_kind: str = "bytes", order=None, options: PlannerOptions = PlannerOptions()):
    order = program_order(g) if order is None else order
    pool = byte_pool(g, g.device) if pool_kind == "bytes" else per_size_pool(g, order, g.device)
    aug = SwapPlanner(g, g.device).plan(order, pool, options)
    return aug, to_plan(aug, {"name": "belady", "options": options.describe()})


def _tight_graph(seed: int = 1, layers: int = 12, memory_mib: int = 24):
    return training_graph(layers, seed=seed, device=Device("s", memory_mib << 20, 12e9, 12e9, 0.0), workspace_prob=0.3)


# ---- the sequence walk ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("pool_kind", ["bytes", "classes"])
def test_rebuild_of_a_planner_sequence_is_valid_and_matches_the_simulator(pool_kind):
    g = _tight_graph()
    aug, _ = _plan(g, pool_kind)
    prob = Problem.from_augmented(aug)
    tl = rebuild(prob, aug.kind, aug.ref)
    assert (tl.kind == aug.kind).all()  # the planner's release kinds are re-derived exactly
    s, e = simulate(tl.kind, tl.end - tl.start, tl.dep_ptr, tl.dep_idx)
    assert np.allclose(s, tl.start) and np.allclose(e, tl.end)
    check(g, to_plan(to_augmented(prob, tl), {"name": "rebuilt"}))


def test_rebuild_rejects_a_sequence_that_reads_an_evicted_tensor():
    g = _tight_graph()
    aug, _ = _plan(g)
    prob = Problem.from_augmented(aug)
    loads = np.nonzero(aug.kind == 1)[0]
    keep = np.ones(aug.n_nodes, bool)
    keep[loads[0]] = False  # drop one swap_in: its consumer reads a tensor that is not on the device
    with pytest.raises(SequenceError):
        rebuild(prob, aug.kind[keep], aug.ref[keep])


def test_release_kind_follows_host_validity():
    """A release is a free when the host copy is valid or the tensor is dead, else a swap_out."""
    g = _tight_graph()
    aug, _ = _plan(g)
    prob = Problem.from_augmented(aug)
    kind = aug.kind.copy()
    rel = (kind == SWAP_OUT) | (kind == FREE)
    kind[rel] = SWAP_OUT  # the walk must decide every release itself
    tl = rebuild(prob, kind, aug.ref)
    assert (tl.kind == aug.kind).all()


# ---- the search ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pool_kind", ["bytes", "classes"])
def test_refine_never_worse_and_valid(pool_kind):
    g = _tight_graph(layers=16, memory_mib=32)
    _, plan = _plan(g, pool_kind)
    res = refine(g, plan, time_limit_s=60, seed=1, options=RefineOptions(window_time_s=0.2, max_windows=8))
    assert res.plan.makespan_s <= plan.makespan_s
    check(g, res.plan)
    assert res.improved == (res.plan.makespan_s < plan.makespan_s)
    assert res.history[0].makespan == plan.makespan_s
    assert all(b.makespan <= a.makespan for a, b in zip(res.history, res.history[1:]))
    # what stays fixed: the schedule, the allocation, the residents at the start
    assert res.plan.schedule == plan.schedule
    assert res.plan.allocation == plan.allocation
    assert res.plan.resident_at_start == plan.resident_at_start


def test_refine_improves_a_stalling_plan():
    g = _tight_graph()
    _, plan = _plan(g, "bytes")
    res = refine(g, plan, time_limit_s=60, seed=1, options=RefineOptions(window_time_s=0.2, max_windows=6))
    # here re-walking and re-ordering the copy streams gain nothing: the windows do
    assert res.rebind_makespan == res.reorder_makespan == plan.makespan_s
    assert res.improved and res.accepted > 0 and res.plan.makespan_s < 0.995 * plan.makespan_s
    assert res.plan.planner["name"] == "belady+cpsat"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), kind=st.sampled_from(["dag", "training"]), pool_kind=st.sampled_from(["bytes", "classes"]))
def test_property_refined_plans_validate_and_are_never_worse(seed, kind, pool_kind):
    rng = np.random.default_rng(seed)
    if kind == "dag":
        g = random_dag(int(rng.integers(15, 40)), seed=seed, device=Device("s", int(rng.integers(400, 900)) << 10,
                                                                            1e9, 1e9, float(rng.choice([0.0, 1e-5]))))
    else:
        g = training_graph(int(rng.integers(6, 16)), seed=seed, workspace_prob=0.3, share_params=int(rng.integers(0, 3)),
                           device=Device("s", int(rng.integers(20, 48)) << 20, 12e9, 12e9, 0.0))
    order = random_order(g, rng)
    try:
        _, plan = _plan(g, pool_kind, order)
    except InfeasibleError:
        return
    res = refine(g, plan, time_limit_s=30, seed=seed, options=RefineOptions(window_time_s=0.1, max_windows=5))
    assert res.plan.makespan_s <= plan.makespan_s
    check(g, res.plan)


def test_same_seed_same_plan():
    g = _tight_graph(seed=2)
    _, plan = _plan(g, "bytes")
    a = refine(g, plan, time_limit_s=120, seed=7, options=FAST)
    b = refine(g, plan, time_limit_s=120, seed=7, options=FAST)
    assert a.plan.to_json()["events"] == b.plan.to_json()["events"]
    assert a.windows == b.windows == FAST.max_windows or a.stop == b.stop == "converged"


def test_infeasible_or_timed_out_windows_leave_the_plan_unchanged(monkeypatch):
    g = _tight_graph()
    _, plan = _plan(g, "classes")  # the planner's own timing is already best-fit here: nothing to gain by re-walking
    for status in ("infeasible", "unknown"):
        monkeypatch.setattr(lns_mod, "solve_window",
                            lambda spec, opt, status=status: WindowSolution(status, [], [], -1, -1, False))
        res = refine(g, plan, time_limit_s=30, seed=1, options=FAST)
        assert res.windows > 0 and res.infeasible == res.windows and res.accepted == 0
        if res.reorder_makespan >= plan.makespan_s:  # neither re-walking nor re-ordering gained here
            assert not res.improved and res.plan is plan


def test_a_tiny_window_budget_never_worsens():
    g = _tight_graph()
    _, plan = _plan(g, "bytes")
    res = refine(g, plan, time_limit_s=30, seed=1, options=RefineOptions(window_time_s=1e-4, max_windows=6))
    assert res.plan.makespan_s <= plan.makespan_s
    check(g, res.plan)


def test_zero_time_returns_the_input():
    g = _tight_graph()
    _, plan = _plan(g, "bytes")
    res = refine(g, plan, time_limit_s=0.0, seed=1)
    assert res.plan.makespan_s <= plan.makespan_s


def test_refine_a_plan_read_from_a_file(tmp_path):
    from hybrid.swap.baselines import run_baseline
    from hybrid.plan import Plan

    g = _tight_graph()
    p = tmp_path / "b.json"
    run_baseline(g, g.device, "belady").save(p)
    plan = Plan.load(p)
    res = refine(g, plan, time_limit_s=30, seed=1, options=FAST)
    assert res.plan.makespan_s <= plan.makespan_s
    check(g, res.plan)


def test_refine_rejects_a_plan_for_another_graph():
    g = _tight_graph()
    _, plan = _plan(g)
    other = _tight_graph(seed=5, layers=8)
    with pytest.raises(HybridError, match="plan is for graph"):
        refine(other, plan, time_limit_s=5, seed=1)


# ---- the paper's Figure 1 ----------------------------------------------------------------------------------------

def _concat_end(plan) -> float:
    return next(e.end_s for e in plan.events if e.kind == "compute" and e.op == "Concat")


@pytest.mark.parametrize("order,pool_name,units", [("right", "fine", 6.0), ("right", "coarse", 7.0), ("left", "fine", 7.0)])
def test_figure1_refinement_keeps_the_papers_result(order, pool_name, units):
    g = figure1(order)
    ts = distinct_sizes(g)
    pools = {"fine": class_pool(g, np.array([0, 1, 2]), np.array([6, 8, 1]), ts, align=g.device.alignment_bytes),
             "coarse": class_pool(g, np.array([0, 1, 1]), np.array([6, 5]), ts, align=g.device.alignment_bytes)}
    opt = PlannerOptions(passes=1)
    aug = SwapPlanner(g, g.device).plan(program_order(g), pools[pool_name], opt)
    plan = to_plan(aug, {"name": "belady", "options": opt.describe()})
    assert _concat_end(plan) == units
    res = refine(g, plan, time_limit_s=30, seed=1, options=RefineOptions(window_time_s=0.5, max_windows=30))
    check(g, res.plan)
    assert res.plan.makespan_s <= plan.makespan_s
    assert _concat_end(res.plan) <= units


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), pool_kind=st.sampled_from(["bytes", "classes"]))
def test_schedule_bound_is_a_lower_bound(seed, pool_kind):
    """Below every plan's makespan, the refined plan's included (it keeps schedule, memory and residents)."""
    from hybrid.bounds import schedule_bound

    rng = np.random.default_rng(seed)
    g = training_graph(int(rng.integers(4, 14)), seed=seed, workspace_prob=0.3, share_params=int(rng.integers(0, 3)),
                       device=Device("s", int(rng.integers(14, 48)) << 20, 12e9, float(rng.choice([6e9, 12e9])), 0.0))
    try:
        _, plan = _plan(g, pool_kind, random_order(g, rng))
    except InfeasibleError:
        return
    b = schedule_bound(g, plan)
    assert plan.metrics["ideal_s"] * (1 - 1e-9) <= b <= plan.makespan_s * (1 + 1e-9)
    res = refine(g, plan, time_limit_s=30, seed=seed, options=RefineOptions(window_time_s=0.2, max_windows=4))
    assert b <= res.plan.makespan_s * (1 + 1e-9)


def test_schedule_bound_waits_for_the_value_and_for_the_next_use():
    """a (4 MiB) is live across op1, which needs 9 MiB of 10: 3 MiB of a must be out during op1, copied no
    sooner than op0 wrote it and back before op2 reads it: (1 + 2) + max(1 + 1, 1 + 2) ms at 1.5 MiB/ms."""
    from hybrid.bounds import schedule_bound
    from hybrid.graph import Graph, Op, Tensor

    mib, ms = 1 << 20, 1e-3
    bw = 3 * mib / (2 * ms)
    g = Graph("bound", [Tensor("a", 4 * mib), Tensor("b", mib), Tensor("c", mib)],
              [Op("op0", "forward", (), ("a",), ms), Op("op1", "forward", (), ("b",), ms, workspace_bytes=8 * mib),
               Op("op2", "forward", ("a", "b"), ("c",), ms)], Device("d", 10 * mib, bw, bw, 0.0))
    _, plan = _plan(g, "bytes")
    assert schedule_bound(g, plan) == pytest.approx(6 * ms)
    assert plan.makespan_s >= 6 * ms  # the whole of a goes out: 1 + 8/3 + 1 + 8/3 ms
    roomy = replace(plan, device=replace(plan.device, memory_bytes=1 << 40))
    assert schedule_bound(g, roomy) == pytest.approx(3 * ms)  # nothing has to move: compute alone


def test_patience_stops_a_search_that_finds_nothing():
    g = _tight_graph()
    _, plan = _plan(g, "classes")
    res = refine(g, plan, time_limit_s=60, seed=1, options=RefineOptions(window_time_s=0.1, patience_s=0.0))
    assert res.stop == "stalled" and res.windows == 0  # stalled before the first window
    assert res.plan.makespan_s <= plan.makespan_s
    check(g, res.plan)
