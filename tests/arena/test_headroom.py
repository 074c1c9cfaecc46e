"""The headroom search (hybrid.arena.headroom, `hybrid optimize --headroom`): byte budgets searched with the
memory their layout needs given up, the winner laid out within the full memory and grown back into it."""
from __future__ import annotations

import dataclasses

import pytest

from hybrid.arena.headroom import calibrate
from hybrid.arena.layout import Replan, _grow_search
from hybrid.errors import HybridError, InfeasibleError
from hybrid.graph.info import unswapped_peak
from hybrid.graph.synthetic import training_graph
from hybrid.validator import validate


def _device(g, fraction: float):  # noqa: ANN001, ANN202
    return dataclasses.replace(g.device, memory_bytes=int(unswapped_peak(g) * fraction), reserve_bytes=0)


def test_calibrate_gives_up_what_the_seeds_best_layout_overflows_by() -> None:
    from hybrid.arena.headroom import MARGIN

    g = training_graph(12, seed=5)
    device = _device(g, 0.6)
    head = calibrate(g, device)
    assert 1 <= head.layouts == len(head.trials) <= 2 and head.ratio == min(head.trials)
    if head.ratio <= 1.0:
        assert head.shrink == 0.0
    else:
        assert 0.0 < head.shrink <= 1.0 - 1.0 / head.ratio + MARGIN + 1e-12
    small = head.device(device)
    assert small.usable_bytes == pytest.approx(device.usable_bytes * (1 - head.shrink), abs=1)
    assert small.reserve_bytes == device.reserve_bytes


def test_calibrate_leaves_the_largest_op_room_to_run() -> None:
    """Where the largest op needs nearly all the memory, the search's device still holds it."""
    from hybrid.graph.info import largest_op

    g = training_graph(12, seed=5)
    need = largest_op(g, g.device.alignment_bytes)[1]
    device = dataclasses.replace(g.device, memory_bytes=int(need * 1.05), reserve_bytes=0)
    head = calibrate(g, device)
    assert head.device(device).usable_bytes >= need
    if head.ratio > 1.0:   # the layouts asked for more than the op leaves: the summary says why it got less
        assert "the largest single op needs" in head.capped and head.capped in head.describe()
        assert "asked for" in head.describe()


def test_grow_search_tries_the_full_memory_first_then_closes_in_on_the_largest_budget_that_fits() -> None:
    usable = 1_000_000
    asked: list[float] = []

    def make(budget: int):  # noqa: ANN202 - stands for a plan: its budget
        return budget

    def fit(cand, source, shrink, kind):  # noqa: ANN001, ANN202 - lays out when 12% or more is given up
        asked.append(shrink)
        assert kind == "more memory" and source == "genes"
        return 1.0 if shrink >= 0.12 else 1.0 + (0.12 - shrink)

    list(_grow_search(Replan("genes", make), usable, 0.3, 12, fit, "more memory"))
    assert asked[0] == 0.0
    assert all(0.0 <= s <= 0.3 for s in asked)
    fitted = [s for s in asked if s >= 0.12]
    assert fitted and min(fitted) - 0.12 < 0.01


def test_grow_search_stops_at_once_when_the_full_memory_lays_out() -> None:
    asked: list[float] = []
    list(_grow_search(Replan("genes", lambda b: b), 100, 0.2, 8,
                      lambda c, so, s, k: asked.append(s) or 0.9, "more memory"))
    assert asked == [0.0]


def test_grow_search_survives_a_planner_that_cannot_run() -> None:
    def make(budget: int):  # noqa: ANN202
        raise InfeasibleError("no")

    # a budget the planner refuses counts as a miss: the search goes on within its steps, and never raises
    assert len(list(_grow_search(Replan("genes", make), 100, 0.2, 8, lambda *a: 1.0, "more memory"))) <= 8


