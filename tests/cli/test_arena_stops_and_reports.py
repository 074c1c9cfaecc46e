"""`hybrid arena` (review 2): Ctrl-C and SIGTERM write the best layout so far; the exact search is loaded from
numba's cache instead of skipped for a compile that does not happen; a time limit that ran out is said so; the
result line credits the heuristic and the exact search each with its own time; the search gets the command's
time left, not the whole limit; CSV messages name the file and line."""
from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hybrid.arena import exact
from hybrid.arena.problem import Buffer, Problem, read_csv, write_csv
from hybrid.arena.validate import check_offsets
from tests.cli.helpers import RESNET, cpu_seconds, run, signal_when


def _challenging(name: str) -> Path:
    from benchmarks.arena import CAPACITY, MEMPLAN

    f = MEMPLAN / "minimalloc-challenging" / f"{name}.{CAPACITY}.csv"
    if not f.exists():
        pytest.skip(f"{f} not present")
    return f


# --- 1: Ctrl-C and SIGTERM keep the best layout ---------------------------------------------------------------

def test_ctrl_c_during_the_exact_search_writes_the_best_layout_so_far(tmp_path: Path) -> None:
    """MiniMalloc's D minimised for 10 minutes: the exact search runs on after the heuristics' 0.3 s. Ctrl-C
    once it runs (3 s of CPU: imports, reading and the heuristics take about half) stops it; the heuristics'
    layout (or a better one) is written, with one plain line. Before: "SystemError: <built-in method _now ...>
    returned a result with an exception set", exit 130, nothing written."""
    f = _challenging("D")
    out = tmp_path / "d.csv"
    status, stdout, stderr = signal_when(["arena", "--csv", str(f), "--time-limit", "10m", "--out", str(out)],
                                        lambda pid, _: cpu_seconds(pid) >= 3.0, signal.SIGINT, tmp_path)
    assert status == 0, stdout + stderr
    assert f"interrupted (Ctrl-C): wrote the best layout so far to {out}" in stderr, stderr
    assert "SystemError" not in stderr and "Traceback" not in stderr, stderr
    assert "exact search" in stdout and "interrupted before it found a smaller arena" in stdout, stdout
    problem, offsets = read_csv(out)
    assert offsets is not None and check_offsets(problem, offsets).valid
    assert problem.peak_live() == read_csv(f)[0].peak_live()


def test_sigterm_while_laying_out_a_plan_writes_the_best_layout_so_far(tmp_path: Path) -> None:
    """resnet18-b32's Belady plan at 64 MiB (re-planned with a little less memory to lay out), then the exact
    search for 10 minutes: SIGTERM during the search writes the plan laid out so far, which validates."""
    plan = tmp_path / "b.json"
    r = run("baseline", "--graph", RESNET, "--kind", "belady", "--memory", "64MiB", "--no-arena", "--out", plan)
    assert r.exit_code == 0, r.output
    out = tmp_path / "laid.json"
    status, stdout, stderr = signal_when(
        ["arena", "--graph", str(RESNET), "--plan", str(plan), "--time-limit", "10m", "--out", str(out)],
        lambda pid, text: "re-planned" in text and cpu_seconds(pid) >= 1.0, signal.SIGTERM, tmp_path)
    assert status == 0, stdout + stderr
    assert f"interrupted (SIGTERM): wrote the best layout so far to {out}" in stderr, stderr
    assert "SystemError" not in stderr and "Traceback" not in stderr, stderr
    assert f"wrote {out}" in stdout
    check = run("validate", "--graph", RESNET, "--plan", out)
    assert check.exit_code == 0 and check.output.startswith("valid:"), check.output


def test_a_stop_ends_the_search_with_its_best_layout() -> None:
    """In a library: `exact.stop()` (what the signal handler calls inside `stop_on_signal`) ends `solve` as if
    its time were up; the result says it was interrupted and is the heuristics' layout or better."""
    f = _challenging("D")
    problem, _ = read_csv(f)
    timer = threading.Timer(1.0, exact.stop)
    with exact.stop_on_signal():
        timer.start()
        try:
            sol = exact.solve(problem, 600.0)      # a hang guard: 10 minutes without the stop
        finally:
            timer.cancel()
        assert exact.stopped()
    assert not exact.stopped()                     # reset on leaving
    assert sol.interrupted and sol.exact_ran and sol.seconds < 600
    assert check_offsets(problem, sol.offsets).valid


