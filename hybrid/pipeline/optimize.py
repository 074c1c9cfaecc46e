"""The optimize flow: genetic search, CP-SAT refinement beside or after it, validation, arena layout with its
fallbacks, and the baseline rows, within one time limit. `hybrid optimize` and `hybrid compare` call it.

By default the search scores byte budgets (memory that never fragments) with the memory its seed plans' layouts
need given up (`hybrid.arena.headroom`, `OptimizeOptions.headroom`), and the winner is laid out afterwards within
the full memory (`hybrid.arena.layout`), re-planned with what the layout leaves, or with less memory where no
layout fits (reported, with its cost); with refinement, the laid-out plan is then re-timed with every offset kept
in the reserve's time left (`_polish`). With
`OptimizeOptions.addresses` (`--addresses`) the search plans byte pools as arenas instead (`PlannerOptions.
addresses`, `hybrid.swap.addresses`): each plan has its offsets as planned, so it needs no layout step and the
fallback does not fire; the byte budget then appears as the relaxation row. It is not the default because it
lost on the SwapAdvisor suite at equal generations (its written plan 1.01-2.6x the default flow's; ResNet-18 at
64 MiB: 14.29 against 14.56 ms, docs/arena.md); the layout step also runs for a refined plan that lost its
offsets, and as the address-aware search's last resort when no individual fits (`skipped` says so).

How `time_limit_s` is split. Everything counts from `started_at` (the caller's start: `hybrid optimize` passes
the moment it began, so loading the graph counts too) and ends by `started_at + time_limit_s`:

1. setup: importing the refiner, compiling the planner's Numba kernels (tens of seconds, once after an
   install: announced, and named in `Timings.compile_s`), timing one evaluation (it places the search's
   processes and sizes the estimates below), and the any-order lower bound the search stops at, computed
   only where its estimated cost (`bound_seconds`) is at most `BOUND_SHARE` of the limit;
2. a reserve at the end (`reserve_for`, estimated from that evaluation's time, at least `RESERVE_MIN_SHARE`
   and at most `RESERVE_MAX_SHARE` of the limit): the validation of the search's plan, the arena layout, the
   baselines and the summary's bound;
3. the search gets the rest. With refinement after it, the search stops at 1 - `refine_share` of that rest
   and refinement (then the resumed search) runs to its end; beside it, the refiner runs until the same end.

After the search, the arena layout runs if its estimate fits in the time left (else the byte budget is
written without offsets and `OptimizeResult.skipped` says so), capped by the limit less the baselines'
estimate and by its own cap `arena_s`. Its exact search for near misses runs where numba's cache holds it
(loaded at setup, under a second) or where compiling it (about `EXACT_COMPILE_S`) fits too. A layout's estimate
scales with the graph's tensors below ResNet-18's (`layout_fixed_s`), so a small graph's short limit still has
the headroom search. Where no layout is found, the search's plan is written without offsets and `skipped` says
why. A baseline not started by the limit is left out (its notes say so).
"""
from __future__ import annotations

import dataclasses
import importlib.util
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.graph.info import largest_workspace
from hybrid.pipeline.result import Budget, OptimizeResult, Refinement, Timings
from hybrid.pipeline.kernels import load_kernels
from hybrid.units import counted, format_bytes, format_seconds, parse_duration

if TYPE_CHECKING:
    from ga import GAConfig
    from ga.progress import GenerationStats
    from hybrid.plan import Plan

ARENA_AUTO_S = 60.0          # `--arena auto`: the safety cap on the layout's counted work (hybrid.arena.layout)
RESERVE_MIN_SHARE = 0.05     # of the time limit, kept at the end for layout, baselines and summary
RESERVE_MAX_SHARE = 0.5
HEADROOM_SHARE = 0.25       # of the time left, for `--headroom`'s calibration layouts (hybrid.arena.headroom)
HEADROOM_MIN_LAYOUTS = 3.0   # layouts' worth of time left (`layout_seconds`) below which the default skips headroom
BOUND_SHARE = 0.1            # the lower bound is computed where its estimate is at most this share of the limit
# Estimates in evaluations (one planner + simulator run of the program order, timed at setup), from NasNet-25,
# RNN-8-8k and ResNet-152 on a loaded 2-core machine: a validation about 50, a heuristic arena layout of one
# candidate about 100, a baseline (plan, simulate, validate) about 20 plus its validation.
VALIDATE_EVALS, LAYOUT_EVALS, BASELINE_EVALS = 50.0, 100.0, 20.0
LAYOUT_FIXED_S = 4.0         # the exact search's tries on ResNet-18's 490 buffers; fewer buffers, less (`layout_fixed_s`)
LAYOUT_FIXED_BUFFERS = 490
LAYOUT_FIXED_MIN_S = 0.25
LOAD_MARGIN = 1.5            # the reserve's estimates are from the fastest of 3 evaluations: a loaded machine varies
CHUNK_ONE_S = 0.02           # evaluations slower than this go to worker processes one at a time
EXACT_COMPILE_S = 15.0       # the arena's exact search, compiled once per process: about 6 s unloaded, 40 s loaded
BESIDE_MIN_S = 3.0           # a refiner process beside the search needs this much of it (a spawned interpreter)
INTERRUPT_LAYOUT_S = 3.0     # after Ctrl-C or SIGTERM the best plan is laid out by the heuristics where that takes this
COMPILE_NOTE_S = 2.0         # a kernel compile longer than this is announced (a first run after an install)
DEFAULT_PATIENCE = 0.1       # hybrid.refine.handoff.DEFAULT_PATIENCE (not imported: refinement is optional)


def warm_kernels(arena: bool = True) -> float:
    """Load (or, the first time after an install, compile: `hybrid.pipeline.kernels`) the Numba kernels
    `run_optimize`'s setup and layout use: the planner's, the any-order bound's, and with `arena` the layout's
    repair and exact search (the search's genetic operators and CP-SAT's re-timing load theirs on first use, in a
    second or two; on a first run with two cores the second process compiles the genetic operators too).
    `run_optimize` counts what it loads in its time limit, and leaves the exact search out of a short run where
    it is not cached; a caller that times several runs (a benchmark, a notebook) calls this first so that every
    run gets the same flow whatever the cache held. Seconds spent."""
    from dataclasses import replace

    from hybrid.bounds import graph_bound
    from hybrid.graph.info import unswapped_peak
    from hybrid.graph.synthetic import training_graph
    from hybrid.signals import interrupts_after

    t0 = time.monotonic()
    with interrupts_after():
        load_kernels(repair=arena, exact_search=arena)
        g = training_graph(3, seed=0)
        dev = replace(g.device, memory_bytes=int(0.8 * unswapped_peak(g)), reserve_bytes=0)
        for rc in (True, False):
            graph_bound(g, dev, recompute=rc)
    return time.monotonic() - t0


def refine_available() -> bool:
    """Whether the CP-SAT refinement (hybrid.refine) is installed; checked without importing it."""
    return importlib.util.find_spec("hybrid.refine") is not None


