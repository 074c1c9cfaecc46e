"""Large-neighbourhood search: slide windows over the plan, re-solve each with CP-SAT, keep what the walk confirms.

Each step picks a window of consecutive schedule positions, builds its model
with the rest of the plan frozen (`window.build_window`), solves it within a
per-window budget and a fixed worker count (`model.solve_window`), decodes the
solution into a new node sequence and re-walks the whole plan
(`decode.decode`), and re-times it with `hybrid.simulator.simulate`. The
change is kept only if that simulated makespan is lower than the best so far;
anything else — an infeasible or timed-out window, a sequence the walk
rejects, a makespan that is not lower — leaves the plan as it was. So the
result is never worse than the input.

Before the first window the plan is re-walked (objects re-bound best-fit) and
its copy streams re-ordered earliest-deadline-first (`stream_order`, kept only
if faster): a copy stuck behind one that cannot start yet idles a stream
before the stall it causes, where no window would look.

Which windows: the ones where the compute stream waits. A window's score is
the compute stall inside it (gaps before its ops' starts, plus the tail after
the last op for the final window); windows are tried in decreasing score, and
only once until something before or inside them changes. When none is left
the next configuration (window size, offset) starts; a full round of
configurations without an improvement ends the search early, and so does
`patience_s` (or `patience_windows`) without one (then `hybrid.refine.handoff` gives the rest of the budget
back to the genetic search). The order of
configurations and every CP-SAT seed derive from `seed`, and CP-SAT runs on a
deterministic time budget, so a seed gives the same plan whenever the search
is not cut short by the wall-clock limit (`max_windows` bounds it exactly, and `patience_windows` is the
patience that does not depend on the machine's speed; `patience_s` does).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.plan import ArenaAllocation, Plan
from hybrid.refine.decode import decode
from hybrid.refine.model import SolveOptions, solve_window
from hybrid.plan.events import COMPUTE
from hybrid.swap.rewalk import Problem, SequenceError, Timeline, to_augmented
from hybrid.refine.source import starting_point
from hybrid.refine.stream_order import reorder_streams
from hybrid.refine.window import TensorEvents, WindowOptions, build_window


class HistoryPoint(NamedTuple):
    """Best makespan so far at a point of the search (unpacks as (time_s, makespan))."""

    time_s: float
    makespan: float


@dataclass(frozen=True)
class RefineOptions:
    window_ops: tuple[int, ...] = (6, 12, 4, 20)  # compute ops per window, one size per configuration
    window_time_s: float = 0.5        # CP-SAT budget per window (deterministic seconds; two stages)
    candidates: int = 4               # new alternative evictions offered per window
    advance: int = 6                  # later evictions offered to move into the window
    resolution: int = 20000           # integer ticks per window span
    max_windows: int | None = None    # stop after this many solved windows (exact reproducibility)
    validate: bool = True             # check the refined plan with hybrid.validator before returning it
    second_stage: bool = True         # after the window's end, minimise the sum of node ends too
    stall_windows: bool = False       # also windows ending at each stalled op (measured: no better)
    patience_s: float | None = None   # stop ("stalled") after this long without a lower makespan ...
    patience_gain: float = 1e-4       # ... lower by at least this fraction (smaller gains do not reset the clock)
    patience_windows: int | None = None  # stop ("stalled") after this many windows without such a gain: the
    #                                      work-budget twin of patience_s, so a seed fixes where refinement stops
    reorder: bool = True              # first re-order the copy streams earliest-deadline-first (stream_order)
    reruns: bool = True               # refine plans that rerun ops (reruns keep their places); False keeps such
    #                                   plans as they are (stop "recomputes kept"): the refiner before it
    relayout: bool = False            # an arena plan: also refine it as a byte budget and lay it out again
    relayout_share: float = 0.5       # ... with this share of the time; the faster laid-out plan is kept
    #                                   (off by default: it lost to the offsets kept, hybrid.refine.offsets.relaid)


@dataclass
class RefineProgress:
    elapsed_s: float
    makespan: float
    initial_makespan: float
    windows: int
    accepted: int


@dataclass
class RefineResult:
    plan: Plan
    improved: bool
    history: list[HistoryPoint]
    initial_makespan: float
    rebind_makespan: float = float("nan")  # the input re-walked (objects re-assigned best-fit) before any window
    reorder_makespan: float = float("nan")  # ... then its copy streams re-ordered (`stream_order`), before any window
    windows: int = 0                  # windows solved
    accepted: int = 0                 # windows whose solution lowered the makespan (re-walking, re-ordering not counted)
    infeasible: int = 0               # windows CP-SAT proved infeasible (conservative rounding) or found nothing
    rejected: int = 0                 # solutions the walk or the simulator did not confirm as better
    stop: str = ""                    # time limit | converged | stalled | window budget | stopped | interrupted
    search_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def makespan(self) -> float:
        return self.plan.makespan_s


ProgressFn = Callable[[RefineProgress], None]


def _stalls(tl: Timeline) -> tuple[np.ndarray, float]:
    comp = np.nonzero(tl.kind == COMPUTE)[0]
    s = tl.start[comp]
    e = tl.end[comp]
    gap = np.empty(len(comp))
    if len(comp):
        gap[0] = s[0]
        gap[1:] = s[1:] - e[:-1]
    tail = tl.makespan - (float(e[-1]) if len(comp) else 0.0)
    return np.maximum(gap, 0.0), max(0.0, tail)


def _windows(n_ops: int, w: int, offset: int) -> list[tuple[int, int]]:
    w = max(1, min(w, n_ops))
    stride = max(1, w // 2)
    starts = sorted({0, *range(offset % stride, n_ops, stride)})
    out = []
    for p0 in starts:
        p1 = min(n_ops, p0 + w)
        if p1 > p0 and (not out or out[-1] != (p0, p1)):
            out.append((p0, p1))
    return out


class _Search:
    """State of one refinement run: the current (best) timeline, the budget, and the counters."""

    def __init__(self, prob: Problem, tl: Timeline, reference: float, time_limit_s: float, seed: int,
                 workers: int, progress: ProgressFn | None, options: RefineOptions,
                 stop: Callable[[], bool] | None = None) -> None:
        self.t_start = time.perf_counter()
        self.prob, self.seed, self.workers, self.progress, self.options = prob, seed, workers, progress, options
        self.stop = stop
        self.time_limit_s = time_limit_s
        self.reference = reference
        self.eps = 1e-9 * max(1.0, reference)
        self.res = RefineResult(plan=None, improved=False,  # type: ignore[arg-type] - set by refine()
                                history=[HistoryPoint(0.0, reference)], initial_makespan=reference,
                                rebind_makespan=tl.makespan, stop="converged")
        self.best: Timeline | None = None
        self.best_ms = reference
        self.mark = (0.0, reference)  # (time, makespan) of the last gain that counts for the patience
        self.mark_windows = 0         # windows solved at that gain (for patience_windows)
        if options.reorder:  # copies queued behind one that cannot start yet: no window is picked there
            tl = reorder_streams(prob, tl)
        self.res.reorder_makespan = tl.makespan
        if tl.makespan < reference - self.eps:  # re-walking (and re-ordering) alone already helps
            self._accept(tl, counted=False)
        self.cur = tl
        self.ev = TensorEvents(prob, tl)
        self.wopt = WindowOptions(resolution=options.resolution, candidates=options.candidates,
                                  advance=options.advance)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    def left(self) -> float:
        return self.time_limit_s - self.elapsed()

    def stalled(self) -> bool:
        """No lower makespan for `patience_s` (so the caller can spend the rest of its budget elsewhere)."""
        p, pw = self.options.patience_s, self.options.patience_windows
        if pw is not None and self.res.windows - self.mark_windows >= pw:
            return True
        return p is not None and self.elapsed() - self.mark[0] >= p

    def configs(self) -> list[tuple[int, int]]:
        """(window size, offset) rounds: the first size first, the rest in a seeded order."""
        cfg = [(w, off) for w in self.options.window_ops for off in (0, max(1, w // 4))]
        rest = np.random.default_rng(self.seed).permutation(len(cfg) - 1) + 1 if len(cfg) > 1 else []
        return [cfg[0]] + [cfg[int(i)] for i in rest]

    def pick(self, w: int, off: int, tried: set[tuple[int, int]]) -> tuple[int, int] | None:
        """The untried window of this round with the most compute stall in it (None: no stall left)."""
        gap, tail = _stalls(self.cur)
        n_ops = len(gap)  # computes in the stream, reruns included (their order never changes)
        floor = 1e-7 * max(self.cur.makespan, 1e-30)
        cands = _windows(n_ops, w, off)
        if self.options.stall_windows:  # also windows ending at a stalled op: its delay was issued before it
            cands += [(max(0, int(q) - w + 1), int(q) + 1) for q in np.nonzero(gap > floor)[0]]
        best = None
        for p0, p1 in cands:
            if (p0, p1) in tried:
                continue
            score = float(gap[p0:p1].sum()) + (tail if p1 == n_ops else 0.0)
            if score > floor and (best is None or score > best[0]):
                best = (score, p0, p1)
        return None if best is None else (best[1], best[2])

    def attempt(self, p0: int, p1: int) -> bool:
        """Solve one window; keep the result if the re-walked, re-simulated plan is faster. True if kept."""
        spec = build_window(self.prob, self.cur, self.ev, p0, p1, self.wopt)
        if spec is None:
            return False
        res = self.res
        sol = solve_window(spec, SolveOptions(time_s=min(self.options.window_time_s, max(0.05, self.left())),
                                              workers=self.workers,
                                              seed=(self.seed * 1_000_003 + res.windows) % (2**31 - 1),
                                              second_stage=self.options.second_stage,
                                              deadline=time.monotonic() + max(0.05, self.left())))
        res.windows += 1
        if not sol.ok:
            res.infeasible += 1
            return False
        try:
            cand = decode(self.prob, self.cur, spec, sol)
        except (SequenceError, ValueError):
            res.rejected += 1
            return False
        ms = cand.confirmed_makespan(self.eps)
        if ms is None or ms >= self.best_ms - self.eps:
            res.rejected += 1
            return False
        self.cur = cand
        self.ev = TensorEvents(self.prob, cand)
        self._accept(cand, counted=True)
        return True

    def _accept(self, tl: Timeline, counted: bool) -> None:
        self.best, self.best_ms = tl, tl.makespan
        if self.best_ms <= self.mark[1] * (1.0 - self.options.patience_gain):
            self.mark = (self.elapsed(), self.best_ms)
            self.mark_windows = self.res.windows
        self.res.accepted += int(counted)
        self.res.history.append(HistoryPoint(self.elapsed(), self.best_ms))

    def report(self) -> None:
        if self.progress is not None:
            r = self.res
            self.progress(RefineProgress(self.elapsed(), self.best_ms, self.reference, r.windows, r.accepted))

    def run(self) -> tuple[Timeline | None, RefineResult]:
        res = self.res
        configs = self.configs()
        rounds_without_gain = 0
        i = 0
        try:
            while rounds_without_gain < len(configs):
                w, off = configs[i % len(configs)]
                i += 1
                tried: set[tuple[int, int]] = set()
                gained = False
                while (win := self.pick(w, off, tried)) is not None:
                    if self.left() <= 0:
                        res.stop = "time limit"
                        return self.finish()
                    if self.options.max_windows is not None and res.windows >= self.options.max_windows:
                        res.stop = "window budget"
                        return self.finish()
                    if self.stalled():
                        res.stop = "stalled"
                        return self.finish()
                    if self.stop is not None and self.stop():
                        res.stop = "stopped"
                        return self.finish()
                    tried.add(win)
                    if self.attempt(*win):
                        gained = True
                        tried = {(a, b) for a, b in tried if b <= win[0]}  # what follows it has changed
                    self.report()
                rounds_without_gain = 0 if gained else rounds_without_gain + 1
            res.stop = "converged"
        except KeyboardInterrupt:
            res.stop = "interrupted"
        return self.finish()

    def finish(self) -> tuple[Timeline | None, RefineResult]:
        self.res.search_s = self.elapsed()
        self.report()
        return self.best, self.res


def refine_timeline(prob: Problem, tl: Timeline, reference: float, *, time_limit_s: float, seed: int = 1,
                    workers: int = 1, progress: ProgressFn | None = None,
                    options: RefineOptions = RefineOptions(),
                    stop: Callable[[], bool] | None = None) -> tuple[Timeline | None, RefineResult]:
    """The search on a walked timeline. Returns (best timeline if better than `reference`, else None; stats)."""
    return _Search(prob, tl, reference, time_limit_s, seed, workers, progress, options, stop).run()


def refine(graph: Graph, plan: Plan, *, time_limit_s: float, seed: int = 1, workers: int = 1,
           progress: ProgressFn | None = None, options: RefineOptions | None = None,
           stop: Callable[[], bool] | None = None) -> RefineResult:
    """Refine any plan's swap timing and evictions with CP-SAT on windows; never returns a worse plan.

    `plan` may come from any planner or file (size_classes, unconstrained or arena
    allocation; an arena plan keeps every offset, `hybrid.refine.offsets`). Reruns (recompute events) keep
    their places in the compute stream's order, as every compute does; the copies around them are re-timed.
    The result's plan keeps the schedule, the
    allocation and the initially resident tensors; `improved` says whether the
    makespan went down, and `history` lists (time_s, best makespan) points.
    `stop`, asked between windows, ends the search early (stop "stopped") with the best plan so far.
    """
    from hybrid.swap.to_plan import to_plan

    options = options or RefineOptions()
    t0 = time.perf_counter()
    if graph.name != plan.graph:
        raise HybridError(f"refine: the plan is for graph {plan.graph!r}, not {graph.name!r}")
    if not options.reruns and plan.recomputes:
        return RefineResult(plan, False, [HistoryPoint(0.0, plan.makespan_s)], plan.makespan_s,
                            stop="recomputes kept", search_s=time.perf_counter() - t0,
                            notes=["the plan recomputes ops and RefineOptions.reruns is off: kept as it is"])
    prob, tl = starting_point(graph, plan)
    setup = time.perf_counter() - t0
    reference = float(plan.makespan_s)
    # keep back about what building and validating the final plan will take (of the order of the setup)
    reserve = 2.5 * setup if options.validate else 0.5 * setup
    arena = isinstance(plan.allocation, ArenaAllocation)
    share = min(max(options.relayout_share, 0.0), 1.0) if arena and options.relayout else 0.0
    best, res = refine_timeline(prob, tl, reference, time_limit_s=(time_limit_s - setup - reserve) * (1.0 - share),
                                seed=seed, workers=workers, progress=progress, options=options, stop=stop)
    res.plan = plan
    if best is not None:
        info = dict(plan.planner)
        name = str(info.get("name", "plan"))
        info["name"] = name if name.endswith("+cpsat") else f"{name}+cpsat"
        info["refine"] = {"seed": seed, "time_limit_s": time_limit_s, "workers": workers, "windows": res.windows,
                          "accepted": res.accepted, "from_makespan_s": reference,
                          "reordered_makespan_s": res.reorder_makespan}  # before any window
        # an arena plan keeps its allocation: the offsets and arena_bytes it came with (hybrid.refine.offsets)
        new = to_plan(to_augmented(prob, best), info,
                      plan.allocation if isinstance(plan.allocation, ArenaAllocation) else None)
        ok = True
        if options.validate:
            from hybrid.validator import validate

            report = validate(graph, new)
            if not report.valid:
                ok = False
                res.notes.append(f"refined plan failed validation ({report.violations[0].message}); kept the input")
        if ok and new.makespan_s < reference:
            res.plan = new
            res.improved = True
    left = time_limit_s - (time.perf_counter() - t0)
    if share > 0.0 and left > 1.0 and res.stop not in ("interrupted", "stopped") and not (stop and stop()):
        from hybrid.refine.offsets import relaid

        kept = res.plan.makespan_s
        other = relaid(graph, plan, time_limit_s=left, seed=seed, workers=workers, options=options, stop=stop)
        if other is not None and other.makespan_s < kept:
            res.plan, res.improved = other, True
            res.history.append(HistoryPoint(time.perf_counter() - t0, other.makespan_s))
            res.notes.append(f"re-laid out: refined as a byte budget and laid out again, {other.makespan_s:.6g} s "
                             f"(offsets kept: {kept:.6g} s)")
        else:
            res.notes.append("offsets kept: refining as a byte budget and laying out again was "
                             + ("not faster" if other is not None else "no gain or did not lay out"))
    if not res.improved:
        res.history = [h for h in res.history if h.makespan >= reference] or [HistoryPoint(0.0, reference)]
    res.search_s = time.perf_counter() - t0
    return res
