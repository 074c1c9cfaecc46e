"""`hybrid milp --json` prints one JSON object on stdout and nothing else: the solver's own output (HiGHS's
banner, written natively to file descriptor 1, which click's CliRunner cannot see) goes to stderr. So these
run real processes."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hybrid.graph.synthetic import training_graph
from tests.cli.helpers import ROOT, hybrid


def test_milp_json_stdout_is_only_json(tmp_path: Path) -> None:
    g = tmp_path / "g.json"
    training_graph(2, seed=1, impls_prob=0.6, workspace_prob=0.3).save(g)
    p = hybrid("milp", "--graph", g, "--memory", "24MiB", "--time-limit", "5s", "--out", tmp_path / "p.json",
               "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)      # the whole of stdout: no banner before the object
    assert d["planner"] == "mosos" and d["milp_refused"] is None
    # how the plan written was laid out, as the text's layout line says (a start re-planned with less memory there
    # read as a broken "never slower than the start": start_makespan_s below makespan_s, nothing saying why)
    assert d["laid_out"] is True and (d["layout"] is None or isinstance(d["layout"], str))   # None: as planned
    assert "HiGHS" in p.stderr    # the solver's banner still shows, on stderr


def test_native_writes_go_to_stderr_inside_the_redirect_only() -> None:
    """Bytes written to descriptor 1 by C code (as HiGHS does, through a block-buffered stdio when it is a pipe)
    inside `solver_output_to_stderr` reach stderr, nested uses included; before and after, stdout is stdout."""
    code = (
        "import ctypes, os, sys\n"
        "from milp.solve import solver_output_to_stderr\n"
        "libc = ctypes.CDLL(None)\n"
        "print('before', flush=True)\n"
        "with solver_output_to_stderr():\n"
        "    libc.printf(b'native banner\\n')\n"
        "    with solver_output_to_stderr():\n"
        "        os.write(1, b'raw write\\n')\n"
        "    print('python print', flush=True)\n"
        "print('after', flush=True)\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["before", "after"]
    for line in ("native banner", "raw write", "python print"):
        assert line in p.stderr
