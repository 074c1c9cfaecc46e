"""`hybrid serve` refuses what it cannot simulate honestly, in one line naming the flag: rates and windows it
cannot hold, training graphs, graphs costed for other devices or batches, and flags the chosen policy ignores;
and its summary counts parameters only."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from hybrid.device import preset
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.graph.synthetic import training_graph
from hybrid.serve import ServeConfig, workload
from hybrid.serve.simulate import MAX_REQUESTS
from tests.cli.helpers import error_line, run


def inference_graph(n_layers: int = 8, seed: int = 3, batch: int | None = 2, device: str | None = None,
                    name: str | None = None) -> Graph:
    """The forward pass of a synthetic training graph (no loss, backward or updates), optionally as a capture
    records it: its batch, `capture.training` false, and per-op FLOPs and bytes costed for `device`."""
    g = training_graph(n_layers, seed=seed)
    ops = [o for o in g.ops if o.kind == "forward"]
    used = {t for o in ops for t in (*o.inputs, *o.outputs)}
    tensors = [t for t in g.tensors if t.id in used]
    extra: dict = {"model": {"batch": batch}} if batch else {}
    dev = g.device
    if device is not None:
        dev = preset(device, reserve=True)
        ops = [dataclasses.replace(o, extra={"cost": {"flops": 2e9 * (i + 1), "io_bytes": 1 << 24,
                                                      "dtype": "float32", "class": "matmul"}})
               for i, o in enumerate(ops)]
        extra["capture"] = {"tool": "hybrid.capture", "training": False, "costs": {"device": device}}
    return Graph(name or f"infer-{n_layers}-{seed}", tensors, ops, dev, extra)


def write(g: Graph, path: Path) -> Path:
    path.write_text(g.dumps())
    return path


def fails(*args: object) -> str:
    """The one error line of a refused `hybrid serve ARGS`."""
    return error_line("serve", *args)


@pytest.fixture(scope="module")
def infer(tmp_path_factory) -> Path:
    return write(inference_graph(), tmp_path_factory.mktemp("serve-in") / "infer.json")


# ---- 1. rates and durations --------------------------------------------------------------------------------

@pytest.mark.parametrize("rate", ["inf", "nan", "-inf", "1e400"])
def test_rate_must_be_finite(infer: Path, rate: str) -> None:
    line = fails("--graph", infer, "--rate", rate, "--duration", "2s")
    assert "--rate" in line and "finite" in line


def test_rate_times_duration_beyond_the_cap_is_refused_before_any_work(infer: Path) -> None:
    line = fails("--graph", infer, "--rate", "1e9", "--duration", "2s")
    assert "--rate" in line and "--duration" in line and "2e+09" in line and f"{MAX_REQUESTS:,}" in line
    line = fails("--graph", infer, "--rate", "10", "--duration", "100000h")
    assert "3.6e+09" in line


def test_zero_duration_is_refused(infer: Path) -> None:
    line = fails("--graph", infer, "--rate", "1", "--duration", "0s")
    assert "--duration" in line and "positive" in line


def test_the_simulation_itself_refuses_what_it_cannot_hold() -> None:
    with pytest.raises(HybridError, match="--rate"):
        ServeConfig(rates=(float("inf"),))
    with pytest.raises(HybridError, match="expected requests"):
        ServeConfig(rates=(1e6,), duration_s=3600)
    with pytest.raises(HybridError, match="expected requests"):
        workload(1e9, 1, 2.0, 1, seed=1)


# ---- 2. training graphs --------------------------------------------------------------------------------------

def test_a_training_graph_is_refused(tmp_path: Path) -> None:
    path = write(training_graph(6, seed=1), tmp_path / "train.json")
    line = fails("--graph", path, "--batch", 1, "--rate", 1)
    assert str(path) in line and "--optimizer none" in line and "training" in line


def test_a_graph_captured_for_training_is_refused_without_updates(tmp_path: Path) -> None:
    g = inference_graph()
    g = Graph(g.name, g.tensors, g.ops, g.device, {**g.extra, "capture": {"training": True}})
    path = write(g, tmp_path / "trained.json")
    line = fails("--graph", path, "--rate", 1)
    assert str(path) in line and "--optimizer none" in line


# ---- 3. devices and batches --------------------------------------------------------------------------------

def test_device_recosts_compute_times_and_says_so(tmp_path: Path) -> None:
    path = write(inference_graph(device="v100-16gb"), tmp_path / "v100.json")
    args = ["--graph", path, "--rate", 1, "--duration", "5s", "--policy", "not-shared"]
    own = run("serve", *args)
    assert own.exit_code == 0, own.output
    assert "costed for v100-16gb" in own.output
    fast = run("serve", *args, "--device", "h100-80gb", "--json")
    slow = run("serve", *args, "--json")
    assert fast.exit_code == 0, fast.output
    f, s = json.loads(fast.output), json.loads(slow.output)
    assert f["models"][0]["ideal_s"] < s["models"][0]["ideal_s"]   # an H100 computes faster than a V100
    assert f["times_costed_for"] == ["h100-80gb"] and s["times_costed_for"] == ["v100-16gb"]
    text = run("serve", *args, "--device", "h100-80gb").output
    assert "on h100-80gb" in text and "re-costed for h100-80gb" in text


def test_device_on_a_graph_without_costs_is_refused(infer: Path) -> None:
    line = fails("--graph", infer, "--rate", 1, "--device", "h100-80gb")
    assert "--device h100-80gb" in line and str(infer) in line and "--memory" in line


def test_graphs_for_different_devices_are_refused_unless_the_gpu_is_named(tmp_path: Path) -> None:
    a = write(inference_graph(device="v100-16gb", name="a"), tmp_path / "a.json")
    b = write(inference_graph(device="p2200", name="b"), tmp_path / "b.json")
    line = fails("--graph", a, "--graph", b, "--rate", 1, "--duration", "5s")
    assert "v100-16gb" in line and "p2200" in line and str(a) in line and str(b) in line
    for extra in (["--device", "v100-16gb"], ["--memory", "1GiB"]):
        r = run("serve", "--graph", a, "--graph", b, "--rate", 1, "--duration", "5s", "--policy", "not-shared",
                *extra)
        assert r.exit_code == 0, r.output


def test_graphs_captured_at_different_batches_are_refused(tmp_path: Path) -> None:
    a = write(inference_graph(batch=1, name="a"), tmp_path / "a.json")
    b = write(inference_graph(batch=16, name="b"), tmp_path / "b.json")
    line = fails("--graph", a, "--graph", b, "--rate", 1)
    assert "batch 1" in line and "batch 16" in line and str(b) in line


def test_batch_other_than_the_captured_one_is_refused(infer: Path) -> None:
    line = fails("--graph", infer, "--rate", 1, "--batch", 4)
    assert "--batch 4" in line and "batch 2" in line and str(infer) in line
    assert run("serve", "--graph", infer, "--rate", 1, "--batch", 2, "--duration", "5s").exit_code == 0


@pytest.mark.parametrize("recorded", [0, "16", 16.0])
def test_a_malformed_recorded_batch_is_served_at_the_batch_given(tmp_path: Path, recorded) -> None:
    g = inference_graph()
    g.extra["model"] = {"batch": recorded}
    path = tmp_path / "g.json"
    g.save(path)
    line = fails("--graph", path, "--rate", 1)
    assert "--batch" in line and "model.batch" in line, line
    assert run("serve", "--graph", path, "--rate", 1, "--batch", 2, "--duration", "5s").exit_code == 0


def test_a_graph_without_model_batch_is_served_at_its_inputs_leading_dimension(tmp_path: Path) -> None:
    """A `--module` capture records no model.batch; its inputs' shapes still say the batch its times are for."""
    g = inference_graph(batch=None)
    g = Graph(g.name, [dataclasses.replace(t, extra={**t.extra, "shape": [4, 3]}) if t.kind == "input" else t
                       for t in g.tensors], g.ops, g.device, g.extra)
    path = write(g, tmp_path / "g.json")
    line = fails("--graph", path, "--rate", 1, "--batch", 2)
    assert "--batch 2" in line and "batch 4" in line, line
    r = run("serve", "--graph", path, "--rate", 1, "--duration", "5s")
    assert r.exit_code == 0 and "batch 4" in r.output, r.output


