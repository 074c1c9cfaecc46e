"""The plan validator against hand-written plans: valid ones pass, each corruption names its rule and event."""
from __future__ import annotations

import json
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.cli.main import cli
from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph, Op, Tensor
from hybrid.plan import ArenaAllocation, Event, Plan, SizeClass, SizeClassAllocation
from hybrid.units import format_bytes
from hybrid.validator import ValidationReport, check, validate

sys.path.insert(0, str(Path(__file__).parent))
from validator_plans import DEVICE, mlp_graph, random_graph, serial_plan  # noqa: E402

# ---- helpers -------------------------------------------------------------------------------------------------


def ev(plan: Plan, kind: str, ref: str, nth: int = 0) -> int:
    """Index of the nth event of `kind` about op/tensor `ref`."""
    hits = [i for i, e in enumerate(plan.events) if e.kind == kind and (e.op or e.tensor) == ref]
    return hits[nth]


def moved(plan: Plan, i: int, start: float) -> Plan:
    """Event i moved to `start`, its duration kept."""
    e = plan.events[i]
    events = list(plan.events)
    events[i] = replace(e, start_s=start, end_s=start + (e.end_s - e.start_s))
    return replace(plan, events=events)


def stretched(plan: Plan, i: int, end: float) -> Plan:
    events = list(plan.events)
    events[i] = replace(events[i], end_s=end)
    return replace(plan, events=events)


def added(plan: Plan, *new: Event) -> Plan:
    return replace(plan, events=list(plan.events) + list(new))


def removed(plan: Plan, *idx: int) -> Plan:
    return replace(plan, events=[e for i, e in enumerate(plan.events) if i not in idx])


def delayed(plan: Plan, at: float, dt: float) -> Plan:
    """Every event starting at or after `at` shifted by dt (makespan too)."""
    events = [replace(e, start_s=e.start_s + dt, end_s=e.end_s + dt) if e.start_s >= at else e for e in plan.events]
    return replace(plan, events=events, makespan_s=plan.makespan_s + dt)


def free(t: str, at: float) -> Event:
    return Event("free", at, at, tensor=t)


def swap(kind: str, t: str, start: float, nbytes: int, bw: float = DEVICE.h2d_bytes_per_s) -> Event:
    return Event(kind, start, start + nbytes / bw, tensor=t)


def first(report: ValidationReport) -> tuple[int, int | None]:
    assert not report.valid, "expected an invalid plan"
    v = report.violations[0]
    return v.rule, v.event_index


MLP = mlp_graph()
SLOW = replace(DEVICE, h2d_bytes_per_s=1e6, d2h_bytes_per_s=1e6)


@pytest.fixture
def plan() -> Plan:
    """mlp, nothing resident: swap_in x, swap_in w1, fc1, swap_in w2, fc2, free w2, bwd, frees, sgd, swap_out w1."""
    return serial_plan(MLP)


# ---- valid plans ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("allocation", ["unconstrained", "size_classes", "arena"])
@pytest.mark.parametrize("resident", [[], ["w1"], ["w1", "w2", "x"]])
def test_serial_plans_are_valid(allocation: str, resident: list[str]) -> None:
    p = serial_plan(MLP, resident=resident, allocation=allocation)
    report = validate(MLP, p, all=True)
    assert report.valid and bool(report) and report.violations == []
    check(MLP, p)


def test_peak_counts_the_running_workspace(plan: Plan) -> None:
    # during fc2: x 1000 + w1 2000 + a1 4000 + w2 2000 + y 1000 bytes of copies + 500 workspace
    assert validate(MLP, plan).peak_bytes == 10500
    chosen = serial_plan(MLP, impl_choice={"fc1": "gemm_ws"})
    assert chosen.events[ev(chosen, "compute", "fc1")].impl == "gemm_ws"
    assert validate(MLP, chosen).valid


def test_file_order_does_not_matter(plan: Plan) -> None:
    assert validate(MLP, replace(plan, events=plan.events[::-1])).valid


def test_differences_within_tolerance_are_accepted(plan: Plan) -> None:
    i = ev(plan, "compute", "fc2")
    assert validate(MLP, stretched(plan, i, plan.events[i].end_s + 1e-13)).valid
    assert validate(MLP, replace(plan, makespan_s=plan.makespan_s + 1e-13)).valid
    assert first(validate(MLP, stretched(plan, i, plan.events[i].end_s + 1e-7))) == (1, i)


def test_absent_impl_means_the_default_impl(plan: Plan) -> None:
    i = ev(plan, "compute", "fc1")
    events = list(plan.events)
    events[i] = replace(events[i], impl=None)
    assert validate(MLP, replace(plan, events=events)).valid
    events[ev(plan, "compute", "fc2")] = replace(events[ev(plan, "compute", "fc2")], impl="default")
    assert validate(MLP, replace(plan, events=events)).valid


def test_impl_choice_reads_the_events_and_names_an_unknown_impl(plan: Plan) -> None:
    """The one lookup the walk, the bound and the planner share: what each compute event runs."""
    fc1 = MLP.op_index["fc1"]
    names = [im.name for im in MLP.op("fc1").implementations]
    choice = plan.impl_choice(MLP)
    for k, op in enumerate(MLP.ops):
        e = next(x for x in plan.events if x.kind == "compute" and x.op == op.id)
        own = [im.name for im in op.implementations]
        assert choice[k] == (own.index(e.impl) if e.impl else MLP.arrays.default_impl[k])
    events = list(plan.events)
    i = ev(plan, "compute", "fc1")
    other = next(n for n in names if n != plan.events[i].impl)
    events[i] = replace(events[i], impl=other)
    assert plan.impl_choice(MLP)[fc1] != names.index(other)
    assert replace(plan, events=events).impl_choice(MLP)[fc1] == names.index(other)
    events[i] = replace(events[i], impl="winograd")
    with pytest.raises(HybridError, match="fc1.*winograd"):
        replace(plan, events=events).impl_choice(MLP)


