"""One-screen summaries of plans (the tables commands print)."""
from __future__ import annotations

from typing import Iterable

from tabulate import tabulate

from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.units import format_bytes, format_seconds


def plan_row(name: str, plan: Plan, graph: Graph | None = None) -> dict:
    """A plan's summary figures; with `graph`, also its makespan over `graph_bound` (any schedule, activations
    counted: hybrid.bounds.plan_graph_bound), else over the persistent-tensor bound only."""
    from hybrid.bounds import plan_graph_bound
    from hybrid.plan.metrics import persistent_bound_of

    m = plan.metrics
    ideal = float(m.get("ideal_s", 0.0))
    lb = persistent_bound_of(m)
    gb = plan_graph_bound(graph, plan) if graph is not None else float("nan")
    return {
        "plan": name,
        "makespan_s": plan.makespan_s,
        "ideal_s": ideal,
        "ideal/makespan": ideal / plan.makespan_s if plan.makespan_s > 0 else 1.0,
        "makespan/persistent_bound": plan.makespan_s / lb if lb > 0 else float("nan"),
        "makespan/graph_bound": plan.makespan_s / gb if gb > 0 else float("nan"),
        "stall_s": float(m.get("stall_s", plan.makespan_s - ideal)),
        "bytes_h2d": int(m.get("bytes_h2d", 0)),
        "bytes_d2h": int(m.get("bytes_d2h", 0)),
        "peak_bytes": int(m.get("peak_bytes", 0)),
    }


def table(rows: Iterable[dict]) -> str:
    shown = []
    for r in rows:
        shown.append({
            "plan": r["plan"], "makespan": format_seconds(r["makespan_s"]), "ideal": format_seconds(r["ideal_s"]),
            "ideal/makespan": f"{r['ideal/makespan']:.3f}",
            "vs graph bound": f"{r['makespan/graph_bound']:.3f}x" if r["makespan/graph_bound"] == r["makespan/graph_bound"]
            else f"{r['makespan/persistent_bound']:.3f}x (persistent only)",
            "stall": format_seconds(r["stall_s"]), "h2d": format_bytes(r["bytes_h2d"]),
            "d2h": format_bytes(r["bytes_d2h"]), "peak": format_bytes(r["peak_bytes"]),
        })
    return tabulate(shown, headers="keys", tablefmt="github", disable_numparse=True)
