"""`hybrid refine`, `hybrid compare` (and its pandas API), and the timeline plot."""
from __future__ import annotations

import re

import pandas as pd
import pytest
from click.testing import CliRunner

from hybrid.swap.baselines import run_baseline
from hybrid.cli.main import cli
from hybrid.device import Device
from hybrid.plan import Plan
from hybrid.graph.synthetic import training_graph
from hybrid.validator import check


@pytest.fixture()
def files(tmp_path):
    g = training_graph(12, seed=1, device=Device("s", 24 << 20, 12e9, 12e9, 0.0), workspace_prob=0.3)
    gp = tmp_path / "g.json"
    g.save(gp)
    pp = tmp_path / "belady.json"
    run_baseline(g, g.device, "belady").save(pp)
    return g, gp, pp


def test_refine_command_writes_a_valid_faster_plan_and_a_timeline(files, tmp_path):
    g, gp, pp = files
    out = tmp_path / "r.json"
    png = tmp_path / "t.png"
    r = CliRunner().invoke(cli, ["refine", "--graph", str(gp), "--plan", str(pp), "--time-limit", "30s",
                                 "--window-time", "0.2s", "--max-windows", "6", "--out", str(out),
                                 "--timeline", str(png), "--quiet"])
    assert r.exit_code == 0, r.output
    assert "faster" in r.output and re.search(r"\b(1 window|\d+ windows) solved", r.output)
    plan, before = Plan.load(out), Plan.load(pp)
    check(g, plan)
    assert plan.makespan_s < before.makespan_s
    assert png.stat().st_size > 10_000 and png.read_bytes()[:4] == b"\x89PNG"


