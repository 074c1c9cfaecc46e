"""`hybrid compare`: its arms search as `hybrid optimize` does, bad seeds and memory fractions are refused in one
line, printed times tell the arms apart, and --generations/--windows make a run reproducible."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

import hybrid.report.compare as report
from hybrid.cli.main import cli
from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph.synthetic import training_graph
from hybrid.pipeline import OptimizeOptions


class _Stop(Exception):
    """Raised by a stand-in once it has seen what it was called with: no search runs."""


@pytest.fixture()
def graph_file(tmp_path: Path) -> Path:
    g = training_graph(10, seed=1, device=Device("s", 22 << 20, 12e9, 12e9, 0.0), workspace_prob=0.3)
    path = tmp_path / "g.json"
    g.save(path)
    return path


def _invoke(*args: object):  # noqa: ANN202 - click's Result
    return CliRunner().invoke(cli, ["compare", *map(str, args)])


@pytest.mark.parametrize("flag, recompute", [("--recompute", True), ("--no-recompute", False)])
def test_cli_arms_search_from_optimizes_planner_options(graph_file, tmp_path, monkeypatch, flag, recompute) -> None:
    """The GA-only arm is `hybrid optimize --refine none --no-arena`: it was run with PlannerOptions' own
    defaults (no rerun re-binding, no long chains), a weaker planner (ResNet-18: 12.97 against 10.61 ms)."""
    seen = {}

    def fake(graph, device, **kw):  # noqa: ANN001, ANN202
        seen.update(kw)
        raise _Stop

    monkeypatch.setattr(report, "compare", fake)
    r = _invoke("--graph", graph_file, "--time-limit", "1s", "--seeds", "1", "--refine-mode", "after", flag,
                "--out-dir", tmp_path / "c")
    assert isinstance(r.exception, _Stop), r.output
    assert seen["options"] == OptimizeOptions(recompute=recompute).planner_options()


def test_api_default_options_are_optimizes(monkeypatch) -> None:
    seen = []

    def fake(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        seen.append(args[12])   # _seed_rows(graph, device, cfg, ..., out, options, work)
        raise _Stop

    monkeypatch.setattr(report, "_seed_rows", fake)
    g = training_graph(6, seed=1, device=Device("s", 22 << 20, 12e9, 12e9, 0.0))
    with pytest.raises(_Stop):
        report.compare(g, time_limit_s=1.0, seeds=(1,))
    assert seen == [OptimizeOptions().planner_options()]


@pytest.mark.parametrize("seeds, words", [("1,2,1", ["seed 1 twice"]), ("-1", ["negative", "-1"]),
                                          ("2,-3", ["negative", "-3"])])
def test_bad_seeds_are_one_line_naming_the_seed(graph_file, tmp_path, seeds, words) -> None:
    r = _invoke("--graph", graph_file, "--time-limit", "1s", f"--seeds={seeds}", "--out-dir", tmp_path / "c")
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: --seeds") and r.output.count("\n") == 1, r.output
    assert all(w in r.output for w in words), r.output
    assert not (tmp_path / "c").exists() or not list((tmp_path / "c").iterdir())


def test_api_refuses_repeated_and_negative_seeds() -> None:
    g = training_graph(6, seed=1, device=Device("s", 22 << 20, 12e9, 12e9, 0.0))
    with pytest.raises(HybridError, match="seed 2 twice"):
        report.compare(g, time_limit_s=1.0, seeds=(2, 2))
    with pytest.raises(HybridError, match="negative"):
        report.compare(g, time_limit_s=1.0, seeds=(-1,))


@pytest.mark.parametrize("fraction", ["1e-9", "0.001"])
def test_a_memory_fraction_below_the_largest_op_names_the_flag(graph_file, tmp_path, fraction) -> None:
    from hybrid.graph import Graph
    from hybrid.graph.info import largest_op
    from hybrid.units import format_bytes

    g = Graph.load(graph_file)
    r = _invoke("--graph", graph_file, "--time-limit", "1s", "--seeds", "1", "--memory-fraction", fraction,
                "--out-dir", tmp_path / "c")
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: --memory-fraction") and r.output.count("\n") == 1, r.output
    assert format_bytes(largest_op(g, g.device.alignment_bytes)[1]) in r.output
    least = float(r.output.split("give --memory-fraction ")[1].split()[0])
    # the fraction it suggests is enough for the largest op, and not far above it
    from hybrid.graph.info import fraction_of_peak

    need = largest_op(g, g.device.alignment_bytes)[1]
    assert fraction_of_peak(g, least) >= need > fraction_of_peak(g, least * 0.98)


def _table(ga_s: float, hy_s: float) -> pd.DataFrame:
    """A compare table of one seed with these makespans (the other figures made up)."""
    rows = []
    for arm, t in (("ga", ga_s), ("ga+cpsat", hy_s)):
        r = {c: np.nan for c in report.COLUMNS}
        r.update(graph="g", memory_bytes=1 << 20, arm=arm, row="seed", seed=1, makespan_s=t, ideal_s=3e-4,
                 gain_vs_ga=1 - t / ga_s, search_s=14.91, wall_s=15.02, final_from="",
                 mode="after", budget="time", milp_status="", plan="")
        r["makespan/graph_bound"] = 1.1
        rows.append(r)
    return report.with_medians(pd.DataFrame(rows, columns=report.COLUMNS))


def test_printed_and_markdown_times_tell_the_arms_apart(graph_file, tmp_path, monkeypatch) -> None:
    """Both arms read `0.0003933` (raw seconds, 4 digits) although they differed; CSV keeps raw seconds."""
    df = _table(3.93312e-4, 3.93347e-4)

    def fake(graph, device, **kw):  # noqa: ANN001, ANN202
        return df

    monkeypatch.setattr(report, "compare", fake)
    r = _invoke("--graph", graph_file, "--time-limit", "1s", "--seeds", "1", "--refine-mode", "after",
                "--out-dir", tmp_path / "c")
    assert r.exit_code == 0, r.output
    assert "393.31 us" in r.output and "393.35 us" in r.output, r.output
    assert "0.0003933" not in r.output
    md = (tmp_path / "c" / "compare.md").read_text()
    assert "393.31 us" in md and "393.35 us" in md and "15.02 s" in md, md
    back = pd.read_csv(tmp_path / "c" / "compare.csv")
    assert set(back.loc[back["row"] == "seed", "makespan_s"]) == {3.93312e-4, 3.93347e-4}


def test_time_digits_ignore_re_timing_noise_and_units_follow_magnitude() -> None:
    assert report.time_digits([0.01061, 0.01297]) == 4
    assert report.time_digits([0.0106, 0.0106 * (1 + 1e-13)]) == 4   # the same plan re-timed
    assert report.seconds_text(0.01061) == "10.61 ms" and report.seconds_text(12.5) == "12.5 s"
    assert report.seconds_text(np.nan) == "" and report.seconds_text(3e-7) == "300 ns"
    p = report.printable(pd.DataFrame({"makespan_s": [1.000001, 1.000002], "wall_s": [10.0001, 10.0002],
                                       "gain_vs_ga": [0.1, 0.2]}))
    assert list(p["makespan_s"]) == ["1.000001 s", "1.000002 s"]
    assert list(p["wall_s"]) == ["10 s", "10 s"] and list(p["gain_vs_ga"]) == [0.1, 0.2]


def test_work_budget_flags(graph_file, tmp_path, monkeypatch) -> None:
    r = CliRunner().invoke(cli, ["compare", "--help"])
    assert "--generations" in r.output and "--windows" in r.output and "reproducible" in r.output
    for args, words in ((["--generations", "4"], "together"), (["--windows", "2"], "together"),
                        (["--generations", "4", "--windows", "2", "--refine-mode", "beside"], "--refine-mode after"),
                        (["--generations", "0", "--windows", "2"], "--generations")):
        r = _invoke("--graph", graph_file, "--seeds", "1", *args, "--out-dir", tmp_path / "c")
        assert r.exit_code == 2 and words in r.output, r.output
    seen = {}

    def fake(graph, device, **kw):  # noqa: ANN001, ANN202
        seen.update(kw)
        raise _Stop

    monkeypatch.setattr(report, "compare", fake)
    r = _invoke("--graph", graph_file, "--seeds", "1", "--generations", "9", "--windows", "3",
                "--out-dir", tmp_path / "c")
    assert isinstance(r.exception, _Stop), r.output
    assert (seen["generations"], seen["windows"], seen["mode"]) == (9, 3, "after")


def test_work_budget_runs_repeat_from_the_cli(graph_file, tmp_path) -> None:
    """The same seed and work budget give the same plans: what a wall-time budget cannot promise."""
    tables = []
    for k in range(2):
        r = _invoke("--graph", graph_file, "--time-limit", "2m", "--seeds", "1", "--population", "8",
                    "--generations", "4", "--windows", "2", "--out-dir", tmp_path / str(k))
        assert r.exit_code == 0, r.output
        tables.append(pd.read_csv(tmp_path / str(k) / "compare.csv"))
    keep = ["arm", "row", "seed", "makespan_s", "ga_generations", "resumed_generations", "refine_windows", "budget"]
    pd.testing.assert_frame_equal(tables[0][keep], tables[1][keep])
    assert set(tables[0]["budget"]) == {"work"} and set(tables[0]["mode"]) == {"after"}


def test_two_modes_concatenated_keep_a_median_and_a_summary_line_each() -> None:
    """compare.summary() took one mode's medians (.iloc[0]) and the other's worst seed for one line; the medians'
    milp_status was NaN beside '' (a mixed column, str after Parquet). A pandas user's review, helper-100."""
    after = _table(1.0e-3, 0.9e-3)
    beside = _table(1.0e-3, 0.8e-3)
    beside["mode"] = "beside"
    seeds = pd.concat([after, beside], ignore_index=True)
    seeds = seeds[seeds["row"] == "seed"]
    both = report.with_medians(seeds)
    med = both[both["row"] == "median"]
    assert len(med) == 4 and set(med["mode"]) == {"after", "beside"}
    assert (both["milp_status"] == "").all()
    s = report.summary(both).set_index("mode")
    assert s.loc["after", "ga+cpsat_makespan_s"] == 0.9e-3 and s.loc["beside", "ga+cpsat_makespan_s"] == 0.8e-3
    assert abs(s.loc["after", "worst_seed_gain"] - 0.1) < 1e-12 and abs(s.loc["beside", "median_gain"] - 0.2) < 1e-12
    with pytest.raises(HybridError, match=r"summary\(\) takes compare\(\)'s table .* no column 'row'"):
        report.summary(pd.DataFrame({"makespan_s": [1.0]}))


@pytest.mark.parametrize("kw, says", [
    ({"seeds": 1}, r"seeds \(--seeds\) must be a sequence of whole numbers such as \(1, 2, 3\), got 1"),
    ({"mode": "auto"}, r"mode \(--refine-mode\) must be one of beside, after, got 'auto' \(`hybrid compare"),
    ({"time_limit_s": "0s"}, r"--time-limit must be positive and finite"),
])
def test_compare_from_python_refuses_natural_mistakes_in_one_line(graph_file, kw, says) -> None:
    """seeds=1 was "'int' object is not iterable", time_limit_s="5s" a TypeError (run_optimize takes it)."""
    from hybrid.graph import Graph

    g = Graph.load(graph_file)
    args = {"time_limit_s": 5, "seeds": (1,), **kw}
    with pytest.raises(HybridError, match=says):
        report.compare(g, g.device, **args)
