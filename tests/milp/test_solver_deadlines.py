"""A solver that runs on past its time limit is interrupted, then ended, and the caller has no solution at its
deadline (and writes its start plan). HiGHS runs in a child process (HiGHS 1.16's presolve does not check its
time limit on some models: `hybrid milp --time-limit 20s` ran past 100 s), and a second interrupt ends it at
once; CBC is watched the same way (`--solver cbc --time-limit 20s` ran 69 s). Stand-ins that ignore SIGINT and
never finish play the stuck solvers."""
from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from hybrid.plan import Plan
from hybrid.validator import validate
from tests.cli.helpers import run
from hybrid.graph.synthetic import training_graph

# writes its pid and, like the real child, when "HiGHS" started and its limit; then neither stops nor answers SIGINT
STUCK = ("-c", "import json, os, signal, sys, time\n"
               "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
               "d = sys.argv[1]\n"
               "open(os.path.join(d, '..', 'stuck.pid'), 'w').write(str(os.getpid()))\n"
               "json.dump({'t': time.monotonic(), 'limit_s': 1.0}, open(os.path.join(d, 'started.json'), 'w'))\n"
               "time.sleep(600)\n")

# runs on past its limit (as HiGHS did on ResNet-18 at 64 MiB: 21.3 s of 17.3 s) and stops when interrupted, with
# HiGHS's status for an interrupt
LATE = ("-c", "import json, os, signal, sys, time\n"
              "import numpy as np\n"
              "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
              "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
              "d = sys.argv[1]\n"
              "open(os.path.join(d, '..', 'stuck.pid'), 'w').write(str(os.getpid()))\n"
              "json.dump({'t': time.monotonic(), 'limit_s': 1.0}, open(os.path.join(d, 'started.json'), 'w'))\n"
              "try:\n"
              "    time.sleep(600)\n"
              "except KeyboardInterrupt:\n"
              "    info = dict(status='kInterrupt', words='Interrupted by user', has_solution=False,\n"
              "                dual_bound=float('inf'), objective=float('inf'), search_s=3.0, limit_s=1.0,\n"
              "                interrupted=True)\n"
              "    np.savez(os.path.join(d, 'outcome.npz'), info=np.array(json.dumps(info)))\n")


def _stuck(monkeypatch, tmp_path: Path, child: tuple[str, ...] = STUCK) -> Path:
    import milp.highs_process as hp

    monkeypatch.setattr(hp, "CHILD", child)
    monkeypatch.setattr(hp.tempfile, "TemporaryDirectory",
                        lambda prefix="": _InTmp(tmp_path))
    return tmp_path / "stuck.pid"


class _InTmp:
    """The child's folder inside tmp_path (so that the stand-in's pid file lands beside it)."""

    def __init__(self, root: Path) -> None:
        self.path = root / "highs"

    def __enter__(self) -> str:
        self.path.mkdir()
        return str(self.path)

    def __exit__(self, *exc: object) -> None:
        import shutil

        shutil.rmtree(self.path, ignore_errors=True)


def _gone(pid_file: Path) -> bool:
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _model():
    from milp.model import build_model
    from milp.stages import build_problem

    g = training_graph(6, seed=1)
    return build_model(build_problem(g, g.device))


def test_a_solver_that_does_not_stop_at_its_limit_is_ended_with_no_solution(monkeypatch, tmp_path) -> None:
    from milp.solve import SolveOptions, solve

    pid_file = _stuck(monkeypatch, tmp_path)
    t0 = time.monotonic()
    res = solve(_model(), SolveOptions(time_limit_s=2.0, deadline=time.monotonic() + 2.0))
    assert time.monotonic() - t0 < 60           # a hang guard only (about 6 s: limit, interrupt, end)
    assert res.status == "no_solution" and res.values is None and not res.interrupted
    assert "did not stop when interrupted" in res.solver_status and "time limit of 1.0 s" in res.solver_status
    assert _gone(pid_file)


