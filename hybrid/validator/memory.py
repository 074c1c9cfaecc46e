"""Rule 5: device memory at every instant, and the pool shape the plan's allocation promises.

The project's reading (docs/formats.md): the memory a plan may fill is the
device's `memory_bytes` less its `reserve_bytes`; every device copy occupies
its bytes rounded up to the device's `alignment_bytes`, size-class objects
likewise, and arena offsets are multiples of the alignment. The executor
places tensors by the same rule, so a plan that passes runs.

One sorted sweep over +/- points serves every kind of allocation. At one
instant (within eps) releases count before allocations (half-open intervals);
an interval no longer than eps is counted at its instant, so a zero-time op's
outputs and workspace still need room, and it is released there in the order
the events run: after the allocations of events that run before its release,
before those of events that run after it, as the executor hands memory back.
A chain of zero-time ops at one instant (empty_like -> bernoulli_ -> div_)
thus needs what the executor needs at each step, not all of it at once.
Events less than eps apart but not at one instant are swept by time; the
run-order replay (`sequence.py`) checks what the executor holds there.
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass

import numpy as np

from hybrid.plan import ArenaAllocation, SizeClassAllocation
from hybrid.plan.metrics import sweep_points
from hybrid.units import format_bytes, format_bytes_apart, round_up
from hybrid.validator.context import COMPUTE, Context, fmt_t
from hybrid.validator.lifetimes import Copies, read_at_release
from hybrid.validator.report import Found

MAX_EPISODES = 100


@dataclass
class Sweep:
    """Points in sweep order. `src` is the event that allocates (NO_EVENT: resident at 0)."""

    key: np.ndarray      # float64
    tie: np.ndarray      # order within an instant (`sweep_points`)
    delta: np.ndarray    # int64 bytes (or +1/-1 objects)
    item: np.ndarray     # copy id, or -1 - compute event for workspace
    src: np.ndarray      # event index of the allocation behind the point


def _points(starts: np.ndarray, ends: np.ndarray, size: np.ndarray, item: np.ndarray, src: np.ndarray,
            eps: float, held: np.ndarray | None = None, alloc_pos: np.ndarray | None = None,
            release_pos: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """The sweep's points (`hybrid.plan.metrics.sweep_points`, shared with every plan's peak_bytes) with their
    bytes, item and source event."""
    key, tie, which, sign = sweep_points(starts, ends, eps, held, alloc_pos, release_pos)
    return key, tie, sign * np.asarray(size, dtype=np.int64)[which], item[which], src[which]


def _sorted(parts: list[tuple[np.ndarray, ...]]) -> Sweep:
    key, tie, delta, item, src = (np.concatenate([p[j] for p in parts]) for j in range(5))
    order = np.lexsort((tie, key))
    return Sweep(key[order], tie[order], delta[order], item[order], src[order])


@dataclass
class CopyTimes:
    """Per copy, what places it in the sweep besides its interval: the run positions of the events that make
    and release it (`Context.run_pos`; -1 resident at the start, inf never released) and `read_at_release`.
    Read once per validation, shared by the byte count, the size-class counts and the arena check."""

    alloc: np.ndarray
    release: np.ndarray
    alloc_pos: np.ndarray
    release_pos: np.ndarray
    held: np.ndarray
    maker: np.ndarray

    @classmethod
    def of(cls, ctx: Context, c: Copies) -> "CopyTimes":
        maker = np.asarray(c.maker, dtype=np.int64)
        releaser = np.asarray(c.releaser, dtype=np.int64)
        a_pos = np.full(len(c), -1.0)
        r_pos = np.full(len(c), np.inf)
        made, released = maker >= 0, releaser >= 0
        a_pos[made] = ctx.run_pos[maker[made]]
        r_pos[released] = ctx.run_pos[releaser[released]]
        return cls(np.asarray(c.alloc, dtype=np.float64), np.asarray(c.release, dtype=np.float64), a_pos, r_pos,
                   np.asarray(read_at_release(ctx, c), dtype=np.float64), maker)


def _copy_points(ctx: Context, times: CopyTimes, keep: np.ndarray | None, size: np.ndarray
                 ) -> tuple[np.ndarray, ...]:
    """The sweep's points of the copies where `keep` (all if None), each of `size` (per kept copy): released
    in the order events run, a copy whose last reader takes no time held while it allocates."""
    ids = np.arange(len(times.alloc), dtype=np.int64) if keep is None else np.flatnonzero(keep).astype(np.int64)
    return _points(times.alloc[ids], times.release[ids], size, ids, times.maker[ids], ctx.eps, times.held[ids],
                   times.alloc_pos[ids], times.release_pos[ids])


def _level(ctx: Context, c: Copies, align: int | None = None, times: CopyTimes | None = None
           ) -> tuple[Sweep, np.ndarray, np.ndarray, np.ndarray]:
    """The sweep over every device copy (at the alignment, default the device's) and every compute's workspace:
    (sweep, level in use after each point, the workspace share of it, the compute events). The points' order
    does not depend on `align`."""
    eps = ctx.eps
    align = ctx.plan.device.alignment_bytes if align is None else align
    nbytes = round_up(np.asarray(ctx.t_bytes, dtype=np.int64), align)
    ct = np.asarray(c.tensor, dtype=np.int64)
    copy_parts = _copy_points(ctx, times if times is not None else CopyTimes.of(ctx, c), None,
                              nbytes[ct] if len(ct) else np.zeros(0, np.int64))
    comp = np.array([i for i in range(ctx.n) if ctx.kind[i] == COMPUTE], dtype=np.int64)
    ws_all = np.asarray(ctx.impl_ws, dtype=np.int64)
    comp_ws = comp[ws_all[comp] > 0] if len(comp) else comp
    st = np.asarray(ctx.start, dtype=np.float64)
    en = np.asarray(ctx.end, dtype=np.float64)
    ws_pos = ctx.run_pos[comp_ws]
    ws_parts = _points(st[comp_ws], en[comp_ws], ws_all[comp_ws], -1 - comp_ws, comp_ws, eps, None, ws_pos, ws_pos)
    sw = _sorted([copy_parts, ws_parts])
    return sw, np.cumsum(sw.delta), np.cumsum(np.where(sw.item < 0, sw.delta, 0)), comp


def levels_over_time(ctx: Context, c: Copies) -> tuple[np.ndarray, np.ndarray]:
    """Device bytes in use as rule 5 counts them, as a step function (times, bytes) from 0: at each instant its
    highest level (what the instant needs, a copy that lives no time included), then the level it leaves
    when lower. Its maximum is the validator's peak."""
    sw, level, _, _ = _level(ctx, c)
    if not len(level):
        return np.zeros(1), np.zeros(1, np.int64)
    key = sw.key
    last = np.r_[key[1:] != key[:-1], True]
    first = np.r_[True, key[1:] != key[:-1]]
    top = np.maximum.reduceat(level, np.flatnonzero(first))
    end = level[last]
    t = np.repeat(key[last], 2)
    b = np.stack([top, end], axis=1).ravel()
    keep = np.ones(len(b), bool)
    keep[1::2] = top != end
    t, b = t[keep], b[keep]
    if t[0] > 0:
        t, b = np.r_[0.0, t], np.r_[0, b]
    return t.astype(np.float64), b.astype(np.int64)


def check_memory(ctx: Context, c: Copies) -> tuple[int, list[Found]]:
    """Returns (peak bytes incl. workspace, findings)."""
    align = ctx.plan.device.alignment_bytes
    times = CopyTimes.of(ctx, c)
    sw, level, ws_level, comp = _level(ctx, c, times=times)
    peak = int(level.max()) if len(level) else 0
    peak = max(peak, 0)
    out: list[Found] = []
    mem = ctx.memory
    episodes = _episodes(level > mem)
    raw = _level(ctx, c, 1, times)[1] if episodes and ctx.plan.device.default_alignment_hint() else None
    for k in episodes:
        need, usable = _apart(ctx, int(level[k]))
        hint = ""
        if raw is not None:   # the whole overflow (to its end) only the rounding to an alignment the device did not state
            over = level[k:] > mem
            stop = k + (int(np.argmin(over)) if not over.all() else len(over))
            if raw[k:stop].max() <= mem:
                hint = (f"; unrounded the copies take {format_bytes(int(raw[k] - ws_level[k]))} and fit: "
                        + ctx.plan.device.default_alignment_hint())
        copies = "tensor copies" + (f" (each rounded up to {align} bytes)" if align > 1 else "")
        ws = int(ws_level[k])
        parts = (f"{need} in {copies}" if not ws else
                 f"{format_bytes(int(level[k]) - ws)} in {copies} + {format_bytes(ws)} workspace = {need}")
        out.append(ctx.found(5, int(sw.src[k]), (
            f"device memory overflows at {fmt_t(float(sw.key[k]))}: {parts} > {usable}{hint}")))
    alloc = ctx.plan.allocation
    if isinstance(alloc, SizeClassAllocation):
        _check_classes(ctx, c, times, alloc, comp, out)
    elif isinstance(alloc, ArenaAllocation):
        _check_arena(ctx, c, times, alloc, comp, out)
    return peak, out


def _episodes(over: np.ndarray) -> list[int]:
    """First index of each run of True, at most MAX_EPISODES."""
    if not len(over):
        return []
    starts = np.flatnonzero(over & ~np.concatenate([[False], over[:-1]]))
    return [int(k) for k in starts[:MAX_EPISODES]]


def _first_maker(c: Copies, t: int) -> int:
    return c.maker[c.by_tensor[t][0]]


def _tensors_on_device(c: Copies) -> list[int]:
    return [t for t, ids in enumerate(c.by_tensor) if ids]


def _apart(ctx: Context, need: int) -> tuple[str, str]:
    """`need` bytes and the memory a plan may fill, as messages state them: two sizes that differ never read
    the same (`format_bytes_apart`)."""
    dev = ctx.plan.device
    need_t, mem_t = format_bytes_apart(need, ctx.memory)
    if dev.reserve_bytes:
        total, kept = format_bytes_apart(dev.memory_bytes, dev.reserve_bytes)   # 1 GiB + 3.67 MiB less 1 GiB
        return need_t, f"{mem_t} usable ({total} of device memory less the {kept} reserve)"
    return need_t, f"{mem_t} of device memory"


def _check_pool(ctx: Context, pool: int, what: str, comp: np.ndarray, out: list[Found],
                raw: int | None = None) -> None:
    """The pool plus the running op's workspace fits the device memory. `raw`: the pool with its objects not
    rounded up to the alignment, when they are."""
    mem = ctx.memory

    def hint(total: int) -> str:
        if raw is None or raw == pool:
            return ""
        why = ctx.plan.device.default_alignment_hint(total - pool + raw <= mem)
        return f"; unrounded it is {format_bytes(raw)}: {why}" if why else ""

    if pool > mem:
        pool_t, usable = _apart(ctx, pool)
        out.append(ctx.found(5, None, f"{what} is {pool_t}, more than {usable}{hint(pool)}"))
        return
    for i in comp:
        ws = ctx.impl_ws[int(i)]
        if pool + ws > mem:
            total_t, usable = _apart(ctx, pool + ws)
            out.append(ctx.found(5, int(i), f"workspace {format_bytes(ws)} + {what} {format_bytes(pool)} = "
                                            f"{total_t} > {usable}{hint(pool + ws)}"))


def class_pool_bytes(alloc: SizeClassAllocation, align: int) -> int:
    """A size-class pool's bytes as rule 5 counts them: each object rounded up to the alignment."""
    return sum(round_up(cl.bytes, align) * cl.count for cl in alloc.classes)


def _check_classes(ctx: Context, c: Copies, times: CopyTimes, alloc: SizeClassAllocation, comp: np.ndarray,
                   out: list[Found]) -> None:
    classes = alloc.classes
    for k, cl in enumerate(classes):
        if cl.bytes < 0 or cl.count < 0:
            out.append(ctx.found(5, None, f"allocation.classes[{k}] has negative bytes or count"))
    align = ctx.plan.device.alignment_bytes
    pool = class_pool_bytes(alloc, align)
    rounded = f", objects rounded up to {align} bytes" if align > 1 else ""
    _check_pool(ctx, pool, f"the size-class pool (sum of bytes x count{rounded})",
                comp, out, raw=sum(cl.bytes * cl.count for cl in classes))
    ids = ctx.graph.tensors
    cls_of_tensor = np.full(len(ids), -1, dtype=np.int64)
    for t in _tensors_on_device(c):
        name = ids[t].id
        k = alloc.class_of.get(name)
        ev = _first_maker(c, t)
        if k is None:
            out.append(ctx.found(5, ev, f"tensor {name!r} gets a device copy but allocation.class_of has no "
                                        "entry for it"))
        elif not 0 <= k < len(classes):
            out.append(ctx.found(5, ev, f"allocation.class_of[{name!r}] = {k}, but there are {len(classes)} "
                                        "classes"))
        elif classes[k].bytes < ctx.t_bytes[t]:
            out.append(ctx.found(5, ev, f"tensor {name!r} ({ctx.t_bytes[t]} bytes) does not fit an object of "
                                        f"its class {k} ({classes[k].bytes} bytes)"))
        else:
            cls_of_tensor[t] = k
    ct = np.asarray(c.tensor, dtype=np.int64)
    if not len(ct):
        return
    cls = cls_of_tensor[ct]
    keep = cls >= 0
    sw = _sorted([_copy_points(ctx, times, keep, np.ones(int(keep.sum()), dtype=np.int64))])
    if not len(sw.key):
        return
    pcls = cls[sw.item]
    grp = np.argsort(pcls, kind="stable")          # sweep order kept within each class
    g_cls = pcls[grp]
    g_delta = sw.delta[grp]
    level = np.cumsum(g_delta)
    first = np.flatnonzero(np.concatenate([[True], g_cls[1:] != g_cls[:-1]]))
    base = np.repeat(level[first] - g_delta[first], np.diff(np.append(first, len(g_cls))))
    level = level - base
    counts = np.array([cl.count for cl in classes], dtype=np.int64)
    over = level > counts[g_cls]
    # episodes must not run across class boundaries
    over_prev = np.concatenate([[False], over[:-1]])
    over_prev[first] = False
    for j in np.flatnonzero(over & ~over_prev)[:MAX_EPISODES]:
        k = int(grp[j])
        cl = int(g_cls[j])
        t = c.tensor[int(sw.item[k])]
        out.append(ctx.found(5, int(sw.src[k]), (
            f"class {cl} ({classes[cl].bytes}-byte objects, count {classes[cl].count}) would need "
            f"{int(level[j])} objects at {fmt_t(float(sw.key[k]))} when {ctx.tid(t)} is allocated")))


def _check_arena(ctx: Context, c: Copies, times: CopyTimes, alloc: ArenaAllocation, comp: np.ndarray,
                 out: list[Found]) -> None:
    """docs/formats.md's arena reading: each copy at an aligned offset takes [offset, offset + bytes) inside
    [0, arena_bytes) (the padding rounding up the topmost copy may lie past arena_bytes, as the executor places
    it), and copies live together do not overlap there: with aligned offsets, neither do their rounded extents."""
    n_bytes = alloc.arena_bytes
    _check_pool(ctx, n_bytes, "arena_bytes", comp, out)
    ids = ctx.graph.tensors
    offset: dict[int, int] = {}
    for t in _tensors_on_device(c):
        name = ids[t].id
        off = alloc.offsets.get(name)
        ev = _first_maker(c, t)
        if off is None:
            out.append(ctx.found(5, ev, f"tensor {name!r} gets a device copy but allocation.offsets has no "
                                        "entry for it"))
        elif off < 0 or off + ctx.t_bytes[t] > n_bytes:
            out.append(ctx.found(5, ev, f"tensor {name!r} at offset {off} ({ctx.t_bytes[t]} bytes) does not lie "
                                        f"inside the arena [0, {n_bytes})"))
        elif off % ctx.plan.device.alignment_bytes:
            hint = ctx.plan.device.default_alignment_hint()
            out.append(ctx.found(5, ev, f"tensor {name!r} at offset {off} is not a multiple of the device's "
                                        f"alignment ({ctx.plan.device.alignment_bytes} bytes)"
                                        + (f": {hint}" if hint else "")))
        else:
            offset[t] = off
    ct = np.asarray(c.tensor, dtype=np.int64)
    if not len(ct):
        return
    keep = np.array([t in offset and ctx.t_bytes[t] > 0 for t in c.tensor], dtype=bool)
    if not keep.any():
        return
    sw = _sorted([_copy_points(ctx, times, keep, np.ones(int(keep.sum()), np.int64))])
    lo: list[int] = []    # active byte ranges sorted by start; disjoint while the plan is valid
    hi: list[int] = []
    who: list[int] = []
    found = 0
    for delta, cid in zip(sw.delta.tolist(), sw.item.tolist()):
        t = c.tensor[cid]
        a = offset[t]
        b = a + ctx.t_bytes[t]
        if delta > 0:
            p = bisect_right(lo, a)
            clash = None
            if p > 0 and hi[p - 1] > a:
                clash = who[p - 1]
            elif p < len(lo) and lo[p] < b:
                clash = who[p]
            if clash is not None and found < MAX_EPISODES:
                found += 1
                u = c.tensor[clash]
                out.append(ctx.found(5, c.maker[cid], (
                    f"{ctx.tid(t)} at bytes [{a}, {b}) overlaps {ctx.tid(u)} at [{offset[u]}, "
                    f"{offset[u] + ctx.t_bytes[u]}), whose copy is live then")))
            lo.insert(p, a)
            hi.insert(p, b)
            who.insert(p, cid)
        else:
            p = bisect_left(lo, a)
            while p < len(lo) and who[p] != cid:
                p += 1
            if p < len(lo):
                del lo[p], hi[p], who[p]
