"""Files at the edges of the contract (a contract review's cases): each is refused in one line naming the field,
never with a traceback, or read as docs/formats.md says."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid.errors import HybridError
from hybrid.graph import Graph, Tensor
from tests.cli.helpers import ROOT, run

TOY_DEVICE = {"name": "toy", "memory_bytes": 100_000, "h2d_bytes_per_s": 1e6, "d2h_bytes_per_s": 1e6,
              "alignment_bytes": 1}


def toy_graph(tmp_path: Path, ops: bool = True) -> Path:
    g = {"format": "hybrid-graph/1", "name": "toy", "device": TOY_DEVICE,
         "tensors": [{"id": "w", "bytes": 100, "kind": "param", "persistent": True}]
         + ([{"id": "a", "bytes": 200, "kind": "activation"}] if ops else []),
         "ops": [{"id": "f", "inputs": ["w"], "outputs": ["a"], "time_s": 0.001}] if ops else []}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(g))
    return path


def toy_plan(tmp_path: Path, **changes: object) -> Path:
    p = {"format": "hybrid-plan/1", "graph": "toy", "device": TOY_DEVICE, "schedule": ["f"],
         "allocation": {"kind": "unconstrained"}, "resident_at_start": [],
         "events": [{"kind": "swap_in", "tensor": "w", "start_s": 0.0, "end_s": 1e-4},
                    {"kind": "compute", "op": "f", "start_s": 1e-4, "end_s": 1.1e-3},
                    {"kind": "free", "tensor": "w", "at_s": 1.1e-3},
                    {"kind": "free", "tensor": "a", "at_s": 1.1e-3}],
         "makespan_s": 1.1e-3, "metrics": {"ideal_s": 0.001}}
    p.update(changes)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(p))
    return path


def test_the_toy_plan_is_valid(tmp_path: Path) -> None:
    r = run("validate", "--graph", toy_graph(tmp_path), "--plan", toy_plan(tmp_path))
    assert r.exit_code == 0 and r.output.startswith("valid"), r.output


@pytest.mark.parametrize("kind", [["arena"], {"a": 1}, 3, None])
def test_an_allocation_kind_that_is_not_a_name_is_a_format_error(tmp_path: Path, kind: object) -> None:
    r = run("validate", "--graph", toy_graph(tmp_path), "--plan",
            toy_plan(tmp_path, allocation={"kind": kind, "arena_bytes": 10, "offsets": {}}))
    assert r.exit_code == 2, r.output
    assert "allocation: field 'kind'" in r.output and '"arena"' in r.output and "Traceback" not in r.output


def test_a_free_at_an_instant_out_of_range_is_named_by_its_at_s(tmp_path: Path) -> None:
    path = toy_plan(tmp_path)
    p = json.loads(path.read_text())
    p["events"][3]["at_s"] = 1e10
    path.write_text(json.dumps(p))
    r = run("validate", "--graph", toy_graph(tmp_path), "--plan", path)
    assert r.exit_code == 1 and "events[3] free: at_s must be" in r.output, r.output


@pytest.mark.parametrize("graph", [None, ""])
def test_a_plan_that_names_no_graph_says_so(tmp_path: Path, graph: str | None) -> None:
    path = toy_plan(tmp_path, graph=graph)
    p = json.loads(path.read_text())
    if graph is None:
        del p["graph"]
    path.write_text(json.dumps(p))
    r = run("validate", "--graph", toy_graph(tmp_path), "--plan", path)
    assert r.exit_code == 1 and "names no graph" in r.output and "\"graph\": 'toy'" in r.output, r.output


def test_a_graph_without_ops_is_refused_by_the_searches_and_described_by_info(tmp_path: Path) -> None:
    g = toy_graph(tmp_path, ops=False)
    r = run("info", "--graph", g)
    assert r.exit_code == 0, r.output
    for cmd in (["optimize", "--out", tmp_path / "o.json"], ["compare"]):
        r = subprocess.run([sys.executable, "-m", "hybrid", *map(str, cmd), "--graph", str(g), "--time-limit",
                            "5s"], capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 2 and "has no ops: there is nothing to schedule" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr
    from ga import optimize

    with pytest.raises(HybridError, match="has no ops"):
        optimize(Graph.load(g), time_limit_s=5)


def test_a_tensor_built_in_python_has_the_files_default_kind(tmp_path: Path) -> None:
    d = {"format": "hybrid-graph/1", "name": "k", "tensors": [{"id": "t", "bytes": 8, "persistent": True}],
         "ops": []}
    assert Graph.from_json(d).tensors[0].kind == Tensor("t", 8).kind == "other"


@pytest.mark.parametrize("args, flag, nxt", [
    (["optimize", "--graph", "g.json", "--memory", "--out", "p.json"], "--memory", "--out"),
    (["validate", "--graph", "g.json", "--plan", "--all"], "--plan", "--all"),
])
def test_a_flag_given_no_value_before_the_next_flag_is_named(args: list[str], flag: str, nxt: str) -> None:
    """click read the next flag as the value (`--memory --out p.json`: the memory '--out', then '--out' missing)."""
    r = run(*args)
    assert r.exit_code == 2 and f"{flag} needs a value, and the next word is the flag {nxt}" in r.output, r.output
    assert f" {args[0]} --help`" in r.output   # the command's help (the program is "cli" in CliRunner)


def test_a_value_that_merely_starts_with_dashes_is_still_read(tmp_path: Path) -> None:
    r = run("validate", "--graph", toy_graph(tmp_path), "--plan", toy_plan(tmp_path))
    assert r.exit_code == 0, r.output


def test_an_arguments_name_is_no_flag_and_a_no_form_is_one(tmp_path: Path) -> None:
    """Only options' names (their --no- forms too) count as the next flag: `hybrid optimize --memory --no-arena`
    is a memory given no value."""
    r = run("optimize", "--graph", "g.json", "--memory", "--no-arena", "--out", "p.json")
    assert r.exit_code == 2 and "--memory needs a value, and the next word is the flag --no-arena" in r.output
