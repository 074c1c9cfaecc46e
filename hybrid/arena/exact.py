"""Exact offsets: MiniMalloc's search (Moffitt, ASPLOS'23), compiled with numba, with a time limit.

The decision form asks whether every buffer fits below a capacity. Only canonical solutions are searched:
buffers are placed in non-decreasing (offset, static rank) order, each at its lowest feasible offset (the
top of the highest placed buffer it meets in time, aligned). Pruning:
- inference: time is cut into sections (between consecutive lifetime endpoints); a section's floor (no
  unplaced buffer there can sit lower: the last placed top, the search's monotone offset, and the least
  lowest-offset of its unplaced buffers) plus the bytes still unplaced in it must fit the capacity;
- dominance: a buffer whose lowest offset is at or above the lowest top any unplaced buffer could reach
  would leave a gap that buffer fits, so it is not tried.
The static rank comes from MiniMalloc's preorderings (by width, area, and the largest section total),
tried round-robin with a node limit that doubles, so one bad ordering does not eat the time.

Hatless pruning (MiniMalloc): a buffer with no unplaced buffer over it in time has its offset fixed whatever
comes next, so when the search below it fails, no other choice at that node can succeed.

At zero slack (every section's live bytes equal the capacity: a perfect packing asked at its peak) two
lowest-cell searches (`_search_tight`) run first in the round robin: no byte may be wasted, so the lowest
cell must be the bottom of a buffer whose sections all stand at that level, and only those are branched on.

`solve` minimises: the best heuristic is the first upper bound, the peak of live bytes the lower bound; it
asks for the peak first (success proves optimality), then bisects between what is proven and what is found.
The whole depth-first search runs compiled (numba) on an explicit stack of frames, so numba caches it: the
recursive version could not be cached and was compiled in every process (6 s on a quiet machine, 26 s on
this loaded one: all of `hybrid arena --csv`'s 20 s on a 150-buffer perfect packing the search solves in
0.01 s).
"""
from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import numba as nb
import numpy as np

from hybrid.arena.heuristics import LOWEST_FILL_MAX, Solution, best_heuristic
from hybrid.arena.repair import repair
from hybrid.arena.problem import Buffer, Problem

FOUND, INFEASIBLE, NODE_LIMIT, TIMEOUT = 1, 0, 2, 3
NO_LIMIT = 2 ** 62
HEURISTIC_ORDERS = ("WAT", "TAW", "TWA")
# decide's zero-slack searches (`_search_tight`) in its round robin, by their branching cell: the lowest section
# whose candidate is the widest, or the one with the fewest candidates (each solves instances the other does not)
TIGHT = {"tight-wide": 1, "tight-few": 0}
TIGHT_SHARE = 2           # each gets this many times the node limit of a preordering's run
QUICK_FIRST_NODES = 4     # solve(first_fit): nodes per buffer the search gets before the heuristics run ...
QUICK_FIRST_MAX = 2000    # ... on problems this small (above, a node costs milliseconds)


@dataclass(frozen=True)
class Prepared:
    """The search's static data: sections, each buffer's section ranges, overlaps, section members."""

    idx: np.ndarray          # search index -> problem buffer (buffers of size 0 are left out, at offset 0)
    size: np.ndarray
    align: np.ndarray
    br_first: np.ndarray
    br_lo: np.ndarray
    br_hi: np.ndarray
    ov_first: np.ndarray
    ov: np.ndarray
    sec_first: np.ndarray
    sec_buf: np.ndarray
    total: np.ndarray        # bytes live per section
    width: np.ndarray        # span of each buffer's lifetime
    sec_max: np.ndarray      # the largest section total each buffer meets


@nb.njit(cache=True)
def _overlaps(span_lo, span_hi, seg_lo, seg_hi, seg_first):
    """CSR of time overlaps, by a sweep over spans sorted by start (segments checked when spans meet)."""
    n = len(span_lo)
    order = np.argsort(span_lo)
    cnt = np.zeros(n, np.int64)
    pairs_a = np.empty(16, np.int64)
    pairs_b = np.empty(16, np.int64)
    m = 0
    for i in range(n):
        b = order[i]
        for j in range(i + 1, n):
            c = order[j]
            if span_lo[c] >= span_hi[b]:
                break
            hit = False
            for p in range(seg_first[b], seg_first[b + 1]):
                for q in range(seg_first[c], seg_first[c + 1]):
                    if seg_lo[p] < seg_hi[q] and seg_lo[q] < seg_hi[p]:
                        hit = True
            if hit:
                if m == len(pairs_a):
                    pairs_a = np.concatenate((pairs_a, np.empty(m, np.int64)))
                    pairs_b = np.concatenate((pairs_b, np.empty(m, np.int64)))
                pairs_a[m] = b
                pairs_b[m] = c
                m += 1
                cnt[b] += 1
                cnt[c] += 1
    first = np.zeros(n + 1, np.int64)
    for b in range(n):
        first[b + 1] = first[b] + cnt[b]
    fill = first[:-1].copy()
    ov = np.empty(first[n], np.int64)
    for k in range(m):
        a = pairs_a[k]
        c = pairs_b[k]
        ov[fill[a]] = c
        fill[a] += 1
        ov[fill[c]] = a
        fill[c] += 1
    return first, ov


