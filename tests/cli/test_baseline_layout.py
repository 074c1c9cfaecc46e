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
    r = run("baseline", "--graph", EXAMPLE, "--memory", "64MiB", "--kind", "belady", "--kind", "ideal", "--json")
    assert r.exit_code == 0, r.output
    plans = {p["kind"]: p for p in json.loads(r.output)["plans"]}
    assert plans["belady"]["notes"] and "no arena layout within memory" in plans["belady"]["notes"][0]
    assert plans["ideal"]["notes"] == []
