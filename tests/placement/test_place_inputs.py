"""`hybrid place` on inputs it must refuse or report: training graphs, profiles of another model, the preset's
reserve under --device, --graph-out without re-costing, and the exit status of a plan that fails validation."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from hybrid.capture.profile import Profile, op_signature
from hybrid.graph import Graph
from hybrid.graph.synthetic import training_graph
from hybrid.plan import Plan
from hybrid.validator import validate
from tests.cli.helpers import RESNET, run
from tests.placement.random_graphs import random_inference_graph


def _captured_like(tmp_path: Path, seed: int = 3) -> tuple[Graph, Path]:
    """A random inference graph whose ops carry what a capture records: an aten call (profiles match ops by
    it) and FLOPs and bytes (so --device/--cpu can re-cost it)."""
    d = random_inference_graph(seed, stages=4).to_json()
    for k, op in enumerate(d["ops"]):
        op["aten"] = {"target": f"aten.op{k}.default", "args": [{"t": op["inputs"][0]}], "kwargs": {}}
        op["cost"] = {"flops": 1e8 * (k + 1), "io_bytes": 1e6, "dtype": "float32", "class": "matmul"}
    gp = tmp_path / "g.json"
    gp.write_text(json.dumps(d))
    return Graph.load(gp), gp


def test_a_training_graph_is_refused_up_front(tmp_path):
    out = tmp_path / "x.json"
    r = run("place", "--graph", RESNET, "--cpu", "xeon-6248r", "--scheduler", "all")   # capture.training
    assert r.exit_code == 2, r.output
    assert "all-cpu" not in r.output and str(RESNET) in r.output and "--optimizer none" in r.output
    r = run("place", "--graph", RESNET, "--cpu", "xeon-6248r", "--scheduler", "all-cpu", "--out", out)
    assert r.exit_code == 2 and "training graph" in r.output and "hybrid validate" not in r.output
    assert not out.exists()
    gp = tmp_path / "t.json"   # no capture block: its update ops say so
    training_graph(4, seed=1).save(gp)
    r = run("place", "--graph", gp)
    assert r.exit_code == 2 and "updates" in r.output and "--optimizer none" in r.output, r.output


def test_profile_coverage_is_reported_and_none_refused(tmp_path):
    g, gp = _captured_like(tmp_path)
    entries = {op_signature(g, op): {"time_s": 7e-3, "samples": 1, "target": "x"} for op in g.ops[:2]}
    mine = tmp_path / "mine.prof.json"
    Profile("cpu", "here", entries).save(mine)
    r = run("place", "--graph", gp, "--profile", mine, "--scheduler", "greedy")
    assert r.exit_code == 0, r.output
    assert f"profile {mine} covers 2 of {len(g.ops)} ops" in r.output
    other = tmp_path / "other.prof.json"
    Profile("cpu", "here", {"another model's op": {"time_s": 1e-3}}).save(other)
    out = tmp_path / "p.json"
    r = run("place", "--graph", gp, "--profile", other, "--out", out)
    assert r.exit_code == 2 and "covers none of the" in r.output and str(other) in r.output, r.output
    assert len(r.output.strip().splitlines()) == 1 and not out.exists()


def test_device_preset_keeps_its_reserve(tmp_path):
    from hybrid.device import PRESET_RESERVE

    _, gp = _captured_like(tmp_path)
    out = tmp_path / "p.json"
    r = run("place", "--graph", gp, "--device", "p2200", "--scheduler", "greedy", "--out", out)
    assert r.exit_code == 0, r.output
    regraph = Graph.load(tmp_path / "p.graph.json")
    plan = Plan.load(out)
    assert regraph.device.reserve_bytes == PRESET_RESERVE and plan.device.reserve_bytes == PRESET_RESERVE
    assert validate(regraph, plan).valid


def test_graph_out_without_recosting_writes_the_graph_the_plan_names(tmp_path):
    _, gp = _captured_like(tmp_path)
    out, gout = tmp_path / "q.place.json", tmp_path / "q.graph.json"
    r = run("place", "--graph", gp, "--scheduler", "greedy", "--out", out, "--graph-out", gout)
    assert r.exit_code == 0, r.output
    assert gout.read_bytes() == gp.read_bytes() and str(gout) in r.output
    assert validate(Graph.load(gout), Plan.load(out)).valid


def test_graph_out_may_not_name_the_input_recosted_or_not(tmp_path):
    _, gp = _captured_like(tmp_path)
    before = gp.read_bytes()
    for recost in ([], ["--cpu", "xeon-6248r"]):
        r = run("place", "--graph", gp, *recost, "--graph-out", gp)
        assert r.exit_code == 2 and "--graph-out" in r.output, r.output
    assert gp.read_bytes() == before


def test_an_invalid_placement_plan_exits_1_and_writes_nothing(tmp_path, monkeypatch):
    import hybrid.placement.timing as timing

    real = timing.to_plan

    def broken(*args, **kwargs):   # a plan that forgets its first compute event: rule violations
        plan = real(*args, **kwargs)
        first = next(k for k, ev in enumerate(plan.events) if ev.kind == "compute")
        return dataclasses.replace(plan, events=plan.events[:first] + plan.events[first + 1:])

    monkeypatch.setattr(timing, "to_plan", broken)
    g = random_inference_graph(5, stages=3)
    gp = tmp_path / "g.json"
    g.save(gp)
    out = tmp_path / "p.json"
    r = run("place", "--graph", gp, "--scheduler", "greedy", "--out", out)
    assert r.exit_code == 1, r.output
    assert "fails validation" in r.output and not out.exists()


@pytest.mark.parametrize("limit", ["0s", "0"])
def test_a_time_limit_of_nothing_is_a_usage_error(tmp_path, limit):
    """As `hybrid optimize` and `hybrid milp` say it, rather than CP-SAT's "no placement within 0 s"."""
    g = random_inference_graph(2, stages=3)
    gp = tmp_path / "g.json"
    g.save(gp)
    r = run("place", "--graph", gp, "--time-limit", limit)
    assert r.exit_code == 2 and "--time-limit must be positive" in r.output, r.output