def _just_above_the_class_floor(g, over: float):  # noqa: ANN001, ANN202
    """The device with `over` more usable bytes than the least size-class pool needs (objects + workspace)."""
    from ga.encoding import SearchSpace
    from ga.repair import min_floor_cls
    from hybrid.swap.augmented import PlannerOptions

    space = SearchSpace.build(g, g.device, PlannerOptions())
    least = int(min_floor_cls(space)[1]) + g.device.usable_bytes - space.budget
    return dataclasses.replace(g.device, memory_bytes=int(least * over), reserve_bytes=0), least


def test_calibrate_leaves_a_size_class_pool_room_to_run() -> None:
    """With --pool classes, the headroom never gives up the bytes the least size-class pool needs: on this graph
    at 5% above that floor the seeds' layouts ask for about 10%, and the search on what is left was refused
    ("no size-class pool fits ... give more --memory", naming the shrunk memory)."""
    g = training_graph(6, seed=1)
    device, least = _just_above_the_class_floor(g, 1.05)
    assert calibrate(g, device).device(device).usable_bytes < least   # what the search was given before
    head = calibrate(g, device, least_usable=least)
    assert 0.0 < head.shrink and head.device(device).usable_bytes >= least
    assert "the least size-class pool (--pool classes) needs" in head.capped and head.capped in head.describe()


def test_a_class_pool_search_with_headroom_runs_just_above_its_floor() -> None:
    from ga import GAConfig
    from hybrid.pipeline import OptimizeOptions, run_optimize

    g = training_graph(6, seed=1)
    device, least = _just_above_the_class_floor(g, 1.05)
    res = run_optimize(g, device, 120.0, OptimizeOptions(config=GAConfig(population=6, children=6, seed=2,
                                                                         pool="classes"),
                                                         generations=1, workers=1, refine="none", headroom=True))
    assert res.plan.device == device and validate(g, res.plan).valid
    assert res.search_plan.planner["headroom"]["shrink"] > 0.0


def test_headroom_search_writes_a_laid_out_plan_on_the_real_device_never_slower_than_its_best() -> None:
    from ga import GAConfig
    from hybrid.pipeline import OptimizeOptions, run_optimize

    g = training_graph(10, seed=3)
    device = _device(g, 0.55)
    res = run_optimize(g, device, 120.0, OptimizeOptions(config=GAConfig(population=6, children=6, seed=2),
                                                         generations=2, workers=1, refine="none", headroom=True))
    assert res.plan.device == device and res.search_plan.device == device
    assert validate(g, res.plan).valid
    assert "headroom" in res.search_plan.planner
    assert res.plan.allocation.kind in ("arena", "size_classes")
    if res.layout is not None and res.layout.fallback in ("", "more memory"):
        # the search's own plan laid out (or a re-plan with more of the memory, kept only when faster)
        assert res.plan.makespan_s <= res.search.best.makespan * (1 + 1e-9)


def test_headroom_is_the_default_where_the_plan_is_laid_out_and_off_where_it_is_not() -> None:
    """`hybrid optimize`'s default: the search gives up the memory its seeds' layouts need (the search plan
    says so); with --no-arena (no layout) or --no-headroom it plans the full memory."""
    from ga import GAConfig
    from hybrid.pipeline import OptimizeOptions, run_optimize

    g = training_graph(10, seed=3)
    device = _device(g, 0.55)

    def run(**kw):  # noqa: ANN202
        return run_optimize(g, device, 120.0, OptimizeOptions(config=GAConfig(population=6, children=6, seed=2),
                                                              generations=1, workers=1, refine="none", **kw))

    assert "headroom" in run().search_plan.planner
    for kw in ({"arena_s": None}, {"headroom": False}):
        res = run(**kw)
        assert "headroom" not in res.search_plan.planner and validate(g, res.plan).valid


@pytest.mark.parametrize("kw", [{"addresses": True}, {"arena_s": None}])
def test_headroom_refuses_options_it_cannot_use(kw: dict) -> None:
    from hybrid.pipeline import OptimizeOptions

    with pytest.raises(HybridError, match="--headroom"):
        OptimizeOptions(headroom=True, **kw).check()


