"""`hybrid.pipeline.run_optimize`: the optimize flow as a library, the same plan as `hybrid optimize`, its time
limit split with a reserve, and results that say what happened."""
from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest
from click.testing import CliRunner

from ga import GAConfig
from hybrid.cli.main import cli
from hybrid.graph import Graph
from hybrid.pipeline import OptimizeOptions, Progress, run_optimize
from hybrid.pipeline.optimize import RESERVE_MAX_SHARE, RESERVE_MIN_SHARE
from hybrid.plan import Plan
from hybrid.validator import validate
from tests.ga.graphs import small_training


@pytest.mark.parametrize("arena", [True, False])
def test_the_library_writes_the_plan_the_command_writes(tmp_path, arena) -> None:
    g, dev = small_training(12, seed=4)
    path = tmp_path / "g.json"
    g.save(path)
    flags = [] if arena else ["--no-arena"]
    r = CliRunner().invoke(cli, list(map(str, [
        "optimize", "--graph", path, "--memory", dev.memory_bytes, "--generations", 3, "--seed", 3, "--population", 8,
        "--workers", 1, "--refine", "none", "--time-limit", "2m", "--quiet", "--out", tmp_path / "cli.json",
        *flags])), catch_exceptions=False)
    assert r.exit_code == 0, r.output
    assert r.output.startswith(f"wrote {tmp_path / 'cli.json'}: makespan ")   # the report leads with the written plan
    device = Plan.load(tmp_path / "cli.json").device
    written = []
    res = run_optimize(Graph.load(path), device, 120.0, OptimizeOptions(
        config=GAConfig(population=8, children=8, seed=3), generations=3, workers=1, refine="none",
        arena_s=60.0 if arena else None), Progress(on_plan=lambda p: (written.append(p), p.save(tmp_path / "lib.json"))))
    assert written and written[-1] is res.plan
    # byte for byte: a plan records no wall time (the same seed and budget write the same file)
    assert (tmp_path / "lib.json").read_bytes() == (tmp_path / "cli.json").read_bytes()
    assert res.stop_reason == "generations" and res.search.generations == 3 and res.refinement.mode == "none"
    assert validate(Graph.load(path), res.plan).valid
    if not arena:
        assert res.layout is None and res.plan is res.search_plan and res.difference() == ""


def test_the_time_limit_counts_from_the_start_and_keeps_a_reserve() -> None:
    g, dev = small_training(10, seed=2)
    notes = []
    t0 = time.monotonic()
    res = run_optimize(g, dev, 20.0, OptimizeOptions(config=GAConfig(population=4, children=4), workers=1,
                                                      refine="none", arena_s=None),
                       Progress(on_note=notes.append), started_at=t0 - 16.0)   # 16 s already spent loading
    # (the reserve is RESERVE_MIN_SHARE of the 20 s here, its estimate being less; the search gets the 3 s left)
    b = res.budget
    assert RESERVE_MIN_SHARE * 20.0 <= b.reserve_s <= RESERVE_MAX_SHARE * 20.0
    assert b.search_until_s == pytest.approx(20.0 - b.reserve_s)
    assert res.timings.setup_s >= 16.0                  # the seconds before the call count
    assert res.stop_reason in ("time limit", "lower bound")
    assert validate(g, res.plan).valid
    assert time.monotonic() - t0 < 5 * 20.0             # hang guard only


def test_a_spent_limit_still_returns_a_valid_plan_and_says_what_it_left_out() -> None:
    g, dev = small_training(10, seed=2)
    res = run_optimize(g, dev, 2.0, OptimizeOptions(config=GAConfig(population=4, children=4), workers=1,
                                                     refine="none", baselines=True),
                       started_at=time.monotonic() - 10.0)   # the whole limit went before the search
    assert validate(g, res.plan).valid
    # laid out as planned, or (no offsets found by the walk) the byte budget with the layout named as left out
    assert res.plan.allocation.kind == "arena" or any("arena layout: not run" in s for s in res.skipped)
    assert res.baselines is not None and any("not run, the time limit was spent" in n for n in res.baselines.notes)
    assert [r["plan"] for r in res.baselines.rows] == ["optimize"]