@dataclass
class OptimizeOptions:
    """Everything `hybrid optimize`'s flags set besides the graph, the device and the time limit.

    `arena_s`: the layout's safety cap in seconds (None: write the byte budget as searched, no offsets).
    `refine`: "cpsat" or "none"; `refine_mode`: "auto", "beside" or "after" (`hybrid.refine.beside.placement`).
    Defaults are the library's: `refine` is "none" here (the GA alone, what the benchmarks' tables state) and
    "cpsat" under `hybrid optimize`; pass refine="cpsat" for the command's plan.
    """

    config: "GAConfig" = field(default_factory=lambda: _ga_config())
    generations: int | None = None
    workers: int | None = None
    scheduler: str | None = None
    recompute: bool = True
    refine: str = "none"
    refine_mode: str = "auto"
    refine_share: float = 0.2
    refine_patience: float | None = DEFAULT_PATIENCE
    refine_elites: int = 4
    refine_options: Any = None          # hybrid.refine.RefineOptions for the refiner beside (default: its own)
    planner: Any = None                 # hybrid.swap.augmented.PlannerOptions to search from (overrides `recompute`)
    stop_on_interrupt: bool = True      # Ctrl-C ends the search with its best so far; False: KeyboardInterrupt
    checkpoint: Path | None = None
    checkpoint_every: int = 10
    resume: Path | None = None
    arena_s: float | None = ARENA_AUTO_S
    baselines: bool = False
    addresses: bool = False             # True: the search plans byte pools as arenas (offsets as planned: its
    #                                     fitness is the laid-out makespan, `--addresses`); False: the byte budget,
    #                                     laid out afterwards (the default: it wins on the suite, see above)
    workspaces_aside: bool = False      # plan as the executor runs: the largest workspace held aside all the
    #                                     iteration (PyTorch allocates it beside the pool), the tensors in the rest,
    #                                     no op adding its own (`--workspaces-aside`; `workspaces_aside_problem`)
    headroom: bool | None = None        # the search plans byte budgets with the memory its plans need to lay out
    #                                     given up (hybrid.arena.headroom): None (the default) where the byte
    #                                     budget is laid out afterwards (not with --addresses or --no-arena, nor
    #                                     where the layout does not fit the limit); True: asked for (an error where
    #                                     it cannot apply); False: off (`--no-headroom`, the flow before it)

    def planner_options(self) -> "PlannerOptions":
        """The options the search's planner starts from: `planner` as given, else swap with recompute (the genes
        set the ratio), plans with reruns re-bound in time order and long rerun chains (both off in
        PlannerOptions' own defaults, with which the planner's own tables were made)."""
        from hybrid.swap.augmented import PlannerOptions
        from hybrid.swap.baselines import RECOMPUTE_RATIO

        return self.planner or PlannerOptions(recompute_ratio=RECOMPUTE_RATIO if self.recompute else 0.0,
                                              addresses=self.addresses, rebind_reruns=True, long_chains=True)

    def check(self) -> None:
        """HybridError naming the flag and the field (a command's user and a library caller each read their
        own), for options no run could use."""
        from ga import GAConfig

        if not isinstance(self.config, GAConfig):
            raise HybridError(f"config must be a ga.GAConfig (GAConfig(seed=1, ...)), got {type(self.config).__name__}")
        if self.generations is not None and (isinstance(self.generations, bool)
                                             or not isinstance(self.generations, int) or self.generations < 0):
            raise HybridError(f"--generations (generations) must be a whole number, 0 or more, or None, got "
                              f"{self.generations!r}")
        if self.refine not in ("cpsat", "none"):
            raise HybridError(f"--refine (refine) must be cpsat or none, got {self.refine!r}")
        if self.refine_mode not in ("auto", "beside", "after"):
            raise HybridError(f"--refine-mode (refine_mode) must be auto, beside or after, got {self.refine_mode!r}")
        if self.refine == "cpsat" and not refine_available():
            raise HybridError("--refine cpsat (refine='cpsat') needs the CP-SAT refinement (hybrid.refine), which "
                              "is not in this installation; use --refine none")
        if not 0.0 <= self.refine_share < 1.0:
            raise HybridError(f"--refine-share (refine_share) must be within [0, 1), got {self.refine_share}")
        if self.workers is not None and self.workers < 1:
            raise HybridError(f"--workers (workers) must be at least 1, got {self.workers}")
        if self.scheduler is not None and not str(self.scheduler).strip():
            raise HybridError("--scheduler (scheduler) is empty: give the Dask scheduler's address, e.g. "
                              "tcp://host:8786, or leave it out to evaluate on this machine")
        if self.scheduler and self.workers is not None:
            raise HybridError("give either --workers (workers: processes here) or --scheduler (scheduler: a Dask "
                              "cluster), not both")
        if self.headroom and (self.addresses or self.arena_s is None):
            raise HybridError("--headroom (headroom=True) lays its plan out after the search: give it without "
                              "--addresses (addresses=True) and without --no-arena (arena_s=None)")
        if self.arena_s is not None and (isinstance(self.arena_s, bool) or not isinstance(self.arena_s, (int, float))
                                         or not self.arena_s >= 0):
            raise HybridError(f"--arena (arena_s) must be auto, a duration such as 60s, or 0 to write no offsets; "
                              f"got {self.arena_s}")


def _ga_config() -> "GAConfig":
    from ga import GAConfig

    return GAConfig()


@dataclass
class Progress:
    """Callbacks through which a run reports (all optional; the library never prints).

    `on_generation(stats, seconds_left)`: after each generation of the search; `on_refine(p)`: CP-SAT's
    progress (hybrid.refine.RefineProgress); `on_note(text)`: one-off news (a first-run compile, a phase the
    time limit cut); `on_phase_end()`: a live line may be closed; `on_plan(plan)`: a new plan to write (called
    with interrupts deferred, so it is written whole; the first as soon as the search ends, so that an
    interrupted refinement still leaves the best so far)."""

    on_generation: Callable[["GenerationStats", float], None] | None = None
    on_refine: Callable[[Any], None] | None = None
    on_note: Callable[[str], None] | None = None
    on_phase_end: Callable[[], None] | None = None
    on_plan: Callable[["Plan"], None] | None = None

    def note(self, text: str) -> None:
        if self.on_note is not None:
            self.on_note(text)

    def phase_end(self) -> None:
        if self.on_phase_end is not None:
            self.on_phase_end()

    def generation_hook(self, end: float) -> Callable[["GenerationStats"], None] | None:
        if self.on_generation is None:
            return None
        cb = self.on_generation
        return lambda s: cb(s, max(0.0, end - time.monotonic()))


def bound_seconds(graph: Graph) -> float:
    """The any-order bound's estimated cost (`hybrid.bounds.graph_bound`: bitsets over ops x tensors):
    NasNet-25 (13,658 ops, 28,379 tensors) took 8-10 s on a loaded 2-core machine, ResNet-152 0.4 s."""
    a = graph.arrays
    return 0.3 + 2.5e-8 * a.n_ops * a.n_tensors


def validate_seconds(eval_s: float) -> float:
    return 0.3 + VALIDATE_EVALS * eval_s


def layout_fixed_s(graph: Graph) -> float:
    """The exact search's tries in one layout: a node budget (about 3 s on ResNet-18's 490 buffers, and no more
    on larger graphs, whose nodes cost more but which reach the budget's other limits first), a node's cost about
    proportional to the buffers (a plan has about one per tensor): on a 35-tensor MLP a whole layout took 0.07 s,
    where a fixed 4 s left the headroom search and half a 10 s limit unused."""
    return max(LAYOUT_FIXED_MIN_S, LAYOUT_FIXED_S * min(1.0, graph.arrays.n_tensors / LAYOUT_FIXED_BUFFERS))


def layout_seconds(eval_s: float, fixed_s: float = LAYOUT_FIXED_S) -> float:
    """One candidate laid out by the heuristics, a few re-plans and the exact search's tries (`fixed_s`,
    `layout_fixed_s`), and the layout validated."""
    return fixed_s + LAYOUT_EVALS * eval_s + validate_seconds(eval_s)


def heuristic_layout_seconds(eval_s: float) -> float:
    """`layout_seconds` without the exact search's tries (its fixed part): the heuristics, re-plans, validation."""
    return LAYOUT_EVALS * eval_s + validate_seconds(eval_s)


def baselines_seconds(eval_s: float) -> float:
    """Each baseline planned, validated and laid out by the heuristics with its re-plans."""
    from hybrid.pipeline.baselines import BASELINES

    return len(BASELINES) * (BASELINE_EVALS * eval_s + validate_seconds(eval_s) + LAYOUT_EVALS * eval_s)