def test_zero_time_ops_at_one_instant_may_tie() -> None:
    g = Graph("ties", [Tensor("x", 8, "input", True), Tensor("a", 8), Tensor("b", 8)],
              [Op("A", "view", ("x",), ("a",), 0.0), Op("B", "view", ("x",), ("b",), 0.0)])
    p = serial_plan(g)
    assert validate(g, p).valid
    assert validate(g, replace(p, events=p.events[::-1])).valid


# ---- rule 0: the plan belongs to the graph -------------------------------------------------------------------


def test_rule0_graph_name(plan: Plan) -> None:
    assert first(validate(MLP, replace(plan, graph="other"))) == (0, None)


def test_rule0_sha_mismatch(plan: Plan, tmp_path: Path) -> None:
    MLP.save(tmp_path / "g.json")
    g = Graph.load(tmp_path / "g.json")
    assert validate(g, replace(plan, graph_sha256=g.sha256)).valid
    report = validate(g, replace(plan, graph_sha256="0" * 64))
    assert first(report) == (0, None) and "graph_sha256" in report.violations[0].message


def test_rule0_sha_is_hex_in_either_case(plan: Plan, tmp_path: Path) -> None:
    """A sha256 is the same digest in upper-case hex (another tool's writing): not another graph's plan."""
    MLP.save(tmp_path / "g.json")
    g = Graph.load(tmp_path / "g.json")
    assert validate(g, replace(plan, graph_sha256=g.sha256.upper())).valid
    report = validate(g, replace(plan, graph_sha256=("0" * 64).upper()))
    assert first(report) == (0, None) and "graph_sha256" in report.violations[0].message


def test_rule0_unknown_ids_and_impls(plan: Plan) -> None:
    i = ev(plan, "compute", "fc2")
    events = list(plan.events)
    events[i] = replace(events[i], op="nope")
    assert first(validate(MLP, replace(plan, events=events))) == (0, i)
    events = list(plan.events)
    events[i] = replace(events[i], impl="gemm")  # fc2 lists no impls
    assert first(validate(MLP, replace(plan, events=events))) == (0, i)
    j = ev(plan, "compute", "fc1")
    events = list(plan.events)
    events[j] = replace(events[j], impl="winograd")
    report = validate(MLP, replace(plan, events=events))
    assert first(report) == (0, j) and "gemm_ws" in report.violations[0].message
    assert first(validate(MLP, replace(plan, schedule=plan.schedule + ["ghost"]))) == (0, None)
    assert first(validate(MLP, added(plan, free("ghost", 0.0)))) == (0, len(plan.events))


def test_rule0_resident_must_be_persistent(plan: Plan) -> None:
    assert first(validate(MLP, replace(plan, resident_at_start=["a1"]))) == (0, None)


# ---- rule 1: schedule, compute order, durations, streams -----------------------------------------------------


def test_rule1_schedule_not_topological(plan: Plan) -> None:
    report = validate(MLP, replace(plan, schedule=["fc2", "fc1", "bwd", "sgd"]))
    assert first(report) == (1, None) and "'fc2'" in report.violations[0].message


def test_rule1_schedule_missing_or_repeated_op(plan: Plan) -> None:
    assert first(validate(MLP, replace(plan, schedule=["fc1", "fc2", "bwd"]))) == (1, None)
    assert first(validate(MLP, replace(plan, schedule=["fc1", "fc2", "fc2", "bwd", "sgd"]))) == (1, None)


def test_rule1_compute_events_follow_the_schedule() -> None:
    g = Graph("two", [Tensor("x", 8, "input", True), Tensor("a", 8), Tensor("b", 8)],
              [Op("A", "f", ("x",), ("a",), 1e-3), Op("B", "f", ("x",), ("b",), 1e-3)])
    p = serial_plan(g)
    assert validate(g, p).valid
    assert first(validate(g, replace(p, schedule=["B", "A"]))) == (1, ev(p, "compute", "A"))


def test_rule1_overlap_on_compute_stream(plan: Plan) -> None:
    i = ev(plan, "compute", "fc2")
    assert first(validate(MLP, moved(plan, i, 0.0005))) == (1, i)


def test_rule1_overlap_on_h2d_stream(plan: Plan) -> None:
    i = ev(plan, "swap_in", "w1")
    report = validate(MLP, moved(plan, i, 5e-7))
    assert first(report) == (1, i) and "h2d" in report.violations[0].message


def test_rule1_wrong_durations(plan: Plan) -> None:
    i = ev(plan, "compute", "bwd")
    assert first(validate(MLP, stretched(plan, i, plan.events[i].end_s + 1e-4))) == (1, i)
    j = ev(plan, "swap_in", "w2")
    report = validate(MLP, stretched(plan, j, plan.events[j].end_s - 1e-6))
    assert first(report) == (1, j) and "h2d" in report.violations[0].message


def test_rule1_swap_duration_uses_the_plans_device(plan: Plan) -> None:
    assert first(validate(MLP, replace(plan, device=SLOW)))[0] == 1


def test_rule1_second_compute_needs_recompute_flag(plan: Plan) -> None:
    e = plan.events[ev(plan, "compute", "fc2")]
    end = plan.makespan_s
    extra = replace(e, start_s=end, end_s=end + (e.end_s - e.start_s))
    assert first(validate(MLP, added(plan, extra))) == (1, len(plan.events))


def _update_graph() -> Graph:
    """A reads W, U updates W in place (program order: after A), C reads A's output after the update."""
    return Graph("upd", [Tensor("W", 100, "param", True), Tensor("a", 100), Tensor("c", 100)],
                 [Op("A", "f", ("W",), ("a",), 1.0), Op("U", "sgd", ("W",), (), 1.0, updates=("W",)),
                  Op("C", "f", ("a",), ("c",), 1.0)])


def _update_plan(g: Graph, events: list[Event], makespan: float) -> Plan:
    return Plan(g.name, "", DEVICE, {}, ["A", "U", "C"], serial_plan(g).allocation, ["W"], events, makespan,
                {"ideal_s": 3.0})


