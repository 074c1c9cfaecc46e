"""`hybrid timeline` on a placement plan: the host's ops get a `cpu` lane and trace thread, and the memory curve
counts only device copies (a cpu op's outputs are host copies), so its highest point is the validator's peak."""
from __future__ import annotations

import json

from hybrid.placement.chain import CPU, GPU
from hybrid.placement.partition import part_graph
from hybrid.placement.timing import evaluate, link_of, to_plan
from hybrid.report.timeline import lanes_of, memory_profile, plan_trace_rows, plot_timeline, write_chrome_trace
from hybrid.validator import validate
from tests.placement.random_graphs import random_inference_graph


def _mixed():
    g = random_inference_graph(11, stages=5, chain_only=True)
    pg = part_graph(g, key_only=False)
    devices = tuple(GPU if p % 2 == 0 else CPU for p in range(pg.n))
    plan = to_plan(pg, evaluate(pg, devices, link_of(g.device), "alternate"), g.device)
    assert validate(g, plan).valid and any(e.on_cpu for e in plan.events)
    return g, plan


def test_the_memory_curve_of_a_placement_is_the_validators() -> None:
    g, plan = _mixed()
    times, level = memory_profile(g, plan)
    assert int(level.max()) == validate(g, plan).peak_bytes
    assert level[-1] == sum(plan.device.occupied(t.bytes) for t in g.tensors if t.id in plan.resident_at_start)


def test_host_ops_have_their_own_lane_and_thread(tmp_path) -> None:
    g, plan = _mixed()
    assert lanes_of(plan) == ("compute", "h2d", "d2h", "cpu")
    rows = plan_trace_rows(g, plan)
    n_cpu = sum(1 for e in plan.events if e.on_cpu)
    assert sum(1 for r in rows if r[2] == "cpu") == n_cpu > 0
    path = tmp_path / "t.json"
    write_chrome_trace(path, [("p", rows, memory_profile(g, plan))])
    events = json.loads(path.read_text())["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert sorted(names.values()) == ["compute", "cpu", "d2h", "h2d"]
    by_thread: dict[int, list[tuple[float, float]]] = {}
    for e in events:
        if e["ph"] == "X":
            by_thread.setdefault(e["tid"], []).append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_thread.values():   # events on one stream never overlap (rule 1)
        spans.sort()
        assert all(a[1] <= b[0] + 1e-6 for a, b in zip(spans, spans[1:]))
    fig = plot_timeline(g, plan)
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ["cpu", "d2h", "h2d", "compute"]


def test_stall_is_the_gpu_streams_idle_time_everywhere() -> None:
    """One definition: the summaries' stall_s is the sum of the stalls a timeline shades (GPU compute idle)."""
    from hybrid.plan.metrics import compute_stalls
    from hybrid.validator import event_figures

    g, plan = _mixed()
    gaps = compute_stalls(plan)
    gpu = sum(e.end_s - e.start_s for e in plan.events if e.kind == "compute" and not e.on_cpu)
    assert event_figures(g, plan)["stall_s"] == sum(b - a for a, b in gaps)
    assert abs(sum(b - a for a, b in gaps) - (plan.makespan_s - gpu)) <= 1e-12
