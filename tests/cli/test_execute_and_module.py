"""`hybrid execute` checks cheaply before building anything; a user's own module from the command line."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.helpers import RESNET, foreign_graph_file, hybrid
from tests.cli.helpers import run as run_here

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _plan_file(graph: Path, out: Path) -> Path:
    """A Belady plan of `graph` in 100 MiB, made in this process (a `hybrid simulate` subprocess loads its
    kernels again, slow on a loaded machine)."""
    from dataclasses import replace

    from hybrid.graph import Graph
    from hybrid.swap.baselines import run_baseline

    g = Graph.load(graph)
    run_baseline(g, replace(g.device, memory_bytes=100 << 20, reserve_bytes=0), "belady").save(out)
    return out


def test_execute_refuses_a_plan_for_another_graph_before_building_anything(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    import executor.model
    from hybrid.capture import api as capture_api

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("built or captured the model before the cheap checks")

    monkeypatch.setattr(executor.model, "workload", never)
    monkeypatch.setattr(capture_api, "capture_model", never)
    plan = _plan_file(foreign_graph_file(tmp_path), tmp_path / "p.json")
    r = run_here("execute", "--graph", RESNET, "--plan", plan, "--device", "cpu", "--iters", "1")
    err = r.output.strip().splitlines()
    assert r.exit_code == 1 and len(err) == 1, r.output   # as `hybrid validate` says of a plan for another graph
    assert err[0].startswith("error: plan") and "was made for another graph" in err[0]
    r = run_here("execute", "--model", "resnet-50", "--plan", plan, "--device", "cpu", "--iters", "1")  # capture now
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1, r.output
    assert r.output.startswith("error: the plan was made for graph")



def test_a_plan_of_another_graph_is_said_before_asking_for_the_graphs_module(tmp_path: Path) -> None:
    """A graph that names its Python code (a `--module` capture) and a plan of another graph: the mismatch is the
    error (exit 1), not "add --module", which sent a user to fix the wrong thing first."""
    r = run_here("capture", "--module", "examples.mlp:make", "--out", tmp_path / "mlp.json")
    assert r.exit_code == 0, r.output
    plan = _plan_file(RESNET, tmp_path / "p.json")
    r = run_here("execute", "--graph", tmp_path / "mlp.json", "--plan", plan, "--device", "cpu")
    assert r.exit_code == 1, r.output
    assert "was made for another graph" in r.output and "--module" not in r.output, r.output


def test_execute_on_cuda_without_a_gpu_says_so_at_once(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    plan = _plan_file(RESNET, tmp_path / "p.json")
    r = run_here("execute", "--graph", RESNET, "--plan", plan, "--device", "cuda")
    assert r.exit_code == 2 and "sees no CUDA device" in r.output


def test_host_memory_estimate_counts_what_the_run_allocates() -> None:
    from dataclasses import replace

    from hybrid.swap.baselines import run_baseline
    from executor.preflight import device_pool_bytes, host_bytes_needed
    from hybrid.graph import Graph

    g = Graph.load(RESNET)
    params = sum(t.bytes for t in g.tensors if t.kind == "param")
    plan = run_baseline(g, replace(g.device, memory_bytes=100 << 20, reserve_bytes=0), "belady")
    cpu = host_bytes_needed(g, plan, "cpu", check=False)
    assert cpu >= params + device_pool_bytes(plan) and device_pool_bytes(plan) > 0
    assert host_bytes_needed(g, plan, "cuda", check=True) > host_bytes_needed(g, plan, "cuda", check=False)


FACTORY = '''
import torch, torch.nn as nn, torch.nn.functional as F

def make():
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 32), nn.ReLU(),
                          nn.Dropout(0.2), nn.Linear(32, 4))
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(16, 20, generator=gen)
    y = torch.randint(4, (16,), generator=gen)
    return model, x, y, F.cross_entropy

def not_a_model():
    return 3
'''


def test_capture_plan_and_execute_a_users_own_module_from_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "mymodel.py").write_text(textwrap.dedent(FACTORY))

    def run(*args: object) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hybrid.cli.main", *map(str, args)], capture_output=True,
                              text=True, timeout=120, cwd=tmp_path)

    r = run("capture", "--module", "mymodel:make", "--optimizer", "adam", "--out", "out/g.json")
    assert r.returncode == 0, r.stderr
    graph = json.loads((tmp_path / "out" / "g.json").read_text())
    assert graph["module"]["spec"] == "mymodel:make"
    info = run("info", "--graph", "out/g.json", "--json")
    peak = json.loads(info.stdout)["unswapped_peak_bytes"]
    r = run("simulate", "--graph", "out/g.json", "--memory", str(int(peak * 0.4)), "--out", "p.json")
    assert r.returncode == 0, r.stderr
    r = run("execute", "--graph", "out/g.json", "--plan", "p.json", "--device", "cpu", "--iters", "1")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr     # a graph file is data
    assert "module spec 'mymodel:make'" in r.stderr and "add --module mymodel:make (or --trust-graph-module)" in r.stderr
    r = run("execute", "--graph", "out/g.json", "--plan", "p.json", "--device", "cpu", "--iters", "3", "--check",
            "--module", "mymodel:make", "--out", "res/m.json", "--trace", "traces/run.json")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "equal eager training bitwise" in r.stdout
    assert "iteration 3/3" in r.stderr                      # progress, one line per iteration in a log
    assert json.loads((tmp_path / "res" / "m.json").read_text())["check"]["bitwise"]

    # --trace: the plan as simulated (pid 1) and the last iteration as measured (pid 2), one X event per copy or op
    plan = json.loads((tmp_path / "p.json").read_text())
    n_stream = sum(1 for e in plan["events"] if e["kind"] != "free")
    trace = json.loads((tmp_path / "traces" / "run.json").read_text())["traceEvents"]
    for pid in (1, 2):
        spans = [e for e in trace if e["ph"] == "X" and e["pid"] == pid]
        assert len(spans) == n_stream and all(e["dur"] >= 0 for e in spans)
        assert {e["tid"] for e in spans} <= {1, 2, 3}
    assert {e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "process_name"} == {
        "plan (simulated)", "iteration 3/3 (measured on cpu)"}   # counted as stderr counts: from 1
    # the two processes name and group each event alike, and both start at 0 (a pandas user's review: the
    # measured side wrote "swap_in:w" in category h2d beside the plan's "swap_in w" in swap_in, from 392 us)
    spans = {pid: [e for e in trace if e["ph"] == "X" and e["pid"] == pid] for pid in (1, 2)}
    assert sorted((e["name"], e["cat"]) for e in spans[1]) == sorted((e["name"], e["cat"]) for e in spans[2])
    assert min(e["ts"] for e in spans[2]) == 0.0

    bad = run("capture", "--module", "mymodel:not_a_model", "--out", "x.json")
    assert bad.returncode == 2 and "must be a function of no arguments returning" in bad.stderr
    both = run("capture", "--module", "mymodel:make", "--model", "resnet-18", "--out", "x.json")
    assert both.returncode == 2 and "exactly one of --model" in both.stderr


def test_plans_and_measured_runs_as_chrome_traces(tmp_path: Path) -> None:
    from hybrid.plan import Plan

    plan = tmp_path / "p.json"
    assert hybrid("simulate", "--graph", RESNET, "--memory", "100MiB", "--out", plan).returncode == 0
    r = hybrid("timeline", "--graph", RESNET, "--plan", plan, "--format", "chrome", "--out", tmp_path / "t" / "p.json")
    assert r.stdout.strip() == f"wrote {tmp_path / 't' / 'p.json'}"
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "t" / "p.json").read_text())
    p = Plan.load(plan)
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    stream_events = [e for e in p.events if e.kind != "free"]
    assert len(spans) == len(stream_events)
    for e, x in zip(stream_events, spans):
        assert x["ts"] == pytest.approx(e.start_s * 1e6) and x["dur"] == pytest.approx((e.end_s - e.start_s) * 1e6)
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names == {"compute", "h2d", "d2h"}
    memory = [e["args"]["bytes"] for e in doc["traceEvents"] if e["ph"] == "C"]
    assert max(memory) <= p.device.usable_bytes and max(memory) > 0
    assert doc["displayTimeUnit"] == "ms"
    lanes = {"compute": 1, "h2d": 2, "d2h": 3}                 # one thread per stream, named
    assert all(x["tid"] == lanes[e.stream] for e, x in zip(stream_events, spans))
    # (a measured run as a trace, from `execute --trace`: test_capture_plan_and_execute_...)