def test_rule1_recompute_after_an_update_of_its_input() -> None:
    g = _update_graph()
    ok = [Event("compute", 0, 1, op="A"), Event("compute", 1, 2, op="U"), Event("compute", 2, 3, op="C"),
          free("a", 3), free("c", 3)]
    assert validate(g, _update_plan(g, ok, 3)).valid
    rerun = [Event("compute", 0, 1, op="A"), free("a", 1), Event("compute", 1, 2, op="U"),
             Event("compute", 2, 3, op="A", recompute=True), Event("compute", 3, 4, op="C"), free("a", 4),
             free("c", 4)]
    assert first(validate(g, _update_plan(g, rerun, 4))) == (1, 3)


def test_rule1_recompute_of_an_updating_op() -> None:
    g = _update_graph()
    events = [Event("compute", 0, 1, op="A"), Event("compute", 1, 2, op="U"),
              Event("compute", 2, 3, op="U", recompute=True), Event("compute", 3, 4, op="C"), free("a", 4),
              free("c", 4)]
    report = validate(g, _update_plan(g, events, 4))
    assert first(report) == (1, 2) and "twice" in report.violations[0].message


def test_rule1_recompute_before_the_first_run() -> None:
    g = _update_graph()
    events = [Event("compute", 0, 1, op="A", recompute=True), free("a", 1), Event("compute", 1, 2, op="A"),
              Event("compute", 2, 3, op="U"), Event("compute", 3, 4, op="C"), free("a", 4), free("c", 4)]
    assert first(validate(g, _update_plan(g, events, 4))) == (1, 0)


def test_recompute_may_repeat() -> None:
    g = Graph("rr", [Tensor("x", 8, "input", True), Tensor("a", 8), Tensor("b", 8), Tensor("c", 8)],
              [Op("A", "f", ("x",), ("a",), 1.0), Op("B", "f", ("a",), ("b",), 1.0),
               Op("C", "f", ("a", "b"), ("c",), 1.0)])
    events = [Event("compute", 0, 1, op="A"), free("a", 1), Event("compute", 1, 2, op="A", recompute=True),
              Event("compute", 2, 3, op="B"), free("a", 3), Event("compute", 3, 4, op="A", recompute=True),
              Event("compute", 4, 5, op="C"), free("a", 5), free("b", 5), free("c", 5)]
    p = Plan("rr", "", DEVICE, {}, ["A", "B", "C"], serial_plan(g).allocation, ["x"], events, 5.0,
             {"ideal_s": 3.0})
    assert validate(g, p).valid


# ---- rule 2: one device copy at a time -----------------------------------------------------------------------


def test_rule2_second_copy_of_a_resident_tensor() -> None:
    p = serial_plan(MLP, resident=["w1", "w2"])
    bad = added(p, swap("swap_in", "w1", 0.002, 2000))
    assert first(validate(MLP, bad)) == (2, len(p.events))


def test_rule2_release_without_a_copy(plan: Plan) -> None:
    assert first(validate(MLP, added(plan, free("y", 0.0005)))) == (2, len(plan.events))
    i = ev(plan, "free", "y")
    assert first(validate(MLP, added(plan, plan.events[i]))) == (2, len(plan.events))


def test_earliest_event_wins_then_file_order(plan: Plan) -> None:
    n = len(plan.events)
    assert first(validate(MLP, added(plan, free("y", 0.0005), free("a1", 0.0005)))) == (2, n)
    assert first(validate(MLP, added(plan, free("a1", 0.0005), free("y", 0.0004)))) == (2, n + 1)


# ---- rule 3: computes find their tensors ---------------------------------------------------------------------


def test_rule3_input_not_resident(plan: Plan) -> None:
    bad = moved(plan, ev(plan, "free", "x"), 0.002)  # bwd reads x later; x's host copy is still valid
    report = validate(MLP, bad)
    assert first(report) == (3, ev(plan, "compute", "bwd")) and "'x'" in report.violations[0].message


def test_rule3_input_not_complete(plan: Plan) -> None:
    i = ev(plan, "swap_in", "w2")
    bad = moved(plan, i, plan.events[i].start_s + 1e-6)
    assert first(validate(MLP, bad)) == (3, ev(plan, "compute", "fc2"))


def test_rule3_input_freed_mid_compute(plan: Plan) -> None:
    bad = moved(plan, ev(plan, "free", "a1"), 0.002)
    report = validate(MLP, bad)
    assert first(report) == (3, ev(plan, "compute", "fc2"))
    assert "before the compute ends" in report.violations[0].message


def test_rule3_output_freed_mid_compute(plan: Plan) -> None:
    assert first(validate(MLP, moved(plan, ev(plan, "free", "y"), 0.002))) == (3, ev(plan, "compute", "fc2"))


# ---- rule 4: swaps and frees need the data --------------------------------------------------------------------


def test_rule4_swap_in_without_host_copy(plan: Plan) -> None:
    end = plan.makespan_s
    bad = added(plan, swap("swap_in", "y", end, 1000), free("y", end + 1e-5))
    report = validate(MLP, bad)
    assert first(report) == (4, len(plan.events)) and "host copy" in report.violations[0].message


def test_rule4_swap_out_during_update() -> None:
    p = serial_plan(MLP, device=SLOW)
    i, sgd = ev(p, "swap_out", "w1"), p.events[ev(p, "compute", "sgd")]
    report = validate(MLP, moved(p, i, sgd.start_s + 1e-5))
    assert first(report) == (4, i) and "'sgd'" in report.violations[0].message


def test_rule4_swap_out_before_copy_complete() -> None:
    g = Graph("one", [Tensor("x", 8, "input", True), Tensor("a", 1000)], [Op("P", "f", ("x",), ("a",), 1e-3)])
    events = [Event("compute", 0, 1e-3, op="P"), swap("swap_out", "a", 5e-4, 1000, bw=1e6)]
    p = Plan("one", "", SLOW, {}, ["P"], serial_plan(g).allocation, ["x"], events, 1.5e-3, {"ideal_s": 1e-3})
    assert first(validate(g, p)) == (4, 1)
    fixed = replace(moved(p, 1, 1e-3), makespan_s=2e-3)
    assert validate(g, fixed).valid


