"""Every plan states its reruns, counted from its events (the walk with re-binding and refined plans stated none:
a plan with 15 reruns read as none), and `hybrid validate` notes stated counts its events do not give."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from hybrid.graph.info import unswapped_peak
from hybrid.graph.order import program_order
from hybrid.graph.synthetic import training_graph
from hybrid.pipeline import OptimizeOptions
from hybrid.swap.from_plan import from_plan
from hybrid.swap.planner import SwapPlanner
from hybrid.swap.pools import byte_pool
from hybrid.swap.to_plan import to_plan
from hybrid.validator import event_figures
from tests.cli.helpers import run


def _plan():
    g = training_graph(40, seed=2)
    dev = replace(g.device, memory_bytes=int(unswapped_peak(g) * 0.3), reserve_bytes=0)
    aug = SwapPlanner(g, dev).plan(program_order(g), byte_pool(g, dev), OptimizeOptions().planner_options())
    return g, to_plan(aug, {"name": "test"})


def test_reruns_are_stated_as_the_events_give_them() -> None:
    g, plan = _plan()
    reruns = [e for e in plan.events if e.kind == "compute" and e.recompute]
    assert reruns and plan.metrics["recomputes"] == len(reruns) == event_figures(g, plan)["recomputes"]
    assert abs(plan.metrics["recompute_s"] - sum(e.end_s - e.start_s for e in reruns)) < 1e-12
    again = to_plan(from_plan(g, plan), {"name": "again"})     # a plan read back states the same
    assert again.metrics["recomputes"] == len(reruns)
    for key in ("swap_ins", "swap_outs", "frees"):
        assert plan.metrics[key] == event_figures(g, plan)[key]


def test_validate_notes_edited_counts(tmp_path: Path) -> None:
    g, plan = _plan()
    g.save(tmp_path / "g.json")
    doc = json.loads(plan.dumps())
    doc["metrics"].update(recomputes=0, swap_ins=0)
    (tmp_path / "p.json").write_text(json.dumps(doc))
    r = run("validate", "--graph", tmp_path / "g.json", "--plan", tmp_path / "p.json")
    assert r.exit_code == 0, r.output
    assert f"note: metrics.recomputes states 0; the events give {plan.metrics['recomputes']}" in r.output
    assert "note: metrics.swap_ins states 0" in r.output
