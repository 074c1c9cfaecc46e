"""The arena solvers against brute force on tiny instances, and always valid on random ones."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.arena import exact
from hybrid.arena.heuristics import HEURISTICS, best_heuristic
from hybrid.arena.problem import Buffer, Problem, read_csv, write_csv
from hybrid.arena.validate import check_offsets

from tests.arena.instances import random_problem

NODES = 10**6   # far more than these tiny instances need (the 25 below take 83 nodes at most)


def _brute_min_arena(p: Problem) -> int:
    """The least arena over every assignment of offsets below sum(size) + n x alignment, all at once."""
    a = p.arrays
    n = len(p)
    total = int(a.size.sum() + a.align.max() * n)     # enough room for any aligned optimum
    grid = np.array(list(itertools.product(range(total), repeat=n)), np.int64)
    ok = np.all(grid % a.align == 0, axis=1)
    for i in range(n):
        for j in range(i + 1, n):
            if a.seg_lo[i] < a.seg_hi[j] and a.seg_lo[j] < a.seg_hi[i]:
                ok &= (grid[:, i] + a.size[i] <= grid[:, j]) | (grid[:, j] + a.size[j] <= grid[:, i])
    return int((grid[ok] + a.size).max(axis=1).min())


def _random_problem(rng: np.random.Generator, n: int, max_size: int, horizon: int, align: int = 1) -> Problem:
    bufs = []
    for k in range(n):
        lo = int(rng.integers(0, horizon - 1))
        hi = int(rng.integers(lo + 1, horizon + 1))
        bufs.append(Buffer(str(k), lo, hi, int(rng.integers(1, max_size + 1)), align))
    return Problem(bufs)


@pytest.mark.parametrize("seed", range(25))
def test_exact_matches_brute_force_on_tiny_instances(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = _random_problem(rng, int(rng.integers(2, 6)), 3, 6, align=int(rng.choice([1, 1, 2])))
    best = _brute_min_arena(p)
    # a node budget, no time limit: the answer depends on the work done, never on the machine's load
    s = exact.solve(p, None, node_budget=NODES)
    assert check_offsets(p, s.offsets).valid
    assert s.arena_bytes == best
    assert s.proven_optimal
    below = exact.solve(p, None, capacity=best - 1, first_fit=True, node_budget=NODES)
    assert below.arena_bytes > best - 1 and below.lower_bound == best     # proven: nothing fits below


def test_a_gap_in_the_peak_is_found_and_proven() -> None:
    """Peak live 4, but these four buffers cannot avoid a hole: the optimum is 5 and the search proves it."""
    p = Problem([Buffer("a", 0, 2, 2), Buffer("b", 1, 3, 2), Buffer("c", 2, 4, 2), Buffer("d", 0, 4, 1),
                 Buffer("e", 0, 1, 1)])
    assert p.peak_live() == 5
    q = Problem([Buffer("a", 0, 2, 2), Buffer("b", 1, 4, 2), Buffer("c", 2, 5, 2), Buffer("d", 3, 6, 2)])
    best = _brute_min_arena(q)
    s = exact.solve(q, None, node_budget=NODES)
    assert s.arena_bytes == best and s.proven_optimal
    assert s.arena_bytes >= q.peak_live()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 40), st.sampled_from([1, 4, 512]), st.booleans())
def test_every_solver_is_valid_on_random_instances(seed: int, n: int, align: int, gaps: bool) -> None:
    p = random_problem(seed, n, align, gaps)
    lb = p.peak_live()
    arenas = {}
    for name, h in HEURISTICS.items():
        s = h(p)
        chk = check_offsets(p, s.offsets)
        assert chk.valid, (name, chk.problems)
        assert s.arena_bytes >= lb
        arenas[name] = s.arena_bytes
    s = exact.solve(p, 0.5)   # the best heuristic at least, within any limit
    assert check_offsets(p, s.offsets).valid
    assert lb <= s.arena_bytes <= min(arenas.values())


def test_validator_finds_an_overlap_and_accepts_touching_lifetimes() -> None:
    p = Problem([Buffer("a", 0, 4, 10), Buffer("b", 3, 6, 10), Buffer("c", 4, 8, 10)])
    assert not check_offsets(p, np.array([0, 5, 20])).valid          # a and b share time 3 and bytes 5..10
    assert check_offsets(p, np.array([0, 10, 0])).valid               # a ends at 4 where c starts: half-open
    bad = check_offsets(p, np.array([0, 10, 5]))
    assert not bad.valid and "'b'" in bad.problems[0] and "'c'" in bad.problems[0]
    assert not check_offsets(p, np.array([0, 10, 0]), capacity=19).valid
    q = Problem([Buffer("a", 0, 2, 8, alignment=4)])
    assert not check_offsets(q, np.array([2])).valid


@pytest.mark.timeout(300)    # a hang guard (a second or so is typical), not a speed test
def test_validator_scales_to_the_largest_real_network() -> None:
    """n = 18,700 buffers: one sweep, a second or so (a quadratic check would take minutes in Python)."""
    rng = np.random.default_rng(0)
    n = 18700
    lo = rng.integers(0, 20000, n)
    p = Problem([Buffer(str(k), int(lo[k]), int(lo[k]) + int(rng.integers(1, 50)), 1 + int(rng.integers(0, 9)))
                 for k in range(n)])
    s = HEURISTICS["greedy-size"](p)
    assert check_offsets(p, s.offsets).valid


def test_csv_round_trip_keeps_offsets(tmp_path) -> None:
    rng = np.random.default_rng(3)
    p = _random_problem(rng, 12, 100, 20)
    s = best_heuristic(p)
    f = tmp_path / "x.csv"
    write_csv(f, p, s.offsets)
    q, off = read_csv(f)
    assert [b.id for b in q.buffers] == [b.id for b in p.buffers] and off is not None
    assert (off == s.offsets).all() and q.peak_live() == p.peak_live()


@pytest.mark.parametrize("seed", range(6))
def test_cpsat_model_agrees_with_brute_force(seed: int) -> None:
    from hybrid.arena.cpsat import decide_cpsat

    rng = np.random.default_rng(100 + seed)
    p = _random_problem(rng, int(rng.integers(2, 5)), 3, 6, align=int(rng.choice([1, 2])))
    best = _brute_min_arena(p)
    found = decide_cpsat(p, best, 20.0)
    assert found.status == exact.FOUND and found.offsets is not None
    assert check_offsets(p, found.offsets, capacity=best).valid
    assert decide_cpsat(p, best - 1, 20.0).status == exact.INFEASIBLE


@pytest.mark.parametrize("seed", range(4))
def test_node_budget_makes_the_search_repeatable(seed: int) -> None:
    """With a node budget and no clock, two runs give the same offsets; the budget is never overspent and
    a budget too small to finish is reported as such (not as infeasible)."""
    rng = np.random.default_rng(200 + seed)
    p = _random_problem(rng, 30, 50, 25, align=int(rng.choice([1, 4])))
    a = exact.solve(p, None, node_budget=500)
    b = exact.solve(p, None, node_budget=500)
    assert check_offsets(p, a.offsets).valid
    assert (a.offsets == b.offsets).all() and a.arena_bytes == b.arena_bytes and a.nodes == b.nodes
    assert a.nodes <= 500
    assert a.arena_bytes <= best_heuristic(p).arena_bytes
    lb = p.peak_live()
    out = exact.decide(p, lb, float("inf"), node_budget=1)
    assert out.nodes <= 1 and out.status in (exact.FOUND, exact.TIMEOUT, exact.INFEASIBLE)


def test_node_budget_runs_out_on_a_hard_instance() -> None:
    """MiniMalloc's B (170 buffers) needs over a million nodes at 1,048,576: 1,000 nodes end in TIMEOUT."""
    from benchmarks.arena import CAPACITY, MEMPLAN

    f = MEMPLAN / "minimalloc-challenging" / f"B.{CAPACITY}.csv"
    if not f.exists():
        pytest.skip(f"{f} not present")
    p, _ = read_csv(f)
    out = exact.decide(p, CAPACITY, float("inf"), node_budget=1000)
    assert out.status == exact.TIMEOUT and out.offsets is None and out.nodes == 1000


def test_exact_solve_needs_a_limit() -> None:
    with pytest.raises(ValueError, match="time limit or a node budget"):
        exact.solve(Problem([Buffer("a", 0, 1, 1)]), None)


def test_cpsat_deterministic_time_gives_the_same_answer() -> None:
    from hybrid.arena.cpsat import decide_cpsat

    rng = np.random.default_rng(7)
    p = _random_problem(rng, 12, 20, 10)
    cap = best_heuristic(p).arena_bytes
    a = decide_cpsat(p, cap, None, deterministic_time=2.0, seed=0)
    b = decide_cpsat(p, cap, None, deterministic_time=2.0, seed=0)
    assert a.status == b.status == exact.FOUND and a.offsets is not None and b.offsets is not None
    assert (a.offsets == b.offsets).all() and a.nodes == b.nodes
    assert check_offsets(p, a.offsets, capacity=cap).valid