def test_the_result_says_why_the_written_plan_is_not_the_searchs_best() -> None:
    from hybrid.arena.layout import Layout

    g, dev = small_training(10, seed=2)
    res = run_optimize(g, dev, 60.0, OptimizeOptions(config=GAConfig(population=4, children=4), generations=1,
                                                      workers=1, refine="none", arena_s=None))
    best = res.search_plan
    slower = replace(best, makespan_s=best.makespan_s * 1.1)
    res.plan = slower
    res.layout = Layout(slower, "re-planned", 3, best.makespan_s, 0.0, "belady", 0.02)
    line = res.difference()
    assert line.startswith("written plan differs from the search's best")
    assert "re-plan (belady) with 2% less memory" in line and "+10.00% makespan" in line


def test_the_baseline_table_divides_each_column_by_one_named_bound() -> None:
    from hybrid.graph.info import unswapped_peak
    from hybrid.report.summary import any_order_bound, plan_row, table
    from hybrid.swap.baselines import run_baseline
    from hybrid.units import format_seconds

    g, dev = small_training(12, seed=4)
    dev = replace(dev, memory_bytes=int(unswapped_peak(g) * 0.7), reserve_bytes=0)
    rows = [plan_row(k, run_baseline(g, dev, k, recompute=True), g) for k in ("naive", "odswap", "belady")]
    assert {r["recomputes"] for r in rows} == {True, False}   # both kinds of plan
    swap, rec = any_order_bound(g, dev, False), any_order_bound(g, dev, True)
    assert rec <= swap
    text = table(rows)
    header = text.splitlines()[0]
    assert f"vs {format_seconds(swap)} (any order, swap only)" in header
    assert f"vs {format_seconds(rec)} (any order, with recompute)" in header
    for r in rows:
        assert r["makespan/recompute_bound"] == pytest.approx(r["makespan_s"] / rec)
        if r["recomputes"]:
            assert r["makespan/swap_bound"] != r["makespan/swap_bound"]   # NaN: that bound does not hold for it
        else:
            assert r["makespan/swap_bound"] == pytest.approx(r["makespan_s"] / swap)


def test_the_laid_out_plan_is_re_timed_with_every_offset_kept_and_never_slower() -> None:
    """With the reserve's time left, `run_optimize` re-times the written (laid-out) plan's copies by CP-SAT
    (`_polish`): kept only when faster and valid, and then with the same allocation, offsets included."""
    from hybrid.arena.layout import lay_out
    from hybrid.pipeline import refine_available
    from hybrid.pipeline.optimize import _polish
    from hybrid.pipeline.result import Timings
    from hybrid.swap.baselines import run_baseline

    if not refine_available():
        pytest.skip("no CP-SAT refinement in this installation")
    g, dev = small_training(12, seed=4)
    laid = lay_out(g, run_baseline(g, dev, "odswap"), time_limit_s=5.0).plan
    assert laid.allocation.kind == "arena"
    failures: list[str] = []
    timings = Timings()
    # 2 s: the re-timing accepts its two gains within 1.2 s (4 s gave the same plan)
    out = _polish(g, laid, time.monotonic() + 2.0, 1, None, failures, timings)
    assert not failures and timings.polish_s > 0
    assert validate(g, out).valid
    assert out.allocation == laid.allocation and out.schedule == laid.schedule
    assert out.makespan_s <= laid.makespan_s
    if out is not laid:
        assert out.planner["offsets_kept_refine"]["from_makespan_s"] == laid.makespan_s
    assert _polish(g, laid, time.monotonic() + 0.1, 1, None, failures, timings) is laid   # no time: as it is


def test_the_layout_also_re_plans_each_individual_without_re_binding_its_reruns() -> None:
    """Re-binding reruns in time order packs a byte budget tighter than offsets follow, so the layout's re-plan
    sources come in twins: an individual's genes as searched, and the same genes with `rebind_reruns` off, the
    twin refusing (InfeasibleError, no layout spent) a plan that reruns nothing, its first twin's plan."""
    from ga import optimize
    from hybrid.errors import InfeasibleError
    from hybrid.pipeline.optimize import _genes_replan
    from hybrid.swap.augmented import PlannerOptions

    g, dev = small_training(12, seed=4)
    base = PlannerOptions(recompute_ratio=1e6, recompute_depth=6, rebind_reruns=True, long_chains=True)
    res = optimize(g, dev, GAConfig(population=6, children=6, seed=1), generations=1, workers=1, options=base)
    plan = res.to_plan()
    twins = 0
    for budget in (dev.usable_bytes, int(dev.usable_bytes * 0.9)):
        searched = _genes_replan(g, plan, res, res.best)(budget)
        try:
            twin = _genes_replan(g, plan, res, res.best, reruns_only=True, rebind_reruns=False)(budget)
        except InfeasibleError:
            assert not searched.recomputes    # refused only where the plan reruns nothing
            continue
        assert twin.recomputes and validate(g, twin).valid
        twins += 1
    assert twins   # at the full memory this graph's plan reruns ops


