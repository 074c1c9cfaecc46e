"""hybrid.arena.layout: a byte-budget plan leaves with exact offsets, or with the fastest fallback that fits;
what is written always validates, and `hybrid optimize --arena` writes it."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.arena.layout import lay_out
from hybrid.device import preset
from hybrid.errors import InfeasibleError
from hybrid.graph.info import unswapped_peak
from hybrid.graph.synthetic import training_graph
from hybrid.swap.baselines import run_baseline
from hybrid.validator import validate
from tests.cli.helpers import run


@settings(max_examples=12, deadline=None)
@given(st.integers(0, 10**6), st.floats(0.3, 0.9))
def test_a_laid_out_plan_is_an_arena_or_a_size_class_plan_and_validates(seed, frac):
    g = training_graph(10, seed=seed)
    dev = replace(preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * frac), reserve_bytes=0,
                  alignment_bytes=512)
    try:
        plan = run_baseline(g, dev, "belady")
    except InfeasibleError:
        return
    try:
        out = lay_out(g, plan, time_limit_s=2.0)
    except InfeasibleError:
        return
    assert out.plan.allocation.kind in ("arena", "size_classes")
    assert (out.plan.allocation.kind == "arena") == (out.fallback in ("", "re-planned", "slower candidate"))
    report = validate(g, out.plan)
    assert report.valid, report.violations[:1]
    if not out.fallback:
        assert out.plan.makespan_s == pytest.approx(plan.makespan_s)


def test_optimize_with_arena_writes_offsets(tmp_path):
    from hybrid.graph import Graph
    from hybrid.plan import Plan
    from tests.cli.helpers import RESNET

    out = tmp_path / "p.json"
    # work budgets (3 generations, the layout's counted work); the limits are hang guards: with 3 s of search a
    # loaded machine's best plan could not be laid out
    r = run("optimize", "--graph", RESNET, "--memory", "96MiB", "--generations", "3", "--time-limit", "2m",
            "--refine", "none", "--arena", "2m", "--byte-budget", "--quiet", "--out", out)
    assert r.exit_code == 0, r.output
    plan = Plan.load(out)
    assert plan.allocation.kind in ("arena", "size_classes")
    assert validate(Graph.load(RESNET), plan).valid
    assert "pool: " in r.output


def test_a_time_limit_too_short_for_a_layout_writes_the_byte_budget_and_says_so(tmp_path):
    """The limit bounds the whole command: where a layout of the byte budget (--byte-budget) would not fit in
    it, not even its heuristics, none is started."""
    from hybrid.graph import Graph
    from hybrid.plan import Plan
    from tests.cli.helpers import RESNET

    out = tmp_path / "p.json"
    r = run("optimize", "--graph", RESNET, "--memory", "96MiB", "--time-limit", "0.5s", "--refine", "none",
            "--byte-budget", "--quiet", "--out", out)
    assert r.exit_code == 0, r.output
    plan = Plan.load(out)
    assert plan.allocation.kind == "unconstrained" and validate(Graph.load(RESNET), plan).valid
    assert "left out     arena layout: not run" in r.output and "without offsets" in r.output


def test_a_time_limit_too_short_for_the_exact_search_still_lays_the_plan_out(tmp_path):
    """6 s: a whole layout's estimate (its exact search's tries included, over 4 s) is over half the limit, its
    heuristics and re-plans (about 0.4 s here) are not: the plan is laid out by them, and the summary says the
    exact search was left out."""
    from hybrid.graph import Graph
    from hybrid.plan import Plan
    from hybrid.swap.baselines import run_baseline
    from tests.cli.helpers import RESNET

    g = Graph.load(RESNET)
    # the planner's and the layout's kernels compiled (or loaded) in this process first: a first compile after an
    # install takes its own path (laid out past the limit), not the one tested here
    lay_out(g, run_baseline(g, replace(g.device, memory_bytes=96 << 20, reserve_bytes=0), "belady"))
    out = tmp_path / "p.json"
    r = run("optimize", "--graph", RESNET, "--memory", "96MiB", "--time-limit", "6s", "--refine", "none",
            "--byte-budget", "--quiet", "--out", out)
    assert r.exit_code == 0, r.output
    plan = Plan.load(out)
    assert plan.allocation.kind in ("arena", "size_classes") and validate(Graph.load(RESNET), plan).valid
    assert "exact search for near misses" in r.output and "arena layout: not run" not in r.output


def test_the_byte_budget_search_lays_out_by_default_and_not_with_no_arena(tmp_path):
    import json

    from hybrid.graph import Graph
    from hybrid.plan import Plan
    from tests.cli.helpers import RESNET

    out = tmp_path / "p.json"
    r = run("optimize", "--graph", RESNET, "--memory", "96MiB", "--generations", "3", "--time-limit", "20s",
            "--refine", "none", "--byte-budget", "--quiet", "--json", "--out", out)
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output[r.output.index("{"):])
    plan = Plan.load(out)
    assert plan.allocation.kind in ("arena", "size_classes")
    assert validate(Graph.load(RESNET), plan).valid
    if plan.allocation.kind == "arena":
        assert summary["arena"]["describe"] and "cost" in summary["arena"]
    r = run("optimize", "--graph", RESNET, "--memory", "96MiB", "--generations", "3", "--time-limit", "20s",
            "--refine", "none", "--byte-budget", "--quiet", "--no-arena", "--out", out)
    assert r.exit_code == 0, r.output
    assert Plan.load(out).allocation.kind != "arena"
    r = run("optimize", "--graph", RESNET, "--time-limit", "5s", "--arena", "-3s", "--out", out)
    assert r.exit_code == 2 and "--arena" in r.output
    assert "--no-arena" in run("optimize", "--help").output


def test_fallback_on_a_plan_that_fills_its_memory_reports_what_it_gave_up():
    """A byte-budget plan at a tight memory fragments once each tensor has one offset: the fallback names its
    source, the memory it gave up and its cost, and what it writes validates."""
    g = training_graph(14, seed=3)     # its best layout is 27% over the memory: the fallback must fire
    dev = replace(preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * 0.5), reserve_bytes=0,
                  alignment_bytes=512)
    plan = run_baseline(g, dev, "belady")
    out = lay_out(g, plan, time_limit_s=3.0)
    assert validate(g, out.plan).valid
    assert out.rounds >= 1 and out.trials and out.trials[0][0] == "the plan"
    assert out.fallback == "re-planned" and out.overflow > 0.2
    assert 0.0 < out.memory_given_up <= 0.5 and out.source == "belady"
    assert "less memory" in out.describe() and "makespan" in out.describe()
    assert out.plan.allocation.kind == "arena"


def test_a_plan_the_heuristics_lay_out_over_the_memory_is_repaired_under_it_before_any_fallback():
    """Fragmentation, not bytes: the heuristics lay this plan out 5.6% over the memory while its live bytes
    peak at 91% of it. The repair (evict-and-reinsert under the capacity) lays the plan itself out, so
    nothing is re-planned and the written plan is the plan; with neither the repair nor the exact search the
    fallback fires."""
    import time

    from hybrid.arena.layout import DEFAULT_BUDGET, heuristic_layout, repaired
    from hybrid.arena.lifetimes import plan_buffers

    g = training_graph(10, seed=5)
    dev = replace(preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * 0.7), reserve_bytes=0,
                  alignment_bytes=512)
    plan = run_baseline(g, dev, "belady")
    problem = plan_buffers(g, plan).problem
    assert heuristic_layout(problem).arena_bytes > problem.capacity >= problem.peak_live()
    out = lay_out(g, plan, time_limit_s=60.0)
    assert out.fallback == "" and out.source == "the plan" and out.solver == "repair" and out.overflow == 0.0
    assert out.plan.makespan_s == plan.makespan_s and out.plan.allocation.kind == "arena"
    assert out.plan.allocation.arena_bytes <= problem.capacity and validate(g, out.plan).valid
    assert lay_out(g, plan, time_limit_s=60.0).plan.allocation == out.plan.allocation   # seeded: reproducible
    # predicted to end after the deadline: not started, and the layout is marked load-dependent
    assert repaired(problem, 20_000, time.perf_counter() - 1.0)[:2] == (None, True)
    without = lay_out(g, plan, time_limit_s=60.0, budget=replace(DEFAULT_BUDGET, repair_moves=0, exact_tries=0))
    assert without.fallback != "" and without.plan.makespan_s >= plan.makespan_s


def test_lay_out_is_deterministic_and_capped_only_by_its_time_limit():
    """The work is counted, not timed: twice on one plan gives the same plan, offsets and fallback. A time
    limit too short to finish says so (`capped`) and still returns a valid plan."""
    from hybrid.arena.layout import QUICK_BUDGET

    g = training_graph(14, seed=3)
    dev = replace(preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * 0.5), reserve_bytes=0,
                  alignment_bytes=512)
    plan = run_baseline(g, dev, "belady")
    for budget in (QUICK_BUDGET, None):
        kw = {} if budget is None else {"budget": budget}
        a = lay_out(g, plan, time_limit_s=600.0, **kw)
        b = lay_out(g, plan, time_limit_s=600.0, **kw)
        assert not a.capped and not b.capped
        assert (a.fallback, a.source, a.memory_given_up, a.rounds, a.trials) == \
            (b.fallback, b.source, b.memory_given_up, b.rounds, b.trials)
        assert a.plan.allocation == b.plan.allocation and a.plan.makespan_s == b.plan.makespan_s
    c = lay_out(g, plan, time_limit_s=0.0)
    assert c.capped and validate(g, c.plan).valid


@pytest.mark.parametrize("exact_tries", [0, 2])
def test_no_time_limit_lets_the_work_budget_alone_decide(exact_tries):
    """`time_limit_s=None` (the benchmark tables' baselines): never capped, and the layout an unbinding cap gives,
    so a table's cell does not depend on the machine's speed (a 60 s cap left NasNet-25's baselines blank on a
    slower machine). The exact search, where it runs, gets no deadline either."""
    from hybrid.arena.layout import QUICK_BUDGET
    from hybrid.pipeline.baselines import lay_out_baseline

    g = training_graph(14, seed=3)
    dev = replace(preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * 0.5), reserve_bytes=0,
                  alignment_bytes=512)
    plan = run_baseline(g, dev, "belady")
    budget = replace(QUICK_BUDGET, exact_tries=exact_tries)
    free, capped = lay_out(g, plan, time_limit_s=None, budget=budget), lay_out(g, plan, 600.0, budget=budget)
    assert not free.capped and validate(g, free.plan).valid
    assert (free.fallback, free.source, free.trials) == (capped.fallback, capped.source, capped.trials)
    assert free.plan.allocation == capped.plan.allocation
    base = lay_out_baseline(g, dev, "odswap", run_baseline(g, dev, "odswap"), time_limit_s=None)
    assert not base.capped and base.plan.planner["name"] == "odswap" and validate(g, base.plan).valid


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 10**6), st.floats(0.3, 0.8), st.sampled_from(["naive", "odswap", "odswap-paper", "belady"]))
def test_a_baseline_is_laid_out_by_its_own_rules_never_by_another_planner(seed, frac, kind):
    """Like with like (issue 31): a baseline's byte budget gets offsets through the written plan's layout; where
    it does not fit, the same baseline is re-planned with less memory on its own schedule (never Belady's
    per-size classes); the result validates on the real device and keeps the baseline's name."""
    from hybrid.pipeline.baselines import lay_out_baseline

    g = training_graph(10, seed=seed)
    dev = replace(preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * frac), reserve_bytes=0,
                  alignment_bytes=512)
    try:
        plan = run_baseline(g, dev, kind, recompute=True)
        out = lay_out_baseline(g, dev, kind, plan, time_limit_s=600.0)
    except InfeasibleError:
        return
    assert out.plan.allocation.kind == "arena" and out.fallback in ("", "re-planned")
    assert out.plan.device == dev and out.plan.planner["name"] == kind
    assert out.plan.schedule == plan.schedule          # its own order (odswap-paper's random one included)
    assert validate(g, out.plan).valid
    if out.fallback:
        assert out.source == kind and out.memory_given_up > 0
    else:
        assert out.plan.makespan_s == pytest.approx(plan.makespan_s)


