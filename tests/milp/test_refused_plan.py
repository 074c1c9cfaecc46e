"""A decoded plan the validator refuses (the model missed something it counts) is an internal inconsistency,
not the user's error: with a start plan the start is written, and the run says why the MILP's was refused."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import milp.api as api
from hybrid.device import resolve_device
from hybrid.graph import Graph
from hybrid.graph.synthetic import training_graph
from hybrid.plan import Plan
from hybrid.validator import validate
from milp.api import belady_start, plan_milp, prepare_start
from milp.decode import DecodeError
from milp.solve import SolveOptions
from tests.cli.helpers import run as run_cli

WHY = "events[8] compute 'bernoulli_': device memory overflows (as seen on the MLP at 4 MiB)"


def _refusing_decode(*a: object, **k: object) -> None:
    raise DecodeError("decoded schedule", 5, WHY)


def _setting():  # noqa: ANN202
    g = training_graph(4, seed=1, impls_prob=0.6, workspace_prob=0.3)
    return g, resolve_device(g.device, None, "14MiB", None, None, None, None, None)


# The first solve takes under a second; 6 s leaves too little for the re-solves with less memory that the start
# (not laid out) would otherwise get: they come after the refusal and play no part in it (with 15 s they were
# proved infeasible, 10 s of the test's time, and the start was written all the same)
LIMIT_S = 6.0


def test_a_refused_plan_gives_way_to_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    g, dev = _setting()
    start = prepare_start(g, dev, belady_start(g, dev))
    monkeypatch.setattr(api, "decode", _refusing_decode)
    so = SolveOptions("highs", LIMIT_S, 0.01, 1, node_limit=200)
    run = plan_milp(g, dev, "mosos", None, so, start_plan=start, start_name="belady")
    assert run.written == "start" and run.plan is start.written and validate(g, run.plan).valid
    assert run.refused is not None and "rule 5" in run.refused and WHY in run.refused and "\n" not in run.refused
    assert run.milp_makespan_s is None and run.row()["milp_refused"] == run.refused
    with pytest.raises(DecodeError, match="rule 5"):   # no start to fall back to: a one-line error
        plan_milp(g, dev, "mosos", None, so)


def test_the_cli_writes_the_start_and_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    g, _ = _setting()
    gp, out = tmp_path / "g.json", tmp_path / "p.json"
    g.save(gp)
    monkeypatch.setattr(api, "decode", _refusing_decode)
    res = run_cli("milp", "--graph", gp, "--memory", "14MiB", "--time-limit", f"{LIMIT_S:g}s", "--out", out, "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.output[res.output.index("{"):])
    assert d["written"] == "start" and "rule 5" in d["milp_refused"]
    assert validate(Graph.load(gp), Plan.load(out)).valid
    res = run_cli("milp", "--graph", gp, "--memory", "14MiB", "--time-limit", f"{LIMIT_S:g}s")
    assert res.exit_code == 0, res.output
    assert any(line.startswith("refused ") and "rule 5" in line for line in res.output.splitlines())


def test_a_plan_whose_arena_layout_fails_gives_way_to_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    import hybrid.arena.layout as layout
    from hybrid.errors import HybridError

    g, dev = _setting()
    start = prepare_start(g, dev, belady_start(g, dev))

    def failing(*a: object, **k: object) -> None:
        raise HybridError("the arena layout of the plan failed validation (a test); please report this")
    monkeypatch.setattr(layout, "laid_out", failing)
    so = SolveOptions("highs", LIMIT_S, 0.01, 1, node_limit=200)
    run = plan_milp(g, dev, "mosos", None, so, start_plan=start, start_name="belady")
    assert run.milp_makespan_s is not None and run.milp_makespan_s < start.auto.makespan_s   # the MILP's was faster
    assert run.written == "start" and run.plan is start.written
    assert run.refused is not None and "arena layout failed" in run.refused
