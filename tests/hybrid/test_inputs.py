"""Numbers from files, flags and Python are finite and in range; plans are written only when valid, as strict
JSON (issue 30, Deliver 1 and 4)."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from hybrid.device import Device, resolve_device
from hybrid.errors import FormatError, HybridError, InvalidPlanError
from hybrid.graph import Graph
from hybrid.graph.synthetic import training_graph
from hybrid.jsonio import dumps_strict, loads_strict
from hybrid.plan import Plan
from hybrid.swap.baselines import run_baseline
from hybrid.units import MAX_BYTES, parse_bandwidth, parse_bytes, parse_duration
from hybrid.validator import validate, write_plan


@pytest.fixture(scope="module")
def made():
    g = training_graph(5, seed=3)
    plan = run_baseline(g, replace(g.device, memory_bytes=14 << 20, reserve_bytes=0), "belady")
    assert validate(g, plan).valid and any(e.kind == "swap_in" for e in plan.events)
    return g, plan


@pytest.mark.parametrize("text", ["1e400GiB", "1e30", "65PiB", "1e400"])
def test_sizes_beyond_the_range_are_refused_naming_the_flag(text):
    with pytest.raises(HybridError, match="--memory"):
        parse_bytes(text, "--memory")


def test_sizes_rates_and_durations_in_range_are_read():
    assert parse_bytes("64PiB", "--memory") == MAX_BYTES
    assert parse_bytes(4096.0) == 4096
    assert parse_bandwidth("12GB/s") == 12e9
    assert parse_duration("1h30m") == 5400.0
    for bad in (math.nan, math.inf, -1.0, 1e30):
        with pytest.raises(HybridError, match="--x"):
            parse_duration(bad, "--x")
    assert parse_bandwidth("12B/s") == parse_bandwidth(12.0) == 12.0
    for bad in ("0.5B/s", "1e30TB/s", math.nan, math.inf, "12", "12/s", "12GB", "12GiB"):   # text needs a unit
        with pytest.raises(HybridError, match="--h2d"):
            parse_bandwidth(bad, "--h2d")
    with pytest.raises(HybridError, match=r"'12GB': that is a size; a rate says per second, e.g. 12GB/s"):
        parse_bandwidth("12GB", "--h2d")
    for bare in ("12", "12/s"):   # it suggested '12/s', which reads as 12 bytes per second
        with pytest.raises(HybridError, match=r"give the number a unit, e\.g\. 12GB/s \(or 12B/s for bytes per"):
            parse_bandwidth(bare, "--h2d")
    with pytest.raises(HybridError, match="lowercase b means bits"):   # a size in bits: the bits said first
        parse_bandwidth("12Gb", "--h2d")
    with pytest.raises(HybridError, match="--alignment"):
        resolve_device(None, alignment="3")


@pytest.mark.parametrize("field,value", [("memory_bytes", math.inf), ("memory_bytes", 0),
                                         ("h2d_bytes_per_s", math.nan), ("d2h_bytes_per_s", 0.0),
                                         ("transfer_latency_s", math.nan), ("transfer_latency_s", -1e-6),
                                         ("reserve_bytes", math.nan), ("alignment_bytes", 2**40)])
def test_a_device_made_in_python_is_checked_too(field, value):
    with pytest.raises(HybridError, match=field):
        replace(Device("d", 1 << 30, 1e9, 1e9), **{field: value})


def test_a_graph_made_in_python_with_a_nan_time_is_refused(made):
    g, _ = made
    ops = [replace(g.ops[0], time_s=math.nan), *g.ops[1:]]
    with pytest.raises(FormatError, match=repr(g.ops[0].id)):
        Graph(g.name, g.tensors, ops, g.device)


def test_the_validator_reads_the_device_itself(made):
    """issue 30: every copy zero-length and a NaN latency made `hybrid validate` say valid. A device that
    slips past Device's checks (set on the frozen object) is still rule 0."""
    g, plan = made
    dev = replace(plan.device)
    object.__setattr__(dev, "transfer_latency_s", math.nan)
    events = [replace(e, end_s=e.start_s) if e.kind in ("swap_in", "swap_out") else e for e in plan.events]
    bad = replace(plan, device=dev, events=events, makespan_s=max(e.end_s for e in events))
    report = validate(g, bad)
    assert not report.valid and report.violations[0].rule == 0
    assert "transfer_latency_s" in report.violations[0].message


