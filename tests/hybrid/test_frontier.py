"""`hybrid frontier` and hybrid.report.frontier: the written plan at each memory of a sweep, the lower bounds as a
curve, other graphs as points; more memory never slower in the table, or the row says why."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from ga import GAConfig
from hybrid.cli.main import cli
from hybrid.graph.info import ideal_time, largest_op, unswapped_peak
from hybrid.pipeline import OptimizeOptions
from hybrid.plan import Plan
from hybrid.report import frontier as fr
from hybrid.validator import validate
from tests.ga.graphs import small_training


def _options() -> OptimizeOptions:
    return OptimizeOptions(config=GAConfig(population=4, children=4, seed=2), generations=1, workers=1,
                           refine="none", arena_s=None)


def test_the_default_sweep_runs_from_the_largest_op_to_the_unswapped_peak() -> None:
    g, dev = small_training(8, seed=1)
    mems = fr.default_memories(g, dev, 6)
    assert mems[0] == largest_op(g, dev.alignment_bytes)[1] and mems[-1] == unswapped_peak(g, dev.alignment_bytes)
    assert len(mems) == 6 and mems == sorted(mems)
    assert fr.parse_memories(["50%,1MiB", "1048576"], 4 << 20) == [1 << 20, 2 << 20]


def test_each_point_is_a_valid_plan_at_its_memory_never_faster_than_the_bound(tmp_path) -> None:
    g, dev = small_training(8, seed=1)
    lo, peak = fr.memory_range(g, dev)
    mems = [lo, (lo + peak) // 2, peak]
    done = fr.sweep(g, dev, mems, 60.0, _options(), plan_dir=tmp_path)
    assert not done.interrupted and [r["memory_bytes"] for r in done.rows] == mems
    rows = fr.monotone(done.rows) + fr.bound_rows(g, dev, mems)
    df = fr.frame(rows, g)
    plans = df[df["kind"] == "plan"]
    for _, r in plans.iterrows():
        plan = Plan.load(r["plan"])
        assert plan.device.usable_bytes == r["memory_bytes"] and validate(g, plan).valid
        assert plan.makespan_s == r["makespan_s"]
        assert r["makespan_s"] >= r["bound_s"] * (1 - 1e-9)       # no plan beats the any-order bound
    assert plans["makespan_s"].iloc[-1] == pytest.approx(ideal_time(g))   # at the peak nothing is swapped
    best = plans["best_s"].to_numpy()
    assert np.all(np.diff(best) <= 0)                                   # more memory is never slower
    for _, r in plans.iterrows():
        assert r["makespan_s"] == r["best_s"] or "fits this memory too" in r["note"]
    bounds = df[df["kind"] == "bound"]
    assert set(bounds["label"]) == {"lower bound, any order, with recompute", "lower bound, any order, swap only"}
    for label, part in bounds.groupby("label"):
        b = part.sort_values("memory_bytes")["makespan_s"].dropna().to_numpy()
        assert len(b) >= len(mems) and np.all(np.diff(b) <= 1e-12)       # a bound falls as memory grows
    swap = bounds[bounds["label"].str.endswith("swap only")].set_index("memory_bytes")["makespan_s"]
    rc = bounds[bounds["label"].str.endswith("with recompute")].set_index("memory_bytes")["makespan_s"]
    assert (swap.dropna() >= rc.reindex(swap.dropna().index) * (1 - 1e-9)).all()


def test_a_slower_plan_at_more_memory_says_why_and_best_takes_the_faster() -> None:
    rows = [fr._row("plan", "optimize", m, t, 1.0) for m, t in ((100, 3.0), (200, 2.0), (300, 2.5), (400, 1.5))]
    rows.append(fr._row("plan", "optimize", 50, note="no plan fits: ..."))
    out = sorted(fr.monotone(rows), key=lambda r: r["memory_bytes"])
    assert math.isnan(out[0]["best_s"]) and out[0]["note"].startswith("no plan fits")
    assert [r["best_s"] for r in out[1:]] == [3.0, 2.0, 2.0, 1.5]
    assert "slower than the plan at 200 B" in out[3]["note"] and out[2]["note"] == "" and out[4]["note"] == ""


def test_ctrl_c_keeps_the_points_done() -> None:
    g, dev = small_training(8, seed=1)
    lo, peak = fr.memory_range(g, dev)
    said: list[str] = []

    def say(msg: str) -> None:
        said.append(msg)
        if msg.startswith("[2/3]") and msg.endswith("..."):
            raise KeyboardInterrupt   # the second point is about to start

    done = fr.sweep(g, dev, [lo, (lo + peak) // 2, peak], 60.0, _options(), say=say)
    assert done.interrupted and len(done.rows) == 1 and done.rows[0]["memory_bytes"] == lo
    with pytest.raises(KeyboardInterrupt):   # nothing done: nothing to keep
        fr.sweep(g, dev, [lo], 60.0, _options(), say=lambda m: (_ for _ in ()).throw(KeyboardInterrupt()))


def test_the_command_writes_csv_parquet_png_with_other_graphs_as_points(tmp_path) -> None:
    g, dev = small_training(8, seed=1)
    path = tmp_path / "g.json"
    g.save(path)
    other, _ = small_training(6, seed=3)
    other.save(tmp_path / "other.json")
    out = tmp_path / "f"
    r = CliRunner().invoke(cli, list(map(str, [
        "frontier", "--graph", path, "--memory", dev.memory_bytes, "--memories", "60%,100%", "--generations", 1,
        "--refine", "none", "--workers", 1, "--no-arena", "--seed", 3, "--time-limit-per-point", "60s",
        "--points", tmp_path / "other.json", "--out", out])), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out / "frontier.csv")
    assert pd.read_parquet(out / "frontier.parquet").shape == df.shape
    assert (out / "frontier.png").stat().st_size > 0
    peak = unswapped_peak(g, dev.alignment_bytes)
    plans = df[df["kind"] == "plan"]
    assert list(plans["memory_bytes"]) == [round(0.6 * peak), peak] and (plans["seed"] == 3).all()
    pt = df[df["kind"] == "point"].iloc[0]
    assert pt["label"] == "other" and pt["memory_bytes"] == unswapped_peak(other, dev.alignment_bytes)
    assert pt["makespan_s"] == pytest.approx(ideal_time(other))
    assert "[1/2]" in r.stderr and "[2/2]" in r.stderr


@pytest.mark.parametrize("flags, needle", [
    (["--memories", "lots"], "--memories 'lots'"),
    (["--memories", "0%"], "--memories '0%'"),
    (["--time-limit-per-point", "0s"], "--time-limit-per-point must be positive"),
    (["--points", "missing.json"], "--points missing.json: no such file"),
])
def test_bad_flags_give_one_line(tmp_path, flags, needle) -> None:
    g, dev = small_training(6, seed=1)
    g.save(tmp_path / "g.json")
    r = CliRunner().invoke(cli, ["frontier", "--graph", str(tmp_path / "g.json"), "--out", str(tmp_path / "o"),
                                 *flags])
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0]


def test_help_explains_the_table() -> None:
    r = CliRunner().invoke(cli, ["frontier", "--help"])
    assert r.exit_code == 0
    for word in ("--time-limit-per-point", "--memories", "--points", "best_s", "bound", "Ctrl-C"):
        assert word in r.output


def test_a_point_written_without_offsets_says_so() -> None:
    """The executor compacts such a plan at run time: the table must not pass it off as laid out."""
    import dataclasses

    g, dev = small_training(8, seed=1)
    lo, peak = fr.memory_range(g, dev)
    bare = fr.sweep(g, dev, [peak], 60.0, _options())
    assert "written without arena offsets" in bare.rows[0]["note"]
    laid = fr.sweep(g, dev, [peak], 60.0, dataclasses.replace(_options(), arena_s=30.0))
    assert laid.plans[peak].allocation.kind != "unconstrained" and "offsets" not in laid.rows[0]["note"]
