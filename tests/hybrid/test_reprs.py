"""Plans and graphs print short in a notebook (the dataclass default printed every event: 196 KB for one plan)."""
from __future__ import annotations

from pathlib import Path

from hybrid.swap.baselines import run_baseline
from hybrid.graph import Graph

RESNET = Path(__file__).resolve().parents[2] / "examples" / "resnet18-b32.json"


def test_plan_and_graph_reprs_are_one_short_line() -> None:
    from dataclasses import replace

    g = Graph.load(RESNET)
    plan = run_baseline(g, replace(g.device, memory_bytes=100 << 20, reserve_bytes=0), "belady")
    text = repr(plan)
    assert len(text) < 200 and "\n" not in text, text
    assert text.startswith("Plan('resnet-18-b32', planner 'belady', ") and f"{len(plan.events)} events" in text
    assert "makespan " in text and "100 MiB" in text
    assert repr(g) == "Graph('resnet-18-b32', 225 ops, 430 tensors)"
