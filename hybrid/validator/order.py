"""Rule 1: the schedule, the compute events that follow it, durations, and streams that never overlap.

Durations are checked here too: an event whose length is not its implementation's
time (or bytes / bandwidth + latency) misplaces everything after it on its stream.
"""
from __future__ import annotations

import math

from hybrid.graph.arrays import dependency_edges
from hybrid.graph.rerun import own_updates_exempt, why_not_rerunnable
from hybrid.validator.context import COMPUTE, FREE, SWAP_IN, SWAP_OUT, Context, fmt_t
from hybrid.validator.report import Found


def overlaps(s1: float, e1: float, s2: float, e2: float, eps: float) -> bool:
    """Half-open intervals overlap by more than eps, or one (possibly empty) lies strictly inside the other.

    The second clause catches a zero-length event in the middle of another one
    on the same stream, which the half-open reading alone would let through.
    """
    if min(e1, e2) - max(s1, s2) > eps:
        return True
    return (s2 + eps < s1 and e1 < e2 - eps) or (s1 + eps < s2 and e2 < e1 - eps)


def compute_order(ctx: Context) -> list[int]:
    """Compute-stream events in time order (start, end, file index): a total order consistent with time."""
    idx = [i for i in range(ctx.n) if ctx.kind[i] == COMPUTE]
    idx.sort(key=lambda i: (ctx.start[i], ctx.end[i], i))
    return idx


def first_runs(ctx: Context) -> list[list[int]]:
    """Per op, its non-recompute compute events in time order."""
    runs: list[list[int]] = [[] for _ in ctx.graph.ops]
    for i in range(ctx.n):
        if ctx.kind[i] == COMPUTE and not ctx.recompute[i]:
            runs[ctx.op[i]].append(i)
    for r in runs:
        if len(r) > 1:
            r.sort(key=lambda i: (ctx.start[i], i))
    return runs


def check_order(ctx: Context) -> list[Found]:
    out: list[Found] = []
    _check_times(ctx, out)
    if not ctx.times_finite:
        return out
    runs = first_runs(ctx)
    sched_ok = _check_schedule(ctx, out)
    _check_runs(ctx, runs, sched_ok, out)
    _check_recomputes(ctx, runs, out)
    _check_streams(ctx, out)
    return out


def _check_times(ctx: Context, out: list[Found]) -> None:
    eps = ctx.eps
    for i in range(ctx.n):
        s, e, k = ctx.start[i], ctx.end[i], ctx.kind[i]
        if not (math.isfinite(s) and math.isfinite(e)):
            out.append(ctx.found(1, i, "times must be finite numbers"))
            continue
        if s < -eps:
            out.append(ctx.found(1, i, "starts before time 0"))
        if k == FREE:
            continue
        want = ctx.impl_time[i] if k == COMPUTE else ctx.transfer_time(k, ctx.tensor[i])
        if abs((e - s) - want) > eps:
            if k == COMPUTE and ctx.on_cpu[i]:
                why = f"the op's cpu_time_s is {fmt_t(want)}"
            elif k == COMPUTE:
                why = f"impl {ctx.impl_name[i]!r} takes {fmt_t(want)}"
            else:
                link = "h2d" if k == SWAP_IN else "d2h"
                why = (f"{ctx.t_bytes[ctx.tensor[i]]} bytes over the plan device's {link} link "
                       f"plus latency take {fmt_t(want)}")
            out.append(ctx.found(1, i, f"lasts {fmt_t(e - s)}, but {why}"))


def _check_schedule(ctx: Context, out: list[Found]) -> bool:
    """Every op once, in a topological order of the data + update-order edges. True when it is a permutation."""
    g = ctx.graph
    pos: dict[int, int] = {}
    ok = True
    for k, oid in enumerate(ctx.plan.schedule):
        o = g.op_index[oid]
        if o in pos:
            out.append(ctx.found(1, None, f"schedule lists op {oid!r} twice (positions {pos[o]} and {k})"))
            ok = False
        else:
            pos[o] = k
    for o, spec in enumerate(g.ops):
        if o not in pos:
            out.append(ctx.found(1, None, f"schedule omits op {spec.id!r}"))
            ok = False
    reported: set[tuple[int, int]] = set()
    for a, b, why in dependency_edges(g):
        if a in pos and b in pos and pos[a] > pos[b] and (a, b) not in reported:
            reported.add((a, b))
            reason = ("it reads an output of" if why == "data"
                      else "program order puts it after (in-place update of a shared tensor)")
            out.append(ctx.found(1, None, f"schedule runs op {g.ops[b].id!r} (position {pos[b]}) before op "
                                          f"{g.ops[a].id!r} (position {pos[a]}), but {reason} {g.ops[a].id!r}"))
    return ok


