"""`hybrid execute --module` on what a review found: an inference graph's --check, a loss the factory ties to its
module (rebuilt for the reference), a meta module, a module returned in another mode than captured."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.cli.helpers import run as run_here

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

FACTORY = '''
import torch, torch.nn as nn, torch.nn.functional as F

class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1); self.b1 = nn.BatchNorm2d(8); self.fc = nn.Linear(8, 5)
    def forward(self, x):
        return self.fc(F.relu(self.b1(self.c1(x))).mean((2, 3)))

def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(4, 3, 8, 8, generator=g), torch.randint(5, (4,), generator=g)

def make_cnn():
    return (CNN(), *_data(), F.cross_entropy)

def make_cnn_eval():
    m, x, y, l = make_cnn()
    return m.eval(), x, y, l

MODEL = {}

def make_global_loss():
    # the loss reads the module through a global: a copy of the module cannot rebind it, the factory can
    m, x, y, _ = make_cnn()
    MODEL["m"] = m
    def loss(o, t):
        return F.cross_entropy(o, t) + 1e-2 * sum(p.pow(2).sum() for p in MODEL["m"].parameters())
    return m, x, y, loss

def make_meta():
    with torch.device("meta"):
        m = CNN()
    return (m, *_data(), F.cross_entropy)
'''


@pytest.fixture()
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "revmods.py").write_text(textwrap.dedent(FACTORY))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _capture_and_plan(name: str, *flags: str) -> tuple[str, str]:
    from dataclasses import replace

    from hybrid.graph import Graph
    from hybrid.graph.info import graph_alignment, largest_op, unswapped_peak
    from hybrid.swap.baselines import run_baseline

    graph, plan = f"g_{name}{'_'.join(flags)}.json", f"p_{name}{'_'.join(flags)}.json"
    r = run_here("capture", "--module", f"revmods:make_{name}", *flags, "--out", graph)
    assert r.exit_code == 0, r.output
    g = Graph.load(graph)
    memory = max(largest_op(g, graph_alignment(g))[1] + 4096, int(0.6 * unswapped_peak(g)))
    run_baseline(g, replace(g.device, memory_bytes=memory, reserve_bytes=0), "belady").save(plan)
    return graph, plan


def _execute(graph: str, plan: str, name: str, *flags: str) -> tuple[int, list[str]]:
    r = run_here("execute", "--graph", graph, "--plan", plan, "--module", f"revmods:make_{name}", "--device", "cpu",
                 "--iters", "2", *flags)
    return r.exit_code, r.output.strip().splitlines()


@pytest.mark.parametrize("name", ["cnn", "cnn_eval"])
def test_check_of_an_inference_graph_compares_outputs_and_buffers(here: Path, name: str) -> None:
    graph, plan = _capture_and_plan(name, "--optimizer", "none")
    code, lines = _execute(graph, plan, name, "--check")
    assert code == 0, lines
    # 2 iterations' outputs, 6 parameters, 3 buffers
    assert lines[-1] == "check: 11 values (outputs, parameters, buffers) equal eager inference bitwise"


def test_a_module_returned_in_another_mode_than_captured_is_refused_in_one_line(here: Path) -> None:
    graph, plan = _capture_and_plan("cnn")
    code, lines = _execute(graph, plan, "cnn_eval", "--check")
    # another factory than the graph records: warned (it may have moved), then the one-line refusal
    assert code == 2 and len(lines) == 2, lines
    assert lines[0].startswith("warning: --module 'revmods:make_cnn_eval' is not the spec the graph was captured "
                               "from ('revmods:make_cnn')")
    assert lines[1] == ("error: graph captured with batch norm 'b1' in training mode; the module given has it in "
                        "eval mode: return the module in the mode it was captured in (.train())")


def test_the_reference_of_a_loss_tied_to_its_module_is_built_by_the_factory_again(here: Path) -> None:
    graph, plan = _capture_and_plan("global_loss")
    code, lines = _execute(graph, plan, "global_loss", "--check")
    assert code == 0, lines
    assert lines[-1].startswith("check: ") and lines[-1].endswith("equal eager training bitwise")


def test_a_meta_module_is_refused_naming_the_parameter(here: Path) -> None:
    graph, plan = _capture_and_plan("meta")
    code, lines = _execute(graph, plan, "meta")
    assert code == 2 and len(lines) == 1, lines
    assert lines[0] == ("error: parameter 'c1.weight' is on the meta device and has no data: executing a graph needs "
                        "real weights (build the module on cpu or cuda, or load a checkpoint into it)")


LIST_FACTORY = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class ListIn(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, xs):
        return sum(self.fc(x) for x in xs)


def make():
    g = torch.Generator().manual_seed(3)
    return ListIn(), [torch.randn(2, 4, generator=g) for _ in range(3)], torch.randn(2, 4, generator=g), F.mse_loss
'''


def test_a_list_of_inputs_is_one_input_as_capture_reads_it(tmp_path, monkeypatch) -> None:
    """A factory's list was spread into positional inputs by the CLI (`ListIn.forward() takes 2 positional
    arguments but 4 were given`) where capture() passes it whole and eager calls module(xs) (helper-129); only a
    tuple is the positional inputs, as the help says."""
    (tmp_path / "listmods.py").write_text(LIST_FACTORY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    r = run_here("capture", "--module", "listmods:make", "--out", "g.json")
    assert r.exit_code == 0, r.output
    r = run_here("simulate", "--graph", "g.json", "--memory", "1GiB", "--out", "p.json")
    assert r.exit_code == 0, r.output
    r = run_here("execute", "--graph", "g.json", "--plan", "p.json", "--module", "listmods:make", "--device", "cpu",
                 "--check", "--iters", "2")
    assert r.exit_code == 0 and "equal eager training bitwise" in r.output, r.output