def reserve_for(total_s: float, eval_s: float, arena: bool, baselines: bool, bound_s: float = 0.0,
                layout_fixed: float = LAYOUT_FIXED_S) -> float:
    """Seconds kept at the end of the limit: the search plan's validation, the layout (`layout_fixed`: its exact
    search's part, `layout_fixed_s`), the baselines and the summary's bound (`bound_s`, 0 when it is known
    already), within [RESERVE_MIN_SHARE, RESERVE_MAX_SHARE]."""
    need = validate_seconds(eval_s) + 2 * eval_s + bound_s     # the best plan re-planned with its events, checked
    if arena:
        need += layout_seconds(eval_s, layout_fixed)
    if baselines:
        need += baselines_seconds(eval_s)
    return float(min(RESERVE_MAX_SHARE * total_s, max(RESERVE_MIN_SHARE * total_s, LOAD_MARGIN * need)))


def split_cores(graph: Graph, device: Device, refine: bool = True, mode: str = "auto",
                workers: int | None = None, scheduler: str | None = None) -> tuple[bool, int | None, float]:
    """(refine beside the search?, the search's evaluation processes, one evaluation's seconds).

    Without `workers`: one process where an evaluation is too cheap for a pool to pay
    (`ga.evaluation.POOL_MIN_EVAL_S`), else every core but the one the refiner takes beside the search.
    `mode` "auto" refines beside where that core would not speed up the search (`refine_beside`)."""
    from ga.evaluation import POOL_MIN_EVAL_S, available_cores, evaluation_seconds
    from hybrid.refine.beside import refine_beside

    cores = available_cores()
    eval_s = evaluation_seconds(graph, device)
    beside = False
    if refine:
        beside = refine_beside(eval_s, cores, workers, scheduler) if mode == "auto" else mode == "beside"
    if workers is None and not scheduler:
        workers = 1 if eval_s < POOL_MIN_EVAL_S else max(1, cores - int(beside))
    return beside, workers, eval_s


def _check_arguments(graph: Any, device: Any, options: Any, progress: Any) -> None:
    """One line naming the argument of the wrong type, for a library caller: not an AttributeError from deep in
    the planner (a path given for the graph, a preset name or a byte count for the device)."""
    if not isinstance(graph, Graph):
        raise HybridError(f"graph must be a hybrid.graph.Graph (Graph.load(path), or hybrid.capture.capture(...)), "
                          f"got {type(graph).__name__} {graph!r:.60}")
    if not isinstance(device, Device):
        raise HybridError(f"device must be a hybrid.device.Device (hybrid.device.preset('v100-16gb'), or "
                          f"resolve_device(None, 'v100-16gb', '64MiB') for 64 MiB of it), got "
                          f"{type(device).__name__} {device!r:.60}")
    graph.require_ops()   # before the kernels load: the search has no order to vary
    if options is not None and not isinstance(options, OptimizeOptions):
        raise HybridError(f"options must be an OptimizeOptions (hybrid.pipeline.OptimizeOptions(...)), got "
                          f"{type(options).__name__}")
    if progress is not None and not isinstance(progress, Progress):
        raise HybridError(f"progress must be a Progress (hybrid.pipeline.Progress(...)), got {type(progress).__name__}")


def _seconds(value: Any) -> float:
    """A time limit given as seconds, or as text with its unit ("30s", "2m"), as the CLI reads it."""
    if isinstance(value, str):
        return parse_duration(value, "time_limit_s")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HybridError(f"time_limit_s must be seconds (a number, or text such as '30s'), got {value!r}")
    return float(value)


