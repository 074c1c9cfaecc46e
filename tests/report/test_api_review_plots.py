"""Plotting from a notebook (API review): no figure function switches the caller's matplotlib backend (Jupyter's
inline display broke after one did), and `plot_timeline` / `plan_trace_rows` refuse a plan of another graph or
arguments of the wrong type in one HybridError line rather than drawing a wrong figure or a bare KeyError."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterator

import pandas as pd
import pytest

from ga.progress import ConvergenceLog, GenerationStats
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.graph.synthetic import training_graph
from hybrid.plan import Plan
from hybrid.report.timeline import memory_profile, plan_trace_rows, plot_timeline
from hybrid.serve.plot import plot_frontier, plot_latency
from hybrid.swap.baselines import run_baseline


@pytest.fixture(scope="module")
def graph_plan() -> tuple[Graph, Plan]:
    g = training_graph(6, seed=1)
    dev = replace(g.device, memory_bytes=int(0.6 * sum(t.bytes for t in g.tensors)), reserve_bytes=0)
    return g, run_baseline(g, dev, "belady")


@pytest.fixture
def svg_backend() -> Iterator[str]:
    """A backend other than Agg, as a notebook's inline one is; the previous one restored after the test."""
    import matplotlib

    before = matplotlib.get_backend()
    matplotlib.use("svg")
    try:
        yield matplotlib.get_backend()
    finally:
        matplotlib.use(before)


def test_the_timeline_leaves_the_backend_alone(svg_backend: str, graph_plan, tmp_path: Path) -> None:
    import matplotlib
    from matplotlib.figure import Figure

    g, plan = graph_plan
    fig = plot_timeline(g, [("a", plan), ("b", plan)], tmp_path / "t.png", title="two")
    assert matplotlib.get_backend() == svg_backend
    assert isinstance(fig, Figure) and len(fig.axes) == 4
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_convergence_plot_leaves_the_backend_alone(svg_backend: str, tmp_path: Path) -> None:
    import matplotlib

    log = ConvergenceLog([GenerationStats(time_s=float(i), generation=i, evaluations=4 * i, best_s=2.0 - 0.1 * i,
                                          mean_s=2.5, worst_s=3.0, best_ever_s=2.0 - 0.1 * i, infeasible=0,
                                          evals_per_s=4.0) for i in range(3)])
    log.plot(tmp_path / "c.png", title="t", ideal_s=1.0, lower_bound_s=1.2)
    assert matplotlib.get_backend() == svg_backend
    assert (tmp_path / "c.png").stat().st_size > 0


def test_the_convergence_log_says_the_memory_its_makespans_are_on_and_the_plot_marks_a_change(
        tmp_path: Path) -> None:
    """A headroom search re-calibrated halfway goes on with less memory: its best starts over there, and the
    log's best_ever_s rose with nothing to say why (helper-125's probe). The log carries memory_bytes and the
    plot draws a line where it changes; a log written before the column reads back with 0."""
    rows = [GenerationStats(time_s=float(i), generation=i, evaluations=4 * i, best_s=2.0 + i, mean_s=2.5 + i,
                            worst_s=3.0 + i, best_ever_s=2.0 + (i >= 2), infeasible=0, evals_per_s=4.0,
                            memory_bytes=(4 << 20) if i < 2 else (3 << 20)) for i in range(4)]
    log = ConvergenceLog(rows)
    log.to_csv(tmp_path / "c.csv")
    assert ConvergenceLog.read_csv(tmp_path / "c.csv").rows == rows
    import matplotlib.figure

    drawn: list[dict] = []
    real = matplotlib.axes.Axes.axvline

    def axvline(self, x=0, *a, **kw):  # noqa: ANN001, ANN202
        drawn.append({"x": x, **kw})
        return real(self, x, *a, **kw)

    matplotlib.axes.Axes.axvline = axvline
    try:
        log.plot(tmp_path / "c.png")
    finally:
        matplotlib.axes.Axes.axvline = real
    assert [d["x"] for d in drawn] == [2.0] and drawn[0]["label"] == "searched on 3 MiB from here (was 4 MiB)"
    old = tmp_path / "old.csv"
    old.write_text("time_s,generation,evaluations,best_s,mean_s,worst_s,best_ever_s,infeasible,evals_per_s\n"
                   "0.5,0,8,1.0,1.5,2.0,1.0,0,16.0\n")
    back = ConvergenceLog.read_csv(old)
    assert back.rows[0].memory_bytes == 0 and back.rows[0].evaluations == 8
    back.plot(tmp_path / "old.png")     # no column, no line


