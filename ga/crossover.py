"""Crossover (§5.2-5.3): two parents give two schedules and two allocations, so four children.

Schedules: child 1 is parent 2's first CR ops, then the remaining ops in
parent 1's order (child 2 the other way round). A prefix of a topological
order contains all predecessors of its ops, and the rest keeps a topological
parent's relative order, so the child is topological too.

Allocations: CLS is cut at one point and glued (the tail raised by the
minimal amount that restores monotonicity); CNT is cut at the same point in
its per-size form CNT_EXT and averaged back over each child class.
"""
from __future__ import annotations

import numpy as np

from ga.encoding import canonical, collapse_cnt, extend_cnt


def cross_schedules(s1: np.ndarray, s2: np.ndarray, cr: int) -> tuple[np.ndarray, np.ndarray]:
    return _prefix_then_rest(s2, s1, cr), _prefix_then_rest(s1, s2, cr)


def _prefix_then_rest(head: np.ndarray, tail: np.ndarray, cr: int) -> np.ndarray:
    taken = np.zeros(len(head), dtype=np.bool_)
    taken[head[:cr]] = True
    return np.concatenate([head[:cr], tail[~taken[tail]]]).astype(np.int32, copy=False)


def cross_allocations(cls1: np.ndarray, cnt1: np.ndarray, cls2: np.ndarray, cnt2: np.ndarray,
                      cr: int, free: bool = False) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """((cls_c1, cnt_c1), (cls_c2, cnt_c2)): child 1 = parent 2's first CR sizes + parent 1's rest (as in Figure 5).
    `free`: the unrestricted mapping, glued as is (no monotone repair), classes renumbered."""
    ext1 = extend_cnt(cls1, cnt1)
    ext2 = extend_cnt(cls2, cnt2)
    out = []
    for (ca, ea), (cb, eb) in (((cls2, ext2), (cls1, ext1)), ((cls1, ext1), (cls2, ext2))):
        cls = canonical(np.concatenate([ca[:cr], cb[cr:]]), free)
        ext = np.concatenate([ea[:cr], eb[cr:]])
        out.append((cls, collapse_cnt(cls, ext)))
    return out[0], out[1]
