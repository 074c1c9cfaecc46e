"""Solve a MilpModel with HiGHS (default) or CBC and say honestly what came back.

PuLP maps HiGHS's time-limit, interrupt and iteration-limit stops to "Optimal" (pulp's highs_api
status table), and CBC's time-limited runs have been reported "Optimal" too (coin-or/pulp #649). So the
status here comes from the solver itself: HiGHS's model status and MIP gap from highspy, CBC's "Result -"
and "Gap:" lines from its log. A run is `optimal` only when the solver proved it (within the requested
gap); `feasible` carries the incumbent and its gap.
"""
from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import pulp

from hybrid.errors import HybridError, InfeasibleError
from milp.model import MS, MilpModel, Values, read_values

SOLVERS = ("highs", "cbc")
MIN_SOLVE_S = 0.5   # the solver's least budget when a deadline has (nearly) passed

_redirect_lock = threading.Lock()
_redirect: list[int] = [0, -1]   # [solves inside `solver_output_to_stderr`, the saved stdout descriptor]


def _flush_c_stdio() -> None:
    """Flush C's stdio buffers (HiGHS prints through them; to a pipe they are block-buffered, so its lines would
    otherwise reach the descriptor after it is restored)."""
    try:
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except (OSError, AttributeError, TypeError):   # no C library to reach (not POSIX): nothing buffered to flush
        pass


@contextmanager
def solver_output_to_stderr() -> Iterator[None]:
    """File descriptor 1 points at stderr while the solver runs: HiGHS prints its banner (from the constructor,
    before PuLP can set output_flag) and any log natively, where `sys.stdout` cannot catch it, and stdout is
    for the command's result (`hybrid milp --json` prints one JSON object there). Nested and concurrent uses
    share one redirect, restored when the last ends."""
    with _redirect_lock:
        if _redirect[0] == 0:
            try:
                sys.stdout.flush()
            except (AttributeError, ValueError):   # replaced or closed: nothing of ours is buffered there
                pass
            _flush_c_stdio()
            try:
                saved = os.dup(1)
                os.dup2(2, 1)
            except OSError:        # no descriptor 1 or 2 (a daemon): nothing to keep clean
                saved = -1
            _redirect[1] = saved
        _redirect[0] += 1
    try:
        yield
    finally:
        with _redirect_lock:
            _redirect[0] -= 1
            if _redirect[0] == 0 and _redirect[1] >= 0:
                _flush_c_stdio()
                os.dup2(_redirect[1], 1)
                os.close(_redirect[1])
                _redirect[1] = -1


@dataclass(frozen=True)
class SolveOptions:
    solver: str = "highs"
    time_limit_s: float | None = 600.0
    gap: float = 0.01          # relative MIP gap at which the solver may stop
    threads: int = 1
    verbose: bool = False
    deadline: float | None = None  # time.monotonic() by which the solver must stop (also caps time_limit_s)
    node_limit: int | None = None  # branch-and-bound nodes (HiGHS mip_max_nodes, CBC maxNodes): with one thread a
    #                               work budget, so a run that stops on it gives the same incumbent whatever the load
    highs: tuple[tuple[str, object], ...] = ()  # further HiGHS options (name, value), e.g. (("presolve", "off"),)


@dataclass(frozen=True)
class SolveResult:
    status: str                # optimal | feasible | infeasible | no_solution
    solver_status: str         # the solver's own words (HiGHS model status / CBC result line)
    objective_s: float | None  # compute + recompute time of the incumbent (paper's objective)
    bound_s: float | None      # proven lower bound on it (None when the solver gave none)
    gap: float | None          # relative gap of the incumbent as the solver reports it
    solve_s: float
    interrupted: bool
    values: Values | None
    limit_s: float | None = None   # the time limit the solver was given (the deadline's share, set when it started)

    @property
    def has_solution(self) -> bool:
        return self.values is not None


