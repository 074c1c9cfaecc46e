"""One call from a graph to a MILP plan: MO-SOS or a baseline, with the figures a report needs."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

from hybrid.device import Device
from hybrid.graph import Graph
from hybrid.plan import Plan
from milp.decode import auto_values, decode
from milp.model import ModelOptions, build_model
from milp.model import Values
from milp.solve import SolveOptions, SolveResult, require_solution, solve, start_of
from milp.stages import build_problem

# The paper's three planners (seed 002, §3): MO-SOS, and the memory plans of Checkmate (recompute only) and
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

    @property
    def values(self) -> Values | None:
        return self.result.values

    def row(self) -> dict[str, Any]:
        """The figures of one run, for tables (pandas-ready)."""
        r = self.result
        p = self.plan
        return {"planner": self.kind, "stages": self.stages, "variables": self.variables,
                "constraints": self.constraints, "binaries": self.binaries, "build_s": self.build_s,
                "solve_s": r.solve_s, "status": r.status, "solver_status": r.solver_status, "gap": r.gap,
                "ilp_objective_s": r.objective_s, "bound_s": r.bound_s,
                "makespan_s": p.makespan_s if p else None, "ideal_s": p.metrics["ideal_s"] if p else None,
                "compute_s": p.metrics["compute_s"] if p else None,
                "recomputes": p.metrics["recomputes"] if p else None,
                "swaps_out": p.metrics["swaps_out"] if p else None,
                "peak_bytes": p.metrics["peak_bytes"] if p else None}


def plan_milp(graph: Graph, device: Device, kind: str = "mosos", stages: int | None = None,
              solve_options: SolveOptions = SolveOptions(), model_options: ModelOptions | None = None,
              require: bool = True, start: Values | None = None) -> MilpRun:
    """Build, solve and decode. `stages` < #ops solves a coarsened problem (segments of consecutive ops).
    With require=False a run without a solution comes back with plan None instead of raising. `start`: a
    solution of another kind on the same stages (`MilpRun.values`), given to HiGHS as a MIP start."""
    opts = model_options or KINDS[kind]
    t0 = time.perf_counter()
    pb = build_problem(graph, device, stages, manage_persistent=opts.manages_persistent)
    model = build_model(pb, opts)
    build_s = time.perf_counter() - t0
    res = solve(model, solve_options, start_of(model, start) if start is not None else None)
    if start is not None and res.objective_s is not None and res.status == "optimal" and \
            res.objective_s > model.compute_time(start) * (1 + 1e-6):
        # Seen once with HiGHS 1.16 under load: "Optimal" above a feasible start. Keep the plan, not the claim.
        res = replace(res, status="feasible",
                      solver_status=res.solver_status + " (above its MIP start: optimality not trusted)")
    plan = None
    if res.values is not None or require:
        values = require_solution(res, f"milp {kind}")
        planner = {"name": kind, "model": opts.describe(), "solver": solve_options.solver,
                   "time_limit_s": solve_options.time_limit_s, "mip_gap": solve_options.gap,
                   "status": res.status, "solver_status": res.solver_status, "gap": res.gap,
                   "solve_s": res.solve_s, "stages": pb.n, "variables": model.n_variables,
                   "constraints": model.n_constraints}
        plan = decode(model, values, planner, auto=not opts.impl_choice, ilp_objective_s=res.objective_s)
    run = MilpRun(kind, plan, res, pb.n, model.n_variables, model.n_constraints, model.n_binaries, build_s)
    if res.values is not None and not opts.impl_choice:
        run.auto_values = auto_values(model, res.values)
    return run


def frame(runs: list[MilpRun]) -> "pd.DataFrame":  # noqa: F821 - pandas imported lazily
    """The runs as one pandas table (a row per run, columns as `MilpRun.row`)."""
    import pandas as pd

    return pd.DataFrame([r.row() for r in runs])