def test_an_op_that_draws_random_numbers_is_served_with_a_note(tmp_path: Path) -> None:
    from hybrid.graph import Op, Tensor

    g = inference_graph()
    x = next(t for t in g.tensors if t.kind == "input")
    rng = Tensor("rng", 0, "other", True)
    mask = Tensor("mask", x.bytes, "activation")
    drop = Op("drop", "bernoulli_", (x.id, rng.id), (mask.id,), 1e-5, updates=(rng.id,))
    g = Graph(g.name, [*g.tensors, rng, mask], [*g.ops, drop], g.device, g.extra)
    r = run("serve", "--graph", write(g, tmp_path / "g.json"), "--rate", 1, "--duration", "5s")
    assert r.exit_code == 0 and "op 'drop' draws random numbers" in r.output and "eval mode" in r.output, r.output


def test_batch_help_says_service_times_are_the_captured_batch() -> None:
    text = " ".join(run("serve", "--help").output.split())
    assert "must equal" in text and "captured" in text


# ---- 4. flags that do not apply ----------------------------------------------------------------------------

@pytest.mark.parametrize("extra, flag", [
    (["--generations", "50"], "--generations"),
    (["--generations", "50", "--planner", "belady"], "--generations"),
    (["--policy", "swapping", "--resident", "1"], "--resident"),
    (["--policy", "not-shared", "--planner", "ga"], "--planner"),
    (["--policy", "time-shared", "--planner", "belady"], "--planner"),
])
def test_flags_the_policy_or_planner_ignore_are_refused(infer: Path, extra: list[str], flag: str) -> None:
    line = fails("--graph", infer, "--rate", 1, *extra)
    assert flag in line


