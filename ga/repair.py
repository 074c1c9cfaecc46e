"""Make a (CLS, CNT) pair a pool the planner can run (§5.3's capacity repair, plus minimum counts).

A pool is feasible when every class holds at least as many objects as one op
needs at once from it (`SearchSpace.class_need`) and its bytes fit the budget
(device memory minus the largest workspace). The least bytes a CLS can work
with — its *floor* — is the sum over classes of need x object size.
Repair:
1. if the floor does not fit, change the CLS: flip the class boundary that
   lowers the floor most, until it fits (merging sizes whose big ops differ
   lowers it; splitting a big class off small sizes lowers it too); if no
   flip helps, take the CLS with the lowest floor of all (`min_floor_cls`,
   an exact dynamic program over the contiguous partitions of TS);
2. raise each class to its minimum;
3. if the pool is over budget, lower every class above its minimum so that
   each gives up about the same bytes — the count drops in inverse proportion
   to the class's object size (the paper's example: CNT [8, 3] over 1 MB and
   4 MB classes, 8 MB too much, becomes [4, 2]).
The result always fits when `check_feasible` passed (the lowest floor fits).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from ga.encoding import SearchSpace, canonical, class_need_into, collapse_cnt, extend_cnt
from hybrid.errors import InfeasibleError
from hybrid.units import format_bytes


def floor_bytes(space: SearchSpace, cls: np.ndarray) -> int:
    return int((space.class_need(cls) * space.class_bytes(cls)).sum())


def fit_counts(space: SearchSpace, cls: np.ndarray, cnt: np.ndarray) -> tuple[np.ndarray, bool]:
    """Steps 2-3 for a fixed CLS: the repaired CNT and whether it fits."""
    nbytes = space.class_bytes(cls)
    need = space.class_need(cls)
    cnt = np.maximum(np.asarray(cnt, dtype=np.int64), need)
    if int((need * nbytes).sum()) > space.budget:
        return cnt, False
    excess = int((nbytes * cnt).sum()) - space.budget
    while excess > 0:
        active = np.nonzero((cnt > need) & (nbytes > 0))[0]
        share = excess / len(active)  # bytes each active class gives up
        delta = np.minimum(np.floor(share / nbytes[active]).astype(np.int64), cnt[active] - need[active])
        if delta.sum() == 0:
            # What is left is smaller than one object everywhere: drop one object from the smallest
            # class that covers the excess alone (the largest class when none does).
            covers = active[nbytes[active] >= excess]
            c = covers[np.argmin(nbytes[covers])] if len(covers) else active[np.argmax(nbytes[active])]
            cnt[c] -= 1
            excess -= int(nbytes[c])
            continue
        cnt[active] -= delta
        excess -= int((delta * nbytes[active]).sum())
    return cnt, True


def repair(space: SearchSpace, cls: np.ndarray, cnt: np.ndarray,
           free: bool = False) -> tuple[np.ndarray, np.ndarray, bool]:
    """A feasible (CLS, CNT) close to the given one; False only when no size-class pool fits at all.
    `free` (the unrestricted mapping): a CLS whose floor does not fit becomes the lowest-floor monotone one."""
    cls = canonical(cls, free)
    cnt = np.asarray(cnt, dtype=np.int64)
    if floor_bytes(space, cls) > space.budget:
        ext = extend_cnt(cls, cnt)
        cls = min_floor_cls(space)[0] if free else _lower_floor(space, cls)
        cnt = collapse_cnt(cls, ext)
    fixed, ok = fit_counts(space, cls, cnt)
    return cls, fixed, ok


def _lower_floor(space: SearchSpace, cls: np.ndarray) -> np.ndarray:
    steps = np.diff(cls).astype(np.int64)
    floor = floor_bytes(space, cls)
    while floor > space.budget:
        best, best_floor = _best_flip(space.use_ptr, space.use_size, space.use_count, space.ts_mem, steps)
        if best < 0 or best_floor >= floor:
            return min_floor_cls(space)[0]
        steps[best] ^= 1
        floor = best_floor
    return np.concatenate([[0], np.cumsum(steps)]).astype(np.int64)


def min_floor_cls(space: SearchSpace) -> tuple[np.ndarray, int]:
    """The CLS (contiguous classes over sorted sizes) with the lowest floor, and that floor."""
    size_ptr, size_op, size_cnt = _uses_by_size(space.use_ptr, space.use_size, space.use_count, space.n_sizes)
    start = _min_floor(size_ptr, size_op, size_cnt, space.ts_mem, space.n_ops)
    cls = np.zeros(space.n_sizes, dtype=np.int64)
    # start[j] = first size of the class that ends at size j in the best partition of sizes 0..j.
    bounds = []
    j = space.n_sizes - 1
    while j >= 0:
        bounds.append(int(start[j]))
        j = int(start[j]) - 1
    for b in bounds:
        if b > 0:
            cls[b:] += 1
    return cls, floor_bytes(space, cls)


def check_feasible(space: SearchSpace) -> None:
    """Raise a clear error when no size-class pool can run the graph on this device."""
    cls, floor = min_floor_cls(space)
    if floor > space.budget:
        ws = space.device.usable_bytes - space.budget
        raise InfeasibleError(
            f"no size-class pool fits: the ops need at least {format_bytes(floor)} of objects at once plus "
            f"{format_bytes(ws)} of workspace, but the device has {format_bytes(space.device.usable_bytes)} usable; "
            "give more --memory")


@njit(cache=True)
def _floor_of(use_ptr, use_size, use_count, ts, cls, n_classes, need, acc):  # pragma: no cover - compiled
    need[:n_classes] = 0
    class_need_into(use_ptr, use_size, use_count, cls, need, acc)
    total = 0.0
    for i in range(len(ts)):  # the class's object size is its largest (last) size
        if i == len(ts) - 1 or cls[i + 1] != cls[i]:
            total += float(need[cls[i]]) * float(ts[i])
    return total


@njit(cache=True)
def _best_flip(use_ptr, use_size, use_count, ts, steps):  # pragma: no cover - compiled
    """The class boundary whose flip lowers the floor most: (index into steps, new floor); (-1, inf) if none."""
    n = len(ts)
    cls = np.zeros(n, dtype=np.int64)
    need = np.zeros(n, dtype=np.int64)
    acc = np.zeros(n, dtype=np.int64)
    best = -1
    best_floor = np.inf
    for i in range(len(steps)):
        steps[i] ^= 1
        for k in range(1, n):
            cls[k] = cls[k - 1] + steps[k - 1]
        f = _floor_of(use_ptr, use_size, use_count, ts, cls, cls[n - 1] + 1, need, acc)
        steps[i] ^= 1
        if f < best_floor:
            best = i
            best_floor = f
    return best, best_floor


@njit(cache=True)
def _uses_by_size(use_ptr, use_size, use_count, n_sizes):  # pragma: no cover - compiled
    """Transpose the per-op (size, count) lists to per-size (op, count) lists."""
    n = len(use_size)
    ptr = np.zeros(n_sizes + 1, dtype=np.int64)
    for k in range(n):
        ptr[use_size[k] + 1] += 1
    for s in range(n_sizes):
        ptr[s + 1] += ptr[s]
    fill = ptr[:-1].copy()
    ops = np.empty(n, dtype=np.int64)
    cnts = np.empty(n, dtype=np.int64)
    for o in range(len(use_ptr) - 1):
        for k in range(use_ptr[o], use_ptr[o + 1]):
            s = use_size[k]
            ops[fill[s]] = o
            cnts[fill[s]] = use_count[k]
            fill[s] += 1
    return ptr, ops, cnts


@njit(cache=True)
def _min_floor(size_ptr, size_op, size_cnt, ts, n_ops):  # pragma: no cover - compiled
    """best[j+1] = min over i <= j of best[i] + need(i..j) * ts[j]; returns the argmin i per j."""
    n = len(ts)
    best = np.full(n + 1, np.inf)
    best[0] = 0.0
    start = np.zeros(n, dtype=np.int64)
    acc = np.zeros(n_ops, dtype=np.int64)
    for i in range(n):
        need = 0
        for j in range(i, n):
            for k in range(size_ptr[j], size_ptr[j + 1]):
                o = size_op[k]
                acc[o] += size_cnt[k]
                if acc[o] > need:
                    need = acc[o]
            cost = best[i] + float(need) * float(ts[j])
            if cost < best[j + 1]:
                best[j + 1] = cost
                start[j] = i
        for j in range(i, n):
            for k in range(size_ptr[j], size_ptr[j + 1]):
                acc[size_op[k]] = 0
    return start