def test_baseline_table_lays_the_baselines_out_where_the_written_plan_is():
    """Where the written plan has offsets, so has every baseline row (like with like); with a byte budget
    written (--no-arena), the baselines stay byte budgets. The search's byte-budget plan is kept beside."""
    from hybrid.pipeline import baseline_rows, warm_kernels

    warm_kernels()   # a cold numba cache (a fresh checkout) spent the layout's time compiling: no layout, a failure
    g = training_graph(10, seed=3)
    dev = replace(preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * 0.5), reserve_bytes=0,
                  alignment_bytes=512)
    searched = run_baseline(g, dev, "belady")
    laid = replace(searched, allocation=lay_out(g, searched, time_limit_s=30.0).plan.allocation)
    table = baseline_rows(g, dev, searched, laid, searched)
    names = [r["plan"] for r in table.rows]
    assert names[-2:] == ["optimize", "optimize, written (exact offsets)"]
    for r in table.rows[:-2]:   # each baseline laid out: the same or a re-planned (slower) one, never faster
        byte_budget = run_baseline(g, dev, r["plan"], recompute=True).makespan_s
        assert r["makespan_s"] >= byte_budget * (1 - 1e-9)
    assert any("arena offset" in n for n in table.notes) and not any("without offsets" in n for n in table.notes)
    unlaid = baseline_rows(g, dev, searched, searched, searched)
    names = [r["plan"] for r in unlaid.rows]
    assert names[-1] == "optimize" and "optimize, written (exact offsets)" not in names
    assert any(n.startswith("Every row is a byte budget without offsets") for n in unlaid.notes)   # said


