"""SIGTERM (timeout, Slurm, Kubernetes) behaves like Ctrl-C: the best plan so far is written, children exit."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.helpers import RESNET, ROOT, hybrid, session_processes


@pytest.mark.parametrize("flags, whole_group", [
    (["--refine-mode", "beside"], False),             # kill PID: the search and the CP-SAT refiner beside it
    (["--workers", "2", "--refine", "none"], True),   # kill -TERM -PGID, as timeout and Slurm do: a process pool
])
def test_sigterm_writes_the_best_plan_so_far_and_leaves_nothing_behind(tmp_path, flags, whole_group) -> None:
    out = tmp_path / "plan.json"
    err_path = tmp_path / "stderr.txt"
    cmd = [sys.executable, "-m", "hybrid.cli.main", "optimize", "--graph", str(RESNET), "--memory", "64MiB",
           "--time-limit", "10m", "--population", "16", "--out", str(out), *flags]
    with open(err_path, "w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT, start_new_session=True)
        try:
            deadline = time.monotonic() + 300  # a hang guard: the first generation comes in seconds
            while "gen " not in err_path.read_text() and time.monotonic() < deadline:  # the search is running
                assert proc.poll() is None, err_path.read_text()
                time.sleep(0.1)
            time.sleep(1.0)
            if whole_group:
                os.killpg(proc.pid, signal.SIGTERM)
            else:
                proc.send_signal(signal.SIGTERM)
            # a hang guard, not a speed test (seconds unloaded; several times that with both cores busy)
            stdout, _ = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    for _ in range(50):  # the resource tracker exits right after the main process
        if not session_processes(proc.pid):
            break
        time.sleep(0.1)
    stderr = err_path.read_text()
    assert proc.returncode == 0, stderr
    assert "stopped: interrupted" in stdout and f"wrote {out}" in stdout
    assert f"interrupted (SIGTERM): wrote the best plan so far to {out}" in stderr
    # said when the search stops, not seconds later with the summary (a large graph's check and layout take 5 s)
    ack = "SIGTERM: the search stopped; checking and writing its best plan so far (a few seconds)"
    assert ack in stderr and stderr.index(ack) < stderr.index("interrupted (SIGTERM): wrote"), stderr
    assert "Traceback" not in stderr and "leaked" not in stderr
    assert session_processes(proc.pid) == []
    check = hybrid("validate", "--graph", RESNET, "--plan", out)
    assert check.returncode == 0 and check.stdout.startswith("valid:"), check.stdout + check.stderr
