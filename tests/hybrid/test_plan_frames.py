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


def test_given_the_graph_every_compute_event_names_the_implementation_it_runs() -> None:
    """The format leaves `impl` out where an op runs its default; a user filtering the frame by impl lost those."""
    g = Graph.load(RESNET)
    plan = run_baseline(g, dataclasses.replace(g.device, memory_bytes=96 << 20, reserve_bytes=0), "belady")
    bare, named = plan.events_frame(), plan.events_frame(g)
    compute = named["kind"] == "compute"
    left_out = compute & bare["impl"].isna()
    assert left_out.sum() > 0 and named.loc[compute, "impl"].notna().all()
    assert (named.loc[compute & ~left_out, "impl"] == bare.loc[compute & ~left_out, "impl"]).all()
    for op_id, impl in zip(named.loc[left_out, "op"], named.loc[left_out, "impl"]):
        op = g.op(op_id)
        assert impl == op.implementations[op.default_impl].name
    assert named.loc[~compute, "impl"].isna().all()
    copies = named[named["kind"].isin(["swap_in", "swap_out"])]
    assert len(copies) and all(b == g.tensor(t).bytes for t, b in zip(copies["tensor"], copies["bytes"]))
    assert named.loc[compute, "bytes"].isna().all() and "bytes" not in bare.columns


def test_a_frame_of_another_graphs_plan_is_refused_in_one_line() -> None:
    """A ResNet plan read against another graph gave peak 0 and its bound ratio 19x off, with no error."""
    import pytest

    from hybrid.errors import HybridError, InvalidPlanError
    from hybrid.graph.synthetic import training_graph
    from hybrid.pipeline.rows import plan_row

    g = Graph.load(RESNET)
    plan = run_baseline(g, dataclasses.replace(g.device, memory_bytes=96 << 20, reserve_bytes=0), "belady")
    other = training_graph(4)
    for read in (lambda: plan.events_frame(other), lambda: plan_row("p", plan, other)):
        with pytest.raises(InvalidPlanError, match=r"^the plan was made for another graph than graph "):
            read()
    with pytest.raises(HybridError, match=r"^graph must be a hybrid\.graph\.Graph .*got str"):
        plan.events_frame(str(RESNET))
