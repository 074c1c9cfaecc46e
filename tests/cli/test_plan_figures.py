"""A plan's figures have one definition: the stall, bytes moved and peak a planner writes in `metrics` are what
its events give (`hybrid.validator.event_figures`, the peak as rule 5 reads it), summaries print the events'
figures, and `hybrid validate` notes a stated figure the events do not give."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.validator import event_figures, validate
from tests.cli.helpers import foreign_graph_file, run

KINDS = ["naive", "odswap", "vdnn", "tflms", "belady", "recompute-only"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_baselines_metrics_are_its_events_figures(tmp_path, kind) -> None:
    path = foreign_graph_file(tmp_path)
    out = tmp_path / "p.json"
    memory = "30MiB" if kind == "tflms" else "24MiB"    # TFLMS keeps every persistent tensor resident
    r = run("baseline", "--graph", path, "--memory", memory, "--kind", kind, "--out", out)
    assert r.exit_code == 0, r.output
    g, plan = Graph.load(path), Plan.load(out)
    got = event_figures(g, plan)
    assert got["peak_bytes"] == validate(g, plan).peak_bytes == plan.metrics["peak_bytes"]
    for key in ("bytes_h2d", "bytes_d2h"):
        assert plan.metrics[key] == got[key], key
    assert plan.metrics["stall_s"] == pytest.approx(got["stall_s"], abs=plan.tolerance_s)
    v = run("validate", "--graph", path, "--plan", out)
    assert v.exit_code == 0 and "note:" not in v.output, v.output


def test_edited_metrics_are_noted_and_not_printed(tmp_path) -> None:
    path = foreign_graph_file(tmp_path)
    out = tmp_path / "p.json"
    assert run("baseline", "--graph", path, "--memory", "12MiB", "--kind", "belady", "--out", out).exit_code == 0
    d = json.loads(out.read_text())
    true_peak = d["metrics"]["peak_bytes"]
    d["metrics"].update(peak_bytes=1, bytes_h2d=5, stall_s=0.0)
    out.write_text(json.dumps(d))
    v = run("validate", "--graph", path, "--plan", out)
    assert v.exit_code == 0, v.output
    notes = [ln for ln in v.output.splitlines() if ln.startswith("note: metrics.")]
    assert any(ln.startswith("note: metrics.peak_bytes states 1 B") for ln in notes), v.output
    assert any(ln.startswith("note: metrics.bytes_h2d states 5 B") for ln in notes), v.output
    ref = run("refine", "--graph", path, "--plan", out, "--out", tmp_path / "r.json", "--max-windows", "1")
    assert ref.exit_code == 0, ref.output
    table = ref.output[ref.output.index("| input"):]
    assert "| 1 B" not in table and "| 5 B" not in table, ref.output   # the input row: the events' figures
    assert true_peak > 1


def test_a_laid_out_plan_re_timed_states_its_own_layout_figures(tmp_path) -> None:
    """`hybrid refine` of a laid-out plan keeps every offset and moves copies: the written plan's layout record
    states the live peak of its new events, and no pool size (an arena is not a pool of classes); an edited
    pool size or layout record is noted by `hybrid validate`."""
    path = foreign_graph_file(tmp_path)
    base, out = tmp_path / "b.json", tmp_path / "r.json"
    assert run("baseline", "--graph", path, "--memory", "16MiB", "--kind", "belady", "--out", base).exit_code == 0
    r = run("refine", "--graph", path, "--plan", base, "--out", out, "--max-windows", "4", "--seed", "1")
    assert r.exit_code == 0 and "faster" in r.output, r.output     # re-timed: its copies moved
    g, plan = Graph.load(path), Plan.load(out)
    assert plan.allocation.kind == "arena" and "pool_bytes" not in plan.metrics
    assert plan.planner["arena"]["peak_live_bytes"] == validate(g, plan).peak_bytes == plan.metrics["peak_bytes"]
    v = run("validate", "--graph", path, "--plan", out)
    assert v.exit_code == 0 and "note:" not in v.output, v.output
    d = json.loads(out.read_text())
    d["metrics"]["pool_bytes"] = 5 << 20
    d["planner"]["arena"]["peak_live_bytes"] = 1 << 20
    out.write_text(json.dumps(d))
    v = run("validate", "--graph", path, "--plan", out)
    assert v.exit_code == 0, v.output
    assert "note: metrics.pool_bytes states 5 MiB, but the allocation is an arena of" in v.output
    assert "note: planner.arena.peak_live_bytes states 1 MiB; the events give" in v.output


def test_a_layout_record_counts_the_copies_alone_with_workspaces(tmp_path) -> None:
    """The arena holds the copies; workspace lies beside it: a fresh laid-out plan whose ops have workspaces gets
    no note, and a re-timed one records the copies' peak, not rule 5's (workspace included)."""
    from hybrid.arena.lifetimes import plan_buffers
    from hybrid.graph.synthetic import training_graph

    path = tmp_path / "ws.json"
    training_graph(12, seed=4, share_params=6, workspace_prob=0.6).save(path)
    base, out = tmp_path / "b.json", tmp_path / "r.json"
    r = run("baseline", "--graph", path, "--memory", "26MiB", "--kind", "belady", "--out", base)
    assert r.exit_code == 0, r.output
    r = run("refine", "--graph", path, "--plan", base, "--out", out, "--max-windows", "4", "--seed", "1")
    assert r.exit_code == 0 and "faster" in r.output and "no faster" not in r.output, r.output
    g = Graph.load(path)
    for p in (base, out):
        plan = Plan.load(p)
        assert plan.allocation.kind == "arena"
        assert plan.planner["arena"]["peak_live_bytes"] == plan_buffers(g, plan).problem.peak_live()
        v = run("validate", "--graph", path, "--plan", p)
        assert v.exit_code == 0 and "note:" not in v.output, v.output
    assert any(op.workspace_bytes for op in g.ops)


def test_a_table_of_plans_that_rerun_ops_adds_up() -> None:
    """makespan = ideal + stall + reruns on every row (the reruns were nowhere before: a plan 1.025x ideal with no
    stall and nothing moved), and the swap-only bound's '-' is explained under the table."""
    from hybrid.pipeline.rows import plan_row
    from hybrid.report.summary import table
    from hybrid.swap.baselines import run_baseline
    from tests.cli.helpers import RESNET

    g = Graph.load(RESNET)
    dev = replace(g.device, memory_bytes=64 << 20, reserve_bytes=0)
    rows = [plan_row(k, run_baseline(g, dev, k, recompute=True), g) for k in ("belady", "naive", "recompute-only")]
    for r in rows:
        assert r["makespan_s"] == pytest.approx(r["ideal_s"] + r["stall_s"] + r["recompute_s"], rel=1e-9)
    assert rows[0]["recompute_s"] > 0 and rows[1]["recompute_s"] == 0
    text = table(rows)
    assert "| reruns " in text.splitlines()[0] and text.endswith("swap-only bound holds only for plans that do not)")
    assert "reruns" not in table(rows[1:2]) and "(-:" not in table(rows[1:2])
