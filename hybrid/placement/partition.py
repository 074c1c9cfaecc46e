"""Cut an inference graph into parts where a single tensor crosses (seed 004's "key operators").

In program order, a boundary between positions k-1 and k is a cut when exactly one non-persistent tensor
is live across it — written before, read after. Parameters are uploaded once, not per inference, so they
never count. At a cut the parts before and after exchange only that tensor: placing them on different
devices costs one copy of it. Key-operator cuts are the cuts right after a pooling or concatenation op
(the paper's VGG16 blocks end at max-pools); every cut is a candidate for the exact schedulers, which may
keep adjacent parts on one device, so fine cuts lose nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybrid.graph import Graph
from hybrid.graph.order import program_order

KEY_KINDS = ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "cat", "concat")


@dataclass(frozen=True)
class Part:
    """Ops `ops` (indices, program order); their GPU (`time_s`) and CPU (`cpu_time_s`) times; the bytes of
    the one tensor crossing the cut after it (`out_bytes`, 0 for the last part) and of its parameters."""

    index: int
    ops: tuple[int, ...]
    gpu_s: float
    cpu_s: float
    out_tensor: str
    out_bytes: int
    param_bytes: int


def cuts(graph: Graph, order: np.ndarray | None = None) -> list[tuple[int, int]]:
    """(position k, tensor index) of every boundary before position k that one live tensor alone crosses."""
    a = graph.arrays
    order = program_order(graph) if order is None else np.asarray(order)
    n = len(order)
    pos = np.empty(a.n_ops, np.int64)
    pos[order] = np.arange(n)
    first = np.full(a.n_tensors, n, np.int64)
    last = np.full(a.n_tensors, -1, np.int64)
    prod = a.t_producer
    has = prod >= 0
    first[has] = pos[prod[has]]
    readers = np.repeat(np.arange(a.n_ops), np.diff(a.in_ptr))
    np.maximum.at(last, a.in_idx, pos[readers])
    live = ~a.t_persistent & has & (last > first)
    delta = np.zeros(n + 1, np.int64)
    np.add.at(delta, first[live] + 1, 1)   # crosses boundaries first+1 .. last
    np.add.at(delta, last[live] + 1, -1)
    crossing = np.cumsum(delta)[:n]
    out = []
    for k in range(1, n):
        if crossing[k] == 1:
            t = np.nonzero(live & (first < k) & (last >= k))[0]
            out.append((k, int(t[0])))
    return out


def key_cuts(graph: Graph, order: np.ndarray | None = None) -> list[tuple[int, int]]:
    """The cuts right after a pooling or concatenation op."""
    order = program_order(graph) if order is None else np.asarray(order)
    return [(k, t) for k, t in cuts(graph, order) if graph.ops[int(order[k - 1])].kind.startswith(KEY_KINDS)]


def parts(graph: Graph, at: list[tuple[int, int]], order: np.ndarray | None = None) -> list[Part]:
    """The parts between consecutive cuts `at` (from `cuts` or `key_cuts`)."""
    a = graph.arrays
    order = program_order(graph) if order is None else np.asarray(order)
    bounds = [0] + [k for k, _ in at] + [len(order)]
    out_t = [t for _, t in at] + [-1]
    cpu = np.array([op.cpu_time_s if op.cpu_time_s is not None else np.nan for op in graph.ops])
    result = []
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        ops = tuple(int(o) for o in order[lo:hi])
        params = {int(t) for o in ops for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]] if a.t_persistent[t]}
        t = out_t[i]
        result.append(Part(i, ops, float(a.op_time[list(ops)].sum()), float(cpu[list(ops)].sum()),
                           graph.tensors[t].id if t >= 0 else "", int(a.t_bytes[t]) if t >= 0 else 0,
                           int(sum(int(a.t_bytes[p]) for p in params))))
    return result
