"""CP-SAT refinement beside the genetic search (`hybrid.refine.beside`): never worse, valid, prompt to stop."""
from __future__ import annotations

import time

import numpy as np
import pytest

from ga import GAConfig, optimize
from ga.algorithm import SearchState, _key
from ga.encoding import Individual
from hybrid.device import Device
from hybrid.refine.beside import BesideRefiner, pick_elites, refine_beside
from hybrid.graph.synthetic import training_graph
from hybrid.validator import validate


def _graph(seed: int):
    return training_graph(10, seed=seed, device=Device("s", 22 << 20, 12e9, 12e9, 0.0), workspace_prob=0.3)


def _ind(order: list[int], makespan: float) -> Individual:
    return Individual(np.array(order, np.int32), np.zeros(1, np.int64), np.ones(1, np.int64), False, 0, makespan)


def test_pick_elites_takes_the_best_then_distinct_fastest_individuals() -> None:
    best = _ind([0, 1, 2], 1.0)
    pop = [_ind([2, 1, 0], 3.0), _ind([0, 1, 2], 1.0), _ind([1, 0, 2], 2.0), _ind([1, 0, 2], 2.0),
           _ind([2, 0, 1], float("inf"))]
    state = SearchState(pop, best, 5, 10, 0.0, np.random.default_rng(0))
    picked = pick_elites(state, 3)
    assert [i.makespan for _, i in picked] == [1.0, 2.0, 3.0]  # the copy of the best and the repeat are skipped
    assert picked[0][0] == _key(best) and len({k for k, _ in picked}) == 3
    assert [i.makespan for _, i in pick_elites(state, 1)] == [1.0]
    assert len(pick_elites(state, 10)) == 3  # an individual that cannot run is never offered
    state.best = _ind([0, 1, 2], float("inf"))
    assert pick_elites(state, 3) == []


@pytest.mark.parametrize("seed", [1, 2])
def test_refining_beside_the_search_never_loses_and_its_plans_validate(seed: int, monkeypatch) -> None:
    import hybrid.refine.beside as beside

    # the grace finish() gives the refiner's last message is a hang guard here (a second or two unloaded): on a
    # loaded machine the default drops that refinement and says so, which is not what this test checks
    monkeypatch.setattr(beside, "GRACE_S", 120.0)
    monkeypatch.setattr(beside, "EARLY_GRACE_S", 120.0)
    g = _graph(seed)
    # work budgets, not seconds: 20 generations, then the refiner (however long its start takes on this machine)
    # refines what it was offered; the test waits for its first refinement, then stops it. The deadline and the
    # waits are hang guards only.
    refiner = BesideRefiner(g, g.device, deadline=time.monotonic() + 600.0, seed=seed, elites=3, patience_s=1.0)
    try:
        res = optimize(g, g.device, GAConfig(population=8, children=8, seed=seed), generations=20,
                       time_limit_s=600.0, workers=1, observe=refiner.offer)
        while refiner._report.refined == 0:       # fold its messages in as finish() does, up to the first run
            kind, body = refiner._outbox.get(timeout=300)
            assert kind != "done", "the refiner stopped without refining what it was offered"
            beside._take(refiner._report, kind, body)
            assert refiner._report.error == "", refiner._report.error
    finally:
        rep = refiner.finish()
    refiner._proc.join(timeout=120)   # a hang guard: finish() waits 2 s, a loaded machine may need longer to exit
    assert not refiner._proc.is_alive()
    assert rep.error == "" and rep.refined >= 1 and len(rep.log) == rep.refined
    assert all(r["makespan_s"] <= r["from_makespan_s"] * (1 + 1e-12) for r in rep.log)  # each run never worse
    if rep.plan is not None:
        assert validate(g, rep.plan).valid and validate(g, rep.from_plan).valid
        assert rep.plan.makespan_s < rep.from_makespan_s == rep.from_plan.makespan_s
        assert rep.plan.schedule == rep.from_plan.schedule  # refinement re-times; the search chose the order
        assert rep.plan.planner["name"] == "ga+cpsat"
    final = min(res.makespan_s, rep.plan.makespan_s if rep.plan is not None else np.inf)
    assert final <= res.makespan_s


