"""Solve a MilpModel with HiGHS (default) or CBC and say honestly what came back.

PuLP maps HiGHS's time-limit, interrupt and iteration-limit stops to "Optimal" (pulp's highs_api
status table), and CBC's time-limited runs have been reported "Optimal" too (coin-or/pulp #649). So the
status here comes from the solver itself: HiGHS's model status and MIP gap from highspy, CBC's "Result -"
and "Gap:" lines from its log. A run is `optimal` only when the solver proved it (within the requested
gap); `feasible` carries the incumbent and its gap.

HiGHS runs in a child process (`milp.highs_process`), which is ended where it runs on past its time limit (HiGHS
1.16's presolve does not check it on some models): the caller then has no solution at its deadline, and writes
its start plan.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace

import pulp

from hybrid.errors import HybridError, InfeasibleError
from milp.highs_process import KILL_GRACE_S, STOP_GRACE_S, HighsModel, HighsOutcome, HighsRun, run_highs
from milp.model import MS, BuildTimeError, MilpModel, Values, fewer_stages, read_values

SOLVERS = ("highs", "cbc")
MIN_SOLVE_S = 0.5   # the solver's least budget when a deadline has (nearly) passed
# The hand-off of the model to HiGHS goes in chunks of this many rows, the deadline checked between them. PuLP's
# own hand-off (a Python call per column and per row) took 15.9 s of a 20 s `hybrid milp` on resnet18-b32
# (285 stages, 259k variables) on 2 loaded cores, uncounted and unbounded; in bulk it takes about 1 s there.
HANDOFF_ROWS = 20_000
HANDOFF_S_PER_ITEM = 2e-6   # the bulk hand-off's seconds per variable + constraint: 2.1-2.25 s for 347,687 +
#                             549,822 there (5.3 s with 6 jobs on the 2 cores): the estimate errs short, so a
#                             hand-off is refused up front only where it cannot end in time
READBACK_FACTOR = 1.0   # reading the solution back (then PuLP's findSolutionValues) took 1.1-1.8 s after a 2.1 s
#                         hand-off: kept back from the search's deadline, as long as the hand-off took


class HandoffTimeError(BuildTimeError):
    """Handing the built model to HiGHS ran past the deadline: there is no model to solve (a caller with a start
    plan writes it, as for a build past its deadline)."""

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
    handoff_s: float = 0.0         # of `solve_s`, seconds spent handing the model to the solver before it started
    #                                (HiGHS: the columns and rows passed to highspy; counted against the deadline)
    search_s: float | None = None  # of `solve_s`, seconds the solver itself ran (HiGHS; the rest of `solve_s`
    #                                is the hand-off and reading the solution back)
    model_objective_s: float | None = None  # the incumbent's objective as the solver counts it: `objective_s`
    #                                plus the copies' tie-break, the same basis as `bound_s` and `gap`
    start_used: bool | None = None  # CBC: whether its log says the MIP start gave a solution (None: no start,
    #                                or HiGHS, whose use of it is not read back)


def highs_model(lp: pulp.LpProblem, deadline: float | None = None, stages: int = 0
                ) -> tuple[HighsModel, list[pulp.LpVariable], float]:
    """`lp` as HiGHS takes it: the same columns, rows and coefficients, in the same order, as PuLP's own hand-off
    (`pulp.HiGHS.buildSolverModel`), built in bulk (PuLP's one highspy call per column and row was the larger part
    of the time on large models, and ran outside any time limit). Returns the arrays, the variables in column
    order (each's `index` set, as PuLP sets it) and the seconds taken. The deadline is checked every
    `HANDOFF_ROWS` rows; a hand-off past it (by more than `MIN_SOLVE_S` where it started late) raises
    HandoffTimeError rather than run on with no time to solve; one that cannot end in time is refused up front."""
    import numpy as np

    t0 = time.monotonic()
    # a hand-off that starts at or past the deadline may still take the solver's least budget
    stop = None if deadline is None else max(deadline, t0 + MIN_SOLVE_S)
    n_vars, n_rows = lp.numVariables(), len(lp._constraints)
    guess = HANDOFF_S_PER_ITEM * (n_vars + n_rows)
    fewer = fewer_stages(stages)
    if stop is not None and t0 + guess > stop:   # it cannot end in time: say so now, not after trying
        raise HandoffTimeError(
            f"milp: no time left to hand the model ({n_vars} variables, {n_rows} constraints) to HiGHS: that "
            f"takes about {guess:.1f} s, {max(0.0, deadline - t0):.1f} s of the time limit were left after "
            f"its build; give a longer --time-limit, or {fewer}")
    inf = float("inf")
    mult = -1.0 if lp.sense == pulp.constants.LpMaximize else 1.0
    variables = lp.variables()
    n = len(variables)
    obj = lp.objective
    cost = np.fromiter((mult * obj.get(v, 0.0) for v in variables), np.float64, n)
    lo = np.fromiter((-inf if v.lowBound is None else v.lowBound for v in variables), np.float64, n)
    hi = np.fromiter((inf if v.upBound is None else v.upBound for v in variables), np.float64, n)
    ints = []
    for i, v in enumerate(variables):
        v.index = i
        if v.cat == pulp.constants.LpInteger:
            ints.append(i)
    rows = list(lp._constraints.values())
    starts: list[int] = []
    index: list[int] = []
    value: list[float] = []
    rlo = np.empty(len(rows), np.float64)
    rhi = np.empty(len(rows), np.float64)
    for a in range(0, len(rows), HANDOFF_ROWS):
        if stop is not None and time.monotonic() > stop:
            raise HandoffTimeError(
                f"milp: handing the model ({n} variables, {len(rows)} constraints) to HiGHS ran past the time "
                f"limit: {time.monotonic() - t0:.1f} s for its columns and {a} of its constraints (estimated "
                f"{guess:.1f} s in all); give a longer --time-limit, or {fewer}")
        for k, c in enumerate(rows[a:a + HANDOFF_ROWS], start=a):
            c.index = k
            starts.append(len(index))
            for var, coef in c.items():
                if coef != 0:
                    index.append(var.index)
                    value.append(coef)
            lb, ub = c.getLb(), c.getUb()
            rlo[k] = -inf if lb is None else lb
            rhi[k] = inf if ub is None else ub
    m = HighsModel(cost, lo, hi, np.array(ints, np.int32), rlo, rhi, np.array(starts, np.int32),
                   np.array(index, np.int32), np.array(value, np.float64))
    return m, variables, time.monotonic() - t0


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
    """HiGHS in a child process (`milp.highs_process`), ended at its deadline where it does not stop there."""
    import numpy as np

    t0 = time.perf_counter()
    hm, variables, handoff_s = highs_model(model.lp, opts.deadline, model.problem.n)
    options: list[tuple[str, object]] = [("mip_rel_gap", float(opts.gap)), ("threads", int(opts.threads))]
    if not opts.verbose:      # logged to a file only (its last line says where a run that would not stop was)
        options.insert(0, ("log_to_console", False))
    if opts.node_limit is not None:
        options.append(("mip_max_nodes", int(opts.node_limit)))
    options.extend(opts.highs)
    run = HighsRun(options, opts.time_limit_s, min_limit_s=MIN_SOLVE_S)
    if opts.deadline is not None:
        # reading the solution back is kept back from the search, as long as the hand-off took
        run.deadline = opts.deadline - READBACK_FACTOR * handoff_s
    if start and sparse:
        pairs = [(v.index, start[v.name]) for v in variables if v.name in start]
        run.start_index = np.array([i for i, _ in pairs], np.int32)
        run.start_value = np.array([x for _, x in pairs], np.float64)
    elif start:
        run.start_dense = np.array([start.get(v.name, 0.0) for v in variables], np.float64)
    out = run_highs(hm, run)
    cols = out.col_value
    for i, v in enumerate(variables):
        v.varValue = None if cols is None or len(cols) != len(variables) else float(cols[i])
    res = _highs_result(model, opts, out, time.perf_counter() - t0)
    return replace(res, limit_s=out.limit_s, handoff_s=handoff_s + out.load_s, search_s=out.search_s)


def _highs_result(model: MilpModel, opts: SolveOptions, out: HighsOutcome, solve_s: float) -> SolveResult:
    """What HiGHS ended with, in its own words (module docstring)."""
    words = out.words
    if out.status == "kInfeasible":
        return SolveResult("infeasible", words, None, None, None, solve_s, False, None)
    bound = out.dual_bound / MS if abs(out.dual_bound) < 1e30 else None
    if not out.has_solution:  # the dual bound is still a bound (a start plan written instead is measured against it)
        return SolveResult("no_solution", words, None, bound, None, solve_s, out.interrupted, None)
    values = read_values(model)
    obj = model.objective_time(values)
    # The gap from the incumbent and the dual bound themselves: a run stopped at its time limit has been seen
    # with model status Optimal and mip_gap 0 while its bound was far below (HiGHS 1.16 with a MIP start).
    model_obj = out.objective
    gap = None
    if bound is not None and abs(model_obj) > 0:
        gap = max(0.0, (model_obj - bound * MS) / abs(model_obj))
    optimal = out.status == "kOptimal"
    proven = optimal and gap is not None and gap <= opts.gap + 1e-6
    if optimal and not proven:
        words += f" (gap {gap if gap is None else round(gap, 4)} from its bound: optimality not trusted)"
    return SolveResult("optimal" if proven else "feasible", words, obj, bound, gap, solve_s, out.interrupted,
                       values, model_objective_s=model_obj / MS)


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


def signal_children(executable: str, sig: int) -> list[int]:
    """Send `sig` to this process's children running `executable` (Linux: read from /proc; elsewhere none
    found); their process ids (`sig` 0: those running, nothing sent). Nothing is reaped (their Popen does that)."""
    sent = []
    target = os.path.realpath(executable)
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return sent
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv0 = f.read().split(b"\0", 1)[0].decode(errors="replace")
            if ppid != os.getpid() or os.path.realpath(argv0) != target:
                continue
            os.kill(pid, sig)
            sent.append(pid)
        except (OSError, ValueError, IndexError):
            continue     # gone meanwhile, or not ours to read
    return sent


def stop_children(executable: str, wait_s: float = 2.0) -> list[int]:
    """Terminate this process's children running `executable` and reap them, killing any still there after
    `wait_s` (a CBC writing its solution into a folder being removed turned the interrupt into "Directory not
    empty"). Returns their process ids."""
    stopped = signal_children(executable, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    for pid in stopped:
        try:
            while os.waitpid(pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    break
                time.sleep(0.02)
        except ChildProcessError:
            pass          # reaped by its Popen already
    return stopped


POLL_CBC_S = 0.1   # how often the watchdog looks for CBC's process until it has started


def _cbc_watchdog(path: str, limit_s: float, deadline: float | None, done: threading.Event, fired: list[str],
                  seen: dict[str, float]) -> None:
    """CBC's time limit made a deadline: CBC does not check it everywhere (its root LP and preprocessing: `hybrid
    milp --solver cbc --time-limit 20s` on a 2-block transformer at 30% of its peak ran 69 s, CBC given 10.3 s
    running 60 s). CBC is interrupted (SIGINT: it stops and writes its incumbent) `STOP_GRACE_S` past its own
    limit, counted as CBC counts it from its start (PuLP writes the model's file first: 0.9 s on a 30-layer
    graph, which the grace lost) where CBC's process can be seen (Linux), else from now; or `STOP_GRACE_S` past
    the caller's `deadline` (time.monotonic()) where that comes first, CBC given its least budget; and killed
    `KILL_GRACE_S` later. `fired` records what was done; `seen` when CBC started, its own limit's end, when it
    is to be interrupted and when it was interrupted and killed ("started", "own_end", "stop_at", "interrupted",
    "killed"). `done` ends the watch."""
    t = time.monotonic()
    if os.path.isdir("/proc"):
        while not signal_children(path, 0):
            if done.wait(POLL_CBC_S):
                return
        t = time.monotonic()
    stop_at = t + limit_s + STOP_GRACE_S
    if deadline is not None:
        stop_at = min(stop_at, max(deadline, t + MIN_SOLVE_S) + STOP_GRACE_S)
    seen.update(started=t, own_end=t + limit_s, stop_at=stop_at)
    if done.wait(max(0.0, stop_at - time.monotonic())):
        return
    if signal_children(path, signal.SIGINT):
        fired.append("interrupted")
        seen["interrupted"] = time.monotonic()
    if done.wait(KILL_GRACE_S):
        return
    if signal_children(path, signal.SIGKILL):
        fired.append("killed")
        seen["killed"] = time.monotonic()


def _cbc_stop_words(opts: "SolveOptions", seen: dict[str, float], t_solve: float, ended: bool,
                    solution: bool) -> str:
    """How the watchdog stopped CBC (`ended`: killed, as it did not stop when interrupted; `solution`: CBC
    wrote one): past its own limit, or at the caller's deadline inside it."""
    late = seen["stop_at"] - seen["own_end"]
    # measured where the watchdog did both (a loaded machine's kills later than KILL_GRACE_S)
    after = seen["killed"] - seen["interrupted"] if "killed" in seen and "interrupted" in seen else KILL_GRACE_S
    if late >= 0 and solution:
        return (f"ran on past its limit of {opts.time_limit_s:.1f} s and stopped when interrupted {late:.3g} s "
                "later")
    if late >= 0:
        how = (f"did not stop when interrupted: killed {after:.1f} s after the interrupt" if ended
               else "was interrupted: it stopped")
        return f"ran past its time limit of {opts.time_limit_s:.1f} s and {how}"
    how = f"did not stop: killed {after:.1f} s later" if ended else "stopped"
    return (f"was interrupted {STOP_GRACE_S:g} s past the time limit's deadline, "
            f"{seen['stop_at'] - seen['started']:.1f} s into its own limit of {opts.time_limit_s:.1f} s (PuLP "
            f"wrote the model's file for {seen['started'] - t_solve:.1f} s before CBC started), and {how}")


class CbcInterrupted(KeyboardInterrupt):
    """A Ctrl-C or SIGTERM during CBC's solve, `after_s` into it: CBC, stopped, hands back no incumbent (the
    command's report says so, rather than "before the model was solved")."""

    def __init__(self, after_s: float) -> None:
        super().__init__(after_s)
        self.after_s = after_s


def _solve_cbc(model: MilpModel, opts: SolveOptions, start: dict[str, float] | None = None,
               sparse: bool = False) -> SolveResult:
    if start:
        for var in model.lp.variables():
            if var.name in start or not sparse:
                var.setInitialValue(start.get(var.name, 0.0))
    # PuLP's model, start and solution files in a folder of this solve's own, gone whatever happens
    with tempfile.TemporaryDirectory(prefix="hybrid-cbc-", ignore_cleanup_errors=True) as tmp:
        log = os.path.join(tmp, "cbc.log")
        extra = [] if opts.node_limit is None else [f"maxNodes {int(opts.node_limit)}"]
        if start:   # CBC's preprocessing changes the model under the start: "mipstart values could not be used
            extra.append("preprocess off")   # to build a solution" where HiGHS finds the same start feasible
        path = _cbc_path()
        solver = pulp.COIN_CMD(path=path, msg=opts.verbose, timeLimit=opts.time_limit_s, gapRel=opts.gap,
                               threads=opts.threads, logPath=log, options=extra, warmStart=bool(start))
        solver.tmpDir = tmp
        t0 = time.perf_counter()
        t_solve = time.monotonic()
        done, fired, seen = threading.Event(), [], {}
        watch = None if opts.time_limit_s is None else threading.Thread(
            target=_cbc_watchdog, args=(path, opts.time_limit_s, opts.deadline, done, fired, seen),
            name="hybrid-cbc-deadline", daemon=True)
        if watch is not None:
            watch.start()

        def watched() -> list[str]:
            """What the watchdog did, once it has finished: CBC can die of its signal before the watchdog has
            noted sending it (a kill read as CBC's own failure, seen on a loaded machine)."""
            done.set()
            if watch is not None:
                watch.join()
            return fired

        try:
            model.lp.solve(solver)
        except pulp.PulpSolverError:
            if not watched():
                raise
            for v in model.lp.variables():
                v.varValue = None
            ran = time.perf_counter() - t0
            said = _cbc_stop_words(opts, seen, t_solve, "killed" in fired, solution=False)
            return SolveResult("no_solution", f"CBC {said}, {ran:.1f} s into the solve, with no solution", None, None,
                               None, ran, False, None)
        except BaseException as e:
            # Ctrl-C or SIGTERM ends PuLP's wait, not CBC: a terminal's Ctrl-C reaches CBC too, a SIGTERM sent to
            # this process alone does not (CBC ran on to its time limit, minutes)
            stop_children(path)
            if isinstance(e, KeyboardInterrupt):
                raise CbcInterrupted(time.perf_counter() - t0) from None
            raise
        finally:
            watched()
        solve_s = time.perf_counter() - t0
        text = open(log, errors="replace").read() if os.path.exists(log) else ""
    m = _RESULT.search(text)
    words = m.group(1).strip() if m else pulp.LpStatus[model.lp.status]
    if fired:   # stopped by the interrupt sent past its limit (its log then says "Stopped on ctrl-c")
        said = _cbc_stop_words(opts, seen, t_solve, "killed" in fired, solution=True)
        words = f"Stopped on time limit (CBC {said}; its own words: {words})"
    used = ("MIPStart provided solution" in text) if start else None
    if "infeasible" in words.lower() and not fired:
        return SolveResult("infeasible", words, None, None, None, solve_s, False, None, start_used=used)
    # interrupted (by the watchdog) in its preprocessing, CBC says "Infeasible" of a model HiGHS solves: no proof
    if model.lp.sol_status not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible) or \
            any(v.varValue is None for v in model.R.values()) or "infeasible" in words.lower():
        return SolveResult("no_solution", words, None, None, None, solve_s, False, None, start_used=used)
    values = read_values(model)
    obj = model.objective_time(values)
    lb = re.search(r"^Lower bound:\s*" + _FLOAT, text, re.M)
    bound = float(lb.group(1)) / MS if lb else None
    model_obj = model.lp.objective.value()
    model_obj = float(model_obj) / MS if model_obj is not None else None
    proven = words.lower().startswith("optimal")
    # One definition of the gap for both solvers, HiGHS's: (incumbent - bound) / incumbent, both with the
    # tie-break. CBC's own "Gap:" line divides by the bound (152% where HiGHS's definition gives 60%).
    gap = None
    if bound is not None and model_obj is not None and abs(model_obj) > 0:
        gap = max(0.0, (model_obj - bound) / abs(model_obj))
    elif proven:
        gap = 0.0
    if fired:   # stopped by the watchdog: optimal only where its bound shows it
        proven = gap is not None and gap <= opts.gap + 1e-6
    return SolveResult("optimal" if proven else "feasible", words, obj, bound, gap, solve_s, False, values,
                       model_objective_s=model_obj, start_used=used)


def require_solution(res: SolveResult, what: str = "milp", infeasible: str | None = None) -> Values:
    """The incumbent, or a one-line error saying why there is none. `infeasible`: what to say when the solver
    proved the model infeasible (the caller knows the model: which of its restrictions a plan may need to
    break, `milp.api.infeasible_advice`); without it, the model is said to be infeasible, not every plan."""
    if res.status == "infeasible":
        raise InfeasibleError(infeasible or f"{what}: the model is infeasible at this memory (the solver proved "
                              f"it: {res.solver_status}); a plan outside the model may still fit: try a start "
                              "plan, or more --memory")
    if res.values is None:
        raise HybridError(f"{what}: the solver stopped without a feasible solution ({res.solver_status}, "
                          f"{res.solve_s:.1f} s); give a longer --time-limit, more --memory or fewer --stages")
    return res.values