def prepare(problem: Problem) -> Prepared:
    a = problem.arrays
    idx = np.flatnonzero(a.size > 0)
    remap = np.full(len(a.size), -1, np.int64)
    remap[idx] = np.arange(len(idx))
    keep = remap[a.seg_buf] >= 0
    seg_b = remap[a.seg_buf[keep]]
    seg_lo = a.seg_lo[keep]
    seg_hi = a.seg_hi[keep]
    order = np.lexsort((seg_lo, seg_b))
    seg_b, seg_lo, seg_hi = seg_b[order], seg_lo[order], seg_hi[order]
    n = len(idx)
    size = a.size[idx]
    seg_first = np.searchsorted(seg_b, np.arange(n + 1)).astype(np.int64)
    points = np.unique(np.concatenate([seg_lo, seg_hi]))
    br_lo = np.searchsorted(points, seg_lo).astype(np.int64)
    br_hi = np.searchsorted(points, seg_hi).astype(np.int64)
    n_sec = max(len(points) - 1, 0)
    diff = np.zeros(n_sec + 1, np.int64)
    np.add.at(diff, br_lo, size[seg_b])
    np.add.at(diff, br_hi, -size[seg_b])
    total = np.cumsum(diff)[:n_sec]
    # section members (CSR), for the floor of unplaced buffers
    counts = np.zeros(n_sec + 1, np.int64)
    np.add.at(counts, br_lo, 1)
    np.add.at(counts, br_hi, -1)
    per_sec = np.cumsum(counts)[:n_sec]
    sec_first = np.concatenate([[0], np.cumsum(per_sec)]).astype(np.int64)
    sec_buf = _members(br_lo, br_hi, seg_b, sec_first)
    span_lo = np.full(n, np.iinfo(np.int64).max, np.int64)
    span_hi = np.zeros(n, np.int64)
    np.minimum.at(span_lo, seg_b, seg_lo)
    np.maximum.at(span_hi, seg_b, seg_hi)
    ov_first, ov = _overlaps(span_lo, span_hi, seg_lo, seg_hi, seg_first)
    sec_max = _sec_max(br_lo, br_hi, seg_b, total, n)
    return Prepared(idx, size, a.align[idx], seg_first, br_lo, br_hi, ov_first, ov, sec_first, sec_buf, total,
                    span_hi - span_lo, sec_max)


@nb.njit(cache=True)
def _members(br_lo, br_hi, seg_b, sec_first):
    fill = sec_first[:-1].copy()
    out = np.empty(sec_first[-1], np.int64)
    for k in range(len(br_lo)):
        for s in range(br_lo[k], br_hi[k]):
            out[fill[s]] = seg_b[k]
            fill[s] += 1
    return out


@nb.njit(cache=True)
def _sec_max(br_lo, br_hi, seg_b, total, n):
    out = np.zeros(n, np.int64)
    for k in range(len(br_lo)):
        b = seg_b[k]
        for s in range(br_lo[k], br_hi[k]):
            if total[s] > out[b]:
                out[b] = total[s]
    return out


def preorder(p: Prepared, heuristic: str) -> np.ndarray:
    """Rank of each buffer under MiniMalloc's preordering letters (W width, A area, T section total, Z
    size), each descending; ties by index."""
    keys = {"W": p.width, "A": p.size * p.width, "T": p.sec_max, "Z": p.size}
    cols = [np.arange(len(p.size))] + [-keys[c] for c in reversed(heuristic)]
    order = np.lexsort(cols)
    rank = np.empty(len(order), np.int64)
    rank[order] = np.arange(len(order))
    return rank


# Ctrl-C and SIGTERM (`stop_on_signal`): the signal handler runs in the search's clock callback (`_now`, the only
# Python the compiled search calls), where a KeyboardInterrupt cannot get out (numba returned "SystemError: <built-in
# method _now ...> returned a result with an exception set" and the best layout was lost). So inside
# `stop_on_signal` the handler only sets this flag, and the clock then reads infinity: every deadline has passed,
# the search returns TIMEOUT within `mask + 1` nodes and `solve` hands back the best layout it has.
_stopped = False


def _clock() -> float:
    """The search's clock: time.perf_counter(), or infinity once a stop was asked for (`stop`)."""
    return math.inf if _stopped else time.perf_counter()


def stop() -> None:
    """Stop the running search as if its time were up: `solve` returns the best layout found so far."""
    global _stopped
    _stopped = True


def stopped() -> bool:
    """Whether `stop` was called (inside `stop_on_signal`: a Ctrl-C or SIGTERM came)."""
    return _stopped


@contextmanager
def stop_on_signal() -> Iterator[list[int]]:
    """While inside, a first Ctrl-C or SIGTERM calls `stop` instead of raising KeyboardInterrupt
    (`hybrid.signals.first_stop_sets`; the yielded list records the signal): the search then ends as if its time
    were up and keeps its best layout, for the caller to write. A second one exits at once under the CLI."""
    global _stopped
    from hybrid.signals import first_stop_sets

    _stopped = False
    try:
        with first_stop_sets(lambda signum: stop()) as hits:
            yield hits
    finally:
        _stopped = False


@nb.njit(cache=True)
def _now():
    with nb.objmode(t="float64"):
        t = _clock()
    return t


@dataclass(frozen=True)
class Outcome:
    """One decision search: FOUND (offsets valid under `capacity`), INFEASIBLE (proven) or TIMEOUT."""

    status: int
    offsets: np.ndarray | None
    nodes: int