def run_optimize(graph: Graph, device: Device, time_limit_s: float | str, options: OptimizeOptions | None = None,
                 progress: Progress | None = None, started_at: float | None = None,
                 after_s: float = 0.0) -> OptimizeResult:
    """Search, refine, validate and lay out a plan for `graph` on `device` within `time_limit_s` seconds of
    `started_at` (time.monotonic(); default now), as the module docstring splits it. `after_s`: seconds the
    caller needs once this returns (printing, a process's exit), kept at the end of the limit.

    Ctrl-C or SIGTERM stops the search (or refinement) and the best plan so far is returned and handed to
    `progress.on_plan` (`interrupted` set). HybridError: bad options, or the search's own best plan failed
    validation (a bug); a refined plan that fails validation is dropped for the search's (`failures`).
    The same `options.config.seed` and `options.generations` with `refine="none"` give the same plan.
    """
    from ga import optimize
    from ga.evaluation import make_evaluator
    from hybrid.errors import InfeasibleError
    from hybrid.pipeline.rows import any_order_bound
    from hybrid.signals import deferred_interrupts, interrupted_by, interrupts_after, new_call, start_forkserver

    _check_arguments(graph, device, options, progress)   # before any branch reads them
    if options is not None and options.workspaces_aside and largest_workspace(graph, default_only=True) > 0:
        return _workspaces_aside(graph, device, time_limit_s, options, progress, started_at, after_s)
    new_call()   # a fresh count of Ctrl-C / SIGTERM, as a command gets (hybrid.signals)
    opts = options or OptimizeOptions()
    prog = progress or Progress()
    start = time.monotonic() if started_at is None else started_at
    total = _seconds(time_limit_s)
    if not 0 < total < float("inf"):   # inf left every split of the limit NaN: no search at all
        raise HybridError(f"the time limit (--time-limit, time_limit_s) must be positive and finite (bound the "
                          f"search with generations=N and a generous limit), got {time_limit_s!r}")
    opts.check()
    end = start + total - max(0.0, min(after_s, 0.2 * total))
    timings = Timings()
    skipped: list[str] = []
    bounds: dict[bool, float] = {}
    with interrupts_after():   # native code calling back into Python: a signal is acted on after it
        if opts.refine == "cpsat":
            import hybrid.refine  # noqa: F401 - imported now so its import time counts against the budget
        from hybrid.arena import exact

        t0 = time.monotonic()
        # counted: right after an install this takes tens of seconds, once (cached from then on). The layout's
        # repair too (0.1 s cached): its first use compiles it (7-10 s), which on a fresh install fell on the second
        # run's baseline layouts and left every baseline row out. Its exact search for near misses only where
        # numba's cache holds it for this CPU (0.1-0.5 s): a process's first layout then has it (compiling it is
        # left to the layout's own rule)
        arena_on = opts.arena_s is not None
        load_kernels(repair=arena_on, exact_search=arena_on and not opts.addresses and _exact_may_run(graph)
                      and exact.cached())
        timings.compile_s = time.monotonic() - t0
    if timings.compile_s > COMPILE_NOTE_S:
        prog.note(f"compiled the planner's kernels in {format_seconds(timings.compile_s)} (first run after an "
                  "install; cached from now on), counted in the time limit")
    cpsat = opts.refine == "cpsat"
    with interrupts_after():   # times an evaluation: the kernels' first calls load them through ctypes callbacks
        beside, workers, eval_s = split_cores(graph, device, cpsat, opts.refine_mode, opts.workers, opts.scheduler)
    options = opts.planner_options()
    arena = opts.arena_s is not None
    fixed_s = layout_fixed_s(graph)
    one_layout = layout_seconds(eval_s, fixed_s)   # one layout's estimate here
    # Where a whole layout does not fit in the largest reserve, its heuristics and re-plans may: a plan with offsets
    # is the plan that runs (the layout below then leaves the exact search out and says so). Where not even they
    # fit, the layout's time goes to the search.
    if arena and heuristic_layout_seconds(eval_s) > RESERVE_MAX_SHARE * (end - start):
        arena = False
        skipped.append(f"arena layout: not run, one layout takes about {format_seconds(one_layout)} "
                       f"here (its heuristics alone {format_seconds(heuristic_layout_seconds(eval_s))}), over "
                       f"{100 * RESERVE_MAX_SHARE:.0f}% of the time limit; the byte budget is written "
                       "without offsets (the executor compacts at run time if it must)")
    # None, or the memory the search gives up so its plans lay out (only where the winner is laid out afterwards;
    # a resume keeps its checkpoint's, whatever the time left would calibrate)
    with interrupts_after():   # Numba layouts (a signal is acted on after the one started)
        head = (_resumed_headroom(device, opts, prog) if opts.resume is not None and not opts.addresses
                else _UNKNOWN)
        if head is _UNKNOWN:
            head = (_headroom(graph, device, opts, prog, end, options, eval_s, skipped) if arena and not opts.addresses
                    else None)
    search_device = device if head is None else head.device(device)
    # no plan beats the graph bound (with recompute when the search may rerun ops): stop there (relative slack,
    # as equal sums in another order differ in the last bits); on a graph that fits, generation 0 reaches it
    stop_at = None
    bound_est = bound_seconds(graph)
    rc = opts.recompute if opts.planner is None else opts.planner.recomputes
    if bound_est <= BOUND_SHARE * total:
        with interrupts_after():   # Numba kernels
            bounds[rc] = any_order_bound(graph, device, rc)
        stop_at = bounds[rc] * (1.0 + 1e-9)
    else:
        # said of the stop, not the figure: the summary may print the bound, computed after the search
        skipped.append(f"stop at the lower bound: the bound was not computed before the search (estimated "
                       f"{format_seconds(bound_est)} on this graph, over {100 * BOUND_SHARE:.0f}% of the time "
                       "limit; `hybrid info` prints it), so the search could not stop early at it")
    summary_bound = bound_est if bound_est <= BOUND_SHARE * total and rc else 0.0
    # an address-aware search writes its plan with offsets as planned: no layout to keep time for (its last
    # resort, a byte-budget search laid out afterwards, gets what is left of the limit)
    reserve = reserve_for(end - start, eval_s, arena and not opts.addresses, opts.baselines, summary_bound,
                          fixed_s)
    search_end = end - reserve
    now = time.monotonic()
    after = cpsat and not beside
    ga_end = (now + max(0.0, search_end - now) * (1.0 - opts.refine_share)) if after else search_end
    budget = Budget(total, reserve, search_end - start, ga_end - start)
    timings.setup_s = now - start
    failures: list[str] = []
    refinement = Refinement(mode="none" if not cpsat else "beside" if beside else "after")
    if beside and search_end - now < BESIDE_MIN_S:
        beside = False
        refinement.skipped = f"only {format_seconds(max(0.0, search_end - now))} left for the search"
        refinement.note = "; no time to refine beside the search"
        skipped.append(f"refinement: not run, {refinement.skipped} (a refiner process beside it needs about "
                       f"{format_seconds(BESIDE_MIN_S)})")
    layout_s = [0.0]

    def leave(text: str) -> None:
        """Note what the time limit (or an interrupt) left out, once."""
        if text not in skipped:
            skipped.append(text)

    def layout_within_limit(cap, budget, t):  # noqa: ANN001, ANN202
        """(cap, budget) of a layout that is not interrupted: within the time limit, or past it on a first run
        after an install, with or without the exact search as the time left allows."""
        from hybrid.arena.layout import DEFAULT_BUDGET

        if cap is not None and end - t < one_layout and timings.compile_s > COMPILE_NOTE_S:
            # the first run after an install spent its limit compiling the kernels: a plan without offsets is not
            # the plan that runs (the executor would compact), so it is laid out anyway, past the limit by at most
            # one layout's estimate (without the exact search, below, unless compiled); later runs keep the limit
            cap = one_layout
            leave(f"arena layout: run up to {format_seconds(cap)} past the time limit (this first run after an "
                  f"install spent {format_seconds(timings.compile_s)} of it compiling the kernels)")
        elif cap is not None and end - t < one_layout and cap >= heuristic_layout_seconds(eval_s):
            # the search ran past its share (a process pool's start on a fresh machine): the heuristics and
            # re-plans still fit, and a plan with offsets is the plan that runs
            budget = dataclasses.replace(budget or DEFAULT_BUDGET, exact_tries=0)
            leave(f"arena layout: {format_seconds(max(0.0, end - t))} left of the time limit, under one layout's "
                  f"{format_seconds(one_layout)}: laid out without its exact search for near misses")
        elif cap is not None and end - t < one_layout:
            leave(f"arena layout: not run, {format_seconds(max(0.0, end - t))} left of the time limit and one "
                  f"layout takes about {format_seconds(one_layout)} here; the byte budget is written "
                  "without offsets (the executor compacts at run time if it must)")
            cap = None
        if cap is not None and not _exact_ready() and end - t < one_layout + EXACT_COMPILE_S:
            budget = dataclasses.replace(budget or DEFAULT_BUDGET, exact_tries=0)
            leave(f"arena layout: its exact search for near misses left out (a process's first use loads or "
                  f"compiles it: up to about {format_seconds(EXACT_COMPILE_S)}, more than the time left allows); "
                  "the heuristics and re-plans ran")
        elif cap is not None and not _exact_ready() and _exact_may_run(graph):
            # compiled here, outside the layout's cap, so that the compile's time (6 s unloaded, a minute on a
            # busy machine) never cuts the layout's counted work: one seed, one layout
            from hybrid.arena import exact

            timings.exact_compile_s += exact.warm_up()
            cap = _layout_cap(opts, end, eval_s)
        return cap, budget

    def lay_out_now(plan, others, result, population, stopped: bool = False, keep=None):  # noqa: ANN001, ANN202
        """(the Layout to write, laid out?). `keep`: a laid-out Layout written instead where `plan` lays out
        nowhere (the refined plan after the search's: the plan written is a plan that runs as planned)."""
        from hybrid.arena.layout import DEFAULT_BUDGET

        t = time.monotonic()
        if plan.allocation.kind != "unconstrained":   # laid out as planned (an arena) or size classes
            return _lay_out(graph, plan, None), False
        budget = None
        cap = _layout_cap(opts, end, eval_s) if arena else None
        if stopped and cap is not None and heuristic_layout_seconds(eval_s) <= INTERRUPT_LAYOUT_S:
            # Ctrl-C or SIGTERM: the heuristics' layout takes a moment here, and a plan with offsets is the plan that
            # runs; those few seconds are the layout's whatever the time limit had left (under `hybrid optimize` a
            # second signal stops at once)
            cap = INTERRUPT_LAYOUT_S
            budget = dataclasses.replace(DEFAULT_BUDGET, exact_tries=0)
            leave(f"arena layout: interrupted, so laid out by its heuristics and re-plans alone (at most "
                  f"{format_seconds(cap)})")
        elif stopped and cap is not None:   # the layout would take long: write the best plan now
            leave("arena layout: not run, interrupted; the byte budget is written without offsets (the executor "
                  "compacts at run time if it must)")
            cap = None
        else:
            cap, budget = layout_within_limit(cap, budget, t)
        if head is not None:     # seeds laid out within the full memory by the calibration: never slower to write
            others = list(others) + list(head.laid)
        t_lay = time.monotonic()
        try:
            lay = _lay_out(graph, plan, cap, others, result, population, opts.recompute, budget)
        except InfeasibleError as e:
            # another plan (a longer search, a little more memory) may lay out, so this is no reason to write
            # nothing (a short run on a small graph raised here): the plan is written without offsets, or `keep`
            why = (f"{e} (the layout took {format_seconds(time.monotonic() - t_lay)}"
                   + (", without the exact search" if budget is not None and budget.exact_tries == 0 else "") + ")")
            if keep is not None:
                leave(f"arena layout of the refined plan: {why}; the laid-out plan before it is written")
                layout_s[0] += time.monotonic() - t
                return keep, True
            leave(f"arena layout: {why}; the byte budget is written without offsets (the executor compacts at run "
                  "time if it must)")
            lay, cap = _lay_out(graph, plan, None), None
        layout_s[0] += time.monotonic() - t
        return lay, cap is not None

    # one evaluator for the search and, after refinement, its resumption: a second process pool would spend
    # the seconds refinement hands back starting up (the resumed search then ran 0 generations)
    start_forkserver()  # worker processes then leave SIGTERM and Ctrl-C to this process, which stops them in order

    def new_evaluator(dev: Device):  # noqa: ANN202 - ga.evaluation.Evaluator
        ev = make_evaluator(graph, dev, options, workers, opts.scheduler, end - time.monotonic())
        if eval_s > CHUNK_ONE_S and hasattr(ev, "chunks_per_worker"):
            # one candidate per task: when the time is up, at most one evaluation per worker is still running
            # (the pool's shutdown waits for it), not a chunk of several (NasNet-25 under load: seconds each)
            ev.chunks_per_worker = 1 << 16
        return ev

    evaluator = new_evaluator(search_device)
    layout = None
    laid = False
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # refinement may hand its time back to the search, which then resumes from the split's checkpoint
            split_ckpt = opts.checkpoint or (Path(tmp) / "split.ckpt" if after else None)
            refiner = None
            if beside:
                from hybrid.refine.beside import BesideRefiner
                from hybrid.refine.handoff import patience_s

                pat = (None if opts.refine_patience is None
                       else patience_s(opts.refine_share * total, opts.refine_patience))
                refiner = BesideRefiner(graph, search_device, options, deadline=search_end, seed=opts.config.seed,
                                        elites=opts.refine_elites, patience_s=pat, refine_options=opts.refine_options,
                                        plan_info={"time_limit_s": total})
            result = report = None
            population: list = []     # the arena fallback re-plans the next best byte-budget individuals

            def watch(state) -> None:  # noqa: ANN001 - ga.algorithm.SearchState
                population[:] = state.population
                if refiner is not None:
                    refiner.offer(state)

            t_search = time.monotonic()

            def search():  # noqa: ANN202
                nonlocal head, search_device, evaluator

                def run(generations: int | None, until: float, start=None,  # noqa: ANN001, ANN202
                        rescore: bool = False):
                    return optimize(graph, search_device, opts.config,
                                    time_limit_s=max(1e-3, until - time.monotonic()), generations=generations,
                                    evaluator=evaluator, options=options, checkpoint=split_ckpt,
                                    checkpoint_every=opts.checkpoint_every if opts.checkpoint else 0,
                                    resume=opts.resume, on_generation=prog.generation_hook(ga_end),
                                    handle_sigint=opts.stop_on_interrupt, observe=watch, stop_at_s=stop_at,
                                    start=start, rescore=rescore, full_device=device)

                # a headroom search re-calibrates halfway on its incumbent's layout (hybrid.arena.headroom.
                # recalibrate): not with a refiner (its plans are on the first device) nor a checkpoint
                half = (None if head is None or refiner is not None or after or opts.resume or opts.checkpoint
                        else _halfway(opts.generations, ga_end))
                if half is None:
                    return run(opts.generations, ga_end)
                first = run(*half)
                if first.stop_reason not in ("generations", "time limit") or first.state is None:
                    return first
                lost = _abandoned(first)
                if ga_end - time.monotonic() < HEADROOM_MIN_LAYOUTS * one_layout:
                    leave("headroom: not re-calibrated halfway, too little of the search's time left for a layout")
                    return _went_on(run(opts.generations, ga_end, first.state), lost)
                from hybrid.arena.headroom import recalibrate

                with interrupts_after():   # Numba layouts (a signal is acted on after the one started)
                    new = recalibrate(graph, device, first.to_plan(), head,
                                      deadline=time.perf_counter() + HEADROOM_SHARE * (ga_end - time.monotonic()))
                if new is None:
                    return _went_on(run(opts.generations, ga_end, first.state), lost)
                prog.note(new.describe())
                head, search_device = new, new.device(device)
                evaluator.close()
                evaluator = new_evaluator(search_device)
                return _went_on(run(opts.generations, ga_end, first.state, rescore=True), lost)
            try:
                try:
                    result = search()
                except InfeasibleError as e:
                    if not options.addresses:
                        raise
                    # the last resort: no individual the search tried has offsets within the memory; search the
                    # byte budget and lay its best out afterwards (hybrid.arena.layout's fallbacks, reported)
                    why = f"address-aware search: no plan with offsets within the memory ({e})"
                    leave(why + "; searched the byte budget and laid it out afterwards")
                    prog.note(why + "; searching the byte budget instead")
                    options = dataclasses.replace(options, addresses=False)
                    evaluator.close()
                    evaluator = make_evaluator(graph, device, options, workers, opts.scheduler,
                                               end - time.monotonic())
                    result = search()
            finally:
                prog.phase_end()
                if refiner is not None:
                    with deferred_interrupts():
                        if result is None or result.stop_reason == "lower bound":
                            refiner.close()  # nothing can beat the lower bound (or no search): do not wait for it
                        else:
                            report = refiner.finish()
            timings.search_s = time.monotonic() - t_search
            if result.stop_reason == "interrupted":
                # said now: checking and laying out the best plan takes seconds on a large graph (rnn-8-8k: 5 s)
                prog.note(f"{interrupted_by()}: the search stopped; checking and writing its best plan so far "
                          "(a few seconds); a second one stops at once without it")
            with deferred_interrupts() as hits:  # the best plan is written whole, even if a signal comes now
                plan = _on_device(graph, result.to_plan(time_limit_s=total), device, head)
                problem = _problem(graph, plan)
                if problem:  # a planner bug: say so rather than write a plan the executor would reject
                    raise HybridError(f"the best plan failed validation ({problem}); please report this with "
                                      "the graph file")
                search_plan = plan
                if report is not None:
                    plan = _beside_outcome(report, plan, refinement)
                    plan = plan if plan is search_plan else _on_device(graph, plan, device, head)
                    plan = _valid_or(graph, plan, search_plan, "the plan refined beside the search", failures,
                                     refinement)
                # handed on now, so an interrupted refinement still leaves the best so far
                layout, laid = lay_out_now(plan, [search_plan], result, population,
                                           result.stop_reason == "interrupted" or bool(hits))
                if prog.on_plan is not None:
                    prog.on_plan(layout.plan)
            interrupted = result.stop_reason == "interrupted" or bool(hits)
            done = result.stop_reason in ("interrupted", "lower bound") or hits
            if after and not done:
                # a search that ran out of generations has nothing to resume: refine for the whole share then
                more = result.stop_reason == "time limit"
                before, lost = plan, _abandoned(result)
                t_ref = time.monotonic()
                ref_in = plan if head is None else dataclasses.replace(plan, device=search_device)
                plan, resumed, stopped = _refine_after(
                    graph, search_device, ref_in, split_ckpt if more else None, search_end, opts.config.seed,
                    opts.refine_patience if more else None, prog, {"time_limit_s": total}, refinement,
                    opts.refine_options, handle_sigint=opts.stop_on_interrupt, generations=opts.generations,
                    evaluator=evaluator, options=options, checkpoint=opts.checkpoint,
                    checkpoint_every=opts.checkpoint_every, stop_at_s=stop_at, full_device=device)
                timings.search_s += time.monotonic() - t_ref
                plan = before if plan is ref_in else _on_device(graph, plan, device, head)
                interrupted = interrupted or stopped
                result = result if resumed is None else _went_on(resumed, lost)
                with deferred_interrupts() as hits:
                    if plan is not before:
                        plan = _valid_or(graph, plan, before, "the refined plan", failures, refinement)
                        if plan is not before:
                            layout, laid = lay_out_now(plan, [before, search_plan], result, population,
                                                       stopped or bool(hits), keep=layout if laid else None)
                            if prog.on_plan is not None:
                                prog.on_plan(layout.plan)
                interrupted = interrupted or bool(hits)
    finally:
        evaluator.close()
    timings.refine_s = refinement.seconds
    timings.layout_s = layout_s[0]
    written, laid_out_plan = layout.plan, None
    if cpsat and laid and not interrupted and written.allocation.kind == "arena":
        # the reserve's time left (the layout and validation took less than estimated): re-time the written plan's
        # copies with every offset kept (hybrid.refine.offsets), until the baselines' and the bound's share
        after_polish = LOAD_MARGIN * ((baselines_seconds(eval_s) if opts.baselines else 0.0) + summary_bound)
        polished = _polish(graph, written, end - after_polish, opts.config.seed, opts.refine_options, failures,
                           timings)
        if polished is not written:
            with deferred_interrupts():
                written, laid_out_plan = polished, written
                if prog.on_plan is not None:
                    prog.on_plan(written)
    out = OptimizeResult(plan=written, search_plan=search_plan, refined_plan=plan, search=result,
                         refinement=refinement, layout=layout if laid else None, budget=budget, timings=timings,
                         interrupted=interrupted, failures=failures, bounds=bounds, skipped=skipped,
                         laid_out_plan=laid_out_plan)
    with deferred_interrupts():
        # the bound of the written plan's kind, for the summary, if it fits in the time left
        for rc in [out.plan.recomputes] + ([not out.plan.recomputes] if opts.baselines else []):
            if rc not in bounds and not interrupted and time.monotonic() + bound_est <= end:   # baselines: both
                bounds[rc] = any_order_bound(graph, device, rc)
        if opts.baselines and interrupted:
            skipped.append("baselines: not run, interrupted")
        elif opts.baselines:
            from hybrid.pipeline.baselines import baseline_rows, with_faster_baseline

            t_base = time.monotonic()
            out.baselines = baseline_rows(graph, device, search_plan, out.plan, plan, deadline=end, bounds=bounds,
                                          relaxation=_relaxation(graph, result), addresses=options.addresses)
            with_faster_baseline(out, options.recomputes)
            if out.baseline_written and prog.on_plan is not None:
                prog.on_plan(out.plan)
            timings.baselines_s = time.monotonic() - t_base
    timings.wall_s = time.monotonic() - start
    return out


