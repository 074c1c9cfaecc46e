"""What `run_optimize` returns: the written plan and, in fields rather than sentences, how it came to be."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hybrid.units import format_change, format_seconds

if TYPE_CHECKING:
    from ga.result import SearchResult
    from hybrid.arena.layout import Layout
    from hybrid.graph import Graph
    from hybrid.plan import Plan


@dataclass
class Refinement:
    """What CP-SAT refinement did to the search's best plan.

    `mode`: "none" (not asked for), "beside" (a second process refined the search's plans while it ran) or
    "after" (the search stopped at its share of the budget and its best plan was refined; when refinement
    stalled, the search resumed). `source`: "ga" when the search's own plan (or, after, the resumed search's)
    was kept, "cpsat" when the refined plan was."""

    mode: str = "none"
    ran: bool = False
    source: str = "ga"
    from_makespan_s: float = float("nan")   # the plan refinement started from
    makespan_s: float = float("nan")        # the plan refinement handed on (its own or the search's)
    seconds: float = 0.0                    # time spent refining
    windows: int = 0
    accepted: int = 0
    stop: str = ""                          # after: why refinement stopped (hybrid.refine.RefineResult.stop)
    plans: int = 0                          # beside: plans refined (the search's best, then elites)
    elites: int = 0                         # beside: of those, elites other than the search's best at the time
    resumed_generations: int = 0            # after: generations the search ran after refinement handed back
    resume_s: float = 0.0
    skipped: str = ""                       # why it did not run although asked for ("no time left", ...)
    error: str = ""                         # the refiner's own failure, if any (the search's plan is then kept)
    rejected: str = ""                      # a refined plan that failed validation (then the search's is kept)
    interrupted: bool = False
    note: str = ""                          # the same, as the summary line's clause ("; CP-SAT ...")
    report: Any = None                      # beside: the hybrid.refine.beside.BesideReport; after: the Handoff


@dataclass
class Timings:
    """Wall time per phase, in seconds, all inside the time limit (`wall_s` is the whole run, from `started_at`)."""

    setup_s: float = 0.0       # from `started_at` to the search's start: loading, imports, timing one evaluation
    compile_s: float = 0.0     # of setup_s: the planner's Numba kernels (tens of seconds only after an install)
    exact_compile_s: float = 0.0   # of layout_s: the arena's exact search, compiled once per process (Numba)
    search_s: float = 0.0      # the genetic search (and, after, refinement and the resumed search)
    refine_s: float = 0.0
    layout_s: float = 0.0
    polish_s: float = 0.0      # CP-SAT re-timing the laid-out plan, its offsets kept (the reserve's time left)
    baselines_s: float = 0.0
    wall_s: float = 0.0


@dataclass(frozen=True)
class Budget:
    """How `time_limit_s` was split (see `hybrid.pipeline.optimize`): everything runs within `total_s` of the
    start; `reserve_s` of it, at the end, is kept for the arena layout, the baselines and the summary."""

    total_s: float
    reserve_s: float
    search_until_s: float      # seconds after the start when the search (and refinement after it) must end
    ga_until_s: float          # after: when the search stops for refinement (else equal to search_until_s)


@dataclass
class Baselines:
    """The written plan next to the obvious alternatives: `hybrid.pipeline.rows.plan_row` rows, and notes
    (a baseline that cannot run, one the time limit left out, what the rows compare)."""

    rows: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    plans: dict[str, "Plan"] = field(default_factory=dict)   # the baselines laid out as the written plan is
    written_row: int = -1      # the row of the plan written (by position: labels differ with the flow)

    def written_rows(self) -> list[dict]:
        """The rows, each with `written`: True on the written plan's row alone (its label differs with the flow:
        "optimize", "optimize, written (exact offsets)", a baseline written instead)."""
        return [{**r, "written": i == self.written_row} for i, r in enumerate(self.rows)]


@dataclass(repr=False)
class OptimizeResult:
    """`plan` is the plan to write (handed to `Progress.on_plan`); `search_plan` the search's best (a byte budget
    or size classes, as evaluated); `refined_plan` the plan handed to the arena layout (the search's best or its
    refinement). `layout` is None with `arena_s=None`."""

    plan: "Plan"
    search_plan: "Plan"
    refined_plan: "Plan"
    search: "SearchResult"
    refinement: Refinement
    layout: "Layout | None"
    budget: Budget
    timings: Timings
    baselines: Baselines | None = None
    interrupted: bool = False
    failures: list[str] = field(default_factory=list)   # refined plans that failed validation (a bug: report it)
    bounds: dict[bool, float] = field(default_factory=dict)   # any-order lower bounds computed within the limit,
    #                                   keyed by recompute (True: with recompute, holds for every plan; False: swap only)
    skipped: list[str] = field(default_factory=list)    # what the time limit left out, and what was done instead
    laid_out_plan: "Plan | None" = None   # the layout's plan, where CP-SAT then re-timed it with its offsets kept
    #                                       (`plan` is then the re-timed one: same offsets, faster)
    baseline_written: str = ""           # a baseline laid out the same way that was faster, written instead ...
    searched_plan: "Plan | None" = None   # ... of this plan, the search's laid out (`with_faster_baseline`)

    def __repr__(self) -> str:
        """One line, for notebooks: the dataclass default printed the search's arrays and the layout's trials
        (24 KB)."""
        search = self.search   # getattr: a result put together by hand (tests) may have no search
        return (f"OptimizeResult(plan makespan {format_seconds(self.plan.makespan_s)}, "
                f"{self.plan.allocation.kind} allocation, stop {getattr(search, 'stop_reason', None)!r}, "
                f"{getattr(search, 'generations', '?')} generations, interrupted {self.interrupted}, "
                f"{self.timings.wall_s:.1f} s)")

    def bound(self) -> tuple[float, str] | None:
        """The tightest computed lower bound that holds for the written plan, and its name; None if none."""
        rc = self.plan.recomputes
        if not rc and False in self.bounds:
            return self.bounds[False], "any order, swap only"
        if True in self.bounds:
            return self.bounds[True], "any order, with recompute"
        return None

    @property
    def stop_reason(self) -> str:
        """Why the search stopped: generations, time limit, lower bound, interrupted, stopped."""
        return self.search.stop_reason

    def frame(self, graph: "Graph | None" = None) -> "pd.DataFrame":  # noqa: F821 - pandas, a core dependency
        """The summary table as a DataFrame, one row a plan, the columns `hybrid optimize --json` gives its
        baselines (seconds and bytes): with `baselines=True` the baseline and optimize rows, else the written
        plan's row alone (with `graph`, its stall, bytes and peak from its events and its bounds). `written` is
        True on the written plan's row, whichever its label: `df[df.written]` selects it in both forms."""
        import pandas as pd

        from hybrid.pipeline.rows import any_order_bound, plan_row

        if self.baselines is not None:
            return pd.DataFrame(self.baselines.written_rows())
        bounds = dict(self.bounds or {})
        rc = bool(self.plan.recomputes)
        if graph is not None and rc not in bounds:   # the search computed its own kind's; the plan may be the other
            bounds[rc] = any_order_bound(graph, self.plan.device, rc)
        return pd.DataFrame([{**plan_row("optimize, written", self.plan, graph, bounds or None), "written": True}])

    def difference(self) -> str:
        """One plain line on why the written plan is not the search's best, and at what cost; '' when it is."""
        plan, best = self.searched_plan or self.plan, self.search_plan
        if plan is best and not self.baseline_written:
            return ""
        why = []
        if self.refinement.source == "cpsat" and self.refined_plan is not best:
            why.append(f"CP-SAT refinement re-timed its copies ({_change(self.refined_plan, best)})")
        elif self.refined_plan is not best:
            why.append(f"the search resumed after refinement and found a faster plan ({_change(self.refined_plan, best)})")
        lay, laid = self.layout, self.laid_out_plan or plan
        if lay is not None and laid is not self.refined_plan:
            if lay.fallback in ("more memory", "laid-out candidate"):
                why.append(f"{lay.describe(with_cost=False)} ({_change(laid, self.refined_plan)})")
            elif lay.fallback:
                why.append(f"the byte budget did not lay out in the arena, so {_fallback(lay)} was written "
                           f"({_change(laid, self.refined_plan)})")
            elif laid.allocation.kind == "arena" and laid.makespan_s != self.refined_plan.makespan_s:
                why.append("exact arena offsets were given to every tensor "
                           f"({_change(laid, self.refined_plan)})")
        if self.laid_out_plan is not None:
            why.append(f"CP-SAT re-timed the laid-out plan's copies, every offset kept ({_change(plan, laid)})")
        if self.baseline_written:
            why.append(f"the {self.baseline_written} baseline, laid out the same way, was faster and is written "
                       f"({_change(self.plan, plan)})")
        if not why:
            return ""
        total = format_change(self.plan.makespan_s / best.makespan_s - 1.0)
        return (f"written plan differs from the search's best ({format_seconds(best.makespan_s)}): "
                + "; then ".join(why) + (f"; in all {total} makespan" if total else "; in all the same makespan"))


def _change(new: "Plan", old: "Plan") -> str:
    """'old -> new' makespan with digits enough to tell the two apart (not '1.131 ms -> 1.131 ms' for a 0.03%
    change); 'the same makespan' where they are equal to seven digits."""
    a, b = old.makespan_s, new.makespan_s
    for digits in (4, 5, 6, 7):
        fa, fb = format_seconds(a, digits), format_seconds(b, digits)
        if fa != fb:
            return f"{fa} -> {fb}"
    return f"the same makespan, {format_seconds(b)}"


def _fallback(lay: "Layout") -> str:
    if lay.fallback == "re-planned":
        within = f" ({lay.headroom_note})" if lay.headroom_note else ""
        return f"a re-plan ({lay.source}) with {lay.memory_words()}{within}"
    if lay.fallback == "size classes":
        return "a plan with per-size classes"
    return f"a slower candidate ({lay.source})"