def test_the_strongest_baselines_run_first_and_the_table_keeps_its_order(monkeypatch):
    """A time limit that leaves baselines out leaves out the weak ones: the README command's second run left
    out belady and recompute-only (run last) after naive, odswap and odswap-paper's layouts took the time."""
    import time

    import hybrid.swap.baselines as sb
    from hybrid.pipeline import baseline_rows
    from hybrid.pipeline.baselines import BASELINES

    g = training_graph(10, seed=3)
    dev = replace(preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * 0.5), reserve_bytes=0,
                  alignment_bytes=512)
    searched = run_baseline(g, dev, "belady")
    ran, real = [], sb.run_baseline
    clock = {"now": 0.0}

    def counted(graph, device, kind, *a, **k):  # noqa: ANN001, ANN202
        ran.append(kind)
        clock["now"] += 1.0           # each baseline takes a second of the limit
        return real(graph, device, kind, *a, **k)

    monkeypatch.setattr(sb, "run_baseline", counted)
    monkeypatch.setattr(time, "monotonic", lambda: clock["now"])
    table = baseline_rows(g, dev, searched, searched, searched, deadline=2.0)
    assert ran == ["belady", "recompute-only"]
    made = [r["plan"] for r in table.rows if r["plan"] in BASELINES]
    assert made and set(made) <= {"belady", "recompute-only"}   # (one may not run at this memory: a note says)
    skipped = [k for k in BASELINES if k not in ran]
    assert f"not run, the time limit was spent: {', '.join(skipped)}" in " ".join(table.notes)
    clock["now"] = 0.0
    ran.clear()
    names = [r["plan"] for r in baseline_rows(g, dev, searched, searched, searched).rows]
    assert [n for n in names if n in BASELINES] == [k for k in BASELINES if k in names]   # BASELINES' order


