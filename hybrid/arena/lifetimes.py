"""Buffers from a plan's events, and the plan with exact `arena` offsets (FORMATS rule 5).

Lifetimes are read exactly as the validator reads them (`hybrid.validator.lifetimes.build_copies`): a
device copy lives from its allocation (its producing compute, recomputes included, or its swap-in) to its
release (its swap-out's end or its free). FORMATS gives one offset per tensor, so a tensor with several
copies is one buffer with one segment per copy (as `executor/placement.py` places it). Times are floats;
they are ranked with the plan's tolerance, a release and an allocation at one instant not overlapping
(the validator's order), a copy shorter than the tolerance overlapping what starts with it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from hybrid.arena import exact
from hybrid.arena.heuristics import Solution
from hybrid.arena.problem import Buffer, Problem
from hybrid.errors import HybridError, InfeasibleError
from hybrid.graph import Graph
from hybrid.plan import ArenaAllocation, Plan
from hybrid.units import format_bytes, round_up


@dataclass(frozen=True)
class PlanBuffers:
    """The plan's device copies as a problem (one buffer per tensor with a copy) and each buffer's tensor."""

    problem: Problem
    tensors: list[str]


def plan_buffers(graph: Graph, plan: Plan) -> PlanBuffers:
    """Buffers of the plan's device copies; capacity = usable memory less the largest workspace (rule 5)."""
    from hybrid.validator.context import COMPUTE, build_context
    from hybrid.validator.lifetimes import build_copies

    ctx, found = build_context(graph, plan)
    if ctx is None or not ctx.times_finite:
        why = found[0].violation.message if found else "event times are not finite"
        raise HybridError(f"cannot read the plan's lifetimes: {why} (run hybrid validate)")
    c, bad = build_copies(ctx)
    if bad:
        raise HybridError(f"cannot read the plan's lifetimes: rule 2: {bad[0].violation.message} (run hybrid validate)")
    align = plan.device.alignment_bytes
    alloc = np.asarray(c.alloc, np.float64)
    release = np.asarray(c.release, np.float64)
    finite = np.isfinite(release)
    times = np.unique(np.concatenate([alloc, release[finite]]))
    # cluster times closer than the tolerance into one rank
    rank_of = np.zeros(len(times), np.int64)
    if len(times):
        rank_of[1:] = np.cumsum(np.diff(times) > ctx.eps)
    end_rank = 2 * (int(rank_of[-1]) + 2) if len(times) else 2
    a_rank = 2 * rank_of[np.searchsorted(times, alloc)]
    r_rank = np.full(len(alloc), end_rank, np.int64)
    r_rank[finite] = 2 * rank_of[np.searchsorted(times, release[finite])]
    short = finite & (release - alloc <= ctx.eps)
    r_rank[short] = a_rank[short] + 1
    r_rank = np.maximum(r_rank, a_rank + 1)
    bufs: list[Buffer] = []
    names: list[str] = []
    for t, ids in enumerate(c.by_tensor):
        if not ids:
            continue
        segs = sorted((int(a_rank[i]), int(r_rank[i])) for i in ids)
        lo, hi = segs[0][0], max(e for _, e in segs)
        gaps: list[tuple[int, int]] = []
        reach = segs[0][1]
        for s, e in segs[1:]:
            if s > reach:
                gaps.append((reach, s))
            reach = max(reach, e)
        name = graph.tensors[t].id
        bufs.append(Buffer(name, lo, hi, int(round_up(int(ctx.t_bytes[t]), align)), align, tuple(gaps)))
        names.append(name)
    max_ws = max((ctx.impl_ws[i] for i in range(ctx.n) if ctx.kind[i] == COMPUTE), default=0)
    cap = (ctx.memory - int(max_ws)) // align * align
    return PlanBuffers(Problem(bufs, cap), names)


def with_arena(graph: Graph, plan: Plan, time_limit_s: float = 10.0, first_fit: bool = False) -> tuple[Plan, Solution]:
    """The plan with `allocation.kind = "arena"`: the smallest arena the exact search finds in the time
    limit (the best heuristic at worst), or with `first_fit` the first layout within the memory.
    InfeasibleError when even that exceeds the memory."""
    pb = plan_buffers(graph, plan)
    p = pb.problem
    sol = exact.solve(p, time_limit_s, first_fit=first_fit)
    cap = p.capacity if p.capacity is not None else 0
    if sol.arena_bytes > cap:
        raise InfeasibleError(
            f"the plan's device copies need an arena of {format_bytes(sol.arena_bytes)} once laid out (live bytes "
            f"peak at {format_bytes(p.peak_live())}), more than the {format_bytes(cap)} left beside the largest "
            "workspace; re-plan with a little less memory or a size_classes pool")
    offsets = {name: int(o) for name, o in zip(pb.tensors, sol.offsets.tolist())}
    alloc = ArenaAllocation(int(sol.arena_bytes), offsets)
    planner = dict(plan.planner) if isinstance(plan.planner, dict) else {}
    planner["arena"] = {"solver": sol.solver, "proven_optimal": bool(sol.proven_optimal),
                        "peak_live_bytes": int(p.peak_live())}
    return dataclasses.replace(plan, allocation=alloc, planner=planner), sol


def schedule_buffers(graph: Graph, align: int | None = None) -> Problem:
    """Static planning of a graph run without swapping (MegEngine's setting): one buffer per tensor, live
    from its producer's position in the program order to just after its last reader (persistent tensors
    throughout), sizes rounded up to `align` (default the graph device's alignment, else 512). In-place
    overwrite and view forwarding are not applied: the graph format does not say which ops may write into
    an input or return a view of it."""
    from hybrid.graph.liveness import unswapped_lifetimes
    from hybrid.graph.order import program_order

    al = align if align is not None else (graph.device.alignment_bytes if graph.device is not None else 512)
    first, last = unswapped_lifetimes(graph, program_order(graph))
    return Problem([Buffer(t.id, int(first[k]), int(last[k]) + 1, int(round_up(t.bytes, al)), al)
                    for k, t in enumerate(graph.tensors)])