def test_a_first_run_whose_compile_spent_the_limit_still_lays_its_plan_out(monkeypatch) -> None:
    """Right after an install the kernels' compile can take the whole limit; a plan without offsets is not the
    plan that runs, so the layout's heuristics run anyway, past the limit, and the summary says so. Without
    the compile (every later run) a limit too short for a layout writes the byte budget (tests/arena/test_layout.py)."""
    import hybrid.pipeline.optimize as flow
    import hybrid.swap.planner as planner

    real = planner.compile_kernels
    limit = 3.0

    def slow_compile(**parts) -> None:    # a first run: the compile takes the whole limit
        real(**parts)
        time.sleep(limit + 0.2)

    monkeypatch.setattr(planner, "compile_kernels", slow_compile)
    monkeypatch.setattr(flow, "LAYOUT_FIXED_S", 0.3)   # a layout estimate that fits the short limit's reserve
    g, dev = small_training(10, seed=2)
    # roomier than tight_device's: the search gets next to no time, so the plan it hands over is whatever one
    # generation found, and at the tight memory some of those have no layout at all (not this test's subject)
    dev = replace(dev, memory_bytes=int(dev.memory_bytes * 1.3))
    t0 = time.monotonic()
    res = run_optimize(g, dev, limit, OptimizeOptions(config=GAConfig(population=4, children=4), workers=1,
                                                      refine="none"))
    assert res.timings.compile_s > flow.COMPILE_NOTE_S
    assert res.plan.allocation.kind in ("arena", "size_classes") and validate(g, res.plan).valid
    assert any("arena layout: run up to" in s and "compiling the kernels" in s for s in res.skipped)
    # the repair's kernels are loaded in the setup (compiled beside the walk on a first run): it is not left out
    assert not any("repair" in s for s in res.skipped)
    assert time.monotonic() - t0 < 5 * 20.0             # hang guard only


def test_a_search_that_ran_past_its_share_still_lays_its_plan_out_without_the_exact_search() -> None:
    """Less time left than a whole layout's estimate but more than its heuristics' (a process pool's start on a
    fresh machine ran the search long): the plan is laid out by the heuristics and re-plans, within the limit."""
    from hybrid.pipeline.optimize import heuristic_layout_seconds, layout_seconds
    from ga.evaluation import evaluation_seconds

    import dataclasses

    from hybrid.arena.layout import lay_out
    from hybrid.graph import Graph
    from hybrid.swap.baselines import run_baseline
    from tests.cli.helpers import RESNET

    g = Graph.load(RESNET)
    dev = dataclasses.replace(g.device, memory_bytes=96 << 20, reserve_bytes=0)
    opts = OptimizeOptions(config=GAConfig(population=4, children=4), workers=1, refine="none", baselines=False)
    # every kernel the run uses compiled (or loaded) first, untimed: the search's, the layout's
    run_optimize(g, dev, 600.0, dataclasses.replace(opts, generations=1))
    lay_out(g, run_baseline(g, dev, "belady"))
    eval_s = evaluation_seconds(g, dev)
    left = (heuristic_layout_seconds(eval_s) + layout_seconds(eval_s)) / 2
    limit = 20.0
    res = run_optimize(g, dev, limit, opts, started_at=time.monotonic() - (limit - left))
    assert validate(g, res.plan).valid
    assert any("laid out without its exact search" in s for s in res.skipped), res.skipped
    assert res.plan.allocation.kind in ("arena", "size_classes"), res.skipped   # places as planned, no compaction


def test_a_small_graphs_layout_estimate_is_its_size_so_a_short_limit_still_calibrates_headroom() -> None:
    """The exact search's part of a layout is a node budget whose nodes cost about in proportion to the buffers:
    on a graph of a few dozen tensors a fixed 4 s (ResNet-18's) left the headroom search out of a 10 s limit."""
    from hybrid.pipeline.optimize import LAYOUT_FIXED_MIN_S, LAYOUT_FIXED_S, layout_fixed_s, warm_kernels

    warm_kernels()   # untimed: on a fresh clone run alone, the kernels' first compile would spend the 8 s
    g, dev = small_training(10, seed=2)
    dev = replace(dev, memory_bytes=int(dev.memory_bytes * 1.3))   # room for a layout (the tight memory has none)
    assert LAYOUT_FIXED_MIN_S <= layout_fixed_s(g) < LAYOUT_FIXED_S
    from hybrid.graph.synthetic import training_graph
    from hybrid.pipeline.optimize import LAYOUT_FIXED_BUFFERS

    big = training_graph(200, seed=1)
    assert big.arrays.n_tensors >= LAYOUT_FIXED_BUFFERS and layout_fixed_s(big) == LAYOUT_FIXED_S   # as before
    res = run_optimize(g, dev, 8.0, OptimizeOptions(config=GAConfig(population=8, children=8), workers=1,
                                                    refine="none"))
    assert not any(s.startswith("headroom: not calibrated") for s in res.skipped), res.skipped
    assert validate(g, res.plan).valid


