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
    made = {out for j in JOBS for out in j.outputs + j.written(quick=True)} | {"regenerate.md", "regenerate_quick.md"}
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


def test_compare_runs_tells_timings_from_figures() -> None:
    import pandas as pd

    from benchmarks.compare_runs import compare_table

    a = pd.DataFrame({"graph": ["g", "h"], "makespan_s": [1.0, 2.0], "solve_s": [0.5, 0.7]})
    b = a.assign(solve_s=[0.9, 0.1])
    assert compare_table(a, b, "t") == ([], ["solve_s (row 0: np.float64(0.5) against np.float64(0.9))"])
    moved, _ = compare_table(a, b.assign(makespan_s=[1.0, 2.5]), "t")
    assert moved and moved[0].startswith("makespan_s (row 1")
    c = pd.DataFrame({"costs": ["roofline", "measured here"], "exact_ms": [1.0, 2.0]})
    assert compare_table(c, c.assign(exact_ms=[1.0, 3.0]), "placement_latency")[0] == []
    assert compare_table(c, c.assign(exact_ms=[1.5, 2.0]), "placement_latency")[0]


def test_every_job_states_its_full_run_time() -> None:
    from benchmarks.regenerate import FULL_MINUTES

    assert {j.name for j in JOBS} == set(FULL_MINUTES)


def test_side_by_side_jobs_wait_for_what_they_read_and_measuring_jobs_run_alone() -> None:
    from benchmarks.regenerate import Job, ready

    a, b = Job("a", "m", (), (), ()), Job("b", "m", (), (), (), after=("a",))
    c, m = Job("c", "m", (), (), ()), Job("m", "m", (), (), (), alone=True)
    names = {"a", "b", "c", "m"}
    assert ready([a, b, c, m], {}, names, 2) == [a, c]           # b reads a's output; two slots
    assert ready([b, m], {"a": (a,), "c": (c,)}, names, 2) == []  # full
    assert ready([b, m], {"a": (a,)}, names, 2) == []              # b waits for a; m for an empty machine
    assert ready([b, m], {"c": (c,)}, names, 2) == [b]             # a done: b goes beside c; m waits
    assert ready([b, m], {}, names, 2) == [b]                      # m never starts beside another job
    assert ready([m], {}, names, 2) == [m]
    assert ready([c], {"m": (m,)}, names, 2) == []                 # nothing beside a measuring job