def decide(problem: Problem, capacity: int, deadline: float, prepared: Prepared | None = None,
           orders: tuple[str, ...] = HEURISTIC_ORDERS, node_budget: int | None = None) -> Outcome:
    """Is there an assignment within `capacity`? Round-robin over preorderings with a doubling node limit
    (MiniMalloc's RoundRobin); any complete run that finds nothing proves infeasibility.

    `node_budget` caps the nodes of all runs together: the answer then depends on the work done, not on the
    machine's load (TIMEOUT when it runs out; pass deadline=math.inf for a purely deterministic search)."""
    p = prepare(problem) if prepared is None else prepared
    n = len(p.size)
    n_sec = len(p.total)
    # zero slack (every section's live bytes equal the capacity: a perfect packing asked at its peak): the
    # lowest-cell searches run first in the round robin, with TIGHT_SHARE times the others' node limit
    tight = n_sec > 0 and bool(np.all(p.total == capacity))
    runs = (tuple(TIGHT) if tight else ()) + tuple(orders)
    if not runs:
        raise ValueError("exact.decide: no search to run (orders is empty and the problem has slack)")
    ranks = [preorder(p, h) if h not in TIGHT else None for h in runs]
    hcodes = [np.array(["WAT".index(c) for c in h], np.int64) if h not in TIGHT else None for h in runs]
    bs_lo = np.full(n, n_sec, np.int64)
    bs_hi = np.zeros(n, np.int64)
    rb = np.repeat(np.arange(n), np.diff(p.br_first))
    np.minimum.at(bs_lo, rb, p.br_lo)
    np.maximum.at(bs_hi, rb, p.br_hi)
    long_ = bs_hi - bs_lo >= 2
    diff = np.zeros(n_sec + 1, np.int64)
    np.add.at(diff, bs_lo[long_], 1)
    np.add.at(diff, bs_hi[long_] - 1, -1)
    cuts0 = np.cumsum(diff)[:max(n_sec, 0)]
    limit = max(2 * n, 64)
    mask = 63 if n <= 2000 else 0     # large instances: a node costs milliseconds, so read the clock at each
    nodes = 0
    result: list[Outcome] = []

    def run() -> None:
        nonlocal limit, nodes
        while True:
            for run_name, hcode, rank in zip(runs, hcodes, ranks):
                # at zero slack a run's limit counts descents (placements that pass the checks: MiniMalloc's
                # node), elsewhere placements tried (measured on the challenging set: descents there solve F
                # in 2 M nodes no more, A, G, I, J, K take 1.3-14x the nodes); the budget counts placements
                # tried, as `Outcome.nodes` does
                run_limit = limit if hcode is not None else TIGHT_SHARE * limit
                left = NO_LIMIT
                if node_budget is not None:
                    if nodes >= node_budget:
                        result.append(Outcome(TIMEOUT, None, nodes))
                        return
                    left = node_budget - nodes
                if not tight:
                    left, run_limit = min(left, run_limit), NO_LIMIT
                if np.any(p.total > capacity):
                    result.append(Outcome(INFEASIBLE, None, nodes))
                    return
                off = np.full(n, -1, np.int64)
                sol = np.zeros(n, np.int64)
                counters = np.zeros(4, np.int64)
                if hcode is None:
                    st = _search_tight(p.size, p.align, p.width, p.br_first, p.br_lo, p.br_hi, bs_lo, bs_hi,
                                       p.sec_first, p.sec_buf, capacity, cuts0.copy(), sol, counters, left,
                                       deadline, mask, TIGHT[run_name], run_limit)
                else:
                    st = _search(hcode, p.width, p.size, p.align, rank.copy(), p.br_first, p.br_lo, p.br_hi, bs_lo,
                                 bs_hi, p.ov_first, p.ov, p.sec_first, p.sec_buf, capacity, off, np.zeros(n, np.int64),
                                 np.zeros(n_sec, np.int64), p.total.copy(), cuts0.copy(), sol,
                                 np.zeros(n_sec, np.int64), np.empty(n_sec, np.int64), counters, left, deadline, mask,
                                 run_limit)
                nodes += int(counters[0])
                if st == FOUND:
                    full = np.zeros(len(problem), np.int64)
                    full[p.idx] = sol
                    result.append(Outcome(FOUND, full, nodes))
                    return
                if st == NOT_FOUND:
                    result.append(Outcome(INFEASIBLE, None, nodes))
                    return
                if st == TIMEOUT or (st == NODE_LIMIT and node_budget is not None and nodes >= node_budget) \
                        or _clock() > deadline:
                    result.append(Outcome(TIMEOUT, None, nodes))
                    return
            limit *= 2

    with _stopping_on_signal():
        run()
    return result[0]


@contextmanager
def _stopping_on_signal() -> Iterator[None]:
    """Around a search that may run outside `stop_on_signal` (`decide` from `hybrid.arena.layout.exact_fit`, as
    `hybrid milp` lays out its start): a Ctrl-C or SIGTERM stops the search as if its time were up and is acted
    on once it has returned (KeyboardInterrupt, or the enclosing `stop_on_signal`'s stop). Raised in the clock
    callback instead, it broke off the command with "SystemError: <built-in function perf_counter> returned a
    result with an exception set" (helper-118: `hybrid milp` on a 2,872-op RNN, SIGTERM at 8 s)."""
    global _stopped
    from hybrid.signals import interrupts_after

    before = _stopped
    with interrupts_after(stop) as hits:
        try:
            yield
        finally:
            if hits:      # stopped by this signal, which follows now: not by `stop()` called for an enclosing solve
                _stopped = before


@dataclass(frozen=True)
class Solved(Solution):
    """`solve`'s answer: a `Solution` as ever (`solver` made the offsets, `seconds` is the whole call), and how
    that time went, so that a report can credit each part (a heuristic's layout kept after a long search that
    found nothing smaller was credited to the heuristic with all the search's seconds)."""

    start_solver: str = ""     # the heuristic layout the search started from ('' where the search came first)
    start_s: float = 0.0       # that layout's seconds (the heuristics', the repair's included)
    exact_s: float = 0.0       # seconds of the exact search (its set-up included)
    exact_ran: bool = False    # the exact search ran (False: the heuristics' layout was at the peak, or no time)
    interrupted: bool = False  # a stop (`stop`: Ctrl-C or SIGTERM) ended the search


def solve(problem: Problem, time_limit_s: float | None = 60.0, capacity: int | None = None,
          first_fit: bool = False, node_budget: int | None = None, start: Solution | None = None,
          repair_moves: int = 0) -> Solution:
    """The smallest arena found within the time limit (never larger than the best heuristic's).

    `capacity` caps the arena (default: the problem's, else none). `first_fit`: stop at the first assignment
    within the capacity (MiniMalloc's benchmark question) instead of minimising below it; the search then gets
    `QUICK_FIRST_NODES` per buffer before any heuristic runs (a perfect fit is often found in a few hundred
    nodes, faster than the heuristics' 15 ms), unless `start` is given; at zero slack (every section full at
    the capacity) it gets 90% of the limit (all of `node_budget`), the heuristics only what is left.
    `node_budget` caps the search's nodes over all its decisions (the peak gets half, each later target a
    third of what is left): with `time_limit_s=None` the result no longer depends on the machine's load.
    `start`: the best heuristic's solution when the caller has it already (default: computed here).
    `repair_moves`: when the heuristics end above 1.001 x peak, first repair under that top with this many
    evictions at most (`repair.repair`; ~12 ms each on pangu_2.6B's 18,692 buffers, not counted in the limit).
    Raises nothing on infeasibility: the result's arena then exceeds the capacity, which callers check.
    A Ctrl-C or SIGTERM stops it as its time limit would (`_stopping_on_signal`); outside `stop_on_signal` it is
    then raised as KeyboardInterrupt. Raised where it came, inside a compiled heuristic, it was a SystemError
    ("CPUDispatcher(<function _place_in_order>) returned a result with an exception set"; a library call on
    bert_large, Ctrl-C at 0.05 s).
    """
    if time_limit_s is None and node_budget is None:
        raise ValueError("exact.solve needs a time limit or a node budget")
    with _stopping_on_signal():
        return _solve(problem, time_limit_s, capacity, first_fit, node_budget, start, repair_moves)


