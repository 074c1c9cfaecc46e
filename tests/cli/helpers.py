"""What the CLI tests share: small graph files (some written as another tool would), and two ways to run `hybrid`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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


def hybrid(*args: object, timeout: float = 300) -> subprocess.CompletedProcess:
    """`hybrid ARGS` as a user runs it: a fresh process, so exit statuses and stderr are the real ones."""
    return subprocess.run([sys.executable, "-m", "hybrid.cli.main", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