def _check_runs(ctx: Context, runs: list[list[int]], sched_ok: bool, out: list[Found]) -> None:
    """Exactly one non-recompute compute event per op, started in schedule order."""
    g = ctx.graph
    for o, r in enumerate(runs):
        if not r:
            out.append(ctx.found(1, None, f"op {g.ops[o].id!r} has no compute event"))
        for i in r[1:]:
            out.append(ctx.found(1, i, f"a second compute event for op {g.ops[o].id!r} (the first is "
                                       f"events[{r[0]}]); mark reruns with \"recompute\": true"))
    if not sched_ok:
        return
    eps = ctx.eps
    prev = -1
    for k, oid in enumerate(ctx.plan.schedule):
        r = runs[g.op_index[oid]]
        if not r:
            continue
        i = r[0]
        if prev >= 0 and ctx.start[i] < ctx.start[prev] - eps:
            out.append(ctx.found(1, i, f"starts before op {g.ops[ctx.op[prev]].id!r} ({ctx.describe(prev)}), "
                                       f"which the schedule puts first (schedule[{k}] is {oid!r})"))
        prev = i


def _check_recomputes(ctx: Context, runs: list[list[int]], out: list[Found]) -> None:
    """A recompute reruns an op that has run and may rerun (hybrid.graph.rerun), on inputs no update has
    changed since (except the op's own updates, which a rerun redoes on copies or replays)."""
    order = compute_order(ctx)
    rank = {i: k for k, i in enumerate(order)}
    updaters: dict[int, list[int]] = {}   # tensor -> ranks of compute events that update it
    for i in order:
        for t in ctx.updates_of(i):
            updaters.setdefault(t, []).append(rank[i])
    for i in order:
        if not ctx.recompute[i]:
            continue
        o = ctx.op[i]
        op = ctx.graph.ops[o]
        why = why_not_rerunnable(ctx.graph, op)
        if why:
            out.append(ctx.found(1, i, f"recomputes op {ctx.oid(o)}, which cannot rerun: it {why}"))
            continue
        own = set(ctx.op_updates[o]) if own_updates_exempt(ctx.graph, op) else set()
        r = runs[o]
        if not r:
            continue  # reported as a missing compute event
        if rank[r[0]] > rank[i]:
            out.append(ctx.found(1, i, f"recomputes op {ctx.oid(o)} before its first run ({ctx.describe(r[0])})"))
            continue
        lo, hi = rank[r[0]], rank[i]
        for t in ctx.op_inputs[o]:
            if t in own:  # redone on copies, or the generator state is replayed (hybrid.graph.rerun)
                continue
            for u in updaters.get(t, ()):
                if lo < u < hi:
                    out.append(ctx.found(1, i, f"input {ctx.tid(t)} was updated in place by "
                                               f"{ctx.describe(order[u])} after the op's first run, so the "
                                               "recompute would not reproduce its outputs"))
                    break


def _check_streams(ctx: Context, out: list[Found]) -> None:
    eps = ctx.eps
    for code, cpu, stream in ((COMPUTE, False, "compute"), (COMPUTE, True, "cpu"), (SWAP_IN, False, "h2d"),
                              (SWAP_OUT, False, "d2h")):
        idx = [i for i in range(ctx.n) if ctx.kind[i] == code and ctx.on_cpu[i] == cpu]
        idx.sort(key=lambda i: (ctx.start[i], ctx.end[i], i))
        cur = -1
        for i in idx:
            if cur >= 0 and overlaps(ctx.start[i], ctx.end[i], ctx.start[cur], ctx.end[cur], eps):
                out.append(ctx.found(1, i, f"overlaps {ctx.describe(cur)} on the {stream} stream"))
            if cur < 0 or ctx.end[i] > ctx.end[cur]:
                cur = i
