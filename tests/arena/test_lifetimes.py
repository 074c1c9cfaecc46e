"""hybrid.arena.lifetimes: a plan's copies become buffers whose overlaps are exactly rule 5's.

Regression (issue 19, WResNet-152-10): lifetimes used to be ranked by clustering event times closer than the
plan's tolerance, which chains: a run of ops each shorter than the tolerance put a release and an allocation
more than the tolerance apart on one rank, so a tensor still live (its release is at end - eps in the
validator) and a new copy could be given the same bytes. There an 8-byte `num_batches_tracked` copy released
3.2e-8 s after a swap-in started (eps 3.1e-8) shared bytes with it."""
from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.arena.heuristics import HEURISTICS
from hybrid.arena.layout import fit_offsets
from hybrid.arena.lifetimes import arena_plan, plan_buffers, sweep_ranks
from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph, Op, Tensor
from hybrid.graph.info import unswapped_peak
from hybrid.pipeline.baselines import lay_out_baseline
from hybrid.plan import ArenaAllocation
from hybrid.swap.baselines import run_baseline
from hybrid.validator import validate
from tests.hybrid.validator_plans import DEVICE, random_graph, serial_plan


def _chain_graph(d: float) -> Graph:
    """x is made by a long op and read by op1 and op3; op1..op3 are each d long (d < eps, 3d > eps), so x's
    release (after op3) is more than eps after z's allocation (op2's start), but every step between is not."""
    tensors = [Tensor("x", 1000), Tensor("y", 1000), Tensor("z", 1000), Tensor("w", 1000)]
    ops = [Op("op0", "x", (), ("x",), 1.0, 0), Op("op1", "x", ("x",), ("y",), d, 0),
           Op("op2", "x", ("y",), ("z",), d, 0), Op("op3", "x", ("x", "z"), ("w",), d, 0)]
    return Graph("chain", tensors, ops)


def test_a_release_more_than_eps_after_an_allocation_overlaps_it_even_when_steps_between_are_shorter():
    g = _chain_graph(0.6e-9)
    plan = serial_plan(g, replace(DEVICE, memory_bytes=3000))
    assert 0.5e-9 < 0.6e-9 < plan.tolerance_s < 1.8e-9
    pb = plan_buffers(g, plan)
    seg = {name: b.segments() for name, b in zip(pb.tensors, pb.problem.buffers)}

    def live_together(a: str, b: str) -> bool:
        return any(s0 < e1 and s1 < e0 for s0, e0 in seg[a] for s1, e1 in seg[b])

    assert live_together("x", "z")          # op3 reads both: the old ranks had x end where z starts
    assert not live_together("y", "w")      # y is freed (after op2) before op3 makes w
    # every heuristic's layout of it validates (each fits 3 x 1000 bytes)
    for name, h in HEURISTICS.items():
        sol = h(pb.problem)
        if sol.arena_bytes <= (pb.problem.capacity or 0):
            report = validate(g, arena_plan(plan, pb, sol))
            assert report.valid, (name, report.violations[:1])


def test_sweep_ranks_follow_the_validators_order_or_a_stricter_one():
    eps = 1.0
    alloc = np.array([0.0, 5.0, 5.0, 7.0, 9.0, 4.0])
    release = np.array([6.5, 8.5, 5.5, np.inf, 10.5, 6.0])
    a, r = sweep_ranks(alloc, release, eps)
    assert a[1] == a[2]                        # one key, one rank: allocations at one instant overlap
    assert r[5] <= a[1]                        # copy 5 is released at key 5.0, before the allocations there
    assert a[1] < r[0]                         # copy 0 is released at key 5.5, after them: it overlaps both
    assert a[2] < r[2] < r[0]                  # copy 2 is no longer than eps: counted at 5.0 after every allocation
    assert a[3] < r[1] <= a[4]                 # copy 1 is released at key 7.5: it overlaps copy 3 (made at 7.0)
    assert r[3] > max(r[[0, 1, 2, 4, 5]].max(), a.max())   # copy 3 is live at the end


# Copies shorter than the tolerance (an 8-byte swap_in takes 0.67 ns at 12 GB/s without latency; eps is 1 ns)
# read by a zero-time op a moment later. Rule 5's sweep on times releases such a copy at its own instant; the
# run-order replay (`hybrid.validator.sequence`) holds it until its free has run, after that op allocates. The
# layout kept only the first reading, so `fit_offsets` could give the op's outputs the copy's bytes and then
# refuse its own layout ("failed validation ... please report"): the odswap baseline laid out on seed 292
# (`hybrid baseline --kind odswap` exited 2, `run_optimize(baselines=True)` raised), naive with addresses on
# seed 893.
AUDIT_CASES = [
    (292, 13, Device("d", 16505, 12e9, 6e9, 0.0, alignment_bytes=512), "odswap", False, False),
    (893, 8, Device("d", 12311, 12e9, 12e9, 0.0, alignment_bytes=512, reserve_bytes=1119), "naive", True, True),
]