def test_headroom_search_refined_after_resumes_on_its_own_device() -> None:
    """Refinement after the search, then the search resumed from its checkpoint: both on the headroom's smaller
    device (a checkpoint names its device), the written plan on the real one."""
    from ga import GAConfig
    from hybrid.pipeline import OptimizeOptions, refine_available, run_optimize

    if not refine_available():
        pytest.skip("no CP-SAT refinement in this installation")
    g = training_graph(8, seed=4)
    device = _device(g, 0.55)
    # 10 s, 60% of it for refinement, which stops after 2% of that finds nothing faster (about 1.2 s in: CP-SAT
    # finds no faster timing here), so the search resumes with the 3 s or more left (the default patience, or 6 s
    # and the default share, left it none: it never resumed)
    res = run_optimize(g, device, 10.0, OptimizeOptions(config=GAConfig(population=6, children=6, seed=1),
                                                        workers=1, refine="cpsat", refine_mode="after",
                                                        refine_share=0.6, refine_patience=0.02, headroom=True))
    assert res.refinement.resumed_generations > 0, res.refinement.note
    assert res.plan.device == device and res.refined_plan.device == device
    assert validate(g, res.plan).valid


def test_a_resume_searches_on_its_checkpoints_memory_whatever_the_time_left(tmp_path, monkeypatch) -> None:
    """A headroom search's checkpoint resumed where the time left skips the calibration (under about 15 s): it was
    refused, "made for another device (memory_bytes ...)", and its advice to resume with the same flags was
    wrong. The resume now plans on the checkpoint's memory to the byte and goes on as one search would; another
    --memory and --no-headroom are refused naming why."""
    from ga import GAConfig
    from hybrid.pipeline import OptimizeOptions, run_optimize
    from hybrid.pipeline import optimize as pipeline

    g = training_graph(10, seed=3)
    device = _device(g, 0.55)
    cfg = GAConfig(population=6, children=6, seed=2)
    ck = tmp_path / "ga.ckpt"

    def opts(**kw):  # noqa: ANN003, ANN202
        return OptimizeOptions(config=cfg, workers=1, refine="none", **kw)

    first = run_optimize(g, device, 120.0, opts(generations=2, checkpoint=ck))
    shrink = first.search_plan.planner["headroom"]["shrink"]
    assert shrink > 0.0
    straight = run_optimize(g, device, 120.0, opts(generations=4, checkpoint=tmp_path / "other.ckpt"))
    monkeypatch.setattr(pipeline, "HEADROOM_MIN_LAYOUTS", 1e9)   # as a short limit: the calibration left out
    resumed = run_optimize(g, device, 120.0, opts(generations=4, resume=ck))
    assert resumed.search_plan.planner["headroom"] == {"shrink": pytest.approx(shrink), "from_checkpoint": True}
    assert resumed.search.best.makespan == straight.search.best.makespan and resumed.search.generations == 4
    assert resumed.plan.device == device and validate(g, resumed.plan).valid
    other = dataclasses.replace(device, memory_bytes=device.memory_bytes + (1 << 20))
    with pytest.raises(HybridError, match="made for another device .memory_bytes"):
        run_optimize(g, other, 120.0, opts(generations=4, resume=ck))
    with pytest.raises(HybridError, match="less memory than this device's, its headroom .* --no-headroom"):
        run_optimize(g, device, 120.0, opts(generations=4, resume=ck, headroom=False))
    with pytest.raises(HybridError, match="its headroom .* --no-arena"):   # refused as a new --headroom --no-arena is
        run_optimize(g, device, 120.0, opts(generations=4, resume=ck, arena_s=None))
    # an older version's checkpoint (no record of its plans' device): the headroom calibrated as ever
    import json

    import numpy as np

    with np.load(ck) as z:
        arrays = {k: z[k] for k in z.files}
    header = json.loads(str(arrays["header"]))
    del header["full_device"]
    arrays["header"] = np.array(json.dumps(header))
    with open(tmp_path / "old.ckpt", "wb") as f:
        np.savez_compressed(f, **arrays)
    monkeypatch.undo()
    old = run_optimize(g, device, 120.0, opts(generations=4, resume=tmp_path / "old.ckpt"))
    assert "from_checkpoint" not in old.search_plan.planner["headroom"]
    assert old.search.best.makespan == straight.search.best.makespan
    # a search on less memory without a headroom is another device, not a headroom to keep
    small = dataclasses.replace(device, memory_bytes=int(device.memory_bytes * 0.95))
    run_optimize(g, small, 120.0, opts(generations=1, checkpoint=tmp_path / "small.ckpt", headroom=False))
    with pytest.raises(HybridError, match="made for another device .memory_bytes"):
        run_optimize(g, device, 120.0, opts(generations=2, resume=tmp_path / "small.ckpt"))


