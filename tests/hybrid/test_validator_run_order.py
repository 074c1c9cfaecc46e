"""The validator checks a plan in the one order its events run (`hybrid.plan.run_order.event_order`, the
executor's), not only on times within the tolerance: where zero-time ops or copies shorter than the tolerance
tie, a plan the time checks read in its favour would otherwise run otherwise (a reader after the update the
schedule puts later: silently wrong gradients). Also: a plan built in Python with fields of the wrong type or out
of range gets a rule-0 verdict, not an exception."""
from __future__ import annotations

import copy
import random
import re
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.errors import HybridError
from hybrid.graph import Graph, Op, Tensor
from hybrid.plan import Event, Plan
from hybrid.plan.types import ArenaAllocation, SizeClassAllocation
from hybrid.plan.run_order import event_order
from hybrid.validator import event_figures, validate

sys.path.insert(0, str(Path(__file__).parent))
from validator_plans import DEVICE, random_graph, serial_plan  # noqa: E402

D = 1e-3   # the reader's time


def _graph(update_s: float = 0.0, read_s: float = D) -> Graph:
    """read: (x, p) -> y (takes `read_s`); sgd: (p, g) updates p in place (takes `update_s`); use: y -> z.
    Program order puts the read of p before its update."""
    tensors = [Tensor("x", 64, "input", True), Tensor("p", 64, "param", True), Tensor("g", 64, "gradient", True),
               Tensor("y", 64), Tensor("z", 64)]
    ops = [Op("read", "mul", ("x", "p"), ("y",), read_s, 0),
           Op("sgd", "sgd", ("p", "g"), (), update_s, 0, updates=("p",)),
           Op("use", "relu", ("y",), ("z",), D, 0)]
    return Graph("order", tensors, ops)


def _plan(g: Graph, read_at: float, update_at: float, events_first: str = "sgd") -> Plan:
    """Everything resident; the reader and the zero-time update at the given times; file order as given."""
    read = Event("compute", read_at, read_at + g.op("read").time_s, op="read")
    upd = Event("compute", update_at, update_at, op="sgd")
    end = max(read_at, update_at) + D
    rest = [Event("compute", end, end + D, op="use"), Event("free", end + D, end + D, tensor="y"),
            Event("free", end + D, end + D, tensor="z")]
    pair = [upd, read] if events_first == "sgd" else [read, upd]
    return Plan(graph=g.name, graph_sha256="", device=DEVICE, planner={"name": "test"},
                schedule=["read", "sgd", "use"], allocation=serial_plan(g).allocation,
                resident_at_start=["x", "p", "g"], events=pair + rest, makespan_s=end + D,
                metrics={"ideal_s": D + g.op("read").time_s})


@pytest.mark.parametrize("first", ["sgd", "read"])
def test_tied_zero_time_ops_run_as_the_schedule_says_whatever_the_files_order(first: str) -> None:
    """Both ops take no time and start at 0: the executor breaks the tie by the schedule (read, then sgd)."""
    g = _graph(read_s=0.0)
    plan = _plan(g, 0.0, 0.0, first)
    assert validate(g, plan).valid
    order = [plan.events[i].op for i in event_order(g, plan) if plan.events[i].kind == "compute"]
    assert order == ["read", "sgd", "use"]


@pytest.mark.parametrize("read_at", [0.0, 1e-10])
def test_a_zero_time_update_at_or_within_the_tolerance_before_its_reader_is_refused(read_at: float) -> None:
    """The update at 0 takes no time, the reader starts at 0 (or eps/2 later): on times they tie and the
    schedule's order is kept, but the update ends first, so it runs first and the reader would see the updated
    parameter (silently wrong gradients, before the run order was checked)."""
    g = _graph()
    plan = _plan(g, read_at, 0.0)
    assert plan.tolerance_s > read_at
    r = validate(g, plan)
    assert not r.valid and r.violations[0].rule == 1, r
    assert "reads 'p' after an in-place update that the schedule puts after it" in r.violations[0].message
    assert "in the order events run" in r.violations[0].message
    assert validate(g, _plan(g, 0.0, D)).valid    # the update after the read ends: valid