def _one_large_workspace(seed: int):
    """A training graph whose backward op with the most input bytes has a workspace of 40% of the peak (a cuDNN
    backward's scratch beside its result, as vgg16's on an H200)."""
    import dataclasses

    from hybrid.graph import Graph

    g = training_graph(10, seed=seed)
    peak = unswapped_peak(g)
    size = {t.id: t.bytes for t in g.tensors}
    big = max(g.ops[len(g.ops) // 2:], key=lambda o: sum(size[t] for t in o.inputs))
    ops = [dataclasses.replace(o, workspace_bytes=int(0.4 * peak)) if o.id == big.id else o for o in g.ops]
    return Graph(g.name, list(g.tensors), ops, g.device, g.extra)


def test_a_large_workspace_that_no_smaller_budget_makes_room_for_is_held_aside():
    # the byte budget counts the workspace only while its op runs; an arena leaves room beside it throughout, and
    # giving memory up does not help (the op no longer fits beside its workspace): the re-plan with the workspace
    # held aside lays out where, before, nothing did
    g = _one_large_workspace(0)
    dev = replace(preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * 0.8), reserve_bytes=0,
                  alignment_bytes=512)
    plan = run_baseline(g, dev, "belady")
    out = lay_out(g, plan, time_limit_s=30.0)
    assert out.plan.allocation.kind == "arena" and out.fallback == "re-planned"
    assert "the largest workspace aside" in out.source
    assert "aside" in out.plan.planner["fallback"]
    assert validate(g, out.plan).valid
    ws = max(op.workspace_bytes for op in g.ops)
    assert out.plan.allocation.arena_bytes + ws <= dev.usable_bytes
    # a baseline is laid out through its own re-plans only, which hold no workspace aside: like with like
    from hybrid.pipeline.baselines import lay_out_baseline

    with pytest.raises(InfeasibleError):
        lay_out_baseline(g, dev, "belady", plan, time_limit_s=30.0)


def test_optimize_with_workspaces_aside_plans_the_tensors_beside_the_largest_workspace(tmp_path):
    # the plan is of the graph as given (its sha256, its device), and its arena leaves the largest workspace free
    # throughout: what the executor holds beside the workspaces PyTorch allocates outside its pool
    from hybrid.graph import Graph
    from hybrid.plan import Plan

    g = _one_large_workspace(0)
    path = tmp_path / "g.json"
    g.save(path)
    g = Graph.load(path)
    memory = int(unswapped_peak(g) * 0.8)
    out = tmp_path / "p.json"
    r = run("optimize", "--graph", path, "--memory", f"{memory}B", "--generations", "2", "--time-limit", "2m",
            "--refine", "none", "--workspaces-aside", "--quiet", "--out", out)
    assert r.exit_code == 0, r.output
    plan = Plan.load(out)
    assert validate(g, plan).valid
    assert plan.graph_sha256 == g.sha256 and plan.device.memory_bytes == memory
    ws = max(op.workspace_bytes for op in g.ops)
    assert plan.planner["workspaces_aside"] == ws
    if plan.allocation.kind == "arena":
        assert plan.allocation.arena_bytes + ws <= plan.device.usable_bytes


def test_workspaces_aside_hands_back_plans_of_the_graph_as_given() -> None:
    # each plan the caller sees is of the graph given (the validator's peak stated), one object stays one (the
    # summary compares them by identity), the smaller problem's bounds are not reported as the graph's; a graph
    # with no workspace takes the usual path
    from ga import GAConfig
    from hybrid.pipeline import OptimizeOptions, run_optimize
    from hybrid.validator import event_figures

    g = _one_large_workspace(1)
    dev = replace(preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * 0.8), reserve_bytes=0,
                  alignment_bytes=512)
    opts = OptimizeOptions(config=GAConfig(seed=1, population=8), generations=2, workers=1, workspaces_aside=True)
    res = run_optimize(g, dev, 120.0, opts)
    for p in (res.plan, res.search_plan, res.refined_plan, res.layout.plan):
        assert p.graph_sha256 == g.sha256 and p.device == dev and validate(g, p).valid
        assert p.metrics["peak_bytes"] == event_figures(g, p)["peak_bytes"]
    assert res.layout.plan is res.plan and res.refined_plan is res.search_plan   # refine "none": no re-timing
    assert not res.bounds
    plain = training_graph(6, seed=2, workspace_prob=0.0)
    dev2 = replace(dev, memory_bytes=int(unswapped_peak(plain) * 0.8))
    res2 = run_optimize(plain, dev2, 120.0, opts)
    assert "workspaces_aside" not in res2.plan.planner and validate(plain, res2.plan).valid


