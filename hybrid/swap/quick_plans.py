"""Quick plans to run without a search: a size-class pool that fits, or the Belady byte-budget plan.

The GA (`hybrid optimize`) finds better plans; these exist so that a model
can be executed at a given memory straight away (tests, benchmarks, the
README example). `merged_class_pool` starts from one class per tensor size
and merges neighbouring sizes while that lowers the pool's floor (the
objects a single op needs at once, at its class's size), until the floor
leaves room to spare in the memory; object counts then follow each class's
share of the unswapped peak, scaled to fit, as `hybrid.swap.pools.per_size_pool`
does.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from hybrid.swap.pools import PoolArrays, class_pool
from hybrid.graph.liveness import distinct_sizes, size_index, unswapped_lifetimes
from hybrid.swap.baselines import run_baseline
from hybrid.device import Device
from hybrid.units import checked_number, format_bytes, round_up
from hybrid.errors import HybridError, InfeasibleError
from hybrid.graph import Graph
from hybrid.graph.info import unswapped_peak
from hybrid.plan import Plan
from hybrid.swap.to_plan import to_plan
from hybrid.graph.order import program_order
from hybrid.swap.planner import SwapPlanner


def _touch_matrix(g: Graph) -> np.ndarray:
    """[ops x sizes]: how many tensors of each distinct size an op touches (inputs and outputs)."""
    a = g.arrays
    sidx = size_index(g)
    m = np.zeros((a.n_ops, len(distinct_sizes(g))), dtype=np.int64)
    for o in range(a.n_ops):
        ts = np.concatenate([a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]], a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]]])
        np.add.at(m[o], sidx[ts], 1)
    return m


def _live_matrix(g: Graph, order: np.ndarray) -> np.ndarray:
    """[sizes x steps]: tensors of each size alive at each step of an unswapped run of `order`."""
    a = g.arrays
    n = a.n_ops
    first, last = unswapped_lifetimes(g, order)
    counts = np.zeros((len(distinct_sizes(g)), n + 1), dtype=np.int64)
    sidx = size_index(g)
    np.add.at(counts, (sidx, first), 1)
    np.add.at(counts, (sidx, last + 1), -1)
    return np.cumsum(counts, axis=1)[:, :n]


def merged_class_pool(g: Graph, device: Device, order: np.ndarray | None = None, room: float = 0.7) -> PoolArrays:
    """A size-class pool that fits the device's usable memory, merging neighbouring sizes until the floor is
    below `room` of it. Objects are sized at the device's alignment, as the executor lays them out."""
    order = program_order(g) if order is None else order
    ts = distinct_sizes(g)
    align = device.alignment_bytes
    ts_mem = round_up(ts.astype(np.int64), align)
    memory_bytes = device.usable_bytes
    budget = memory_bytes - int(g.arrays.op_ws.max(initial=0))
    touch = _touch_matrix(g)
    live = _live_matrix(g, order)
    cls = np.arange(len(ts), dtype=np.int64)

    def floor_of(c: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        k = int(c.max()) + 1
        onehot = np.zeros((len(ts), k), dtype=np.int64)
        onehot[np.arange(len(ts)), c] = 1
        per_op = touch @ onehot
        need = per_op.max(axis=0) if len(per_op) else np.zeros(k, dtype=np.int64)
        cbytes = np.zeros(k, dtype=np.int64)
        np.maximum.at(cbytes, c, ts_mem)
        return need, cbytes, per_op

    while True:
        need, cbytes, per_op = floor_of(cls)
        floor = int((need * cbytes).sum())
        if floor <= room * budget or len(need) == 1:
            break
        merged_need = (per_op[:, :-1] + per_op[:, 1:]).max(axis=0)
        gain = need[:-1] * cbytes[:-1] + need[1:] * cbytes[1:] - merged_need * cbytes[1:]
        j = int(np.argmax(gain))
        if gain[j] <= 0:
            break
        cls = np.where(cls > j, cls - 1, cls)
    if floor > budget:
        raise InfeasibleError(f"no size-class pool found within {format_bytes(memory_bytes)}: ops need {format_bytes(floor)} of "
                              "objects at once even with merged classes; give more memory")
    k = len(need)
    onehot = np.zeros((len(ts), k), dtype=np.int64)
    onehot[np.arange(len(ts)), cls] = 1
    peak = (onehot.T @ live).max(axis=1) if live.shape[1] else need
    peak = np.maximum(peak, need)
    counts = peak.copy()
    if int((peak * cbytes).sum()) > budget:
        extra = (peak - need) * cbytes
        scale = (budget - floor) / max(1, int(extra.sum()))
        counts = need + np.floor((peak - need) * scale).astype(np.int64)
    return class_pool(g, cls, counts, ts, align=align)


def size_class_plan(graph: Graph, device: Device, order: np.ndarray | None = None) -> Plan:
    """The swap planner's plan for `order` (default: program order) with a merged size-class pool."""
    order = program_order(graph) if order is None else order
    pool = merged_class_pool(graph, device, order)
    aug = SwapPlanner(graph, device).plan(order, pool)
    return to_plan(aug, {"name": "swap-planner", "pool": "merged size classes"})


MAX_FRACTION = 1e6   # of the unswapped peak: past any memory a plan could use, short of overflowing a byte count


def _percent(text: object) -> bool:
    """Whether `text` is a percentage such as "50%" (said back as the fraction to pass)."""
    try:
        return isinstance(text, str) and text.strip().endswith("%") and 0 < float(text.strip()[:-1]) < np.inf
    except ValueError:
        return False


def quick_plan(graph: Graph, fraction: float = 0.5, kind: str = "size_classes", device: Device | None = None) -> Plan:
    """A plan at `fraction` of the unswapped peak: `size_classes` (merged pool) or `unconstrained` (Belady).

    `fraction` is a number above 0 (0.5 = half the peak); HybridError for anything else, said before any work
    (a string such as "50%" would otherwise be repeated peak-many times).
    """
    what = "quick_plan: fraction (the share of the unswapped peak, e.g. 0.5 for half)"
    try:
        fraction = checked_number(fraction, what, lo=0.0, hi=MAX_FRACTION)
        if fraction == 0:
            raise HybridError(f"{what} must be above 0, got 0")
    except HybridError as e:
        hint = (f"; for {fraction.strip()} pass {float(fraction.strip()[:-1]) / 100:g}" if _percent(fraction)
                else "")
        raise HybridError(f"{e}{hint}") from None
    if not isinstance(graph, Graph):
        hint = f"; load it with Graph.load({str(graph)!r})" if isinstance(graph, str) else ""
        raise HybridError(f"quick_plan: graph must be a hybrid.graph.Graph, got {type(graph).__name__}{hint}")
    if kind not in ("size_classes", "unconstrained"):
        raise HybridError(f"quick_plan: kind must be size_classes or unconstrained, got {kind!r}")
    base = device or graph.device
    if base is None:
        raise HybridError("the graph has no device; pass one (hybrid.device.preset('v100-16gb'))")
    dev = replace(base, memory_bytes=int(unswapped_peak(graph) * float(fraction)), reserve_bytes=0)
    if kind == "unconstrained":
        return run_baseline(graph, dev, "belady")
    return size_class_plan(graph, dev)