def workspaces_aside_problem(graph: Graph, device: Device) -> tuple[Graph, Device, int]:
    """(graph with no workspaces, device with the largest workspace less, that workspace): a plan of the first
    on the second is one of `graph` on `device` (rule 5: its tensors leave the largest workspace free at every
    instant) whose arena, a byte budget or size classes alike, is what the executor holds beside the workspaces
    PyTorch allocates outside it. The byte budget counts an op's workspace only while the op runs, so where one
    is large its plans lay out only with much memory given up: resnet-50 at 928 MiB on the H200's op times
    (copy fallback and cuDNN scratch stated: 254 MiB at most) wrote 96-107 ms searched that way, 39 ms this way
    (benchmarks/vs_torch_replay.py). The largest of the default implementations (what runs where a plan chooses
    none, as `lay_out`'s re-plans hold aside); an implementation with a larger workspace is left out of the search,
    the others stay free. Over every implementation the aside was larger than the memory where a slow kernel
    states a large scratch: vgg16's unfold_gemm and winograd 0.4-3.4 GiB on the H200's op times, 3-6x cuDNN's
    time, and 3.45 GiB aside left vgg16 and unet no plan at all (results/vs_torch_replay.md, 2026-11-30)."""
    aside = largest_workspace(graph, default_only=True)
    ops = [dataclasses.replace(op, workspace_bytes=0, impls=tuple(
               dataclasses.replace(im, workspace_bytes=0) for i, im in enumerate(op.impls)
               if im.workspace_bytes <= aside or i == op.default_impl))   # kept in order: the default stays one
           for op in graph.ops]
    bare = Graph(graph.name, list(graph.tensors), ops, graph.device, graph.extra)
    if device.usable_bytes - aside <= 0:
        raise HybridError(f"--workspaces-aside: the largest workspace ({format_bytes(aside)}) leaves the tensors "
                          f"nothing of the usable {format_bytes(device.usable_bytes)}; give more --memory")
    return bare, dataclasses.replace(device, memory_bytes=device.memory_bytes - aside), aside


