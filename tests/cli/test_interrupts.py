"""Ctrl-C and SIGTERM in `capture` and `execute`: capture writes nothing, execute writes the iterations it measured;
both say so in one line, exit 128 + the signal's number and leave no process behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from tests.cli.helpers import session_processes  # noqa: E402

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


def _interrupt(cwd: Path, args: list[str], ready, sig: int, err_path: Path) -> tuple[int, str, str]:
    """Start `hybrid ARGS` in its own session, wait until `ready()` holds, send `sig`; (exit status, stdout, stderr)."""
    with open(err_path, "w") as err:
        # SIGINT back to its default in the child: a shell's background job (`cmd &`) inherits it ignored, and
        # Python then installs no Ctrl-C handler, so the test would measure the runner's shell, not the command
        proc = subprocess.Popen([sys.executable, "-m", "hybrid.cli.main", *args], stdout=subprocess.PIPE, stderr=err,
                                text=True, cwd=cwd, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            deadline = time.monotonic() + 300  # hang guards: seconds are typical, more with both cores busy
            while not ready() and time.monotonic() < deadline:
                assert proc.poll() is None, err_path.read_text()
                time.sleep(0.05)
            proc.send_signal(sig)
            out, _ = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    for _ in range(50):
        if not session_processes(proc.pid):
            break
        time.sleep(0.1)
    assert session_processes(proc.pid) == []
    return proc.returncode, out, err_path.read_text()


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    (tmp_path / "mymodel.py").write_text(textwrap.dedent(FACTORIES))
    return tmp_path


@pytest.mark.parametrize("sig, status, name", [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")])
def test_an_interrupted_capture_writes_nothing(folder: Path, sig: int, status: int, name: str) -> None:
    out = folder / "g.json"
    out.write_text("an earlier graph")
    code, stdout, stderr = _interrupt(folder, ["capture", "--module", "mymodel:slow", "--out", "g.json"],
                                      lambda: (folder / "factory-started").exists(), sig, folder / "err.txt")
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
    code, stdout, stderr = _interrupt(
        folder, ["execute", "--graph", "g.json", "--module", "mymodel:make", "--plan", "p.json", "--device", "cpu",
                 "--iters", "100000", "--out", "res/m.json"],
        lambda: "iteration 3/" in err.read_text(), signal.SIGTERM, err)
    assert code == 143, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted (SIGTERM) after ") and last.endswith("wrote the measurements so far to res/m.json")
    doc = json.loads((folder / "res" / "m.json").read_text())
    assert doc["interrupted"] == "SIGTERM" and len(doc["iterations"]) >= 3
    assert len(doc["losses"]) == len(doc["iterations"]) and doc["summary"] is None
    assert "Traceback" not in stderr
