"""Output folders made before any work; one error style (`error: ...`, exit 2); units required on --latency."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.units import parse_duration
from hybrid.validator import validate
from tests.cli.helpers import foreign_graph_file, hybrid, run


def test_missing_output_folders_are_created_before_the_search(tmp_path) -> None:
    path = foreign_graph_file(tmp_path)
    new = tmp_path / "not" / "yet"
    r = hybrid("optimize", "--graph", path, "--memory", "12MiB", "--time-limit", "2s", "--generations", 2,
               "--population", 4, "--refine", "none", "--no-arena", "--quiet", "--out", new / "a" / "plan.json",
               "--log", new / "b" / "log.csv", "--plot", new / "c" / "conv.png", "--checkpoint", new / "d" / "ga.ckpt")
    assert r.returncode == 0, r.stderr
    for f in ("a/plan.json", "b/log.csv", "c/conv.png", "d/ga.ckpt"):
        assert (new / f).is_file(), f
    assert validate(Graph.load(path), Plan.load(new / "a" / "plan.json")).valid


@pytest.mark.parametrize("command", [
    ["simulate", "--out", "{d}/s/plan.json"],
    ["baseline", "--kind", "naive", "--kind", "belady", "--out", "{d}/b/plans"],
    ["baseline", "--out", "{d}/b1/belady.json"],
])
def test_other_commands_create_their_output_folders(tmp_path, command) -> None:
    path = foreign_graph_file(tmp_path)
    args = [a.format(d=tmp_path / "x") for a in command]
    r = run(*args[:1], "--graph", path, "--memory", "12MiB", *args[1:])
    assert r.exit_code == 0, r.output
    assert list((tmp_path / "x").rglob("*.json"))


def test_refine_and_import_create_their_output_folders(tmp_path) -> None:
    path = foreign_graph_file(tmp_path)
    plan = tmp_path / "p.json"
    assert run("simulate", "--graph", path, "--memory", "12MiB", "--out", plan).exit_code == 0
    out = tmp_path / "r" / "s" / "refined.json"
    r = run("refine", "--graph", path, "--plan", plan, "--time-limit", "5s", "--max-windows", 1, "--quiet",
            "--out", out)
    assert r.exit_code == 0, r.output
    assert validate(Graph.load(path), Plan.load(out)).valid
    cm = tmp_path / "cm.json"
    cm.write_text(json.dumps({"directed": True, "nodes": [
        {"id": 0, "name": "conv", "backward": False, "cost_cpu": 10, "cost_ram": 100},
        {"id": 1, "name": "loss", "backward": False, "cost_cpu": 5, "cost_ram": 50},
        {"id": 2, "name": "grad", "backward": True, "cost_cpu": 20, "cost_ram": 100}],
        "links": [{"source": 0, "target": 1}, {"source": 1, "target": 2}, {"source": 0, "target": 2}]}))
    g = tmp_path / "i" / "j" / "g.json"
    r = run("import", "checkmate", cm, "--out", g)
    assert r.exit_code == 0, r.output
    assert len(Graph.load(g).ops) == 3
    # the source is not overwritten by its own import, and --memory takes a share as its help says (helper-95)
    r = run("import", "checkmate", cm, "--out", cm)
    assert r.exit_code == 2 and "is the input file it reads" in r.output and json.loads(cm.read_text())["nodes"]
    r = run("import", "checkmate", cm, "--memory", "50%", "--alignment", "1", "--out", g)
    assert r.exit_code == 0, r.output
    from hybrid.graph.info import unswapped_peak

    imported = Graph.load(g)
    assert imported.device.usable_bytes == round(0.5 * unswapped_peak(imported, 1))


@pytest.mark.parametrize("blocker", ["file", "dev-null"])
def test_an_output_path_that_cannot_be_made_fails_first_in_one_line(tmp_path, blocker) -> None:
    path = foreign_graph_file(tmp_path)
    (tmp_path / "file").write_text("")
    bad = (tmp_path / "file" if blocker == "file" else Path("/dev/null")) / "x" / "plan.json"
    r = hybrid("optimize", "--graph", path, "--time-limit", "1h", "--out", bad)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("error: --out ") and "is a file, not a folder" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_latency_without_a_unit_is_refused() -> None:
    r = hybrid("info", "--graph", "examples/resnet18-b32.json", "--latency", "10")
    assert r.returncode == 2
    assert r.stderr.strip() == "error: --latency 10 needs a unit, e.g. 10us or 10ms"
    r = hybrid("info", "--graph", "examples/resnet18-b32.json", "--latency", "10m")
    assert r.returncode == 2 and "m is minutes" in r.stderr and "10ms" in r.stderr


def test_latency_with_a_unit_and_time_limits_without_one() -> None:
    assert parse_duration("10us", "--latency", short=True) == pytest.approx(1e-5)
    assert parse_duration("800ns", "--latency", short=True) == pytest.approx(8e-7)
    assert parse_duration("0", "--latency", short=True) == 0.0
    assert parse_duration(2e-6, "--latency", short=True) == 2e-6  # from Python: seconds
    assert parse_duration("90", "--time-limit") == 90.0            # documented: a bare number is seconds
    r = run("info", "--graph", "examples/resnet18-b32.json", "--latency", "5us", "--json")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("args, message", [
    (["optimize", "--graph", "examples/resnet18-b32.json"],
     "error: missing option '--out' (see `hybrid optimize --help`)"),
    (["optimize", "--graph", "g.json", "--out", "p.json", "--refine-mode", "sideways"],
     "error: invalid value for '--refine-mode': 'sideways' is not one of 'auto', 'beside', 'after'"),
    (["optimise"], "error: no such command 'optimise'"),
])
def test_usage_errors_have_the_one_error_style(args, message) -> None:
    r = hybrid(*args)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(message) and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_timeline_errors_have_the_one_error_style(tmp_path) -> None:
    path = foreign_graph_file(tmp_path)
    plan = tmp_path / "p.json"
    assert run("simulate", "--graph", path, "--memory", "12MiB", "--out", plan).exit_code == 0
    d = json.loads(plan.read_text())
    d["makespan_s"] *= 2
    plan.write_text(json.dumps(d))
    r = hybrid("timeline", "--graph", path, "--plan", plan, "--out", tmp_path / "t.png")
    assert r.returncode == 1 and r.stderr.startswith("error: ") and "not a valid plan" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_validate_prints_memory_in_binary_units(tmp_path) -> None:
    path = foreign_graph_file(tmp_path)
    plan = tmp_path / "p.json"
    assert run("simulate", "--graph", path, "--memory", "12MiB", "--out", plan).exit_code == 0
    r = run("validate", "--graph", path, "--plan", plan)
    assert r.exit_code == 0 and " MiB (" in r.output and "% of 12 MiB)" in r.output and "bytes" not in r.output


def test_a_plan_for_another_graph_exits_1_in_every_command_given_a_plan(tmp_path) -> None:
    """One kind of error, one exit status: the plan given cannot be acted on (as `hybrid validate` exits 1)."""
    path = foreign_graph_file(tmp_path)
    (tmp_path / "other").mkdir()
    other = foreign_graph_file(tmp_path / "other", n_layers=3)
    plan = tmp_path / "p.json"
    assert run("simulate", "--graph", path, "--memory", "12MiB", "--out", plan).exit_code == 0
    for args in (("validate",), ("timeline", "--out", tmp_path / "t.json"), ("refine", "--out", tmp_path / "r.json"),
                 ("arena", "--out", tmp_path / "a.json"), ("execute", "--device", "cpu", "--iters", "1")):
        r = run(*args, "--graph", other, "--plan", plan)
        assert r.exit_code == 1, (args, r.output)
        assert len(r.output.strip().splitlines()) == 1, (args, r.output)


@pytest.mark.parametrize("args", [("timeline",), ("refine",), ("arena",), ("execute", "--device", "cpu", "--iters", "1")])
def test_an_output_on_the_plan_file_read_is_refused_and_the_plan_kept(tmp_path, args) -> None:
    path = foreign_graph_file(tmp_path)
    plan = tmp_path / "p.json"
    assert run("simulate", "--graph", path, "--memory", "12MiB", "--out", plan).exit_code == 0
    before = plan.read_bytes()
    r = run(*args, "--graph", path, "--plan", plan, "--out", plan)
    assert r.exit_code == 2 and r.output.startswith("error: --out") and "is the --plan file it reads" in r.output, r.output
    assert plan.read_bytes() == before


def test_baseline_writes_several_kinds_into_a_folder_again(tmp_path) -> None:
    path = foreign_graph_file(tmp_path)
    folder = tmp_path / "base"
    for _ in range(2):   # the folder exists the second time: its files are replaced
        r = run("baseline", "--graph", path, "--memory", "24MiB", "--kind", "naive", "--kind", "belady",
                "--out", folder)
        assert r.exit_code == 0, r.output
    assert sorted(p.name for p in folder.iterdir()) == ["belady.json", "naive.json"]


def test_a_negative_seed_is_a_usage_error(tmp_path) -> None:
    path = foreign_graph_file(tmp_path)
    r = run("optimize", "--graph", path, "--memory", "24MiB", "--seed=-1", "--out", tmp_path / "p.json")
    assert r.exit_code == 2 and "--seed" in r.output and "Traceback" not in r.output, r.output


def test_arena_refuses_to_write_over_its_graph_or_csv(tmp_path) -> None:
    path = foreign_graph_file(tmp_path)
    before = path.read_bytes()
    r = run("arena", "--graph", path, "--out", path)
    assert r.exit_code == 2 and "is the --graph file it reads" in r.output, r.output
    csv = tmp_path / "b.csv"
    csv.write_text("id,lower,upper,size\n0,0,2,8\n1,1,3,8\n")
    r = run("arena", "--csv", csv, "--out", csv)
    assert r.exit_code == 2 and "is the --csv file it reads" in r.output, r.output
    assert path.read_bytes() == before and csv.read_text().startswith("id,lower,upper,size\n0,0,2,8")