def _solve(problem: Problem, time_limit_s: float | None, capacity: int | None, first_fit: bool,
           node_budget: int | None, start: Solution | None, repair_moves: int) -> Solution:
    t0 = time.perf_counter()
    # leave room to hand the result back within the limit
    deadline = math.inf if time_limit_s is None else t0 + 0.98 * time_limit_s
    nodes_left = math.inf if node_budget is None else node_budget
    used = 0
    cap = problem.capacity if capacity is None else capacity
    p: Prepared | None = None
    searched: Outcome | None = None      # the zero-slack search's answer, made before the heuristics
    quick_s = 0.0                        # ... and its seconds
    if first_fit and cap is not None and start is None and 0 < len(problem) <= QUICK_FIRST_MAX:
        # a tight fit (a perfect packing) is often found in a few hundred nodes: before the heuristics, which
        # cost more (15-50 ms with the repair) and cannot prove anything; at zero slack (every section full
        # at the capacity) they cannot reach it unless the search does, so the search gets 90% of the time
        p = prepare(problem)
        zero_slack = bool(len(p.total)) and bool(np.all(p.total == cap))
        if zero_slack:
            budget, until = node_budget, (deadline if time_limit_s is None else t0 + 0.9 * time_limit_s)
        else:
            budget, until = min(QUICK_FIRST_NODES * len(problem), node_budget or math.inf), deadline
        out = decide(problem, cap, until, p, node_budget=budget)
        used = out.nodes
        quick_s = time.perf_counter() - t0
        if out.status == FOUND:
            assert out.offsets is not None
            arena = int((out.offsets + problem.arrays.size).max())
            lb0 = problem.peak_live()
            return Solved(out.offsets, arena, "exact", quick_s, arena == lb0, lb0, used, exact_s=quick_s,
                          exact_ran=True)
        if zero_slack:
            searched = out
    t_heur = time.perf_counter()
    heur = best_heuristic(problem, LOWEST_FILL_MAX) if start is None else start
    if repair_moves > 0 and not _stopped:
        heur = repair(problem, heur, max_moves=repair_moves, targets=(1.001,))
    lb = heur.lower_bound
    best_off, best = heur.offsets, heur.arena_bytes
    solver = heur.solver
    # the heuristics' own seconds (a `start` given was timed by the caller); the exact search's from here on
    start_s = (time.perf_counter() - t_heur) if start is None else heur.seconds + (time.perf_counter() - t_heur)
    t_exact = time.perf_counter()

    def done(off: np.ndarray, arena: int, by: str, optimal: bool, bound: int, ran: bool = True) -> Solution:
        now = time.perf_counter()
        return Solved(off, arena, by, now - t0, optimal, bound, used, start_solver=heur.solver, start_s=start_s,
                      exact_s=quick_s + (now - t_exact if ran else 0.0), exact_ran=ran or quick_s > 0.0,
                      interrupted=_stopped)

    if best == lb or (first_fit and cap is not None and best <= cap):
        return done(best_off, best, solver, best == lb, lb, False)
    if searched is not None:             # the zero-slack search ran out or proved the capacity out of reach
        return done(best_off, best, solver, False, max(lb, cap + 1) if searched.status == INFEASIBLE else lb, False)
    if _clock() >= deadline:             # no time left (or stopped): the set-up below is not worth starting
        return done(best_off, best, solver, False, lb, False)
    p = prepare(problem) if p is None else p
    proven_lb = lb
    if _clock() >= deadline:
        return done(best_off, best, solver, False, lb)
    if first_fit and cap is not None:
        out = decide(problem, cap, deadline, p, node_budget=None if node_budget is None else node_budget - used)
        used += out.nodes
        if out.status == FOUND:
            assert out.offsets is not None
            arena = int((out.offsets + problem.arrays.size).max())
            return done(out.offsets, arena, "exact", arena == lb, lb)
        if out.status == INFEASIBLE:     # a capacity below the peak is refused at once: the peak still bounds
            proven_lb = max(lb, cap + 1)
        return done(best_off, best, solver, False, proven_lb)
    hi = best - 1 if cap is None else min(best - 1, cap)
    soft = lb            # targets below this timed out: not proven, but not worth retrying
    target = lb
    share = 0.5          # the peak gets half the time: success there proves optimality
    while max(proven_lb, soft) <= hi and _clock() < deadline and nodes_left >= 1:
        left = deadline - time.perf_counter()
        budget = None if node_budget is None else max(1, int(nodes_left * share))
        out = decide(problem, target, time.perf_counter() + left * share, p, node_budget=budget)
        used += out.nodes
        nodes_left -= out.nodes
        share = 0.34
        if out.status == FOUND:
            assert out.offsets is not None
            best_off = out.offsets
            best = int((out.offsets + problem.arrays.size).max())
            solver = "exact"
            hi = best - 1
        elif out.status == INFEASIBLE:
            proven_lb = target + 1
        else:
            soft = target + 1
        target = (max(proven_lb, soft) + hi) // 2
    return done(best_off, best, solver, best <= max(proven_lb, lb), proven_lb)


# --- dynamic temporal decomposition (MiniMalloc's DynamicallyDecompose) -------------------------------------
# Once no unplaced buffer crosses a section boundary, the buffers on either side are independent: each side
# is searched on its own (fresh canonical order), and a side that fails fails the node without thrashing
# through the other side's choices (SPLIT frames).

NOT_FOUND = 0