def test_a_signal_during_a_decision_search_outside_solve_interrupts_cleanly() -> None:
    """`exact.decide` outside `stop_on_signal` (`hybrid milp` lays out its start through `exact_fit`): a Ctrl-C
    in the search's clock callback broke off the command with "SystemError: <built-in function perf_counter>
    returned a result with an exception set". Now the search stops as if its time were up and the interrupt
    follows as a KeyboardInterrupt; the next search runs as before."""
    import os
    import signal

    f = _challenging("D")
    problem, _ = read_csv(f)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)   # a background run inherits it ignored
    timer = threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT))
    try:
        with pytest.raises(KeyboardInterrupt) as e:
            timer.start()
            exact.decide(problem, problem.peak_live(), time.perf_counter() + 600.0)  # a hang guard
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, before)
    # raised after the search returned, not inside its clock callback (where it could become a SystemError)
    assert not [f for f in e.traceback if f.name in ("_clock", "_now")], e.traceback
    assert not exact.stopped()
    assert exact.decide(problem, problem.peak_live(), float("inf"), node_budget=100).nodes == 100


# --- 2: a cached exact search is loaded, not skipped ------------------------------------------------------------

@pytest.fixture(scope="module")
def belady_plan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("plans") / "b.json"
    r = run("baseline", "--graph", RESNET, "--kind", "belady", "--memory", "64MiB", "--no-arena", "--out", path)
    assert r.exit_code == 0, r.output
    return path


def test_a_cached_exact_search_runs_under_a_short_limit(belady_plan: Path, monkeypatch) -> None:
    """A process whose exact search is not loaded yet, with numba's cache holding it: 10 s are enough (it loads
    in 0.1-0.5 s), so the search runs instead of "skipped: it compiles once per process ... give 25s". Whatever
    ran before in this process (a fresh clone's first test compiles it): compiled and cached first, then seen
    as not loaded."""
    from hybrid.cli.commands import arena as arena_cmd

    exact.warm_up()
    monkeypatch.setattr(exact, "_warmed", False)
    monkeypatch.setattr(arena_cmd, "_exact_cached", lambda: True)
    r = run("arena", "--graph", RESNET, "--plan", belady_plan, "--time-limit", "10s")
    assert r.exit_code == 0, r.output
    assert "skipped" not in r.output and "compil" not in r.output, r.output
    assert "exact search" in r.output, r.output


def test_an_uncached_exact_search_is_skipped_for_its_compile_and_says_so(belady_plan: Path, monkeypatch) -> None:
    from hybrid.cli.commands import arena as arena_cmd

    monkeypatch.setattr(exact, "_warmed", False)
    monkeypatch.setattr(arena_cmd, "_exact_cached", lambda: False)   # a fresh clone: numba's cache is empty
    r = run("arena", "--graph", RESNET, "--plan", belady_plan, "--time-limit", "10s")
    assert r.exit_code == 0, r.output
    assert "exact search skipped: it is not compiled yet" in r.output and "--time-limit" in r.output, r.output


# --- 3: a time limit that ran out is not "give more memory" -------------------------------------------------------

def test_no_time_left_says_time_not_memory(belady_plan: Path) -> None:
    r = run("arena", "--graph", RESNET, "--plan", belady_plan, "--time-limit", "0.01s")   # spent before the layout
    assert r.exit_code == 2, r.output
    assert "time limit ran out" in r.output and "--time-limit" in r.output, r.output
    assert "more memory" not in r.output, r.output


# --- 4: the result line credits each part -------------------------------------------------------------------------

def _gappy() -> Problem:
    """Best fit leaves a gap the exact search closes (tests/arena/test_repair.py's kind): 8 buffers."""
    spans = [(9, 14, 6000), (5, 7, 4000), (2, 5, 8000), (6, 11, 1000), (2, 7, 2000), (4, 7, 7000), (9, 10, 1000),
             (9, 14, 8000)]
    return Problem([Buffer(f"b{k}", lo, hi, size) for k, (lo, hi, size) in enumerate(spans)])


def test_solve_records_the_heuristic_and_the_search_apart() -> None:
    from hybrid.arena.heuristics import LOWEST_FILL_MAX, best_heuristic

    p = _gappy()
    heur = best_heuristic(p, LOWEST_FILL_MAX)
    assert heur.arena_bytes > p.peak_live()
    sol = exact.solve(p, 30.0)
    assert isinstance(sol, exact.Solved) and sol.exact_ran and not sol.interrupted
    assert sol.start_solver == heur.solver and sol.start_s <= sol.seconds and sol.exact_s <= sol.seconds
    assert sol.solver == "exact" and sol.arena_bytes < heur.arena_bytes      # the meaning of `solver` kept
    at_peak = exact.solve(Problem([Buffer("a", 0, 2, 3), Buffer("b", 2, 4, 3)]), 30.0)
    assert not at_peak.exact_ran and at_peak.exact_s == 0.0 and at_peak.proven_optimal