def _workspaces_aside(graph: Graph, device: Device, time_limit_s: float | str, options: OptimizeOptions,
                      progress: Progress | None, started_at: float | None, after_s: float) -> OptimizeResult:
    """`run_optimize` of `workspaces_aside_problem`, its plans handed back as plans of `graph` on `device`
    (each checked by the validator; one plan object stays one: summaries compare them by identity). The
    any-order bounds are dropped: computed for the smaller problem, they do not bound plans of `graph` that
    leave the workspaces to their ops."""
    from hybrid.swap.to_plan import on_device
    from hybrid.validator import validate

    bare, smaller, aside = workspaces_aside_problem(graph, device)
    mapped: dict[int, "Plan"] = {}

    def back(plan: "Plan | None") -> "Plan | None":
        if plan is None:
            return None
        if id(plan) not in mapped:
            info = dict(plan.planner) if isinstance(plan.planner, dict) else {}
            info["workspaces_aside"] = aside
            out = on_device(graph, plan, device, graph_sha256=graph.sha256, planner=info)
            report = validate(graph, out)
            if not report.valid:
                raise HybridError(f"--workspaces-aside: a plan of the smaller problem is not one of the graph "
                                  f"({report.violations[0]}); please report this with the graph file")
            # the peak the file states counts the workspaces, as the validator's does
            mapped[id(plan)] = dataclasses.replace(out, metrics={**out.metrics, "peak_bytes": report.peak_bytes})
        return mapped[id(plan)]

    prog = progress or Progress()
    inner = dataclasses.replace(prog, on_plan=(lambda p: prog.on_plan(back(p))) if prog.on_plan else None)
    res = run_optimize(bare, smaller, time_limit_s, dataclasses.replace(options, workspaces_aside=False), inner,
                       time.monotonic() if started_at is None else started_at, after_s)
    res.plan, res.search_plan, res.refined_plan = back(res.plan), back(res.search_plan), back(res.refined_plan)
    res.laid_out_plan, res.searched_plan = back(res.laid_out_plan), back(res.searched_plan)
    if res.layout is not None:
        res.layout = dataclasses.replace(res.layout, plan=back(res.layout.plan))
    if res.baselines is not None:
        res.baselines.plans = {k: back(p) for k, p in res.baselines.plans.items()}
    res.bounds.clear()
    return res


def _relaxation(graph: Graph, result) -> "Plan | None":  # noqa: ANN001 - ga.SearchResult
    """The search's best individual planned on the byte budget (memory that never fragments): the relaxation
    row of an address-aware search; None when the search planned byte budgets already (a headroom search's
    genes re-planned on the full memory would be no bound: tuned for less) or could not re-plan."""
    from hybrid.errors import InfeasibleError
    from hybrid.swap.planner import SwapPlanner
    from hybrid.swap.to_plan import to_plan

    from hybrid.swap.pools import byte_pool

    space, best = result.space, result.best
    opt = space.options_for(best)
    if not opt.addresses:
        return None
    try:   # the best individual's schedule and genes (a size-class winner's too) on the byte budget
        aug = SwapPlanner(graph, space.device).plan(best.schedule, byte_pool(graph, space.device),
                                                    dataclasses.replace(opt, addresses=False))
    except InfeasibleError:
        return None
    return to_plan(aug, {**result.planner_info(), "relaxation": "byte budget"})


def _abandoned(before) -> int:  # noqa: ANN001 - ga.SearchResult
    """Evaluations of the generation a stop abandoned in `before`: done, but not in its state (the search that
    goes on replays that generation). Read before that search starts: it goes on from the same state object and
    counts into it (read after, a halfway recalibration's 236 evaluations were reported as the first half's 94)."""
    return 0 if before.state is None else before.evaluations - before.state.evaluations


def _went_on(result, abandoned: int):  # noqa: ANN001, ANN202 - ga.SearchResult
    """`result`, a search that went on from a stopped one, with that one's abandoned evaluations counted."""
    return dataclasses.replace(result, evaluations=result.evaluations + abandoned)