@nb.njit(cache=True)
def _rerank(sub, hcode, width, size, br_first, br_lo, br_hi, total, rank):
    """MiniMalloc's SubSolve preorder for one piece: keys (0 width, 1 area, 2 largest current section
    total), each descending, ties by buffer index; written into `rank` for the piece's buffers."""
    m = len(sub)
    keys = np.zeros((3, m), np.int64)
    for i in range(m):
        b = sub[i]
        keys[0, i] = width[b]
        keys[1, i] = width[b] * size[b]
        t = 0
        for q in range(br_first[b], br_first[b + 1]):
            for s in range(br_lo[q], br_hi[q]):
                if total[s] > t:
                    t = total[s]
        keys[2, i] = t
    order = np.argsort(sub, kind="mergesort")
    for h in range(len(hcode) - 1, -1, -1):
        k = -keys[hcode[h]][order]
        order = order[np.argsort(k, kind="mergesort")]
    for i in range(m):
        rank[sub[order[i]]] = i


@nb.njit(cache=True)
def _grow(a, need):
    """`a`, or a copy twice as long (or more) when `need` entries do not fit."""
    if need <= len(a):
        return a
    m = max(len(a), 16)
    while m < need:
        m *= 2
    out = np.empty(m, a.dtype)
    out[:len(a)] = a
    return out


SPLIT, SEARCH = 1, 0


# What `_search` and `_search_tight` share: each explicit-stack frame tries candidates (`_tick` counts each
# and stops the search at a limit) and, once done, hands its result to the parent (`_pop`).

@nb.njit(cache=True)
def _tick(counters, node_limit, descent_limit, mask, deadline):
    """Count one placement tried (counters[0]): NODE_LIMIT when the nodes reach `node_limit` or the descents
    (counters[3]) `descent_limit`, TIMEOUT past `deadline` (read every mask + 1 nodes), else NOT_FOUND (go on)."""
    counters[0] += 1
    if counters[0] >= node_limit or counters[3] >= descent_limit:
        return NODE_LIMIT
    if (counters[0] & mask) == 0 and _now() > deadline:
        return TIMEOUT
    return NOT_FOUND


@nb.njit(cache=True)
def _pop(d, f_type, f_cstart, ctop):
    """Frame d is done: its parent's depth (-1 past the root) and the candidate stack's top without the
    frame's candidates (a SEARCH frame's)."""
    if f_type[d] == SEARCH:
        ctop = f_cstart[d]
    return d - 1, ctop