def test_a_process_loads_the_cached_exact_search_at_setup_so_a_short_limit_keeps_it() -> None:
    """Numba caches the arena's exact search: a process whose cache holds it loads it at setup (a fraction of a
    second), so a run with a short limit no longer leaves the layout's exact search out for a compile."""
    import subprocess
    import sys

    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    run = lambda code: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,  # noqa: E731
                                      timeout=5 * 60, cwd=root)
    # every kernel compiled once where the cache is empty (untimed), so the run below spends its 8 s planning
    warm = run("from hybrid.pipeline import warm_kernels; warm_kernels()")
    assert warm.returncode == 0, warm.stderr[-2000:]
    out = run("""
from hybrid.arena import exact
from hybrid.pipeline import OptimizeOptions, run_optimize
from ga import GAConfig
from tests.ga.graphs import small_training
from dataclasses import replace
assert exact.cached() and not exact._warmed
g, dev = small_training(10, seed=2)
dev = replace(dev, memory_bytes=int(dev.memory_bytes * 1.3))
res = run_optimize(g, dev, 8.0, OptimizeOptions(config=GAConfig(population=8, children=8), workers=1, refine="none"))
print(exact._warmed, [s for s in res.skipped if "exact search" in s])
""")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "True []", out.stdout


def test_a_plan_no_layout_fits_is_written_as_its_byte_budget_saying_why() -> None:
    """Where the layout's whole work budget finds no offsets (this graph's 6 MiB workspaces sit outside the
    arena), the search's plan is written without offsets and the result says so: a longer search or more memory
    may lay out, so this is not "no plan" (it raised InfeasibleError, and the frontier read it as no plan fits)."""
    g, dev = small_training(10, seed=2)
    res = run_optimize(g, dev, 120.0, OptimizeOptions(config=GAConfig(population=8, children=8), workers=1,
                                                      refine="none", generations=1))
    assert res.plan.allocation.kind == "unconstrained" and validate(g, res.plan).valid
    assert any(s.startswith("arena layout: no arena layout of the plan fits the memory") and "without offsets" in s
               for s in res.skipped), res.skipped


def test_warm_kernels_loads_every_kernel_the_flow_uses(monkeypatch) -> None:
    """A caller timing several runs loads the kernels first, so each run gets the same flow (the exact layout
    search included) whatever numba's cache held. The session fixture warms them already: the test starts from
    a cold exact search and records what is loaded (a warm_kernels that loaded nothing passed before)."""
    import hybrid.arena.repair as repair
    import hybrid.bounds as bounds
    from hybrid.arena import exact
    from hybrid.pipeline import warm_kernels

    loaded: list[str] = []
    for module, name in ((exact, "warm_up"), (repair, "warm_up"), (bounds, "graph_bound")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _real=real, _what=f"{module.__name__}.{name}", **k:
                            (loaded.append(_what), _real(*a, **k))[1])
    monkeypatch.setattr(exact, "_warmed", False)
    assert warm_kernels(arena=False) >= 0.0
    assert not exact._warmed and loaded == ["hybrid.bounds.graph_bound"] * 2   # no layout: its kernels stay out
    loaded.clear()
    assert warm_kernels() >= 0.0
    assert exact._warmed and exact.cached()
    assert sorted(set(loaded)) == ["hybrid.arena.exact.warm_up", "hybrid.arena.repair.warm_up", "hybrid.bounds.graph_bound"]