def test_the_serve_and_frontier_figures_leave_the_backend_alone(svg_backend: str, tmp_path: Path) -> None:
    import matplotlib

    lat = pd.DataFrame({"policy": ["a", "a", "b"], "models": [1, 1, 1], "throughput": [1.0, 2.0, 1.0],
                        "p99_s": [0.01, 0.02, 0.03]})
    plot_latency(lat, tmp_path / "lat.png", "latency", notes={"a": "the ideal"}, footnote="times leave out x")
    assert matplotlib.get_backend() == svg_backend
    front = pd.DataFrame([
        {"kind": "plan", "label": "optimize", "usable_bytes": 2**20, "usable_MiB": 1.0, "makespan_s": 0.02,
         "best_s": 0.02, "bound_s": 0.01, "ideal_s": 0.01, "laid_out": True, "interrupted": False},
        {"kind": "plan", "label": "optimize", "usable_bytes": 2**21, "usable_MiB": 2.0, "makespan_s": 0.015,
         "best_s": 0.015, "bound_s": 0.01, "ideal_s": 0.01, "laid_out": False, "interrupted": True},
        {"kind": "bound", "label": "lower bound", "usable_bytes": 2**20, "usable_MiB": 1.0, "makespan_s": None,
         "best_s": None, "bound_s": 0.01, "ideal_s": 0.01, "laid_out": None, "interrupted": False},
        {"kind": "point", "label": "other", "usable_bytes": 2**21, "usable_MiB": 2.0, "makespan_s": 0.012,
         "best_s": None, "bound_s": None, "ideal_s": 0.01, "laid_out": None, "interrupted": False},
    ])
    plot_frontier(front, tmp_path / "front.svg", "frontier")
    assert matplotlib.get_backend() == svg_backend
    assert (tmp_path / "lat.png").stat().st_size > 0 and (tmp_path / "front.svg").read_text().lstrip().startswith("<")


def _one_line(e: pytest.ExceptionInfo) -> str:
    text = str(e.value)
    assert "\n" not in text and len(text) < 400, text
    return text


def test_a_plan_of_another_graph_is_refused_in_one_line(graph_plan) -> None:
    g, plan = graph_plan
    other = training_graph(5, seed=3)
    assert other.name != g.name or other.sha256 != g.sha256
    for call in (lambda: plot_timeline(other, plan), lambda: plot_timeline(other, [("mine", plan)]),
                 lambda: plan_trace_rows(other, plan), lambda: memory_profile(other, plan)):
        with pytest.raises(HybridError) as e:
            call()
        text = _one_line(e)
        assert "made for another graph" in text, text
    renamed = replace(plan, graph="cnn")
    with pytest.raises(HybridError, match=r"plot_timeline: plans\[1\] \('b'\) was made for another graph .*"
                                          r"plan is for graph 'cnn'"):
        plot_timeline(g, [("a", plan), ("b", renamed)])
    edited = replace(plan, graph_sha256="0" * 64)   # same name, another version of the file: as the validator says
    with pytest.raises(HybridError, match="graph_sha256 000000000000… does not match"):
        plan_trace_rows(g, edited)


def test_an_unknown_id_under_the_same_graph_name_is_said_not_a_key_error(graph_plan) -> None:
    g, plan = graph_plan
    events = list(plan.events)
    k = next(i for i, e in enumerate(events) if e.kind == "compute")
    events[k] = replace(events[k], op="no-such-op")
    with pytest.raises(HybridError, match=rf"events\[{k}\] names op 'no-such-op', which graph"):
        plan_trace_rows(g, replace(plan, events=events))
    k = next(i for i, e in enumerate(plan.events) if e.tensor is not None)
    events = list(plan.events)
    events[k] = replace(events[k], tensor="no-such-tensor")
    with pytest.raises(HybridError, match=rf"events\[{k}\] names tensor 'no-such-tensor'"):
        plot_timeline(g, replace(plan, events=events))


@pytest.mark.parametrize("graph, plans, says", [
    ("cnn.json", None, r"graph must be a hybrid.graph.Graph, got str; load it with Graph.load\('cnn.json'\)"),
    (None, "both", r"plans\[0\] must be a \(label, Plan\) pair, got Plan; pass one Plan, or \(label, Plan\) pairs"),
    (None, "plan.json", r"plans must be a Plan or a list of \(label, Plan\) pairs, got str"),
    (None, [], r"plans is empty"),
    (None, [("a", "plan.json")], r"plans\[0\] must be a \(label, Plan\) pair, got tuple"),
])
def test_wrong_types_are_one_clear_line(graph_plan, graph, plans, says) -> None:  # noqa: ANN001
    g, plan = graph_plan
    graph = g if graph is None else graph
    plans = plan if plans is None else [plan, plan] if plans == "both" else plans
    with pytest.raises(HybridError, match=says) as e:
        plot_timeline(graph, plans)
    _one_line(e)
    with pytest.raises(HybridError, match="plan_trace_rows: plan must be a hybrid.plan.Plan, got str"):
        plan_trace_rows(g, "plan.json")