def _halfway(generations: int | None, ga_end: float) -> tuple[int | None, float] | None:
    """Where a headroom search stops to re-calibrate: after half its generations (at least one each side), else
    half its time; None where it is too short to split."""
    if generations is not None:
        return (generations // 2, ga_end) if generations >= 2 else None
    return None, time.monotonic() + 0.5 * max(0.0, ga_end - time.monotonic())


def _headroom(graph: Graph, device: Device, opts: OptimizeOptions, prog: Progress, end: float,  # noqa: ANN202
              options: Any, eval_s: float, skipped: list[str]):
    """With `opts.headroom`, the share of the memory the search gives up (hybrid.arena.headroom), noted; its
    layouts stop at HEADROOM_SHARE of the time left (the one started is finished). None where the time left
    would not also fit the layout that gives the memory back (a first run whose kernels compiled for most of
    the limit): a search on less memory, written without that layout, would only be slower (`skipped` says so)."""
    if opts.headroom is False:
        return None
    from hybrid.arena.headroom import calibrate

    left = max(0.0, end - time.monotonic())
    need = HEADROOM_MIN_LAYOUTS * layout_seconds(eval_s, layout_fixed_s(graph))
    if opts.headroom is None and left < need:
        skipped.append(f"headroom: not calibrated, {format_seconds(left)} left of the time limit (it needs about "
                       f"{format_seconds(need)}: its own layouts and the one after the search); the search plans "
                       "the full memory")
        return None
    head = calibrate(graph, device, opts.recompute, deadline=time.perf_counter() + HEADROOM_SHARE * left,
                     base=options, least_usable=_class_pool_floor(graph, device, opts, options))
    prog.note(head.describe())
    return head


_UNKNOWN = object()   # a checkpoint that does not record its plans' device: the headroom is calibrated as ever


def _resumed_headroom(device: Device, opts: OptimizeOptions, prog: Progress):  # noqa: ANN202 - Headroom | None
    """A resume searches on its checkpoint's memory: the headroom it planned with, to the byte, noted (None: it
    planned on the full memory). _UNKNOWN where the checkpoint does not say (an older version's: calibrated as
    ever, and refused where that gives another memory)."""
    from ga.checkpoint import searched_memory
    from hybrid.arena.headroom import Headroom

    m = searched_memory(opts.resume, device)
    if m is None:
        return _UNKNOWN
    if m == device.memory_bytes:
        return None
    head = Headroom.resumed(device, m)
    if opts.headroom is False or opts.arena_s is None:
        flag = "--no-headroom (headroom=False)" if opts.headroom is False else "--no-arena (arena_s=None)"
        raise HybridError(f"--resume {opts.resume}: the checkpoint's search planned with "
                          f"{format_bytes(device.memory_bytes - m)} ({100 * head.shrink:.3g}%) less memory than "
                          f"this device's, its headroom (hybrid/arena/headroom.py), which {flag} leaves out; "
                          f"resume it without {flag.split()[0]}")
    prog.note(head.describe())
    return head


def _class_pool_floor(graph: Graph, device: Device, opts: OptimizeOptions, options: Any) -> int:
    """With `--pool classes`, the usable bytes the least size-class pool needs (its objects plus the workspace
    beside them): the headroom leaves at least that, or the search on less memory could not start (its refusal
    then named the shrunk memory, not the user's). 0 otherwise: `auto` falls back to a byte pool."""
    if opts.config.pool != "classes":
        return 0
    from ga.repair import min_floor_cls
    from ga.encoding import SearchSpace

    space = SearchSpace.build(graph, device, options)
    floor = int(min_floor_cls(space)[1])
    return floor + int(device.usable_bytes - space.budget)


POLISH_MIN_S = 1.0    # less time left than this: the laid-out plan is written as it is


def _polish(graph: Graph, plan: "Plan", until: float, seed: int, options: Any, failures: list[str],
            timings: Timings) -> "Plan":
    """`plan` (laid out: an arena) with its copies re-timed by CP-SAT until `until` (monotonic), every offset
    kept (`hybrid.refine.refine` on an arena plan); `plan` itself where there is no time, nothing faster, or the
    result fails validation (named in `failures`: a bug). Issue 31's deliverable 3: refinement that keeps the
    layout valid, run on what is written rather than on the byte budget it came from."""
    from hybrid.refine import refine

    left = until - time.monotonic()
    if left < POLISH_MIN_S:
        return plan
    t0 = time.monotonic()
    try:
        res = refine(graph, plan, time_limit_s=left, seed=seed, options=options)
    except (HybridError, KeyboardInterrupt):
        return plan     # a plan it cannot re-time (or Ctrl-C): the laid-out plan stands
    finally:
        timings.polish_s = time.monotonic() - t0
    if not res.improved or res.plan.makespan_s >= plan.makespan_s:
        return plan
    problem = _problem(graph, res.plan)
    if problem:
        failures.append(f"the laid-out plan re-timed with its offsets kept failed validation ({problem}); the "
                        "laid-out plan is written")
        return plan
    info = dict(plan.planner) if isinstance(plan.planner, dict) else {}
    info["offsets_kept_refine"] = {"from_makespan_s": plan.makespan_s, "windows": res.windows,
                                   "accepted": res.accepted, "stop": res.stop}
    if isinstance(res.plan.planner.get("arena"), dict):   # the layout record as re-measured on the new events
        info["arena"] = res.plan.planner["arena"]
    return dataclasses.replace(res.plan, planner=info)


def _on_device(graph: Graph, plan: "Plan", device: Device, head) -> "Plan":  # noqa: ANN001 - Headroom | None
    """A plan the headroom search (or its refiner) made on its smaller device, on the real one, saying how much
    memory it gave up (hybrid.arena.layout's grow step reads it); without `head`, `plan` itself."""
    if head is None:
        return plan
    from hybrid.swap.to_plan import on_device

    info = {**plan.planner, "headroom": head.to_json()} if isinstance(plan.planner, dict) else plan.planner
    return on_device(graph, plan, device, planner=info)


def _layout_cap(opts: OptimizeOptions, end: float, eval_s: float) -> float | None:
    """The arena layout's time cap: its own (`arena_s`), and the limit less what the baselines will need."""
    if opts.arena_s is None:
        return None
    after = baselines_seconds(eval_s) if opts.baselines else 0.0
    return max(0.0, min(opts.arena_s, end - after - time.monotonic()))


def _exact_may_run(graph: Graph) -> bool:
    """Whether the layout's exact search may run on this graph's plans (`LayoutBudget.exact_max_buffers`
    buffers at most; a plan has about one per tensor)."""
    from hybrid.arena.layout import DEFAULT_BUDGET

    return graph.arrays.n_tensors <= 2 * DEFAULT_BUDGET.exact_max_buffers


def _exact_ready() -> bool:
    """Whether the arena's exact search is loaded in this process (`hybrid.arena.exact.warm_up`)."""
    from hybrid.arena import exact

    return bool(getattr(exact, "_warmed", False))


def _lay_out(graph: Graph, plan: "Plan", arena_s: float | None, others=(),  # noqa: ANN001, ANN202
             result=None, population=(), recompute: bool = True, budget=None):
    """`plan` with exact arena offsets (or its fallback, hybrid.arena.layout), checked by its validator; with
    `arena_s` None, `plan` as it is. `population`: the search's last population, whose next best byte-budget
    individuals are re-planned too. Returns the Layout to write; InfeasibleError where none fits (the caller
    writes the plan without offsets and says why)."""
    from hybrid.arena.layout import DEFAULT_BUDGET, Layout, Replan, belady_replan, lay_out

    if arena_s is None:
        return Layout(plan, "", 0, plan.makespan_s, 0.0)
    replans, twins = [], 0
    if result is not None:
        # re-binding reruns in time order packs a byte budget tighter than offsets can follow: each individual
        # re-planned is also tried without it (MobileNet at 25% of peak: 5.92 s as a byte budget, 7.71 s once laid
        # out, against 6.2 s laid out from a population member planned without it; ResNet-18 at 64 MiB gains by it)
        twin = result.space.options.rebind_reruns and result.space.options.recomputes
        seen: set[float] = set()
        for ind in [result.best] + sorted((i for i in population if i.by_bytes and np.isfinite(i.makespan)),
                                          key=lambda i: i.makespan):
            if len(seen) >= 4:
                break
            if round(ind.makespan, 12) in seen:
                continue
            seen.add(round(ind.makespan, 12))
            name = "search genes" if ind is result.best else f"population {len(seen)}"
            replans.append(Replan(name, _genes_replan(graph, plan, result, ind),
                                  _genes_replan(graph, plan, result, ind, workspaces_aside=True)))
            if twin:   # a re-plan without reruns is its twin's plan: refused at once (no layout spent on it)
                replans.append(Replan(f"{name}, reruns not re-bound",
                                      _genes_replan(graph, plan, result, ind, rebind_reruns=False, reruns_only=True)))
                twins += 1
    replans.append(belady_replan(graph, plan, recompute))
    classes = []              # the search's fastest size-class plan: a fallback that needs no offsets
    if result is not None:
        from hybrid.swap.planner import SwapPlanner
        from hybrid.swap.to_plan import on_device, to_plan

        space = result.space
        for ind in sorted((i for i in population if not i.by_bytes and np.isfinite(i.makespan)),
                          key=lambda i: i.makespan)[:1]:
            aug = SwapPlanner(graph, space.device).plan(ind.schedule, space.pool(ind), space.options_for(ind))
            classes.append(on_device(graph, to_plan(aug, result.planner_info()), plan.device))
    budget = budget or DEFAULT_BUDGET
    if twins:   # the twins take no turn nor work away from the sources they double
        budget = dataclasses.replace(budget, sources=max(budget.sources, len(replans)),
                                     work=budget.work * len(replans) // (len(replans) - twins))
    return lay_out(graph, plan, arena_s, others=[o for o in others if o is not plan] + classes,
                   replans=replans, recompute=recompute, budget=budget)     # validated by lay_out (a plan that is not a byte budget passes through, validated before)


def _genes_replan(graph, plan, result, ind, reruns_only: bool = False, workspaces_aside: bool = False,  # noqa: ANN001, ANN202
                  **changes):  # noqa: ANN003
    """Plan an individual of the search again (its schedule, policy and recompute genes; `changes` to its
    PlannerOptions) for another byte budget: the arena fallback that keeps what the search found.
    `reruns_only`: a plan that reruns no op is refused (InfeasibleError: `lay_out` counts it a miss);
    `workspaces_aside`: as `replan_schedule`'s."""
    from hybrid.arena.layout import replan_schedule
    from hybrid.errors import InfeasibleError

    options = dataclasses.replace(result.space.options_for(ind), **changes)

    def make(budget: int) -> "Plan":
        out = replan_schedule(graph, plan, budget, order=ind.schedule, options=options, info=result.planner_info(),
                              workspaces_aside=workspaces_aside)
        if reruns_only and not out.recomputes:
            raise InfeasibleError("no reruns: the plan of its twin source")
        return out

    return make


def _beside_outcome(report, search_plan: "Plan", ref: Refinement) -> "Plan":  # noqa: ANN001 - BesideReport
    """The faster of the search's best and the refiner's best; `ref` records what the refiner did."""
    r = report
    ref.ran, ref.report = True, r
    ref.plans, ref.elites, ref.windows, ref.accepted = r.refined, r.elites, r.windows, r.accepted
    ref.seconds, ref.error = r.busy_s, r.error
    note = (f"; CP-SAT beside the search refined {r.refined} plan{'s' if r.refined != 1 else ''} ({r.elites} "
            f"elite{'s' if r.elites != 1 else ''} after its best), {counted(r.windows, 'window')}, {r.accepted} accepted")
    if r.error:
        note += f" ({r.error})"
    plan = r.pick(search_plan)
    if plan is not search_plan:
        ref.source, ref.from_makespan_s, ref.makespan_s = "cpsat", r.from_makespan_s, plan.makespan_s
        how = " (by its re-walk and copy-stream order: no window changed it)" if not r.accepted else ""
        ref.note = (note + f": {format_seconds(r.plan.makespan_s)} from a search plan of "
                    f"{format_seconds(r.from_makespan_s)}{how}, "
                    f"{100 * (1 - r.plan.makespan_s / search_plan.makespan_s):.2g}% below the search's best")
        return plan
    ref.makespan_s = search_plan.makespan_s
    ref.note = note + ": nothing faster than the search's best"
    return search_plan


def _problem(graph: Graph, plan: "Plan") -> str:
    """The plan's first broken rule as text, or '' when it validates."""
    from hybrid.validator import validate

    report = validate(graph, plan)
    if report.valid:
        return ""
    v = report.violations[0]
    return f"rule {v.rule}: {v.message}"


def _valid_or(graph: Graph, plan: "Plan", fallback: "Plan", what: str, failures: list[str],
              ref: Refinement) -> "Plan":
    """`plan` if it validates, else `fallback` (already validated), noting the failure."""
    if plan is fallback:
        return plan
    problem = _problem(graph, plan)
    if problem:
        failures.append(f"{what} failed validation ({problem})")
        ref.rejected, ref.source = failures[-1], "ga"
        return fallback
    return plan


def _refine_after(graph: Graph, device: Device, plan: "Plan", split_ckpt, deadline: float, seed: int,  # noqa: ANN001
                  patience: float | None, prog: Progress, plan_info: dict, ref: Refinement,
                  refine_options: Any = None, **resume_kw: Any) -> tuple["Plan", Any, bool]:
    """CP-SAT on the search's best plan; when it stalls, the search resumes with the time left
    (`hybrid.refine.handoff`). Returns (the fastest plan, the resumed search's result or None, whether Ctrl-C
    or SIGTERM stopped it); `ref` records what happened."""
    from hybrid.refine.handoff import refine_then_resume

    seconds = deadline - time.monotonic()
    ref.from_makespan_s = ref.makespan_s = plan.makespan_s
    if seconds <= 0.5:
        ref.skipped, ref.note = "no time left", "; no time left to refine"
        return plan, None, False
    try:
        hand = refine_then_resume(graph, device, plan, split_ckpt, deadline=deadline, seed=seed,
                                  patience=patience, refine_options=refine_options, refine_progress=prog.on_refine, plan_info=plan_info,
                                  on_generation=prog.generation_hook(deadline), **resume_kw)
    except KeyboardInterrupt:
        ref.interrupted, ref.note = True, "; refinement interrupted (the GA's plan is kept)"
        return plan, None, True
    except HybridError as e:
        if plan.allocation.kind != "arena":
            raise
        # an arena plan the refiner cannot re-time (reruns; events whose offsets do not walk): the plan stands
        ref.skipped, ref.note = str(e), f"; refinement not run ({e})"
        return plan, None, False
    finally:
        prog.phase_end()
    r = hand.refine
    ref.ran, ref.report, ref.source = True, hand, hand.source
    ref.seconds, ref.windows, ref.accepted, ref.stop = hand.refine_s, r.windows, r.accepted, r.stop
    ref.makespan_s = hand.plan.makespan_s
    note = (f"; CP-SAT refined {format_seconds(plan.makespan_s)} -> {format_seconds(r.plan.makespan_s)} "
            f"({100 * (1 - r.plan.makespan_s / plan.makespan_s):.2g}% faster)"
            if r.improved else "; CP-SAT found no faster timing")
    note += f" in {format_seconds(hand.refine_s)} ({r.stop})"
    if hand.resumed is not None:
        ref.resume_s = hand.resume_s
        ref.resumed_generations = hand.resumed.generations
        note += (f", then the GA resumed for {format_seconds(hand.resume_s)}"
                 + (f" and found {format_seconds(hand.plan.makespan_s)}" if hand.source == "ga" else ""))
    ref.note = note
    stopped = r.stop == "interrupted" or (hand.resumed is not None and hand.resumed.stop_reason == "interrupted")
    ref.interrupted = stopped
    return hand.plan, hand.resumed, stopped