def test_the_refiner_stops_soon_after_a_search_that_ends_early(monkeypatch) -> None:
    import hybrid.refine.beside as beside

    monkeypatch.setattr(beside, "EARLY_GRACE_S", 120.0)   # a hang guard: a loaded machine may need more than 10 s
    g = _graph(3)
    t0 = time.monotonic()
    refiner = BesideRefiner(g, g.device, deadline=t0 + 600.0, seed=1, elites=2, patience_s=600.0)
    try:
        optimize(g, g.device, GAConfig(population=8, children=8, seed=1), generations=3, workers=1,
                 observe=refiner.offer)
    finally:
        rep = refiner.finish()
    # it did not wait for the deadline or its patience (600 s away; seconds are typical, this is a hang guard)
    # and left no process behind (finish() waits 2 s for it; a loaded machine may need longer)
    refiner._proc.join(timeout=120)
    assert time.monotonic() - t0 < 300.0 and not refiner._proc.is_alive()
    assert rep.error == ""


def test_auto_refines_beside_only_where_the_search_cannot_use_the_core() -> None:
    assert refine_beside(1e-4, cores=2)                     # cheap evaluations: a pool would not pay
    assert not refine_beside(5e-3, cores=2)                 # the search's pool would use that core
    assert not refine_beside(1e-4, cores=1)                 # no second core
    assert refine_beside(5e-3, cores=4, workers=2)          # cores left over by --workers
    assert not refine_beside(1e-4, cores=2, workers=2)
    assert refine_beside(5e-3, cores=1, scheduler="tcp://head:8786")  # the search runs on a cluster


def test_elites_must_be_positive() -> None:
    from hybrid.errors import HybridError

    g = _graph(1)
    with pytest.raises(HybridError, match="--refine-elites"):
        BesideRefiner(g, g.device, deadline=time.monotonic() + 1.0, elites=0)


def _plan_stub(makespan_s: float):
    """What `BesideReport.pick` reads of a plan: its makespan and planner metadata."""
    from types import SimpleNamespace

    return SimpleNamespace(makespan_s=makespan_s, planner={"name": "ga+cpsat"})


def test_pick_keeps_the_faster_of_the_search_plan_and_the_refined_one() -> None:
    from hybrid.refine.beside import BesideReport

    search = _plan_stub(2.0)
    assert BesideReport().pick(search) is search                        # nothing refined below its start
    faster = _plan_stub(1.5)
    assert BesideReport(plan=faster).pick(search) is faster
    assert faster.planner["search_best_makespan_s"] == 2.0             # what the refined plan won against
    for slower in (_plan_stub(2.5), _plan_stub(2.0)):                   # refined from a slower elite, or a tie
        assert BesideReport(plan=slower).pick(search) is search
        assert "search_best_makespan_s" not in slower.planner


def test_compare_beside_keeps_the_faster_of_its_search_and_the_refined_plans(tmp_path) -> None:
    from hybrid.plan import Plan
    from hybrid.report.compare import COLUMNS, compare

    g = _graph(1)
    # a work budget: the refiner takes an offer at generations 0, 3 and 6 of 7 and solves 2 CP-SAT windows (on
    # deterministic time) on each, so the seed fixes what it refined and found whatever the machine's speed (the
    # time limit is a hang guard). Here the windows re-time the search's best below what it reached in 7 generations
    df = compare(g, time_limit_s=120.0, seeds=(1,), out_dir=tmp_path, ga_config=GAConfig(population=8, children=8),
                 mode="beside", elites=3, generations=7, windows=2, lockstep=3)
    assert list(df.columns) == COLUMNS and set(df["mode"]) == {"beside"}
    seeds = df[df["row"] == "seed"]
    assert set(seeds["budget"]) == {"work"}
    hy = seeds[seeds["arm"] == "ga+cpsat"].iloc[0]
    assert hy["refined_plans"] == 3 and 1 <= hy["refine_accepted"] <= hy["refine_windows"] <= 3 * 2
    # the faster plan is the refined one, and the arm kept it (its own search's best is the slower)
    assert hy["final_from"] == "cpsat"
    assert hy["makespan_s"] < hy["arm_ga_makespan_s"] and hy["makespan_s"] < hy["split_makespan_s"]
    assert hy["window_gain"] > 0 and hy["gain_vs_ga"] > 0
    kept = Plan.load(tmp_path / f"{g.name}-seed1-ga+cpsat.json")
    split = Plan.load(tmp_path / f"{g.name}-seed1-split.json")  # the search plan the refined one came from
    assert validate(g, kept).valid and validate(g, split).valid
    assert kept.makespan_s == pytest.approx(hy["makespan_s"], rel=1e-12)
    assert split.makespan_s == pytest.approx(hy["split_makespan_s"], rel=1e-12)
    assert kept.planner["name"] == "ga+cpsat" and kept.schedule == split.schedule  # re-timed, same order
    assert kept.planner["search_best_makespan_s"] == pytest.approx(hy["arm_ga_makespan_s"], rel=1e-12)
    assert df[df["arm"] == "ga"]["workers"].iloc[0] == 2 and hy["workers"] == 1  # the refiner's core


