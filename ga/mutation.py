"""Mutation (§5.2-5.3).

Schedules: replay the parent like a dataflow scheduler would — keep the set
of ready ops; at each step, with probability P run a random ready op,
otherwise the ready op that comes first in the parent. Many ops can move in
one mutation (the paper found that works better than moving one), and the
result is topological by construction. With P = 1 it draws a random
topological order, which is how the initial population is made.

CLS: each boundary i >= 1 flips with probability P — a size that shares its
predecessor's class starts a new one, or one that starts a class joins the
previous — and the rest of the list shifts with it, staying monotone. Counts
follow through CNT_EXT (a size keeps its count, classes average their sizes').
With the unrestricted mapping (Figure 9c) each size instead moves with
probability P to any class or a new one.

CNT: each class count is redrawn with probability P from a Gaussian around
its value (sigma = `sigma_rel` times the value, at least one object).

Planner settings: with probability P each, the policy changes to another
allowed one, and the recency window and lookahead move one step in their
tables.
The caller repairs the result (`ga.repair`).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ga.encoding import (LOOKAHEAD, RECENCY, PlannerGene, SearchSpace, canonical_free, collapse_cnt,
                         extend_cnt)


def mutate_schedule(space: SearchSpace, parent: np.ndarray, p: float, rng: np.random.Generator) -> np.ndarray:
    pos = np.empty(len(parent), dtype=np.int64)
    pos[parent] = np.arange(len(parent))
    return _ready_walk(parent.astype(np.int32, copy=False), pos, space.pred_count, space.succ_ptr, space.succ_idx,
                       float(p), int(rng.integers(2**62)))


def random_schedule(space: SearchSpace, rng: np.random.Generator) -> np.ndarray:
    ident = np.arange(space.n_ops, dtype=np.int32)
    return mutate_schedule(space, ident, 1.0, rng)


def mutate_cls(cls: np.ndarray, cnt: np.ndarray, p: float, rng: np.random.Generator,
               free: bool = False) -> tuple[np.ndarray, np.ndarray]:
    if len(cls) < 2:
        return cls, cnt
    if free:  # unrestricted mapping: each size moves, with probability P, to any class or a new one
        hit = np.nonzero(rng.random(len(cls)) < p)[0]
        if len(hit) == 0:
            return cls, cnt
        ext = extend_cnt(cls, cnt)
        new = cls.copy()
        new[hit] = rng.integers(0, int(cls.max()) + 2, size=len(hit))
        new = canonical_free(new)
        return new, collapse_cnt(new, ext)
    flips = np.nonzero(rng.random(len(cls) - 1) < p)[0] + 1
    if len(flips) == 0:
        return cls, cnt
    ext = extend_cnt(cls, cnt)
    steps = np.diff(cls)
    steps[flips - 1] ^= 1
    new = np.concatenate([[0], np.cumsum(steps)]).astype(np.int64)
    return new, collapse_cnt(new, ext)


def mutate_cnt(cnt: np.ndarray, p: float, sigma_rel: float, rng: np.random.Generator) -> np.ndarray:
    hit = rng.random(len(cnt)) < p
    if not hit.any():
        return cnt
    out = cnt.copy()
    sigma = np.maximum(1.0, sigma_rel * cnt[hit])
    out[hit] = np.maximum(0, np.rint(rng.normal(cnt[hit], sigma))).astype(np.int64)
    return out


def mutate_planner(code: int, policies: tuple[int, ...], knobs: bool, p: float, rng: np.random.Generator,
                   recompute: int = 0) -> int:
    """`code` with each of its settings stepped with probability `p`; `recompute`: how many RECOMPUTE settings
    the recompute index steps over (ga.encoding.recompute_settings; 0: recompute off, the index kept)."""
    g = PlannerGene.unpack(code)
    policy, rec, la, wb, rc = g.policy, g.recency, g.lookahead, g.write_back, g.recompute
    if len(policies) > 1 and rng.random() < p:
        i = policies.index(policy) if policy in policies else 0
        policy = policies[(i + int(rng.integers(1, len(policies)))) % len(policies)]
    if knobs:
        if rng.random() < p:
            rec = int(np.clip(rec + (1 if rng.random() < 0.5 else -1), 0, len(RECENCY) - 1))
        if rng.random() < p:
            la = int(np.clip(la + (1 if rng.random() < 0.5 else -1), 0, len(LOOKAHEAD) - 1))
        if rng.random() < p:
            wb = 1 - wb
        if recompute and rng.random() < p:
            rc = int(np.clip(rc + (1 if rng.random() < 0.5 else -1), 0, recompute - 1))
    return PlannerGene(policy, rec, la, wb, rc).pack()


@njit(cache=True, inline="always")
def _sift_up(heap, i):  # pragma: no cover - compiled
    while i > 0:
        parent = (i - 1) >> 1
        if heap[i] < heap[parent]:
            t = heap[i]
            heap[i] = heap[parent]
            heap[parent] = t
            i = parent
        else:
            break


@njit(cache=True, inline="always")
def _sift_down(heap, i, size):  # pragma: no cover - compiled
    while True:
        c = 2 * i + 1
        if c >= size:
            break
        if c + 1 < size and heap[c + 1] < heap[c]:
            c += 1
        if heap[c] < heap[i]:
            t = heap[i]
            heap[i] = heap[c]
            heap[c] = t
            i = c
        else:
            break


@njit(cache=True)
def _ready_walk(parent, pos, pred_count, succ_ptr, succ_idx, p, seed):  # pragma: no cover - compiled
    """Ready ops live in a min-heap of their positions in the parent; a random pick removes any heap slot."""
    np.random.seed(seed)
    n = len(parent)
    indeg = pred_count.copy()
    heap = np.empty(n, dtype=np.int64)
    size = 0
    for v in range(n):
        if indeg[v] == 0:
            heap[size] = pos[v]
            size += 1
            _sift_up(heap, size - 1)
    out = np.empty(n, dtype=np.int32)
    for k in range(n):
        if p > 0.0 and size > 1 and np.random.random() < p:
            r = np.random.randint(0, size)
        else:
            r = 0
        key = heap[r]
        size -= 1
        if r < size:
            heap[r] = heap[size]
            _sift_down(heap, r, size)
            _sift_up(heap, r)
        v = parent[key]
        out[k] = v
        for j in range(succ_ptr[v], succ_ptr[v + 1]):
            w = succ_idx[j]
            indeg[w] -= 1
            if indeg[w] == 0:
                heap[size] = pos[w]
                size += 1
                _sift_up(heap, size - 1)
    return out
