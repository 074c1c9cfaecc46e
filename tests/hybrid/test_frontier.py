"""`hybrid frontier` and hybrid.report.frontier: the written plan at each memory of a sweep, the lower bounds as a
curve, other graphs as points; more memory never slower in the table, or the row says why."""
from __future__ import annotations

import json
import math
from pathlib import Path

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
    assert not done.interrupted and [r["usable_bytes"] for r in done.rows] == mems
    rows = fr.monotone(done.rows) + fr.bound_rows(g, dev, mems)
    df = fr.frame(rows, g)
    plans = df[df["kind"] == "plan"]
    for _, r in plans.iterrows():
        plan = Plan.load(r["plan"])
        assert plan.device.usable_bytes == r["usable_bytes"] and validate(g, plan).valid
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
        b = part.sort_values("usable_bytes")["bound_s"].dropna().to_numpy()
        assert len(b) >= len(mems) and np.all(np.diff(b) <= 1e-12)       # a bound falls as memory grows
    swap = bounds[bounds["label"].str.endswith("swap only")].set_index("usable_bytes")["bound_s"]
    rc = bounds[bounds["label"].str.endswith("with recompute")].set_index("usable_bytes")["bound_s"]
    assert (swap.dropna() >= rc.reindex(swap.dropna().index) * (1 - 1e-9)).all()
    # a bound row is no plan: its makespan is empty, so the fastest makespan at a memory is a plan's
    assert bounds["makespan_s"].isna().all() and bounds["makespan/ideal"].isna().all()
    assert np.allclose(bounds["bound/ideal"].dropna(), (bounds["bound_s"] / bounds["ideal_s"]).dropna())
    fastest = df.groupby("usable_bytes")["makespan_s"].min().dropna()
    assert list(fastest.index) == mems and np.allclose(fastest.to_numpy(), plans["makespan_s"].to_numpy())
    assert list(plans["laid_out"]) == [False] * len(mems)    # _options() writes byte budgets (arena_s=None)


def test_a_slower_plan_at_more_memory_says_why_and_best_takes_the_faster() -> None:
    rows = [fr._row("plan", "optimize", m, t, 1.0) for m, t in ((100, 3.0), (200, 2.0), (300, 2.5), (400, 1.5))]
    rows.append(fr._row("plan", "optimize", 50, note="no plan fits: ..."))
    out = sorted(fr.monotone(rows), key=lambda r: r["usable_bytes"])
    assert math.isnan(out[0]["best_s"]) and out[0]["note"].startswith("no plan fits")
    assert [r["best_s"] for r in out[1:]] == [3.0, 2.0, 2.0, 1.5]
    assert "slower than the plan at 200 B" in out[3]["note"] and out[2]["note"] == "" and out[4]["note"] == ""


def test_a_frame_of_rows_monotone_has_not_seen_gets_their_best() -> None:
    """`frame(sweep(...).rows, g)` without `monotone` gave best_s as an object column of None (a pandas user's
    review); rows monotone has seen keep their notes (it is not applied twice)."""
    g, _ = small_training()
    rows = [fr._row("plan", "optimize", m, t, 1.0) for m, t in ((100, 3.0), (200, 2.0), (300, 2.5))]
    df = fr.frame(rows, g)
    assert df["best_s"].dtype == float and list(df["best_s"]) == [3.0, 2.0, 2.0]
    assert df["note"].str.count("slower than the plan at 200 B").tolist() == [0, 0, 1]
    again = fr.frame(fr.monotone([dict(r) for r in rows]), g)
    assert again["note"].str.count("slower than the plan at 200 B").tolist() == [0, 0, 1]


