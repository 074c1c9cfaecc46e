"""executor.preflight: a graph's module spec runs only when named or trusted; the host memory check reads the
cgroup's and `ulimit -v`'s limits, not only free memory."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest

from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.plan import Plan
from tests.cli.helpers import RESNET

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from executor import preflight as pf  # noqa: E402
from executor.model import workload  # noqa: E402
from hybrid.cli.main import cli  # noqa: E402

pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]

# What a hostile graph could name (as `os:abort` did): code that leaves a marker when imported or called.
EVIL = '''
import os
open(os.environ["HYBRID_TEST_MARKER"], "a").write("imported\\n")

def make():
    open(os.environ["HYBRID_TEST_MARKER"], "a").write("called\\n")
    raise SystemExit("the graph's code ran")
'''


@pytest.fixture
def evil_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, Path]:
    """A small graph file whose `module.spec` names `hybrid_test_evil:make`, its plan, and the marker's path;
    the current folder (where a spec is imported from) holds the module."""
    from hybrid.swap.baselines import run_baseline

    marker = tmp_path / "marker"
    (tmp_path / "hybrid_test_evil.py").write_text(textwrap.dedent(EVIL))
    monkeypatch.setenv("HYBRID_TEST_MARKER", str(marker))
    monkeypatch.chdir(tmp_path)
    doc = json.loads(RESNET.read_text())
    doc["module"] = {"spec": "hybrid_test_evil:make", "dtype": "fp32"}
    g = tmp_path / "g.json"
    g.write_text(json.dumps(doc))
    graph = Graph.load(g)
    p = tmp_path / "p.json"
    run_baseline(graph, replace(graph.device, memory_bytes=100 << 20, reserve_bytes=0), "belady").save(p)
    yield g, p, marker
    sys.modules.pop("hybrid_test_evil", None)


def test_execute_does_not_run_the_code_a_graph_names(evil_graph: tuple[Path, Path, Path]) -> None:
    g, p, marker = evil_graph
    res = CliRunner().invoke(cli, ["execute", "--graph", str(g), "--plan", str(p), "--device", "cpu"])
    assert res.exit_code == 2, res.output
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: graph {str(g)!r} names Python code to run")
    assert "module spec 'hybrid_test_evil:make'" in lines[0]
    assert lines[0].endswith("add --module hybrid_test_evil:make (or --trust-graph-module)")
    assert not marker.exists() and "hybrid_test_evil" not in sys.modules

    graph, plan = Graph.load(g), Plan.load(p)
    with pytest.raises(pf.UntrustedModuleError, match="trust_module=True") as e:
        pf.preflight(graph, plan, device="cpu")
    assert e.value.spec == "hybrid_test_evil:make"
    with pytest.raises(pf.UntrustedModuleError):
        workload(graph)
    assert not marker.exists()


def test_a_spec_that_is_not_one_is_shown_quoted_on_one_line(evil_graph: tuple[Path, Path, Path]) -> None:
    g, p, marker = evil_graph
    doc = json.loads(g.read_text())
    doc["module"]["spec"] = "os:abort\n\x1b[2Jerror: none"
    g.write_text(json.dumps(doc))
    plan = json.loads(p.read_text())
    plan["graph_sha256"] = Graph.load(g).sha256     # the plan of this file: else its mismatch is said first
    p.write_text(json.dumps(plan))
    res = CliRunner().invoke(cli, ["execute", "--graph", str(g), "--plan", str(p), "--device", "cpu"])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1 and "\x1b" not in res.output
    assert "module spec 'os:abort\\n\\x1b[2Jerror: none'" in res.output
    assert "add --module PKG.MODULE:FACTORY (or --trust-graph-module)" in res.output
    assert pf.well_formed_spec("examples.mlp:make") and not pf.well_formed_spec("a:b c")


def test_a_named_or_trusted_spec_runs(evil_graph: tuple[Path, Path, Path]) -> None:
    g, p, marker = evil_graph
    graph = Graph.load(g)
    assert pf.module_to_run(graph, trust_module=True) == "hybrid_test_evil:make"
    assert pf.module_to_run(graph, module="other:make") == "other:make"     # the caller's own choice
    for flags in (["--trust-graph-module"], ["--module", "hybrid_test_evil:make"]):
        res = CliRunner().invoke(cli, ["execute", "--graph", str(g), "--plan", str(p), "--device", "cpu", *flags])
        assert res.exit_code != 0 and "the graph's code ran" in str(res.exception or res.output)
        assert marker.read_text().splitlines()[-1] == "called"
    # a zoo model asked for by name: the graph's spec is neither run nor in the way
    assert pf.preflight(graph, Plan.load(p), device="cpu", model="resnet-18").module_spec is None


def _cgroup(root: Path, rel: str, files: dict[str, str]) -> None:
    d = root.joinpath(*[x for x in rel.split("/") if x])
    d.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)


def test_cgroup_headroom_v2_takes_the_tightest_group_above(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpu memory\n")
    _cgroup(root, "/a", {"memory.max": str(3 << 30), "memory.current": str(2 << 30),
                         "memory.stat": f"anon 1\ninactive_file {1 << 29}\n"})
    _cgroup(root, "/a/b", {"memory.max": "max\n", "memory.current": str(1 << 30), "memory.stat": ""})
    proc = tmp_path / "cgroup"
    proc.write_text("0::/a/b\n")
    # b has no limit; a allows 3 GiB with 2 GiB used, of which 0.5 GiB reclaimable page cache
    assert pf.cgroup_headroom(proc, root) == (3 << 30) - (2 << 30) + (1 << 29)
    proc.write_text("0::/\n")
    assert pf.cgroup_headroom(proc, root) is None


def test_cgroup_headroom_v1_memory_controller(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    _cgroup(root, "/memory", {"memory.limit_in_bytes": "9223372036854771712\n"})
    _cgroup(root, "/memory/job", {"memory.limit_in_bytes": str(8 << 30), "memory.usage_in_bytes": str(6 << 30),
                                  "memory.stat": f"cache 5\ntotal_inactive_file {1 << 30}\n"})
    proc = tmp_path / "cgroup"
    proc.write_text("9:cpu:/\n4:memory:/job\n0::/\n")
    assert pf.cgroup_headroom(proc, root) == 3 << 30
    proc.write_text("4:cpuacct,memory:/elsewhere/job\n")      # a namespaced path: the mount's own group counts
    assert pf.cgroup_headroom(proc, root) is None
    assert pf.cgroup_headroom(tmp_path / "missing", root) is None


def test_the_smallest_reading_binds_and_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pf, "available_ram", lambda: 20 << 30)
    monkeypatch.setattr(pf, "cgroup_headroom", lambda: 8 << 30)
    monkeypatch.setattr(pf, "rlimit_headroom", lambda: {})
    host = pf.host_memory()
    assert host.available_bytes == 8 << 30 and host.limited_by == "cgroup"
    assert host.readings == {"free": 20 << 30, "cgroup": 8 << 30}
    with pytest.raises(HybridError, match=r"needs about 9 GiB .* but 8 GiB is available \(under the memory "
                                          r"cgroup's limit\); raise the container's memory limit"):
        pf.host_memory_suffices(9 << 30, host, "cuda", check=False)
    pf.host_memory_suffices(8 << 30, host, "cuda", check=False)
    monkeypatch.setattr(pf, "rlimit_headroom", lambda: {"ulimit -v": 5 << 30, "ulimit -d": 6 << 30})
    host = pf.host_memory()
    assert host.available_bytes == 5 << 30 and host.limited_by == "ulimit -v"


def test_execute_under_ulimit_v_refuses_up_front(tmp_path: Path) -> None:
    """`execute` under a low RLIMIT_AS (set in preexec_fn, as `ulimit -v` would): one line naming the limit,
    before the model is built (before: free memory alone was read, and the run died mid-way). The graph is
    ResNet-18's with every tensor 16 times larger, as a larger batch would make it: about 4.5 GiB on the host
    for `--device cpu`, against 2 GiB of address space left."""
    import resource

    from hybrid.swap.baselines import run_baseline

    doc = json.loads(RESNET.read_text())
    for t in doc["tensors"]:
        t["bytes"] *= 16
    graph_file, plan = tmp_path / "big.json", tmp_path / "p.json"
    graph_file.write_text(json.dumps(doc))
    g = Graph.load(graph_file)
    p = run_baseline(g, replace(g.device, memory_bytes=8 << 30, reserve_bytes=0), "belady")
    p.save(plan)
    need = pf.host_bytes_needed(g, p, "cpu", check=False)
    free = pf.available_ram()
    if free is not None and free < need + (1 << 30):
        pytest.skip("this machine's free memory alone refuses the run")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    probe = subprocess.run([sys.executable, "-c", "import torch, hybrid.cli.main, executor; "
                            "print(open('/proc/self/status').read().split('VmSize:')[1].split()[0])"],
                           capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    limit = int(probe.stdout) * 1024 + (2 << 30)
    assert need > 4 << 30

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    r = subprocess.run([sys.executable, "-m", "hybrid.cli.main", "execute", "--graph", str(graph_file), "--plan",
                        str(plan), "--device", "cpu", "--iters", "1"], capture_output=True, text=True, timeout=120,
                       env=env, cwd=ROOT, preexec_fn=low_limit)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1, r.stderr
    assert err[0].startswith("error: this run needs about 4.") and "(ulimit -v)" in err[0], err
    assert "raise `ulimit -v`" in err[0]


def test_the_device_pool_on_the_host_is_what_the_executor_allocates() -> None:
    from hybrid.swap.baselines import run_baseline

    g = Graph.load(RESNET)
    plan = run_baseline(g, replace(g.device, memory_bytes=4 << 30, reserve_bytes=0), "belady")
    assert plan.allocation.kind == "unconstrained"                 # laid out at run time, near its peak
    assert pf.device_pool_bytes(plan) == plan.metrics["peak_bytes"] < plan.device.usable_bytes
    plan.metrics = [1]                                             # a plan's figures are not trusted
    assert pf.device_pool_bytes(plan) == plan.device.usable_bytes


def test_a_tensor_whose_bytes_are_short_of_its_shape_is_refused_before_it_runs(tmp_path: Path) -> None:
    """A hand-edited graph (a parameter's bytes halved) planned, validated and ran: its views overlapped the
    next tensor's bytes and training gave other numbers, exit 0 (a new user's run). The executor refuses it, from
    the CLI's preflight and from the Python API alike; captured graphs pass."""
    from executor.api import Executor
    from hybrid.swap.baselines import run_baseline

    pf.storage_fits(Graph.load(RESNET))
    doc = json.loads(RESNET.read_text())
    t = next(t for t in doc["tensors"] if t["kind"] == "param" and len(t["shape"]) == 4)
    t["bytes"] //= 2
    g = Graph.from_json(doc)
    with pytest.raises(HybridError, match=rf"tensor '{t['id']}': bytes {t['bytes']} is less than its float32 "
                                          rf"\[.*\] \(stride .*\) takes \({2 * t['bytes']} bytes\)"):
        pf.storage_fits(g)
    plan = run_baseline(g, replace(g.device, memory_bytes=200 << 20, reserve_bytes=0), "belady")
    with pytest.raises(HybridError, match="is less than its float32"):
        pf.preflight(g, plan, device="cpu")
    with pytest.raises(HybridError, match="is less than its float32"):
        Executor(g, plan, "cpu")
    for field, value in (("shape", None), ("storage_offset", None), ("storage_offset", -8), ("shape", [-1]),
                         ("stride", [1.5]), ("shape", [2, 3])):   # malformed by hand: one line, not a TypeError
        doc = json.loads(RESNET.read_text())
        doc["tensors"][0][field] = value
        with pytest.raises(HybridError, match=rf"^tensor '{doc['tensors'][0]['id']}': shape .* recapture it"):
            pf.storage_fits(Graph.from_json(doc))