def test_rule4_free_of_needed_activation_without_host_copy(plan: Plan) -> None:
    t0 = plan.events[ev(plan, "compute", "bwd")].start_s
    bad = delayed(plan, t0, 1e-5)
    bad = added(bad, free("a1", t0), swap("swap_in", "a1", t0 + 1e-6, 4000))
    report = validate(MLP, bad)
    assert first(report) == (4, len(plan.events)) and "read later" in report.violations[0].message


def test_rule4_free_of_updated_param_without_swap_out(plan: Plan) -> None:
    i = ev(plan, "swap_out", "w1")
    events = list(plan.events)
    events[i] = free("w1", events[i].start_s)
    report = validate(MLP, replace(plan, events=events), all=True)
    assert first(report) == (4, i)
    # rule 6 says the same thing about the end of the iteration
    assert any(v.rule == 6 and v.event_index == ev(plan, "compute", "sgd") for v in report.violations)


def test_free_with_valid_host_copy_then_swap_in(plan: Plan) -> None:
    # x is persistent and never updated: its host copy stays valid, so it may be dropped and swapped in again
    t0 = plan.events[ev(plan, "compute", "bwd")].start_s
    p = delayed(plan, t0, 1e-5)
    bwd_end = p.events[ev(p, "compute", "bwd")].end_s
    p = added(moved(p, ev(p, "free", "x"), plan.events[ev(plan, "compute", "fc1")].end_s),
              swap("swap_in", "x", t0, 1000), free("x", bwd_end))
    assert validate(MLP, p).valid


# ---- rule 5: memory ------------------------------------------------------------------------------------------


def test_rule5_byte_budget_with_workspace(plan: Plan) -> None:
    fc2 = ev(plan, "compute", "fc2")
    assert validate(MLP, replace(plan, device=replace(DEVICE, memory_bytes=10500))).valid
    report = validate(MLP, replace(plan, device=replace(DEVICE, memory_bytes=10499)))
    assert first(report) == (5, fc2) and "500 B workspace" in report.violations[0].message
    assert report.peak_bytes == 10500


def test_rule5_size_class_count_exceeded(plan: Plan) -> None:
    names = ["x", "w1", "w2", "a1", "y", "g1"]
    alloc = SizeClassAllocation((SizeClass(4096, 5),), {t: 0 for t in names})
    assert validate(MLP, replace(plan, allocation=alloc)).valid
    alloc = SizeClassAllocation((SizeClass(4096, 4),), {t: 0 for t in names})
    report = validate(MLP, replace(plan, allocation=alloc))
    assert first(report) == (5, ev(plan, "compute", "fc2")) and "5 objects" in report.violations[0].message


def test_rule5_size_class_shape() -> None:
    p = serial_plan(MLP, allocation="size_classes")
    a = p.allocation
    small = replace(a, class_of={**a.class_of, "a1": a.class_of["x"]})
    assert first(validate(MLP, replace(p, allocation=small))) == (5, ev(p, "compute", "fc1"))
    missing = replace(a, class_of={k: v for k, v in a.class_of.items() if k != "x"})
    assert first(validate(MLP, replace(p, allocation=missing))) == (5, ev(p, "swap_in", "x"))
    out_of_range = replace(a, class_of={**a.class_of, "y": 99})
    assert first(validate(MLP, replace(p, allocation=out_of_range))) == (5, ev(p, "compute", "fc2"))


def test_rule5_pool_plus_workspace() -> None:
    p = serial_plan(MLP, allocation="size_classes")
    pool = p.allocation.pool_bytes()
    assert validate(MLP, replace(p, device=replace(DEVICE, memory_bytes=pool + 500))).valid
    report = validate(MLP, replace(p, device=replace(DEVICE, memory_bytes=pool + 499)))
    assert first(report) == (5, ev(p, "compute", "fc2"))
    assert first(validate(MLP, replace(p, device=replace(DEVICE, memory_bytes=pool - 1)))) == (5, None)


def test_rule5_arena_overlap() -> None:
    p = serial_plan(MLP, allocation="arena")
    off = p.allocation.offsets
    report = validate(MLP, replace(p, allocation=replace(p.allocation, offsets={**off, "y": off["a1"] + 100})))
    assert first(report) == (5, ev(p, "compute", "fc2")) and "overlaps 'a1'" in report.violations[0].message
    # w2 is freed at the instant bwd allocates g1: half-open lifetimes may share bytes
    assert validate(MLP, replace(p, allocation=replace(p.allocation, offsets={**off, "g1": off["w2"]}))).valid


def test_rule5_arena_a_zero_time_op_holds_the_input_it_frees_while_it_allocates() -> None:
    """`empty_like(a)` takes no time and is a's last reader: a is freed at the instant the op's output is
    allocated. The executor holds an op's inputs while it allocates its outputs, so the two may not share
    bytes (found running a checkpointed transformer's laid-out plan). a's free runs after E and before B (the
    order events run), so B's output may have a's bytes, as the executor gives them."""
    g = Graph("zero", [Tensor("x", 100, "input", True), Tensor("a", 100), Tensor("m", 100), Tensor("b", 100)],
              [Op("A", "relu", ("x",), ("a",), 1e-3), Op("E", "empty_like", ("a",), ("m",), 0.0),
               Op("B", "fill_", ("m",), ("b",), 1e-3)])
    p = serial_plan(g, resident=["x"], allocation="arena")
    off = p.allocation.offsets
    assert validate(g, p).valid
    report = validate(g, replace(p, allocation=replace(p.allocation, offsets={**off, "m": off["a"]})))
    assert first(report) == (5, ev(p, "compute", "E")) and "overlaps 'a'" in report.violations[0].message
    assert validate(g, replace(p, allocation=replace(p.allocation, offsets={**off, "b": off["a"]}))).valid
    k = ev(p, "compute", "B")     # B and what follows it a little later, once a is gone: a's bytes are free
    later = replace(p, events=p.events[:k] + [replace(e, start_s=e.start_s + 1e-3, end_s=e.end_s + 1e-3)
                                              for e in p.events[k:]], makespan_s=p.makespan_s + 1e-3)
    assert validate(g, replace(later, allocation=replace(p.allocation, offsets={**off, "b": off["a"]}))).valid