def test_workspaces_aside_holds_the_default_implementations_largest_and_leaves_out_larger_ones() -> None:
    # a faster implementation whose scratch is larger than the memory (vgg16's unfold_gemm and winograd on the
    # H200 state 0.4-3.4 GiB): held aside over every implementation it left no room for tensors and no plan;
    # now the default implementations' largest is held aside and that implementation is not chosen
    import dataclasses

    from ga import GAConfig
    from hybrid.graph import Graph
    from hybrid.graph.types import Impl
    from hybrid.pipeline import OptimizeOptions, run_optimize
    from hybrid.pipeline.optimize import workspaces_aside_problem

    g = _one_large_workspace(2)
    memory = int(unswapped_peak(g) * 0.8)
    big = max(g.ops, key=lambda o: o.workspace_bytes)
    impls = (Impl("default", big.time_s, big.workspace_bytes), Impl("huge", big.time_s / 2, 2 * memory))
    g = Graph(g.name, list(g.tensors), [dataclasses.replace(o, impls=impls) if o.id == big.id else o for o in g.ops],
              g.device, g.extra)
    dev = replace(preset("v100-16gb"), memory_bytes=memory, reserve_bytes=0, alignment_bytes=512)
    bare, smaller, aside = workspaces_aside_problem(g, dev)
    assert aside == big.workspace_bytes and smaller.memory_bytes == memory - aside
    assert [im.name for im in bare.op(big.id).impls] == ["default"]
    opts = OptimizeOptions(config=GAConfig(seed=1, population=8), generations=2, workers=1, workspaces_aside=True)
    res = run_optimize(g, dev, 120.0, opts)
    assert res.plan.planner["workspaces_aside"] == aside and validate(g, res.plan).valid
    assert all(e.impl != "huge" for e in res.plan.events if e.kind == "compute")


