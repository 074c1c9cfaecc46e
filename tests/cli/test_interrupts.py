"""Ctrl-C and SIGTERM in `capture` and `execute`: capture writes nothing, execute writes the iterations it measured;
both say so in one line, exit 128 + the signal's number and leave no process behind."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.cli.helpers import signal_when  # noqa: E402

pytestmark = pytest.mark.torch

FACTORIES = '''
import os, time
import torch, torch.nn as nn, torch.nn.functional as F

def make():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 2))
    gen = torch.Generator().manual_seed(1)
    return {"module": model, "inputs": torch.randn(4, 8, generator=gen), "target": torch.randint(2, (4,), generator=gen),
            "loss_fn": F.cross_entropy}

def slow():
    open("factory-started", "w").close()
    time.sleep(60)
    return make()
'''


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "mymodel.py").write_text(textwrap.dedent(FACTORIES))
    return tmp_path


@pytest.mark.parametrize("sig, status, name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_an_interrupted_capture_writes_nothing(folder: Path, sig: int, status: int, name: str) -> None:
    out = folder / "g.json"
    out.write_text("an earlier graph")
    code, stdout, stderr = signal_when(["capture", "--module", "mymodel:slow", "--out", "g.json"],
                                       lambda _pid, _out: (folder / "factory-started").exists(), sig, folder,
                                       cwd=folder, stderr_path=folder / "err.txt", orphans=False)
    assert code == status, stderr
    assert stderr.strip() == f"interrupted ({name}) while capturing: nothing written to g.json"
    assert out.read_text() == "an earlier graph"                       # neither truncated nor replaced
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith(".")) == []   # no temporary file left


def test_sigterm_during_execute_writes_the_iterations_measured_so_far(folder: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hybrid.cli.main", *args], capture_output=True, text=True,
                              timeout=300, cwd=folder)

    assert run("capture", "--module", "mymodel:make", "--out", "g.json").returncode == 0
    assert run("baseline", "--graph", "g.json", "--kind", "belady", "--memory", "1MiB", "--out", "p.json").returncode == 0
    err = folder / "err.txt"
    code, stdout, stderr = signal_when(
        ["execute", "--graph", "g.json", "--module", "mymodel:make", "--plan", "p.json", "--device", "cpu",
         "--iters", "100000", "--out", "res/m.json"],
        lambda _pid, _out: "iteration 3/" in err.read_text(), signal.SIGTERM, folder, cwd=folder, stderr_path=err,
        orphans=False)
    assert code == 143, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted (SIGTERM) after ") and last.endswith("wrote the measurements so far to res/m.json")
    doc = json.loads((folder / "res" / "m.json").read_text())
    assert doc["interrupted"] == "SIGTERM" and len(doc["iterations"]) >= 3
    assert len(doc["losses"]) == len(doc["iterations"]) and doc["summary"] is None
    assert "Traceback" not in stderr


def test_a_command_stopped_with_nothing_to_say_says_what_it_wrote(tmp_path, monkeypatch) -> None:
    """Without a Ctrl-C line of its own, a command said only "interrupted (Ctrl-C)": whether anything was written
    was for the user to find out (helper-128: `hybrid milp` stopped before its start plan)."""
    import hybrid.cli.commands.baseline as baseline
    from hybrid.graph.synthetic import training_graph
    from tests.cli.helpers import run

    real, calls = baseline.run_baseline, []

    def second_interrupted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(baseline, "run_baseline", second_interrupted)
    g = tmp_path / "g.json"
    training_graph(4, seed=1).save(g)
    r = run("baseline", "--graph", g, "--kind", "belady", "--kind", "naive", "--memory", "90%", "--out", tmp_path / "b")
    assert r.exit_code == 130 and r.output.strip().splitlines()[-1] == \
        f"interrupted (Ctrl-C): wrote {tmp_path / 'b' / 'belady.json'} before it", r.output
    calls.clear()
    calls.append(1)    # the first call is the interrupted one now
    r = run("baseline", "--graph", g, "--kind", "belady", "--memory", "90%", "--out", tmp_path / "c.json")
    assert r.exit_code == 130 and r.output.strip().splitlines()[-1] == "interrupted (Ctrl-C): nothing written"
