"""The written plan is never slower than a baseline laid out the same way (issue 31): where the search's plan lost
its speed to the layout's fallback and a baseline row is faster, that baseline is written, the table and the
summary say so, and the file records what it replaced."""
from __future__ import annotations

from dataclasses import replace

from hybrid.arena.layout import laid_out
from hybrid.graph.synthetic import training_graph
from hybrid.pipeline.baselines import with_faster_baseline
from hybrid.pipeline.result import Baselines, Budget, OptimizeResult, Refinement, Timings
from hybrid.pipeline.rows import plan_row
from hybrid.swap.baselines import run_baseline
from hybrid.validator import validate


def _result(graph, written, baselines):
    return OptimizeResult(plan=written, search_plan=written, refined_plan=written, search=None,
                          refinement=Refinement(), layout=None, budget=Budget(1.0, 0.5, 0.5, 0.5),
                          timings=Timings(), baselines=baselines)


def test_a_faster_laid_out_baseline_is_written_and_said() -> None:
    g = training_graph(8, seed=2)
    dev = replace(g.device, memory_bytes=int(0.5 * sum(t.bytes for t in g.tensors)), reserve_bytes=0)
    fast = laid_out(g, run_baseline(g, dev, "belady"))
    slow = laid_out(g, run_baseline(g, dev, "naive"))
    assert fast.allocation.kind == slow.allocation.kind == "arena" and fast.makespan_s < slow.makespan_s
    rows = [plan_row("belady", fast, g), plan_row("optimize, written (exact offsets)", slow, g)]
    res = _result(g, slow, Baselines(rows=rows, plans={"belady": fast, "naive": slow}, written_row=1))
    with_faster_baseline(res)
    assert res.plan.makespan_s == fast.makespan_s and res.baseline_written == "belady" and res.searched_plan is slow
    assert res.plan.planner["written_instead_of"]["makespan_s"] == slow.makespan_s
    assert validate(g, res.plan).valid and res.plan.events == fast.events
    assert [r["plan"] for r in res.baselines.rows] == ["belady", "optimize, laid out (not written)"]
    assert list(res.frame()["written"]) == [True, False]   # the table marks the baseline's row as the written one
    assert res.baselines.notes[-1].startswith("belady's plan, laid out as the search's is, is faster")
    assert "the belady baseline, laid out the same way, was faster and is written" in res.difference()


def test_a_written_plan_no_slower_than_every_baseline_stays() -> None:
    g = training_graph(8, seed=2)
    dev = replace(g.device, memory_bytes=int(0.5 * sum(t.bytes for t in g.tensors)), reserve_bytes=0)
    fast = laid_out(g, run_baseline(g, dev, "belady"))
    slow = laid_out(g, run_baseline(g, dev, "naive"))
    res = _result(g, fast, Baselines(rows=[], plans={"naive": slow, "belady": fast}))
    with_faster_baseline(res)     # a tie is no reason to write another plan
    assert res.plan is fast and not res.baseline_written and res.difference() == ""


def test_a_swap_only_search_writes_no_baseline_that_reruns() -> None:
    g = training_graph(8, seed=2)
    dev = replace(g.device, memory_bytes=int(0.4 * sum(t.bytes for t in g.tensors)), reserve_bytes=0)
    reruns = laid_out(g, run_baseline(g, dev, "recompute-only"))
    slow = laid_out(g, run_baseline(g, dev, "naive"))
    assert reruns.recomputes and not slow.recomputes and reruns.makespan_s < slow.makespan_s
    rows = [plan_row("optimize", slow, g)]
    res = _result(g, slow, Baselines(rows=rows, plans={"recompute-only": reruns}, written_row=0))
    with_faster_baseline(res, recompute=False)
    assert res.plan is slow and not res.baseline_written
    with_faster_baseline(res, recompute=True)
    assert res.baseline_written == "recompute-only" and res.baselines.rows[0]["plan"] == "optimize (not written)"