@nb.njit(cache=True)
def _search(hcode, width, size, align, rank, br_first, br_lo, br_hi, bs_lo, bs_hi, ov_first, ov, sec_first, sec_buf,
            capacity, off, minoff, floor, total, cuts, sol, aff_mark, aff_list, counters, node_limit, deadline, mask,
            descent_limit):
    """The depth-first search over all buffers and sections; FOUND leaves offsets in `sol`. counters: [nodes
    (placements tried), stamp, backtracks, descents (placements that pass the checks)]; NODE_LIMIT when nodes
    reach `node_limit` or descents `descent_limit`. An explicit stack of frames instead of recursion, so numba
    caches it (a self-recursive function's cache segfaults on reload; compiling it took 6-26 s per process).

    Two kinds of frame. SEARCH: the canonical search of one part over sections [lo, hi): try each candidate
    (unplaced, lowest offset at or above the frame's monotone offset, not dominated) in (offset, rank) order,
    place it, check the sections, then descend; a failed candidate whose buffer has no unplaced buffer over
    it in time ("hatless", MiniMalloc) ends the frame, since its offset is then fixed whatever comes next.
    SPLIT (MiniMalloc's dynamic decomposition): once no unplaced buffer crosses a section boundary, each piece
    between zero-cut boundaries is searched on its own with a fresh rank from the current section totals; the
    first piece that fails fails the frame."""
    n = len(size)
    n_sec = len(total)
    big = np.int64(2) ** 62
    cap_d = 2 * n + 4
    f_type = np.zeros(cap_d, np.int64)
    f_pstart = np.zeros(cap_d, np.int64)
    f_plen = np.zeros(cap_d, np.int64)
    f_lo = np.zeros(cap_d, np.int64)
    f_hi = np.zeros(cap_d, np.int64)
    f_noff = np.zeros(cap_d, np.int64)
    f_nrank = np.zeros(cap_d, np.int64)
    f_cstart = np.zeros(cap_d, np.int64)
    f_ck = np.zeros(cap_d, np.int64)
    f_ci = np.zeros(cap_d, np.int64)
    f_b = np.zeros(cap_d, np.int64)
    f_hat = np.zeros(cap_d, np.int64)
    f_olog = np.zeros(cap_d, np.int64)
    f_slog = np.zeros(cap_d, np.int64)
    f_s = np.zeros(cap_d, np.int64)        # SPLIT: the next section to look at
    f_start = np.zeros(cap_d, np.int64)    # SPLIT: where the current piece starts
    pstack = np.empty(max(4 * n, 16), np.int64)   # parts (each SPLIT child's buffers)
    psave = np.empty(len(pstack), np.int64)       # their ranks before the child's re-rank
    pstack[:n] = np.arange(n)
    ptop = n
    cstack = np.empty(max(4 * n, 16), np.int64)   # candidates of each SEARCH frame, in order
    ckey = np.empty(n, np.int64)
    cbuf = np.empty(n, np.int64)
    ctop = 0
    olog_b = np.empty(max(4 * n, 16), np.int64)   # trail of lowest-offset changes (buffer, old value)
    olog_v = np.empty(len(olog_b), np.int64)
    otop = 0
    slog_s = np.empty(max(4 * n, 16), np.int64)   # trail of section-floor changes (section, old value)
    slog_v = np.empty(len(slog_s), np.int64)
    stop = 0
    d = 0
    f_type[0] = SPLIT
    f_plen[0] = n
    f_hi[0] = n_sec
    fresh = True
    ret = NOT_FOUND
    while True:
        finish = False
        if f_type[d] == SPLIT:
            if not fresh:
                c0 = f_pstart[d + 1]
                for i in range(c0, c0 + f_plen[d + 1]):
                    rank[pstack[i]] = psave[i]
                ptop = c0
                if ret != FOUND:
                    finish = True
                else:
                    f_start[d] = f_hi[d + 1]
            if not finish:
                pushed = False
                p0 = f_pstart[d]
                p1 = p0 + f_plen[d]
                s = f_s[d]
                while s < f_hi[d]:
                    if s + 1 < f_hi[d] and cuts[s] != 0:
                        s += 1
                        continue
                    end = s + 1
                    start = f_start[d]
                    m = 0
                    for i in range(p0, p1):
                        b = pstack[i]
                        if off[b] < 0 and bs_lo[b] < end and start < bs_hi[b]:
                            m += 1
                    if m > 0:
                        pstack = _grow(pstack, ptop + m)
                        psave = _grow(psave, ptop + m)
                        q = ptop
                        for i in range(p0, p1):
                            b = pstack[i]
                            if off[b] < 0 and bs_lo[b] < end and start < bs_hi[b]:
                                pstack[q] = b
                                psave[q] = rank[b]
                                q += 1
                        _rerank(pstack[ptop:ptop + m], hcode, width, size, br_first, br_lo, br_hi, total, rank)
                        f_s[d] = s + 1
                        e = d + 1
                        f_type[e] = SEARCH
                        f_pstart[e] = ptop
                        f_plen[e] = m
                        f_lo[e] = start
                        f_hi[e] = end
                        f_noff[e] = 0
                        f_nrank[e] = -1
                        ptop += m
                        pushed = True
                        break
                    f_start[d] = end
                    s += 1
                if pushed:
                    d += 1
                    fresh = True
                    continue
                ret = FOUND
                finish = True
        else:
            p0 = f_pstart[d]
            p1 = p0 + f_plen[d]
            s_lo = f_lo[d]
            s_hi = f_hi[d]
            if fresh:
                f_cstart[d] = ctop
                f_ck[d] = 0
                f_ci[d] = 0
                min_h = big
                m = 0
                for i in range(p0, p1):
                    b = pstack[i]
                    if off[b] < 0:
                        m += 1
                        h = minoff[b] + size[b]
                        if h < min_h:
                            min_h = h
                if m == 0:
                    ret = FOUND
                    finish = True
                else:
                    k = 0
                    node_off = f_noff[d]
                    node_rank = f_nrank[d]
                    for i in range(p0, p1):
                        b = pstack[i]
                        if off[b] < 0:
                            o = minoff[b]
                            if o < node_off or (o == node_off and rank[b] < node_rank) or o >= min_h:
                                continue
                            cbuf[k] = b
                            ckey[k] = o * n + rank[b]
                            k += 1
                    order = np.argsort(ckey[:k])
                    cstack = _grow(cstack, ctop + k)
                    for i in range(k):
                        cstack[ctop + i] = cbuf[order[i]]
                    ctop += k
                    f_ck[d] = k
            else:
                b = f_b[d]
                for s in range(bs_lo[b], bs_hi[b] - 1):
                    cuts[s] += 1
                while stop > f_slog[d]:
                    stop -= 1
                    floor[slog_s[stop]] = slog_v[stop]
                while otop > f_olog[d]:
                    otop -= 1
                    minoff[olog_b[otop]] = olog_v[otop]
                for q in range(br_first[b], br_first[b + 1]):
                    for s in range(br_lo[q], br_hi[q]):
                        total[s] += size[b]
                off[b] = -1
                if ret != NOT_FOUND:
                    finish = True
                elif f_hat[d] == 0:
                    counters[2] += 1
                    finish = True
            if not finish:
                pushed = False
                ret = NOT_FOUND
                while f_ci[d] < f_ck[d]:
                    b = cstack[f_cstart[d] + f_ci[d]]
                    f_ci[d] += 1
                    ret = _tick(counters, node_limit, descent_limit, mask, deadline)
                    if ret != NOT_FOUND:
                        break
                    o = minoff[b]
                    off[b] = o
                    sol[b] = o
                    height = o + size[b]
                    f_olog[d] = otop
                    f_slog[d] = stop
                    counters[1] += 1
                    stamp = counters[1]
                    n_aff = 0
                    hat = 0
                    olog_b = _grow(olog_b, otop + ov_first[b + 1] - ov_first[b])
                    olog_v = _grow(olog_v, len(olog_b))
                    for j in range(ov_first[b], ov_first[b + 1]):
                        c = ov[j]
                        if off[c] >= 0:
                            continue
                        hat = 1
                        if minoff[c] < height:
                            olog_b[otop] = c
                            olog_v[otop] = minoff[c]
                            otop += 1
                            r = height % align[c]
                            minoff[c] = height if r == 0 else height + align[c] - r
                            for q in range(br_first[c], br_first[c + 1]):
                                for s in range(br_lo[q], br_hi[q]):
                                    if aff_mark[s] != stamp:
                                        aff_mark[s] = stamp
                                        aff_list[n_aff] = s
                                        n_aff += 1
                    n_own = 0
                    for q in range(br_first[b], br_first[b + 1]):
                        n_own += br_hi[q] - br_lo[q]
                    slog_s = _grow(slog_s, stop + n_own + n_aff)
                    slog_v = _grow(slog_v, len(slog_s))
                    for q in range(br_first[b], br_first[b + 1]):
                        for s in range(br_lo[q], br_hi[q]):
                            slog_s[stop] = s
                            slog_v[stop] = floor[s]
                            stop += 1
                            floor[s] = height
                            total[s] -= size[b]
                    for j in range(n_aff):
                        s = aff_list[j]
                        lo = big
                        for q in range(sec_first[s], sec_first[s + 1]):
                            c = sec_buf[q]
                            if off[c] < 0 and minoff[c] < lo:
                                lo = minoff[c]
                        if lo != big and floor[s] < lo:
                            slog_s[stop] = s
                            slog_v[stop] = floor[s]
                            stop += 1
                            floor[s] = lo
                    ok = True
                    for s in range(s_lo, s_hi):
                        f = floor[s]
                        if f < o:
                            f = o
                        if f + total[s] > capacity:
                            ok = False
                            break
                    if ok:
                        n_cut = 0
                        for s in range(bs_lo[b], bs_hi[b] - 1):
                            cuts[s] -= 1
                            if cuts[s] == 0 and s_lo < s + 1 < s_hi:
                                n_cut += 1
                        f_b[d] = b
                        f_hat[d] = hat
                        counters[3] += 1
                        e = d + 1
                        f_type[e] = SPLIT if n_cut > 0 else SEARCH
                        f_pstart[e] = p0
                        f_plen[e] = p1 - p0
                        f_lo[e] = s_lo
                        f_hi[e] = s_hi
                        f_noff[e] = o
                        f_nrank[e] = rank[b]
                        f_s[e] = s_lo
                        f_start[e] = s_lo
                        pushed = True
                        break
                    while stop > f_slog[d]:
                        stop -= 1
                        floor[slog_s[stop]] = slog_v[stop]
                    while otop > f_olog[d]:
                        otop -= 1
                        minoff[olog_b[otop]] = olog_v[otop]
                    for q in range(br_first[b], br_first[b + 1]):
                        for s in range(br_lo[q], br_hi[q]):
                            total[s] += size[b]
                    off[b] = -1
                    if hat == 0:
                        break
                if pushed:
                    d += 1
                    fresh = True
                    continue
                if ret == NOT_FOUND:
                    counters[2] += 1
                finish = True
        d, ctop = _pop(d, f_type, f_cstart, ctop)     # the frame is done with `ret`: hand it to the parent
        if d < 0:
            return ret
        fresh = False