def test_lay_out_grows_a_headroom_plan_into_the_memory_it_left() -> None:
    """A plan made with 30% of the memory given up (as the headroom search's) and saying so: lay_out also
    re-plans it with more memory, keeps the fastest that fits (never slower than the plan where it fits)."""
    from hybrid.arena.layout import lay_out, replan_schedule
    from hybrid.graph.order import program_order
    from hybrid.swap.augmented import PlannerOptions

    g = training_graph(10, seed=3)
    device = _device(g, 0.6)
    order = program_order(g)
    base = dataclasses.replace(replan_schedule(g, _belady(g, device, order), int(device.usable_bytes * 0.7),
                                               order=order, options=PlannerOptions()), device=device)
    plan = dataclasses.replace(base, planner={**base.planner, "headroom": {"shrink": 0.3}})
    rp = Replan("genes", lambda b: replan_schedule(g, plan, b, order=order, options=PlannerOptions()))
    out = lay_out(g, plan, replans=[rp])
    assert validate(g, out.plan).valid and out.plan.allocation.kind in ("arena", "size_classes")
    assert any(src == "genes" and s < 0.3 for src, s, _, _ in out.trials)     # it tried more memory
    if not out.fallback:
        assert out.plan.makespan_s == pytest.approx(plan.makespan_s)
    if out.fallback == "more memory":
        assert out.plan.makespan_s < plan.makespan_s and out.memory_given_up < 0.3
        assert "re-planned (genes)" in out.describe()


def _belady(g, device, order):  # noqa: ANN001, ANN202
    from hybrid.swap.augmented import PlannerOptions
    from hybrid.swap.planner import SwapPlanner
    from hybrid.swap.pools import byte_pool
    from hybrid.swap.to_plan import to_plan

    return to_plan(SwapPlanner(g, device).plan(order, byte_pool(g, device), PlannerOptions()), {"name": "belady"})


def test_a_re_plan_within_the_headroom_gives_up_no_memory_the_search_counted_on() -> None:
    """The fallback issue 31 counts is a re-plan with less memory than the search planned with: where the search
    gave up 30% and the written re-plan 28%, the layout says so and does not count it; at 35% it does."""
    from hybrid.arena.layout import Layout
    from hybrid.pipeline.result import _fallback

    g = training_graph(4, seed=1)
    from hybrid.graph.order import program_order

    plan = _belady(g, _device(g, 0.8), program_order(g))
    within = Layout(plan, "re-planned", 3, plan.makespan_s, 0.0, "population 4", 0.28, 0.1, search_shrink=0.3)
    beyond = dataclasses.replace(within, memory_given_up=0.35)
    assert not within.gave_up_memory and beyond.gave_up_memory
    assert "within the 30% the search planned without" in within.describe() and "within" in _fallback(within)
    assert "beyond the 30% the search planned without" in beyond.describe()
    no_headroom = dataclasses.replace(within, search_shrink=0.0)
    assert no_headroom.gave_up_memory and "the search planned without" not in no_headroom.describe()
    assert within.to_json()["search_shrink"] == 0.3


