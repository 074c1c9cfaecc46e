"""What the CLI tests share: small graph files (some written as another tool would), and two ways to run `hybrid`."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from click.testing import CliRunner, Result

from benchmarks.signals import session_processes  # noqa: F401 - one reading of /proc for the tests and the benchmark
from hybrid.cli.main import cli
from hybrid.graph.synthetic import training_graph

ROOT = Path(__file__).resolve().parents[2]
RESNET = ROOT / "examples" / "resnet18-b32.json"


def foreign_graph_file(tmp_path: Path, n_layers: int = 12, seed: int = 4) -> Path:
    """A small training graph written as another tool would write it: other indentation and key order, so its
    bytes (and sha256) differ from the project's own canonical JSON of the same graph."""
    g = training_graph(n_layers, seed=seed, share_params=6)
    path = tmp_path / "foreign.json"
    with open(path, "w") as f:
        json.dump(g.to_json(), f, indent=3, sort_keys=True)
        f.write("\n")
    assert path.read_text() != g.dumps()
    return path


def run(*args: object) -> Result:
    """`hybrid ARGS` in this process (fast); stdout and stderr together in `.output`."""
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def error_line(*args: object) -> str:
    """The one error line of a refused `hybrid ARGS` (exit 2, nothing else printed)."""
    r = run(*args)
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.output
    return lines[0]


def hybrid(*args: object, timeout: float = 300) -> subprocess.CompletedProcess:
    """`hybrid ARGS` as a user runs it: a fresh process, so exit statuses and stderr are the real ones."""
    return subprocess.run([sys.executable, "-m", "hybrid.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used (Linux /proc): a readiness measure that does not depend
    on the machine's load, as wall time does."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds of process `pid` and its live descendants (a solver in a child process: `milp.highs_process`)."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu_seconds(p)
        todo.extend(kids.get(p, []))
    return total


def signal_when(args: list[str], ready: Callable[[int, str], bool], sig: int, tmp: Path, cwd: Path = ROOT,
                stderr_path: Path | None = None, orphans: bool = True) -> tuple[int, str, str]:
    """Run `hybrid ARGS` in its own session (SIGINT at its default: a background job inherits it ignored, and
    Python would then install no Ctrl-C handler), send `sig` once `ready(pid, stdout so far)` holds; (exit status,
    stdout, stderr). `orphans` False: no process of its session may outlive it. Hang guards only: no time is
    asserted."""
    out_path, err_path = tmp / "stdout.txt", stderr_path or tmp / "stderr.txt"
    with open(out_path, "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "hybrid.cli.main", *map(str, args)], stdout=out, stderr=err,
                                text=True, cwd=cwd, start_new_session=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            guard = time.monotonic() + 300   # seconds are typical, more with both cores busy
            while not ready(proc.pid, out_path.read_text()) and time.monotonic() < guard:
                assert proc.poll() is None, out_path.read_text() + err_path.read_text()
                time.sleep(0.05)
            proc.send_signal(sig)
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    for _ in range(50):
        if not session_processes(proc.pid):
            break
        time.sleep(0.1)
    if not orphans:
        assert session_processes(proc.pid) == []
    return proc.returncode, out_path.read_text(), err_path.read_text()
