"""Pandas tables of a plan's events and an execution's iterations (API review: neither existed)."""
from __future__ import annotations

import dataclasses

from hybrid.arena.layout import lay_out
from hybrid.graph import Graph
from hybrid.swap.baselines import run_baseline
from tests.cli.helpers import RESNET


def test_a_plans_events_as_a_table_sum_to_its_streams_busy_time_and_carry_its_offsets() -> None:
    g = Graph.load(RESNET)
    plan = run_baseline(g, dataclasses.replace(g.device, memory_bytes=96 << 20, reserve_bytes=0), "belady")
    df = plan.events_frame()
    assert len(df) == len(plan.events) and list(df["kind"]) == [e.kind for e in plan.events]
    busy = df.groupby("stream")["duration_s"].sum()
    assert abs(busy["compute"] - sum(e.end_s - e.start_s for e in plan.events if e.kind == "compute")) < 1e-12
    assert df["offset"].isna().all()              # a byte budget: no offsets
    laid = lay_out(g, plan).plan
    offsets = laid.events_frame().dropna(subset=["offset"])
    assert len(offsets) and all(laid.allocation.offsets[t] == o for t, o in zip(offsets["tensor"], offsets["offset"]))
