"""Stream simulator: times an augmented graph (compute, h2d, d2h streams, FIFO each; placement plans add
the host CPU as a fourth, kind CPU).

The swap planner times nodes as it emits them; this re-times any augmented
graph from its edges alone — with other durations, another issue order on a
stream, or earliest-start times that delay some copies (what CP-SAT
refinement proposes). It is the single source of timing truth for search.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from hybrid.errors import HybridError
from hybrid.plan.events import FREE

CPU = 4      # after the event kinds' codes: a compute node run on the host (placement), its own FIFO lane


@njit(cache=True)
def _simulate(kind, dur, dep_ptr, dep_idx, order, not_before, serialize):
    n = kind.shape[0]
    # Stream chains: each node waits for the previous node issued on its stream.
    prev = np.full(n, -1, dtype=np.int64)
    last = np.full(5, -1, dtype=np.int64)
    for i in range(n):
        v = order[i]
        if kind[v] == FREE:
            continue
        lane = 0 if serialize else kind[v]
        prev[v] = last[lane]
        last[lane] = v
    indeg = np.zeros(n, dtype=np.int64)
    n_succ = np.zeros(n + 1, dtype=np.int64)
    for v in range(n):
        indeg[v] = dep_ptr[v + 1] - dep_ptr[v] + (1 if prev[v] >= 0 else 0)
        for j in range(dep_ptr[v], dep_ptr[v + 1]):
            n_succ[dep_idx[j] + 1] += 1
        if prev[v] >= 0:
            n_succ[prev[v] + 1] += 1
    succ_ptr = np.cumsum(n_succ)
    fill = succ_ptr[:-1].copy()
    succ = np.empty(succ_ptr[-1], dtype=np.int64)
    for v in range(n):
        for j in range(dep_ptr[v], dep_ptr[v + 1]):
            d = dep_idx[j]
            succ[fill[d]] = v
            fill[d] += 1
        if prev[v] >= 0:
            succ[fill[prev[v]]] = v
            fill[prev[v]] += 1
    start = np.zeros(n, dtype=np.float64)
    end = np.zeros(n, dtype=np.float64)
    ready = np.empty(n, dtype=np.int64)
    head = 0
    tail = 0
    for v in range(n):
        if indeg[v] == 0:
            ready[tail] = v
            tail += 1
    while head < tail:
        v = ready[head]
        head += 1
        s = not_before[v]
        for j in range(dep_ptr[v], dep_ptr[v + 1]):
            e = end[dep_idx[j]]
            if e > s:
                s = e
        if prev[v] >= 0 and end[prev[v]] > s:
            s = end[prev[v]]
        start[v] = s
        end[v] = s + dur[v]
        for j in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ[j]
            indeg[w] -= 1
            if indeg[w] == 0:
                ready[tail] = w
                tail += 1
    return start, end, head == n


def simulate(kind: np.ndarray, dur: np.ndarray, dep_ptr: np.ndarray, dep_idx: np.ndarray,
             order: np.ndarray | None = None, not_before: np.ndarray | None = None,
             serialize: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) per node. `order`: issue order (default: node order); `not_before`: earliest starts."""
    n = len(kind)
    order = np.arange(n, dtype=np.int64) if order is None else np.asarray(order, dtype=np.int64)
    not_before = np.zeros(n) if not_before is None else np.asarray(not_before, dtype=np.float64)
    start, end, ok = _simulate(np.asarray(kind, dtype=np.int8), np.asarray(dur, dtype=np.float64),
                               np.asarray(dep_ptr, dtype=np.int64), np.asarray(dep_idx, dtype=np.int64),
                               order, not_before, serialize)
    if not ok:
        raise HybridError("the augmented graph deadlocks: its edges and stream orders form a cycle")
    return start, end


def resimulate(aug, order: np.ndarray | None = None, not_before: np.ndarray | None = None,
               durations: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Re-time a planner's AugmentedGraph (same serialisation mode it was planned with)."""
    dur = aug.durations() if durations is None else durations
    return simulate(aug.kind, dur, aug.dep_ptr, aug.dep_idx, order, not_before, not aug.options.overlap)