def test_a_refined_plan_no_layout_fits_leaves_the_laid_out_plan_before_it_written(monkeypatch) -> None:
    """Refinement after the search hands back a plan the layout cannot place: the plan written is the search's,
    already laid out (a plan that runs as planned), not the refined byte budget without offsets."""
    import hybrid.pipeline.optimize as flow

    from hybrid.errors import InfeasibleError

    real_lay_out = flow._lay_out
    calls = []

    def refine_after(graph, device, plan, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        return replace(plan, planner=dict(plan.planner, refined="yes")), None, False   # a plan other than the one given

    def lay_out(graph, plan, arena_s, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append(plan)
        if len(calls) > 1 and arena_s is not None:
            raise InfeasibleError("no arena layout of the plan fits the memory (test)")
        return real_lay_out(graph, plan, arena_s, *args, **kwargs)

    monkeypatch.setattr(flow, "_refine_after", refine_after)
    monkeypatch.setattr(flow, "_lay_out", lay_out)
    g, dev = small_training(10, seed=2)
    dev = replace(dev, memory_bytes=int(dev.memory_bytes * 1.3))   # room for a layout (the tight memory has none)
    # 6 s: search, refinement and layouts take about 1 s; the rest goes to re-timing the written plan with its
    # offsets kept (_polish, which ran 10 s of a 120 s limit)
    res = run_optimize(g, dev, 6.0, OptimizeOptions(config=GAConfig(population=4, children=4), workers=1,
                                                    refine="cpsat", refine_mode="after", generations=1,
                                                    baselines=False))
    assert len(calls) >= 2 and calls[-1].planner.get("refined") == "yes"    # the refined plan went to the layout
    assert any(s.startswith("arena layout of the refined plan: no arena layout") and "before it is written" in s
               for s in res.skipped), res.skipped
    assert res.layout is not None and res.plan.allocation.kind in ("arena", "size_classes")
    assert res.plan.planner.get("refined") is None and validate(g, res.plan).valid


@pytest.fixture()
def sigint_handled():  # noqa: ANN201
    """SIGINT as Python handles it by default: a runner started as a background job (`cmd &`) has it ignored,
    and a search then leaves an ignored signal ignored (hybrid.signals.first_stop_sets), so the test's own
    SIGINT would do nothing."""
    import signal

    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def test_an_interrupted_search_writes_its_best_plan_laid_out_by_the_heuristics(sigint_handled, monkeypatch) -> None:  # noqa: ANN001,E501
    """Ctrl-C or SIGTERM wrote the best plan as a byte budget without offsets, which the executor compacts; where
    the heuristics' layout takes a moment (under INTERRUPT_LAYOUT_S here), the plan written is laid out. The
    flow's estimate of one evaluation is fixed (1 ms): measured, a loaded machine could push the layout's
    estimate over the threshold and the test would depend on the machine's speed."""
    import os
    import signal

    import ga.evaluation
    from hybrid.pipeline.optimize import INTERRUPT_LAYOUT_S, heuristic_layout_seconds

    monkeypatch.setattr(ga.evaluation, "evaluation_seconds", lambda graph, device, *a, **k: 1e-3)
    g, dev = small_training(10, seed=2)
    dev = replace(dev, memory_bytes=int(dev.memory_bytes * 1.3))   # room for a layout (the tight memory has none)
    sent = []

    def interrupt_once(stats, left) -> None:  # noqa: ANN001
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)

    res = run_optimize(g, dev, 120.0, OptimizeOptions(config=GAConfig(population=4, children=4), workers=1,
                                                      refine="none", baselines=False),
                       Progress(on_generation=interrupt_once))
    assert res.interrupted and sent
    assert heuristic_layout_seconds(1e-3) <= INTERRUPT_LAYOUT_S
    assert any(s.startswith("arena layout: interrupted, so laid out by its heuristics") for s in res.skipped), \
        res.skipped
    assert res.plan.allocation.kind in ("arena", "size_classes") and validate(g, res.plan).valid


def test_a_library_call_after_an_interrupted_one_starts_with_a_fresh_count_of_signals(sigint_handled) -> None:  # noqa: ANN001,E501
    """In a notebook one interrupted run_optimize left its Ctrl-C counted: every later call read it (a MILP
    skipped its re-solve "after Ctrl-C", a placement search stopped at once). Each call counts its own."""
    import os
    import signal

    from hybrid.signals import received

    g, dev = small_training(10, seed=2)
    opts = OptimizeOptions(config=GAConfig(population=4, children=4), workers=1, refine="none", baselines=False,
                           arena_s=None)
    sent = []

    def interrupt_once(stats, left) -> None:  # noqa: ANN001
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)

    assert run_optimize(g, dev, 60.0, opts, Progress(on_generation=interrupt_once)).interrupted and received()
    res = run_optimize(g, dev, 60.0, replace(opts, generations=2))
    assert not res.interrupted and res.stop_reason == "generations" and not received()
