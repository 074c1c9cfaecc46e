"""Repair under a fixed top: best fit below a capacity, then evict-and-reinsert until everything fits.

Best fit raises the arena whenever no gap holds a buffer; on SOMAS training dumps (pangu_2.6B) a handful of
buffers just after the peak end up above 1.001 x peak although the bytes live there are a few percent below
it: fragmentation, not bytes. Here the top is fixed instead. A buffer that fits no gap below the capacity
takes the offset whose conflicting buffers are cheapest to move (by default fewest: each counts 1 plus how
often it was moved already, as in negotiated-congestion routing, so the search does not cycle; weighting by
bytes or area made the chains diverge on pangu_2.6B), looking one step ahead: of the cheapest windows, the
one whose evicted buffers best fit puts back below the top. Those left over wait their turn (largest first);
the search restarts from best fit with a new seed when an attempt diverges. An eviction budget bounds the
work, so the result does not depend on the machine's load (seeded: the same offsets on every run; a
`deadline`, where given, is a safety cap checked between attempts).
"""
from __future__ import annotations

import time

import numba as nb
import numpy as np

from hybrid.arena.heuristics import (Solution, _align_up, _gap, _overlap, _place_in_order, _spans,
                                     largest_section_total)
from hybrid.arena.problem import Buffer, Problem


@nb.njit(cache=True)
def _conflicts(b, off, size, seg_lo, seg_hi, seg_first, span_lo, span_hi, out):
    """Placed buffers that meet `b` in time (size > 0) into `out`; their count."""
    m = 0
    for c in range(len(size)):
        if c == b or off[c] < 0 or size[c] == 0:
            continue
        if span_lo[c] < span_hi[b] and span_lo[b] < span_hi[c]:
            if _overlap(seg_lo, seg_hi, seg_first, b, c):
                out[m] = c
                m += 1
    return m


@nb.njit(cache=True)
def _best_gap(b, cs, m, off, size, align, cap):
    """Best fit (smallest gap) for `b` among the placed buffers `cs[:m]`, below `cap`; -1 if none."""
    lo = np.empty(m, np.int64)
    hi = np.empty(m, np.int64)
    for k in range(m):
        lo[k] = off[cs[k]]
        hi[k] = off[cs[k]] + size[cs[k]]
    return _gap(size[b], align[b], lo, hi, m, True, cap)


@nb.njit(cache=True)
def _try(b, x, cs, m, off, size, align, seg_lo, seg_hi, seg_first, span_lo, span_hi, cap, moved, ev, ev_off, cs2,
         commit, pending, n_pending, wt_of):
    """Put `b` at `x`, evict what it meets there, re-place those by best fit below `cap`. Committed: the
    ones left over go to `pending` (their count returned). Not committed: undo, return their weighted bytes."""
    ne = 0
    for k in range(m):
        c = cs[k]
        if off[c] < x + size[b] and x < off[c] + size[c]:
            ev[ne] = c
            ev_off[ne] = off[c]
            ne += 1
            off[c] = -1
    off[b] = x
    # largest first
    keys = np.empty(ne, np.int64)
    for k in range(ne):
        keys[k] = -size[ev[k]]
    o = np.argsort(keys, kind="mergesort")
    left = 0.0
    n_left = 0
    for k in o:
        c = ev[k]
        mc = _conflicts(c, off, size, seg_lo, seg_hi, seg_first, span_lo, span_hi, cs2)
        y = _best_gap(c, cs2, mc, off, size, align, cap)
        if y >= 0:
            off[c] = y
        else:
            left += wt_of[c] * (1.0 + moved[c])
            if commit:
                moved[c] += 1
                pending[n_pending + n_left] = c
            n_left += 1
    if commit:
        return n_left
    for k in range(ne):
        off[ev[k]] = ev_off[k]
    off[b] = -1
    return left


