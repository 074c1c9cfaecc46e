"""Offline offsets: where in one device buffer each device copy goes, when lifetimes are known in advance.

An `unconstrained` plan only promises that live bytes fit the device memory
(docs/formats.md); an online allocator could still fragment and need more.
But the executor knows every device copy's lifetime before the first
iteration (the compiled program), so it places them once, offline, in one
buffer: greedy by size (largest first, each at the lowest offset free over
its whole lifetime), the heuristic static memory planners use. The runtime
then never allocates: a copy always lands at its offset. If the layout
needs more than the plan's memory (fragmentation the byte count does not
see), the executor refuses up front, naming the shortfall, instead of
exceeding the memory at run time.

`arena_allocation` does the same per tensor (one offset for all of a tensor's
copies), which turns a plan into an `arena` plan (`hybrid.plan.ArenaAllocation`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybrid.units import format_bytes, round_up
from hybrid.errors import InfeasibleError
from hybrid.plan import ArenaAllocation

from executor.program import Program


@dataclass(frozen=True)
class OffsetLayout:
    offsets: dict[int, int]     # item key -> byte offset
    arena_bytes: int            # bytes the layout spans
    align: int


def _lay_out(items: list[tuple[int, int, list[tuple[int, int]]]], align: int) -> OffsetLayout:
    """items: (key, bytes, [(start, end), ...] lifetime segments, half-open)."""
    order = sorted(items, key=lambda it: (-round_up(it[1], align), -sum(e - s for s, e in it[2]), it[0]))
    seg_s: list[int] = []
    seg_e: list[int] = []
    seg_lo: list[int] = []
    seg_hi: list[int] = []
    offsets: dict[int, int] = {}
    top = 0
    s_arr = np.empty(0, np.int64)
    e_arr = np.empty(0, np.int64)
    lo_arr = np.empty(0, np.int64)
    hi_arr = np.empty(0, np.int64)
    dirty = False
    for key, nbytes, segs in order:
        size = round_up(nbytes, align)
        if size == 0:
            offsets[key] = 0
            continue
        if dirty:
            s_arr, e_arr = np.array(seg_s, np.int64), np.array(seg_e, np.int64)
            lo_arr, hi_arr = np.array(seg_lo, np.int64), np.array(seg_hi, np.int64)
            dirty = False
        mask = np.zeros(len(s_arr), np.bool_)
        for s, e in segs:
            mask |= (s_arr < e) & (s < e_arr)
        busy = sorted(zip(lo_arr[mask].tolist(), hi_arr[mask].tolist()))
        off = 0
        for lo, hi in busy:
            if lo - off >= size:
                break
            off = max(off, hi)
        offsets[key] = off
        top = max(top, off + size)
        for s, e in segs:
            seg_s.append(s)
            seg_e.append(e)
            seg_lo.append(off)
            seg_hi.append(off + size)
        dirty = True
    return OffsetLayout(offsets, top, align)


def _interval_items(program: Program) -> list[tuple[int, int, list[tuple[int, int]]]]:
    items = []
    for k, iv in enumerate(program.intervals):
        if iv.end == -2:            # continues another interval across the iteration boundary
            continue
        segs = [(iv.start, iv.end)]
        if iv.wrap_start >= 0:
            segs.append((iv.wrap_start, program.total_seq + 1))
        items.append((k, iv.nbytes, segs))
    return items


def interval_offsets(program: Program, capacity: int, align: int) -> OffsetLayout:
    """An offset (a multiple of `align`, the device's alignment) for every device copy of the program within
    `capacity` bytes, or InfeasibleError."""
    items = _interval_items(program)
    best = _lay_out(items, align)
    if best.arena_bytes > capacity:
        live_peak = _live_peak(items)
        raise InfeasibleError(
            f"the plan's device copies need {format_bytes(best.arena_bytes)} contiguous once laid out (live bytes peak "
            f"at {format_bytes(live_peak)}), more than the {format_bytes(capacity)} of its memory; fragmentation the byte budget does "
            "not see. Plan with a size_classes pool, or with a little less memory")
    offsets = dict(best.offsets)
    for k, iv in enumerate(program.intervals):
        if iv.end == -2:
            offsets[k] = offsets[program.resident_interval[iv.tensor]]
    return OffsetLayout(offsets, best.arena_bytes, best.align)


def _live_peak(items: list[tuple[int, int, list[tuple[int, int]]]]) -> int:
    ev: list[tuple[int, int]] = []
    for _, nbytes, segs in items:
        for s, e in segs:
            ev.append((s, nbytes))
            ev.append((e, -nbytes))
    ev.sort(key=lambda x: (x[0], x[1]))
    cur = peak = 0
    for _, d in ev:
        cur += d
        peak = max(peak, cur)
    return peak


def arena_allocation(program: Program, capacity: int | None = None, align: int | None = None) -> ArenaAllocation:
    """One offset per tensor (all its device copies at one place): the plan's `arena` allocation.

    Offsets are multiples of `align` (default: the plan device's alignment). Raises InfeasibleError if that
    needs more than `capacity` (default: the plan's usable memory).
    """
    align = program.plan.device.alignment_bytes if align is None else align
    segs: dict[int, list[tuple[int, int]]] = {}
    nbytes: dict[int, int] = {}
    for iv in program.intervals:
        if iv.end == -2:
            continue
        segs.setdefault(iv.tensor, []).append((iv.start, iv.end))
        if iv.wrap_start >= 0:
            segs[iv.tensor].append((iv.wrap_start, program.total_seq + 1))
        nbytes[iv.tensor] = iv.nbytes
    p = _lay_out([(t, nbytes[t], s) for t, s in segs.items()], align)
    cap = program.plan.device.usable_bytes if capacity is None else capacity
    if p.arena_bytes > cap:
        raise InfeasibleError(f"an arena with one offset per tensor needs {format_bytes(p.arena_bytes)}, more than "
                              f"{format_bytes(cap)}")
    g = program.graph
    return ArenaAllocation(p.arena_bytes, {g.tensors[t].id: off for t, off in sorted(p.offsets.items())})
