"""`hybrid serve`: the table, CSV/JSON/plot outputs, determinism, and one-line errors naming the bad flag."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from hybrid.graph.info import unswapped_peak
from tests.cli.helpers import hybrid, run
from tests.serve.test_serve_inputs import inference_graph


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory) -> Path:
    g = inference_graph(10, seed=3, batch=None)  # serve takes inference graphs; this one records no batch
    path = tmp_path_factory.mktemp("serve") / "g.json"
    path.write_text(g.dumps())
    return path


def peak(path: Path) -> int:
    from hybrid.graph import Graph

    return unswapped_peak(Graph.load(path))


def test_serve_writes_table_csv_json_and_plot(graph_file: Path, tmp_path: Path) -> None:
    mem = peak(graph_file)  # two models: half the peak each, so swapping swaps
    args = ["serve", "--graph", graph_file, "--models", 2, "--batch", 2, "--memory", f"{mem}B", "--rate", "5,20",
            "--duration", "20s", "--planner", "belady"]
    r = run(*args, "--csv", tmp_path / "t.csv", "--plot", tmp_path / "t.png")
    assert r.exit_code == 0, r.output
    assert "time-shared" in r.output and "p99_ms" in r.output
    df = pd.read_csv(tmp_path / "t.csv")
    assert set(df.policy) == {"not-shared", "time-shared", "swapping"} and set(df.rate) == {5.0, 20.0}
    assert (tmp_path / "t.png").stat().st_size > 1000
    j = json.loads(run(*args, "--json").output)
    assert j["share_bytes"] == mem // 2
    m = j["models"][0]
    assert m["swap_s"] > m["ideal_s"]  # half the peak: the plan stalls somewhere
    again = json.loads(run(*args, "--json").output)
    assert again == j  # deterministic for a seed
    other = json.loads(run(*args, "--json", "--seed", 2).output)
    assert other["rows"] != j["rows"]


def test_serve_policy_subset(graph_file: Path) -> None:
    r = run("serve", "--graph", graph_file, "--batch", 1, "--rate", 1, "--duration", "5s", "--policy", "swapping",
            "--json")
    assert {row["policy"] for row in json.loads(r.output)["rows"]} == {"swapping"}


@pytest.mark.parametrize("extra, flag", [
    (["--rate", "fast"], "--rate"),
    (["--rate", "-3"], "--rate"),
    ([], "--rate is required"),
    (["--rate", "1", "--duration", "soon"], "--duration"),
    (["--rate", "1", "--models", "0"], "--models"),
    (["--rate", "1", "--batch", "0"], "--batch"),
    (["--rate", "1", "--resident", "0"], "--resident"),
    (["--rate", "1", "--memory", "1KiB"], "--memory"),
    (["--rate", "1", "--policy", "fifo"], "--policy"),
])
def test_bad_flags_are_one_line_errors(graph_file: Path, extra: list[str], flag: str) -> None:
    args = ["serve", "--graph", graph_file, *([] if "--batch" in extra else ["--batch", "1"]), *extra]
    p = hybrid(*args)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and flag in lines[0], p.stderr


def test_missing_graph_and_models_with_two_graphs(graph_file: Path) -> None:
    r = hybrid("serve", "--graph", graph_file, "--graph", graph_file, "--models", 3, "--rate", 1, "--batch", 1)
    assert r.returncode == 2 and "--models" in r.stderr
    r = hybrid("serve", "--graph", graph_file.with_name("nope.json"), "--rate", 1)
    assert r.returncode == 2 and "--graph" in r.stderr and "no such file" in r.stderr
    r = hybrid("serve", "--graph", graph_file, "--rate", 1)  # synthetic graph: no recorded batch
    assert r.returncode == 2 and "--batch" in r.stderr