def test_recalibrate_asks_for_what_the_incumbents_layout_overflows_by_and_nothing_where_it_fits() -> None:
    """Halfway, the search's incumbent laid out within the full memory: where it misses (here a byte budget
    planned at the full memory, given to `recalibrate` as if searched with no headroom), the shrink grows by
    what it overflows; where it lays out, or needs less than RECALIBRATE_STEP more, nothing changes."""
    from hybrid.arena.headroom import MARGIN, MAX_SHRINK, RECALIBRATE_STEP, Headroom, recalibrate
    from hybrid.arena.layout import QUICK_BUDGET, heuristic_layout
    from hybrid.graph.info import largest_op
    from hybrid.arena.lifetimes import plan_buffers
    from hybrid.swap.baselines import run_baseline

    seen = {"over": False, "fits": False}
    for seed, fraction in [(s, f) for s in range(6) for f in (0.5, 1.1)]:
        g = training_graph(12, seed=seed)
        device = _device(g, fraction)
        plan = run_baseline(g, device, "belady", recompute=True)
        head = Headroom(0.0, 1.0, 1, 0.0, (1.0,))
        budget = dataclasses.replace(QUICK_BUDGET, repair_moves=0)     # the heuristics' verdict alone
        problem = plan_buffers(g, plan).problem
        ratio = heuristic_layout(problem, budget).arena_bytes / problem.capacity
        new = recalibrate(g, device, plan, head, budget)
        if ratio <= 1.0:
            assert new is None
            seen["fits"] = True
        elif 1.0 - 1.0 / ratio + MARGIN >= RECALIBRATE_STEP:
            assert new is not None and new.seeded == 0.0 and new.trials[-1] == pytest.approx(ratio)
            room = 1.0 - largest_op(g, device.alignment_bytes)[1] / device.usable_bytes - MARGIN
            assert new.shrink == pytest.approx(min(1.0 - 1.0 / ratio + MARGIN, MAX_SHRINK, room), abs=1e-9)
            assert "from halfway" in new.describe() and new.to_json()["seeded"] == 0.0
            seen["over"] = True
    assert seen["over"] and seen["fits"]


def test_a_search_carried_over_unchanged_makes_the_plan_of_one_run_through() -> None:
    """`ga.optimize(start=...)` goes on from a state (its generations, log and random generator), so the
    headroom search's halfway stop changes nothing where the recalibration keeps the device."""
    from ga import GAConfig, optimize

    g = training_graph(10, seed=3)
    device = _device(g, 0.55)
    cfg = GAConfig(population=6, children=6, seed=4)
    whole = optimize(g, device, cfg, generations=4)
    half = optimize(g, device, cfg, generations=2)
    rest = optimize(g, device, cfg, generations=4, start=half.state)
    assert rest.generations == whole.generations == 4
    assert rest.best.makespan == whole.best.makespan
    assert (rest.best.schedule == whole.best.schedule).all() and rest.best.planner == whole.best.planner
    assert len(rest.log.rows) == len(whole.log.rows)


def test_a_search_carried_over_to_less_memory_scores_its_population_there() -> None:
    import numpy as np

    from ga import GAConfig, optimize
    from hybrid.swap.planner import SwapPlanner

    g = training_graph(10, seed=3)
    device = _device(g, 0.6)
    small = dataclasses.replace(device, memory_bytes=int(device.memory_bytes * 0.85))
    cfg = GAConfig(population=6, children=6, seed=4)
    half = optimize(g, device, cfg, generations=2)
    before = sorted(i.makespan for i in half.state.population)
    rest = optimize(g, small, cfg, generations=2, start=half.state, rescore=True)   # rescored, no generation run
    after = sorted(i.makespan for i in rest.state.population)
    assert rest.generations == 2 and rest.space.device == small
    assert len(after) == len(before)
    planner = SwapPlanner(g, small)          # each makespan is the planner's on the smaller device
    for ind in rest.state.population:
        if np.isfinite(ind.makespan):
            aug = planner.plan(ind.schedule, rest.space.pool(ind), rest.space.options_for(ind))
            assert ind.makespan == aug.makespan
    assert rest.best.makespan == after[0]
    assert validate(g, rest.to_plan()).valid


