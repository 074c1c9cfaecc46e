"""One alignment rule and the reserve: the device fields, every planner's accounting, and rule 5."""
from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.swap.pools import byte_pool, per_size_pool
from hybrid.swap.baselines import BASELINES, run_baseline
from hybrid.device import DEFAULT_ALIGNMENT, PRESET_RESERVE, Device, preset, resolve_device
from hybrid.errors import FormatError, HybridError, InfeasibleError
from hybrid.graph import Graph, Op, Tensor
from hybrid.plan import ArenaAllocation
from hybrid.swap.to_plan import to_plan
from hybrid.graph.order import program_order
from hybrid.swap.planner import SwapPlanner
from hybrid.graph.synthetic import training_graph
from hybrid.validator import validate


def test_device_fields_round_trip_and_default_to_cuda_alignment() -> None:
    d = Device.from_json({"name": "x", "memory_bytes": 1 << 30, "h2d_bytes_per_s": 1e9, "d2h_bytes_per_s": 1e9})
    assert d.alignment_bytes == DEFAULT_ALIGNMENT == 512 and d.reserve_bytes == 0 and d.usable_bytes == 1 << 30
    e = replace(d, alignment_bytes=64, reserve_bytes=1 << 20)
    assert Device.from_json(e.to_json()) == e and e.usable_bytes == (1 << 30) - (1 << 20)
    assert e.occupied(1) == 64 and e.occupied(64) == 64 and e.occupied(65) == 128 and e.occupied(0) == 0


@pytest.mark.parametrize("field,value,match", [("alignment_bytes", 48, "power of two"),
                                               ("reserve_bytes", -1, "must not be negative"),
                                               ("reserve_bytes", 1 << 30, "leaves nothing")])
def test_bad_device_fields_are_named(field: str, value: int, match: str) -> None:
    d = {"name": "x", "memory_bytes": 1 << 30, "h2d_bytes_per_s": 1e9, "d2h_bytes_per_s": 1e9, field: value}
    with pytest.raises(FormatError, match=match):
        Device.from_json(d, "graph.device")


def test_a_preset_used_whole_keeps_its_reserve_and_memory_states_what_a_plan_may_fill() -> None:
    whole = resolve_device(None, "v100-16gb")
    assert whole.reserve_bytes == PRESET_RESERVE and whole.usable_bytes == whole.memory_bytes - PRESET_RESERVE
    assert resolve_device(None, None).reserve_bytes == PRESET_RESERVE            # the default preset too
    assert resolve_device(None, "v100-16gb", memory="10GiB").usable_bytes == 10 << 30
    assert resolve_device(None, "v100-16gb", memory="10GiB", reserve="512MiB").usable_bytes == (10 << 30) - (512 << 20)
    assert resolve_device(whole, None).reserve_bytes == PRESET_RESERVE           # a graph's own device as written
    assert resolve_device(None, "a100-40gb", alignment="256").alignment_bytes == 256
    assert preset("v100-16gb").reserve_bytes == 0 and preset("v100-16gb", reserve=True).reserve_bytes == PRESET_RESERVE
    with pytest.raises(HybridError, match="--reserve 2 GiB leaves nothing"):
        resolve_device(None, "v100-16gb", memory="1GiB", reserve="2GiB")


ABSTRACT_GRAPH = {"format": "hybrid-graph/1", "name": "abstract",
                  "device": {"name": "paper-fig", "memory_bytes": 10, "h2d_bytes_per_s": 1, "d2h_bytes_per_s": 1},
                  "tensors": [{"id": "x", "bytes": 2, "kind": "input", "persistent": True}, {"id": "a", "bytes": 2},
                              {"id": "b", "bytes": 2}],
                  "ops": [{"id": "op1", "inputs": ["x"], "outputs": ["a"], "time_s": 1.0},
                          {"id": "op2", "inputs": ["a"], "outputs": ["b"], "time_s": 1.0},
                          {"id": "op3", "inputs": ["b"], "outputs": [], "time_s": 1.0}]}


def test_a_device_remembers_that_it_did_not_state_its_alignment() -> None:
    """Only for messages: not compared, not written, and --alignment states one."""
    d = Device.from_json(ABSTRACT_GRAPH["device"])
    assert d.alignment_bytes == DEFAULT_ALIGNMENT and d.alignment_default and d.default_alignment_hint()
    assert d.to_json()["alignment_bytes"] == DEFAULT_ALIGNMENT and "alignment_default" not in d.to_json()
    stated = Device.from_json(d.to_json())
    assert stated == d and not stated.alignment_default and stated.default_alignment_hint() == ""
    assert d.default_alignment_hint(fits_unrounded=False) == ""
    assert not resolve_device(d, alignment="512").alignment_default
    assert resolve_device(d, memory="1KiB").alignment_default      # other flags keep it


