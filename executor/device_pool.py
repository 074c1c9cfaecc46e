"""Device memory that follows the plan's allocation; nothing is allocated while iterations run.

- `size_classes`: every class's objects are preallocated (one buffer, objects
  at fixed offsets); a tensor takes a free object of its class and gives it
  back when the plan releases it. Free objects are reused oldest-released
  first, which waits least.
- `arena`: one buffer of `arena_bytes`; each tensor sits at the plan's offset.
- `unconstrained`: one buffer; each device copy sits at the offset that the
  offline layout (`executor.offsets`) gave it before the first iteration.

Memory that was released is written again only after everything that last
touched it has finished: each free object (or arena byte range) keeps the
frontier of its release, and the runtime makes the allocating stream wait on
it. The pool buffers live as long as the executor, so no device memory goes
back to PyTorch's caching allocator while a stream may still use it (and
`record_stream` is never needed).

Accounting: `live_bytes` is the bytes of device copies the pool holds right
now, `peak_live_bytes` its maximum, `reserved_bytes` the buffer size; the
runtime asserts they never exceed the plan's device memory. The plan and its
validator count each copy rounded up to the device's alignment (rule 5,
hybrid.graph.liveness.occupied_bytes): `live_occupied_bytes` and
`peak_occupied_bytes` count them so, the figure to set beside the plan's.
"""
from __future__ import annotations

import bisect
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from hybrid.capture.encoding import dtype_from_name
from hybrid.errors import HybridError, InfeasibleError
from hybrid.graph import Graph, Tensor
from hybrid.plan import SizeClassAllocation
from hybrid.units import format_bytes, round_up

from executor.program import NO_FRONTIER, Frontier, merge
from executor.streams import Backend

_ITEMSIZE: dict[torch.dtype, int] = {}


def itemsize(dtype: torch.dtype) -> int:
    n = _ITEMSIZE.get(dtype)
    if n is None:
        n = _ITEMSIZE[dtype] = torch.empty((), dtype=dtype).element_size()
    return n