def test_refine_command_errors_are_one_line(files, tmp_path):
    _, gp, pp = files
    r = CliRunner().invoke(cli, ["refine", "--graph", str(gp), "--plan", str(pp), "--time-limit", "soon",
                                 "--out", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "error: cannot read --time-limit" in r.output
    r = CliRunner().invoke(cli, ["refine", "--graph", str(gp), "--plan", str(gp), "--out", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and r.output.startswith("error:") and "is this a graph" in r.output
    r = CliRunner().invoke(cli, ["refine", "--graph", str(gp), "--plan", str(pp), "--patience", "0s",
                                 "--out", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "error: --patience must be positive" in r.output
    # a timeline's suffix that matplotlib cannot write fails before the search, not after it wrote --out
    r = CliRunner().invoke(cli, ["refine", "--graph", str(gp), "--plan", str(pp), "--timeline",
                                 str(tmp_path / "t.txt"), "--out", str(tmp_path / "x.json")])
    assert r.exit_code == 2 and "--timeline" in r.output and ".txt" in r.output, r.output
    assert not (tmp_path / "x.json").exists()


def test_compare_api_table_and_concatenation(tmp_path):
    from ga import GAConfig

    from hybrid.report.compare import COLUMNS, compare, summary, write_tables

    cfg = GAConfig(population=8, children=8)
    tables = []
    for seed in (1, 2):
        g = training_graph(10, seed=seed, device=Device("s", 22 << 20, 12e9, 12e9, 0.0), workspace_prob=0.3)
        # 1.5 s a run: every arm and seed ends at the same makespan as with 3 s
        tables.append(compare(g, time_limit_s=1.5, seeds=(1, 2), refine_share=0.3, out_dir=tmp_path, ga_config=cfg,
                              mode="after"))
    df = pd.concat(tables, ignore_index=True)
    assert list(df.columns) == COLUMNS
    assert len(df) == 2 * (4 + 2)  # per graph: 2 arms x 2 seeds, plus a median row per arm
    seeds = df[df["row"] == "seed"]
    for _, r in seeds.iterrows():
        g = training_graph(10, seed=int(r["graph"].split("-")[-1]), device=Device("s", 22 << 20, 12e9, 12e9, 0.0),
                           workspace_prob=0.3)
        plan = Plan.load(r["plan"])
        check(g, plan)
        assert plan.makespan_s == pytest.approx(r["makespan_s"])
        assert r["makespan/ideal"] >= 1.0 - 1e-9 and r["bytes_moved"] == r["bytes_h2d"] + r["bytes_d2h"]
    hy = seeds[seeds["arm"] == "ga+cpsat"]
    assert (hy["search_s"] <= 1.5 * 5).all()   # a hang guard: about the 1.5 s budget is typical
    assert set(hy["final_from"]) <= {"cpsat", "ga"} and (hy["refine_s"] > 0).all()
    # the arm never returns a plan slower than the split plan it started from
    assert (hy["makespan_s"] <= hy["split_makespan_s"] * (1 + 1e-12)).all()
    med = df[(df["row"] == "median") & (df["arm"] == "ga")]
    assert len(med) == 2 and med["seed"].isna().all()
    s = summary(df)
    assert list(s["graph"]) == sorted(set(df["graph"]), key=list(df["graph"]).index)
    paths = write_tables(df, tmp_path / "cmp", "test")
    back = pd.read_parquet(paths[1])
    assert len(back) == len(df) and (back["makespan_s"] == df["makespan_s"]).all()
    assert "| graph" in paths[2].read_text()


def test_compare_command(files, tmp_path):
    _, gp, _ = files
    r = CliRunner().invoke(cli, ["compare", "--graph", str(gp), "--time-limit", "3s", "--seeds", "1",
                                 "--refine-mode", "after", "--population", "8", "--out-dir", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    for name in ("compare.csv", "compare.parquet", "compare.md"):
        assert (tmp_path / "c" / name).exists()
    assert len(list((tmp_path / "c").glob("*-seed1-*.json"))) == 3  # both arms and the split plan
    # the arms' plans are byte budgets: said, so nobody reads them as `hybrid optimize`'s laid-out plans
    assert "byte budgets without offsets" in r.output and "not laid out" in (tmp_path / "c" / "compare.md").read_text()
    for path in (tmp_path / "c").glob("*-seed1-*.json"):
        assert Plan.load(path).allocation.kind == "unconstrained"


def test_timeline_memory_profile_matches_the_validator_peak(files):
    from hybrid.report.timeline import compute_stalls, memory_profile
    from hybrid.validator import validate

    g, _, pp = files
    plan = Plan.load(pp)
    _, level = memory_profile(g, plan)
    assert int(level.max()) == validate(g, plan).peak_bytes
    stalls = compute_stalls(plan)
    busy = sum(e.end_s - e.start_s for e in plan.events if e.kind == "compute")
    assert sum(b - a for a, b in stalls) == pytest.approx(plan.makespan_s - busy, rel=1e-9, abs=1e-12)


def test_timeline_command_draws_plans_and_rejects_an_invalid_one(files, tmp_path):
    g, gp, pp = files
    png = tmp_path / "t.png"
    r = CliRunner().invoke(cli, ["timeline", "--graph", str(gp), "--plan", str(pp), "--plan", str(pp),
                                 "--out", str(png)])
    assert r.exit_code == 0, r.output
    assert png.read_bytes()[:4] == b"\x89PNG"
    bad = Plan.load(pp)
    bad.events = bad.events[1:]  # the first compute is gone: a later read finds no device copy
    bp = tmp_path / "bad.json"
    bad.save(bp)
    r = CliRunner().invoke(cli, ["timeline", "--graph", str(gp), "--plan", str(bp), "--out", str(png)])
    assert r.exit_code != 0 and "not a valid plan" in r.output and "hybrid validate" in r.output


def test_compare_memory_fraction_is_what_a_plan_may_fill(files, tmp_path):
    """As --memory says it: the preset's 1 GiB reserve is not taken out of it (it was: the plans then had 1 GiB
    less than the table said, and a small graph none at all)."""
    from hybrid.graph.info import fraction_of_peak

    g, gp, _ = files
    r = CliRunner().invoke(cli, ["compare", "--graph", str(gp), "--time-limit", "3s", "--seeds", "1",
                                 "--refine-mode", "after", "--population", "8", "--memory-fraction", "0.6",
                                 "--device", "v100-16gb", "--out", str(tmp_path / "c")])   # --out-dir's alias
    assert r.exit_code == 0, r.output
    plans = list((tmp_path / "c").glob("*-seed1-*.json"))
    assert plans
    for path in plans:
        dev = Plan.load(path).device
        assert dev.reserve_bytes == 0 and dev.memory_bytes == fraction_of_peak(g, 0.6)