def test_a_zero_time_ops_input_freed_at_its_instant_is_counted_with_its_outputs() -> None:
    """`b` reads a (freed at b's instant) and takes no time: the executor holds a while it allocates b's output,
    so the memory that counts both is needed (rule 5's sweep releases a after b's allocation, in the run
    order; it once counted the free first and left this to the replay)."""
    tensors = [Tensor("x", 64, "input", True), Tensor("a", 1000), Tensor("b", 1000)]
    ops = [Op("mk", "relu", ("x",), ("a",), D, 0), Op("cp", "clone", ("a",), ("b",), 0.0, 0),
           Op("end", "sum", ("b",), (), D, 0)]
    g = Graph("zero", tensors, ops)
    events = [Event("compute", 0.0, D, op="mk"), Event("compute", D, D, op="cp"), Event("free", D, D, tensor="a"),
              Event("compute", D, 2 * D, op="end"), Event("free", 2 * D, 2 * D, tensor="b")]
    plan = Plan(graph=g.name, graph_sha256="", device=replace(DEVICE, memory_bytes=2064), planner={"name": "t"},
                schedule=["mk", "cp", "end"], allocation=serial_plan(g).allocation, resident_at_start=["x"],
                events=events, makespan_s=2 * D, metrics={"ideal_s": 2 * D})
    assert validate(g, plan).valid                                   # 64 + 1000 + 1000 fit
    tight = replace(plan, device=replace(DEVICE, memory_bytes=2063))
    r = validate(g, tight)
    assert not r.valid and r.violations[0].rule == 5 and "overflows at 1 ms: 2.02 KiB" in r.violations[0].message, r


def test_a_swap_out_without_a_copy_paired_with_a_later_tiny_swap_in_is_refused() -> None:
    """Copies of 4 bytes without latency last less than the tolerance: a swap_out of a tensor already freed, then
    a swap_in of it, read on times as the swap_in's copy released by the swap_out; the run order releases a copy
    that is not there (the executor stopped: "it has no device copy then")."""
    fast = replace(DEVICE, h2d_bytes_per_s=1e10, d2h_bytes_per_s=1e10)
    tensors = [Tensor("x", 64, "input", True), Tensor("s", 4), Tensor("o", 64)]
    ops = [Op("mk", "relu", ("x",), ("s",), D, 0), Op("use", "mul", ("s", "x"), ("o",), D, 0)]
    g = Graph("tiny", tensors, ops)
    c = 4 / fast.d2h_bytes_per_s
    events = [Event("compute", 0.0, D, op="mk"), Event("compute", D, 2 * D, op="use"),
              Event("free", 2 * D, 2 * D, tensor="s"), Event("free", 2 * D, 2 * D, tensor="o")]
    plan = Plan(graph=g.name, graph_sha256="", device=fast, planner={"name": "t"}, schedule=["mk", "use"],
                allocation=serial_plan(g).allocation, resident_at_start=["x"], events=events, makespan_s=2 * D,
                metrics={"ideal_s": 2 * D})
    assert validate(g, plan).valid
    tail = [Event("swap_out", 2 * D, 2 * D + c, tensor="s"), Event("swap_in", 2 * D + c, 2 * D + 2 * c, tensor="s")]
    bad = replace(plan, events=events + tail, makespan_s=2 * D + 2 * c)
    assert c < bad.tolerance_s
    r = validate(g, bad)
    assert not r.valid and r.violations[0].rule == 2 and "in the order events run" in r.violations[0].message, r


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n_ops=st.integers(2, 9))
def test_tied_zero_time_ops_validate_whatever_the_files_order_and_the_run_order_compiles(seed: int,
                                                                                      n_ops: int) -> None:
    """Serial plans of random graphs (zero-time ops among them) with their events shuffled: still valid, and the
    executor's program compiles from them (it re-checks what the runtime relies on)."""
    from executor.program import compile_program

    rng = random.Random(seed)
    g = random_graph(rng, n_ops)
    p = serial_plan(g)
    events = list(p.events)
    rng.shuffle(events)
    shuffled = replace(p, events=events)
    assert validate(g, shuffled).valid
    compile_program(g, shuffled)


# ---- rule 0 for plans built in Python --------------------------------------------------------------------------

def _set(obj, name: str, value):  # noqa: ANN001, ANN202 - frozen dataclasses, as a user's code might
    object.__setattr__(obj, name, value)
    return obj


