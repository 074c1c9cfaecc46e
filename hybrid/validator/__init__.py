"""The plan validator: an independent second reading of docs/formats.md's plan rules 1–7.

It shares no code with the planners or the simulator (only the graph and plan
types), so a planner bug cannot hide behind the same bug here. Every planner's
plans pass through `validate`; `check` raises instead, for tests and planners.

How it reads the points the format leaves open (also listed at the end of
docs/formats.md):

- Rule 0 (precondition): the plan names this graph (and its sha256, when
  given); every id it uses exists; a compute event's `impl` is one of the op's
  impls (absent: the op's default impl; ops without impls accept only
  `default`); `resident_at_start` names persistent tensors, once each. A plan
  failing rule 0 is not checked further.
- Rule 1 also owns the timeline itself: times are finite, no event starts
  before 0, and every duration equals its implementation's time (compute) or
  bytes / bandwidth + latency of the plan's device (swaps). A zero-length event
  strictly inside another on its stream counts as an overlap. Compute starts
  that tie follow the schedule. A recompute must come after the op's first
  run, the op must be one that can rerun (`hybrid.graph.rerun`: no in-place
  updates except batch norm's running statistics, redone on copies, and a
  random op's generator state, replayed), and no in-place update of one of
  its inputs other than its own may run between the first run and the
  recompute (it would compute another value).
- A recompute allocates all of the op's outputs, like the first run: outputs
  still resident must be released (a `free`) before it.
- Rule 2 reports the event that makes a second copy of a live tensor, or that
  releases a tensor without a copy.
- Rule 3 covers outputs too: a compute's outputs keep their copies until it ends.
- Rule 4: a swap_in's copy must not be released before the swap_in ends; a
  `free` is "still needed later" when the tensor is persistent (it outlives the
  iteration) or a later compute reads it before a recompute regenerates it.
  A host copy is current at time t when no update started before t and the
  tensor came from the host, or when a swap_out that began after the last such
  update ended has ended by t.
- Rule 5: an interval no longer than eps is counted at its instant (a zero-time
  op's outputs and workspace need room too); with size_classes, the pool plus
  each compute's workspace fits; with an arena, arena_bytes plus each
  compute's workspace fits (workspace lies outside the arena); zero-byte
  tensors occupy no arena bytes but do occupy a size-class object.
- Rule 6: a persistent tensor not on the device at the end needs a current host
  copy; a free event's `at_s` counts as its end for rule 7's makespan.
- Placement plans (a `cpu` stream): a compute event with "stream": "cpu" runs
  on the host for the op's `cpu_time_s` (rule 1), allocates no device copy
  (rule 2) and needs no device memory (rule 5); its inputs need a current host
  copy at its start (rule 3: a cpu compute's outputs are host copies from its
  end, and a persistent tensor that no op updates always has one, since
  parameters are uploaded once and kept on both sides); a device op reading a
  cpu op's output needs a swap_in of it (rule 4). Recomputes, and ops that
  update tensors in place, cannot run on the cpu stream (rule 0).
- Tolerance: eps = 1e-9 x max(1 s, makespan_s, last event end), capped at 1e-9 x
  max(1 s, the busy time recomputed from the graph and device: every compute and
  copy's duration summed), so padding a plan's end does not loosen its checks
  (for a plan that never idles the cap changes nothing); metrics.ideal_s
  is compared within 1e-9 x max(1 s, ideal_s) (1 ns below 1 s, as the times).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from hybrid.errors import HybridError, InvalidPlanError, require_instance
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.validator.context import build_context
from hybrid.validator.ending import check_period, check_totals
from hybrid.validator.lifetimes import build_copies
from hybrid.validator.memory import check_memory, levels_over_time
from hybrid.validator.order import check_order
from hybrid.validator.report import Found, ValidationReport, Violation
from hybrid.validator.residency import HostCopies, check_inputs, check_swaps
from hybrid.validator.sequence import check_sequence

__all__ = ["Violation", "ValidationReport", "validate", "check", "require_valid", "require_plan_of", "write_plan",
           "memory_over_time", "event_figures", "MAX_VIOLATIONS"]

MAX_VIOLATIONS = 100


def validate(graph: Graph, plan: Plan, all: bool = False) -> ValidationReport:  # noqa: A002 - the API's name
    """Check `plan` against `graph`, rules in numeric order.

    With all=False the report holds at most one violation: the lowest broken
    rule, at its earliest event (by start time, ties by file order). With
    all=True it holds every violation found (up to MAX_VIOLATIONS), ordered the
    same way.
    """
    require_instance("graph", graph, Graph, "hybrid.graph.Graph (Graph.load(path))")
    require_instance("plan", plan, Plan, "hybrid.plan.Plan (Plan.load(path))")
    ctx, found = build_context(graph, plan)
    if ctx is None:
        return _report([found], all, 0)
    per_rule: list[list[Found]] = [[], check_order(ctx)]
    if not ctx.times_finite:
        return _report(per_rule, all, 0)
    copies, r2 = build_copies(ctx)
    host = HostCopies(ctx)
    peak, r5 = check_memory(ctx, copies)
    per_rule += [r2, check_inputs(ctx, copies, host), check_swaps(ctx, copies, host), r5,
                 check_period(ctx, copies, host), check_totals(ctx)]
    if not any(per_rule):   # on times the plan holds: it must hold in the order its events run too
        for f in check_sequence(ctx):
            per_rule[f.violation.rule].append(f)
    return _report(per_rule, all, peak)


def _report(per_rule: list[list[Found]], all: bool, peak: int) -> ValidationReport:  # noqa: A002
    out: list[Violation] = []
    for found in per_rule:
        if not found:
            continue
        found.sort()
        if not all:
            return ValidationReport(False, [found[0].violation], peak, sum(len(f) for f in per_rule))
        out.extend(f.violation for f in found[:MAX_VIOLATIONS - len(out)])
        if len(out) >= MAX_VIOLATIONS:
            break
    return ValidationReport(not out, out, peak)


def check(graph: Graph, plan: Plan) -> None:
    """Raise HybridError naming the first violation; return None for a valid plan."""
    report = validate(graph, plan)
    if not report.valid:
        v = report.violations[0]
        raise HybridError(f"invalid plan for graph {graph.name!r}: rule {v.rule}: {v.message}")


def memory_over_time(graph: Graph, plan: Plan, types_checked: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Device bytes in use over the plan's time as rule 5 counts them, a step function (times, bytes): the figure
    a timeline draws, so that its highest point is the report's `peak_bytes` (a placement plan's host-side
    outputs are not on the device). A plan whose events cannot be read gives ([0], [0]). `types_checked`: as
    `build_context`'s (`require_figures_of` has run)."""
    ctx, _ = build_context(graph, plan, types_checked)
    if ctx is None or not ctx.times_finite:
        return np.zeros(1), np.zeros(1, np.int64)
    copies, _ = build_copies(ctx)
    return levels_over_time(ctx, copies)