def test_compare_beside_on_a_time_limit_refines_on_its_own_core_and_writes_both_plans(tmp_path) -> None:
    from hybrid.report.compare import COLUMNS, compare

    g = _graph(1)
    df = compare(g, time_limit_s=4.0, seeds=(1,), out_dir=tmp_path, ga_config=GAConfig(population=8, children=8),
                 mode="beside", elites=2)
    assert list(df.columns) == COLUMNS and set(df["mode"]) == {"beside"}
    hy = df[(df["row"] == "seed") & (df["arm"] == "ga+cpsat")].iloc[0]
    assert hy["budget"] == "time"
    # which plans the refiner process saw in 4 s depends on this machine's speed (the test above fixes them with a
    # work budget): whatever it found, the arm kept the faster plan, and says where it came from
    assert hy["makespan_s"] <= hy["arm_ga_makespan_s"] * (1 + 1e-12)
    assert (hy["final_from"] == "cpsat") == (hy["makespan_s"] < hy["arm_ga_makespan_s"])
    assert hy["search_s"] < 4.0 * 5  # a hang guard: the budget plus a short wait for the refiner's last message
    assert len(list(tmp_path.glob("*-seed1-ga*.json"))) == 2
    split = tmp_path / f"{g.name}-seed1-split.json"  # written when a refinement lowered a makespan
    assert split.exists() == (not np.isnan(hy["split_makespan_s"]))
    if hy["final_from"] == "cpsat":
        assert split.exists()
    if split.exists():
        from hybrid.plan import Plan

        assert Plan.load(split).makespan_s == pytest.approx(hy["split_makespan_s"])
    assert df[df["arm"] == "ga"]["workers"].iloc[0] == 2 and hy["workers"] == 1  # the refiner's core


_DEAD_REFINER = """
import multiprocessing.spawn as sp, time
from multiprocessing import resource_tracker
resource_tracker.ensure_running()      # started by the real interpreter: it is spawned the same way
sp.set_executable("/bin/false")        # the refiner's interpreter dies at once, reading nothing
from dataclasses import replace
from hybrid.device import preset
from hybrid.graph.synthetic import training_graph
from hybrid.refine.beside import BesideRefiner
g = training_graph(300, seed=1)
assert len(g.dumps()) > 256 * 1024     # more than a pipe holds
r = BesideRefiner(g, replace(preset("v100-16gb"), memory_bytes=1 << 30), deadline=time.monotonic() + 3)
print("returned:", r.finish().error)
"""


def test_a_refiner_that_dies_as_it_starts_is_reported_not_waited_for(tmp_path) -> None:
    # the graph goes to the refiner through its inbox, not with the new interpreter's arguments, which this
    # process writes to its pipe itself: there, more than the pipe holds failed (BrokenPipeError out of the
    # search) or blocked for good when the child died starting
    import os
    import subprocess
    import sys
    from pathlib import Path

    if not Path("/bin/false").exists():
        pytest.skip("no /bin/false")
    script = tmp_path / "dead.py"
    script.write_text(_DEAD_REFINER)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "returned: the refiner process ended" in done.stdout