def test_rule5_arena_bounds_and_workspace() -> None:
    p = serial_plan(MLP, allocation="arena")
    a = p.allocation
    outside = replace(a, offsets={**a.offsets, "a1": a.arena_bytes - 1})
    assert first(validate(MLP, replace(p, allocation=outside))) == (5, ev(p, "compute", "fc1"))
    assert validate(MLP, replace(p, device=replace(DEVICE, memory_bytes=a.arena_bytes + 500))).valid
    tight = replace(p, device=replace(DEVICE, memory_bytes=a.arena_bytes + 499))
    assert first(validate(MLP, tight)) == (5, ev(p, "compute", "fc2"))
    assert isinstance(a, ArenaAllocation)


def test_rule5_an_arena_copy_lies_inside_by_its_bytes_not_its_rounded_extent() -> None:
    """docs/formats.md: in an arena a copy takes [offset, offset + bytes) inside [0, arena_bytes), its offset a
    multiple of the alignment; the rounding padding after the topmost copy need not lie inside (the executor
    places copies by the same reading: tests/arena/test_executor.py)."""
    p = serial_plan(MLP, allocation="arena")
    dev = replace(DEVICE, alignment_bytes=512)
    names = sorted(p.allocation.offsets, key=lambda t: t == "a1")     # a1 (4000 B, not a multiple of 512) on top
    offsets = {t: 4096 * k for k, t in enumerate(names)}
    top = offsets["a1"] + 4000
    laid = replace(p, device=dev, allocation=ArenaAllocation(top, offsets))
    assert top % 512 and validate(MLP, laid).valid
    report = validate(MLP, replace(laid, allocation=ArenaAllocation(top - 1, offsets)))
    assert first(report) == (5, ev(p, "compute", "fc1")) and "inside the arena" in report.violations[0].message


def test_rule5_sizes_that_differ_never_read_the_same(plan: Plan) -> None:
    """Every rule-5 message comparing a need with the memory gives exact bytes where the rounded figures would
    read the same ("10.3 KiB > 10.3 KiB")."""
    msg = validate(MLP, replace(plan, device=replace(DEVICE, memory_bytes=10499))).violations[0].message
    assert "= 10.3 KiB (10500 B) > 10.3 KiB (10499 B) of device memory" in msg, msg
    sc = serial_plan(MLP, allocation="size_classes")
    pool = sc.allocation.pool_bytes()
    msg = validate(MLP, replace(sc, device=replace(DEVICE, memory_bytes=pool - 1))).violations[0].message
    assert f"({pool} B), more than " in msg and f"({pool - 1} B) of device memory" in msg, msg
    msg = validate(MLP, replace(sc, device=replace(DEVICE, memory_bytes=pool + 499))).violations[0].message
    assert f"({pool + 500} B) > " in msg and f"({pool + 499} B) of device memory" in msg, msg
    ar = serial_plan(MLP, allocation="arena")
    n = ar.allocation.arena_bytes
    msg = validate(MLP, replace(ar, device=replace(DEVICE, memory_bytes=n - 1))).violations[0].message
    assert f"arena_bytes is {format_bytes(n)} ({n} B), more than {format_bytes(n)} ({n - 1} B)" in msg, msg
    reserved = replace(DEVICE, memory_bytes=10499 + (1 << 20), reserve_bytes=1 << 20)
    msg = validate(MLP, replace(plan, device=reserved)).violations[0].message
    assert "> 10.3 KiB (10499 B) usable (1.01 MiB of device memory less the 1 MiB reserve)" in msg, msg


from tests.hybrid.test_alignment_reserve import ABSTRACT_GRAPH as ABSTRACT  # noqa: E402 - the same abstract-units graph


@pytest.mark.parametrize("allocation", ["unconstrained", "size_classes"])
def test_rule5_names_the_default_alignment_a_device_did_not_state(allocation: str) -> None:
    """A device in abstract units (10 B of memory, 2 B tensors) without alignment_bytes gets CUDA's 512
    (docs/formats.md): where that rounding alone breaks rule 5 the message says so and how to state 1."""
    g = Graph.from_json(ABSTRACT)
    dev = g.device
    assert dev.alignment_bytes == 512 and dev.alignment_default
    p = serial_plan(g, device=replace(dev, alignment_bytes=1), resident=["x"], allocation=allocation)
    assert validate(g, p).valid
    report = validate(g, replace(p, device=dev), all=True)
    assert not report.valid and report.violations[0].rule == 5
    assert all("does not state alignment_bytes" in v.message and '"alignment_bytes": 1' in v.message
               for v in report.violations if "device memory" in v.message), report.violations
    stated = Device.from_json({**ABSTRACT["device"], "alignment_bytes": 512})   # stated: the file meant it
    assert not stated.alignment_default and stated == dev and "alignment_bytes" in dev.to_json()
    report = validate(g, replace(p, device=stated), all=True)
    assert not report.valid and not any("does not state" in v.message for v in report.violations)


# ---- rule 6: periodicity -------------------------------------------------------------------------------------


def test_rule6_resident_tensor_not_resident_at_end() -> None:
    p = serial_plan(MLP, resident=["w1", "w2"])
    bad = added(p, swap("swap_out", "w2", 0.0031, 2000))
    report = validate(MLP, bad)
    assert first(report) == (6, len(p.events)) and "resident_at_start" in report.violations[0].message


