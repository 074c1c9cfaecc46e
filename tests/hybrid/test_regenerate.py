"""The regenerate command knows every table under results/, and each job's script exists."""
from __future__ import annotations

import importlib.util
import subprocess
import sys

from benchmarks.common import ROOT
from benchmarks.regenerate import JOBS


def test_every_job_names_a_script_that_exists() -> None:
    for job in JOBS:
        assert importlib.util.find_spec(job.module) is not None, job.module
    assert len({j.name for j in JOBS}) == len(JOBS)


def test_every_table_under_results_is_rebuilt_by_some_job() -> None:
    made = {out for j in JOBS for out in j.outputs + j.quick_outputs} | {"regenerate.md"}
    tables = {p.name for p in (ROOT / "results").glob("*.md")} | {p.name for p in (ROOT / "results").glob("*.png")}
    orphans = sorted(tables - made)
    assert not orphans, f"tables no job regenerates (stale once the code moves): {orphans}"


def test_unknown_job_is_a_one_line_error() -> None:
    r = subprocess.run([sys.executable, "-m", "benchmarks.regenerate", "--only", "nosuchjob", "--list"], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode != 0
    assert "nosuchjob" in r.stderr and "jobs are" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_list_prints_each_job_with_its_command() -> None:
    r = subprocess.run([sys.executable, "-m", "benchmarks.regenerate", "--list", "--quick"], cwd=ROOT,
                       capture_output=True, text=True, check=True)
    lines = r.stdout.strip().splitlines()
    assert len(lines) == len(JOBS)
    assert all(line.split()[1] == "-m" for line in lines)
