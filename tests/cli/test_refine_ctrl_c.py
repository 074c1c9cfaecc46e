"""Ctrl-C stops `hybrid refine` as SIGTERM does: CP-SAT does not catch SIGINT itself (hybrid.signals.cp_sat_solver),
which ended the window it was solving and let the next ones run to the time limit."""
from __future__ import annotations

import signal
from pathlib import Path

from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.validator import validate
from tests.cli.helpers import RESNET, cpu_seconds, run, signal_when


def test_every_cp_sat_solver_leaves_sigint_to_hybrid() -> None:
    from hybrid.signals import cp_sat_solver

    assert cp_sat_solver().parameters.catch_sigint_signal is False


def test_ctrl_c_stops_refine_and_writes_its_best_plan(tmp_path: Path) -> None:
    start, out = tmp_path / "s.json", tmp_path / "r.json"
    assert run("simulate", "--graph", RESNET, "--memory", "64MiB", "--out", start).exit_code == 0
    # a limit no run reaches: without the stop it would refine for 10 minutes (the guard fails first)
    status, _, err = signal_when(["refine", "--graph", str(RESNET), "--plan", str(start), "--time-limit", "600s",
                                 "--out", str(out)], lambda pid, _o: cpu_seconds(pid) > 6.0, signal.SIGINT, tmp_path)
    assert status == 0 and "interrupted (Ctrl-C): wrote the best plan so far" in err, err
    assert validate(Graph.load(RESNET), Plan.load(out)).valid
