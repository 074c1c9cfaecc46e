"""The optimize flow as a library: `run_optimize(graph, device, time_limit_s, OptimizeOptions(...))` searches
(`ga`), refines (`hybrid.refine`), validates, lays out (`hybrid.arena`) and compares with the baselines, within
one time limit, and returns an `OptimizeResult` that says what each step did. `hybrid optimize` and
`hybrid compare` call it; it reports through `Progress` callbacks and never prints."""
from hybrid.pipeline.baselines import BASELINES, baseline_rows
from hybrid.pipeline.optimize import (ARENA_AUTO_S, OptimizeOptions, Progress, refine_available, run_optimize,
                                      split_cores, warm_kernels)
from hybrid.pipeline.result import Baselines, Budget, OptimizeResult, Refinement, Timings

__all__ = ["ARENA_AUTO_S", "BASELINES", "Baselines", "Budget", "OptimizeOptions", "OptimizeResult", "Progress",
           "Refinement", "Timings", "baseline_rows", "refine_available", "run_optimize", "split_cores", "warm_kernels"]
