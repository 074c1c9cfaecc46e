"""`optimize` stops at the lower bound; `--json` summaries; `compare` records each arm's wall time."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ga.termination import Termination
from hybrid.graph import Graph
from hybrid.bounds import graph_bound
from hybrid.plan import Plan
from tests.cli.helpers import foreign_graph_file, run


def test_termination_stops_at_the_target() -> None:
    best = [2.0]
    term = Termination(time_limit_s=60.0, target_s=1.0, best=lambda: best[0])
    assert term.reason(0) is None
    best[0] = 1.0
    assert term.reason(0) == "lower bound"


@pytest.mark.parametrize("mode", ["auto", "after"])
def test_optimize_stops_when_the_best_plan_reaches_the_lower_bound(tmp_path, mode) -> None:
    path = foreign_graph_file(tmp_path)
    out = tmp_path / "p.json"
    # the limit is a hang guard only (the bound is reached in the first generations): the stop reason shows it
    r = run("optimize", "--graph", path, "--memory", "1GiB", "--time-limit", "5m", "--quiet", "--refine-mode", mode,
            "--out", out)
    assert r.exit_code == 0, r.output
    assert "stopped: reached the lower bound (no plan can be faster)" in r.output
    plan = Plan.load(out)
    g = Graph.load(path)
    assert plan.makespan_s <= graph_bound(g, plan.device) * (1 + 1e-9)


def test_optimize_json_summary(tmp_path) -> None:
    path = foreign_graph_file(tmp_path)
    out = tmp_path / "p.json"
    r = run("optimize", "--graph", path, "--memory", "12MiB", "--time-limit", "2s", "--generations", 3,
            "--population", 4, "--refine", "none", "--no-arena", "--quiet", "--json", "--out", out)
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["plan"] == str(out) and s["memory_bytes"] == 12 << 20 and s["planner"] == "ga"
    assert s["makespan_s"] == Plan.load(out).makespan_s and s["ideal/makespan"] == pytest.approx(s["ideal_s"] / s["makespan_s"])
    assert s["generations"] == 3 and s["stop_reason"] == "generations" and s["wall_s"] > 0 and not s["interrupted"]
    assert s["ideal_s"] <= s["graph_bound_s"] <= s["makespan_s"] * (1 + 1e-9)
    assert s["makespan/graph_bound"] == pytest.approx(s["makespan_s"] / s["graph_bound_s"])
    assert s["persistent_bound_s"] <= s["graph_bound_s"]


def test_baseline_simulate_refine_json_summaries(tmp_path) -> None:
    path = foreign_graph_file(tmp_path)
    r = run("baseline", "--graph", path, "--memory", "12MiB", "--kind", "naive", "--kind", "belady", "--json")
    assert r.exit_code == 0, r.output
    plans = json.loads(r.output)["plans"]
    assert [p["kind"] for p in plans] == ["naive", "belady"] and plans[0]["makespan_s"] >= plans[1]["makespan_s"]
    sim = tmp_path / "sim.json"
    r = run("simulate", "--graph", path, "--memory", "12MiB", "--json", "--out", sim)
    s = json.loads(r.output)
    assert s["plan"] == str(sim) and s["planner"] == "simulate" and s["ideal/makespan"] <= 1.0
    r = run("refine", "--graph", path, "--plan", sim, "--time-limit", "5s", "--max-windows", 2, "--quiet", "--json",
            "--out", tmp_path / "ref.json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    assert s["input_makespan_s"] >= s["makespan_s"] and s["windows"] <= 2 and s["plan"] == str(tmp_path / "ref.json")
    # every solved window ends one way: kept, no solution in time, or not faster once re-walked
    assert s["accepted"] + s["infeasible"] + s["rejected"] == s["windows"]


def test_compare_records_each_arms_wall_time_and_resumes_after_the_split(tmp_path) -> None:
    import math

    from ga import GAConfig
    from hybrid.refine.handoff import WorkBudget
    from hybrid.report.compare import compare

    g = Graph.load(foreign_graph_file(tmp_path))
    dev = replace(g.device, memory_bytes=12 << 20)
    # a work budget, so that what each arm does is fixed by the seed whatever the machine's speed (the time
    # limit is a hang guard): the split at 5 of 10 generations; then GA-only resumes for the other 5, while
    # refinement gets 6 windows, stalls after 2 without a gain (patience 0.01 of them, 2 at least) and hands the
    # generations of the 4 it left unused back to the search
    gens, windows, split_at = 10, 6, 5
    df = compare(g, dev, time_limit_s=120.0, seeds=(1,), refine_share=0.5, ga_config=GAConfig(population=8, children=8),
                 patience=0.01, mode="after", generations=gens, windows=windows)
    rows = df[df["row"] == "seed"].set_index("arm")
    assert set(rows["budget"]) == {"work"}   # no phase was cut by the time limit
    for arm in ("ga", "ga+cpsat"):
        wall = rows.loc[arm, "wall_s"]
        assert math.isfinite(wall) and 0 < wall < 30, rows["wall_s"]   # a hang guard: about a second is typical
    ga, hy = rows.loc["ga"], rows.loc["ga+cpsat"]
    assert ga["resumed_generations"] == gens - split_at and ga["ga_generations"] == gens
    assert 1 <= hy["refine_windows"] < windows             # refinement ran, and stopped before its window budget
    back = WorkBudget(windows, gens - split_at).handed_back(int(hy["refine_windows"]))
    assert back > 0 and hy["resumed_generations"] == back   # the resumed search ran the generations handed back
    assert hy["ga_generations"] == split_at + back and hy["resume_s"] > 0 and hy["refine_s"] > 0
    # the arm's wall time covers the split search, refinement and the resumed search, not the search alone
    assert hy["wall_s"] >= hy["refine_s"] + hy["resume_s"] - 1e-9


def test_optimize_writes_its_table_as_csv(tmp_path) -> None:
    """`--csv`: the summary table for pandas, the rows `--json` gives its baselines (written plan marked)."""
    import pandas as pd

    path = foreign_graph_file(tmp_path)
    out = tmp_path / "p.json"
    r = run("optimize", "--graph", path, "--memory", "12MiB", "--time-limit", "60s", "--generations", 2,
            "--population", 4, "--refine", "none", "--quiet", "--compare-baselines", "--json", "--csv",
            tmp_path / "t.csv", "--out", out)
    assert r.exit_code == 0, r.output
    s = json.loads(r.output)
    table = pd.read_csv(tmp_path / "t.csv")
    assert list(table["plan"]) == [b["plan"] for b in s["baselines"]]
    assert list(table["makespan_s"]) == [b["makespan_s"] for b in s["baselines"]]
    assert table[table["written"]]["makespan_s"].item() == Plan.load(out).makespan_s
    r = run("optimize", "--graph", path, "--memory", "12MiB", "--time-limit", "60s", "--generations", 2,
            "--population", 4, "--refine", "none", "--quiet", "--csv", tmp_path / "one.csv", "--out", out)
    assert r.exit_code == 0, r.output
    one = pd.read_csv(tmp_path / "one.csv")   # without baselines: the written plan's row alone
    assert len(one) == 1 and bool(one["written"].item()) and one["makespan_s"].item() == Plan.load(out).makespan_s