def test_ctrl_c_keeps_the_points_done() -> None:
    g, dev = small_training(8, seed=1)
    lo, peak = fr.memory_range(g, dev)
    said: list[str] = []

    def say(msg: str) -> None:
        said.append(msg)
        if msg.startswith("[2/3]") and msg.endswith("..."):
            raise KeyboardInterrupt   # the second point is about to start

    done = fr.sweep(g, dev, [lo, (lo + peak) // 2, peak], 60.0, _options(), say=say)
    assert done.interrupted and len(done.rows) == 1 and done.rows[0]["usable_bytes"] == lo
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
        "frontier", "--graph", path, "--memories", "60%,100%", "--generations", 1,
        "--refine", "none", "--workers", 1, "--no-arena", "--seed", 3, "--time-limit-per-point", "60s",
        "--points", tmp_path / "other.json", "--out", out])), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out / "frontier.csv")
    assert pd.read_parquet(out / "frontier.parquet").shape == df.shape
    assert (out / "frontier.png").stat().st_size > 0
    peak = unswapped_peak(g, dev.alignment_bytes)
    plans = df[df["kind"] == "plan"]
    assert list(plans["usable_bytes"]) == [round(0.6 * peak), peak] and (plans["seed"] == 3).all()
    assert (df["recompute"] == True).all() and (df["refine"] == "none").all()   # noqa: E712 - read back from CSV
    assert (df["generations"] == 1).all() and (df["device"] == g.device.name).all()
    assert (plans["laid_out"] == False).all()   # noqa: E712 - --no-arena: byte budgets, compacted at run time
    assert sorted(p.name for p in (out / "plans").iterdir()) == sorted(Path(p).name for p in plans["plan"])
    assert all(Path(p).name.endswith("MiB.json") for p in plans["plan"])
    pt = df[df["kind"] == "point"].iloc[0]
    assert pt["label"] == "other" and pt["usable_bytes"] == unswapped_peak(other, dev.alignment_bytes)
    assert pt["makespan_s"] == pytest.approx(ideal_time(other))
    assert "[1/2]" in r.stderr and "[2/2]" in r.stderr
    assert pt["note"] in r.stdout   # the point is in the printed table too, not only in the CSV and the plot
    # notes under the table, a line each: as a column they padded every row to the longest note
    table = r.stdout.split("wrote ")[0].splitlines()
    assert table[0].split() == ["memory", "makespan_ms", "best_ms", "bound_ms", "makespan/ideal"]
    assert max(len(line) for line in table if not line.startswith("  ")) < 80
    assert any(line.startswith("  ") and line.endswith(pt["note"]) for line in table)