# --- zero slack: every section's live bytes equal the capacity (a perfect packing asked at its peak) --------
# No byte may be wasted anywhere, so the buffers placed in each section always form one stack [0, level). The
# lowest cell of the strip, (s, level[s]) at the least level, must be the bottom of some unplaced buffer
# whose sections all stand at that level; branching on those (for the lowest section with the fewest of
# them) is complete and far narrower than the canonical order, which also tries buffers at every other
# section of that level and only learns much later that a skipped one cannot fit.


@nb.njit(cache=True)
def _tight_fits(c, L, level, br_first, br_lo, br_hi, size, align, capacity):
    if L + size[c] > capacity or L % align[c] != 0:
        return False
    for q in range(br_first[c], br_first[c + 1]):
        for s in range(br_lo[q], br_hi[q]):
            if level[s] != L:
                return False
    return True


@nb.njit(cache=True)
def _tight_fillable(b, h, level, placed, br_first, br_lo, br_hi, sec_first, sec_buf, size, align, capacity):
    """Each section under b's new top h still has an unplaced buffer that could start there: one whose
    sections all stand at most at h (levels only rise) and that fits below the capacity."""
    for q in range(br_first[b], br_first[b + 1]):
        for s in range(br_lo[q], br_hi[q]):
            ok = False
            for r in range(sec_first[s], sec_first[s + 1]):
                c = sec_buf[r]
                if placed[c] or h + size[c] > capacity or h % align[c] != 0:
                    continue
                ok = True
                for q2 in range(br_first[c], br_first[c + 1]):
                    for s2 in range(br_lo[q2], br_hi[q2]):
                        if level[s2] > h:
                            ok = False
                            break
                    if not ok:
                        break
                if ok:
                    break
            if not ok:
                return False
    return True