def test_rule6_persistent_tensor_left_on_device(plan: Plan) -> None:
    report = validate(MLP, removed(plan, ev(plan, "free", "w2")))
    assert first(report) == (6, ev(plan, "swap_in", "w2"))


def test_rule6_activation_left_on_device(plan: Plan) -> None:
    i, fc2 = ev(plan, "free", "y"), ev(plan, "compute", "fc2")
    assert i > fc2
    assert first(validate(MLP, removed(plan, i))) == (6, fc2)


# ---- rule 7: totals ------------------------------------------------------------------------------------------


def test_rule7_makespan(plan: Plan) -> None:
    assert first(validate(MLP, replace(plan, makespan_s=plan.makespan_s + 1e-6))) == (7, None)


def test_rule7_ideal(plan: Plan) -> None:
    assert first(validate(MLP, replace(plan, metrics={"ideal_s": 0.0061 + 1e-6}))) == (7, None)
    report = validate(MLP, replace(plan, metrics={}))
    assert first(report) == (7, None) and "ideal_s" in report.violations[0].message


def test_lowest_rule_first_and_all_lists_every_rule(plan: Plan) -> None:
    i = ev(plan, "compute", "fc2")
    bad = replace(moved(plan, i, 0.0005), makespan_s=1.0, metrics={})
    report = validate(MLP, bad)
    assert len(report.violations) == 1 and first(report) == (1, i)
    every = validate(MLP, bad, all=True)
    rules = [v.rule for v in every.violations]
    assert rules == sorted(rules) and {1, 7} <= set(rules) and every.violations[0] == report.violations[0]


def test_check_raises_the_first_violation(plan: Plan) -> None:
    with pytest.raises(HybridError, match="rule 7"):
        check(MLP, replace(plan, makespan_s=1.0))


# ---- a plan written by hand from docs/formats.md, and the CLI -----------------------------------------------

GRAPH_JSON = """{
  "format": "hybrid-graph/1",
  "name": "tiny-recompute",
  "device": {"name": "toy", "memory_bytes": 16000, "h2d_bytes_per_s": 1e6, "d2h_bytes_per_s": 1e6},
  "tensors": [
    {"id": "x", "bytes": 1000, "kind": "input", "persistent": true},
    {"id": "w", "bytes": 2000, "kind": "param", "persistent": true},
    {"id": "a", "bytes": 4000, "kind": "activation"},
    {"id": "b", "bytes": 4000, "kind": "activation"},
    {"id": "g", "bytes": 2000, "kind": "gradient"}
  ],
  "ops": [
    {"id": "f1", "kind": "matmul", "inputs": ["x", "w"], "outputs": ["a"], "time_s": 0.001,
     "impls": [{"name": "gemm", "time_s": 0.001, "workspace_bytes": 0},
               {"name": "gemm_fast", "time_s": 0.0005, "workspace_bytes": 3000}]},
    {"id": "f2", "kind": "relu", "inputs": ["a"], "outputs": ["b"], "time_s": 0.001},
    {"id": "bwd", "kind": "grad", "inputs": ["b", "a", "w"], "outputs": ["g"], "time_s": 0.002,
     "workspace_bytes": 1000},
    {"id": "sgd", "kind": "sgd", "inputs": ["w", "g"], "outputs": [], "updates": ["w"], "time_s": 0.0005}
  ]
}
"""

