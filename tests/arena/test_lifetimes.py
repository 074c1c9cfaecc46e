"""hybrid.arena.lifetimes: a plan's copies become buffers whose overlaps are exactly rule 5's.

Regression (issue 19, WResNet-152-10): lifetimes used to be ranked by clustering event times closer than the
plan's tolerance, which chains: a run of ops each shorter than the tolerance put a release and an allocation
more than the tolerance apart on one rank, so a tensor still live (its release is at end - eps in the
validator) and a new copy could be given the same bytes. There an 8-byte `num_batches_tracked` copy released
3.2e-8 s after a swap-in started (eps 3.1e-8) shared bytes with it."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from hybrid.arena.heuristics import HEURISTICS
from hybrid.arena.lifetimes import arena_plan, plan_buffers, sweep_ranks
from hybrid.graph import Graph, Op, Tensor
from hybrid.validator import validate
from tests.hybrid.validator_plans import DEVICE, serial_plan


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