@pytest.mark.parametrize("change, words", [
    (lambda p: _set(p.device, "transfer_latency_s", 1e308), "device.transfer_latency_s must be a finite number of seconds, at least 0 and at most 1e+09 s"),
    (lambda p: _set(p.device, "alignment_bytes", 2**80), "device.alignment_bytes must be a power of two, at most 1 GiB"),
    (lambda p: _set(p.device, "memory_bytes", 1e308), "device.memory_bytes must be a positive whole number, at most 64 PiB"),
    (lambda p: _set(p, "makespan_s", 2**80), "makespan_s must be at most"),
    (lambda p: p.events.__setitem__(0, replace(p.events[0], end_s="0.1")), "events[0] compute: end_s must be a number"),
    (lambda p: _set(p, "graph_sha256", 1), "graph_sha256 must be a string"),
    (lambda p: _set(p, "events", [None]), "events[0] must be an Event"),
    (lambda p: _set(p, "allocation", None), "allocation must be a size-class, arena or unconstrained"),
    (lambda p: _set(p, "allocation", {"kind": "arena"}), "allocation must be"),
    (lambda p: _set(p, "schedule", [1, 2]), "schedule must be a list of id strings"),
    (lambda p: _set(p, "planner", None), "planner must be a dict"),
    # helper-126's probe: these raised AttributeError / TypeError inside validate
    (lambda p: _set(p, "allocation", ArenaAllocation(0, None)), "allocation.offsets must be a dict of tensor ids"),
    (lambda p: _set(p, "allocation", SizeClassAllocation(None, {})), "allocation: classes must be a list of size"),
    (lambda p: _set(p, "allocation", SizeClassAllocation((), None)), "and class_of a dict of tensor ids"),
    (lambda p: _set(p, "makespan_s", "1"), "makespan_s must be a finite number, got '1'"),
    (lambda p: _set(p, "metrics", None), "metrics must be an object"),
])
def test_a_python_built_plan_of_the_wrong_types_gets_a_rule_0_verdict(change, words: str) -> None:  # noqa: ANN001
    g = _graph(update_s=D)
    p = copy.deepcopy(_plan(g, 0.0, D))
    change(p)
    r = validate(g, p)
    assert not r.valid and r.violations[0].rule == 0 and words in r.violations[0].message, r
    # the tables' figures (event_figures, plan rows, events_frame) say the same in one line, not a TypeError
    with pytest.raises(HybridError, match=r"^the plan's fields are not what the format allows: .*"
                                          + re.escape(words) + r".*validate\(graph, plan\) lists them$"):
        event_figures(g, p)


@pytest.mark.parametrize("events", [None, [None], "abc"])
def test_an_events_table_of_a_plan_whose_events_are_not_events_says_so(events: object) -> None:
    g = _graph(update_s=D)
    p = _set(copy.deepcopy(_plan(g, 0.0, D)), "events", events)
    for read in (p.events_frame, lambda: p.events_frame(g)):   # a TypeError inside pandas' rows before
        with pytest.raises(HybridError, match=r"^the plan's fields are not what the format allows: events must be "
                                              r"a list of Event; hybrid\.validator\.validate\(graph, plan\) lists"):
            read()


@pytest.mark.parametrize("k", [2, 20])
def test_frees_listed_before_the_zero_time_ops_that_read_them_run_after_them(k: int) -> None:
    """k copies freed at the instant where k zero-time ops read all of them, the frees listed first: the run
    order moves each free after the last tied reader, once (a bound on moves once refused this at k = 16)."""
    tensors = [Tensor("x", 64, "input", True)] + [Tensor(f"t{i}", 64) for i in range(k)] + \
        [Tensor(f"z{i}", 64) for i in range(k)]
    ts = tuple(f"t{i}" for i in range(k))
    ops = [Op("m", "split", ("x",), ts, D, 0)] + [Op(f"Z{i}", "view", ts, (f"z{i}",), 0.0, 0) for i in range(k)]
    g = Graph("fan", tensors, ops)
    p = serial_plan(g, resident=["x"])
    frees = [e for e in p.events if e.kind == "free" and e.tensor.startswith("t")]
    rest = [e for e in p.events if e not in frees]
    at = next(i for i, e in enumerate(rest) if e.kind == "compute" and e.op == "Z0")
    listed_first = replace(p, events=rest[:at] + frees + rest[at:])
    assert all(f.start_s == D for f in frees)
    r = validate(g, listed_first)
    assert r.valid, r.violations[:1]
    order = [listed_first.events[i] for i in event_order(g, listed_first)]
    last_reader = max(j for j, e in enumerate(order) if e.kind == "compute" and e.op.startswith("Z"))
    assert all(order.index(f) > last_reader for f in frees)
