"""`hybrid place`: every scheduler in a table, a valid plan, re-costed graphs written beside it, clear errors, and
`hybrid execute` running the placement on the CPU stand-in bitwise like eager inference."""
from __future__ import annotations

import json

import pytest

from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.validator import validate
from tests.cli.helpers import hybrid, run
from tests.placement.random_graphs import random_inference_graph


def test_place_prints_every_scheduler_and_writes_a_valid_plan(tmp_path):
    g = random_inference_graph(7, stages=4)
    gp = tmp_path / "g.json"
    g.save(gp)
    out = tmp_path / "p.json"
    r = run("place", "--graph", gp, "--scheduler", "all", "--parts", "fine", "--time-limit", "20s", "--out", out)
    assert r.exit_code == 0, r.output
    for name in ("all-cpu", "all-gpu", "greedy", "heft", "exact"):
        assert name in r.output
    plan = Plan.load(out)
    assert validate(Graph.load(gp), plan).valid
    assert plan.planner["name"] == "place-exact"
    r = run("place", "--graph", gp, "--objective", "throughput", "--json")
    doc = json.loads(r.output)
    assert doc["placements"][0]["scheduler"] == "exact" and doc["placements"][0]["period_s"] > 0


def test_recosting_writes_the_graph_the_plan_belongs_to(tmp_path):
    pytest.importorskip("torch")
    gp = tmp_path / "sq.json"
    r = hybrid("capture", "--model", "squeezenet", "--optimizer", "none", "--device", "p2200", "--batch", "1",
               "--set", "image_size=32", "--out", gp, timeout=120)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "sq.plan.json"
    # 2 s of CP-SAT: a feasible placement with parts on both devices (GPU, then C/G at the end); its optimality
    # proof (36 parts with branches, where the host takes the first three) took 7 s and matters not here
    r = run("place", "--graph", gp, "--cpu", "xeon-6248r", "--device", "p2200", "--time-limit", "2s", "--out", out)
    assert r.exit_code == 0, r.output
    regraph = tmp_path / "sq.plan.graph.json"
    assert validate(Graph.load(regraph), Plan.load(out)).valid
    assert not validate(Graph.load(gp), Plan.load(out)).valid      # another graph file: rule 0 says so
    r = hybrid("execute", "--graph", regraph, "--plan", out, "--device", "cpu", "--iters", "2", "--check",
               timeout=120)
    assert r.returncode == 0, r.stderr
    assert "equal eager inference bitwise" in r.stdout


def test_errors_name_the_flag(tmp_path):
    g = random_inference_graph(1, stages=2)
    gp = tmp_path / "g.json"
    g.save(gp)
    r = hybrid("place", "--graph", gp, "--cpu", "pentium")
    assert r.returncode == 2 and "--cpu 'pentium'" in r.stderr and "xeon-6248r" in r.stderr
    d = g.to_json()
    for op in d["ops"]:
        op.pop("cpu_time_s")
    (tmp_path / "nocpu.json").write_text(json.dumps(d))
    r = hybrid("place", "--graph", tmp_path / "nocpu.json", "--scheduler", "all-cpu")
    assert r.returncode == 2 and "has no cpu_time_s" in r.stderr