class _HiGHS(pulp.HiGHS):  # type: ignore[misc, valid-type]
    """PuLP's highspy interface, with Ctrl-C stopping the search and keeping the incumbent, and a MIP start
    (PuLP passes warm starts to HiGHS_CMD only)."""

    start: dict[str, float] | None = None
    sparse: bool = False   # the start names only some columns (HiGHS completes the rest: a sub-MIP / LP)
    deadline: float | None = None   # time.monotonic() by which HiGHS must stop: its time limit is set from it
    #                                 here, once PuLP has passed it the model (seconds on a large model)

    def callSolver(self, lp: pulp.LpProblem) -> None:
        import highspy
        import numpy as np

        h = lp.solverModel
        if self.deadline is not None:
            left = max(MIN_SOLVE_S, self.deadline - time.monotonic())
            self.timeLimit = left if self.timeLimit is None else min(float(self.timeLimit), left)
            h.setOptionValue("time_limit", float(self.timeLimit))
        if self.start and self.sparse:
            pairs = [(var.index, self.start[var.name]) for var in lp.variables() if var.name in self.start]
            h.setSolution(len(pairs), np.array([i for i, _ in pairs], dtype=np.int32),
                          np.array([v for _, v in pairs], dtype=np.float64))
        elif self.start:
            cols = [0.0] * h.getNumCol()
            for var in lp.variables():
                cols[var.index] = self.start.get(var.name, 0.0)
            sol = highspy.HighsSolution()
            sol.col_value = cols
            sol.value_valid = True
            h.setSolution(sol)
        h.HandleKeyboardInterrupt = True
        h.solve()

    def findSolutionValues(self, lp: pulp.LpProblem):  # noqa: ANN201
        # PuLP's status table lacks kSolutionLimit (a node limit's stop); it has assigned the values by then, and
        # `_solve_highs` reads the real status from HiGHS itself.
        try:
            return super().findSolutionValues(lp)
        except KeyError:
            return pulp.constants.LpStatusNotSolved, pulp.constants.LpSolutionIntegerFeasible


def start_of(model: MilpModel, values: Values) -> dict[str, float]:
    """A MIP start for `model` from another model's solution (e.g. Checkmate-Auto's for MO-SOS): its ones
    where this model has the same variable; a node runs the impl the solution used. The solver repairs or
    drops a start that does not fit."""
    start: dict[str, float] = {}
    for key in values.R:
        if key in model.R:
            start[model.R[key].name] = 1.0
            if (key[1], key[2]) in model.I:
                start[model.I[key[1], key[2]].name] = 1.0
    for src, dst in ((values.S, model.S), (values.O, model.O), (values.P, model.P), (values.Pb, model.Pb)):
        for key in src:
            if key in dst:
                start[dst[key].name] = 1.0
    # A persistent tensor this model manages and the solution's model kept resident (activations only, or no
    # offload): resident throughout here too.
    told = {j for (_, j) in values.S}
    for (t, j), var in model.S.items():
        if j in model.problem.persistent and j not in told:
            start[var.name] = 1.0
    return start


def solve(model: MilpModel, opts: SolveOptions = SolveOptions(), start: dict[str, float] | None = None,
          sparse: bool = False) -> SolveResult:
    """`start`: a MIP start (`start_of`: the ones, every other variable 0; with `sparse`, values for the named
    variables only, e.g. `milp.start.binary_start`, which the solver completes). HiGHS takes it through
    highspy's setSolution; CBC through PuLP's warm start (an .mst file)."""
    if opts.solver not in SOLVERS:
        raise HybridError(f"milp: unknown solver {opts.solver!r}; use one of {', '.join(SOLVERS)}")
    t0 = time.perf_counter()
    if opts.deadline is not None:  # the caller's deadline (`hybrid milp --time-limit` counts the model's build)
        left = max(MIN_SOLVE_S, opts.deadline - time.monotonic())
        opts = replace(opts, time_limit_s=left if opts.time_limit_s is None else min(opts.time_limit_s, left))
    with solver_output_to_stderr():
        if opts.solver == "highs":
            res = _solve_highs(model, opts, start, sparse)
        else:
            res = replace(_solve_cbc(model, opts, start, sparse), limit_s=opts.time_limit_s)
    return res if res.solve_s else replace(res, solve_s=time.perf_counter() - t0)


def _solve_highs(model: MilpModel, opts: SolveOptions, start: dict[str, float] | None = None,
                 sparse: bool = False) -> SolveResult:
    extra = {} if opts.node_limit is None else {"mip_max_nodes": int(opts.node_limit)}
    extra.update(dict(opts.highs))
    solver = _HiGHS(msg=opts.verbose, timeLimit=opts.time_limit_s, gapRel=opts.gap, threads=opts.threads, **extra)
    solver.start = start
    solver.sparse = sparse
    solver.deadline = opts.deadline
    t0 = time.perf_counter()
    model.lp.solve(solver)
    solve_s = time.perf_counter() - t0
    res = _highs_result(model, opts, solve_s)
    return replace(res, limit_s=solver.timeLimit)