# f2 runs, `a` is dropped and f1 recomputed (x is still there) before bwd needs `a` again; w stays resident.
PLAN_JSON = """{
  "format": "hybrid-plan/1",
  "graph": "tiny-recompute",
  "graph_sha256": "",
  "device": {"name": "toy", "memory_bytes": 16000, "h2d_bytes_per_s": 1e6, "d2h_bytes_per_s": 1e6,
             "transfer_latency_s": 0.0},
  "planner": {"name": "by hand"},
  "schedule": ["f1", "f2", "bwd", "sgd"],
  "allocation": {"kind": "size_classes",
                 "classes": [{"bytes": 4096, "count": 2}, {"bytes": 2048, "count": 3}],
                 "class_of": {"a": 0, "b": 0, "x": 1, "w": 1, "g": 1}},
  "resident_at_start": ["w"],
  "events": [
    {"kind": "swap_in", "tensor": "x", "stream": "h2d", "start_s": 0.0, "end_s": 0.001},
    {"kind": "compute", "op": "f1", "impl": "gemm", "stream": "compute", "start_s": 0.001, "end_s": 0.002},
    {"kind": "compute", "op": "f2", "stream": "compute", "start_s": 0.002, "end_s": 0.003},
    {"kind": "free", "tensor": "a", "at_s": 0.003},
    {"kind": "compute", "op": "f1", "impl": "gemm", "recompute": true, "stream": "compute",
     "start_s": 0.003, "end_s": 0.004},
    {"kind": "free", "tensor": "x", "at_s": 0.004},
    {"kind": "compute", "op": "bwd", "stream": "compute", "start_s": 0.004, "end_s": 0.006},
    {"kind": "free", "tensor": "a", "at_s": 0.006},
    {"kind": "free", "tensor": "b", "at_s": 0.006},
    {"kind": "compute", "op": "sgd", "stream": "compute", "start_s": 0.006, "end_s": 0.0065},
    {"kind": "free", "tensor": "g", "at_s": 0.0065}
  ],
  "makespan_s": 0.0065,
  "metrics": {"ideal_s": 0.0045, "peak_bytes": 13288}
}
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    g, p = tmp_path / "graph.json", tmp_path / "plan.json"
    g.write_text(GRAPH_JSON)
    p.write_text(PLAN_JSON)
    return g, p


def test_hand_written_plan_round_trips_and_validates(files: tuple[Path, Path], tmp_path: Path) -> None:
    gpath, ppath = files
    g, p = Graph.load(gpath), Plan.load(ppath)
    report = validate(g, p)
    # bwd: w + a + b + g + 1000 workspace, each copy rounded up to the default 512-byte alignment
    assert report.valid and report.peak_bytes == 13288
    again = tmp_path / "again.json"
    replace(p, graph_sha256=g.sha256).save(again)
    q = Plan.load(again)
    assert q.events == p.events and validate(g, q).valid
    # without the recompute, bwd reads `a` after it was dropped, and `a`'s later free has no copy: rule 2
    d = json.loads(PLAN_JSON)
    del d["events"][4]
    assert first(validate(g, Plan.from_json(d))) == (2, 6)


def _run(*args: str):
    return CliRunner().invoke(cli, ["validate", *args])


def test_cli_valid_exit_0(files: tuple[Path, Path]) -> None:
    g, p = files
    r = _run("--graph", str(g), "--plan", str(p))
    assert r.exit_code == 0, r.output
    assert r.output.strip() == "valid: 11 events, makespan 6.5 ms, peak 13 KiB (83.0% of 15.6 KiB)"
    plan = Plan.load(p)     # a reserve is not the plan's to fill: the share is of what is left
    reserved = replace(plan, device=replace(plan.device, memory_bytes=plan.device.memory_bytes + (1 << 30),
                                            reserve_bytes=1 << 30))
    reserved.save(p)
    r = _run("--graph", str(g), "--plan", str(p))
    assert "peak 13 KiB (83.0% of 15.6 KiB usable, beside a 1 GiB reserve)" in r.output, r.output
    stale = replace(plan, metrics={**plan.metrics, "peak_bytes": 13000})   # unaligned: not rule 5's peak
    stale.save(p)
    r = _run("--graph", str(g), "--plan", str(p))
    assert r.exit_code == 0 and r.output.strip().splitlines()[1] == (
        "note: metrics.peak_bytes states 12.7 KiB; the events give 13 KiB (summaries print the events' figure)")


def test_cli_invalid_exit_1(files: tuple[Path, Path]) -> None:
    g, p = files
    d = json.loads(PLAN_JSON)
    d["makespan_s"] = 1.0
    d["metrics"] = {}
    p.write_text(json.dumps(d))
    r = _run("--graph", str(g), "--plan", str(p))
    lines = r.output.splitlines()
    assert r.exit_code == 1 and lines[0].startswith("invalid: rule 7: makespan_s") and len(lines) == 2
    assert lines[1] == ("  and 1 more: `hybrid validate --all` lists every violation (the cause of this one may "
                        "be among them, at an earlier time)")
    r = _run("--graph", str(g), "--plan", str(p), "--all")
    assert r.exit_code == 1 and len(r.output.splitlines()) == 2 and "and 1 more" not in r.output
    d["metrics"] = json.loads(PLAN_JSON)["metrics"]
    p.write_text(json.dumps(d))     # one violation: nothing more to say
    r = _run("--graph", str(g), "--plan", str(p))
    assert r.exit_code == 1 and len(r.output.splitlines()) == 1, r.output


@pytest.mark.parametrize("key, value, shown", [("swap_ins", "x", '"x"'), ("frees", [1, 2], "[1, 2]"),
                                               ("recomputes", True, "true"), ("swap_outs", None, None)])
def test_cli_a_count_metric_that_is_not_a_number_is_ignored(files: tuple[Path, Path], key: str, value: object,
                                                            shown: str | None) -> None:
    """metrics.swap_ins/swap_outs/frees/recomputes are not read back by any tool (extra fields are ignored by
    readers that do not know them): one that is not a number is noted, never a traceback, and the verdict is
    the plan's; true is not the count 1."""
    g, p = files
    d = json.loads(PLAN_JSON)
    d["metrics"][key] = value
    p.write_text(json.dumps(d))
    r = _run("--graph", str(g), "--plan", str(p))
    assert r.exit_code == 0 and r.exception is None, r.output
    lines = r.output.strip().splitlines()
    assert lines[0].startswith("valid: 11 events") and "True" not in r.output and "states" not in r.output
    assert lines[1:] == ([f"note: metrics.{key} is {shown}, not a number: ignored"] if shown else [])
    r = _run("--graph", str(g), "--plan", str(p), "--json")
    assert r.exit_code == 0 and r.exception is None, r.output
    v = json.loads(r.output)
    assert v["valid"] and v["notes"] == ([f"metrics.{key} is {shown}, not a number: ignored"] if shown else [])
    d["makespan_s"] = 1.0    # an invalid plan stays invalid, with or without the odd metric
    p.write_text(json.dumps(d))
    r = _run("--graph", str(g), "--plan", str(p), "--json")
    assert r.exit_code == 1, r.output
    assert json.loads(r.output)["violations"][0]["rule"] == 7


def test_cli_bad_files_exit_2(files: tuple[Path, Path], tmp_path: Path) -> None:
    g, p = files
    r = _run("--graph", str(p), "--plan", str(p))
    assert r.exit_code == 2 and "use --plan" in r.output
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    r = _run("--graph", str(g), "--plan", str(broken))
    assert r.exit_code == 2 and r.output.startswith("error:")
    r = _run("--graph", str(g), "--plan", str(tmp_path / "missing.json"))
    assert r.exit_code == 2


# ---- properties on random graphs -----------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n_ops=st.integers(1, 9),
       allocation=st.sampled_from(["unconstrained", "size_classes", "arena"]))
def test_random_serial_plans_valid_and_every_deletion_caught(seed: int, n_ops: int, allocation: str) -> None:
    rng = random.Random(seed)
    g = random_graph(rng, n_ops)
    resident = [t.id for t in g.tensors if t.persistent and rng.random() < 0.5]
    p = serial_plan(g, resident=resident, allocation=allocation)
    assert validate(g, p).valid, validate(g, p).violations
    shuffled = list(p.events)
    rng.shuffle(shuffled)
    assert validate(g, Plan.from_json(json.loads(replace(p, events=shuffled).dumps()))).valid
    for k in range(len(p.events)):
        bad = removed(p, k)
        one, every = validate(g, bad), validate(g, bad, all=True)
        assert not one.valid, f"deleting events[{k}] ({p.events[k]}) went unnoticed"
        assert one.violations[0] == every.violations[0]