def test_a_stop_while_the_placement_is_built_and_checked_still_writes_it(tmp_path, monkeypatch):
    """The search done, the plan's layout and checks take seconds on a large graph (NASNet: 3-8 s); a Ctrl-C
    then raised KeyboardInterrupt there and the placement found was lost (exit 130, nothing written)."""
    import os
    import signal

    import hybrid.placement.timing as timing

    real = timing.to_plan

    def interrupted_to_plan(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        os.kill(os.getpid(), signal.SIGINT)    # handled at the next bytecode, inside the build
        return real(*args, **kwargs)

    monkeypatch.setattr(timing, "to_plan", interrupted_to_plan)
    gp, out = tmp_path / "g.json", tmp_path / "p.json"
    random_inference_graph(7, stages=4).save(gp)
    r = run("place", "--graph", gp, "--parts", "fine", "--time-limit", "20s", "--out", out)
    assert r.exit_code == 0, r.output
    assert f"interrupted (Ctrl-C): the best placement so far is exact's, written to {out}" in r.output
    assert validate(Graph.load(gp), Plan.load(out)).valid


def test_a_run_past_its_time_limit_says_where_the_time_went(tmp_path, monkeypatch):
    """The search stops 1 s before --time-limit for the plan's layout, checks and write; on a large graph those
    take longer (NASNet-25: 2.7 s), and the command ran past its limit without a word."""
    import time

    import hybrid.placement.timing as timing

    real = timing.to_plan

    def slow_to_plan(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        time.sleep(3.0)                 # as a large graph's layout takes
        return real(*args, **kwargs)

    monkeypatch.setattr(timing, "to_plan", slow_to_plan)
    gp, out = tmp_path / "g.json", tmp_path / "p.json"
    random_inference_graph(7, stages=4).save(gp)
    r = run("place", "--graph", gp, "--time-limit", "2s", "--out", out)
    assert r.exit_code == 0, r.output
    note = next(ln for ln in r.output.splitlines() if ln.startswith("note: took"))
    assert "past the --time-limit of 2 s" in note and "laying out, checking and writing the plan of" in note


def test_execute_refuses_what_a_placement_run_cannot_write(tmp_path):
    """--trace and --profile-out need per-node records that a placement's run has not: exit 0 with neither file
    written was all they did."""
    pytest.importorskip("torch")
    from tests.cli.helpers import error_line

    gp, out = tmp_path / "g.json", tmp_path / "p.json"
    random_inference_graph(7, stages=4).save(gp)
    assert run("place", "--graph", gp, "--time-limit", "20s", "--out", out).exit_code == 0
    line = error_line("execute", "--graph", gp, "--plan", out, "--device", "cpu", "--trace", tmp_path / "t.json",
                      "--profile-out", tmp_path / "prof.json")
    assert line.startswith("error: --trace, --profile-out: not for a placement plan") and "drop them" in line
    assert not (tmp_path / "t.json").exists() and not (tmp_path / "prof.json").exists()


def test_a_graph_without_host_times_says_so_in_its_costs_line(tmp_path):
    """Every op without cpu_time_s: every part runs on the GPU; the line named a CPU preset 'as captured' (the
    graph's recorded model) as if the host were costed (helper-128)."""
    g = random_inference_graph(7, stages=4)
    gp = tmp_path / "g.json"
    doc = g.to_json()
    for op in doc["ops"]:
        op.pop("cpu_time_s", None)
        op.pop("cpu_impl_time_s", None)
    gp.write_text(json.dumps(doc))
    r = run("place", "--graph", gp)
    assert r.exit_code == 0, r.output
    assert "CPU: none (no op has cpu_time_s, so every part runs on the GPU; --cpu PRESET costs the host)" in r.output
    r = run("place", "--graph", gp, "--json")
    assert json.loads(r.output)["costs"]["cpu"]["source"] == "none"


def test_the_parts_line_lists_each_parts_own_positions():
    """A branch whose positions other branches interleave in program order read as one range (googlenet's
    `[11-29|12-14|15-20|21-26]>30`, its first branch being 11 and 27-29): each part's listed positions are its own."""
    import re

    pytest.importorskip("torch")
    from hybrid.capture.api import capture_model
    from hybrid.placement.partition import part_graph

    g = capture_model("googlenet", 1, optimizer="none", overrides={"image_size": 64, "num_classes": 10})
    pg = part_graph(g, key_only=True, branches=True)
    assert "[11,27-29|12-14|15-20|21-26]>30" in pg.describe()
    listed = []
    for token in re.split(r"[ \[|\]>]+", pg.describe()):
        if token:
            listed.append(sorted(x for run in token.split(",") for a, _, b in [run.partition("-")]
                                 for x in range(int(a), int(b or a) + 1)))
    assert listed == [sorted(int(o) for o in ops) for ops in pg.ops]
