"""CP-SAT refinement of a plan's swap timing and evictions on windows of the schedule (the "hybrid" step).

`refine(graph, plan, time_limit_s=..., seed=...)` returns a `RefineResult`
whose plan is never worse than the input. Modules: `window` (a window's model
data and frozen boundary), `model` (the CP-SAT model), `decode` (solution ->
node sequence -> re-walked augmented graph, by `hybrid.swap.rewalk`), `lns`
(the sliding-window search), `stream_order` (earliest-deadline-first copy
streams, before any window), `source` (the augmented graph of any plan),
`handoff` (the GA, then refinement, then the GA again with the time refinement
could not use), `beside` (a refiner process that takes the genetic search's
best plan and elites while it runs), `offsets` (arena plans: every offset kept,
copies that share bytes kept in order; or re-laid out, the faster kept).
"""
from hybrid.refine.lns import HistoryPoint, RefineOptions, RefineProgress, RefineResult, refine

__all__ = ["refine", "RefineResult", "RefineOptions", "RefineProgress", "HistoryPoint"]
