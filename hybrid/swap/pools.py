"""Device-memory pools: SwapAdvisor's size classes (TS, CLS, CNT) and the plain byte budget.

`PoolArrays` is what the swap planner reads; `SizeClassAllocation` /
`UnconstrainedAllocation` (hybrid.plan) is what a plan file records.

Every pool is built for a `Device`: its capacity is the device's usable memory
(memory less reserve) and each tensor occupies its bytes rounded up to the
device's alignment (`t_mem`), the one rule the validator and the executor
apply too (docs/formats.md, rule 5). Class objects are sized in whole
alignment units, so a plan's class bytes are what the executor lays out.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybrid.device import Device
from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.graph.liveness import distinct_sizes, min_objects_per_size, occupied_bytes, peak_live_counts
from hybrid.plan import Allocation, SizeClass, SizeClassAllocation, UnconstrainedAllocation
from hybrid.units import format_bytes, round_up


@dataclass(frozen=True)
class PoolArrays:
    """Planner-side pool. by_bytes: one byte budget (`capacity`); else per-class object counts."""

    by_bytes: bool
    t_class: np.ndarray        # int32 [T]: class of each tensor (0 for all in byte mode)
    class_count: np.ndarray    # int64 [C]: objects per class (byte mode: [1])
    class_bytes: np.ndarray    # int64 [C]: object size per class (byte mode: [capacity])
    capacity: int              # bytes available to tensors (byte mode) / pool bytes (classes)
    t_mem: np.ndarray          # int64 [T]: bytes each tensor's device copy occupies (aligned)
    align: int                 # the device's alignment the pool was built with
    arena: bool = False        # by_bytes with addresses: each tensor at one offset in [0, capacity), workspaces
                               # outside (hybrid.swap.addresses); the plan's allocation is an arena


def byte_pool(g: Graph, device: Device) -> PoolArrays:
    """One byte budget: the device's usable memory, each copy counted at its aligned size."""
    cap = device.usable_bytes
    return PoolArrays(True, np.zeros(g.arrays.n_tensors, dtype=np.int32), np.ones(1, dtype=np.int64),
                      np.array([cap], dtype=np.int64), int(cap), occupied_bytes(g, device.alignment_bytes),
                      device.alignment_bytes)


def arena_capacity(device: Device, largest_ws: int) -> int:
    """An arena's bytes: the usable memory less the largest workspace, rounded down to the alignment (rule 5:
    a workspace sits beside the arena, not in it)."""
    align = device.alignment_bytes
    return max(0, (device.usable_bytes - int(largest_ws)) // align * align)


def arena_pool(g: Graph, device: Device, op_ws: np.ndarray | None = None) -> PoolArrays:
    """An arena of the device's usable memory less the largest workspace (`op_ws`, default the graph's
    default implementations'), rounded down to the alignment: FORMATS rule 5's arena, planned with addresses."""
    ws = int((g.arrays.op_ws if op_ws is None else op_ws).max(initial=0))
    align = device.alignment_bytes
    cap = arena_capacity(device, ws)
    return PoolArrays(True, np.zeros(g.arrays.n_tensors, dtype=np.int32), np.ones(1, dtype=np.int64),
                      np.array([cap], dtype=np.int64), int(cap), occupied_bytes(g, align), align, arena=True)


def class_pool(g: Graph, cls: np.ndarray, cnt: np.ndarray, ts: np.ndarray | None = None, *,
               align: int) -> PoolArrays:
    """Pool from the GA encoding: CLS (non-decreasing class per distinct size) and CNT (objects per class).

    A class's objects are its largest size rounded up to the alignment."""
    ts = distinct_sizes(g) if ts is None else ts
    cls = np.asarray(cls, dtype=np.int64)
    n_classes = int(cls.max()) + 1 if len(cls) else 0
    class_bytes = np.zeros(n_classes, dtype=np.int64)
    np.maximum.at(class_bytes, cls, ts)
    class_bytes = round_up(class_bytes, int(align))
    t_class = cls[np.searchsorted(ts, g.arrays.t_bytes)].astype(np.int32)
    cnt = np.asarray(cnt, dtype=np.int64)
    return PoolArrays(False, t_class, cnt, class_bytes, int((class_bytes * cnt).sum()), occupied_bytes(g, align),
                      int(align))


def pool_from_allocation(g: Graph, alloc: Allocation, device: Device) -> PoolArrays:
    """The planner's pool for a plan's recorded allocation (its class bytes counted at the device's alignment)."""
    align = device.alignment_bytes
    if isinstance(alloc, UnconstrainedAllocation):
        return byte_pool(g, device)
    if isinstance(alloc, SizeClassAllocation):
        t_class = np.zeros(len(g.tensors), dtype=np.int32)
        for t in g.tensors:
            c = alloc.class_of.get(t.id)
            if c is None or not (0 <= c < len(alloc.classes)):
                raise InfeasibleError(f"allocation: tensor {t.id!r} has no valid size class in class_of")
            if alloc.classes[c].bytes < t.bytes:
                raise InfeasibleError(f"allocation: tensor {t.id!r} ({t.bytes} bytes) maps to class {c} of {alloc.classes[c].bytes} bytes")
            t_class[g.tensor_index[t.id]] = c
        counts = np.array([c.count for c in alloc.classes], dtype=np.int64)
        cbytes = round_up(np.array([c.bytes for c in alloc.classes], dtype=np.int64), align)
        return PoolArrays(False, t_class, counts, cbytes, int((cbytes * counts).sum()), occupied_bytes(g, align), align)
    raise InfeasibleError(f"the swap planner works with size_classes or unconstrained allocations, not {alloc.kind!r}")


def allocation_of(g: Graph, pool: PoolArrays) -> Allocation:
    """The plan-file record of a pool."""
    if pool.by_bytes:
        return UnconstrainedAllocation()
    classes = tuple(SizeClass(int(b), int(c)) for b, c in zip(pool.class_bytes, pool.class_count))
    return SizeClassAllocation(classes, {t.id: int(pool.t_class[i]) for i, t in enumerate(g.tensors)})


def per_size_pool(g: Graph, order: np.ndarray, device: Device) -> PoolArrays:
    """One class per distinct size, counts sized from the unswapped peak and scaled down to fit memory.

    This is the GA's seeded pool and a sensible default: each size keeps the
    share of memory it had at the unswapped peak, but never fewer objects than
    one op needs at once.
    """
    ts = distinct_sizes(g)
    align = device.alignment_bytes
    ts_mem = round_up(ts.astype(np.int64), align)
    memory_bytes = device.usable_bytes
    peak_counts, _ = peak_live_counts(g, order)
    need = np.minimum(min_objects_per_size(g), peak_counts)
    budget = memory_bytes - int(g.arrays.op_ws.max(initial=0))
    floor_bytes = int((need * ts_mem).sum())
    if budget < floor_bytes:
        raise InfeasibleError(
            f"memory {format_bytes(memory_bytes)} cannot hold one object per tensor a single op touches plus the "
            f"largest workspace ({format_bytes(floor_bytes)} + {format_bytes(memory_bytes - budget)}, objects "
            f"rounded up to {align} bytes); give more --memory")
    full = int((peak_counts * ts_mem).sum())
    counts = peak_counts.copy()
    if full > budget:
        # Scale the part above the floor so the total fits the budget.
        extra = (peak_counts - need) * ts_mem
        scale = (budget - floor_bytes) / max(1, int(extra.sum()))
        counts = need + np.floor((peak_counts - need) * scale).astype(np.int64)
    cls = np.arange(len(ts), dtype=np.int64)
    return class_pool(g, cls, counts, ts, align=align)
