"""One call from a graph to a MILP plan: MO-SOS or a baseline, with the figures a report needs."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace

from hybrid.errors import HybridError
from typing import TYPE_CHECKING, Any

from hybrid.device import Device
from hybrid.graph import Graph
from hybrid.plan import Plan
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
        """The figures of one run, for tables (pandas-ready)."""
        r = self.result
        p = self.plan
        return {"planner": self.kind, "stages": self.stages, "variables": self.variables,
                "constraints": self.constraints, "binaries": self.binaries, "build_s": self.build_s,
                "solve_s": r.solve_s, "handoff_s": r.handoff_s, "status": r.status, "solver_status": r.solver_status, "gap": r.gap,
                "ilp_objective_s": r.objective_s, "bound_s": r.bound_s,
                "makespan_s": p.makespan_s if p else None, "ideal_s": p.metrics["ideal_s"] if p else None,
                "compute_s": p.metrics.get("compute_s") if p else None,
                "recomputes": p.metrics.get("recomputes") if p else None,
                "swaps_out": p.metrics.get("swaps_out") if p else None,
                "peak_bytes": p.metrics.get("peak_bytes") if p else None,
                "start": self.start_name, "start_makespan_s": self.start_makespan_s,
                "milp_makespan_s": self.milp_makespan_s, "written": self.written, "bound_gap": self.bound_gap,
                "start_breaks": None if self.start_breaks is None else sum(self.start_breaks.values()),
                "milp_refused": self.refused}


@dataclass(frozen=True)
class PreparedStart:
    """A start plan made ready before the solve: validated on the device, with Auto's implementations (what the
    MILP's plan is compared with), laid out (what is written when the MILP's is not faster), and what that took:
    the same work (re-time, lay out, validate a plan of this graph) follows each solve, so it sizes the time
    kept back from the solver."""

    plan: Plan          # the start as given, validated on the device: the MIP start and the stage order
    auto: Plan          # Auto's implementations on it, re-timed and validated (milp.decode.auto_plan)
    written: Plan       # `auto` laid out (hybrid.arena.layout.laid_out), or `auto` where not asked to lay out
    post_s: float       # seconds the three took


def prepare_start(graph: Graph, device: Device, plan: Plan, lay_out: bool = True) -> PreparedStart:
    """`plan` checked on `device`, with Auto's impls and (`lay_out`) laid out; timed (`PreparedStart.post_s`)."""
    from hybrid.arena.layout import laid_out
    from milp.decode import auto_plan

    t0 = time.perf_counter()
    p = checked_start(graph, device, plan)
    auto = auto_plan(graph, p)
    written = laid_out(graph, auto) if lay_out else auto
    return PreparedStart(p, auto, written, time.perf_counter() - t0)


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
        values = require_solution(res, f"milp {kind}")
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


