"""One call from a graph to a MILP plan: MO-SOS or a baseline, with the figures a report needs."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from hybrid.errors import HybridError
from typing import TYPE_CHECKING, Any

from hybrid.device import Device
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.swap.to_plan import on_device
from hybrid.units import format_seconds
from milp.decode import DecodeError, auto_values, decode
from milp.model import ModelOptions, build_model
from milp.model import Values
from milp.solve import SolveOptions, SolveResult, require_solution, solve, start_of
from milp.stages import build_problem

if TYPE_CHECKING:
    import pandas as pd

# The MO-SOS paper's three planners (§3): MO-SOS, and the memory plans of Checkmate (recompute only) and
# STR (offload + recompute) with "Auto" implementation selection afterwards.
KINDS: dict[str, ModelOptions] = {
    "mosos": ModelOptions(offload=True, impl_choice=True),
    "str-auto": ModelOptions(offload=True, impl_choice=False),
    "checkmate-auto": ModelOptions(offload=False, impl_choice=False),
    "checkmate": ModelOptions(offload=False, impl_choice=True),
}


@dataclass
class MilpRun:
    kind: str
    plan: Plan | None
    result: SolveResult
    stages: int
    variables: int
    constraints: int
    binaries: int
    build_s: float
    auto_values: Values | None = None   # -Auto runs: the solution with Auto's impls (a MIP start for MO-SOS)
    start_name: str | None = None       # the plan given as a start (e.g. "belady"), None without one
    start_makespan_s: float | None = None
    start_mapped: tuple[int, int] | None = None   # (events mapped to variables, events the model has none for)
    milp_makespan_s: float | None = None          # the MILP's own decoded plan (None: no incumbent)
    milp_plan: Plan | None = None                  # that plan, a byte budget (where the start is written, `plan_milp`
    #                                                lays it out too and writes it if it runs before the start)
    written: str = "milp"                          # whose plan `plan` is: "milp" or "start" (the faster)
    start_plan: Plan | None = None                 # the start as compared (Auto's impls on it)
    start_breaks: dict[str, int] | None = None     # constraints the start breaks, per family (milp.start.
    #                                                start_violations; empty: the solver can take it as it is)
    not_solved: str | None = None     # why no model was solved (its build ran past the time limit): `plan` is
    #                                   the start's
    resolve: str | None = None        # what became of the re-solve with less memory (skipped for lack of time)
    solver_limit_s: float | None = None   # seconds the (first) solve was given: the budget less what came before
    #                                       it (loading, the start, the build) and what is kept back after it
    kept_back_s: float | None = None      # seconds kept back after a solve for decoding, laying out, validating
    refused: str | None = None        # why the MILP's plan was refused (a rule its decoding breaks, or its arena
    #                                   layout failing): `plan` is the start's; internal, not the user's error
    resolve_memory_bytes: int | None = None   # the re-solve whose plan was laid out (and kept): the --memory it
    #                                           was solved with (less than the device's), None without one
    memory_given_up: float | None = None      # its share of the usable memory given up (`planner.memory_given_up`):
    #                                           None where the start is written instead (the resolve_* fields
    #                                           still describe the MILP's re-solve)
    resolve_result: SolveResult | None = None  # that re-solve's solver result (status, time)
    resolve_makespan_s: float | None = None    # its plan's makespan (the MILP's own plan, laid out)

    @property
    def bound_gap(self) -> float | None:
        """(makespan - ILP bound) / makespan of the plan returned: how far it may be from this model's optimum
        (the bound is on compute + recompute time, which no plan of the model's stages can beat)."""
        r = self.result
        if self.plan is None or r.bound_s is None or self.plan.makespan_s <= 0:
            return None
        return max(0.0, (self.plan.makespan_s - r.bound_s) / self.plan.makespan_s)

    @property
    def values(self) -> Values | None:
        return self.result.values

    def row(self) -> dict[str, Any]:
        """The figures of one run, for tables (pandas-ready): the same keys on every path (solved, not solved,
        refused), the plan's figures those of the plan written (`plan`), counted from its events where its
        metrics lack them (a start's)."""
        r = self.result
        p = self.plan
        fig = _event_counts(p) if p is not None else {}
        arena = p.planner.get("arena", {}) if p is not None and isinstance(p.planner, dict) else {}
        return {"planner": self.kind, "stages": self.stages, "variables": self.variables,
                "constraints": self.constraints, "binaries": self.binaries, "build_s": self.build_s,
                "solve_s": r.solve_s, "handoff_s": r.handoff_s, "status": r.status, "solver_status": r.solver_status, "gap": r.gap,
                "ilp_objective_s": r.objective_s, "bound_s": r.bound_s,
                "makespan_s": p.makespan_s if p else None, "ideal_s": p.metrics["ideal_s"] if p else None,
                "compute_s": p.metrics.get("compute_s", fig.get("compute_s")) if p else None,
                "recomputes": p.metrics.get("recomputes", fig.get("recomputes")) if p else None,
                "swaps_out": p.metrics.get("swaps_out", fig.get("swaps_out")) if p else None,
                "peak_bytes": p.metrics.get("peak_bytes") if p else None,
                "start": self.start_name, "start_makespan_s": self.start_makespan_s,
                "milp_makespan_s": self.milp_makespan_s, "written": self.written, "bound_gap": self.bound_gap,
                "start_breaks": None if self.start_breaks is None else sum(self.start_breaks.values()),
                "milp_refused": self.refused,
                "ilp_objective_tiebreak_s": r.model_objective_s,
                "swaps_in": fig.get("swaps_in") if p else None,
                "not_solved": self.not_solved, "resolve": self.resolve,
                "resolve_memory_bytes": self.resolve_memory_bytes, "memory_given_up": self.memory_given_up,
                "resolve_status": self.resolve_result.status if self.resolve_result is not None else None,
                "resolve_makespan_s": self.resolve_makespan_s,
                "laid_out": (p.allocation.kind == "arena") if p is not None else None,
                "layout": (p.planner.get("layout") if p is not None and isinstance(p.planner, dict) else None),
                "layout_overflow": (float(arena["overflow"]) if p is not None and p.allocation.kind != "arena"
                                    and "overflow" in arena else None)}


def _event_counts(plan: Plan) -> dict[str, Any]:
    """What a plan runs, from its events (the MILP's decoded plans carry the same in their metrics), under the
    names of this module's table."""
    from hybrid.plan.metrics import event_counts

    c = event_counts(plan)
    return {"compute_s": c["compute_s"], "recomputes": c["recomputes"], "swaps_out": c["swap_outs"],
            "swaps_in": c["swap_ins"]}


def stage_count(graph: Graph, stages: int | None) -> int:
    """The stages a model of `graph` has: `stages` (at most one per op), or one per op where not given."""
    return min(stages, len(graph.ops)) if stages else len(graph.ops)


def start_run(kind: str, plan: Plan, start_name: str | None, why: str, stages: int = 0,
              start_makespan_s: float | None = None) -> MilpRun:
    """A run that solved no model and wrote the start (`plan`): its model refused before the build
    (`milp.stages.memory_refusal`), its build past the deadline, or a Ctrl-C before the solve. `why` is
    `MilpRun.not_solved`."""
    res = SolveResult("no_solution", "not solved", None, None, None, 0.0, False, None)
    return MilpRun(kind, plan, res, stages, 0, 0, 0, 0.0, start_name=start_name,
                   start_makespan_s=plan.makespan_s if start_makespan_s is None else start_makespan_s,
                   written="start", start_plan=plan, not_solved=why)


@dataclass(frozen=True)
class PreparedStart:
    """A start plan made ready before the solve: validated on the device, with Auto's implementations (what the
    MILP's plan is compared with), laid out (what is written when the MILP's is not faster), and what that took:
    the same work (re-time, lay out, validate a plan of this graph) follows each solve, so it sizes the time
    kept back from the solver."""

    plan: Plan          # the start as given, validated on the device: the MIP start and the stage order
    auto: Plan          # Auto's implementations on it, re-timed and validated (milp.decode.auto_plan)
    written: Plan       # `auto` laid out (`laid_out_start`), or `auto` where not asked to lay out
    post_s: float       # seconds the three took (a re-plan of the start left out: a decoded plan gets none)


START_LAYOUT_S = 20.0   # the cap on re-planning a start whose copies do not lay out (`laid_out_start`)
START_LAYOUT_SHARE = 0.2   # ... and at most this share of `plan_milp`'s time limit
MIN_REPLAN_S = 0.1   # the least a start's re-plan is given once its layout has spent the share


def laid_out_start(graph: Graph, auto: Plan, layout_s: float = START_LAYOUT_S, laid: Plan | None = None) -> Plan:
    """The start as written: at its own times where its copies lay out in the arena (`laid_out`), else planned
    again on its schedule with less memory, as `hybrid optimize` lays its plan out (`hybrid.arena.layout.lay_out`:
    Belady's re-plans, the default implementations; `planner["layout"]` says how, with its cost), so that the plan
    written is the plan that runs. Where neither fits, the byte budget, `planner["arena"]` saying so. Before
    2026-11-30 a start whose copies did not lay out was written as a byte budget (the README's graph at 64 MiB:
    Belady's start +7.5% over the arena; re-planned with 5.1% less memory it lays out, +2.4% makespan). `laid`:
    `laid_out(graph, auto)` where the caller has it."""
    from hybrid.arena.layout import QUICK_BUDGET, lay_out, laid_out

    written = laid if laid is not None else laid_out(graph, auto)
    if written.allocation.kind == "arena" or auto.allocation.kind != "unconstrained":
        return written
    try:
        out = lay_out(graph, auto, time_limit_s=layout_s, budget=QUICK_BUDGET, classes=False,
                      recompute=any(e.recompute for e in auto.events))
    except HybridError:     # none fits (InfeasibleError), or its layout refused by the arena's check: as it is
        return written
    if out.plan.allocation.kind != "arena":
        return written
    return replace(out.plan, planner={**out.plan.planner, "layout": out.describe()})


def prepare_start(graph: Graph, device: Device, plan: Plan, lay_out: bool = True,
                  layout_s: float = START_LAYOUT_S, replan: bool = True) -> PreparedStart:
    """`plan` checked on `device`, with Auto's impls and (`lay_out`) laid out (`laid_out_start`, its re-plan
    capped at `layout_s`; `replan` False: at its own times only, as for the recompute-only kinds, whose plans
    must have no copies and a re-plan would add some); timed (`PreparedStart.post_s`: what a decoded plan's
    re-timing, layout and validation take too, so the start's re-plan is left out of it)."""
    from hybrid.arena.layout import laid_out
    from milp.decode import auto_plan

    t0 = time.perf_counter()
    p = checked_start(graph, device, plan)
    auto = auto_plan(graph, p)
    # its layout within `layout_s` too (the deadline's share): at laid_out's own 30 s, `hybrid milp --time-limit
    # 10s` on a 2,872-op RNN ran 34 s, and kept 91.7 s back for the plan "measured" on it
    t_lay = time.perf_counter()
    written = laid_out(graph, auto, time_limit_s=layout_s) if lay_out else auto
    post_s = time.perf_counter() - t0
    if lay_out and replan and written.allocation.kind != "arena":
        # the re-plan in what the layout left of the share (each had all of it: twice the share in all)
        left = max(MIN_REPLAN_S, layout_s - (time.perf_counter() - t_lay))
        written = laid_out_start(graph, auto, left, written)
    return PreparedStart(p, auto, written, post_s)


def solve_milp(graph: Graph, device: Device, kind: str = "mosos", stages: int | None = None,
               solve_options: SolveOptions = SolveOptions(), model_options: ModelOptions | None = None,
               require: bool = True, start: Values | None = None, start_plan: Plan | PreparedStart | None = None,
               start_name: str = "start") -> MilpRun:
    """Build, solve and decode (a byte-budget plan; `plan_milp` lays it out). `stages` < #ops solves a coarsened problem (segments of consecutive ops).
    With require=False a run without a solution comes back with plan None instead of raising. `start`: a
    solution of another kind on the same stages (`MilpRun.values`), given to HiGHS as a MIP start.
    `start_plan`: a valid plan of `graph` (e.g. Belady's, `belady_start`): the stages follow its schedule, it
    is read into the model's variables as a MIP start (milp.start), and the faster of it and the MILP's decoded
    plan is returned (never slower than the start; `MilpRun.written` says which); a `PreparedStart` is used as
    it is (`plan_milp` prepares it before the solve). A decoded plan the validator refuses (milp.decode.DecodeError:
    the model missed something, not the user's doing) gives way to the start, `MilpRun.refused` saying why;
    without a start it raises."""
    opts = model_options or KINDS[kind]
    t0 = time.perf_counter()
    order = None
    prepared = None
    if start_plan is not None:
        prepared = start_plan if isinstance(start_plan, PreparedStart) else \
            prepare_start(graph, device, start_plan, lay_out=False)
        start_plan = prepared.plan
        from hybrid.graph.order import from_ids

        order = from_ids(graph, start_plan.schedule, "--start: schedule")
    pb = build_problem(graph, device, stages, order=order, manage_persistent=opts.manages_persistent)
    times = None
    if start_plan is not None and opts.start_windows:
        from milp.start import stage_times

        times = stage_times(pb, start_plan)
    model = build_model(pb, opts, deadline=solve_options.deadline, stage_times=times)
    build_s = time.perf_counter() - t0
    mapped = None
    breaks = None
    if start_plan is not None:
        from milp.start import binary_start, start_violations, values_of_plan

        sm = values_of_plan(model, start_plan)
        mapped = (sm.mapped, sm.unmapped)
        breaks = start_violations(model, sm.values)
        res = solve(model, solve_options, binary_start(model, sm.values), sparse=True)
    else:
        res = solve(model, solve_options, start_of(model, start) if start is not None else None)
    if start is not None and res.objective_s is not None and res.status == "optimal" and \
            res.objective_s > model.objective_time(start) * (1 + 1e-6):
        # Seen once with HiGHS 1.16 under load: "Optimal" above a feasible start. Keep the plan, not the claim.
        res = replace(res, status="feasible",
                      solver_status=res.solver_status + " (above its MIP start: optimality not trusted)")
    plan = None
    refused = None
    if res.values is not None or (require and start_plan is None):
        values = require_solution(res, f"milp {kind}", infeasible_advice(graph, pb.n, opts, kind, res))
        planner = {"name": kind, "model": opts.describe(), "solver": solve_options.solver,
                   "time_limit_s": solve_options.time_limit_s, "mip_gap": solve_options.gap,
                   "status": res.status, "solver_status": res.solver_status, "gap": res.gap,
                   "solve_s": res.solve_s, "handoff_s": res.handoff_s, "stages": pb.n, "variables": model.n_variables,
                   "constraints": model.n_constraints}
        try:
            plan = decode(model, values, planner, auto=not opts.impl_choice, ilp_objective_s=res.objective_s)
        except DecodeError as e:
            if prepared is None:
                raise DecodeError(e.which, e.rule, e.detail + " (a bug in the model: its plan is refused; given a "
                                  "start plan, --start or Belady's default, that is written instead)") from None
            refused = f"the MILP's decoded plan was refused ({e.which} breaks rule {e.rule}: {e.detail})"
    run = MilpRun(kind, plan, res, pb.n, model.n_variables, model.n_constraints, model.n_binaries, build_s)
    run.refused = refused
    run.start_breaks = breaks
    run.milp_makespan_s = plan.makespan_s if plan is not None else None
    run.milp_plan = plan
    if prepared is not None:
        # Auto on the start: the fastest implementation that fits where the start ran another (Belady plans run
        # every op's default), re-timed and validated; kept only if no slower.
        start_plan = prepared.auto
        run.start_name, run.start_makespan_s, run.start_mapped = start_name, start_plan.makespan_s, mapped
        run.start_plan = start_plan
        if plan is None or start_plan.makespan_s < plan.makespan_s:
            run.plan, run.written = start_plan, "start"
    if res.values is not None and not opts.impl_choice:
        run.auto_values = auto_values(model, res.values)
    return run


def infeasible_advice(graph: Graph, stages: int, opts: ModelOptions, kind: str, res: SolveResult) -> str:
    """What to say when the solver proves the model infeasible (without a start to write): this model has no
    plan at this memory, which is not to say no plan fits (Belady's may: the model's stages, windows and
    switches restrict it); the switches given that restrict it, and what to try."""
    n_ops = len(graph.ops)
    limits, tries = [], []
    if stages < n_ops:
        limits.append(f"coarsened to {stages} stages of {n_ops} ops (a segment holds its boundary tensors "
                      "throughout)")
        tries.append(f"more --stages (up to {n_ops}, the default)")
    if not opts.stalls:
        limits.append("no blocking prefetches (--no-stalls: no stage may wait for a copy)")
        tries.append("without --no-stalls")
    if opts.link == "paper":
        limits.append("one copy per direction in flight (--link paper)")
        tries.append("--link bandwidth")
    if not opts.offload:
        limits.append("recompute only (--no-offload)")
        tries.append("without --no-offload")
    elif not opts.persistent:
        limits.append("persistent tensors kept resident (--activations-only)")
        tries.append("without --activations-only")
    if opts.offload:
        tries.append("a start plan (--start PLAN, or without --no-start Belady's, which is written where the "
                     "model has none)")
    tries.append("more --memory")
    model = f"the {stages}-stage model" + (f" ({'; '.join(limits)})" if limits else "")
    return (f"milp {kind}: {model} is infeasible at this memory (the solver proved it: {res.solver_status}); "
            f"that is this model, not every plan: try {', '.join(tries[:-1])}" + (" or " if len(tries) > 1 else "")
            + tries[-1])


RELAYOUT_TRIES = 4      # MILP solves with less memory where the plan's copies do not lay out in the arena
LEAST_CUT = 0.005       # the least share of the memory a re-solve gives up beyond the last one that did not lay out
POST_FACTOR = 3.0       # kept back after a solve: this many times what preparing the start took (its re-timing,
#                         layout and validations: the same work a decoded plan of this graph gets), plus DECODE_S;
#                         RNN-8-8k at 50% (timed slot): preparing took 3.4 s, the solver's stop to the plan written 7 s
DECODE_S = 1.0
POST_PER_OP_S = 5e-4    # without a start to time: its preparation's seconds per op, as measured (RNN-8-8k, 11,512
#                         ops, timed slot: 3.4-5.5 s to validate, re-time and lay out Belady's plan); x POST_FACTOR
MIN_RESOLVE_S = 5.0     # a re-solve with less memory is tried only with its model's build time and this much left


def post_solve_s(graph: Graph, prepared: PreparedStart | None) -> float:
    """Seconds to keep back after a solve for decoding its plan, laying it out and validating it: measured on
    the start where there is one (`PreparedStart.post_s`), else sized from the graph's op count."""
    each = prepared.post_s if prepared is not None else POST_PER_OP_S * len(graph.ops)
    return DECODE_S + POST_FACTOR * each


def _overflow(plan: Plan) -> float | None:
    """How far the plan's best layout went over the memory (None: it is laid out, or nothing was tried)."""
    info = plan.planner.get("arena", {}) if isinstance(plan.planner, dict) else {}
    return None if plan.allocation.kind == "arena" or "overflow" not in info else float(info["overflow"])


def plan_milp(graph: Graph, device: Device, kind: str = "mosos", stages: int | None = None,
              solve_options: SolveOptions = SolveOptions(), model_options: ModelOptions | None = None,
              require: bool = True, start: Values | None = None, start_plan: Plan | PreparedStart | None = None,
              start_name: str = "start") -> MilpRun:
    """Build, solve and decode (`solve_milp`), and lay the plan out in an arena (`hybrid.arena.layout.laid_out`:
    same events and times, offsets added; a zero-time rerun that the re-timing brought to the free of its
    output is dropped with that free first, `milp.decode.meetings_kept`: an arena cannot hold both copies).
    The MILP counts bytes, not addresses: where its plan does not lay out within the memory it is solved again
    with the memory less the layout's overflow (half way back where the model has no solution with that little;
    after a proof of that, the least cut, `LEAST_CUT`, first: infeasible there too, no cut is tried further), up
    to `RELAYOUT_TRIES` times; the first that lays out is
    written for the full device (`planner["memory_given_up"]`). Where none does, the byte-budget plan is
    written and `plan.planner["arena"]` says so.

    Time: `solve_options.deadline` (else its time limit from now) is when this returns by, everything
    included. Each solver gets what is left of it less `post_solve_s` (kept back to decode, lay out and
    validate its plan; `MilpRun.solver_limit_s`, `kept_back_s`); a re-solve is skipped when less is left than
    the first build took plus `MIN_RESOLVE_S` (`MilpRun.resolve` says so), and none runs after Ctrl-C or
    SIGTERM. `MilpRun.resolve` says what became of the re-solves (each one's memory and outcome); the one
    laid out sets `resolve_memory_bytes`, `resolve_result`, `resolve_makespan_s` and, where it is written,
    `memory_given_up`. With a
    start, a model build that runs past its deadline, or a Ctrl-C / SIGTERM before the solver has the model,
    returns the start's plan (`MilpRun.not_solved` says why) instead of raising, and so does a MILP plan that
    its decoding or its arena layout refuses (an internal inconsistency, not the user's; `MilpRun.refused`
    says why)."""
    from hybrid.arena.layout import laid_out
    from hybrid.signals import interrupted_by, new_call, received
    from milp.decode import meetings_kept
    from milp.model import BuildTimeError

    new_call()   # a fresh count of Ctrl-C / SIGTERM, as a command gets (hybrid.signals)

    t0 = time.monotonic()
    deadline = solve_options.deadline
    if solve_options.time_limit_s is not None:
        deadline = min(deadline if deadline is not None else float("inf"), t0 + solve_options.time_limit_s)
    prepared = None
    if start_plan is not None:
        prepared = start_plan if isinstance(start_plan, PreparedStart) else \
            prepare_start(graph, device, start_plan, layout_s=START_LAYOUT_S if deadline is None else
                          max(1.0, min(START_LAYOUT_S, START_LAYOUT_SHARE * (deadline - t0))),
                          replan=(model_options or KINDS[kind]).offload)
    keep = post_solve_s(graph, prepared) if deadline is not None else 0.0
    first = solve_options if deadline is None else replace(solve_options, deadline=deadline - keep)
    budget_left = None if deadline is None else max(0.0, deadline - keep - time.monotonic())
    n_stages = stage_count(graph, stages)

    def the_start(why: str) -> MilpRun:
        run = start_run(kind, prepared.written, start_name, why, n_stages, prepared.auto.makespan_s)
        run.start_plan, run.build_s, run.kept_back_s = prepared.auto, time.monotonic() - t0, keep
        return run

    try:
        if budget_left is not None and budget_left <= 0.0 and prepared is not None:
            raise BuildTimeError(f"milp: no time left to build the model (loading and the start took the time "
                                 f"limit, less the {keep:.1f} s kept back to write the plan); give a longer "
                                 "--time-limit")
        run = solve_milp(graph, device, kind, stages, first, model_options, require, start, prepared, start_name)
    except BuildTimeError as e:
        if prepared is None:
            raise
        return the_start(str(e))
    except KeyboardInterrupt as e:
        # Ctrl-C or SIGTERM while the model is built or handed over (HiGHS takes one during its search itself;
        # CBC's wait is ended by it): the start, prepared and validated, is written, as where the time runs out
        if prepared is None:
            raise
        from milp.solve import CbcInterrupted

        if isinstance(e, CbcInterrupted):
            return the_start(f"interrupted ({interrupted_by()}) {e.after_s:.1f} s into CBC's solve; CBC, stopped, "
                             "hands back no solution, so whatever it had found is lost (HiGHS keeps its best)")
        return the_start(f"interrupted ({interrupted_by()}) before the model was solved")
    run.kept_back_s = keep if deadline is not None else None
    run.solver_limit_s = run.result.limit_s
    if run.plan is None:
        return run
    try:
        if prepared is not None and run.written == "start":
            # chosen on the byte budgets; as written, the start may have been re-planned (slower) or not laid out,
            # and the MILP's plan laid out may run before it (a plan with offsets first, else the faster)
            run.plan = prepared.written
            if run.milp_plan is not None and run.refused is None:
                mine = laid_out(graph, meetings_kept(graph, run.milp_plan))
                if _runs_before(mine, run.plan):
                    run.plan, run.written = mine, "milp"
        else:
            run.plan = laid_out(graph, meetings_kept(graph, run.plan))
    except HybridError as e:    # the arena's own check refused its layout: internal, and the start is there
        if prepared is None:
            raise
        run.plan, run.written = prepared.written, "start"
        run.refused = f"the MILP's plan was refused (its arena layout failed: {e})"
    failed, refused = 0.0, 1.0          # shares of the memory given up: last that did not lay out, first infeasible
    over: float | None = _overflow(run.plan)     # the last layout's overflow; 0.0 after a refused solve
    first_over = over
    stopped = run.result.interrupted    # HiGHS takes the Ctrl-C itself, so `received()` alone does not see it
    whose = "the start's" if run.written == "start" else "the MILP's"
    tries: list[str] = []               # what each re-solve gave, for the report
    proved = False                      # the last re-solve without a plan was proved infeasible
    bottom_of: float | None = None      # the `failed` whose least cut (failed + LEAST_CUT) was tried

    def not_laid(what: str) -> str:
        over_s = f" (best layout {100 * first_over:+.1f}% over the memory)" if first_over else ""
        done = f"; {len(tries)} re-solve{'s' if len(tries) != 1 else ''} with less memory: {'; '.join(tries)}" \
            if tries else ""
        return f"{whose} plan did not lay out in the arena{over_s}{done}; {what}"

    for _ in range(RELAYOUT_TRIES):
        if over is None:
            break       # laid out
        if stopped or received():   # Ctrl-C / SIGTERM: write what there is
            run.resolve = not_laid(f"no re-solve with less memory after {interrupted_by()}: written as it is, "
                                   "not laid out")
            break
        left = None if deadline is None else deadline - keep - time.monotonic()
        if left is not None and left < run.build_s + MIN_RESOLVE_S:
            run.resolve = not_laid(
                "the re-solve with less memory is skipped: it needs its model's build "
                f"({run.build_s:.1f} s) plus {MIN_RESOLVE_S:g} s (MIN_RESOLVE_S, the least a re-solve is given), and "
                + (f"{left:.1f} s of the time limit was left" if left > 0 else "none of the time limit was left"))
            break
        if over == 0.0 and proved and refused <= failed + LEAST_CUT:
            run.resolve = not_laid(f"no re-solve with less memory is left to try: infeasible at "
                                   f"{100 * refused:.2f}% given up, and every larger cut has less memory")
            break
        give = (failed + LEAST_CUT if proved and bottom_of != failed else 0.5 * (failed + refused)) \
            if over == 0.0 else min(1.0 - (1.0 - failed) / (1.0 + over) + LEAST_CUT, 0.5 * (failed + refused))
        if give <= failed + LEAST_CUT:
            bottom_of = failed
        dev = replace(device, memory_bytes=int(device.usable_bytes * (1.0 - give)) + device.reserve_bytes)
        at = f"--memory {dev.memory_bytes}B ({100 * give:.2f}% given up)"
        try:   # the same deadline as the first solve's (`first`): what is left of it, less what is kept back
            again = solve_milp(graph, dev, kind, stages, first, model_options, False, None, None, start_name)
        except BuildTimeError as e:     # the time ran out building or handing over the model: not the memory
            run.resolve = not_laid(f"the re-solve at {at} stopped: {e}")
            break
        except KeyboardInterrupt:
            run.resolve = not_laid(f"the re-solve at {at} was interrupted ({interrupted_by()}): the MILP's plan "
                                   "stays as it is, not laid out")
            break
        except HybridError as e:
            again = None
            tries.append(f"at {at}: {e}")
        stopped = again is not None and again.result.interrupted
        if again is None or again.plan is None:
            if again is not None:
                tries.append(f"at {at}: {again.result.status} ({again.result.solver_status})")
            # too little memory for the model. Proved infeasible, the least cut goes next: infeasible there too,
            # every cut is (less memory never makes the model feasible), one proof instead of halving towards it
            refused, over = give, 0.0
            proved = again is not None and again.result.status == "infeasible"
            continue
        try:
            shrunk = laid_out(graph, on_device(graph, meetings_kept(graph, again.plan), device,
                                               planner={**again.plan.planner, "memory_given_up": give}))
        except HybridError:     # its layout refused by the arena's own check (internal): keep what there is
            run.resolve = not_laid(f"the layout of the re-solve at {at} was refused by the arena's check: the "
                                   "first plan stays as it is")
            break
        if shrunk.allocation.kind == "arena":
            ar = again.result
            run.plan, run.written = shrunk, "milp"
            run.resolve_memory_bytes, run.memory_given_up = dev.memory_bytes, give
            run.resolve_result, run.resolve_makespan_s = ar, shrunk.makespan_s
            tries.append(f"at {at}: {ar.status} ({ar.solver_status}) in {format_seconds(ar.solve_s)}, makespan "
                         f"{format_seconds(shrunk.makespan_s)}, laid out")
            run.resolve = not_laid("that plan is laid out for the full device and written "
                                   "(planner.memory_given_up)")
            break
        failed, over = give, _overflow(shrunk)
        tries.append(f"at {at}: {again.result.status}, makespan {format_seconds(shrunk.makespan_s)}, "
                     f"{100 * over:+.1f}% over" if over else f"at {at}: not laid out")
    else:
        if over is not None:
            run.resolve = not_laid("none laid out: the first solve's plan stays as it is, not laid out")
    if run.start_plan is not None and run.written != "start":
        # never slower than the start, as written (laid out where it can be): a plan with offsets runs as
        # planned, so it is preferred to a byte budget whatever their makespans
        start_written = prepared.written if prepared is not None else laid_out(graph, run.start_plan)
        if _runs_before(start_written, run.plan):
            why = ("laid out where the MILP's plan is not" if start_written.allocation.kind == "arena"
                   and run.plan.allocation.kind != "arena" else "faster")
            run.plan, run.written = start_written, "start"
            run.memory_given_up = None    # the MILP's re-solve's share: not the plan written
            if run.resolve is not None:
                run.resolve += f"; the start, as written, is {why} and is written instead"
    return run


def _runs_before(a: Plan, b: Plan) -> bool:
    """Whether `a` is the one to write rather than `b`: laid out where `b` is not, else faster."""
    a_laid, b_laid = a.allocation.kind == "arena", b.allocation.kind == "arena"
    return a_laid > b_laid or (a_laid == b_laid and a.makespan_s < b.makespan_s)


def checked_start(graph: Graph, device: Device, plan: Plan) -> Plan:
    """`plan` on `device`, validated (a start must be a plan of this graph that fits this memory). A start of
    another graph, or one that fails validation, is the plan given being wrong, not the request:
    InvalidPlanError (exit 1, as `hybrid validate`), naming both graphs; one that fails, validated again on its
    own device, says whether it is broken (a bad event) or made for another memory."""
    from hybrid.errors import InvalidPlanError
    from hybrid.validator import require_plan_of, validate

    require_plan_of(graph, plan, "--start", f"--graph {graph.name!r}")
    host = next((e for e in plan.events if e.kind == "compute" and e.on_cpu), None)
    if host is not None:     # its host ops' outputs have no device copy for the model to place
        raise HybridError(f"--start: op {host.op!r} runs on the host (a placement plan from `hybrid place`); the "
                          "MILP plans graphs whose every op runs on the device: start from a plan of `hybrid "
                          "optimize`, `simulate` or `baseline`, or use this plan as it is")
    p = on_device(graph, plan, device)   # the bound it states is this device's, as written plans' are
    rep = validate(graph, p)
    if not rep.valid:
        v = rep.violations[0]
        own = rep if plan.device == device else validate(graph, plan)
        if not own.valid:    # broken as it is: another memory would not help
            w = own.violations[0]
            raise InvalidPlanError(f"--start: the plan is not valid (rule {w.rule}: {w.message}), on the device it "
                                   "was made for too; give a valid plan (`hybrid validate` lists what is wrong)")
        from hybrid.units import format_bytes_exact

        raise InvalidPlanError(f"--start: the plan is valid on the device it was made for ("
                               f"{format_bytes_exact(plan.device.memory_bytes)}), not on this one "
                               f"({format_bytes_exact(device.memory_bytes)}; rule {v.rule}: {v.message}); give a "
                               f"plan made for this --memory, or --memory {plan.device.memory_bytes}B")
    return p


def belady_start(graph: Graph, device: Device) -> Plan | None:
    """Belady's plan on the program order (the swap planner with recompute, as `hybrid simulate`), or None
    when it finds nothing that fits."""
    from hybrid.errors import InfeasibleError
    from hybrid.swap.baselines import run_baseline

    try:
        return run_baseline(graph, device, "belady", recompute=True)
    except InfeasibleError:
        return None


def frame(runs: list[MilpRun]) -> pd.DataFrame:
    """The runs as one pandas table (a row per run, columns as `MilpRun.row`)."""
    import pandas as pd

    return pd.DataFrame([r.row() for r in runs])
