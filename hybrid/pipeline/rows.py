"""A plan's summary figures (`plan_row`) and the any-order lower bounds they divide by, remembered per graph."""
from __future__ import annotations

from hybrid.graph import Graph
from hybrid.plan import Plan

_BOUNDS: dict = {}


def any_order_bound(graph: Graph, device, recompute: bool) -> float:  # noqa: ANN001 - hybrid.device.Device
    """`hybrid.bounds.graph_bound`, remembered per graph, device and kind (seconds on a 15k-op graph):
    no plan of any order is faster; with `recompute` it also holds for plans that rerun ops (and is lower)."""
    from hybrid.bounds import graph_bound

    key = (id(graph), device, bool(recompute))
    hit = _BOUNDS.get(key)
    if hit is None or hit[0] is not graph:
        if len(_BOUNDS) >= 8:
            _BOUNDS.clear()
        hit = _BOUNDS[key] = (graph, graph_bound(graph, device, recompute=bool(recompute)))
    return hit[1]


def plan_row(name: str, plan: Plan, graph: Graph | None = None, bounds: dict[bool, float] | None = None) -> dict:
    """A plan's summary figures. With `graph`, also its makespan over the any-order bounds (`any_order_bound`):
    `swap_bound_s` (swap only; NaN for a plan that recomputes, which it does not bound) and
    `recompute_bound_s` (with recompute, for every plan); `graph_bound_s` is the one of the plan's own kind
    (hybrid.bounds.plan_graph_bound), kept for scripts that read it. `bounds` (keyed by recompute): use
    these instead of computing them; one missing is NaN. With `graph`, stall, bytes moved and peak are
    recomputed from the plan's events (`hybrid.validator.event_figures`), not read from its metrics."""
    from hybrid.plan.metrics import persistent_bound_of
    from hybrid.validator import event_figures

    m = plan.metrics
    fig = event_figures(graph, plan) if graph is not None else {}
    ideal = float(m.get("ideal_s", 0.0))
    lb = float(fig["persistent_bound_s"]) if fig else persistent_bound_of(m)
    nan = float("nan")
    rc = plan.recomputes
    if bounds is not None:
        rb, sb = bounds.get(True, nan), (bounds.get(False, nan) if not rc else nan)
    else:
        rb = any_order_bound(graph, plan.device, True) if graph is not None else nan
        sb = any_order_bound(graph, plan.device, False) if graph is not None and not rc else nan
    gb = rb if rc else sb
    ms = plan.makespan_s
    return {
        "plan": name,
        "makespan_s": ms,
        "ideal_s": ideal,
        "ideal/makespan": ideal / ms if ms > 0 else 1.0,
        "makespan/persistent_bound": ms / lb if lb > 0 else nan,
        "makespan/graph_bound": ms / gb if gb > 0 else nan,
        "graph_bound_s": gb,
        "swap_bound_s": sb,
        "makespan/swap_bound": ms / sb if sb > 0 else nan,
        "recompute_bound_s": rb,
        "makespan/recompute_bound": ms / rb if rb > 0 else nan,
        "recomputes": rc,
        "stall_s": float(fig.get("stall_s", m.get("stall_s", ms - ideal))),
        "recompute_s": float(fig.get("recompute_s", m.get("recompute_s", 0.0))),   # reruns: makespan = ideal +
        #                                                                            stall + this
        "bytes_h2d": int(fig.get("bytes_h2d", m.get("bytes_h2d", 0))),
        "bytes_d2h": int(fig.get("bytes_d2h", m.get("bytes_d2h", 0))),
        "peak_bytes": int(fig.get("peak_bytes", m.get("peak_bytes", 0))),
    }
