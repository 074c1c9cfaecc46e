"""Operator schedules: topological orders of the graph's dependency DAG.

All functions work on op indices (int32 arrays); `ids`/`from_ids` convert.
"""
from __future__ import annotations

import heapq

import numpy as np

from hybrid.errors import HybridError
from hybrid.graph import Graph


def program_order(g: Graph) -> np.ndarray:
    """The order the framework would run: the graph's own op list, made topological if it is not.

    Kahn's algorithm with the smallest op index first, so a list that is
    already topological comes back unchanged.
    """
    a = g.arrays
    indeg = np.diff(a.pred_ptr).astype(np.int64)
    heap = [i for i in range(a.n_ops) if indeg[i] == 0]
    heapq.heapify(heap)
    out = np.empty(a.n_ops, dtype=np.int32)
    k = 0
    while heap:
        i = heapq.heappop(heap)
        out[k] = i
        k += 1
        for j in a.succ_idx[a.succ_ptr[i]:a.succ_ptr[i + 1]]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, int(j))
    return out


def latest_first_order(g: Graph) -> np.ndarray:
    """Kahn's algorithm always taking the latest-listed ready op: a valid schedule unlike the graph's own
    (tests and replays use it to show a result does not depend on the op list's order)."""
    a = g.arrays
    indeg = np.diff(a.pred_ptr).astype(np.int64)
    heap = [-i for i in range(a.n_ops) if indeg[i] == 0]
    heapq.heapify(heap)
    out = np.empty(a.n_ops, dtype=np.int32)
    k = 0
    while heap:
        i = -heapq.heappop(heap)
        out[k] = i
        k += 1
        for j in a.succ_idx[a.succ_ptr[i]:a.succ_ptr[i + 1]]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, -int(j))
    return out


def depth_first_order(g: Graph) -> np.ndarray:
    """Run each op as soon as the last of its inputs is ready, following one chain as deep as it goes.

    A reverse-postorder DFS from the sinks' perspective keeps producer and
    consumer close together, which shortens tensor lifetimes.
    """
    a = g.arrays
    indeg = np.diff(a.pred_ptr).astype(np.int64)
    stack = [i for i in range(a.n_ops - 1, -1, -1) if indeg[i] == 0]
    out = np.empty(a.n_ops, dtype=np.int32)
    k = 0
    while stack:
        i = stack.pop()
        out[k] = i
        k += 1
        ready = []
        for j in a.succ_idx[a.succ_ptr[i]:a.succ_ptr[i + 1]]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(int(j))
        stack.extend(sorted(ready, reverse=True))
    return out


def random_order(g: Graph, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random ready op at each step (what a dataflow engine with no priorities might do)."""
    a = g.arrays
    indeg = np.diff(a.pred_ptr).astype(np.int64)
    ready = [i for i in range(a.n_ops) if indeg[i] == 0]
    out = np.empty(a.n_ops, dtype=np.int32)
    for k in range(a.n_ops):
        r = int(rng.integers(len(ready)))
        ready[r], ready[-1] = ready[-1], ready[r]
        i = ready.pop()
        out[k] = i
        for j in a.succ_idx[a.succ_ptr[i]:a.succ_ptr[i + 1]]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(int(j))
    return out


def is_topological(g: Graph, order: np.ndarray) -> bool:
    a = g.arrays
    if len(order) != a.n_ops:
        return False
    pos = np.full(a.n_ops, -1, dtype=np.int64)
    pos[order] = np.arange(a.n_ops)
    if (pos < 0).any():
        return False
    counts = np.diff(a.pred_ptr)
    if counts.sum() == 0:
        return True
    succ_of = np.repeat(np.arange(a.n_ops), counts)
    return bool((pos[a.pred_idx] < pos[succ_of]).all())


def from_ids(g: Graph, ids: list[str], where: str = "schedule") -> np.ndarray:
    """Op ids → indices, checking it is a topological order of all ops."""
    try:
        order = np.array([g.op_index[i] for i in ids], dtype=np.int32)
    except KeyError as e:
        raise HybridError(f"{where}: unknown op id {e.args[0]!r} (not in graph {g.name!r})") from None
    if len(set(ids)) != len(ids) or len(ids) != len(g.ops):
        raise HybridError(f"{where}: must list each of the graph's {len(g.ops)} ops exactly once (has {len(ids)})")
    if not is_topological(g, order):
        raise HybridError(f"{where}: not a topological order of graph {g.name!r}")
    return order


def ids(g: Graph, order: np.ndarray) -> list[str]:
    return [g.ops[int(i)].id for i in order]
