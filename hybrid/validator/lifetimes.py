"""Rule 2: each tensor's device copies, as disjoint intervals [allocation, release).

Allocations are the starts of (device) compute events producing the tensor (recomputes
included) and of its swap_ins, plus time 0 for `resident_at_start`; releases
are swap_out ends and frees. Per tensor the two sorted lists must alternate.
Near-ties (within eps) resolve in the order that keeps them alternating: while a
copy is live a release goes first, otherwise an allocation does, so a plan is
never rejected for a rounding difference smaller than the tolerance.
"""
from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass, field

from hybrid.validator.context import COMPUTE, FREE, NO_EVENT, SWAP_IN, SWAP_OUT, Context, fmt_t
from hybrid.validator.report import Found

INF = math.inf


@dataclass
class Copies:
    """All device copies, flat. A copy live at the end has release = inf and releaser = -1."""

    tensor: list[int] = field(default_factory=list)
    alloc: list[float] = field(default_factory=list)
    complete: list[float] = field(default_factory=list)
    release: list[float] = field(default_factory=list)
    maker: list[int] = field(default_factory=list)       # event index, NO_EVENT for resident_at_start
    releaser: list[int] = field(default_factory=list)    # event index, -1 while live at the end
    by_tensor: list[list[int]] = field(default_factory=list)      # copy ids in time order
    alloc_times: list[list[float]] = field(default_factory=list)  # parallel to by_tensor, for bisect
    made_by: dict[tuple[int, int], int] = field(default_factory=dict)  # (event, tensor) -> copy
    released_by: dict[int, int] = field(default_factory=dict)          # event -> copy

    def __len__(self) -> int:
        return len(self.tensor)

    def live_at_end(self, t: int) -> int | None:
        ids = self.by_tensor[t]
        return ids[-1] if ids and self.release[ids[-1]] == INF else None


def build_copies(ctx: Context) -> tuple[Copies, list[Found]]:
    out: list[Found] = []
    n_t = len(ctx.t_bytes)
    allocs: list[list[tuple[float, int, float]]] = [[] for _ in range(n_t)]   # (time, event, complete)
    releases: list[list[tuple[float, int]]] = [[] for _ in range(n_t)]       # (time, event)
    for t in ctx.resident:
        allocs[t].append((0.0, NO_EVENT, 0.0))
    for i in range(ctx.n):
        k = ctx.kind[i]
        if k == COMPUTE:
            if ctx.on_cpu[i]:
                continue  # its outputs live in host memory (HostCopies)
            for t in ctx.op_outputs[ctx.op[i]]:
                allocs[t].append((ctx.start[i], i, ctx.end[i]))
        elif k == SWAP_IN:
            allocs[ctx.tensor[i]].append((ctx.start[i], i, ctx.end[i]))
        elif k == SWAP_OUT:
            releases[ctx.tensor[i]].append((ctx.end[i], i))
        else:  # FREE
            releases[ctx.tensor[i]].append((ctx.start[i], i))
    c = Copies(by_tensor=[[] for _ in range(n_t)], alloc_times=[[] for _ in range(n_t)])
    eps = ctx.eps
    for t in range(n_t):
        A, R = allocs[t], releases[t]
        if not A and not R:
            continue
        A.sort()
        R.sort()
        ia = ir = 0
        live = -1   # copy id currently live
        while ia < len(A) or ir < len(R):
            if live >= 0:
                take_release = ir < len(R) and (ia >= len(A) or R[ir][0] <= A[ia][0] + eps)
            else:
                take_release = ir < len(R) and not (ia < len(A) and A[ia][0] <= R[ir][0] + eps)
            if take_release:
                rt, ev = R[ir]
                ir += 1
                if live < 0:
                    out.append(ctx.found(2, ev, _no_copy(ctx, c, t, ev)))
                    continue
                c.release[live] = rt
                c.releaser[live] = ev
                c.released_by[ev] = live
                live = -1
            else:
                at, ev, done = A[ia]
                ia += 1
                if live >= 0:
                    out.append(ctx.found(2, ev, f"allocates {ctx.tid(t)} while its device copy from "
                                                f"{ctx.describe(c.maker[live])} is still live; a tensor has at "
                                                "most one device copy (release it first)"))
                    c.release[live] = at  # keep the copies disjoint so later rules stay meaningful
                cid = len(c.tensor)
                c.tensor.append(t)
                c.alloc.append(at)
                c.complete.append(done)
                c.release.append(INF)
                c.maker.append(ev)
                c.releaser.append(-1)
                c.by_tensor[t].append(cid)
                c.alloc_times[t].append(at)
                if ev != NO_EVENT:
                    c.made_by[(ev, t)] = cid
                live = cid
    return c, out


def read_at_release(ctx: Context, c: Copies) -> list[float]:
    """Per copy: the start of a device compute that reads it and ends within eps of its release, where that start
    is within eps of the release too (a compute shorter than eps: an allocation-only op such as `empty_like`),
    else NaN.

    Such a compute has its inputs and its outputs on the device at once, as the executor holds them, although
    the release at its end less eps sorts before the allocations at its start. Rule 5 (bytes, size-class
    counts and arena overlaps) therefore releases such a copy at that start, after the allocations of the
    events that run before its release; the layout (`hybrid.arena.lifetimes.sweep_ranks`) after all of them."""
    held = [math.nan] * len(c)
    eps = ctx.eps
    for i in range(ctx.n):
        if ctx.kind[i] != COMPUTE or ctx.on_cpu[i] or ctx.end[i] - ctx.start[i] > eps:
            continue
        at = ctx.start[i]
        for t in ctx.op_inputs[ctx.op[i]]:
            ids = c.by_tensor[t]
            k = bisect_right(c.alloc_times[t], at + eps) - 1
            if k < 0:
                continue
            rel = c.release[ids[k]]
            if rel - eps <= at and rel <= ctx.end[i] + eps and not at <= held[ids[k]]:
                held[ids[k]] = at
    return held


def _no_copy(ctx: Context, c: Copies, t: int, ev: int) -> str:
    what = "frees" if ctx.kind[ev] == FREE else "swaps out"
    ids = c.by_tensor[t]
    if not ids:
        return f"{what} {ctx.tid(t)}, which never has a device copy before"
    last = ids[-1]
    rel = c.releaser[last]
    by = ctx.describe(rel) if rel >= 0 else "?"
    return f"{what} {ctx.tid(t)}, which has no device copy then (its last copy was released at " \
           f"{fmt_t(c.release[last])} by {by})"