@nb.njit(cache=True)
def _repair(off0, pending0, size, align, seg_lo, seg_hi, seg_first, span_lo, span_hi, cap, max_moves, seed,
            lookahead, wt_of, max_pending):
    """From best fit's `off0` with `pending0` left out: offsets all below `cap` and the moves spent, or offsets
    with -1 left where `max_moves` ran out or more than `max_pending` buffers wait (the chain diverges)."""
    np.random.seed(seed)
    n = len(size)
    off = off0.copy()
    moved = np.zeros(n, np.int64)
    cs = np.empty(n, np.int64)
    cs2 = np.empty(n, np.int64)
    pending = np.empty(n, np.int64)
    n_pending = len(pending0)
    pending[:n_pending] = pending0
    moves = 0
    while 0 < n_pending <= max_pending and moves < max_moves:
        # the largest pending buffer goes first (small ones fit the gaps it leaves)
        k_best = 0
        for k in range(1, n_pending):
            if size[pending[k]] > size[pending[k_best]]:
                k_best = k
        b = pending[k_best]
        n_pending -= 1
        pending[k_best] = pending[n_pending]
        m = _conflicts(b, off, size, seg_lo, seg_hi, seg_first, span_lo, span_hi, cs)
        x = _best_gap(b, cs, m, off, size, align, cap)
        if x >= 0:
            off[b] = x
            continue
        if size[b] > cap:
            off[b] = 0          # cannot fit at all: leave it (the caller sees the arena exceed cap)
            continue
        # the cheapest window [x, x + size) below cap: candidates are 0, each conflict's top, each
        # conflict's bottom minus size (aligned), and cap - size
        cand = np.empty(2 * m + 2, np.int64)
        nc = 0
        cand[nc] = 0
        nc += 1
        top = (cap - size[b]) // align[b] * align[b]
        cand[nc] = top
        nc += 1
        for k in range(m):
            c = cs[k]
            y = _align_up(off[c] + size[c], align[b])
            if y <= top:
                cand[nc] = y
                nc += 1
            y = (off[c] - size[b]) // align[b] * align[b]
            if 0 <= y:
                cand[nc] = y
                nc += 1
        # cost(x) = W(bottom < x + size) - W(top <= x): prefix sums over the conflicts sorted both ways
        w = np.empty(m, np.float64)
        bot = np.empty(m, np.int64)
        tops = np.empty(m, np.int64)
        for k in range(m):
            c = cs[k]
            w[k] = wt_of[c] * (1.0 + moved[c])
            bot[k] = off[c]
            tops[k] = off[c] + size[c]
        ob = np.argsort(bot)
        ot = np.argsort(tops)
        bot_s = bot[ob]
        top_s = tops[ot]
        wb = np.zeros(m + 1)
        wt = np.zeros(m + 1)
        for k in range(m):
            wb[k + 1] = wb[k] + w[ob[k]]
            wt[k + 1] = wt[k] + w[ot[k]]
        costs = np.empty(nc, np.float64)
        for i in range(nc):
            x = cand[i]
            costs[i] = wb[np.searchsorted(bot_s, x + size[b])] - wt[np.searchsorted(top_s, x, side="right")]
            costs[i] *= 1.0 + 0.01 * np.random.random()
        oc = np.argsort(costs)
        # look one step ahead: evict, place b, put the evicted back by best fit; keep the candidate that
        # leaves the fewest (weighted) bytes pending
        best_x = -1
        best_left = np.inf
        ev = np.empty(m, np.int64)
        ev_off = np.empty(m, np.int64)
        for r in range(min(lookahead, nc)):
            x = cand[oc[r]]
            left = _try(b, x, cs, m, off, size, align, seg_lo, seg_hi, seg_first, span_lo, span_hi, cap, moved,
                        ev, ev_off, cs2, False, pending, n_pending, wt_of)
            if left < best_left:
                best_left = left
                best_x = x
                if left == 0:
                    break
        n_new = _try(b, best_x, cs, m, off, size, align, seg_lo, seg_hi, seg_first, span_lo, span_hi, cap, moved,
                     ev, ev_off, cs2, True, pending, n_pending, wt_of)
        moves += 1
        n_pending += int(n_new)
    for k in range(n_pending):
        off[pending[k]] = -1
    return off, moves


