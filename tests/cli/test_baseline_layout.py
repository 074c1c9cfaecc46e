"""`hybrid baseline` writes plans with arena offsets, as `optimize --compare-baselines` lays its rows out: a
baseline plan is then what the executor runs, without compaction (it wrote byte budgets, which the executor
compacted at run time, 3 times an iteration moving 150 MiB on ResNet-18 at 80 MiB, none of it in the figure)."""
from __future__ import annotations

import json
from pathlib import Path

from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.validator import validate
from tests.cli.helpers import run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "resnet18-b32.json"


def test_a_baseline_is_laid_out_and_its_cost_said(tmp_path: Path) -> None:
    r = run("baseline", "--graph", EXAMPLE, "--memory", "64MiB", "--kind", "belady", "--out", tmp_path / "b.json")
    assert r.exit_code == 0, r.output
    plan = Plan.load(tmp_path / "b.json")
    assert plan.allocation.kind == "arena" and validate(Graph.load(EXAMPLE), plan).valid
    # Belady's byte budget does not lay out at 64 MiB: re-planned by its own rules with less memory, and said
    assert "note: belady: no arena layout within memory (best +" in r.output
    assert "re-planned (belady) with" in r.output and "from its byte budget's 13.16 ms" in r.output
    assert "--no-arena writes the byte budget" in r.output
    given = int(plan.planner["fallback"].removeprefix("byte budget "))     # the file says it was re-planned
    assert given < plan.device.usable_bytes and plan.planner["name"] == "belady"
    r = run("baseline", "--graph", EXAMPLE, "--memory", "64MiB", "--kind", "belady", "--no-arena",
            "--out", tmp_path / "n.json")
    assert r.exit_code == 0, r.output
    budget = Plan.load(tmp_path / "n.json")
    assert budget.allocation.kind == "unconstrained" and budget.makespan_s < plan.makespan_s
    assert "note:" not in r.output


def test_json_names_each_baselines_notes(tmp_path: Path) -> None:
    import pandas as pd

    r = run("baseline", "--graph", EXAMPLE, "--memory", "64MiB", "--kind", "belady", "--kind", "ideal", "--json",
            "--csv", tmp_path / "t" / "b.csv")
    assert r.exit_code == 0, r.output
    plans = {p["kind"]: p for p in json.loads(r.output)["plans"]}
    table = pd.read_csv(tmp_path / "t" / "b.csv")   # the table, for pandas: one row per kind, as --json's figures
    assert list(table["plan"]) == ["belady", "ideal"]
    assert list(table["makespan_s"]) == [plans["belady"]["makespan_s"], plans["ideal"]["makespan_s"]]
    assert plans["belady"]["notes"] and "no arena layout within memory" in plans["belady"]["notes"][0]
    assert plans["ideal"]["notes"] == []


def test_a_replanned_baseline_states_and_is_divided_by_the_bound_of_the_memory_given(tmp_path: Path) -> None:
    """naive does not lay out at 64 MiB and is re-planned with 40% less memory: its file, its JSON and its table
    row give the persistent-tensor bound of the 64 MiB the plan is for (they gave the smaller device's: 4.563 ms
    against 3.547, so its row read 6.918x where every other row divided by another bound), and a table with
    `ideal` (unlimited memory) keeps the named bounds, "-" on ideal's row."""
    from hybrid.device import resolve_device
    from hybrid.graph.info import persistent_bound

    g = Graph.load(EXAMPLE)
    lb = persistent_bound(g, resolve_device(g.device, None, "64MiB"))
    r = run("baseline", "--graph", EXAMPLE, "--memory", "64MiB", "--kind", "naive", "--kind", "belady", "--json",
            "--out", tmp_path)
    assert r.exit_code == 0, r.output
    plans = json.loads(r.output[r.output.index("{"):])["plans"]
    assert [p["kind"] for p in plans] == ["naive", "belady"]
    naive = Plan.load(tmp_path / "naive.json")
    assert naive.planner["fallback"].startswith("byte budget ")      # re-planned on a smaller device
    for p in plans:
        assert p["persistent_bound_s"] == lb
    assert naive.metrics["persistent_bound_s"] == lb
    # --json gives the arena each plan runs in, as the text's "pool: arena of" does (it gave only "arena")
    assert plans[0]["arena_bytes"] == naive.allocation.arena_bytes > 0
    r = run("baseline", "--graph", EXAMPLE, "--memory", "64MiB", "--kind", "naive", "--kind", "ideal")
    assert r.exit_code == 0, r.output
    assert "(any order, with recompute)" in r.output and "persistent-tensor bound" not in r.output
    ideal = next(ln for ln in r.output.splitlines() if ln.startswith("| ideal "))
    assert [c.strip() for c in ideal.split("|")][5:7] == ["-", "-"], ideal


def test_validate_notes_a_stated_bound_of_another_device(tmp_path: Path) -> None:
    r = run("baseline", "--graph", EXAMPLE, "--memory", "64MiB", "--kind", "belady", "--out", tmp_path / "b.json")
    assert r.exit_code == 0, r.output
    d = json.loads((tmp_path / "b.json").read_text())
    d["metrics"]["persistent_bound_s"] *= 1.25
    (tmp_path / "e.json").write_text(json.dumps(d))
    r = run("validate", "--graph", EXAMPLE, "--plan", tmp_path / "e.json")
    assert r.exit_code == 0, r.output
    assert "note: metrics.persistent_bound_s states" in r.output and "the graph gives on the plan's device" in r.output
    r = run("validate", "--graph", EXAMPLE, "--plan", tmp_path / "b.json")
    assert "note:" not in r.output, r.output


def test_odswap_papers_random_order_takes_a_seed(tmp_path: Path) -> None:
    """odswap-paper draws a random topological order: --seed chooses it (0 by default, as optimize's baseline
    rows), the same seed gives the same plan, another seed another order."""
    def plan(seed: int, name: str) -> Plan:
        r = run("baseline", "--graph", EXAMPLE, "--memory", "256MiB", "--kind", "odswap-paper", "--no-arena",
                "--seed", seed, "--out", tmp_path / name)
        assert r.exit_code == 0, r.output
        return Plan.load(tmp_path / name)

    default = run("baseline", "--graph", EXAMPLE, "--memory", "256MiB", "--kind", "odswap-paper", "--no-arena",
                  "--out", tmp_path / "d.json")
    assert default.exit_code == 0, default.output
    zero, again, other = plan(0, "a.json"), plan(0, "b.json"), plan(7, "c.json")
    assert Plan.load(tmp_path / "d.json").schedule == zero.schedule == again.schedule
    assert zero.events == again.events and other.schedule != zero.schedule
    assert other.planner["schedule"] == "random topological order (seed 7)"