@nb.njit(cache=True)
def _search_tight(size, align, width, br_first, br_lo, br_hi, bs_lo, bs_hi, sec_first, sec_buf, capacity, cuts, sol,
                  counters, node_limit, deadline, mask, select, descent_limit):
    """Depth-first search of the zero-slack problem (see above); FOUND leaves offsets in `sol`. counters:
    [nodes, unused, backtracks, descents], limits as in `_search`. Candidates are tried widest first, then
    largest; a buffer the same as one already tried at the node (same sections and size) is skipped; a
    placement that leaves a cell on its top no unplaced buffer can start at is undone at once. Once no
    unplaced buffer crosses a section boundary, each side is searched on its own and the first that fails
    fails the node (SPLIT frames, as in `_search`).
    `cuts[s]`: unplaced buffers crossing the boundary after section s."""
    n = len(size)
    n_sec = len(sec_first) - 1
    level = np.zeros(n_sec, np.int64)
    placed = np.zeros(n, np.bool_)
    cap_d = 2 * n + 4
    f_type = np.zeros(cap_d, np.int64)
    f_lo = np.zeros(cap_d, np.int64)
    f_hi = np.zeros(cap_d, np.int64)
    f_s = np.zeros(cap_d, np.int64)
    f_start = np.zeros(cap_d, np.int64)
    f_cstart = np.zeros(cap_d, np.int64)
    f_ck = np.zeros(cap_d, np.int64)
    f_ci = np.zeros(cap_d, np.int64)
    f_b = np.zeros(cap_d, np.int64)
    cstack = np.empty(max(4 * n, 16), np.int64)
    ctop = 0
    cbuf = np.empty(n, np.int64)
    big = np.int64(2) ** 62
    d = 0
    f_type[0] = SPLIT
    f_hi[0] = n_sec
    fresh = True
    ret = NOT_FOUND
    while True:
        finish = False
        lo = f_lo[d]
        hi = f_hi[d]
        if f_type[d] == SPLIT:
            if not fresh:
                if ret != FOUND:
                    finish = True
                else:
                    f_start[d] = f_hi[d + 1]
            if not finish:
                pushed = False
                s = f_s[d]
                while s < hi:
                    if s + 1 < hi and cuts[s] != 0:
                        s += 1
                        continue
                    end = s + 1
                    start = f_start[d]
                    open_ = False
                    for t in range(start, end):
                        if level[t] < capacity:
                            open_ = True
                            break
                    if open_:
                        f_s[d] = s + 1
                        e = d + 1
                        f_type[e] = SEARCH
                        f_lo[e] = start
                        f_hi[e] = end
                        pushed = True
                        break
                    f_start[d] = end
                    s += 1
                if pushed:
                    d += 1
                    fresh = True
                    continue
                ret = FOUND
                finish = True
        else:
            if fresh:
                f_cstart[d] = ctop
                f_ck[d] = 0
                f_ci[d] = 0
                L = big
                for s in range(lo, hi):
                    if level[s] < L:
                        L = level[s]
                if L >= capacity:
                    ret = FOUND
                    finish = True
                else:
                    best_s = -1
                    best_k = big
                    best_top = -1
                    for s in range(lo, hi):
                        if level[s] != L:
                            continue
                        k = 0
                        top = -1
                        for q in range(sec_first[s], sec_first[s + 1]):
                            c = sec_buf[q]
                            if not placed[c] and _tight_fits(c, L, level, br_first, br_lo, br_hi, size, align,
                                                             capacity):
                                k += 1
                                key_c = width[c] * (capacity + 1) + size[c]
                                if key_c > top:
                                    top = key_c
                                if select == 0 and k >= best_k:
                                    break
                        if k <= 1:
                            best_k = k
                            best_s = s
                            break
                        if (select == 0 and k < best_k) or (select == 1 and (top > best_top or (
                                top == best_top and k < best_k))):
                            best_k = k
                            best_s = s
                            best_top = top
                    if best_k > 0:
                        k = 0
                        for q in range(sec_first[best_s], sec_first[best_s + 1]):
                            c = sec_buf[q]
                            if not placed[c] and _tight_fits(c, L, level, br_first, br_lo, br_hi, size, align,
                                                             capacity):
                                cbuf[k] = c
                                k += 1
                        key = np.empty(k, np.int64)
                        for i in range(k):
                            key[i] = -(width[cbuf[i]] * (capacity + 1) + size[cbuf[i]])
                        order = np.argsort(key, kind="mergesort")
                        cstack = _grow(cstack, ctop + k)
                        m = 0
                        for i in range(k):
                            c = cbuf[order[i]]
                            dup = False
                            for j in range(ctop, ctop + m):
                                e = cstack[j]
                                if size[e] == size[c] and \
                                        br_first[e + 1] - br_first[e] == br_first[c + 1] - br_first[c]:
                                    same = True
                                    for t in range(br_first[c + 1] - br_first[c]):
                                        if br_lo[br_first[e] + t] != br_lo[br_first[c] + t] or \
                                                br_hi[br_first[e] + t] != br_hi[br_first[c] + t]:
                                            same = False
                                            break
                                    if same:
                                        dup = True
                                        break
                            if not dup:
                                cstack[ctop + m] = c
                                m += 1
                        ctop += m
                        f_ck[d] = m
            else:
                b = f_b[d]
                L = sol[b]
                for q in range(br_first[b], br_first[b + 1]):
                    for s in range(br_lo[q], br_hi[q]):
                        level[s] = L
                for s in range(bs_lo[b], bs_hi[b] - 1):
                    cuts[s] += 1
                placed[b] = False
                if ret != NOT_FOUND:
                    finish = True
            if not finish:
                pushed = False
                ret = NOT_FOUND
                while f_ci[d] < f_ck[d]:
                    b = cstack[f_cstart[d] + f_ci[d]]
                    f_ci[d] += 1
                    ret = _tick(counters, node_limit, descent_limit, mask, deadline)
                    if ret != NOT_FOUND:
                        break
                    L = level[br_lo[br_first[b]]]
                    h = L + size[b]
                    placed[b] = True
                    for q in range(br_first[b], br_first[b + 1]):
                        for s in range(br_lo[q], br_hi[q]):
                            level[s] = h
                    if h < capacity and not _tight_fillable(b, h, level, placed, br_first, br_lo, br_hi, sec_first,
                                                             sec_buf, size, align, capacity):
                        for q in range(br_first[b], br_first[b + 1]):
                            for s in range(br_lo[q], br_hi[q]):
                                level[s] = L
                        placed[b] = False
                        continue
                    sol[b] = L
                    n_cut = 0
                    for s in range(bs_lo[b], bs_hi[b] - 1):
                        cuts[s] -= 1
                        if cuts[s] == 0 and lo < s + 1 < hi:
                            n_cut += 1
                    f_b[d] = b
                    counters[3] += 1
                    e = d + 1
                    f_type[e] = SPLIT if n_cut > 0 else SEARCH
                    f_lo[e] = lo
                    f_hi[e] = hi
                    f_s[e] = lo
                    f_start[e] = lo
                    pushed = True
                    break
                if pushed:
                    d += 1
                    fresh = True
                    continue
                if ret == NOT_FOUND:
                    counters[2] += 1
                finish = True
        d, ctop = _pop(d, f_type, f_cstart, ctop)     # the frame is done with `ret`: hand it to the parent
        if d < 0:
            return ret
        fresh = False


_warmed = False


KERNELS = ("_search", "_search_tight")   # the search's kernels numba caches on disk (hybrid/arena/__pycache__)


def cached() -> bool:
    """Whether numba's on-disk cache holds the search kernels (`_search`, and `_search_tight` for zero slack) for
    this source and this CPU, so that `warm_up` only loads them (about 0.1-0.5 s) instead of compiling (30 s or
    more); False where it cannot tell. An index of an older source reads as empty; an entry compiled for another
    CPU (a home directory shared across machines) does not count."""
    from hybrid._numba_cache import holds

    return _warmed or holds(*(globals()[name] for name in KERNELS))


def warm_up() -> float:
    """Load the search kernels (numba's cache; compiled on a first run, about 30 s on this loaded machine) on two
    tiny instances, one of them at zero slack, so that a caller's time limit buys search, not loading (about
    0.5 s, 0.05 s of it the zero-slack kernel). Seconds spent (0 once warm)."""
    global _warmed
    if _warmed:
        return 0.0
    from hybrid.signals import interrupts_after

    t0 = time.perf_counter()
    with interrupts_after():   # Numba's cache goes through ctypes callbacks, which drop a KeyboardInterrupt
        p = Problem([Buffer("a", 0, 2, 3), Buffer("b", 1, 3, 2), Buffer("c", 2, 4, 3), Buffer("d", 0, 4, 1)])
        decide(p, 7, time.perf_counter() + 60.0)
        tight = Problem([Buffer("a", 0, 2, 2), Buffer("b", 0, 1, 1), Buffer("c", 1, 2, 1)])   # zero slack at 3
        decide(tight, 3, time.perf_counter() + 60.0)
    _warmed = True
    return time.perf_counter() - t0