def test_flags_that_apply_are_accepted(infer: Path) -> None:
    r = run("serve", "--graph", infer, "--rate", 1, "--duration", "5s", "--policy", "time-shared", "--resident", 1)
    assert r.exit_code == 0, r.output
    r = run("serve", "--graph", infer, "--rate", 1, "--duration", "5s", "--policy", "swapping", "--planner", "ga",
            "--generations", 2)
    assert r.exit_code == 0, r.output


# ---- 5. what is printed ------------------------------------------------------------------------------------

def test_json_lists_every_copy_and_help_describes_the_object(infer: Path) -> None:
    r = run("serve", "--graph", infer, "--models", 4, "--rate", 1, "--duration", "5s", "--json")
    assert r.exit_code == 0, r.output
    j = json.loads(r.output)
    assert [m["name"] for m in j["models"]] == [f"infer-8-3#{i}" for i in range(4)]
    assert {"models", "share_bytes", "rows"} <= set(j)
    text = " ".join(run("serve", "--help").output.split())
    assert "JSON records" not in text and "share_bytes" in text


def test_parameters_exclude_inputs(infer: Path) -> None:
    g = Graph.load(infer)
    params = sum(t.bytes for t in g.tensors if t.persistent and t.kind != "input")
    inputs = sum(t.bytes for t in g.tensors if t.kind == "input")
    assert inputs > 0
    j = json.loads(run("serve", "--graph", infer, "--rate", 1, "--duration", "5s", "--json").output)
    assert j["models"][0]["param_bytes"] == params


def test_time_shared_memory_error_is_in_human_units(infer: Path) -> None:
    from hybrid.serve import ModelCosts, simulate_serving

    m = ModelCosts("m", 0.01, 0.01, param_bytes=12 << 20, workspace_bytes=1 << 20)
    with pytest.raises(HybridError, match=r"--memory 12 MiB cannot hold model 'm'"):
        simulate_serving([m], ServeConfig(rates=(1.0,), duration_s=10, memory_bytes=12 << 20))


def test_recost_keeps_each_ops_default_impl_and_scales_the_others() -> None:
    from hybrid.graph import Impl
    from hybrid.serve.costs import costed_for, recost_for

    g = inference_graph(device="v100-16gb")
    op = g.ops[0]
    ops = (dataclasses.replace(op, impls=(Impl("default", op.time_s, 0), Impl("fast", op.time_s / 2, 1 << 20))),
           *g.ops[1:])
    g = Graph(g.name, g.tensors, ops, g.device, g.extra)
    h = recost_for(g, preset("h100-80gb"), "g.json")
    new = h.ops[0]
    assert new.time_s != op.time_s and new.default_impl == 0 and new.impls[0].time_s == new.time_s
    assert new.impls[1].time_s == pytest.approx(new.time_s / 2)
    assert costed_for(h) == "h100-80gb" and h.device == preset("h100-80gb")
