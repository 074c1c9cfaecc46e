"""Re-order a copy stream earliest-deadline-first, so a copy that could start does not queue behind one that cannot.

Each stream is FIFO in sequence order, and the swap planner issues a
swap-out where it decides the eviction: right before the allocation that
needs the memory. When several evictions are decided at one point, one whose
tensor is read until later (its release: the end of the last node touching
the copy) can head the queue, and copies released long before wait behind it
while the stream idles. On the GA's Inception-v4 plans the d2h stream idled
for the first 0.135 s with 3.6 GB of swap-outs already releasable, and the
forward pass then stalled behind a 2.5 s back-to-back stretch.

This pass re-sequences one stream as a single machine with release dates:
whenever the stream is free, it runs the released copy that came first in the
current order (the planner's order is its deadline order), and otherwise waits
for the next release. Each copy then goes right after its own last
dependency (or after the copy before it, to keep the new order), the other
nodes keep their order, and `hybrid.swap.rewalk.rebuild` re-walks the result
(memory objects re-bound, times recomputed); `reorder_streams` keeps it only
if the makespan went down. Release dates come from the current timeline, so
the pass repeats until a round gains nothing. About 30 ms in all on
Inception-v4 (2,062 ops), 0.2 s on NASNet (16,499), so refinement runs it
before any CP-SAT window: windows are picked where the compute stream
stalls, and the idle stream time this pass uses lies before the stall,
outside those windows. Too slow for the search's hot loop, though (one
evaluation of Inception-v4 takes 2.4 ms).
"""
from __future__ import annotations

import heapq

import numpy as np

from hybrid.plan.events import SWAP_IN, SWAP_OUT
from hybrid.refine.offsets import rebuild
from hybrid.swap.rewalk import Problem, SequenceError, Timeline


def _per_node_max(values: np.ndarray, ptr: np.ndarray, nodes: np.ndarray, empty: float) -> np.ndarray:
    """max(values[ptr[i]:ptr[i+1]]) for each node i in `nodes` (ascending), `empty` where that slice is empty."""
    lo, hi = ptr[nodes], ptr[nodes + 1]
    out = np.full(len(nodes), empty, dtype=np.float64)
    has = hi > lo
    if has.any():
        bounds = np.empty(2 * int(has.sum()), dtype=np.int64)
        bounds[0::2], bounds[1::2] = lo[has], hi[has]
        # reduceat over [lo, hi) pairs; the appended element keeps hi == len(values) a valid index
        out[has] = np.maximum.reduceat(np.append(values.astype(np.float64), empty), bounds)[0::2]
    return out


def edf_order(tl: Timeline, kind: int) -> tuple[np.ndarray, np.ndarray]:
    """(nodes of `kind` in sequence order, their earliest-deadline-first order as positions into that array)."""
    idx = np.nonzero(tl.kind == kind)[0]
    rel = _per_node_max(tl.end[tl.dep_idx], tl.dep_ptr, idx, 0.0)
    dur = tl.end[idx] - tl.start[idx]
    by_rel = np.argsort(rel, kind="stable")
    ready: list[int] = []
    order: list[int] = []
    t, k, n = 0.0, 0, len(idx)
    while len(order) < n:
        while k < n and rel[by_rel[k]] <= t:
            heapq.heappush(ready, int(by_rel[k]))
            k += 1
        if not ready:
            t = float(rel[by_rel[k]])
            continue
        j = heapq.heappop(ready)
        order.append(j)
        t = max(t, float(rel[j])) + float(dur[j])
    return idx, np.asarray(order, dtype=np.int64)


def resequence(tl: Timeline, kind: int) -> np.ndarray | None:
    """A node permutation with `kind`'s nodes in EDF order, or None when that is already the order."""
    idx, order = edf_order(tl, kind)
    if np.array_equal(order, np.arange(len(idx))):
        return None
    in_stream = np.zeros(tl.n, dtype=bool)
    in_stream[idx] = True
    last_dep = _per_node_max(tl.dep_idx.astype(np.float64), tl.dep_ptr, idx, -1.0).astype(np.int64)
    # a copy goes right after the last other node before its last dependency (itself, unless that is a copy
    # of the same stream, which `rebuild` would then reject), and never before the copy ahead of it
    others = np.nonzero(~in_stream)[0]
    anchor_of_node = np.searchsorted(others, np.arange(tl.n), side="right") - 1  # last other node at or before
    anchors = np.empty(len(idx), dtype=np.int64)
    prev = -1
    for q in order:
        a = int(anchor_of_node[last_dep[q]]) if last_dep[q] >= 0 else -1
        prev = max(prev, a)
        anchors[q] = prev
    # anchors never decrease along `order`, so walking both lists once interleaves them
    seq = np.empty(tl.n, dtype=np.int64)
    pos = r = 0
    while r < len(order) and anchors[order[r]] < 0:
        seq[pos] = idx[order[r]]
        pos, r = pos + 1, r + 1
    for a, node in enumerate(others):
        seq[pos] = node
        pos += 1
        while r < len(order) and anchors[order[r]] == a:
            seq[pos] = idx[order[r]]
            pos, r = pos + 1, r + 1
    return seq


def _walk(prob: Problem, tl: Timeline, seq: np.ndarray) -> Timeline | None:
    """The re-sequenced timeline, or None when the walk rejects it or the simulator disagrees with it."""
    try:
        cand = rebuild(prob, tl.kind[seq], tl.ref[seq])
    except SequenceError:
        return None
    return cand if cand.confirmed_makespan(1e-9 * max(1.0, cand.makespan)) is not None else None


def reorder_streams(prob: Problem, tl: Timeline, rounds: int = 8) -> Timeline:
    """The fastest timeline found by EDF re-ordering of d2h, then h2d, repeated while a round gains (or `tl`)."""
    best = tl
    for _ in range(rounds):
        gained = False
        for kind in (SWAP_OUT, SWAP_IN):
            seq = resequence(best, kind)
            cand = None if seq is None else _walk(prob, best, seq)
            if cand is not None and cand.makespan < best.makespan * (1 - 1e-12):
                best, gained = cand, True
        if not gained:
            break
    return best
