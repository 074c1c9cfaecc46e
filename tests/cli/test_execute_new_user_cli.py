"""`hybrid execute` on what a new user's review found: another --module than the graph records (warned), a module
edited since the capture (refused in one line), an invalid plan (exit 1, as validate), the pool's peak as the plan
counts it beside the bytes outside the pool, the sanitizer's line, the trace's iteration counted as stderr counts."""
from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.helpers import run as run_here

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

FACTORY = '''
import torch, torch.nn as nn, torch.nn.functional as F

class Net(nn.Module):
    def __init__(self, act=F.relu, extra=False):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1); self.b1 = nn.BatchNorm2d(8); self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(8, 5); self.act = act
        if extra:
            self.fc2 = nn.Linear(5, 5)
    def forward(self, x):
        h = self.fc(self.drop(self.act(self.b1(self.c1(x))).mean((2, 3))))
        return self.fc2(h) if hasattr(self, "fc2") else h

def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(4, 3, 8, 8, generator=g), torch.randint(5, (4,), generator=g)

def make():
    return (Net(), *_data(), F.cross_entropy)

def make_tanh():
    return (Net(torch.tanh), *_data(), F.cross_entropy)

def make_extra():
    return (Net(extra=True), *_data(), F.cross_entropy)
'''


@pytest.fixture()
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "nunet.py").write_text(textwrap.dedent(FACTORY))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("nunet", None)      # each test imports its own file (one edits it)
    yield tmp_path
    sys.modules.pop("nunet", None)


def _capture_and_plan() -> tuple[str, str]:
    """nunet:make captured with SGD, and a Belady plan at 70% of its unswapped peak (its own alignment)."""
    from dataclasses import replace

    from hybrid.graph import Graph
    from hybrid.graph.info import graph_alignment, largest_op, unswapped_peak
    from hybrid.swap.baselines import run_baseline

    r = run_here("capture", "--module", "nunet:make", "--optimizer", "sgd", "--out", "g.json")
    assert r.exit_code == 0, r.output
    g = Graph.load("g.json")
    memory = max(largest_op(g, graph_alignment(g))[1] + 4096, int(0.7 * unswapped_peak(g)))
    run_baseline(g, replace(g.device, memory_bytes=memory, reserve_bytes=0), "belady").save("p.json")
    return "g.json", "p.json"


def _execute(factory: str, *flags: str, plan: str = "p.json") -> tuple[int, list[str]]:
    r = run_here("execute", "--graph", "g.json", "--plan", plan, "--module", f"nunet:{factory}", "--device", "cpu",
                 "--iters", "3", *flags)
    return r.exit_code, r.output.strip().splitlines()


def test_another_module_spec_than_the_graph_records_runs_with_a_one_line_warning(here: Path) -> None:
    _capture_and_plan()
    code, lines = _execute("make_tanh")
    assert code == 0, lines
    warn = [ln for ln in lines if ln.startswith("warning:")]
    assert warn == ["warning: --module 'nunet:make_tanh' is not the spec the graph was captured from "
                    "('nunet:make'); running 'nunet:make_tanh' (fine if the factory moved; otherwise this trains "
                    "other code than the plan was made for)"]
    code, lines = _execute("make")                       # the spec the graph records: no warning
    assert code == 0 and not any(ln.startswith("warning:") for ln in lines), lines


def test_a_module_with_a_parameter_the_graph_does_not_bind_is_refused_in_one_line(here: Path) -> None:
    _capture_and_plan()
    code, lines = _execute("make_extra", "--check")
    assert code == 2, lines
    assert lines[-1] == ("error: --module 'nunet:make_extra' does not match the graph: it has a parameter 'fc2.weight' "
                         "(shape [5, 5]) that the graph does not bind; run the module the graph was captured from, or "
                         "capture it again")
    assert len(lines) == 2 and lines[0].startswith("warning: --module 'nunet:make_extra' is not the spec")
    # the same spec, its file edited since the capture: the refusal alone
    (here / "nunet.py").write_text(textwrap.dedent(FACTORY).replace("def make():\n    return (Net(),",
                                                                    "def make():\n    return (Net(extra=True),"))
    sys.modules.pop("nunet", None)
    code, lines = _execute("make", "--check")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("error: --module 'nunet:make' does not match the graph: it has a parameter 'fc2.weight'")


def test_an_invalid_plan_exits_1_naming_its_first_violation_as_validate_does(here: Path) -> None:
    _capture_and_plan()
    doc = json.loads(Path("p.json").read_text())
    doc["makespan_s"] += 1.0
    Path("bad.json").write_text(json.dumps(doc))
    v = run_here("validate", "--graph", "g.json", "--plan", "bad.json")
    assert v.exit_code == 1
    code, lines = _execute("make", plan="bad.json")
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith("error: --plan bad.json is not a valid plan for graph 'nunet.make': rule 7: ")


def test_memory_sanitize_and_trace_lines(here: Path) -> None:
    from hybrid.units import format_bytes

    _capture_and_plan()
    code, lines = _execute("make", "--sanitize", "--out", "r.json", "--trace", "t.json")
    assert code == 0, lines
    doc = json.loads(Path("r.json").read_text())
    s, plan = doc["summary"], json.loads(Path("p.json").read_text())
    # the pool's peak as the plan counts it (aligned), the tensor bytes beside it, and the pool and what was
    # allocated outside it together, named as a sum, in one line, against the plan's usable memory
    mem = next(ln for ln in lines if ln.startswith("  device memory:"))
    align = plan["device"]["alignment_bytes"]
    both, pool = s["peak_with_outside_bytes"], s["pool_peak_occupied_bytes"]
    assert mem.startswith(f"  device memory: pool peak {format_bytes(pool)} as the plan "
                          f"counts it (each copy rounded up to {format_bytes(align)}; "
                          f"{format_bytes(s['memory']['pool']['peak_live_bytes'])} of tensor data), pool and outside "
                          f"allocations together at their peak {format_bytes(both)} ({format_bytes(both - pool)} "
                          f"above the pool's peak) (copy-fallback transient up to "
                          f"{format_bytes(s['transient_peak_bytes'])}), of the plan's "
                          f"{format_bytes(plan['device']['memory_bytes'])} usable (buffer "), mem
    assert s["pool_peak_occupied_bytes"] >= s["memory"]["pool"]["peak_live_bytes"]
    # this graph states no copy workspaces: batch norm's backward allocates beyond the plan's memory
    assert s["peak_with_outside_bytes"] > 1.01 * s["memory"]["plan_memory_bytes"]
    assert any(ln.startswith("  warning: with what it allocated outside the pool this run held") for ln in lines)
    # the sanitizer says what it checked, and --out records it
    issued = sum(1 for e in plan["events"] if e["kind"] != "free")
    assert f"sanitize: 0 races in {3 * issued} nodes checked over 3 iterations" in lines
    assert doc["sanitize"] == {"races": 0, "nodes_checked": 3 * issued, "iterations": 3}
    # the trace counts iterations as the progress lines on stderr do
    assert "iteration 3/3:" in "\n".join(lines)
    trace = json.loads(Path("t.json").read_text())["traceEvents"]
    assert {e["args"]["name"] for e in trace if e["ph"] == "M" and e["name"] == "process_name"} == {
        "plan (simulated)", "iteration 3/3 (measured on cpu)"}