@pytest.mark.parametrize("seed, n_ops, dev, kind, recompute, addresses", AUDIT_CASES)
def test_layouts_of_plans_with_copies_shorter_than_eps_validate(seed: int, n_ops: int, dev: Device, kind: str,
                                                               recompute: bool, addresses: bool) -> None:
    g0 = random_graph(random.Random(seed), n_ops)
    g = Graph(g0.name, g0.tensors, g0.ops, dev)
    plan = run_baseline(g, dev, kind, recompute=recompute, addresses=addresses)
    assert validate(g, plan).valid and plan.allocation.kind == "unconstrained"
    laid = lay_out_baseline(g, dev, kind, plan, time_limit_s=5.0, recompute=recompute).plan
    assert laid.allocation.kind == "arena"
    assert validate(g, laid).valid
    fitted = fit_offsets(g, plan, 5.0)      # raised HybridError on seed 893
    assert fitted is None or validate(g, fitted).valid
    # with room to spare every copy gets bytes, and the layout still validates
    roomy = replace(plan, device=replace(dev, memory_bytes=1 << 30))
    fitted = fit_offsets(g, roomy, 5.0)
    assert fitted is not None and validate(g, fitted).valid


def test_a_copy_the_run_order_holds_past_its_instant_keeps_its_bytes() -> None:
    """Seed 893's naive plan: t6_0 lives 0.67 ns (< eps) until op7, a zero-time op that reads it, runs; its free
    runs after op7, so op7's output t7_0 may not take its bytes although the sweep on times released t6_0
    before op7's instant."""
    _, _, dev, kind, recompute, addresses = AUDIT_CASES[1]
    g0 = random_graph(random.Random(893), 8)
    g = Graph(g0.name, g0.tensors, g0.ops, dev)
    plan = run_baseline(g, dev, kind, recompute=recompute, addresses=addresses)
    pb = plan_buffers(g, plan)
    seg = {name: b.segments() for name, b in zip(pb.tensors, pb.problem.buffers)}
    assert any(s0 < e1 and s1 < e0 for s0, e0 in seg["t6_0"] for s1, e1 in seg["t7_0"])


def _tiny_graph(rng: random.Random) -> Graph:
    """validator_plans.random_graph with most ops taking no time and most tensors 8 bytes: copies shorter than
    eps at 12 GB/s without latency, read by zero-time ops at nearby instants."""
    g = random_graph(rng, rng.randint(3, 13))
    tensors = [replace(t, bytes=rng.choice([0, 8, 8, 8, 512, 3000])) for t in g.tensors]
    ops = [replace(op, time_s=0.0, impls=tuple(replace(i, time_s=0.0) for i in op.impls)) if rng.random() < 0.6
           else op for op in g.ops]
    return Graph(g.name, tensors, ops)


def _time_disjoint_pairs_share_bytes(g: Graph, plan) -> list[tuple[str, str, str]]:  # noqa: ANN001 - a Plan
    """Every two copies the layout's buffers keep apart in time, given the same bytes (all others apart): the
    pairs whose plan the validator refuses, with its first violation."""
    pb = plan_buffers(g, plan)
    bufs = [b for b in pb.problem.buffers if b.size > 0]
    seg = {b.id: b.segments() for b in bufs}
    offsets, top = {}, 0
    for b in pb.problem.buffers:
        offsets[b.id] = top
        top += b.size
    bad = []
    for x, a in enumerate(bufs):
        for b in bufs[x + 1:]:
            if any(s0 < e1 and s1 < e0 for s0, e0 in seg[a.id] for s1, e1 in seg[b.id]):
                continue
            shared = {**offsets, a.id: top, b.id: top}
            report = validate(g, replace(plan, allocation=ArenaAllocation(top + max(a.size, b.size), shared)))
            if not report.valid:
                bad.append((a.id, b.id, report.violations[0].message))
    return bad


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(["belady", "odswap", "naive", "vdnn"]),
       fraction=st.sampled_from([0.4, 0.6, 1.0]), recompute=st.booleans(), addresses=st.booleans())
def test_copies_apart_in_the_layouts_time_may_share_bytes_with_zero_time_events(
        seed: int, kind: str, fraction: float, recompute: bool, addresses: bool) -> None:
    """The layout's lifetimes overlap wherever either of the validator's readings (the sweep on times, the
    run-order replay) has two copies live together: any two it keeps apart in time can share bytes."""
    g0 = _tiny_graph(random.Random(seed))
    dev = Device("d", max(int(unswapped_peak(g0, 512) * fraction), 2048), 12e9, 12e9, 0.0, alignment_bytes=512)
    g = Graph(g0.name, g0.tensors, g0.ops, dev)
    try:
        plan = run_baseline(g, dev, kind, recompute=recompute, addresses=addresses)
    except HybridError:
        return
    plan = replace(plan, device=replace(dev, memory_bytes=1 << 30))    # room for the pairs' layouts
    if plan.allocation.kind != "unconstrained" or not validate(g, plan).valid:
        return
    assert not _time_disjoint_pairs_share_bytes(g, plan)
    fitted = fit_offsets(g, plan, 5.0)
    assert fitted is not None and validate(g, fitted).valid
