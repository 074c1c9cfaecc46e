"""Work budgets for the refinement comparison: a seed fixes every figure but the measured seconds (issue 21)."""
from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from ga import GAConfig, optimize
from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph.synthetic import training_graph
from hybrid.refine import RefineOptions, refine
from hybrid.refine.beside import Lockstep
from hybrid.refine.handoff import WorkBudget, refine_then_resume
from hybrid.report.compare import compare
from hybrid.validator import check

TIMINGS = ["search_s", "wall_s", "refine_s", "resume_s", "plan"]
CFG = GAConfig(population=8, children=8)


def _graph(seed: int):
    return training_graph(10, seed=seed, device=Device("s", 22 << 20, 12e9, 12e9, 0.0), workspace_prob=0.3)


def _figures(df: pd.DataFrame) -> pd.DataFrame:
    return df.drop(columns=TIMINGS).reset_index(drop=True)


def test_after_on_a_work_budget_repeats_exactly(tmp_path) -> None:
    g = _graph(1)
    runs = [compare(g, time_limit_s=120.0, seeds=(1, 2), ga_config=CFG, mode="after", generations=10, windows=4,
                    out_dir=tmp_path / str(k)) for k in range(2)]
    pd.testing.assert_frame_equal(_figures(runs[0]), _figures(runs[1]))
    seeds = runs[0][runs[0]["row"] == "seed"]
    assert set(seeds["budget"]) == {"work"}
    ga = seeds[seeds["arm"] == "ga"]
    assert (ga["ga_generations"] == 10).all() and (ga["resumed_generations"] == 2).all()  # split at 8 of 10
    hy = seeds[seeds["arm"] == "ga+cpsat"]
    assert (hy["refine_windows"] <= 4).all()
    # refinement hands back the generations of the windows it left unused, never more than GA-only resumed
    assert (hy["resumed_generations"] <= 2).all()


def test_work_budget_hands_back_the_share_of_unused_windows() -> None:
    w = WorkBudget(windows=10, generations=20, patience_windows=2)
    assert [w.handed_back(k) for k in (0, 3, 10, 12)] == [20, 14, 0, 0]
    assert WorkBudget.patience_of(100) == 10 and WorkBudget.patience_of(5) == 2 and WorkBudget.patience_of(5, None) is None
    with pytest.raises(HybridError, match="--windows"):
        WorkBudget(windows=0, generations=3)


def test_refine_then_resume_counts_windows_and_generations(tmp_path) -> None:
    g = _graph(1)  # a graph whose split plan stalls, so windows are solved
    ckpt = tmp_path / "split.ckpt"
    split = optimize(g, g.device, CFG, generations=4, checkpoint=ckpt, checkpoint_every=0)
    work = WorkBudget(windows=6, generations=8, patience_windows=1)
    hand = refine_then_resume(g, g.device, split.to_plan(), ckpt, deadline=time.monotonic() + 120, seed=1, work=work)
    assert hand.refine.windows <= 6
    if hand.resumed is None:
        assert work.handed_back(hand.refine.windows) == 0 or hand.refine.stop == "window budget"
    else:
        assert hand.resumed.generations == 4 + work.handed_back(hand.refine.windows)
    check(g, hand.plan)


def test_window_patience_stops_refinement_after_windows_without_a_gain() -> None:
    g = _graph(1)
    plan = optimize(g, g.device, CFG, generations=2).to_plan()
    res = refine(g, plan, time_limit_s=60, options=RefineOptions(window_time_s=0.05, patience_windows=1,
                                                                  max_windows=12))
    assert res.stop in ("stalled", "converged", "window budget")
    if res.stop == "stalled":  # the first window without a gain ends it (a gain resets the count)
        assert 1 <= res.windows <= res.accepted + 1