def _highs_result(model: MilpModel, opts: SolveOptions, solve_s: float) -> SolveResult:
    """What HiGHS ended with, in its own words (module docstring)."""
    import highspy

    h = model.lp.solverModel
    st = h.getModelStatus()
    info = h.getInfo()
    words = h.modelStatusToString(st)
    has_sol = int(info.primal_solution_status) == 2  # kSolutionStatusFeasible
    S = highspy.HighsModelStatus
    interrupted = st == S.kInterrupt
    if st == S.kInfeasible:
        return SolveResult("infeasible", words, None, None, None, solve_s, False, None)
    bound = float(info.mip_dual_bound) / MS if abs(info.mip_dual_bound) < 1e30 else None
    if not has_sol:  # the dual bound is still a bound (a start plan written instead is measured against it)
        return SolveResult("no_solution", words, None, bound, None, solve_s, interrupted, None)
    values = read_values(model)
    obj = model.objective_time(values)
    # The gap from the incumbent and the dual bound themselves: a run stopped at its time limit has been seen
    # with model status Optimal and mip_gap 0 while its bound was far below (HiGHS 1.16 with a MIP start).
    model_obj = float(info.objective_function_value)
    gap = None
    if bound is not None and abs(model_obj) > 0:
        gap = max(0.0, (model_obj - bound * MS) / abs(model_obj))
    proven = st == S.kOptimal and gap is not None and gap <= opts.gap + 1e-6
    if st == S.kOptimal and not proven:
        words += f" (gap {gap if gap is None else round(gap, 4)} from its bound: optimality not trusted)"
    return SolveResult("optimal" if proven else "feasible", words, obj, bound, gap, solve_s, interrupted, values)


_RESULT = re.compile(r"^Result - (.*)$", re.M)
_FLOAT = r"(-?[0-9.eE+-]+)"


def _cbc_path() -> str:
    """The CBC binary PuLP bundles, else a `cbc` on PATH. Run through `COIN_CMD`: `PULP_CBC_CMD` (the same binary)
    is deprecated from PuLP 3.3 and warns on every solve."""
    bundled = getattr(pulp.PULP_CBC_CMD, "pulp_cbc_path", None)
    if bundled and os.path.isfile(bundled):
        return bundled
    found = shutil.which("cbc")
    if found is None:
        raise HybridError("--solver cbc: no CBC binary (PuLP bundles none here and no `cbc` is on PATH); "
                          "install one (`pip install pulp[cbc]`) or use --solver highs")
    return found


def _solve_cbc(model: MilpModel, opts: SolveOptions, start: dict[str, float] | None = None,
               sparse: bool = False) -> SolveResult:
    if start:
        for var in model.lp.variables():
            if var.name in start or not sparse:
                var.setInitialValue(start.get(var.name, 0.0))
    fd, log = tempfile.mkstemp(suffix=".cbc.log")
    os.close(fd)
    try:
        extra = [] if opts.node_limit is None else [f"maxNodes {int(opts.node_limit)}"]
        solver = pulp.COIN_CMD(path=_cbc_path(), msg=opts.verbose, timeLimit=opts.time_limit_s, gapRel=opts.gap,
                               threads=opts.threads, logPath=log, options=extra, warmStart=bool(start))
        t0 = time.perf_counter()
        model.lp.solve(solver)
        solve_s = time.perf_counter() - t0
        text = open(log, errors="replace").read()
    finally:
        os.unlink(log)
    m = _RESULT.search(text)
    words = m.group(1).strip() if m else pulp.LpStatus[model.lp.status]
    if "infeasible" in words.lower():
        return SolveResult("infeasible", words, None, None, None, solve_s, False, None)
    if model.lp.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible) or \
            any(v.varValue is None for v in model.R.values()):
        return SolveResult("no_solution", words, None, None, None, solve_s, False, None)
    values = read_values(model)
    obj = model.objective_time(values)
    lb = re.search(r"^Lower bound:\s*" + _FLOAT, text, re.M)
    gp = re.search(r"^Gap:\s*" + _FLOAT, text, re.M)
    bound = float(lb.group(1)) / MS if lb else None
    gap = float(gp.group(1)) if gp else None
    proven = words.lower().startswith("optimal")
    if proven and gap is None:
        gap = 0.0
    return SolveResult("optimal" if proven else "feasible", words, obj, bound, gap, solve_s, False, values)


def require_solution(res: SolveResult, what: str = "milp") -> Values:
    """The incumbent, or a one-line error saying why there is none."""
    if res.status == "infeasible":
        raise InfeasibleError(f"{what}: no plan fits this memory (the solver proved the model infeasible: "
                              f"{res.solver_status}); give more --memory")
    if res.values is None:
        raise HybridError(f"{what}: the solver stopped without a feasible solution ({res.solver_status}, "
                          f"{res.solve_s:.1f} s); give a longer --time-limit, more --memory or fewer --stages")
    return res.values