def test_recost_keeps_an_ops_implementations_one_op() -> None:
    """A re-costed op's default impl takes its new time (the validator times a compute event by it) and the
    others scale with it: place --device and serve --device share this."""
    import dataclasses

    from hybrid.graph import Graph, Impl
    from hybrid.placement.costs import recost
    from tests.serve.test_serve_inputs import inference_graph

    g = inference_graph(device="v100-16gb")
    op = g.ops[0]
    ops = [dataclasses.replace(op, impls=(Impl("default", op.time_s, 0), Impl("winograd", op.time_s / 2, 1024))),
           *g.ops[1:]]
    g = Graph(g.name, g.tensors, ops, g.device, g.extra)
    new = recost(g, gpu="h100-80gb").ops[0]
    assert new.time_s != op.time_s
    assert new.impls[new.default_impl].time_s == new.time_s
    assert new.impls[1].time_s == pytest.approx(new.time_s / 2) and new.impls[1].workspace_bytes == 1024


def test_simulate_from_a_placement_plan_is_refused_rather_than_dropping_its_placement(tmp_path):
    """The swap planner puts every op on the device: re-planning a placement with it lost the host ops silently."""
    _, gp = _captured_like(tmp_path)
    out = tmp_path / "p.json"
    r = run("place", "--graph", gp, "--scheduler", "all-cpu", "--out", out)
    assert r.exit_code == 0, r.output
    assert any(e.on_cpu for e in Plan.load(out).events)
    r = run("simulate", "--graph", gp, "--from", out, "--out", tmp_path / "s.json")
    assert r.exit_code == 2 and "runs on the host" in r.output and "hybrid place" in r.output, r.output
    assert not (tmp_path / "s.json").exists()