def test_a_solver_stopped_at_its_limit_by_the_interrupt_is_not_said_to_be_interrupted(monkeypatch, tmp_path) -> None:
    """HiGHS's own status for the interrupt sent at its limit is "Interrupted by user": said as the time limit,
    and not as a Ctrl-C (the report would say "interrupted, best plan so far", and no re-solve would follow)."""
    from milp.solve import SolveOptions, solve

    pid_file = _stuck(monkeypatch, tmp_path, LATE)
    res = solve(_model(), SolveOptions(time_limit_s=2.0, deadline=time.monotonic() + 2.0))
    assert res.status == "no_solution" and not res.interrupted
    assert res.solver_status.startswith("Time limit reached (HiGHS ran on past its limit of 1.0 s"), res.solver_status
    assert _gone(pid_file)


def _milp_writes_the_start(tmp_path: Path, time_limit: str, said: str) -> None:
    """`hybrid milp` on a small graph exits 0 with its start written, its report saying `said`."""
    g = training_graph(6, seed=1)
    gp, out = tmp_path / "g.json", tmp_path / "p.json"
    g.save(gp)
    r = run("milp", "--graph", gp, "--memory", "24MiB", "--time-limit", time_limit, "--out", out)
    assert r.exit_code == 0, r.output
    assert said in r.output and "written: the start's" in r.output, r.output
    assert validate(g, Plan.load(out)).valid


def test_milp_writes_the_start_when_the_solver_does_not_stop(monkeypatch, tmp_path) -> None:
    pid_file = _stuck(monkeypatch, tmp_path)
    _milp_writes_the_start(tmp_path, "10s", "did not stop when interrupted")
    assert _gone(pid_file)


def test_a_second_interrupt_ends_the_solver_at_once(monkeypatch, tmp_path) -> None:
    """The first interrupt is forwarded (HiGHS would keep its incumbent) and the child left to stop; the second
    ends it."""
    from milp.solve import SolveOptions, solve

    pid_file = _stuck(monkeypatch, tmp_path)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a background run inherits it ignored
    returned = threading.Event()
    alive_after_first: list[bool] = []

    def twice() -> None:
        while not pid_file.exists():
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.3)
        alive_after_first.append(not _gone(pid_file))
        if not returned.is_set():     # a solve that ended on the first has nobody left to interrupt
            os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=twice, daemon=True)
    thread.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            try:
                solve(_model(), SolveOptions(time_limit_s=300.0))
            finally:
                returned.set()
        thread.join(timeout=60)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert alive_after_first == [True] and _gone(pid_file)


