"""What an operator order keeps alive: tensor sizes, aligned footprints, lifetimes and peaks without swapping.

Graph-level facts every stage reads (info, pools, the GA's encoding, the executor's plans), so they live
beside the graph rather than in one planner.
"""
from __future__ import annotations

import numpy as np

from hybrid.graph.types import Graph
from hybrid.units import round_up


def occupied_bytes(g: Graph, align: int) -> np.ndarray:
    """Per tensor, the bytes its device copy occupies at this alignment."""
    return round_up(g.arrays.t_bytes.astype(np.int64), int(align))


def distinct_sizes(g: Graph) -> np.ndarray:
    """TS: the sorted distinct tensor sizes."""
    return np.unique(g.arrays.t_bytes)


def size_index(g: Graph) -> np.ndarray:
    """Index into TS of every tensor's size."""
    return np.searchsorted(distinct_sizes(g), g.arrays.t_bytes).astype(np.int32)


def unswapped_lifetimes(g: Graph, order: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per tensor, the first and last schedule positions it is alive when `order` runs without swapping.

    Persistent tensors span the whole run; others go from their producer to
    their last reader (a tensor nobody reads dies where it is made).
    """
    a = g.arrays
    n = a.n_ops
    if n == 0:   # no ops: no position to live at (persistent tensors alone, nothing scheduled)
        return np.zeros(a.n_tensors, dtype=np.int64), np.full(a.n_tensors, -1, dtype=np.int64)
    pos = np.empty(n, dtype=np.int64)
    pos[order] = np.arange(n)
    last = np.full(a.n_tensors, -1, dtype=np.int64)
    reader = np.repeat(np.arange(n), np.diff(a.in_ptr))
    np.maximum.at(last, a.in_idx, pos[reader])
    first = np.where(a.t_producer >= 0, pos[np.maximum(a.t_producer, 0)], 0)
    last = np.maximum(last, first)
    first = np.where(a.t_persistent, 0, first)
    last = np.where(a.t_persistent, n - 1, last)
    return first, last


def peak_live_counts(g: Graph, order: np.ndarray, align: int = 1) -> tuple[np.ndarray, int]:
    """Unswapped run of `order`: per distinct size, the most tensors of that size alive at once; and peak bytes
    (each tensor counted at its size rounded up to `align`).

    Persistent tensors are alive throughout; others from their producer to
    their last reader. Workspace counts toward the byte peak only.
    """
    a = g.arrays
    ts = distinct_sizes(g)
    sidx = size_index(g)
    n = a.n_ops
    first, last = unswapped_lifetimes(g, order)
    # Tensors never produced nor read (unused persistent ones) still occupy memory unswapped.
    counts = np.zeros((len(ts), n + 1), dtype=np.int64)
    np.add.at(counts, (sidx, first), 1)
    np.add.at(counts, (sidx, last + 1), -1)
    live = np.cumsum(counts, axis=1)[:, :n]
    byte_delta = np.zeros(n + 1, dtype=np.int64)
    t_mem = occupied_bytes(g, align)
    np.add.at(byte_delta, first, t_mem)
    np.add.at(byte_delta, last + 1, -t_mem)
    live_bytes = np.cumsum(byte_delta)[:n] + a.op_ws[order]
    return live.max(axis=1) if n else np.zeros(len(ts), dtype=np.int64), int(live_bytes.max()) if n else 0


def min_objects_per_size(g: Graph) -> np.ndarray:
    """Per distinct size, the most tensors of that size a single op touches: a pool needs at least this many."""
    a = g.arrays
    ts = distinct_sizes(g)
    sidx = size_index(g)
    need = np.zeros(len(ts), dtype=np.int64)
    for o in range(a.n_ops):
        ts_op = np.concatenate([a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]], a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]]])
        if len(ts_op):
            vals, cnts = np.unique(sidx[ts_op], return_counts=True)
            np.maximum.at(need, vals, cnts)
    return need
