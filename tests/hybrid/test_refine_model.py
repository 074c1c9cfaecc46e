"""The CP-SAT window model against brute-force enumeration, on tiny windows."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from hybrid.refine.model import SolveOptions, WindowModel, solve_window
from hybrid.plan.events import COMPUTE, FREE, SWAP_IN, SWAP_OUT
from hybrid.refine.window import (Pair, Precedence, Reservoir, WindowSpec, WNode, greedy_starts, violations)

KINDS = (COMPUTE, SWAP_IN, SWAP_OUT, FREE)


def random_spec(seed: int, n: int = 5, horizon: int = 7) -> WindowSpec:
    """A tiny window: a compute chain, copies on both streams, one memory reservoir, maybe an optional pair."""
    rng = np.random.default_rng(seed)
    kinds = [COMPUTE] + [KINDS[int(k)] for k in rng.integers(0, 4, size=n - 1)]
    nodes = []
    for i, k in enumerate(kinds):
        dur = 0 if k == FREE else int(rng.integers(1, 3))
        nodes.append(WNode(i, k, i, dur, int(rng.integers(0, 2)), 0))
    precs = []
    for j in range(n):
        for i in range(j):
            if rng.random() < 0.25:
                precs.append(Precedence(i, j))
    comp = [i for i, k in enumerate(kinds) if k == COMPUTE]
    precs += [Precedence(a, b) for a, b in zip(comp, comp[1:])]
    pairs = []
    rel = [i for i, k in enumerate(kinds) if k in (SWAP_OUT, FREE)]
    lds = [i for i, k in enumerate(kinds) if k == SWAP_IN]
    if rel and lds and rng.random() < 0.7:
        r, ld = rel[0], lds[-1]
        pairs.append(Pair(99, r, ld, bool(rng.random() < 0.5)))
        nodes[r].pair = nodes[ld].pair = 0
        precs.append(Precedence(r, ld))
    res = Reservoir(0, 1, int(rng.integers(0, 3)), [(int(rng.integers(1, horizon)), 1)] if rng.random() < 0.5 else [])
    for i, nd in enumerate(nodes):
        if nd.kind in (COMPUTE, SWAP_IN) and rng.random() < 0.8:
            nd.mem.append((0, -1, False))
        elif nd.kind in (SWAP_OUT, FREE):
            nd.mem.append((0, 1, True))
    return WindowSpec(0, 1, 0, n, 0.0, 1.0, horizon, nodes, precs, pairs, [res], comp, (0, 0, 0))


def brute_force(spec: WindowSpec) -> tuple[int, int] | None:
    """Lexicographic optimum (last compute end, sum of node ends) over every integer timetable, or None.

    Enumerates every start time of every node (predecessors first, so a start below a present
    predecessor's end is skipped as it could never be feasible) and every presence of the optional
    pairs; memory and stream overlaps are checked on complete timetables by `violations`.
    """
    n = len(spec.nodes)
    preds = [[p.before for p in spec.precedences if p.after == j] for j in range(n)]
    order: list[int] = []
    while len(order) < n:  # a topological order of the precedences
        order += [j for j in range(n) if j not in order and all(q in order for q in preds[j])]
    best = None
    for present in itertools.product([False, True], repeat=len(spec.pairs)):
        on = [nd.pair < 0 or present[nd.pair] for nd in spec.nodes]
        starts = [0] * n

        def rec(k: int) -> None:
            nonlocal best
            if k == n:
                if violations(spec, starts, list(present)):
                    return
                last = starts[spec.last_compute] + spec.nodes[spec.last_compute].dur
                total = sum(starts[i] + spec.nodes[i].dur for i in range(n))
                if best is None or (last, total) < best:
                    best = (last, total)
                return
            j = order[k]
            lo = spec.nodes[j].lb
            if on[j]:
                lo = max([lo] + [starts[q] + spec.nodes[q].dur for q in preds[j] if on[q]])
            for s in range(lo, spec.horizon + 1):
                starts[j] = s
                rec(k + 1)

        rec(0)
    return best


@pytest.mark.parametrize("seed", range(10))
def test_cpsat_optimum_equals_brute_force_on_tiny_windows(seed):
    spec = random_spec(seed)
    expect = brute_force(spec)
    sol = solve_window(spec, SolveOptions(time_s=5.0, seed=1))
    if expect is None:
        assert sol.status == "infeasible"
        return
    assert sol.status == "optimal" and sol.proved
    assert (sol.last_end, sol.total_end) == expect
    assert violations(spec, sol.starts, sol.present) == []


def test_greedy_hint_is_feasible_when_the_current_order_is():
    for seed in range(30):
        spec = random_spec(seed)
        starts = greedy_starts(spec)
        if starts is not None:
            assert violations(spec, starts, [p.current for p in spec.pairs]) == []


def test_infeasible_window_reports_infeasible():
    spec = random_spec(3)
    spec.reservoirs[0].initial = -1  # the frozen boundary already overflows the pool
    spec.reservoirs[0].fixed = []
    sol = WindowModel(spec).solve(SolveOptions(time_s=2.0))
    assert sol.status == "infeasible" and not sol.ok


def test_cpsat_matches_brute_force_on_the_paper_example_windows():
    """Windows of one op of the paper's Figure 1 plan, in whole time units (one tick = one unit)."""
    from hybrid.swap.pools import class_pool
    from hybrid.graph.liveness import distinct_sizes
    from hybrid.swap.rewalk import Problem, rebuild
    from hybrid.refine.window import TensorEvents, WindowOptions, build_window
    from hybrid.graph.order import program_order
    from hybrid.swap.augmented import PlannerOptions
    from hybrid.swap.planner import SwapPlanner

    from .paper_examples import figure1

    g = figure1("right")
    pool = class_pool(g, np.array([0, 1, 1]), np.array([6, 5]), distinct_sizes(g), align=g.device.alignment_bytes)  # the coarse pool: 5 x 2 MB
    aug = SwapPlanner(g, g.device).plan(program_order(g), pool, PlannerOptions(passes=1))
    prob = Problem.from_augmented(aug)
    tl = rebuild(prob, aug.kind, aug.ref)
    ev = TensorEvents(prob, tl)
    checked = 0
    for p0 in range(len(prob.schedule)):
        spec = build_window(prob, tl, ev, p0, p0 + 1, WindowOptions(tick=1.0, candidates=2))
        if spec is None or len(spec.nodes) > 6:
            continue
        sol = solve_window(spec, SolveOptions(time_s=5.0))
        assert sol.status == "optimal"
        assert (sol.last_end, sol.total_end) == brute_force(spec)
        checked += 1
    assert checked >= 5