def test_cli_json_verdict(files: tuple[Path, Path]) -> None:
    """--json: the same verdict and exit status, for scripts and CI."""
    g, p = files
    r = _run("--graph", str(g), "--plan", str(p), "--json")
    d = json.loads(r.output)
    assert r.exit_code == 0 and d["valid"] and d["violations"] == [] and d["peak_bytes"] > 0 and d["notes"] == []
    bad = json.loads(PLAN_JSON)
    bad["makespan_s"] = 1.0
    bad["metrics"] = {}
    p.write_text(json.dumps(bad))
    r = _run("--graph", str(g), "--plan", str(p), "--json")
    d = json.loads(r.output)
    assert r.exit_code == 1 and not d["valid"] and d["found"] == 2 and len(d["violations"]) == 1
    assert d["violations"][0]["rule"] == 7 and d["violations"][0]["message"].startswith("makespan_s")
    d = json.loads(_run("--graph", str(g), "--plan", str(p), "--json", "--all").output)
    assert [v["rule"] for v in d["violations"]] == [7, 7] and d["found"] == 2


@pytest.mark.parametrize("key", ["swap_ins", "frees"])
def test_cli_a_count_metric_of_hundreds_of_digits_is_ignored_not_a_traceback(files: tuple[Path, Path],
                                                                              key: str) -> None:
    """JSON allows an integer of any length; `math.isfinite` overflows on one past float range. The count is
    noted as out of range and the verdict stays the plan's (it printed `valid:` and then a traceback, exit 1)."""
    g, p = files
    d = json.loads(PLAN_JSON)
    d["metrics"][key] = 10**400
    d["planner"]["arena"] = {"peak_live_bytes": 10**400}
    p.write_text(json.dumps(d))
    r = _run("--graph", str(g), "--plan", str(p))
    assert r.exit_code == 0 and r.exception is None, r.output
    assert r.output.strip().splitlines()[1].startswith(f"note: metrics.{key} is 1000") and \
        r.output.strip().endswith(", out of range: ignored"), r.output


@pytest.mark.parametrize("sha", ["abc\ninvalid: rule 9: forged", "\ud800" + "0" * 63])
def test_a_string_from_the_file_cannot_split_or_break_the_one_line_verdict(files: tuple[Path, Path],
                                                                          sha: str) -> None:
    """A newline or a lone surrogate (legal JSON escapes) in a plan's string: the verdict stays one line, with
    the string escaped (a second `invalid:` line was forged from the file; a surrogate crashed the output)."""
    g, p = files
    d = json.loads(PLAN_JSON)
    d["graph_sha256"] = sha
    p.write_text(json.dumps(d))
    r = _run("--graph", str(g), "--plan", str(p))
    assert r.exit_code == 1 and isinstance(r.exception, SystemExit), r.output
    assert r.output.count("\n") == 1 and r.output.startswith(f"invalid: rule 0: graph_sha256 {sha[:12]!r}…")


def test_the_command_escapes_a_lone_surrogate_it_prints(tmp_path: Path) -> None:
    """The real `hybrid` process (not click's runner, which captures to bytes): stdout escapes what UTF-8 cannot
    encode instead of raising UnicodeEncodeError after the message was made."""
    import subprocess

    d = json.loads(GRAPH_JSON)
    d["name"] = "tiny\ud800"
    g = tmp_path / "graph.json"
    g.write_text(json.dumps(d))
    r = subprocess.run([sys.executable, "-m", "hybrid", "info", "--graph", str(g)], capture_output=True,
                       timeout=120)
    assert r.returncode == 0 and b"Traceback" not in r.stderr, r.stderr.decode(errors="replace")
    assert b"\\ud800" in r.stdout


def test_an_op_id_with_a_newline_stays_on_the_cycle_message_s_one_line() -> None:
    """f1 reads f2's output: a cycle whose message names the ops; an id with a newline is shown escaped."""
    d = json.loads(GRAPH_JSON)
    d["ops"][0]["id"] = "a\nerror: fake"
    d["ops"][0]["inputs"].append("b")
    with pytest.raises(HybridError) as e:
        Graph.from_json(d)
    assert "\n" not in str(e.value) and "'a\\nerror: fake'" in str(e.value), str(e.value)


@pytest.mark.parametrize("i, field, value, said", [
    (0, "tensor", ["x"], "tensor must be an id string or None, got ['x']"),
    (0, "kind", ["swap_in"], "kind must be a string"),
    (2, "op", ["fc1"], "op must be an id string or None"),
    (2, "recompute", "yes", "recompute must be True or False, got 'yes'"),
    (2, "impl", 3, "impl must be a string or None, got 3"),
    (2, "start_s", 10**400, "start_s must be a number of seconds")])
def test_an_event_field_of_the_wrong_type_built_in_python_is_rule_0(i: int, field: str, value: object,
                                                                   said: str) -> None:
    """docs/formats.md: a plan built in Python whose fields are not the format's types gets a rule-0 verdict,
    never an exception (a list as a tensor id raised TypeError: unhashable; recompute="yes" read as True)."""
    g = mlp_graph()
    p = serial_plan(g)
    events = list(p.events)
    events[i] = replace(events[i], **{field: value})
    r = validate(g, replace(p, events=events))
    assert not r.valid and r.violations[0].rule == 0 and said in r.violations[0].message, r.violations


def test_a_whole_number_past_2_53_written_as_a_float_is_refused() -> None:
    """Sizes are integer bytes: 9007199254740993.0 reads as 2^53, a different number, so a float from 2^53 up
    is refused naming the field; one below it (1e3, 4000.0) is the whole number it says."""
    d = json.loads(GRAPH_JSON)
    d["tensors"][0]["bytes"] = 4000.0
    assert Graph.from_json(d).tensors[0].bytes == 4000
    d["tensors"][0]["bytes"] = float(2**53)
    with pytest.raises(HybridError, match=r"tensor 'x': field 'bytes' must be written as an integer"):
        Graph.from_json(d)