def test_a_plan_file_with_a_nan_device_figure_is_refused_naming_it(made, tmp_path):
    _, plan = made
    d = json.loads(plan.dumps())
    d["device"]["transfer_latency_s"] = math.nan
    path = tmp_path / "p.json"
    path.write_text(json.dumps(d))
    with pytest.raises(FormatError, match=r"device\.transfer_latency_s is NaN"):
        Plan.load(path)


def test_non_finite_figures_are_never_written(made, tmp_path):
    g, plan = made
    bad = replace(plan, metrics={**plan.metrics, "stall_s": math.inf})
    with pytest.raises(HybridError, match="metrics.stall_s"):
        bad.dumps()
    with pytest.raises(HybridError, match="x.y"):
        dumps_strict({"x": {"y": math.nan}}, "table")
    path = tmp_path / "p.json"
    with pytest.raises(HybridError):
        write_plan(g, bad, path)
    assert not path.exists()


def test_write_plan_writes_valid_plans_and_refuses_invalid_ones(made, tmp_path):
    g, plan = made
    path = tmp_path / "ok.json"
    write_plan(g, plan, path)
    assert validate(g, Plan.load(path)).valid
    broken = replace(plan, events=[e for e in plan.events if e.kind != "swap_in"])
    path2 = tmp_path / "broken.json"
    with pytest.raises(InvalidPlanError, match="not written") as info:
        write_plan(g, broken, path2)
    assert info.value.exit_status == 1 and not path2.exists()


@pytest.mark.parametrize("text,match", [("[" * 50_000 + "]" * 50_000, "nested too deeply"),
                                        ('{"a": NaN}', "field a is NaN"),
                                        ('{"a": [1, 1e400]}', r"field a\[1\] is 1e400"),
                                        ('{"a": -Infinity}', "field a is -Infinity"),
                                        ('{"a": ', "not JSON")])
def test_strict_json_reading(text, match):
    with pytest.raises(FormatError, match=match):
        loads_strict(text, "f.json")


def test_float_flags_refuse_nan():
    from click.testing import CliRunner

    from hybrid.cli.main import cli

    r = CliRunner().invoke(cli, ["milp", "--graph", "g.json", "--gap", "nan"])
    assert r.exit_code == 2 and "not a finite number" in r.output


@pytest.mark.parametrize("edit,match", [(("events", 0, "start_s"), "start_s"), (("makespan_s",), "makespan_s"),
                                        (("device", "h2d_bytes_per_s"), "h2d_bytes_per_s")])
def test_large_files_refuse_overflowing_numbers_in_every_typed_field(made, tmp_path, monkeypatch, edit, match):
    """Files above EVERY_FLOAT_BELOW are parsed at C speed; the readers' field checks catch 1e400 (inf)."""
    import hybrid.jsonio

    monkeypatch.setattr(hybrid.jsonio, "EVERY_FLOAT_BELOW", 0)
    _, plan = made
    d = json.loads(plan.dumps())
    cur = d
    for k in edit[:-1]:
        cur = cur[k]
    cur[edit[-1]] = 12345.5
    path = tmp_path / "p.json"
    path.write_text(json.dumps(d).replace("12345.5", "1e400"))
    with pytest.raises(FormatError, match=match):
        Plan.load(path)
    path.write_text(json.dumps(d).replace("12345.5", "NaN"))
    with pytest.raises(FormatError, match="NaN"):
        Plan.load(path)


def test_padding_a_plan_does_not_loosen_the_validator(made):
    """The tolerance is capped by the busy time the validator recomputes: one free moved to 1e8 s (and the
    makespan with it) made every check 0.1 s loose at a4e4bc4, enough to pass zero-length copies."""
    g, plan = made
    for i, e in enumerate(plan.events):
        if e.kind != "free":
            continue
        padded = replace(plan, events=[*plan.events[:i], replace(e, start_s=1e8, end_s=1e8), *plan.events[i + 1:]],
                         makespan_s=1e8)
        if validate(g, padded).valid:
            break
    else:
        pytest.fail("no free event could be moved to the end")
    zero = [replace(x, end_s=x.start_s) if x.kind in ("swap_in", "swap_out") else x for x in padded.events]
    report = validate(g, replace(padded, events=zero))
    assert not report.valid and report.violations[0].rule == 1 and "lasts 0 s" in report.violations[0].message


