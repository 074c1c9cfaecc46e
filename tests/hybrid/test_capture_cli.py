"""`hybrid capture` and `hybrid profile` from the command line, and profiles applied to graphs."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from hybrid.capture.profile import Profile, apply_profile, op_signature  # noqa: E402
from hybrid.cli.main import cli  # noqa: E402
from hybrid.graph import Graph  # noqa: E402

pytestmark = pytest.mark.torch

SMALL = ["--model", "resnet-18", "--batch", "2", "--set", "image_size=32", "--set", "num_classes=10"]


@pytest.fixture(scope="module")
def captured(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cap") / "g.json"
    r = CliRunner().invoke(cli, ["capture", *SMALL, "--optimizer", "sgd", "--momentum", "0.9", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "captured resnet-18-b2" in r.output
    return out


def test_capture_writes_a_valid_graph(captured: Path) -> None:
    g = Graph.load(captured)
    assert g.device is not None and g.device.name == "v100-16gb"
    assert g.extra["bindings"]["optimizer"]["name"] == "sgd"
    state = [t for t in g.tensors if t.kind == "optimizer_state"]
    assert sum(t.bytes for t in state) == sum(t.bytes for t in g.tensors if t.kind == "param")   # momentum
    assert {o.kind for o in g.ops if o.extra["phase"] == "optimizer"} == {"sgd"}


@pytest.mark.parametrize("args,message", [
    (["--model", "resnet-7b", "--out", "x.json"], "unknown model"),
    ([*SMALL, "--set", "image_size", "--out", "x.json"], "KEY=VALUE"),
    ([*SMALL, "--optimizer", "adam", "--momentum", "0.9", "--out", "x.json"], "--momentum"),
    ([*SMALL, "--optimizer", "none", "--lr", "0.1", "--out", "x.json"], "need an optimizer"),
    ([*SMALL, "--measure", "--out", "x.json"], "--measure needs --profile"),
    ([*SMALL, "--profile", "missing.prof.json", "--out", "x.json"], "does not exist"),
])
def test_capture_errors_are_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    args = [str(tmp_path / a) if a.endswith(".json") else a for a in args]
    r = CliRunner().invoke(cli, ["capture", *args])
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_profile_measures_once_and_capture_reuses_it(captured: Path, tmp_path: Path) -> None:
    prof, out = tmp_path / "cpu.prof.json", tmp_path / "measured.json"
    r = CliRunner().invoke(cli, ["profile", "--graph", str(captured), "--profile", str(prof), "--backend", "cpu",
                                 "--repeat", "1", "--warmup", "0", "--out", str(out)])
    assert r.exit_code == 0, r.output
    p = Profile.load(prof)
    g = Graph.load(captured)
    distinct = {op_signature(g, o) for o in g.ops}
    ops_entries = {k for k in p.entries if "#impl=" not in k}   # the rest: each conv's alternative impls
    alternatives = {f"{op_signature(g, o)}#impl={im.name}" for o in g.ops for im in o.impls if im.name != "default"}
    assert p.backend == "cpu" and ops_entries == distinct and len(distinct) < len(g.ops)
    assert alternatives and set(p.entries) - ops_entries == alternatives
    measured = Graph.load(out)
    assert all(o.extra["cost"]["cpu_time_s_source"] == "profile" for o in measured.ops)
    assert all(o.extra["cost"]["time_s_source"] == "roofline" for o in measured.ops)
    first = r.output
    # A second run measures nothing new, and counts what it reuses as the first counted what it measured.
    r = CliRunner().invoke(cli, ["profile", "--graph", str(captured), "--profile", str(prof), "--backend", "cpu"])
    assert f"measured {len(p.entries)} op signatures" in first, first
    assert "measured 0 op signatures" in r.output and f"reused {len(p.entries)}," in r.output, r.output
    # Capture applies the cached times to a fresh graph.
    again = tmp_path / "again.json"
    r = CliRunner().invoke(cli, ["capture", *SMALL, "--optimizer", "sgd", "--momentum", "0.9", "--profile", str(prof),
                                 "--out", str(again)])
    assert r.exit_code == 0, r.output
    assert [o.cpu_time_s for o in Graph.load(again).ops] == [o.cpu_time_s for o in measured.ops]


def test_a_cuda_profile_sets_time_s(captured: Path) -> None:
    g = Graph.load(captured)
    convs = [o for o in g.ops if o.kind == "convolution"]
    sig = op_signature(g, convs[0])
    same = [o.id for o in convs if op_signature(g, o) == sig]
    g2 = apply_profile(g, Profile("cuda", "test GPU", {sig: {"time_s": 0.25, "samples": 1}}))
    for o in g2.ops:
        if o.id in same:
            assert o.time_s == 0.25 and o.extra["cost"]["time_s_source"] == "profile"
            assert o.cpu_time_s == g.op(o.id).cpu_time_s
        else:
            assert o.time_s == g.op(o.id).time_s
    assert g2.extra["capture"]["profiles"][-1]["ops_from_profile"] == len(same)


def test_a_cuda_profile_carries_each_ops_measured_peak_bytes_and_refuses_a_bad_one(captured: Path,
                                                                                    tmp_path: Path) -> None:
    from hybrid.errors import FormatError

    g = Graph.load(captured)
    op = next(o for o in g.ops if o.kind == "convolution")
    sig = op_signature(g, op)
    got = apply_profile(g, Profile("cuda", "test GPU", {sig: {"time_s": 0.25, "samples": 1, "peak_bytes": 7168,
                                                             "copy_time_s": 2e-5}}))
    assert got.op(op.id).extra["cost"]["device_peak_bytes"] == 7168
    assert got.op(op.id).extra["cost"]["device_copy_time_s"] == 2e-5
    cpu = apply_profile(g, Profile("cpu", "test CPU", {sig: {"time_s": 0.25, "samples": 1, "peak_bytes": 7168}}))
    assert "device_peak_bytes" not in cpu.op(op.id).extra["cost"]
    path = tmp_path / "p.json"
    Profile("cuda", "test GPU", {sig: {"time_s": 0.25, "samples": 1, "peak_bytes": -1}}).save(path)
    with pytest.raises(FormatError, match="peak_bytes"):
        Profile.load(path)
    Profile("cuda", "test GPU", {sig: {"time_s": 0.25, "samples": 1, "copy_time_s": float("inf")}}).save(path)
    with pytest.raises(FormatError):
        Profile.load(path)


def test_executor_workspaces_follow_the_profiles_device(captured: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """--executor-workspaces states what `hybrid execute` allocates outside its pool where the profile was
    measured: on the CPU its convolutions write their slots; with a cuda profile, where this machine has no
    cuDNN (stood in for here, so a GPU machine runs the same test), they are copied in, and the measured copy
    is in their time."""
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: False)
    g = Graph.load(captured)
    conv = next(o for o in g.ops if o.kind == "convolution")
    sig = op_signature(g, conv)
    prof = tmp_path / "cuda.json"
    Profile("cuda", "test GPU", {sig: {"time_s": 0.25, "samples": 1, "copy_time_s": 0.01}}).save(prof)
    outs = {}
    for name, extra in (("cpu", []), ("cuda", ["--profile", str(prof)])):
        outs[name] = tmp_path / f"{name}.json"
        r = CliRunner().invoke(cli, ["capture", *SMALL, "--optimizer", "sgd", "--momentum", "0.9",
                                     "--executor-workspaces", *extra, "--out", str(outs[name])])
        assert r.exit_code == 0, r.output
    cpu, cuda = Graph.load(outs["cpu"]), Graph.load(outs["cuda"])
    results = sum(g.tensor(t).bytes for t in conv.outputs)
    assert cpu.op(conv.id).workspace_bytes < results <= cuda.op(conv.id).workspace_bytes
    assert cuda.op(conv.id).time_s == pytest.approx(0.26)