def repair_fit(problem: Problem, capacity: int, max_moves: int = 5_000, seed: int = 0,
               order: np.ndarray | None = None, lookahead: int = 16, weight: np.ndarray | None = None,
               attempt_moves: int = 300, max_pending: int = 8, deadline: float | None = None
               ) -> tuple[np.ndarray | None, int]:
    """Offsets with every buffer below `capacity`, or None when `max_moves` evictions did not get there;
    and the evictions spent. Best fit (in the busiest-instant order unless `order` is given) runs once;
    the repair then restarts from it with a new seed whenever an attempt spends `attempt_moves` or leaves
    more than `max_pending` buffers waiting (a chain that diverges rarely comes back). Each eviction is
    weighted by `weight` (default 1 per buffer: moving few buffers, whatever their size, is what works on
    pangu_2.6B; by bytes or area the chains diverge). `deadline` (time.perf_counter): a safety cap checked
    between attempts (None when it stops the repair)."""
    a = problem.arrays
    lo, hi = _spans(a)
    if order is None:
        order = np.lexsort((np.arange(len(a.size)), -a.size, -largest_section_total(a)))
    w = np.ones(len(a.size)) if weight is None else np.asarray(weight, np.float64)
    args = (a.size, a.align, a.seg_lo, a.seg_hi, a.seg_first, lo, hi, int(capacity))
    order = np.asarray(order, np.int64)
    off0, _ = _place_in_order(order, *args[:-1], True, args[-1])  # best fit below the capacity
    pending0 = order[off0[order] < 0]                              # left out, in layout order
    if not len(pending0):
        return off0, 0
    if (a.size > capacity).any() or len(pending0) > max_pending:
        return None, 0          # every attempt would stop at once: more left out than may wait
    spent = 0
    k = 0
    while spent < max_moves and (deadline is None or time.perf_counter() < deadline):
        off, moves = _repair(off0, pending0, *args, min(attempt_moves, max_moves - spent), seed + k, lookahead, w,
                             max_pending)
        spent += max(int(moves), 1)
        k += 1
        if not (off < 0).any():
            return off, spent
    return None, spent


def repair(problem: Problem, start: Solution, max_moves: int = 5_000,
           targets: tuple[float, ...] = (1.0, 1.0005, 1.001)) -> Solution:
    """Lower `start`'s arena by repair: the lowest of `targets` x peak (below `start`'s arena) reached within
    `max_moves` evictions per target, tried from the lowest up; `start` when none is reached."""
    t0 = time.perf_counter()
    peak = problem.peak_live()
    spent = 0
    for f in sorted(targets):
        cap = int(peak * f)
        if cap >= start.arena_bytes:
            break
        off, moves = repair_fit(problem, cap, max_moves)
        spent += moves
        if off is not None:
            arena = int((off + problem.arrays.size).max()) if len(off) else 0
            return Solution(off, arena, f"{start.solver}+repair", start.seconds + time.perf_counter() - t0,
                            arena == peak, peak, spent)
    return start


def warm_up() -> float:
    """Compile (or load from numba's cache) the repair's kernels, with the argument types of every real call, on a
    two-buffer problem; the seconds it took. Its first use in a process otherwise compiles them inside whatever
    time limit calls it: on a fresh install the README command's second run spent its baselines' share compiling
    them in the first baseline's layout (7-10 s on 2 cores) and printed no baseline row."""
    t0 = time.perf_counter()
    p = Problem([Buffer("a", 0, 2, 64), Buffer("b", 1, 3, 64)])
    a = p.arrays
    lo, hi = _spans(a)
    args = (a.size, a.align, a.seg_lo, a.seg_hi, a.seg_first, lo, hi, int(p.peak_live()))
    off0, _ = _place_in_order(np.arange(len(a.size), dtype=np.int64), *args[:-1], True, args[-1])
    off0 = off0.copy()
    off0[1] = -1      # one buffer left out: the repair's whole path runs once
    _repair(off0, np.array([1], np.int64), *args, 1, 0, 16, np.ones(len(a.size)), 8)
    return time.perf_counter() - t0
