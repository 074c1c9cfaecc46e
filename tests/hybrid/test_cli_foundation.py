"""`hybrid info | baseline | simulate | import` end to end, errors as one line."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from hybrid.cli.main import cli
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.graph.synthetic import training_graph
from hybrid.validator import validate


@pytest.fixture()
def graph_file(tmp_path):
    g = training_graph(40, seed=1, share_params=10)
    path = tmp_path / "g.json"
    g.save(path)
    return path


def run(*args):
    return CliRunner().invoke(cli, list(map(str, args)), catch_exceptions=False)


def test_info_shows_peak_and_lower_bound(graph_file):
    r = run("info", "--graph", graph_file, "--memory", "64MiB")
    assert r.exit_code == 0
    assert "peak, unswapped program order" in r.output and "lower bound, persistent tensors only" in r.output
    assert "lower bound, plans in any order, with recompute" in r.output
    r = run("info", "--graph", graph_file, "--json")
    d = json.loads(r.output)
    assert d["ops"] == 40 * 2 + 1 + 10
    assert d["ideal_s"] <= d["persistent_bound_s"] <= d["graph_bound_s"] <= d["graph_swap_bound_s"] * (1 + 1e-12)


def test_baselines_write_valid_plans(graph_file, tmp_path):
    out = tmp_path / "plans"
    r = run("baseline", "--graph", graph_file, "--memory", "40MiB", "--kind", "naive", "--kind", "odswap",
            "--kind", "vdnn", "--kind", "belady", "--kind", "ideal", "--out", out)
    assert r.exit_code == 0, r.output
    g = Graph.load(graph_file)
    spans = {}
    for kind in ("naive", "odswap", "vdnn", "belady", "ideal"):
        plan = Plan.load(out / f"{kind}.json")
        assert validate(g, plan).valid
        spans[kind] = plan.makespan_s
    assert spans["ideal"] <= min(spans.values()) and spans["naive"] == max(spans.values())
    assert run("validate", "--graph", graph_file, "--plan", out / "belady.json").exit_code == 0


def test_simulate_and_simulate_from_a_plan(graph_file, tmp_path):
    p1 = tmp_path / "p1.json"
    r = run("simulate", "--graph", graph_file, "--memory", "40MiB", "--allocation", "size-classes", "--out", p1)
    assert r.exit_code == 0, r.output
    p2 = tmp_path / "p2.json"
    r = run("simulate", "--graph", graph_file, "--memory", "40MiB", "--from", p1, "--out", p2)
    assert r.exit_code == 0, r.output
    a, b = Plan.load(p1), Plan.load(p2)
    assert a.schedule == b.schedule and a.allocation == b.allocation and a.makespan_s == b.makespan_s


def test_simulate_names_pools_and_policies_as_optimize_does(graph_file, tmp_path):
    """`--pool classes` / `--policy lru` (optimize's words) plan what `--allocation size-classes` / `--victim lru`,
    the older spellings, plan."""
    plans = []
    for i, flags in enumerate((["--pool", "classes", "--policy", "lru"], ["--allocation", "size-classes", "--victim", "lru"])):
        out = tmp_path / f"p{i}.json"
        r = run("simulate", "--graph", graph_file, "--memory", "40MiB", *flags, "--out", out)
        assert r.exit_code == 0, r.output
        plans.append(Plan.load(out))
    assert plans[0].events == plans[1].events and plans[0].allocation == plans[1].allocation
    assert plans[0].planner["planner_options"]["victim"] == "lru"


def test_errors_are_one_line_without_traceback(graph_file, tmp_path):
    r = CliRunner().invoke(cli, ["baseline", "--graph", str(graph_file), "--memory", "1KiB"])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "Traceback" not in r.output
    assert "give --memory of at least" in r.output
    r = CliRunner().invoke(cli, ["info", "--graph", str(graph_file), "--memory", "lots"])
    assert r.exit_code == 2 and "cannot read --memory 'lots'" in r.output
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "hybrid-graph/1", "name": "x", "tensors": [], "ops": [{"id": "a", "inputs": ["nope"], "outputs": [], "time_s": 1}]}')
    r = CliRunner().invoke(cli, ["info", "--graph", str(bad)])
    assert r.exit_code == 2 and "unknown tensor 'nope'" in r.output


def test_import_checkmate(tmp_path):
    src = tmp_path / "cm.json"
    src.write_text(json.dumps({"graph": {"name": "t"}, "nodes": [{"id": 0, "name": "a", "backward": False,
                                                                  "cost_cpu": 5, "cost_ram": 10}], "links": []}))
    out = tmp_path / "g.json"
    r = run("import", "checkmate", src, "--time-unit", "ms", "--out", out)
    assert r.exit_code == 0, r.output
    assert Graph.load(out).op("a").time_s == pytest.approx(0.005)


def test_info_bounds_never_below_a_wider_sets(graph_file):
    """Each figure bounds a set of plans; one inside another (program order within any order, swap only within
    with recompute) is never shown below it, so no two rows read as a contradiction."""
    r = run("info", "--graph", graph_file, "--memory", "24MiB", "--h2d", "0.2GB/s", "--d2h", "0.2GB/s")
    rows = [line for line in r.output.splitlines() if line.startswith("lower bound")]
    assert [line.split(",", 1)[1].rsplit("  ", 1)[0].strip() for line in rows] == [
        "persistent tensors only", "plans in any order, with recompute", "plans in this (program) order, with recompute",
        "plans in any order, swap only", "plans in this (program) order, swap only"]
    d = json.loads(run("info", "--graph", graph_file, "--memory", "24MiB", "--h2d", "0.2GB/s", "--d2h", "0.2GB/s",
                       "--json").output)
    for wide, narrow in [("persistent_bound_s", "graph_bound_s"), ("graph_bound_s", "program_order_recompute_bound_s"),
                         ("graph_bound_s", "graph_swap_bound_s"),
                         ("program_order_recompute_bound_s", "program_order_swap_bound_s"),
                         ("graph_swap_bound_s", "program_order_swap_bound_s")]:
        assert d[wide] <= d[narrow], (wide, narrow)
    # a plan row's recompute_bound_s / swap_bound_s bound plans in any order (hybrid.pipeline.rows): info's
    # program-order figures are named apart, never under those names (it read them as the program order's)
    assert "recompute_bound_s" not in d and "swap_bound_s" not in d
    assert d["graph_swap_bound_s"] > d["persistent_bound_s"]  # activations count at this memory


def test_outputs_that_would_overwrite_each_other_or_the_graph_are_refused_before_any_work(graph_file, tmp_path):
    same = tmp_path / "same.json"
    r = CliRunner().invoke(cli, ["optimize", "--graph", str(graph_file), "--memory", "40MiB", "--generations", "1",
                                 "--out", str(same), "--log", str(same)])
    assert r.exit_code == 2 and "is also the --out file" in r.output and not same.exists()
    before = graph_file.read_bytes()
    r = CliRunner().invoke(cli, ["simulate", "--graph", str(graph_file), "--memory", "40MiB", "--out", str(graph_file)])
    assert r.exit_code == 2 and "is the --graph file" in r.output and graph_file.read_bytes() == before


def test_a_figure_path_whose_suffix_names_no_figure_format_is_refused_before_any_work(graph_file, tmp_path):
    p = tmp_path / "p.json"
    assert run("simulate", "--graph", graph_file, "--memory", "40MiB", "--out", p).exit_code == 0
    r = CliRunner().invoke(cli, ["timeline", "--graph", str(graph_file), "--plan", str(p), "--out",
                                 str(tmp_path / "t.txt")])
    assert r.exit_code == 2 and "--out" in r.output and ".txt is not one" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(cli, ["optimize", "--graph", str(graph_file), "--memory", "40MiB", "--generations", "1",
                                 "--out", str(tmp_path / "o.json"), "--plot", str(tmp_path / "conv.txt")])
    assert r.exit_code == 2 and "--plot" in r.output and not (tmp_path / "o.json").exists()
    assert run("timeline", "--graph", graph_file, "--plan", p, "--out", tmp_path / "t.svg").exit_code == 0


def test_optimize_refuses_flags_it_would_ignore_and_its_help_shows_no_empty_bounds(graph_file, tmp_path):
    out = str(tmp_path / "o.json")
    r = CliRunner().invoke(cli, ["optimize", "--graph", str(graph_file), "--generations", "1", "--children", "0",
                                 "--out", out])
    assert r.exit_code == 2 and "--children" in r.output
    for flags in (["--no-arena"], ["--arena", "0"]):
        r = CliRunner().invoke(cli, ["optimize", "--graph", str(graph_file), "--generations", "1", "--addresses",
                                     *flags, "--out", out])
        assert r.exit_code == 2 and "--addresses" in r.output
    for command in ("optimize", "capture", "execute", "compare"):
        assert "None]" not in CliRunner().invoke(cli, [command, "--help"]).output
