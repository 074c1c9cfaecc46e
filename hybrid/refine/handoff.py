"""GA, then CP-SAT refinement, then the GA again with the time refinement could not use.

Refinement is given the last part of a budget, but on plans the genetic search
already made good it often finds nothing after a few windows; the rest of its
share would then be wasted while more generations might still help. So
refinement runs with a patience: when it has not lowered the makespan for
`patience` of its share it stops, and the search resumes from the checkpoint it
wrote at the split (the same population and random state, so the same
generations it would have run without refinement) until the deadline. The
result is the faster of the refined plan and the resumed search's best.

`hybrid optimize --refine-mode after` and `hybrid.report.compare(mode="after")` (the
GA+CP-SAT arm) both go through `refine_then_resume`; where a second core is
free, refining beside the search (`hybrid.refine.beside`) costs it no time.

With a `WorkBudget` the same protocol runs on counted work instead of seconds, so that a seed fixes the
result whatever the machine's load: refinement gets a number of CP-SAT windows (each on deterministic time)
and a patience in windows, and the windows it leaves unused hand back the same share of the search's
generations (`WorkBudget.handed_back`). The deadline then only guards against a runaway run.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from hybrid.graph import Graph
from hybrid.plan import Plan

if TYPE_CHECKING:
    from ga.result import SearchResult
    from hybrid.device import Device
    from hybrid.refine import RefineOptions, RefineProgress, RefineResult

# Share of the refinement budget without a lower makespan after which refinement hands back the rest.
# Measured on the GA's split plans of the nine compare graphs (24 s each, results/refine_compare.md): gains that
# matter came in the first 2 s (SegNet 1.1%, VGG-UNet 0.5%); later ones were at most 0.12%.
DEFAULT_PATIENCE = 0.1
MIN_RESUME_S = 0.5  # below this, resuming the search (loading its checkpoint, one generation) cannot pay


@dataclass(frozen=True)
class WorkBudget:
    """Refinement's share of an after-mode budget in counted work (see the module's docstring)."""

    windows: int                      # CP-SAT windows refinement may solve
    generations: int                  # generations the search would run in the same share
    patience_windows: int | None = None  # windows without a lower makespan before handing back (None: never)

    def __post_init__(self) -> None:
        from hybrid.errors import HybridError

        if self.windows < 1:
            raise HybridError(f"--windows must be at least 1, got {self.windows}")
        if self.generations < 0:
            raise HybridError(f"--generations must not be negative, got {self.generations}")
        if self.patience_windows is not None and self.patience_windows < 1:
            raise HybridError(f"the window patience must be at least 1, got {self.patience_windows}")

    def handed_back(self, windows_used: int) -> int:
        """Generations the search resumes for when refinement stopped after `windows_used` windows."""
        unused = max(0, self.windows - windows_used)
        return self.generations * unused // self.windows

    @staticmethod
    def patience_of(windows: int, share: float | None = DEFAULT_PATIENCE) -> int | None:
        """The window patience for a budget of `windows`: `share` of it (as `patience_s`), at least 2 windows."""
        return None if share is None else max(2, round(share * windows))


@dataclass
class Handoff:
    plan: Plan                        # the faster of the refined plan and the resumed search's best
    source: str                       # "cpsat" (refined split plan) or "ga" (the resumed search's best)
    refine: "RefineResult"
    resumed: "SearchResult | None"    # None when refinement used the whole budget (or nothing was left)
    refine_s: float
    resume_s: float


def patience_s(seconds: float, share: float = DEFAULT_PATIENCE) -> float:
    """Refinement's patience for a budget of `seconds`: `share` of it, at least one second."""
    return max(1.0, share * seconds)


def refine_then_resume(graph: Graph, device: "Device", split_plan: Plan, split_checkpoint: str | Path | None, *,
                       deadline: float, seed: int, refine_options: "RefineOptions | None" = None,
                       patience: float | None = DEFAULT_PATIENCE,
                       refine_progress: "Callable[[RefineProgress], None] | None" = None,
                       plan_info: dict[str, Any] | None = None, work: WorkBudget | None = None,
                       **resume_kw: Any) -> Handoff:
    """Refine `split_plan` until it stalls, then resume the search in `split_checkpoint` until `deadline` (monotonic).

    `patience` is a share of the time left for refinement (None: none; refinement then stops only when it
    converges or the deadline comes). Whenever it stops before the deadline, the search resumes (unless
    `split_checkpoint` is None: nothing to resume, e.g. a search that ran out of generations).
    `resume_kw` goes to `ga.optimize` (workers, scheduler, on_generation, handle_sigint, checkpoint to keep
    the resumed search's state). `plan_info` is added to the resumed search's plan metadata.
    With `work`, refinement stops at its window budget or window patience (`patience` is then unused) and
    the search resumes for `work.handed_back(windows used)` generations; `deadline` is only a safety net.
    """
    from ga import optimize
    from ga.checkpoint import checkpoint_generation
    from hybrid.refine import RefineOptions, refine

    t0 = time.monotonic()
    budget = max(0.0, deadline - t0)
    opts = refine_options or RefineOptions()
    if work is not None:
        opts = replace(opts, max_windows=work.windows, patience_windows=work.patience_windows, patience_s=None)
    elif patience is not None:
        opts = replace(opts, patience_s=patience_s(budget, patience))
    # One CP-SAT worker per window: deterministic for a seed, and on these small windows two workers solved
    # as many windows but had fewer improvements confirmed (Inception-v4-4's GA plan, 40 s: 2 of 25 windows
    # accepted, -3.7%, with one worker; 0 of 22 with two).
    ref = refine(graph, split_plan, time_limit_s=budget, seed=seed, workers=1, progress=refine_progress,
                 options=opts)
    t1 = time.monotonic()
    out = Handoff(plan=ref.plan, source="cpsat", refine=ref, resumed=None, refine_s=t1 - t0, resume_s=0.0)
    left = deadline - t1
    if split_checkpoint is None or ref.stop in ("time limit", "interrupted"):
        return out
    extra: dict[str, Any] = {}
    if work is not None:
        back = work.handed_back(ref.windows)  # 0 once refinement used its whole window budget
        if back == 0:
            return out
        extra["generations"] = checkpoint_generation(split_checkpoint) + back
    elif left < MIN_RESUME_S:
        return out
    resumed = optimize(graph, device, time_limit_s=max(1e-3, left), resume=split_checkpoint, **extra, **resume_kw)
    out.resumed, out.resume_s = resumed, time.monotonic() - t1
    if resumed.makespan_s < out.plan.makespan_s:
        out.plan, out.source = resumed.to_plan(**(plan_info or {})), "ga"
    return out