def test_too_little_memory_names_the_least_any_plan_needs() -> None:
    """The op that fails first is not always the largest: where the largest cannot fit, the message leads with it
    and the least memory any plan needs (it named the first op that failed, then the largest), so the user does not
    give more --memory twice."""
    from hybrid.errors import InfeasibleError
    from hybrid.graph import Op, Tensor

    MiB = 1 << 20
    tensors = [Tensor("x", 2 * MiB, "input", True), Tensor("a", 3 * MiB, "activation"),
               Tensor("b", 8 * MiB, "activation")]
    ops = [Op("small", "forward", ("x",), ("a",), 1e-3), Op("big", "forward", ("a",), ("b",), 1e-3)]
    dev = Device("d", 9 * MiB // 2, 1e9, 1e9, 0.0, reserve_bytes=0)
    g = Graph("two", tensors, ops, dev)
    with pytest.raises(InfeasibleError, match=r"^no plan runs in 4.5 MiB: op 'big' needs 11 MiB at once \(inputs, "
                                              r"outputs and workspace, .*\); give --memory of at least 11 MiB \(`hybrid info`"):
        run_baseline(g, dev, "belady")


def test_the_least_memory_said_counts_the_reserve_and_a_leaner_implementation() -> None:
    """The advice is a --memory (usable plus the reserve, where there is one), and a planner that runs an op's
    default implementation does not claim that no plan fits where a leaner implementation would (the MILP plans
    this graph in 3 MiB)."""
    from hybrid.errors import InfeasibleError
    from hybrid.graph import Op, Tensor
    from hybrid.graph.types import Impl

    MiB = 1 << 20
    t = [Tensor("x", MiB, "input", True), Tensor("y", MiB)]
    ops = [Op("conv", "conv", ("x",), ("y",), 1e-3, 8 * MiB, impls=(Impl("fast", 1e-3, 8 * MiB), Impl("lean", 2e-3, 0)))]
    g = Graph("impl", t, ops, Device("d", 4 * MiB + (1 << 30), 1e9, 1e9, 0.0, reserve_bytes=1 << 30))
    with pytest.raises(InfeasibleError, match=r"^no plan with the implementations this planner runs fits in 4 MiB: op "
                                              r"'conv' needs 10 MiB at once .*; give --memory of at least 1.01 GiB "
                                              r"\(10 MiB usable beside the 1 GiB reserve\); its implementation 'lean' "
                                              r"needs 2 MiB") as info:
        run_baseline(g, g.device, "belady")
    # what the advice asks for, carried beside the words (frontier states it as --memories, the usable bytes)
    assert info.value.least_usable_bytes == 10 * MiB and info.value.advice in str(info.value)


def test_a_missing_field_is_said_missing(made) -> None:
    """Not read as a value it does not have (a missing makespan_s was 0.0 and broke rule 7; a missing kind 'None')."""
    from hybrid.plan import Plan

    _, plan = made
    d = json.loads(plan.dumps())
    del d["makespan_s"]
    with pytest.raises(FormatError, match=r"field 'makespan_s' is missing \(the largest event end"):
        Plan.from_json(d)
    d = json.loads(plan.dumps())
    del d["events"][3]["kind"]
    with pytest.raises(FormatError, match=r"events\[3\]: field 'kind' is missing; use one of"):
        Plan.from_json(d)
    # a free has no stream: one that states one was read past whatever it said (helper-126's probe)
    d = json.loads(plan.dumps())
    k = next(i for i, e in enumerate(d["events"]) if e["kind"] == "free")
    d["events"][k]["stream"] = "gpu"
    with pytest.raises(FormatError, match=rf"events\[{k}\] \(free .*\): a free runs on no stream, but it says "
                                          r"stream 'gpu'; leave the field out"):
        Plan.from_json(d)
    d["events"][k]["stream"] = None
    assert Plan.from_json(d).events[k].kind == "free"


def test_a_reports_json_is_strict_with_null_for_what_does_not_apply() -> None:
    """Every command's --json goes through report_json: a NaN (a bound that does not hold for a plan that reruns
    ops) is null, not Python's NaN, which a strict JSON parser refuses."""
    import numpy as np

    from hybrid.jsonio import report_json

    text = report_json({"a": float("nan"), "b": [1.0, float("inf"), np.float64(2.5), np.int64(3)], "c": "x"})
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {"a": None, "b": [1.0, None, 2.5, 3],
                                                                          "c": "x"}
