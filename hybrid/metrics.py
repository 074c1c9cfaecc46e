"""Figures every plan reports: ideal time, lower bound, stall, bytes moved, peak device bytes."""
from __future__ import annotations

import numpy as np

from hybrid.device import Device
from hybrid.graph import Graph


def ideal_time(graph: Graph, op_time: np.ndarray | None = None) -> float:
    """Sum of compute times (the chosen impls; default impls when not given): infinite memory, no copies."""
    return float((graph.arrays.op_time if op_time is None else op_time).sum())


def lower_bound(graph: Graph, device: Device) -> float:
    """No plan on this device can be faster than this.

    max(compute with the fastest impls,
        (bytes of persistent tensors any op reads - memory) / h2d,
        (bytes of persistent tensors any op updates - memory) / d2h):
    at most `memory` bytes of persistent tensors can stay resident across
    iterations; every other one read must come in, and every other one
    updated must go back out, each iteration.
    """
    a = graph.arrays
    used = np.zeros(a.n_tensors, dtype=bool)
    used[a.in_idx] = True
    updated = np.zeros(a.n_tensors, dtype=bool)
    updated[a.upd_idx] = True
    m = device.usable_bytes
    b_in = int(a.t_bytes[used & a.t_persistent].sum())
    b_out = int(a.t_bytes[updated].sum())
    return max(float(a.fastest_impl_times().sum()), (b_in - m) / device.h2d_bytes_per_s, (b_out - m) / device.d2h_bytes_per_s)


def peak_from_intervals(alloc_t: np.ndarray, release_t: np.ndarray, nbytes: np.ndarray) -> int:
    """Largest sum of bytes over half-open intervals [alloc, release) alive at one instant."""
    if len(nbytes) == 0:
        return 0
    times = np.concatenate([alloc_t, release_t])
    delta = np.concatenate([nbytes, -nbytes]).astype(np.int64)
    # At equal times releases (negative) come first: intervals are half-open.
    order = np.lexsort((delta, times))
    return int(max(0, np.cumsum(delta[order]).max()))