@pytest.mark.parametrize("flags, needle", [
    (["--memories", "lots"], "--memories 'lots'"),
    (["--memories", "0%"], "--memories '0%'"),
    (["--time-limit-per-point", "0s"], "--time-limit-per-point must be positive"),
    (["--points", "missing.json"], "--points missing.json: no such file"),
    (["--memory", "64MiB"], "frontier sweeps memories; give --memories"),   # it would be ignored
    (["--memories", "1KiB,2KiB"], "every memory is below"),                  # no plan runs below the largest op
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


def _cli(*args: object) -> object:
    return CliRunner().invoke(cli, ["frontier", *map(str, args)], catch_exceptions=False)


def _quick(*args: object) -> list[object]:
    return ["--generations", 1, "--refine", "none", "--workers", 1, "--no-arena", "--time-limit-per-point", "60s",
            *args]


def test_a_plan_point_is_validated_and_placed_by_its_events(tmp_path) -> None:
    """An edited plan stating a 1 ms makespan or a 1 B peak is not plotted there."""
    from hybrid.errors import InvalidPlanError
    from hybrid.errors import HybridError
    from hybrid.validator import event_figures

    g, dev = small_training(8, seed=1)
    lo, peak = fr.memory_range(g, dev)
    done = fr.sweep(g, dev, [(lo + peak) // 2], 60.0, _options(), plan_dir=tmp_path / "plans")
    path = Path(done.rows[0]["plan"])
    plan = Plan.load(path)
    raw = json.loads(path.read_text())

    raw["metrics"]["peak_bytes"] = 1                     # a stated figure the validator only notes
    (tmp_path / "peak.json").write_text(json.dumps(raw))
    row = fr.point_row(tmp_path / "peak.json", g, dev)
    assert row["usable_bytes"] == row["peak_bytes"] == event_figures(g, plan)["peak_bytes"] > 1
    raw["metrics"]["ideal_s"] = 1e-9                     # the ideal is checked (rule 7): refused, not plotted
    (tmp_path / "ideal.json").write_text(json.dumps(raw))
    with pytest.raises(InvalidPlanError, match="ideal_s"):
        fr.point_row(tmp_path / "ideal.json", g, dev)
    raw["metrics"]["ideal_s"] = plan.metrics["ideal_s"]
    assert row["makespan_s"] == plan.makespan_s and row["laid_out"] is False

    raw["makespan_s"] = 0.001                            # `hybrid validate` rejects it (rule 7)
    (tmp_path / "fast.json").write_text(json.dumps(raw))
    with pytest.raises(InvalidPlanError, match="--points .*fast.json"):
        fr.point_row(tmp_path / "fast.json", g, dev)

    other, _ = small_training(6, seed=3)
    with pytest.raises(HybridError, match="graph file as a point instead, or a plan of"):
        fr.point_row(path, other, dev)

    g.save(tmp_path / "g.json")
    r = _cli("--graph", tmp_path / "g.json", "--points", tmp_path / "fast.json", "--out", tmp_path / "o", *_quick())
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 1 and len(lines) == 1 and "--points" in lines[0] and "rule 7" in lines[0]
    other.save(tmp_path / "other.json")
    r = _cli("--graph", tmp_path / "other.json", "--points", path, "--out", tmp_path / "o", *_quick())
    lines = r.stderr.strip().splitlines()
    # an invalid plan for the swept graph: exit 1, as refine, arena, timeline and simulate given one
    assert r.exit_code == 1 and len(lines) == 1 and "graph file as a point instead" in lines[0]


def test_memories_all_below_the_largest_op_are_refused_naming_it(tmp_path) -> None:
    from hybrid.units import format_bytes

    g, dev = small_training(8, seed=1)
    g.save(tmp_path / "g.json")
    lo, _ = fr.memory_range(g, dev)
    r = _cli("--graph", tmp_path / "g.json", "--memories", f"{lo - 512},{lo // 2}", "--out", tmp_path / "o",
             *_quick())
    lines = r.stderr.strip().splitlines()
    assert r.exit_code == 2 and len(lines) == 1 and format_bytes(lo) in lines[0] and "every memory" in lines[0]
    assert not (tmp_path / "o" / "plans").exists()


def test_no_plan_at_any_memory_writes_the_table_and_exits_1(tmp_path, monkeypatch) -> None:
    import hybrid.pipeline
    from hybrid.errors import InfeasibleError

    def none_fits(*_a: object, **_k: object) -> None:
        raise InfeasibleError("the pools do not fit in the device memory (1 MiB); give more --memory")

    monkeypatch.setattr(hybrid.pipeline, "run_optimize", none_fits)
    g, _ = small_training(8, seed=1)
    g.save(tmp_path / "g.json")
    out = tmp_path / "o"
    r = _cli("--graph", tmp_path / "g.json", "--memories", "60%,100%", "--out", out, *_quick())
    assert r.exit_code == 1
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "no plan fits at any memory" in errors[0] and "--memories" in errors[0]
    df = pd.read_csv(out / "frontier.csv")
    notes = df.loc[df["kind"] == "plan", "note"]
    assert len(notes) == 2 and all("give more --memories" in n and "--memory " not in n for n in notes)
    assert not (out / "plans").exists()


def test_a_swap_only_sweep_records_its_settings_and_its_bound(tmp_path) -> None:
    g, dev = small_training(8, seed=1)
    g.save(tmp_path / "g.json")
    out = tmp_path / "o"
    r = _cli("--graph", tmp_path / "g.json", "--memories", "50%,100%", "--no-recompute", "--out", out,
             "--refine", "none", "--workers", 1, "--no-arena", "--time-limit-per-point", "1s", "--seed", 4,
             "--h2d", "1GB/s", "--d2h", "1GB/s")    # a slow link: the swap-only bound is above the other
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out / "frontier.csv")
    assert (df["recompute"] == False).all() and (df["refine"] == "none").all()   # noqa: E712
    assert df["generations"].isna().all() and (df["device"] == g.device.name).all()
    assert (df["seed"] == 4).all() and (df["time_limit_per_point_s"] == 1.0).all()
    swap = df[df["label"] == "lower bound, any order, swap only"].set_index("usable_bytes")["bound_s"]
    rc = df[df["label"] == "lower bound, any order, with recompute"].set_index("usable_bytes")["bound_s"]
    plans = df[df["kind"] == "plan"]
    assert list(plans["bound_s"]) == list(swap[plans["usable_bytes"]])
    assert any(swap[m] > rc[m] for m in plans["usable_bytes"])   # the two bounds differ here: the test tells
    for _, row in plans.iterrows():
        assert row["makespan_s"] >= row["bound_s"] * (1 - 1e-9)


def test_plan_files_are_named_by_memory_in_mib_each_its_own() -> None:
    assert fr.plan_names([94796032]) == {94796032: "plan-90.40MiB.json"}   # 90.4045 MiB
    close = [94796032, 94796032 + 512, 94796032 + 1]
    names = fr.plan_names(close)
    assert len(set(names.values())) == 3 and all(n.startswith("plan-90.4") and n.endswith("MiB.json")
                                                   for n in names.values())


def test_a_rerun_replaces_only_the_plans_its_previous_table_lists(tmp_path, monkeypatch) -> None:
    import hybrid.pipeline

    g, _ = small_training(8, seed=1)
    g.save(tmp_path / "g.json")
    out = tmp_path / "o"
    r = _cli("--graph", tmp_path / "g.json", "--memories", "50%,100%", "--out", out, *_quick())
    assert r.exit_code == 0, r.output
    first = sorted(p.name for p in (out / "plans").iterdir())
    assert len(first) == 2
    (out / "plans" / "mine.json").write_text("{}")      # not the sweep's: never removed
    (out / "plans" / "plan-1.00MiB.json").write_text("{}")   # named like a plan, but not listed: kept

    def stop(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    with monkeypatch.context() as m:     # Ctrl-C before the first point: the previous run stays whole
        m.setattr(hybrid.pipeline, "run_optimize", stop)
        r = _cli("--graph", tmp_path / "g.json", "--memories", "60%,100%", "--out", out, *_quick())
    assert r.exit_code == 130
    assert set(first) <= {p.name for p in (out / "plans").iterdir()}

    r = _cli("--graph", tmp_path / "g.json", "--memories", "60%,100%", "--out", out, *_quick())
    assert r.exit_code == 0, r.output
    df = pd.read_csv(out / "frontier.csv")
    listed = {Path(p).name for p in df.loc[df["kind"] == "plan", "plan"]}
    left = {p.name for p in (out / "plans").iterdir()}
    assert left == listed | {"mine.json", "plan-1.00MiB.json"}
    assert not (set(first) - listed) & left            # the first run's plans the new table does not list: gone

    before = (out / "frontier.csv").read_text()
    real = hybrid.pipeline.run_optimize
    calls = []

    def infeasible_then_stop(*a: object, **k: object) -> None:
        from hybrid.errors import InfeasibleError

        calls.append(1)
        if len(calls) == 1:
            raise InfeasibleError("no plan fits here")
        raise KeyboardInterrupt

    with monkeypatch.context() as m:     # Ctrl-C after a memory no plan fits: still no plan, the run stays whole
        m.setattr(hybrid.pipeline, "run_optimize", infeasible_then_stop)
        r = _cli("--graph", tmp_path / "g.json", "--memories", "20%,100%", "--out", out, *_quick())
    assert r.exit_code == 130 and (out / "frontier.csv").read_text() == before and real is not None
    assert {p.name for p in (out / "plans").iterdir()} == left

    listed_plan = out / "plans" / sorted(listed)[0]     # a point the sweep would write its own plan over
    mem = next(m for m, n in fr.plan_names([int(x) for x in df.loc[df["kind"] == "plan", "usable_bytes"]]).items()
               if n == listed_plan.name)
    r = _cli("--graph", tmp_path / "g.json", "--memories", f"{mem}B", "--points", listed_plan, "--out", out,
             *_quick())
    assert r.exit_code == 2 and "this sweep writes its plan at that memory to that file" in r.output, r.output

    fresh = tmp_path / "fresh"                           # Ctrl-C before any point: no empty plans/ left
    with monkeypatch.context() as m:
        m.setattr(hybrid.pipeline, "run_optimize", stop)
        r = _cli("--graph", tmp_path / "g.json", "--memories", "60%,100%", "--out", fresh, *_quick())
    assert r.exit_code == 130 and not (fresh / "plans").exists()


def test_the_no_offsets_note_gives_the_layouts_reason(monkeypatch) -> None:
    """A layout's other notes (a part left out, the rest run) come first in `skipped`; the reason is the one that
    says the byte budget is written without offsets, as `hybrid optimize` prints it."""
    import dataclasses

    import hybrid.pipeline

    real = hybrid.pipeline.run_optimize
    why = ("arena layout: none found by the heuristics and re-plans (1.2 s, within the 3 s left); the byte budget "
           "is written without offsets (the executor compacts at run time if it must)")

    def layout_failed(*a: object, **k: object) -> object:
        res = real(*a, **k)
        return dataclasses.replace(res, skipped=[
            "arena layout: its exact search for near misses left out (a process's first use loads or compiles it); "
            "the heuristics and re-plans ran", why])

    monkeypatch.setattr(hybrid.pipeline, "run_optimize", layout_failed)
    g, dev = small_training(8, seed=1)
    lo, peak = fr.memory_range(g, dev)
    row = fr.sweep(g, dev, [peak], 60.0, _options()).rows[0]
    assert row["laid_out"] is False
    assert "none found by the heuristics and re-plans" in row["note"] and "exact search" not in row["note"]


def _figure(monkeypatch, df) -> object:  # noqa: ANN001
    import hybrid.files
    from hybrid.serve.plot import plot_frontier

    got = []
    monkeypatch.setattr(hybrid.files, "save_figure", lambda fig, path: got.append(fig))
    plot_frontier(df, Path("unused.png"), "t")
    return got[0]


def test_the_plot_marks_plans_without_offsets_and_interrupted_points(monkeypatch) -> None:
    g, dev = small_training(8, seed=1)
    lo, peak = fr.memory_range(g, dev)
    rows = [fr._row("plan", "optimize", lo, 3.0, 1.0, laid_out=False, note="written without arena offsets: ..."),
            fr._row("plan", "optimize", (lo + peak) // 2, 2.0, 1.0, laid_out=True, interrupted=True),
            fr._row("plan", "optimize", peak, 1.0, 1.0, laid_out=True)]
    df = fr.frame(fr.monotone(rows) + fr.bound_rows(g, dev, [lo, peak]), g)
    fig = _figure(monkeypatch, df)
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "no arena offsets: compacts at run time" in legend and "hybrid optimize at this memory" in legend
    hollow = [ln for ln in ax.get_lines() if ln.get_label() == "no arena offsets: compacts at run time"][0]
    assert hollow.get_markerfacecolor() == "none" and list(hollow.get_ydata()) == [3000.0]
    assert [t.get_text() for t in ax.texts] == ["interrupted"]
    assert ax.texts[0].xy == (df.loc[df["interrupted"], "usable_MiB"].iloc[0], 2000.0)
    bound = [ln for ln in ax.get_lines() if ln.get_label() == "lower bound, any order, with recompute"][0]
    assert np.isfinite(bound.get_ydata()).any()          # drawn from bound_s


def test_a_memory_below_the_largest_op_names_the_usable_bytes_to_give_on_a_device_with_a_reserve() -> None:
    """--memories states what a plan may fill; the planner's advice on a device with a reserve (the memory
    including it) is rewritten to the usable bytes, which is what a frontier point takes."""
    import dataclasses

    from hybrid.units import format_bytes_up

    g, dev = small_training(10, seed=2)
    dev = dataclasses.replace(dev, memory_bytes=dev.memory_bytes + (1 << 30), reserve_bytes=1 << 30)
    _, need = largest_op(g, dev.alignment_bytes)
    out = fr.sweep(g, dev, [need // 2], 5.0, OptimizeOptions(config=GAConfig(seed=1), generations=1,
                                                              refine="none", baselines=False))
    note = out.rows[0]["note"]
    assert note.startswith("no plan fits") and f"--memories of at least {format_bytes_up(need)}" in note, note
    assert "reserve" not in note and "--memory " not in note