def test_a_rescore_stopped_at_once_still_scores_its_old_best_there() -> None:
    """A time limit that ends as the recalibrated search starts: the incumbent is scored on the smaller device
    anyway (as initialize() scores its first seed), so the search's best is a makespan, never NaN."""
    import math

    from ga import GAConfig, optimize
    from hybrid.swap.planner import SwapPlanner

    g = training_graph(10, seed=3)
    device = _device(g, 0.6)
    small = dataclasses.replace(device, memory_bytes=int(device.memory_bytes * 0.85))
    cfg = GAConfig(population=6, children=6, seed=4)
    half = optimize(g, device, cfg, generations=2)
    old_best = min(half.state.population, key=lambda i: i.makespan)
    rest = optimize(g, small, cfg, time_limit_s=1e-9, start=half.state, rescore=True)
    assert rest.state.population and all(not math.isnan(i.makespan) for i in rest.state.population)
    assert (rest.best.schedule == old_best.schedule).all()
    aug = SwapPlanner(g, small).plan(rest.best.schedule, rest.space.pool(rest.best), rest.space.options_for(rest.best))
    assert rest.best.makespan == aug.makespan
    assert validate(g, rest.to_plan()).valid


def test_a_headroom_search_whose_incumbent_misses_goes_on_with_more_memory_given_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline's halfway stop: a recalibrated headroom moves the rest of the search to its device, the
    written plan says so (`planner.headroom.seeded`) and validates on the real device."""
    import hybrid.arena.headroom as hr
    from ga import GAConfig
    from hybrid.pipeline import OptimizeOptions, run_optimize

    calls: list[float] = []

    def more(graph, device, plan, head, budget=None, deadline=None):  # noqa: ANN001, ANN202
        calls.append(head.shrink)
        return hr.Headroom(head.shrink + 0.05, head.ratio, head.layouts + 1, head.seconds, head.trials + (1.1,),
                           head.shrink)

    monkeypatch.setattr(hr, "recalibrate", more)
    g = training_graph(10, seed=3)
    device = _device(g, 0.55)
    res = run_optimize(g, device, 120.0, OptimizeOptions(config=GAConfig(population=6, children=6, seed=2),
                                                         generations=4, workers=1, refine="none", headroom=True))
    info = res.search_plan.planner["headroom"]
    assert len(calls) == 1 and info["seeded"] == calls[0] and info["shrink"] == pytest.approx(calls[0] + 0.05)
    assert res.search.generations == 4 and res.search.space.device.usable_bytes < device.usable_bytes
    assert res.plan.device == device and validate(g, res.plan).valid
    # the whole search's evaluations (both halves, the rescore too), as its log counts them: the first half's
    # alone were reported (its state, which the second half goes on from, read after that half had counted)
    frame = res.search.log.to_frame()
    logged = frame["evaluations"]
    assert res.search.evaluations == int(logged.iloc[-1]) and res.search.evaluations > int(logged.iloc[1])
    memory = frame["memory_bytes"]     # the log says where the search went on with less memory
    assert memory.iloc[0] > memory.iloc[-1] == res.search.space.device.memory_bytes


def test_a_seed_laid_out_by_the_calibration_is_written_where_it_beats_the_searchs_fallback() -> None:
    """The README's MLP at 4 MiB: the search's best byte budget misses the arena and its re-plans with less
    memory are slower than the Belady seed the calibration laid out within the full memory; that seed is written
    (the command's own baseline rows were faster than what it wrote before)."""
    pytest.importorskip("torch")
    from examples.mlp import make
    from ga import GAConfig
    from hybrid.capture import capture
    from hybrid.pipeline import OptimizeOptions, run_optimize

    module, x, y, loss = make()
    g = capture(module, (x,), loss, y)
    dev = dataclasses.replace(g.device, memory_bytes=4 << 20, reserve_bytes=0)
    head = calibrate(g, dev)
    assert head.shrink == 0.0 and head.laid and all(validate(g, p).valid for p in head.laid)
    res = run_optimize(g, dev, 300.0, OptimizeOptions(config=GAConfig(population=16, children=16, seed=1),
                                                      generations=20, workers=1, refine="none"))
    assert res.layout is not None and res.layout.fallback == "laid-out candidate"
    assert "belady" in res.layout.source and res.plan.allocation.kind == "arena"
    assert validate(g, res.plan).valid and res.plan.device == dev
    assert res.plan.makespan_s <= min(t[2] for t in res.layout.trials if t[3] <= 1.0)