def require_figures_of(graph: Graph, plan: Plan) -> None:
    """A plan read against `graph` by a table or summary (`event_figures`; `Plan.events_frame(graph)` checks its
    events and graph itself, hybrid.plan importing nothing of the validator): the types and the graph it names,
    else one line. Another graph's plan read as 0 bytes for every tensor it does not
    have (a ResNet plan against an MLP: peak 0, its bound ratio 51x instead of 2.7x)."""
    require_instance("plan", plan, Plan, "hybrid.plan.Plan (Plan.load(path))")
    from hybrid.validator.context import device_problems, shape_problems

    # a plan built in Python with fields of other types (events None, a makespan given as text): one line, as
    # validate's rule 0 says it, not a TypeError from deep inside the figures
    wrong = device_problems(plan.device) + shape_problems(plan)
    if wrong:
        raise HybridError(f"the plan's fields are not what the format allows: {wrong[0]}"
                          + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else "")
                          + "; hybrid.validator.validate(graph, plan) lists them")
    plan.require_graph(graph, "the table")


def event_figures(graph: "Graph", plan: "Plan") -> dict[str, float | int]:
    """The figures a plan's `metrics` state, recomputed from its events: what summaries print (a file's metrics
    are not bound by the format's rules, so an edited or foreign file could state anything), and what
    `hybrid validate` compares the stated ones with. `peak_bytes` is the validator's (rule 5's reading);
    `persistent_bound_s` is the graph's on the plan's device (a plan re-planned on a smaller one keeps this
    device's bound)."""
    from hybrid.graph.info import persistent_bound
    from hybrid.plan.metrics import compute_stalls, event_counts

    require_figures_of(graph, plan)
    size = {t.id: t.bytes for t in graph.tensors}
    _, level = memory_over_time(graph, plan, types_checked=True)
    counts = event_counts(plan)
    counts.pop("compute_s")
    return {"stall_s": float(sum(e - s for s, e in compute_stalls(plan))),
            "bytes_h2d": int(sum(size.get(e.tensor, 0) for e in plan.events if e.kind == "swap_in")),
            "bytes_d2h": int(sum(size.get(e.tensor, 0) for e in plan.events if e.kind == "swap_out")),
            "peak_bytes": int(level.max()) if len(level) else 0,
            "persistent_bound_s": float(persistent_bound(graph, plan.device)), **counts}


