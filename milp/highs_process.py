"""HiGHS run in a child process, so that a time limit is a deadline.

HiGHS 1.16's MIP presolve does not check its time limit on some models (upstream ERGO-Code/HiGHS #1501, #2226,
#2478, #3074), and highspy's cancel does not reach it there either: `hybrid milp --time-limit 20s` on a 2-block
transformer at 30% of its peak ran past 100 s and had to be killed, the start plan it would have written lost.
The parent builds the model's arrays (`milp.solve`), this module run as a program (`python -m
milp.highs_process DIR`, importing numpy and highspy only) loads and solves them and writes what HiGHS ended with,
and the parent (`run_highs`) interrupts it a little after its limit and ends it if that does not stop it: the
caller then has "no solution" at its deadline and writes its start plan. The same arrays and options give the
same HiGHS run as in the parent process (`load` is what both use; `tests/cli/test_arena_milp_inputs.py` compares
the model with PuLP's own hand-off).

Ctrl-C and SIGTERM reach the parent only (the child runs in its own session, its SIGTERM blocked): the parent
forwards a SIGINT, which HiGHS takes as a cancel, keeping its incumbent; a second stop ends the child at once.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

import numpy as np

STOP_GRACE_S = 1.0   # past the solver's time limit, the child is interrupted (HiGHS itself has run 1.3-4 s past
#                      its limit in its search; the interrupt keeps the incumbent)
KILL_GRACE_S = 2.0   # past an interrupt, the child is ended (a cancel is taken within ~0.1 s, outside presolve)
POLL_S = 0.05
CHILD: tuple[str, ...] = ("-m", "milp.highs_process")   # the child's arguments to Python, before its folder
_ARRAYS = ("cost", "lo", "hi", "integer", "row_lo", "row_hi", "start", "index", "value")
_live: set[subprocess.Popen] = set()   # children running now: ended by `hybrid.signals.exit_now` (second stop)
_folders: set[str] = set()             # their folders, removed then too


@dataclass
class HighsModel:
    """A MIP as HiGHS takes it: columns (cost, bounds), the integer columns, rows (bounds and CSR coefficients)."""
    cost: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    integer: np.ndarray   # int32 indices of the integer columns
    row_lo: np.ndarray
    row_hi: np.ndarray
    start: np.ndarray     # int32, one per row: where its coefficients begin in index/value
    index: np.ndarray     # int32 column of each coefficient
    value: np.ndarray


@dataclass
class HighsRun:
    """How to run it: HiGHS options (name, value), the deadline, a MIP start (dense: a value per column; sparse:
    some columns, completed by HiGHS)."""
    options: list[tuple[str, object]] = field(default_factory=list)
    time_limit_s: float | None = None    # HiGHS's time limit, capped by the deadline's share when it starts
    deadline: float | None = None        # time.monotonic() (one clock for every process on the machine)
    min_limit_s: float = 0.5             # the least time limit, where the deadline has (nearly) passed
    start_dense: np.ndarray | None = None
    start_index: np.ndarray | None = None
    start_value: np.ndarray | None = None


@dataclass
class HighsOutcome:
    """What HiGHS ended with, or why it did not end by itself."""
    status: str                   # HighsModelStatus's name (kOptimal, kTimeLimit, kInterrupt, ...); "ended": killed
    words: str                    # the status in HiGHS's words, or why the child was ended
    has_solution: bool
    dual_bound: float
    objective: float
    col_value: np.ndarray | None
    search_s: float | None        # the child's h.solve()
    limit_s: float | None         # the time limit HiGHS was given
    interrupted: bool             # a Ctrl-C / SIGTERM reached the parent during the run
    load_s: float = 0.0           # from the child's launch to its HiGHS's start: Python's start, reading the arrays,
    #                               loading them into HiGHS


def load(h, m: HighsModel) -> None:  # noqa: ANN001 - highspy.Highs
    """Columns, integrality and rows into `h`, each in one call."""
    import highspy

    none_i = np.zeros(0, np.int32)
    n = len(m.cost)
    h.addCols(n, m.cost, m.lo, m.hi, 0, none_i, none_i, np.zeros(0, np.float64))
    if len(m.integer):
        h.changeColsIntegrality(len(m.integer), m.integer.astype(np.int32),
                                np.full(len(m.integer), int(highspy.HighsVarType.kInteger), np.uint8))
    if len(m.row_lo):
        h.addRows(len(m.row_lo), m.row_lo, m.row_hi, len(m.index), m.start.astype(np.int32),
                  m.index.astype(np.int32), m.value.astype(np.float64))


def _end(proc: subprocess.Popen) -> None:
    try:
        proc.kill()
    except OSError:
        pass


def end_children() -> None:
    """Kill every HiGHS child still running and remove its folder (a second Ctrl-C / SIGTERM stops the process at
    once, `os._exit`: no `with` block cleans up after it, and the model's arrays can be hundreds of MB)."""
    for proc in list(_live):
        _end(proc)
        try:
            proc.wait(timeout=1.0)
        except (subprocess.TimeoutExpired, OSError):
            pass
    for d in list(_folders):
        shutil.rmtree(d, ignore_errors=True)


def _last_log_line(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 4096))
            lines = [ln.strip() for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def _started(path: str) -> tuple[float, float] | None:
    """(when the child's HiGHS started, the time limit it was given), once it has."""
    try:
        with open(path) as f:
            d = json.load(f)
        return float(d["t"]), float(d["limit_s"])
    except (OSError, ValueError, KeyError):
        return None


def _failed(words: str, interrupted: bool, load_s: float) -> HighsOutcome:
    """No solution, and why: the caller writes its start plan where it has one (a child killed by the OOM killer,
    a full temporary folder), as it does at a time limit."""
    return HighsOutcome("failed", words, False, float("inf"), float("inf"), None, None, None, interrupted,
                        load_s=load_s)


def run_highs(model: HighsModel, run: HighsRun) -> HighsOutcome:
    """Solve `model` in a child process (module docstring): HiGHS's own log goes to this process's descriptor 1
    (`milp.solve.solver_output_to_stderr` points it at stderr). A child that fails (killed, no room to write its
    files) gives an outcome with no solution (status "failed", its last line of stderr); KeyboardInterrupt on a
    second Ctrl-C / SIGTERM (the child ended)."""
    from hybrid.signals import register_cleanup

    register_cleanup(end_children)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hybrid-highs-") as d:
        _folders.add(d)
        try:
            return _run_in(d, model, run, t0)
        finally:
            _folders.discard(d)


def _run_in(d: str, model: HighsModel, run: HighsRun, t0: float) -> HighsOutcome:
    """`run_highs` in its folder `d` (`t0`: when it was called)."""
    from hybrid.signals import children_ignore_stops

    try:
        np.savez(os.path.join(d, "model.npz"), **{k: getattr(model, k) for k in _ARRAYS},
                 **{k: getattr(run, k) for k in ("start_dense", "start_index", "start_value")
                    if getattr(run, k) is not None})
        with open(os.path.join(d, "run.json"), "w") as f:
            json.dump({"options": [[k, v] for k, v in run.options], "time_limit_s": run.time_limit_s,
                       "deadline": run.deadline, "min_limit_s": run.min_limit_s}, f)
    except OSError as e:
        return _failed(f"HiGHS's process not started: writing the model for it to {d} failed ({e}); free space "
                       "there or point TMPDIR at a folder with room", False, time.monotonic() - t0)
    err_path = os.path.join(d, "stderr.txt")
    log_path = os.path.join(d, "highs.log")
    started_path = os.path.join(d, "started.json")
    proc: subprocess.Popen | None = None
    told: float | None = None      # when the child was interrupted
    why = ""                       # why: the time limit, or a Ctrl-C / SIGTERM
    interrupted = False
    began = None
    # until its HiGHS has started, the child is timed against the deadline, or against the least time limit it
    # gives HiGHS from its launch where the deadline has (nearly) passed: an interrupt sent before that read as a
    # failure of the child
    launch_limit = None if run.deadline is None else max(run.deadline, time.monotonic() + run.min_limit_s)

    def stop_once() -> None:
        """A first Ctrl-C / SIGTERM: HiGHS is cancelled and keeps its incumbent; a second one is raised."""
        nonlocal interrupted, why, told
        if interrupted:               # a second stop (a library's; the CLI's exits at once)
            raise KeyboardInterrupt
        interrupted, why = True, "interrupt"
        if told is None and proc is not None:
            proc.send_signal(signal.SIGINT)
            told = time.monotonic()

    try:
        try:
            with open(err_path, "wb") as err, children_ignore_stops():
                proc = subprocess.Popen([sys.executable, *CHILD, d, str(os.getpid())],
                                        stdin=subprocess.DEVNULL, stderr=err, start_new_session=True,
                                        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
                _live.add(proc)
        except KeyboardInterrupt:     # noted while the child started, acted on now (children_ignore_stops)
            if proc is None:
                raise
            stop_once()
        except OSError as e:
            return _failed(f"HiGHS's process could not start ({e})", False, time.monotonic() - t0)
        while True:
            try:
                try:
                    proc.wait(timeout=POLL_S)
                    break
                except subprocess.TimeoutExpired:
                    pass
                now = time.monotonic()
                if began is None:
                    began = _started(started_path)
                limit_at = began[0] + began[1] if began is not None else launch_limit
                if told is None and limit_at is not None and now > limit_at + STOP_GRACE_S:
                    proc.send_signal(signal.SIGINT)
                    told, why = now, "limit"
                elif told is not None and now > told + KILL_GRACE_S:
                    _end(proc)
                    proc.wait()
                    waited = time.monotonic() - t0
                    last = _last_log_line(log_path)
                    said = f"; its log's last line: {last!r}" if last else ""
                    # how long after what: the process's whole time read as the wait after the interrupt
                    # ("ended after 5.9 s" where the command exited 2.5 s after a Ctrl-C)
                    ended = (f"killed {time.monotonic() - told:.1f} s after the interrupt, {waited:.1f} s after "
                             "its process started")
                    if why == "limit":
                        words = (f"HiGHS ran past its time limit{'' if began is None else f' of {began[1]:.1f} s'} "
                                 f"and did not stop when interrupted: {ended}, with no solution"
                                 f"{said}; HiGHS 1.16 does not check its time limit everywhere, e.g. in its presolve")
                    else:
                        words = f"HiGHS did not stop when interrupted: {ended}{said}"
                    return HighsOutcome("ended", words, False, float("inf"), float("inf"), None,
                                        None if began is None else time.monotonic() - began[0],
                                        None if began is None else began[1], interrupted,
                                        load_s=0.0 if began is None else began[0] - t0)
            except KeyboardInterrupt:
                stop_once()
    except BaseException:
        if proc is not None:
            _end(proc)
            proc.wait()
        raise
    finally:
        if proc is not None:
            _live.discard(proc)
    out_path = os.path.join(d, "outcome.npz")
    began = began or _started(started_path)
    load_s = time.monotonic() - t0 if began is None else began[0] - t0
    if proc.returncode != 0 or not os.path.exists(out_path):
        try:
            with open(err_path, "rb") as f:
                tail = [ln for ln in f.read().decode(errors="replace").splitlines() if ln.strip()]
        except OSError:
            tail = []
        return _failed(f"HiGHS's process failed (exit status {proc.returncode}): "
                       f"{tail[-1].strip() if tail else 'it said nothing'}", interrupted, load_s)
    with np.load(out_path, allow_pickle=False) as z:
        info = json.loads(str(z["info"]))
        cols = z["col_value"] if "col_value" in z.files else None
    status, words = info["status"], info["words"]
    if why == "limit" and status == "kInterrupt":   # stopped by the interrupt sent at its limit, not by a user
        status = "kTimeLimit"
        given = "" if info["limit_s"] is None else f" of {info['limit_s']:.1f} s"
        words = (f"Time limit reached (HiGHS ran on past its limit{given} and stopped when interrupted "
                 f"{STOP_GRACE_S:g} s later)" if info["search_s"] is not None else
                 f"Time limit reached (HiGHS's process had not started HiGHS {STOP_GRACE_S:g} s past the deadline)")
    return HighsOutcome(status, words, bool(info["has_solution"]), float(info["dual_bound"]),
                        float(info["objective"]), cols, info["search_s"], info["limit_s"],
                        interrupted or (bool(info["interrupted"]) and why != "limit"), load_s=load_s)


def _solve_cancelling(h) -> None:  # noqa: ANN001 - highspy.Highs
    """`h.solve()` as highspy runs it with HandleKeyboardInterrupt (HiGHS in a thread, a SIGINT cancels it and
    HiGHS keeps its incumbent), without its words: it printed "Ctrl-C pressed 1 times: Waiting for HiGHS to
    finish. (5 times to force termination)" when the parent interrupted it at its time limit, and the parent,
    not a fifth Ctrl-C, ends a child that does not stop."""
    try:
        h.startSolve()
    except KeyboardInterrupt:   # as it returned: HiGHS runs, and is cancelled as below
        h.cancelSolve()
    while True:
        try:
            if h.wait(0.1)[0]:
                return
        except KeyboardInterrupt:
            h.cancelSolve()


def _watch_parent(parent: int) -> None:
    """End this child when its parent is gone (killed outright: nobody left to read the result)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(3)


def _child(d: str, parent: int | None = None) -> int:
    """`parent`: the parent's process id, passed in (read here with os.getppid(), a parent killed while this
    child imported was missed: it then ran on to its limit with nobody to read the result)."""
    import highspy

    threading.Thread(target=_watch_parent, args=(os.getppid() if parent is None else parent,), daemon=True).start()
    with open(os.path.join(d, "run.json")) as f:
        run = json.load(f)
    info: dict = {"interrupted": False}
    cols = None
    try:
        # SIGINT comes from the parent only (this is its own session) and cancels HiGHS: handled here even where
        # this process was born with it ignored (inherited from a shell's background job) or blocked
        # (children_ignore_stops); unblocked inside this `try`, so that one sent while this process started (the
        # parent's deadline, or a user's Ctrl-C) is an interrupt before HiGHS started, not this process's failure
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if hasattr(signal, "pthread_sigmask"):
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        with np.load(os.path.join(d, "model.npz"), allow_pickle=False) as z:
            m = HighsModel(*(z[k] for k in _ARRAYS))
            starts = {k: z[k] for k in ("start_dense", "start_index", "start_value") if k in z.files}
        h = highspy.Highs()
        for k, v in run["options"]:
            h.setOptionValue(k, v)
        h.setOptionValue("log_file", os.path.join(d, "highs.log"))
        load(h, m)
        if "start_index" in starts:
            h.setSolution(len(starts["start_index"]), starts["start_index"].astype(np.int32),
                          starts["start_value"].astype(np.float64))
        elif "start_dense" in starts:
            sol = highspy.HighsSolution()
            sol.col_value = starts["start_dense"].tolist()
            sol.value_valid = True
            h.setSolution(sol)
        limit = run["time_limit_s"]
        if run["deadline"] is not None:
            left = max(run["min_limit_s"], run["deadline"] - time.monotonic())
            limit = left if limit is None else min(float(limit), left)
        if limit is not None:
            h.setOptionValue("time_limit", float(limit))
        h.HandleKeyboardInterrupt = True    # HiGHS polls for a cancel (`cancelSolve`) while it runs
        t0 = time.monotonic()
        with open(os.path.join(d, "started.json.part"), "w") as f:
            json.dump({"t": t0, "limit_s": float(limit) if limit is not None else float("inf")}, f)
        os.replace(os.path.join(d, "started.json.part"), os.path.join(d, "started.json"))
        _solve_cancelling(h)
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # HiGHS's solution is kept: an interrupt now comes too late
        search_s = time.monotonic() - t0
    except KeyboardInterrupt:     # before HiGHS started (it takes one itself during its run)
        info.update(status="kInterrupt", words="Interrupted by user", has_solution=False, dual_bound=float("inf"),
                    objective=float("inf"), search_s=None, limit_s=None, interrupted=True)
    else:
        st = h.getModelStatus()
        hinfo = h.getInfo()
        has = int(hinfo.primal_solution_status) == 2      # kSolutionStatusFeasible
        cancelled = st == highspy.HighsModelStatus.kInterrupt   # named kHighsInterrupt too: one name for it
        info.update(status="kInterrupt" if cancelled else st.name, words=h.modelStatusToString(st),
                    has_solution=has, dual_bound=float(hinfo.mip_dual_bound),
                    objective=float(hinfo.objective_function_value), search_s=search_s,
                    limit_s=None if limit is None else float(limit), interrupted=cancelled)
        values = h.getSolution().col_value
        if len(values):
            cols = np.asarray(values, np.float64)
    part = os.path.join(d, "outcome.part.npz")
    arrays = {"info": np.array(json.dumps(info))}
    if cols is not None:
        arrays["col_value"] = cols
    np.savez(part, **arrays)
    os.replace(part, os.path.join(d, "outcome.npz"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None))
