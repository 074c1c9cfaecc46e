"""`--time-limit` bounds a whole command (issue 29): the command's clock starts with the process, and the
solvers stop at the command's deadline. Behaviour only; the wall times are measured by hand (see the report)."""
from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hybrid.cli import clock
from hybrid.errors import HybridError
from hybrid.graph.synthetic import training_graph
from milp.model import build_model
from milp.solve import MIN_SOLVE_S, SolveOptions, solve
from milp.stages import build_problem

ROOT = Path(__file__).resolve().parents[2]


def test_the_clock_starts_with_the_process_and_restarts_per_command() -> None:
    now = time.monotonic()
    assert clock.started() <= now  # the process started before this test ran (imports included)
    clock.restart()
    assert clock.started() >= now
    assert clock.deadline(30.0) == pytest.approx(clock.started() + 30.0)
    assert 29.0 < clock.left(30.0) <= 30.0


@pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("sh") is None, reason="/proc, a POSIX shell")
def test_a_shell_that_execs_the_command_after_other_work_does_not_count_that_work() -> None:
    """`sh -c 'pip install ... && hybrid optimize ...'` runs hybrid in the shell's own process (exec, no fork): its
    /proc start is the shell's, before the install; that wait (here a 4 s sleep) is not the command's."""
    code = "import time; from hybrid.cli import clock; print(time.monotonic() - clock.started())"
    out = subprocess.run(["sh", "-c", f"sleep 4 && exec {shlex.quote(sys.executable)} -c {shlex.quote(code)}"],
                         capture_output=True, text=True, timeout=120, check=True, cwd=ROOT)
    counted = float(out.stdout.strip())
    assert 0.0 <= counted < 4.0, counted


def test_a_model_build_past_the_deadline_stops_with_one_line_naming_stages() -> None:
    g = training_graph(6, seed=1)
    with pytest.raises(HybridError, match="--stages") as e:
        build_model(build_problem(g, g.device), deadline=time.monotonic() - 1.0)
    assert "\n" not in str(e.value)
    build_model(build_problem(g, g.device), deadline=time.monotonic() + 600.0)  # in time: built


def test_the_solver_gets_what_is_left_before_the_deadline(monkeypatch) -> None:
    import milp.solve as ms

    seen: list[float | None] = []

    def fake(model, opts, start=None, sparse=False):  # noqa: ANN001, ANN202 - records the budget HiGHS would get
        seen.append(opts.time_limit_s)
        return ms.SolveResult("no_solution", "not run", None, None, None, 0.0, False, None)

    monkeypatch.setattr(ms, "_solve_highs", fake)
    g = training_graph(6, seed=1)
    model = build_model(build_problem(g, g.device))
    solve(model, SolveOptions(time_limit_s=600.0, deadline=time.monotonic() - 5.0))   # past: the least budget
    solve(model, SolveOptions(time_limit_s=600.0, deadline=time.monotonic() + 20.0))  # 20 s left of 600 asked
    solve(model, SolveOptions(time_limit_s=3.0, deadline=time.monotonic() + 20.0))    # the limit, if sooner
    assert seen[0] == MIN_SOLVE_S and 15.0 < seen[1] <= 20.0 and seen[2] == 3.0
