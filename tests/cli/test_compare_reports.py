"""`hybrid compare` keeps what it measured: a MILP arm that finds no plan is a row saying why (the GA arms'
rows and the table stand), and the schedule bound is never below the graph bound."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pandas as pd

from hybrid.graph.synthetic import training_graph
from tests.cli.helpers import run


def _graph(tmp_path: Path) -> Path:
    p = tmp_path / "g.json"
    training_graph(4, seed=1, impls_prob=0.6, workspace_prob=0.3).save(p)
    return p


def test_a_milp_arm_without_a_plan_is_a_row_and_the_table_is_written(tmp_path: Path, monkeypatch) -> None:
    import milp.api

    def no_plan(*_a, **_k):   # the model proven infeasible at its stages: no incumbent, no plan
        return SimpleNamespace(plan=None, stages=3, result=SimpleNamespace(status="infeasible",
                                                                           solver_status="Infeasible", solve_s=0.5))

    monkeypatch.setattr(milp.api, "plan_milp", no_plan)
    out = tmp_path / "c"
    res = run("compare", "--graph", _graph(tmp_path), "--memory", "24MiB", "--time-limit", "2s", "--seeds", "1",
              "--refine-mode", "after", "--population", "8", "--with-milp", "5s", "--out-dir", out)
    assert res.exit_code == 0, res.output
    assert "MO-SOS MILP found no plan: the 3-stage model is infeasible at this memory" in res.output
    df = pd.read_csv(out / "compare.csv")
    milp = df[(df["arm"] == "milp") & (df["row"] == "seed")]
    assert len(milp) == 1 and milp["milp_status"].iloc[0] == "infeasible" and milp["makespan_s"].isna().all()
    assert len(df[(df["arm"] == "ga") & (df["row"] == "seed")]) == 1
    seeds = df[df["row"] == "seed"].dropna(subset=["makespan_s"])
    assert (seeds["schedule_bound_s"] >= seeds["graph_bound_s"]).all()