RELAYOUT_TRIES = 4      # MILP solves with less memory where the plan's copies do not lay out in the arena
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
    same events and times, offsets added). The MILP counts bytes, not addresses: where its plan does not lay
    out within the memory it is solved again with the memory less the layout's overflow (half way back where
    the model has no solution with that little), up to `RELAYOUT_TRIES` times; the first that lays out is
    written for the full device (`planner["memory_given_up"]`). Where none does, the byte-budget plan is
    written and `plan.planner["arena"]` says so.

    Time: `solve_options.deadline` (else its time limit from now) is when this returns by, everything
    included. Each solver gets what is left of it less `post_solve_s` (kept back to decode, lay out and
    validate its plan; `MilpRun.solver_limit_s`, `kept_back_s`); a re-solve is skipped when less is left than
    the first build took plus `MIN_RESOLVE_S` (`MilpRun.resolve` says so), and none runs after Ctrl-C or
    SIGTERM. With a start, a model build that runs past its deadline returns the start's plan
    (`MilpRun.not_solved` says why) instead of raising, and so does a MILP plan that its decoding or its arena
    layout refuses (an internal inconsistency, not the user's; `MilpRun.refused` says why)."""
    from hybrid.arena.layout import laid_out
    from hybrid.signals import received
    from milp.model import BuildTimeError

    t0 = time.monotonic()
    deadline = solve_options.deadline
    if solve_options.time_limit_s is not None:
        deadline = min(deadline if deadline is not None else float("inf"), t0 + solve_options.time_limit_s)
    prepared = None
    if start_plan is not None:
        prepared = start_plan if isinstance(start_plan, PreparedStart) else \
            prepare_start(graph, device, start_plan)
    keep = post_solve_s(graph, prepared) if deadline is not None else 0.0
    first = solve_options if deadline is None else replace(solve_options, deadline=deadline - keep)
    budget_left = None if deadline is None else max(0.0, deadline - keep - time.monotonic())
    try:
        if budget_left is not None and budget_left <= 0.0 and prepared is not None:
            raise BuildTimeError(f"milp: no time left to build the model (loading and the start took the time "
                                 f"limit, less the {keep:.1f} s kept back to write the plan); give a longer "
                                 "--time-limit")
        run = solve_milp(graph, device, kind, stages, first, model_options, require, start, prepared, start_name)
    except BuildTimeError as e:
        if prepared is None:
            raise
        res = SolveResult("no_solution", "not solved", None, None, None, 0.0, False, None)
        return MilpRun(kind, prepared.written, res, 0, 0, 0, 0, time.monotonic() - t0, start_name=start_name,
                       start_makespan_s=prepared.auto.makespan_s, written="start", start_plan=prepared.auto,
                       not_solved=str(e), kept_back_s=keep)
    run.kept_back_s = keep if deadline is not None else None
    run.solver_limit_s = run.result.limit_s
    if run.plan is None:
        return run
    try:
        run.plan = prepared.written if prepared is not None and run.written == "start" else laid_out(graph, run.plan)
    except HybridError as e:    # the arena's own check refused its layout: internal, and the start is there
        if prepared is None:
            raise
        run.plan, run.written = prepared.written, "start"
        run.refused = f"the MILP's plan was refused (its arena layout failed: {e})"
    failed, refused = 0.0, 1.0          # shares of the memory given up: last that did not lay out, first infeasible
    over: float | None = _overflow(run.plan)     # the last layout's overflow; 0.0 after a refused solve
    stopped = run.result.interrupted    # HiGHS takes the Ctrl-C itself, so `received()` alone does not see it
    for _ in range(RELAYOUT_TRIES):
        if over is None or stopped or received():
            break       # laid out; or Ctrl-C / SIGTERM (write what there is)
        left = None if deadline is None else deadline - keep - time.monotonic()
        if left is not None and left < run.build_s + MIN_RESOLVE_S:
            run.resolve = ("the plan does not lay out in the arena; the re-solve with less memory is skipped: "
                           + (f"{left:.1f} s left" if left > 0 else "no time left") + " of the time limit, its "
                           f"model's build took {run.build_s:.1f} s")
            break
        give = 0.5 * (failed + refused) if over == 0.0 else \
            min(1.0 - (1.0 - failed) / (1.0 + over) + 0.005, 0.5 * (failed + refused))
        dev = replace(device, memory_bytes=int(device.usable_bytes * (1.0 - give)) + device.reserve_bytes)
        try:   # the same deadline as the first solve's (`first`): what is left of it, less what is kept back
            again = solve_milp(graph, dev, kind, stages, first, model_options, False, None, None, start_name)
        except BuildTimeError as e:     # the time ran out building or handing over the model: not the memory
            run.resolve = f"the plan does not lay out in the arena; the re-solve with less memory stopped: {e}"
            break
        except HybridError:
            again = None
        stopped = again is not None and again.result.interrupted
        if again is None or again.plan is None:
            refused, over = give, 0.0       # too little memory for the model: back half way
            continue
        try:
            shrunk = laid_out(graph, replace(again.plan, device=device,
                                             planner={**again.plan.planner, "memory_given_up": give}))
        except HybridError:     # its layout refused by the arena's own check (internal): keep what there is
            break
        if shrunk.allocation.kind == "arena":
            run.plan, run.written = shrunk, "milp"
            break
        failed, over = give, _overflow(shrunk)
    if run.start_plan is not None and run.start_plan.makespan_s < run.plan.makespan_s:
        # never slower than the start
        run.plan, run.written = prepared.written if prepared is not None else laid_out(graph, run.start_plan), "start"
    return run


def checked_start(graph: Graph, device: Device, plan: Plan) -> Plan:
    """`plan` on `device`, validated (a start must be a plan of this graph that fits this memory). A start of
    another graph, or one that fails validation, is the plan given being wrong, not the request:
    InvalidPlanError (exit 1, as `hybrid validate`), naming both graphs."""
    from hybrid.errors import InvalidPlanError
    from hybrid.validator import require_plan_of, validate

    require_plan_of(graph, plan, "--start", f"--graph {graph.name!r}")
    p = replace(plan, device=device)
    rep = validate(graph, p)
    if not rep.valid:
        v = rep.violations[0]
        raise InvalidPlanError(f"--start: the plan is not valid on this device (rule {v.rule}: {v.message}); give "
                               "a plan made for this --memory")
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
