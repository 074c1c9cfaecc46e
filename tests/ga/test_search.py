"""The whole search: valid plans, determinism, checkpoint/resume, search and pool modes, evaluation backends."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ga import GAConfig, optimize
from ga.algorithm import GeneticSearch
from ga.encoding import SearchSpace
from ga.evaluation import ProcessPoolEvaluator, SerialEvaluator
from ga.termination import Termination
from hybrid.swap.baselines import run_baseline
from hybrid.errors import HybridError, InfeasibleError
from hybrid.graph.order import program_order
from hybrid.swap.augmented import PlannerOptions
from hybrid.validator import check
from tests.ga.graphs import MB, small_random, small_training, two_size_graph

SMALL = GAConfig(population=8, children=8, seed=3)


def plan_json(result) -> dict:  # noqa: ANN001
    d = result.to_plan().to_json()
    d["planner"] = {k: v for k, v in d["planner"].items() if k not in ("search_time_s", "evaluator", "workers", "evaluations", "cache_hits")}
    return d


@pytest.fixture(scope="module")
def training():
    return small_training(14, seed=2)


def test_plans_validate_and_beat_or_match_belady_on_program_order(training) -> None:
    g, dev = training
    r = optimize(g, dev, SMALL, generations=4)
    plan = r.to_plan()
    check(g, plan)
    assert plan.makespan_s == pytest.approx(r.makespan_s)
    assert r.makespan_s <= run_baseline(g, dev, "belady").makespan_s * (1 + 1e-12)
    assert r.generations == 4 and r.stop_reason == "generations"
    assert r.evaluations + r.cache_hits >= 4 * SMALL.children + SMALL.population // 2
    df = r.log_frame()
    assert list(df["generation"]) == [0, 1, 2, 3, 4]
    assert (np.diff(df["best_ever_s"]) <= 0).all()
    assert (df["best_s"] <= df["mean_s"]).all() and (df["mean_s"] <= df["worst_s"]).all()


def test_serial_mode_is_deterministic(training) -> None:
    g, dev = training
    one = optimize(g, dev, SMALL, generations=3)
    two = optimize(g, dev, SMALL, generations=3)
    assert plan_json(one) == plan_json(two)
    assert [r.mean_s for r in one.log.rows] == [r.mean_s for r in two.log.rows]


def test_checkpoint_resume_continues_identically(training, tmp_path) -> None:
    g, dev = training
    ck = tmp_path / "ga.ckpt"
    straight = optimize(g, dev, SMALL, generations=6)
    first = optimize(g, dev, SMALL, generations=3, checkpoint=ck, checkpoint_every=1)
    assert first.generations == 3 and ck.exists()
    resumed = optimize(g, dev, GAConfig(population=99, seed=999), generations=6, resume=ck)  # config from the file
    assert resumed.generations == 6
    assert plan_json(resumed) == plan_json(straight)
    assert [r.best_ever_s for r in resumed.log.rows] == [r.best_ever_s for r in straight.log.rows]
    assert resumed.evaluations >= straight.evaluations  # the resumed run starts with an empty fitness cache


def test_resume_refuses_another_graph(training, tmp_path) -> None:
    g, dev = training
    ck = tmp_path / "ga.ckpt"
    optimize(g, dev, SMALL, generations=1, checkpoint=ck)
    g2, dev2 = small_training(10, seed=5)
    with pytest.raises(HybridError, match="another graph"):
        optimize(g2, dev2, SMALL, generations=2, resume=ck)


def test_process_pool_gives_the_serial_search(training) -> None:
    g, dev = training
    serial = optimize(g, dev, SMALL, generations=2, workers=1)
    pooled = optimize(g, dev, SMALL, generations=2, workers=2)
    assert pooled.evaluator == "processes" and pooled.workers == 2
    assert plan_json(pooled) == plan_json(serial)
    check(g, pooled.to_plan())


def test_dask_local_cluster_gives_the_serial_search(training) -> None:
    distributed = pytest.importorskip("distributed")
    from ga.evaluation import DaskEvaluator

    g, dev = training
    serial = optimize(g, dev, SMALL, generations=2, workers=1)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None) as cl, \
            distributed.Client(cl) as client:
        ev = DaskEvaluator(g, dev, PlannerOptions(), client=client)
        r = optimize(g, dev, SMALL, generations=2, evaluator=ev)
    assert r.evaluator == "dask"
    assert plan_json(r) == plan_json(serial)
    check(g, r.to_plan())


def test_search_modes_keep_the_other_part_fixed(training) -> None:
    g, dev = training
    sched = optimize(g, dev, GAConfig(population=8, children=8, search="schedule"), generations=2)
    pools = {(i.by_bytes, i.cls.tobytes(), i.cnt.tobytes()) for i in [sched.best]}
    assert len(pools) == 1
    alloc = optimize(g, dev, GAConfig(population=8, children=8, search="allocation"), generations=2)
    assert np.array_equal(alloc.best.schedule, program_order(g))
    for r in (sched, alloc):
        check(g, r.to_plan())


def test_schedule_search_population_shares_one_pool(training) -> None:
    g, dev = training
    space = SearchSpace.build(g, dev)
    search = GeneticSearch(space, GAConfig(population=8, children=8, search="schedule"), SerialEvaluator(g, dev, PlannerOptions()))
    search.initialize()
    for _ in range(2):
        search.step()
    pools = {(i.by_bytes, i.cls.tobytes(), i.cnt.tobytes()) for i in search.state.population}
    assert len(pools) == 1


@pytest.mark.parametrize("pool, kind", [("classes", "size_classes"), ("bytes", "unconstrained")])
def test_pool_kinds(training, pool: str, kind: str) -> None:
    g, dev = training
    r = optimize(g, dev, GAConfig(population=8, children=8, pool=pool), generations=2)  # type: ignore[arg-type]
    plan = r.to_plan()
    assert plan.allocation.kind == kind
    check(g, plan)


def test_time_limit_and_stop_keep_the_best_so_far(training) -> None:
    g, dev = training
    r = optimize(g, dev, GAConfig(population=8, children=8), time_limit_s=0.5)
    assert r.stop_reason == "time limit"
    check(g, r.to_plan())
    term = Termination(generations=100)
    term.interrupted = True
    space = SearchSpace.build(g, dev)
    search = GeneticSearch(space, SMALL, SerialEvaluator(g, dev, PlannerOptions()))
    assert search.run(term) == "interrupted"
    assert np.isfinite(search.state.best.makespan)  # the seeds are always evaluated


def test_abandoned_generation_replays_identically(training) -> None:
    g, dev = training
    space = SearchSpace.build(g, dev)
    a = GeneticSearch(space, SMALL, SerialEvaluator(g, dev, PlannerOptions()))
    a.initialize()
    calls = iter(range(100))
    assert not a.step(stop=lambda: next(calls) >= 3)  # stop after a few children
    assert a.state.generation == 0
    a.step()
    b = GeneticSearch(space, SMALL, SerialEvaluator(g, dev, PlannerOptions()))
    b.initialize()
    b.step()
    assert [i.makespan for i in a.state.population] == [i.makespan for i in b.state.population]


def test_a_checkpoint_after_an_abandoned_generation_counts_what_a_resume_does_not_replay(training, tmp_path) -> None:
    """A stop mid-generation: the checkpoint's evaluations leave out that generation's (a resume replays it; they
    were counted twice, a resumed plan's `evaluations` over an uninterrupted one's), the search's result counts
    them (work it did)."""
    from ga.checkpoint import load_checkpoint, save_checkpoint

    g, dev = training
    space = SearchSpace.build(g, dev)
    a = GeneticSearch(space, SMALL, SerialEvaluator(g, dev, PlannerOptions()))
    a.initialize()
    a.step()
    done = a.state.evaluations
    calls = iter(range(100))
    assert not a.step(stop=lambda: next(calls) >= 3)   # 3 children evaluated, then abandoned
    assert a.state.evaluations == done + 3
    save_checkpoint(tmp_path / "ga.ckpt", space, SMALL, a.snapshot())
    _, state = load_checkpoint(tmp_path / "ga.ckpt", space)
    assert state.evaluations == done and state.generation == 1
    a.step()          # the replay: a completed generation leaves nothing abandoned
    assert a.snapshot().evaluations == a.state.evaluations


def test_budget_and_config_errors_are_clear(training) -> None:
    g, dev = training
    with pytest.raises(HybridError, match="budget"):
        optimize(g, dev, SMALL)
    with pytest.raises(HybridError, match="--population"):
        GAConfig(population=1)
    with pytest.raises(HybridError, match="--search"):
        GAConfig(search="everything")  # type: ignore[arg-type]


def test_size_classes_only_fail_clearly_when_no_pool_fits() -> None:
    g = two_size_graph(3 * MB)
    with pytest.raises(InfeasibleError):
        optimize(g, g.device, GAConfig(population=4, children=4, pool="classes"), generations=1)
    with pytest.raises(InfeasibleError, match="needs"):
        optimize(g, g.device, GAConfig(population=4, children=4), generations=1)  # bytes cannot run it either


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 40), kind=st.sampled_from(["random", "training"]))
def test_every_plan_validates_on_random_graphs(seed: int, n: int, kind: str) -> None:
    g, dev = small_random(n, seed) if kind == "random" else small_training(max(1, n // 3), seed, share=seed % 3)
    r = optimize(g, dev, GAConfig(population=6, children=8, seed=seed, mutation_rate=0.3), generations=2)
    assert np.isfinite(r.makespan_s)
    check(g, r.to_plan())


def test_policy_gene_and_baselines() -> None:
    g, dev = small_training(16, seed=6, share=4)
    r = optimize(g, dev, GAConfig(population=12, children=8), generations=2)
    best_baseline = min(run_baseline(g, dev, k).makespan_s for k in ("naive", "odswap", "vdnn", "belady"))
    assert r.makespan_s <= best_baseline * (1 + 1e-12)
    lru = optimize(g, dev, GAConfig(population=8, children=8, policies=("lru",)), generations=2)
    plan = lru.to_plan()
    assert plan.planner["policy"] == "lru" and plan.planner["planner_options"]["victim"] == "lru"
    check(g, plan)
    pinned = optimize(g, dev, GAConfig(population=8, children=8, policies=("pinned",), pool="bytes"), generations=1)
    assert pinned.to_plan().planner["planner_options"]["keep_persistent"] is True
    with pytest.raises(HybridError, match="--policy"):
        GAConfig(policies=("fifo",))