def test_beside_in_lockstep_repeats_exactly(tmp_path) -> None:
    g = _graph(1)
    runs = [compare(g, time_limit_s=120.0, seeds=(1,), ga_config=CFG, mode="beside", generations=6, windows=3,
                    lockstep=2, second_core_ratio=1.5, elites=2, out_dir=tmp_path / str(k)) for k in range(2)]
    pd.testing.assert_frame_equal(_figures(runs[0]), _figures(runs[1]))
    seeds = runs[0][runs[0]["row"] == "seed"]
    ga = seeds[seeds["arm"] == "ga"].iloc[0]
    hy = seeds[seeds["arm"] == "ga+cpsat"].iloc[0]
    assert ga["ga_generations"] == 9 and hy["ga_generations"] == 6  # round(1.5 * 6) for the extra process
    assert hy["makespan_s"] <= hy["arm_ga_makespan_s"] * (1 + 1e-12)
    assert 1 <= hy["refined_plans"] <= 4 and hy["refine_windows"] <= 3 * hy["refined_plans"]  # offers at 0, 2, 4, 6
    assert set(seeds["budget"]) == {"work"}


def test_lockstep_takes_one_new_offer_every_n_generations() -> None:
    # a graph whose offered plans stall: with 2 windows each (on deterministic time), CP-SAT re-times the copies of
    # an offered plan faster; the seed and the window count fix that whatever the machine's speed
    g = _graph(1)
    lock = Lockstep(every=3, windows=2, elites=3)
    taken_at: list[int] = []

    def observe(state) -> None:  # noqa: ANN001 - ga.algorithm.SearchState
        before = len(lock.offers)
        lock.offer(state)
        taken_at.extend([state.generation] * (len(lock.offers) - before))

    optimize(g, g.device, CFG, generations=7, observe=observe)
    keys = [o[0] for _, o in lock.offers]
    assert taken_at == [0, 3, 6] and len(set(keys)) == 3  # one new genome at generations 0, 3 and 6
    rep = lock.refine(g, g.device, seed=1)
    assert rep.refined == 3 and [e["rank"] for e in rep.log] == [rank for rank, _ in lock.offers]
    assert 1 <= rep.windows <= 2 * 3 and all(e["windows"] <= 2 for e in rep.log)
    assert rep.accepted >= 1 and rep.improved >= 1   # a window lowered an offered plan's makespan
    assert rep.plan is not None and rep.from_plan is not None
    check(g, rep.plan)
    check(g, rep.from_plan)
    assert rep.plan.makespan_s < rep.from_makespan_s == rep.from_plan.makespan_s
    assert any(rep.from_makespan_s == pytest.approx(o[-1], rel=1e-9) for _, o in lock.offers)  # one it was offered
    assert rep.plan.schedule == rep.from_plan.schedule              # refinement re-times; the search chose the order
    # the report keeps the fastest refinement of all
    assert rep.plan.makespan_s == pytest.approx(min(e["makespan_s"] for e in rep.log), rel=1e-12)


@pytest.mark.parametrize("kw, match", [
    ({"mode": "after", "generations": 4}, "together"),
    ({"mode": "beside", "generations": 4, "windows": 2}, "--lockstep"),
    ({"mode": "after", "generations": 4, "windows": 2, "lockstep": 2}, "--lockstep"),
    ({"mode": "beside", "generations": 4, "windows": 2, "lockstep": 2, "second_core_ratio": 0.0}, "ratio"),
])
def test_work_budget_flags_are_checked(kw, match) -> None:
    with pytest.raises(HybridError, match=match):
        compare(_graph(1), time_limit_s=5.0, seeds=(1,), ga_config=CFG, **kw)


def test_per_graph_counts() -> None:
    from benchmarks.refine_compare import per_graph

    spec = "40,segnet_32_416_608_3_train=300"
    assert per_graph(spec, "inception-v4-4", "--generations") == 40
    assert per_graph(spec, "segnet_32_416_608_3_train@0.5", "--generations") == 300
    assert per_graph(None, "x", "--windows") is None
    with pytest.raises(SystemExit, match="no count"):
        per_graph("a=1", "b", "--windows")
    with pytest.raises(SystemExit, match="not a count"):
        per_graph("x", "b", "--windows")
    assert np.isfinite(per_graph("7", "any", "--windows"))