class ByteBuffer:
    """A uint8 buffer and its typed aliases (one per dtype), from which tensor views are cut."""

    def __init__(self, data: torch.Tensor) -> None:
        self.data = data
        self._flat: dict[torch.dtype, torch.Tensor] = {}

    def view(self, offset: int, t: Tensor) -> torch.Tensor:
        """Tensor `t` (recorded dtype, shape, strides) at byte `offset`."""
        meta = t.extra
        if "dtype" not in meta:
            raise HybridError(f"tensor {t.id!r} has no recorded dtype/shape; only graphs from hybrid capture can be "
                              "executed")
        dt = dtype_from_name(meta["dtype"])
        size = itemsize(dt)
        if offset % size:
            raise HybridError(f"tensor {t.id!r} ({meta['dtype']}) would start at byte {offset}, not a multiple of its "
                              f"element size {size}; the plan's arena offsets must be aligned")
        flat = self._flat.get(dt)
        if flat is None:
            n = self.data.numel() // size * size
            flat = self._flat[dt] = self.data[:n].view(dt)
        return torch.as_strided(flat, meta["shape"], meta["stride"], offset // size + int(meta.get("storage_offset", 0)))

    def raw(self, offset: int, nbytes: int) -> torch.Tensor:
        return self.data[offset:offset + nbytes]


@dataclass
class PoolStats:
    kind: str
    capacity_bytes: int          # the plan's device memory
    reserved_bytes: int          # the pool's buffer
    plan_pool_bytes: int         # what the plan's allocation itself accounts (classes' bytes x count, arena bytes)
    live_bytes: int = 0
    peak_live_bytes: int = 0
    allocations: int = 0         # per iteration
    compactions: int = 0         # per iteration (unconstrained plans given offsets online)
    moved_bytes: int = 0         # per iteration, by compactions
    offsets: str = ""            # unconstrained plans: "offline" or "online (best fit + compaction)"
    classes_peak: list[int] = field(default_factory=list)   # size classes: most objects of each class held at once
    alignment_bytes: int = 1     # the device's: each copy counted rounded up to it, as the plan counts it
    live_occupied_bytes: int = 0
    peak_occupied_bytes: int = 0     # the peak as the plan and its validator count it (rule 5)

    def to_json(self) -> dict:
        return {"kind": self.kind, "capacity_bytes": self.capacity_bytes, "reserved_bytes": self.reserved_bytes,
                "plan_pool_bytes": self.plan_pool_bytes, "peak_live_bytes": self.peak_live_bytes,
                "allocations_per_iteration": self.allocations, "compactions_per_iteration": self.compactions,
                "moved_bytes_per_iteration": self.moved_bytes, "offsets": self.offsets,
                "alignment_bytes": self.alignment_bytes, "peak_occupied_bytes": self.peak_occupied_bytes}


class DevicePool:
    """Common accounting; subclasses choose where a copy goes."""

    buffer: ByteBuffer
    stats: PoolStats

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.where: dict[int, int] = {}     # tensor -> byte offset of its current device copy

    def _take(self, tensor: int, interval: int) -> tuple[int, Frontier]: ...
    def _give(self, tensor: int, offset: int, frontier: Frontier) -> None: ...

    def alloc(self, tensor: int, interval: int) -> tuple[int, Frontier]:
        """Byte offset for the tensor's new device copy, and what must finish before it is written."""
        if tensor in self.where:
            raise HybridError(f"executor: tensor {self.graph.tensors[tensor].id!r} already has a device copy")
        off, fr = self._take(tensor, interval)
        self.where[tensor] = off
        s = self.stats
        s.live_bytes += self.graph.tensors[tensor].bytes
        s.live_occupied_bytes += round_up(self.graph.tensors[tensor].bytes, s.alignment_bytes)
        s.peak_occupied_bytes = max(s.peak_occupied_bytes, s.live_occupied_bytes)
        s.allocations += 1
        if s.live_bytes > s.peak_live_bytes:
            s.peak_live_bytes = s.live_bytes
            if s.peak_live_bytes > s.capacity_bytes:
                raise HybridError(f"executor: device copies hold {format_bytes(s.peak_live_bytes)}, more than the "
                                  f"plan's {format_bytes(s.capacity_bytes)}; the plan is not valid for this graph (run hybrid validate)")
        return off, fr

    def release(self, tensor: int, frontier: Frontier) -> int:
        off = self.where.pop(tensor)
        self._give(tensor, off, frontier)
        self.stats.live_bytes -= self.graph.tensors[tensor].bytes
        self.stats.live_occupied_bytes -= round_up(self.graph.tensors[tensor].bytes, self.stats.alignment_bytes)
        return off

    def view(self, tensor: int) -> torch.Tensor:
        return self.buffer.view(self.where[tensor], self.graph.tensors[tensor])

    def raw(self, tensor: int) -> torch.Tensor:
        return self.buffer.raw(self.where[tensor], self.graph.tensors[tensor].bytes)

    def forget_frontiers(self) -> None:
        """Between iterations everything has finished: free memory needs no more waiting."""

    def begin_iteration(self) -> None:
        self.stats.allocations = 0
        self.stats.compactions = 0
        self.stats.moved_bytes = 0
        self.forget_frontiers()


class SizeClassPool(DevicePool):
    def __init__(self, graph: Graph, alloc: SizeClassAllocation, capacity: int, backend: Backend,
                 align: int) -> None:
        super().__init__(graph)
        classes = alloc.classes
        plan_bytes = alloc.pool_bytes()
        strides = [round_up(c.bytes, align) for c in classes]
        total = alloc.pool_bytes(align)
        if total > capacity:
            raise InfeasibleError(f"the plan's size classes take {format_bytes(total)} with each object rounded up to "
                                  f"the device's {align}-byte alignment, more than the {format_bytes(capacity)} "
                                  "available to the pool; validate the plan (hybrid validate)")
        self.t_class = [-1] * len(graph.tensors)
        for tid, c in alloc.class_of.items():
            if tid in graph.tensor_index:
                self.t_class[graph.tensor_index[tid]] = int(c)
        self.free: list[deque[tuple[int, Frontier]]] = []
        top = 0
        for s, c in zip(strides, classes):
            self.free.append(deque((top + k * s, NO_FRONTIER) for k in range(c.count)))
            top += s * c.count
        self.class_bytes = [c.bytes for c in classes]
        self.live = [0] * len(classes)
        self.buffer = ByteBuffer(backend.empty_bytes(max(top, 16)))
        self.stats = PoolStats("size_classes", capacity, int(self.buffer.data.numel()), plan_bytes,
                               classes_peak=[0] * len(classes), alignment_bytes=align)

    def _take(self, tensor: int, interval: int) -> tuple[int, Frontier]:
        c = self.t_class[tensor]
        t = self.graph.tensors[tensor]
        if c < 0:
            raise HybridError(f"plan allocation has no size class for tensor {t.id!r}; validate the plan")
        if t.bytes > self.class_bytes[c]:
            raise HybridError(f"tensor {t.id!r} ({t.bytes} bytes) does not fit class {c} ({self.class_bytes[c]} bytes)")
        if not self.free[c]:
            raise HybridError(f"size class {c} ({self.class_bytes[c]} bytes) has no free object for tensor {t.id!r}: "
                              f"all {self.live[c]} are held; the plan is not valid for this graph (run hybrid validate)")
        off, fr = self.free[c].popleft()
        self.live[c] += 1
        if self.live[c] > self.stats.classes_peak[c]:
            self.stats.classes_peak[c] = self.live[c]
        return off, fr

    def _give(self, tensor: int, offset: int, frontier: Frontier) -> None:
        c = self.t_class[tensor]
        self.live[c] -= 1
        self.free[c].append((offset, frontier))

    def forget_frontiers(self) -> None:
        for q in self.free:
            for k in range(len(q)):
                q[k] = (q[k][0], NO_FRONTIER)


class ArenaPool(DevicePool):
    """One buffer; `offset_of(tensor, interval)` says where each copy goes (plan offsets or the offline layout)."""

    def __init__(self, graph: Graph, kind: str, arena_bytes: int, capacity: int,
                 offset_of: Callable[[int, int], int], backend: Backend, plan_pool_bytes: int | None = None,
                 align: int = 64) -> None:
        super().__init__(graph)
        self.align = align
        if arena_bytes > capacity:
            raise InfeasibleError(f"the arena takes {format_bytes(arena_bytes)}, more than the {format_bytes(capacity)} "
                                  "available")
        self.offset_of = offset_of
        self.buffer = ByteBuffer(backend.empty_bytes(max(arena_bytes, 16)))
        self.arena_bytes = arena_bytes
        # Live copies: disjoint [lo, hi) ranges sorted by lo.
        self.live_lo: list[int] = []
        self.live_hi: list[int] = []
        self.live_t: list[int] = []
        # Released memory: segments [seg_lo[i], seg_lo[i+1]) with the frontier of their last release.
        self.seg_lo: list[int] = [0]
        self.seg_fr: list[Frontier] = [NO_FRONTIER]
        self.stats = PoolStats(kind, capacity, int(self.buffer.data.numel()),
                               arena_bytes if plan_pool_bytes is None else plan_pool_bytes, alignment_bytes=align)

    def _choose(self, tensor: int, interval: int) -> int:
        return int(self.offset_of(tensor, interval))

    def _take(self, tensor: int, interval: int) -> tuple[int, Frontier]:
        t = self.graph.tensors[tensor]
        lo = self._choose(tensor, interval)
        hi = lo + t.bytes
        if lo % self.align:
            raise HybridError(f"tensor {t.id!r} would start at byte {lo}, not a multiple of the device's "
                              f"{self.align}-byte alignment; the plan's offsets are not valid (run hybrid validate)")
        if lo < 0 or hi > self.arena_bytes:
            raise HybridError(f"tensor {t.id!r} at offset {lo} ({t.bytes} bytes) lies outside the arena of "
                              f"{self.arena_bytes} bytes")
        if hi == lo:
            return lo, NO_FRONTIER
        i = bisect.bisect_left(self.live_lo, lo)
        for j in (i - 1, i):
            if 0 <= j < len(self.live_lo) and self.live_lo[j] < hi and lo < self.live_hi[j]:
                other = self.graph.tensors[self.live_t[j]].id
                raise HybridError(f"tensor {t.id!r} at bytes [{lo}, {hi}) overlaps {other!r}, which is still on "
                                  "the device; the plan's offsets are not valid (run hybrid validate)")
        self.live_lo.insert(i, lo)
        self.live_hi.insert(i, hi)
        self.live_t.insert(i, tensor)
        fr = NO_FRONTIER
        k = bisect.bisect_right(self.seg_lo, lo) - 1
        while k < len(self.seg_lo) and self.seg_lo[k] < hi:
            fr = merge(fr, self.seg_fr[k])
            k += 1
        return lo, fr

    def _split(self, x: int) -> int:
        i = bisect.bisect_right(self.seg_lo, x) - 1
        if self.seg_lo[i] != x:
            self.seg_lo.insert(i + 1, x)
            self.seg_fr.insert(i + 1, self.seg_fr[i])
            i += 1
        return i

    def _give(self, tensor: int, offset: int, frontier: Frontier) -> None:
        hi = offset + self.graph.tensors[tensor].bytes
        if hi == offset:
            return
        i = bisect.bisect_left(self.live_lo, offset)
        del self.live_lo[i], self.live_hi[i], self.live_t[i]
        a = self._split(offset)
        b = self._split(hi)
        self.seg_lo[a:b] = [offset]
        self.seg_fr[a:b] = [frontier]

    def forget_frontiers(self) -> None:
        self.seg_lo = [0]
        self.seg_fr = [NO_FRONTIER]


class Fragmented(Exception):
    """No free range is large enough although the bytes are: the runtime compacts, then allocates again."""


class CompactingPool(ArenaPool):
    """A byte budget that never fragments: best fit, and compaction when no free range is large enough.

    Used for `unconstrained` plans whose copies the offline layout cannot fit
    in the plan's memory. The buffer is the plan's usable memory (minus
    workspace); each copy goes to the smallest free range that holds it, at
    the device's alignment, and when none does, `compact` slides every live
    copy down to the start of the buffer so the free bytes become one range.
    The plan counted every copy at its aligned size (rule 5), so after a
    compaction the copy always fits. The runtime fences all three streams
    around the moves; their number, the bytes moved and the time they take
    are reported.
    """

    def __init__(self, graph: Graph, capacity: int, backend: Backend, align: int) -> None:
        super().__init__(graph, "unconstrained", capacity, capacity, lambda t, k: 0, backend, align=align)
        self.stats.offsets = "online (best fit + compaction)"

    def _choose(self, tensor: int, interval: int) -> int:
        t = self.graph.tensors[tensor]
        if t.bytes == 0:
            return 0
        starts = np.array([0] + self.live_hi, dtype=np.int64)
        ends = np.array(self.live_lo + [self.arena_bytes], dtype=np.int64)
        align = self.align
        aligned = round_up(starts, align)
        room = ends - aligned
        ok = np.nonzero(room >= t.bytes)[0]
        if len(ok):
            return int(aligned[ok[np.argmin(room[ok])]])
        raise Fragmented()

    def compact(self) -> list[tuple[int, int, int, int]]:
        """Pack live copies at the buffer's start, in address order: [(tensor, old, new, bytes)] for the runtime.

        Copies are packed at the device's alignment: never weaker, so kernels see the same data layout as
        eager PyTorch (a 4-byte aligned fp32 buffer took another numeric path on AMD CPUs).
        """
        moves = []
        off = 0
        align = self.align
        for j, t in enumerate(self.live_t):
            tt = self.graph.tensors[t]
            new = round_up(off, align)
            old = self.live_lo[j]
            if new != old:
                moves.append((t, old, new, tt.bytes))
                self.live_lo[j], self.live_hi[j] = new, new + tt.bytes
                self.where[t] = new
            off = new + tt.bytes
        self.stats.compactions += 1
        self.stats.moved_bytes += sum(m[3] for m in moves)
        self.forget_frontiers()
        return moves