def test_simulate_names_the_default_alignment_a_device_did_not_state(tmp_path) -> None:
    """Sizes in abstract units (docs/formats.md allows alignment 1 for them): the planner's refusal says that
    the unstated default alignment is what does not fit, and how to state 1."""
    import json

    from click.testing import CliRunner

    from hybrid.cli.main import cli

    path = tmp_path / "g.json"
    path.write_text(json.dumps(ABSTRACT_GRAPH))
    r = CliRunner().invoke(cli, ["simulate", "--graph", str(path)])
    assert r.exit_code == 2, r.output
    assert "does not state alignment_bytes" in r.output and '"alignment_bytes": 1' in r.output, r.output
    assert "--alignment 1" in r.output
    r = CliRunner().invoke(cli, ["simulate", "--graph", str(path), "--alignment", "1"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(cli, ["simulate", "--graph", str(path), "--alignment", "512"])   # stated: no hint
    assert r.exit_code != 0 and "does not state" not in r.output, r.output


def _odd_graph(align: int, memory: int) -> Graph:
    """Tensors of odd sizes, so alignment moves the byte count."""
    ts = [Tensor("w", 1000, "param", True), Tensor("a", 3000), Tensor("b", 3000), Tensor("c", 100)]
    ops = [Op("f", "mm", ("w",), ("a",), 1e-3), Op("g", "mm", ("a",), ("b",), 1e-3),
           Op("h", "mm", ("a", "b"), ("c",), 1e-3)]
    return Graph("odd", ts, ops, Device("d", memory, 1e9, 1e9, alignment_bytes=align))


def test_rule5_counts_each_copy_at_the_alignment() -> None:
    # At h: w (1000), a, b (3000 each) and c (100) on the device: 7100 bytes, or 8192 at 1024-byte alignment.
    loose = _odd_graph(1, 7100)
    plan = to_plan(SwapPlanner(loose, loose.device).plan(program_order(loose), byte_pool(loose, loose.device)),
                   {"name": "x"})
    assert validate(loose, plan).valid and validate(loose, plan).peak_bytes == 7100
    aligned = replace(plan, device=replace(plan.device, alignment_bytes=1024, memory_bytes=8191))
    report = validate(loose, aligned)
    assert not report.valid and report.violations[0].rule == 5 and "rounded up to 1024 bytes" in report.violations[0].message
    assert validate(loose, replace(aligned, device=replace(aligned.device, memory_bytes=8192))).valid


def test_rule5_arena_offsets_are_multiples_of_the_alignment() -> None:
    g = _odd_graph(64, 1 << 20)
    plan = to_plan(SwapPlanner(g, g.device).plan(program_order(g), byte_pool(g, g.device)), {"name": "x"})
    good = ArenaAllocation(16384, {"w": 0, "a": 1024, "b": 4096, "c": 8192})
    assert validate(g, replace(plan, allocation=good)).valid
    bad = ArenaAllocation(16384, {"w": 0, "a": 1000, "b": 4096, "c": 8192})
    report = validate(g, replace(plan, allocation=bad))
    assert not report.valid and "not a multiple of the device's alignment (64 bytes)" in report.violations[0].message


def test_the_reserve_is_memory_no_plan_touches() -> None:
    g = training_graph(8, seed=2, device=Device("s", 48 << 20, 12e9, 12e9, 0.0))
    dev = replace(g.device, reserve_bytes=24 << 20)
    plan = run_baseline(g, dev, "belady")
    assert validate(g, plan).valid and validate(g, plan).peak_bytes <= 24 << 20
    peak = validate(g, plan).peak_bytes
    assert not validate(g, replace(plan, device=replace(dev, reserve_bytes=dev.memory_bytes - peak + 1))).valid


@settings(max_examples=25, deadline=None, derandomize=True)
@given(layers=st.integers(3, 10), seed=st.integers(0, 50), frac=st.floats(0.25, 1.2),
       align=st.sampled_from([1, 64, 512, 4096]), reserve_frac=st.sampled_from([0.0, 0.1]), classes=st.booleans())
def test_every_planner_counts_aligned_bytes_within_the_usable_memory(layers: int, seed: int, frac: float, align: int,
                                                                     reserve_frac: float, classes: bool) -> None:
    g = training_graph(layers, seed=seed)
    raw_peak = int(g.arrays.t_bytes.sum())
    mem = max(1, int(raw_peak * frac))
    dev = replace(g.device, memory_bytes=mem, alignment_bytes=align, reserve_bytes=int(mem * reserve_frac))
    order = program_order(g)
    plans = []
    for kind in BASELINES:
        try:
            plans.append(run_baseline(g, dev, kind))
        except InfeasibleError:
            pass
    try:
        pool = per_size_pool(g, order, dev) if classes else byte_pool(g, dev)
        plans.append(to_plan(SwapPlanner(g, dev).plan(order, pool), {"name": "x"}))
    except InfeasibleError:
        pass
    for plan in plans:
        report = validate(g, plan)
        assert report.valid, (plan.planner, report.violations[:2])
        assert report.peak_bytes <= plan.device.usable_bytes