def test_the_result_line_says_what_the_search_did() -> None:
    from hybrid.cli.commands.arena import _verdict

    base = dict(offsets=np.zeros(1, np.int64), arena_bytes=1200, seconds=20.59, lower_bound=1000)
    kept = exact.Solved(solver="greedy-size", proven_optimal=False, start_solver="greedy-size", start_s=0.11,
                        exact_s=20.48, exact_ran=True, **base)
    line = _verdict(1200, 1000, False, 1000, kept.solver, kept.seconds, solved=kept)
    assert "by greedy-size (110 ms); exact search 20.48 s: no smaller arena found" in line, line
    assert "in 20.59 s" not in line
    found = exact.Solved(solver="exact", proven_optimal=False, start_solver="greedy-size", start_s=0.11,
                         exact_s=3.2, exact_ran=True, **base)
    line = _verdict(1200, 1000, False, 1000, found.solver, found.seconds, solved=found)
    assert "the exact search found it in 3.2 s, from greedy-size's layout (110 ms)" in line, line
    line = _verdict(1000, 1000, True, 1000, "greedy-size", 0.11)        # no search: as before
    assert line.endswith("proven optimal; by greedy-size in 110 ms"), line


def test_csv_result_line_credits_the_exact_search(tmp_path: Path) -> None:
    """30 random buffers (seed 0) whose heuristics and repair end above the peak: the search finds it."""
    from tests.arena.instances import random_problem

    f = tmp_path / "g.csv"
    write_csv(f, random_problem(0, 30, 1, False))
    r = run("arena", "--csv", f, "--time-limit", "30s")
    assert r.exit_code == 0, r.output
    assert "the exact search found it in" in r.output and "greedy-size's layout (" in r.output, r.output


# --- 5: the search gets what is left of the command's limit ---------------------------------------------------------

def test_the_csv_search_gets_less_than_the_whole_limit(tmp_path: Path, monkeypatch) -> None:
    """Reading the file, checking and writing come out of --time-limit too (before: the whole limit went to the
    search after the file was read: 10 s took 10.4-10.7 s)."""
    f = tmp_path / "g.csv"
    write_csv(f, _gappy())
    given: list[float] = []
    real = exact.solve

    def spy(problem, time_limit_s=60.0, **kw):  # noqa: ANN001, ANN003, ANN202
        given.append(time_limit_s)
        return real(problem, time_limit_s, **kw)

    monkeypatch.setattr(exact, "solve", spy)
    r = run("arena", "--csv", f, "--time-limit", "20s", "--out", tmp_path / "o.csv")
    assert r.exit_code == 0, r.output
    assert given and 0 < given[0] < 20.0


# --- 6: CSV messages --------------------------------------------------------------------------------------------------

def test_an_empty_lifetime_names_the_file_and_line(tmp_path: Path) -> None:
    f = tmp_path / "c.csv"
    f.write_text("id,lower,upper,size\n0,0,10,100\n1,5,5,100\n")
    r = run("arena", "--csv", f)
    assert r.exit_code == 2, r.output
    assert f"{f}: line 3: buffer '1': lifetime [5, 5) is empty" in r.output, r.output


def test_given_offsets_are_said_to_be_ignored(tmp_path: Path) -> None:
    f = tmp_path / "c.csv"
    f.write_text("id,lower,upper,size,offset\n0,0,10,100,0\n1,0,10,100,50\n")   # overlapping offsets
    r = run("arena", "--csv", f, "--out", tmp_path / "o.csv")
    assert r.exit_code == 0, r.output
    assert r.output.count("offsets are ignored") == 1, r.output
    problem, offsets = read_csv(tmp_path / "o.csv")
    assert offsets is not None and check_offsets(problem, offsets).valid


def test_an_arena_at_the_peak_of_live_bytes_is_proven_optimal_whoever_made_it() -> None:
    """The peak of live bytes bounds every arena: a layout that reaches it is optimal, whatever its record says
    (`hybrid arena --plan` of an unlimited plan said "1.0000, not proven optimal")."""
    from hybrid.cli.commands.arena import _verdict

    assert "proven optimal" in _verdict(1000, 1000, False, 1000, "lay_out", 0.1)
    assert "not proven optimal" not in _verdict(1000, 1000, False, 1000, "lay_out", 0.1)
    assert "not proven optimal" in _verdict(1001, 1000, False, 1000, "lay_out", 0.1)