def memory_needed(graph: Graph, plan: Plan) -> int:
    """The device memory `plan` needs to run as written, as rule 5 checks it: a byte budget its peak (workspace
    included); a pool (`arena_bytes`, or the size classes' objects at the device's alignment) that pool plus the
    largest workspace of a compute on the device, or the peak where that is more. What a memory axis places a
    plan at: an arena plan needs its arena, not only its live peak."""
    from hybrid.plan import ArenaAllocation, SizeClassAllocation
    from hybrid.validator.context import COMPUTE
    from hybrid.validator.memory import class_pool_bytes

    ctx, _ = build_context(graph, plan)
    readable = ctx is not None and ctx.times_finite     # memory_over_time's sweep, on this one context
    level = levels_over_time(ctx, build_copies(ctx)[0])[1] if readable else np.zeros(1, np.int64)
    peak = int(level.max()) if len(level) else 0
    alloc = plan.allocation
    if isinstance(alloc, ArenaAllocation):
        pool = int(alloc.arena_bytes)
    elif isinstance(alloc, SizeClassAllocation):
        pool = class_pool_bytes(alloc, plan.device.alignment_bytes)
    else:
        return peak
    ws = max((ctx.impl_ws[i] for i in range(ctx.n) if ctx.kind[i] == COMPUTE and not ctx.on_cpu[i]),
             default=0) if ctx is not None else 0
    return max(peak, pool + int(ws))


def require_plan_of(graph: Graph, plan: Plan, what: str, where: str) -> None:
    """Rule 0's graph check alone, for commands that refuse a plan of another graph before any work (a capture,
    a search): InvalidPlanError (exit 1, as `hybrid validate`) naming the plan (`what`) and the graph
    (`where`). The whole of rule 0 and the other rules are `require_valid`'s."""
    why = plan.graph_mismatch(graph)
    if why:
        raise InvalidPlanError(f"{what} was made for another graph than {where} ({why[0]}); give the graph it was "
                               "made for, or plan this one")


def require_valid(graph: Graph, plan: Plan, what: str) -> ValidationReport:
    """The report of a valid plan; InvalidPlanError (exit 1) naming `what` and the first violation otherwise.
    For commands given a plan to act on: they say why they cannot, rather than act on a broken one."""
    report = validate(graph, plan)
    if not report.valid:
        v = report.violations[0]
        raise InvalidPlanError(f"{what} is not a valid plan for graph {graph.name!r}: rule {v.rule}: {v.message} "
                               "(`hybrid validate --all` lists every violation)")
    return report


def write_plan(graph: Graph, plan: Plan, path: str | Path, what: str = "the plan") -> ValidationReport:
    """The one way a command writes a plan: validated against `graph` first, then written whole as strict JSON.

    An invalid plan writes nothing and raises InvalidPlanError (the CLI prints `error: ...` and exits 1), so
    no command leaves a plan that `hybrid validate` rejects with exit status 0. Returns the report (its
    peak_bytes is the validator's own figure).
    """
    report = validate(graph, plan)
    if not report.valid:
        v = report.violations[0]
        raise InvalidPlanError(f"{what} fails validation, so {path} was not written: rule {v.rule}: {v.message}")
    plan.save(path)
    return report
