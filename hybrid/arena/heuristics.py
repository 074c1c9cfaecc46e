"""Fast heuristics for static offsets; each returns a valid assignment, none proves anything.

- greedy by size (TFLite's `GreedyBySize`): largest first, each at the lowest offset free over its lifetime.
- best fit (XLA's heap simulator, `GlobalDecreasingSizeBestFitHeap`): in a given order, each buffer takes
  the smallest free gap that holds it, else the top; XLA keeps the best of a by-size and a by-duration order,
  and so do we (plus by area).
- MegEngine's simulation: walk time, free what ends, allocate what starts (largest first) best-fit from a
  free list of chunks in address order, growing the top chunk when nothing fits.

The layout loops are compiled with numba: n reaches 18,700 and the loops are quadratic.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numba as nb
import numpy as np

from hybrid.arena.problem import Arrays, Buffer, Problem


@dataclass(frozen=True)
class Solution:
    """Offsets for every buffer, the arena they span, who made them and in how long."""

    offsets: np.ndarray
    arena_bytes: int
    solver: str
    seconds: float
    proven_optimal: bool = False
    lower_bound: int = 0
    nodes: int = 0               # exact-search nodes spent (0 for the heuristics)


@nb.njit(cache=True)
def _align_up(x: int, a: int) -> int:
    r = x % a
    return x if r == 0 else x + a - r


@nb.njit(cache=True)
def _overlap(seg_lo, seg_hi, seg_first, b, c) -> bool:
    for i in range(seg_first[b], seg_first[b + 1]):
        for j in range(seg_first[c], seg_first[c + 1]):
            if seg_lo[i] < seg_hi[j] and seg_lo[j] < seg_hi[i]:
                return True
    return False


@nb.njit(cache=True)
def _gap(s, a, b_lo, b_hi, m, best_fit, cap):
    """Offset for `s` bytes aligned to `a` beside the occupied ranges [b_lo, b_hi)[:m]: the lowest gap that holds
    it (first fit) or the smallest (best fit), below `cap`; else the top; -1 when that is above `cap` too."""
    idx = np.argsort(b_lo[:m])
    cur = 0
    best = -1
    best_gap = np.int64(2 ** 62)
    for k in idx:
        lo = b_lo[k]
        hi = b_hi[k]
        st = _align_up(cur, a)
        if lo >= st + s and st + s <= cap:
            if not best_fit:
                return st
            gap = lo - cur
            if gap < best_gap:
                best_gap = gap
                best = st
        if hi > cur:
            cur = hi
    if best < 0:
        st = _align_up(cur, a)
        if st + s <= cap:
            best = st
    return best


@nb.njit(cache=True)
def _place_in_order(order, size, align, seg_lo, seg_hi, seg_first, span_lo, span_hi, best_fit, cap,
                    max_work=-1):
    """Place buffers in `order`: first fit (lowest offset) or best fit (smallest gap, else the top), below
    `cap`; a buffer no place below `cap` holds is left out (offset -1). `max_work` > 0: stop once that many
    placed buffers have been compared (a work budget, so a caller's time limit holds whatever the overlaps);
    returns (offsets, whether every buffer was placed or left out)."""
    n = len(size)
    off = np.full(n, -1, np.int64)
    placed = np.empty(n, np.int64)
    n_placed = 0
    b_lo = np.empty(n, np.int64)
    b_hi = np.empty(n, np.int64)
    work = 0
    for b in order:
        m = 0
        if max_work > 0:
            work += n_placed + 1
            if work > max_work:
                return off, False
        if size[b] > 0:
            for k in range(n_placed):
                c = placed[k]
                if span_lo[c] < span_hi[b] and span_lo[b] < span_hi[c]:
                    if _overlap(seg_lo, seg_hi, seg_first, b, c):
                        b_lo[m] = off[c]
                        b_hi[m] = off[c] + size[c]
                        m += 1
        work += m                       # the gap search sorts what overlaps
        off[b] = _gap(size[b], align[b], b_lo, b_hi, m, best_fit, cap)
        if size[b] > 0 and off[b] >= 0:
            placed[n_placed] = b
            n_placed += 1
    return off, True


NO_CAP = np.iinfo(np.int64).max // 2   # a cap no arena reaches: every buffer placed


def _spans(a: Arrays) -> tuple[np.ndarray, np.ndarray]:
    n = len(a.size)
    lo = np.full(n, np.iinfo(np.int64).max, np.int64)
    hi = np.full(n, np.iinfo(np.int64).min, np.int64)
    np.minimum.at(lo, a.seg_buf, a.seg_lo)
    np.maximum.at(hi, a.seg_buf, a.seg_hi)
    return lo, hi


def _finish(problem: Problem, off: np.ndarray, name: str, t0: float) -> Solution:
    a = problem.arrays
    arena = int((off + a.size).max()) if len(off) else 0
    lb = problem.peak_live()
    return Solution(off, arena, name, time.perf_counter() - t0, arena == lb, lb)


def placed_in_order(problem: Problem, order: np.ndarray, best_fit: bool, name: str, max_work: int = -1
                    ) -> Solution | None:
    """The buffers placed in `order`; None when `max_work` (buffer comparisons, > 0) ran out first."""
    t0 = time.perf_counter()
    a = problem.arrays
    lo, hi = _spans(a)
    off, done = _place_in_order(np.asarray(order, np.int64), a.size, a.align, a.seg_lo, a.seg_hi, a.seg_first,
                                lo, hi, best_fit, NO_CAP, max_work)
    return _finish(problem, off, name, t0) if done else None


def _durations(a: Arrays) -> np.ndarray:
    return np.bincount(a.seg_buf, weights=(a.seg_hi - a.seg_lo), minlength=len(a.size)).astype(np.int64)


def _size_order(a: Arrays, dur: np.ndarray | None = None) -> np.ndarray:
    """Size descending, longer lifetime first on ties (TFLite's order, and XLA's first)."""
    return np.lexsort((np.arange(len(a.size)), -(_durations(a) if dur is None else dur), -a.size))


def greedy_by_size(problem: Problem) -> Solution:
    """TFLite: size descending (longer lifetime first on ties), lowest free offset."""
    return placed_in_order(problem, _size_order(problem.arrays), False, "greedy-size")


def best_fit_by_size(problem: Problem, max_work: int = -1) -> Solution | None:
    """XLA's first order alone: best fit in decreasing size, then duration (the cheapest good one on large
    problems). None when `max_work` (> 0: buffer comparisons) ran out first."""
    return placed_in_order(problem, _size_order(problem.arrays), True, "best-fit-size", max_work)


@nb.njit(cache=True)
def _range_max(values, lo, hi, seg_buf, n):
    out = np.zeros(n, np.int64)
    for k in range(len(lo)):
        for s in range(lo[k], hi[k]):
            if values[s] > out[seg_buf[k]]:
                out[seg_buf[k]] = values[s]
    return out


def largest_section_total(a: Arrays) -> np.ndarray:
    """Per buffer, the most bytes live at any instant of its lifetime (MiniMalloc's `T`)."""
    points = np.unique(np.concatenate([a.seg_lo, a.seg_hi]))
    lo = np.searchsorted(points, a.seg_lo)
    hi = np.searchsorted(points, a.seg_hi)
    diff = np.zeros(len(points) + 1, np.int64)
    np.add.at(diff, lo, a.size[a.seg_buf])
    np.add.at(diff, hi, -a.size[a.seg_buf])
    return _range_max(np.cumsum(diff), lo, hi, a.seg_buf, len(a.size))


def best_fit(problem: Problem) -> Solution:
    """XLA's heap simulator: best fit in decreasing size, duration and area (XLA's orders), plus two that
    help on SOMAS dumps (decreasing size then earliest start; busiest instant then size); the best."""
    t0 = time.perf_counter()
    a = problem.arrays
    dur = _durations(a)
    idx = np.arange(len(a.size))
    start = np.full(len(a.size), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(start, a.seg_buf, a.seg_lo)
    orders = {"size": _size_order(a, dur), "duration": np.lexsort((idx, -a.size, -dur)),
              "area": np.lexsort((idx, -a.size, -(a.size * dur))), "size-start": np.lexsort((idx, start, -a.size)),
              "total": np.lexsort((idx, -a.size, -largest_section_total(a)))}
    best: Solution | None = None
    for key, order in orders.items():
        s = placed_in_order(problem, order, True, f"best-fit-{key}")
        if best is None or s.arena_bytes < best.arena_bytes:
            best = s
    assert best is not None
    return Solution(best.offsets, best.arena_bytes, best.solver, time.perf_counter() - t0, best.proven_optimal,
                    best.lower_bound)


@nb.njit(cache=True)
def _absorb(left, right, c_size, nxt, prv, spare, n_spare, tail):  # noqa: ANN001, ANN202
    """Merge free chunk `right` into its free left neighbour; the chunk record goes back to the spares."""
    c_size[left] += c_size[right]
    nxt[left] = nxt[right]
    if nxt[right] >= 0:
        prv[nxt[right]] = left
    else:
        tail = left
    spare[n_spare] = right
    return n_spare + 1, tail


@nb.njit(cache=True)
def _megengine(ev_time, ev_kind, ev_buf, size):
    """Chunks in address order as a linked list; alloc best-fit with split, free with merge, grow the top."""
    n = len(size)
    cap = 2 * n + 4
    c_off = np.zeros(cap, np.int64)
    c_size = np.zeros(cap, np.int64)
    c_free = np.zeros(cap, np.bool_)
    nxt = np.full(cap, -1, np.int64)
    prv = np.full(cap, -1, np.int64)
    spare = np.empty(cap, np.int64)
    n_spare = 0
    for k in range(cap - 1, -1, -1):
        spare[n_spare] = k
        n_spare += 1
    head = -1
    tail = -1
    chunk_of = np.full(n, -1, np.int64)
    off = np.zeros(n, np.int64)
    for e in range(len(ev_time)):
        b = ev_buf[e]
        need = size[b]
        if need == 0:
            continue
        if ev_kind[e] == 0:                       # free, merge with free neighbours
            c = chunk_of[b]
            c_free[c] = True
            p = prv[c]
            if p >= 0 and c_free[p]:
                n_spare, tail = _absorb(p, c, c_size, nxt, prv, spare, n_spare, tail)
                c = p
            q = nxt[c]
            if q >= 0 and c_free[q]:
                n_spare, tail = _absorb(c, q, c_size, nxt, prv, spare, n_spare, tail)
            continue
        best = -1                                  # alloc: smallest free chunk that holds it
        c = head
        while c >= 0:
            if c_free[c] and c_size[c] >= need and (best < 0 or c_size[c] < c_size[best]):
                best = c
            c = nxt[c]
        if best < 0:
            if tail >= 0 and c_free[tail]:          # grow the top free chunk
                c_size[tail] = need
                best = tail
            else:
                n_spare -= 1
                c = spare[n_spare]
                c_off[c] = 0 if tail < 0 else c_off[tail] + c_size[tail]
                c_size[c] = need
                c_free[c] = True
                prv[c] = tail
                nxt[c] = -1
                if tail >= 0:
                    nxt[tail] = c
                else:
                    head = c
                tail = c
                best = c
        if c_size[best] > need:                      # split: the rest stays free after it
            n_spare -= 1
            r = spare[n_spare]
            c_off[r] = c_off[best] + need
            c_size[r] = c_size[best] - need
            c_free[r] = True
            nxt[r] = nxt[best]
            prv[r] = best
            if nxt[best] >= 0:
                prv[nxt[best]] = r
            else:
                tail = r
            nxt[best] = r
            c_size[best] = need
        c_free[best] = False
        chunk_of[b] = best
        off[b] = c_off[best]
    return off


def megengine(problem: Problem) -> Solution:
    """MegEngine's best-fit simulation. A buffer with gaps is held over its whole span (one offset)."""
    t0 = time.perf_counter()
    a = problem.arrays
    n = len(a.size)
    lo, hi = _spans(a)
    unit = int(np.lcm.reduce(a.align)) if n else 1
    sz = ((a.size + unit - 1) // unit) * unit
    t = np.concatenate([lo, hi])
    kind = np.concatenate([np.ones(n, np.int64), np.zeros(n, np.int64)])
    buf = np.concatenate([np.arange(n), np.arange(n)])
    order = np.lexsort((-np.concatenate([sz, sz]) * kind, kind, t))    # frees first, then largest allocs
    off = _megengine(t[order], kind[order], buf[order], sz)
    return _finish(problem, off, "megengine", t0)


@nb.njit(cache=True)
def _lowest_fill(size, align, width, br_first, br_lo, br_hi, sec_first, sec_buf):
    """See `lowest_fill`. level[s]: the top of what is placed in section s (bytes below it are taken or wasted);
    left[s]: unplaced buffers live in s."""
    n = len(size)
    n_sec = len(sec_first) - 1
    level = np.zeros(n_sec, np.int64)
    left = np.zeros(n_sec, np.int64)
    for s in range(n_sec):
        left[s] = sec_first[s + 1] - sec_first[s]
    placed = np.zeros(n, np.bool_)
    off = np.zeros(n, np.int64)
    big = np.int64(2) ** 62
    todo = n
    while todo > 0:
        L = big
        s0 = -1
        for s in range(n_sec):
            if left[s] > 0 and level[s] < L:
                L = level[s]
                s0 = s
        best = -1
        for q in range(sec_first[s0], sec_first[s0 + 1]):
            c = sec_buf[q]
            if placed[c]:
                continue
            fits = True
            for p in range(br_first[c], br_first[c + 1]):
                for s in range(br_lo[p], br_hi[p]):
                    if level[s] > L:
                        fits = False
                        break
                if not fits:
                    break
            if fits and (best < 0 or width[c] > width[best] or (width[c] == width[best] and size[c] > size[best])):
                best = c
        if best < 0:
            # nothing starts here: waste the run of sections at or below L up to its lower neighbour
            a = s0
            while a > 0 and level[a - 1] <= L:
                a -= 1
            e = s0
            while e + 1 < n_sec and level[e + 1] <= L:
                e += 1
            up = big
            if a > 0:
                up = level[a - 1]
            if e + 1 < n_sec and level[e + 1] < up:
                up = level[e + 1]
            for s in range(a, e + 1):
                level[s] = up
            continue
        o = _align_up(L, align[best])
        off[best] = o
        placed[best] = True
        todo -= 1
        for p in range(br_first[best], br_first[best + 1]):
            for s in range(br_lo[p], br_hi[p]):
                level[s] = o + size[best]
                left[s] -= 1
    return off


LOWEST_FILL_MAX = 5000      # exact.solve runs lowest_fill up to this many buffers (it is O(n x sections))


def lowest_fill(problem: Problem) -> Solution:
    """Fill the lowest cell first (Burke et al.'s best-fit for strip packing, with lifetimes fixed in time): the
    section with the lowest top takes the widest unplaced buffer live there whose whole lifetime stands no
    higher; when none does, that run of sections is raised to its lower neighbour (the bytes are wasted).
    Made for perfect and near-perfect packings, where placing by size or duration leaves holes
    (perfect packings of 250 buffers: best fit 1.3-1.45 x the optimum)."""
    t0 = time.perf_counter()
    from hybrid.arena.exact import prepare       # sections and members, as the exact search builds them

    p = prepare(problem)
    off = np.zeros(len(problem), np.int64)
    if len(p.size):
        off[p.idx] = _lowest_fill(p.size, p.align, p.width, p.br_first, p.br_lo, p.br_hi, p.sec_first, p.sec_buf)
    return _finish(problem, off, "lowest-fill", t0)


HEURISTICS = {"greedy-size": greedy_by_size, "best-fit": best_fit, "megengine": megengine}


def best_heuristic(problem: Problem, fill_up_to: int = 0) -> Solution:
    """The smallest arena among all heuristics (the exact search's first upper bound); `lowest_fill` too when
    the problem has at most `fill_up_to` buffers (`exact.solve` passes LOWEST_FILL_MAX; the default leaves
    `hybrid optimize`'s layouts and their counted work as they were)."""
    from hybrid.signals import interrupts_after

    t0 = time.perf_counter()
    # a Ctrl-C is acted on once they return: raised inside a kernel loading on its first call, it came out as
    # numba's "SystemError: CPUDispatcher(<function _place_in_order>) returned a result with an exception set"
    with interrupts_after():
        sols = [h(problem) for h in HEURISTICS.values()]
        if len(problem) <= fill_up_to:
            sols.append(lowest_fill(problem))
    best = min(sols, key=lambda s: s.arena_bytes)
    return Solution(best.offsets, best.arena_bytes, best.solver, time.perf_counter() - t0, best.proven_optimal,
                    best.lower_bound)


def warm_up() -> float:
    """Compile (or load from numba's cache) every heuristic's kernels, with the argument types of a real layout,
    on a small problem; the seconds it took. `load_kernels(repair=True)` calls it: a layout's first use in a
    process otherwise compiled them inside its time limit (1.9 s of a 2 s layout on a cold cache, which then
    found no layout)."""
    t0 = time.perf_counter()
    p = Problem([Buffer("a", 0, 2, 640), Buffer("b", 1, 3, 128), Buffer("c", 2, 4, 512), Buffer("d", 0, 4, 64),
                 Buffer("e", 3, 5, 1024)])
    best_heuristic(p)   # not lowest_fill: only exact.solve runs it (compiled there, on its first call)
    best_fit_by_size(p, max_work=1000)
    return time.perf_counter() - t0
