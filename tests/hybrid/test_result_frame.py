"""What `hybrid optimize` prints is there for a library caller: `OptimizeResult.frame()` is its table as a
DataFrame (the rows `--json` gives as "baselines"), `hybrid.report.summary.optimize_text` its text."""
from __future__ import annotations

import pytest

from ga import GAConfig
from hybrid.device import resolve_device
from hybrid.graph import Graph
from hybrid.pipeline import OptimizeOptions, run_optimize
from hybrid.report.summary import optimize_json, optimize_text
from tests.cli.helpers import RESNET


@pytest.fixture(scope="module")
def found():
    g = Graph.load(RESNET)
    dev = resolve_device(g.device, None, "64MiB")
    return g, run_optimize(g, dev, 60, OptimizeOptions(config=GAConfig(seed=1), generations=2, baselines=True))


def test_frame_is_the_json_tables_rows(found) -> None:
    g, r = found
    df = r.frame(g)
    assert list(df["plan"]) == [row["plan"] for row in optimize_json(r, 0.0)["baselines"]]
    belady = next(row for row in r.baselines.rows if row["plan"] == "belady")
    assert df.loc[df["plan"] == "belady", "makespan_s"].iloc[0] == belady["makespan_s"]
    alone = type(r)(**{**vars(r), "baselines": None}).frame(g)
    assert len(alone) == 1 and alone["makespan_s"].iloc[0] == r.plan.makespan_s and alone["peak_bytes"].iloc[0] > 0
    # the written plan's row is selected the same way in both forms (its label differs: "optimize", "optimize,
    # written (exact offsets)", "optimize, written")
    for table in (df, alone):
        mine = table[table["written"]]
        assert len(mine) == 1 and mine["makespan_s"].iloc[0] == r.plan.makespan_s
    assert [row["written"] for row in optimize_json(r, 0.0)["baselines"]] == list(df["written"])


def test_summary_is_the_commands_text(found) -> None:
    g, r = found
    text = optimize_text(g, None, r)
    assert text.startswith("plan (not written): makespan ") and "belady" in text
    assert optimize_text(g, None, r, ["p.json"]).startswith("wrote p.json: makespan ")
