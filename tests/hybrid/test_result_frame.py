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



def test_the_written_rows_bound_is_its_own_kinds_whichever_the_search_computed(found) -> None:
    """The search computes the bound of the kind it searched; a written plan of the other kind (a swap-only plan
    of a search with recompute) still gets its own bound in `frame(graph)`, not NaN."""
    import dataclasses
    import math

    g, r = found
    other = not r.plan.recomputes
    row = dataclasses.replace(r, baselines=None, bounds={other: 1.0}).frame(g).iloc[0]
    assert math.isfinite(row["graph_bound_s"]) and 0 < row["graph_bound_s"] <= row["makespan_s"]
    assert row["graph_bound_s"] != 1.0   # its own kind's, computed; not the other kind's given


def test_a_search_that_stopped_for_its_reserve_says_so_and_names_the_time_left(found) -> None:
    """A short limit's reserve (sized before the search) may outlast a quick layout: the summary does not say
    the time limit stopped a run that ended with seconds to spare."""
    import dataclasses

    g, r = found
    early = dataclasses.replace(r, search=dataclasses.replace(r.search, stop_reason="time limit"),
                                budget=dataclasses.replace(r.budget, total_s=10.0))
    text = optimize_text(g, None, early, wall_s=4.5)
    assert "stopped: its share of the time limit (the rest was kept for the layout: see time)" in text
    assert "5.5 s left unused" in text
    full = optimize_text(g, None, early, wall_s=9.8)   # within a second of the limit: the time limit stopped it
    assert "stopped: time limit" in full and "left unused" not in full