def test_the_default_workspace_is_what_runs_where_no_implementation_is_chosen() -> None:
    # the op's own time/workspace are its default implementation's (what runs where a plan names no impl: the
    # planners' `impl_arrays(None)`); the aside `--workspaces-aside` and `lay_out` hold is that one. An op whose
    # own figures match none of its impls is refused (the planners timed it by its figures, the validator by its
    # first impl: no plan of it passed, helper-126's probe)
    import dataclasses

    from hybrid.errors import FormatError
    from hybrid.graph import Graph
    from hybrid.graph.info import largest_workspace
    from hybrid.graph.types import Impl
    from hybrid.pipeline.optimize import workspaces_aside_problem

    g0 = _one_large_workspace(3)
    big = max(g0.ops, key=lambda o: o.workspace_bytes)
    small = Impl("small", big.time_s * 2, big.workspace_bytes // 4)
    with pytest.raises(FormatError, match=rf"op {big.id!r}: its time_s and workspace_bytes .* match none of its "
                                          r"impls \(small .*\); they are its default implementation's"):
        Graph(g0.name, list(g0.tensors), [dataclasses.replace(o, impls=(small,)) if o.id == big.id else o
                                          for o in g0.ops], g0.device, g0.extra)
    own = Impl("own", big.time_s, big.workspace_bytes)
    g = Graph(g0.name, list(g0.tensors), [dataclasses.replace(o, impls=(small, own)) if o.id == big.id else o
                                          for o in g0.ops], g0.device, g0.extra)
    assert g.op(big.id).default_impl == 1                      # the impl matching its own figures
    assert largest_workspace(g, default_only=True) == big.workspace_bytes == int(g.arrays.op_ws.max())
    assert largest_workspace(g) == big.workspace_bytes
    dev = replace(preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * 1.5), reserve_bytes=0)
    _, smaller, aside = workspaces_aside_problem(g, dev)
    assert aside == big.workspace_bytes and smaller.memory_bytes == dev.memory_bytes - aside
