"""An independent check of an offset assignment: one sweep over time, O(n log n) (plus list shifts).

Kept apart from the solvers (as MiniMalloc keeps its validator apart) so a solver bug cannot hide itself.
At each instant the live byte ranges are held sorted by start; a new range clashes only with its two
neighbours, because the ranges already held are disjoint while the assignment is valid.
"""
from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

import numpy as np

from hybrid.arena.problem import Problem


@dataclass(frozen=True)
class Check:
    """The verdict: `problems` lists the first few broken constraints (empty when valid)."""

    valid: bool
    arena_bytes: int
    problems: tuple[str, ...]


def check_offsets(problem: Problem, offsets: np.ndarray, capacity: int | None = None, limit: int = 10) -> Check:
    """Every offset aligned and >= 0, inside `capacity` (default the problem's), and no two buffers live at a
    common instant overlapping in bytes."""
    a = problem.arrays
    bufs = problem.buffers
    off = np.asarray(offsets, dtype=np.int64)
    cap = problem.capacity if capacity is None else capacity
    bad: list[str] = []
    if len(off) != len(bufs):
        return Check(False, 0, (f"{len(off)} offsets for {len(bufs)} buffers",))
    top = off + a.size
    arena = int(top.max()) if len(top) else 0
    for b in np.flatnonzero((off < 0) | (off % a.align != 0))[:limit].tolist():
        bad.append(f"buffer {bufs[b].id!r}: offset {int(off[b])} is negative or not a multiple of "
                   f"{int(a.align[b])}")
    if cap is not None:
        for b in np.flatnonzero(top > cap)[:limit].tolist():
            bad.append(f"buffer {bufs[b].id!r}: [{int(off[b])}, {int(top[b])}) exceeds the capacity {cap}")
    keep = a.size[a.seg_buf] > 0
    sb = a.seg_buf[keep]
    t = np.concatenate([a.seg_lo[keep], a.seg_hi[keep]])
    kind = np.concatenate([np.ones(len(sb), np.int8), np.zeros(len(sb), np.int8)])   # ends first at a tie
    who = np.concatenate([sb, sb])
    order = np.lexsort((kind, t))
    live: list[tuple[int, int]] = []      # (start byte, buffer), sorted
    offl = off.tolist()
    topl = top.tolist()
    for k, b in zip(kind[order].tolist(), who[order].tolist()):
        key = (offl[b], b)
        if k == 0:
            p = bisect_left(live, key)
            if p < len(live) and live[p] == key:
                live.pop(p)
            continue
        p = bisect_left(live, key)
        for q in (p - 1, p):
            if 0 <= q < len(live) and len(bad) < limit:
                u = live[q][1]
                if offl[u] < topl[b] and offl[b] < topl[u]:
                    bad.append(f"buffers {bufs[b].id!r} at [{offl[b]}, {topl[b]}) and {bufs[u].id!r} at "
                               f"[{offl[u]}, {topl[u]}) are live at the same time and overlap")
        insort(live, key)
    return Check(not bad, arena, tuple(bad[:limit]))