def _cbc_stand_in(monkeypatch, tmp_path: Path, ignores_sigint: bool) -> list:
    """CBC replaced by a copy of `sleep` named cbc (its process found by name, as CBC's is), started and waited
    for as PuLP does (an exit status other than 0 raises PulpSolverError)."""
    import subprocess

    import pulp

    import milp.solve as ms
    from tests.milp.test_review_reports import _stand_in_cbc

    fake = _stand_in_cbc(tmp_path)
    monkeypatch.setattr(ms, "_cbc_path", lambda: fake)
    started: list = []

    def solve_like_pulp(self, lp, **kwargs):  # noqa: ANN001, ANN003, ANN202
        pre = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignores_sigint else \
            (lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        started.append(subprocess.Popen([self.path, "30"], preexec_fn=pre))   # 30 s: a hang guard
        if started[-1].wait() != 0:
            raise pulp.PulpSolverError("Pulp: Error while trying to execute " + self.path)
        raise AssertionError("the stand-in finished by itself")

    monkeypatch.setattr(pulp.COIN_CMD, "actualSolve", solve_like_pulp)
    return started


@pytest.mark.parametrize("ignores_sigint", [True, False])
def test_cbc_past_its_limit_is_interrupted_then_ended_with_no_solution(monkeypatch, tmp_path,
                                                                       ignores_sigint: bool) -> None:
    from milp.solve import SolveOptions, solve

    started = _cbc_stand_in(monkeypatch, tmp_path, ignores_sigint)
    t0 = time.monotonic()
    res = solve(_model(), SolveOptions("cbc", time_limit_s=1.0))
    assert time.monotonic() - t0 < 60           # a hang guard only (about 2-4 s)
    assert res.status == "no_solution" and res.values is None and started and started[0].poll() is not None
    assert res.solver_status.startswith("CBC ran past its time limit of 1.0 s and ")
    said = r"did not stop when interrupted: killed \d+\.\d s after the interrupt, " if ignores_sigint else \
        "was interrupted: it stopped, "
    assert re.search(said, res.solver_status) and res.solver_status.endswith(" s into the solve, with no solution"), \
        res.solver_status


def test_the_starts_layout_keeps_to_the_deadlines_share(monkeypatch) -> None:
    """`prepare_start` lays the start out within `layout_s` (plan_milp's share of the deadline): at laid_out's own
    30 s, `hybrid milp --time-limit 10s` on a 2,872-op RNN ran 34 s (13 s now)."""
    import dataclasses

    import hybrid.arena.layout as layout
    from milp.api import belady_start, prepare_start

    g = training_graph(6, seed=1)
    device = dataclasses.replace(g.device, memory_bytes=24 * 2**20)
    seen: list[float] = []
    real = layout.laid_out

    def recording(graph, plan, time_limit_s=30.0, budget=layout.QUICK_BUDGET):  # noqa: ANN001, ANN202
        seen.append(time_limit_s)
        return real(graph, plan, time_limit_s, budget)

    monkeypatch.setattr(layout, "laid_out", recording)
    prepare_start(g, device, belady_start(g, device), layout_s=1.5)
    assert seen and all(s <= 1.5 for s in seen), seen


# starts slowly (a loaded machine, a large model's arrays): runs the real child once the parent's interrupt at its
# deadline has come (born with SIGINT blocked, as every child: pending until the child unblocks it)
SLOW_START = ("-c", "import signal, sys, time\n"
                    "import highspy\n"
                    "from milp.highs_process import _child\n"
                    "t = time.monotonic()\n"
                    "while signal.SIGINT not in signal.sigpending() and time.monotonic() < t + 30:\n"
                    "    time.sleep(0.02)\n"
                    "sys.exit(_child(sys.argv[1], *[int(a) for a in sys.argv[2:]]))\n")

# dies as a child killed by the OOM killer does
KILLED = ("-c", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")


def test_an_interrupt_before_highs_starts_is_the_time_limit_not_a_failure(monkeypatch, tmp_path) -> None:
    """The deadline had passed when the child was launched: it was interrupted while it started, died of the
    KeyboardInterrupt (exit status -2: `hybrid milp` exit 2, no plan) or, inside its `try`, reported a time
    limit of None that the parent could not format (a traceback)."""
    from milp.solve import SolveOptions, solve

    _stuck(monkeypatch, tmp_path, SLOW_START)
    res = solve(_model(), SolveOptions(time_limit_s=30.0, deadline=time.monotonic() - 1.0))
    assert res.status == "no_solution" and res.values is None and not res.interrupted, res
    assert res.solver_status.startswith("Time limit reached"), res.solver_status


def test_milp_writes_the_start_when_highs_process_dies(monkeypatch, tmp_path) -> None:
    """A child killed outright (the OOM killer) is no solution, as at a time limit: the start is written (it was
    `error: milp: HiGHS's process failed (exit status -9)`, exit 2, nothing written)."""
    _stuck(monkeypatch, tmp_path, KILLED)
    _milp_writes_the_start(tmp_path, "20s", "HiGHS's process failed (exit status -9)")


def test_no_room_for_the_model_is_no_solution(monkeypatch) -> None:
    import milp.highs_process as hp
    from milp.solve import SolveOptions, solve

    def full(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hp.np, "savez", full)
    res = solve(_model(), SolveOptions(time_limit_s=30.0))
    assert res.status == "no_solution" and "No space left on device" in res.solver_status, res.solver_status


def test_the_child_is_told_its_parent_and_a_second_stop_removes_its_folder(monkeypatch, tmp_path) -> None:
    """The parent's process id is passed (read by the child after its imports, a parent killed meanwhile was
    missed and the child ran on alone); a second stop (`os._exit`, no `with` unwinds) removes the folders."""
    import milp.highs_process as hp
    from milp.solve import SolveOptions, solve

    told = tmp_path / "parent.txt"
    _stuck(monkeypatch, tmp_path, ("-c", f"import sys\nopen({str(told)!r}, 'w').write(sys.argv[2])\n"))
    res = solve(_model(), SolveOptions(time_limit_s=30.0))
    assert res.status == "no_solution" and told.read_text() == str(os.getpid())
    left = tmp_path / "left"
    left.mkdir()
    hp._folders.add(str(left))
    try:
        hp.end_children()
    finally:
        hp._folders.discard(str(left))
    assert not left.exists()


def test_a_stop_while_the_child_starts_interrupts_it_and_keeps_its_outcome(monkeypatch, tmp_path) -> None:
    """A Ctrl-C noted while the child started (`children_ignore_stops` acts on it as it leaves) was raised before
    the child was watched: the child was neither interrupted nor ended. It is the first stop: HiGHS is
    interrupted and its outcome read."""
    from contextlib import contextmanager

    import hybrid.signals as hs
    from milp.solve import SolveOptions, solve

    pid_file = _stuck(monkeypatch, tmp_path, LATE)

    @contextmanager
    def stop_on_leaving():  # noqa: ANN202
        yield
        while not pid_file.exists():      # the stand-in has set its handler (a real child: SIGINT stays blocked)
            time.sleep(0.02)
        raise KeyboardInterrupt

    monkeypatch.setattr(hs, "children_ignore_stops", stop_on_leaving)
    try:
        res = solve(_model(), SolveOptions(time_limit_s=300.0))
    except KeyboardInterrupt:
        pytest.fail("the first stop was raised, the child left running")
    assert res.status == "no_solution" and res.interrupted, res
    assert _gone(pid_file)


def _cbc_writing_first(monkeypatch, tmp_path: Path, write_s: float) -> list:
    """CBC's stand-in (a copy of `sleep` that dies on SIGINT) started `write_s` after the solve, as PuLP starts CBC
    once it has written the model's file; the times it started and ended."""
    import subprocess

    import pulp

    import milp.solve as ms
    from tests.milp.test_review_reports import _stand_in_cbc

    fake = _stand_in_cbc(tmp_path)
    monkeypatch.setattr(ms, "_cbc_path", lambda: fake)
    times: list = []

    def solve_like_pulp(self, lp, **kwargs):  # noqa: ANN001, ANN003, ANN202
        time.sleep(write_s)
        p = subprocess.Popen([self.path, "30"], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        times.append(time.monotonic())
        p.wait()
        times.append(time.monotonic())
        raise pulp.PulpSolverError("Pulp: Error while trying to execute " + self.path)

    monkeypatch.setattr(pulp.COIN_CMD, "actualSolve", solve_like_pulp)
    return times


def test_cbcs_limit_is_counted_from_cbcs_start(monkeypatch, tmp_path) -> None:
    """The watchdog's clock started before PuLP wrote the model's file: a write of 1.5 s had CBC interrupted
    0.5 s into its own limit of 1 s, and said to have run past it."""
    from milp.solve import STOP_GRACE_S, SolveOptions, solve

    times = _cbc_writing_first(monkeypatch, tmp_path, 1.5)
    res = solve(_model(), SolveOptions("cbc", time_limit_s=1.0))
    assert times[1] - times[0] >= 1.0 + STOP_GRACE_S - 0.5, times    # not before its limit and the grace
    assert res.solver_status.startswith("CBC ran past its time limit of 1.0 s and was interrupted"), res


def test_a_deadline_inside_cbcs_limit_is_kept_and_said(monkeypatch, tmp_path) -> None:
    """Where PuLP's writing pushed CBC's own limit past the caller's deadline, CBC is interrupted at the deadline
    (its least budget given), and the report says so instead of "ran past its time limit"."""
    from milp.solve import SolveOptions, solve

    _cbc_writing_first(monkeypatch, tmp_path, 1.5)
    res = solve(_model(), SolveOptions("cbc", time_limit_s=20.0, deadline=time.monotonic() + 2.0))
    assert res.status == "no_solution", res
    assert "past the time limit's deadline" in res.solver_status and "into its own limit of" in res.solver_status, \
        res.solver_status


def test_the_starts_replan_gets_what_its_layout_left_of_the_share(monkeypatch) -> None:
    """The start's layout and, where it does not lay out, its re-plan each had the whole share (`prepare_start`
    could spend twice it): the re-plan gets what the layout left."""
    import dataclasses

    import hybrid.arena.layout as layout
    from milp.api import belady_start, prepare_start

    g = training_graph(30, seed=1)
    device = dataclasses.replace(g.device)
    given: list[float] = []
    real_laid_out, real_lay_out = layout.laid_out, layout.lay_out

    def slow_laid_out(graph, plan, time_limit_s=30.0, budget=layout.QUICK_BUDGET):  # noqa: ANN001, ANN202
        time.sleep(1.0)
        return real_laid_out(graph, plan, time_limit_s, budget)

    def recording(graph, plan, time_limit_s=None, **kwargs):  # noqa: ANN001, ANN003, ANN202
        given.append(time_limit_s)
        return real_lay_out(graph, plan, time_limit_s=time_limit_s, **kwargs)

    monkeypatch.setattr(layout, "laid_out", slow_laid_out)
    monkeypatch.setattr(layout, "lay_out", recording)
    out = prepare_start(g, device, belady_start(g, device), layout_s=3.0)
    assert given and all(s <= 2.0 for s in given), given      # 3 s less the layout's 1 s or more
    assert out.written.allocation.kind == "arena"


def test_a_cancelled_highs_says_nothing_of_ctrl_c(capfd) -> None:
    """The child stops HiGHS on the parent's interrupt (its time limit, or a user's Ctrl-C) and HiGHS keeps its
    incumbent; highspy's own handling printed "Ctrl-C pressed 1 times: Waiting for HiGHS to finish. (5 times to
    force termination)" also when nobody had pressed Ctrl-C (`hybrid milp` interrupting HiGHS at its limit)."""
    import numpy as np
    import highspy

    from milp.highs_process import _solve_cancelling

    rng = np.random.default_rng(0)
    n, m = 120, 20      # a multi-dimensional knapsack HiGHS does not close within seconds
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    w, v = rng.integers(10, 100, (m, n)), rng.integers(10, 100, n)
    for j in range(n):
        h.addVar(0, 1)
        h.changeColIntegrality(j, highspy.HighsVarType.kInteger)
        h.changeColCost(j, -float(v[j]))
    for i in range(m):
        h.addRow(-highspy.kHighsInf, float(w[i].sum() // 2), n, np.arange(n, dtype=np.int32), w[i].astype(float))
    h.HandleKeyboardInterrupt = True
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))   # HiGHS takes 9.4 s to solve it here
    timer.start()
    try:
        _solve_cancelling(h)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert h.getModelStatus() == highspy.HighsModelStatus.kInterrupt
    out = capfd.readouterr()
    assert "Ctrl-C" not in out.out + out.err, out


def test_a_stop_during_cbcs_solve_says_so_and_what_cbc_loses(monkeypatch) -> None:
    """A SIGTERM 6 s into CBC's search read "interrupted (SIGTERM) before the model was solved"; CBC, stopped,
    hands back nothing, and the line now says that its finds are lost (helper-128)."""
    import pulp

    from milp.api import belady_start, plan_milp
    from milp.solve import CbcInterrupted, SolveOptions, solve

    def interrupted(self, lp, **kwargs):  # noqa: ANN001, ANN003, ANN202
        raise KeyboardInterrupt

    monkeypatch.setattr(pulp.COIN_CMD, "actualSolve", interrupted)
    with pytest.raises(CbcInterrupted):
        solve(_model(), SolveOptions("cbc", time_limit_s=30.0))
    g = training_graph(6, seed=1)
    from dataclasses import replace

    from hybrid.graph.info import unswapped_peak

    dev = replace(g.device, memory_bytes=int(unswapped_peak(g) * 0.6), reserve_bytes=0)
    run = plan_milp(g, dev, "mosos", None, SolveOptions("cbc", time_limit_s=30.0), start_plan=belady_start(g, dev),
                    start_name="belady")
    assert run.written == "start" and run.plan is not None and validate(g, run.plan).valid
    assert re.search(r"interrupted \(Ctrl-C\) \d+\.\d s into CBC's solve; CBC, stopped, hands back no solution",
                     run.not_solved or ""), run.not_solved
