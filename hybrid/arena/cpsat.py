"""The alternative exact model: CP-SAT with a no-overlap-2D constraint (time fixed, offsets free).

Kept to measure against the MiniMalloc search (results/arena_cpsat.md), which wins on the challenging set;
`solve` does not use it.
"""
from __future__ import annotations

import numpy as np
from ortools.sat.python import cp_model

from hybrid.arena.exact import FOUND, INFEASIBLE, TIMEOUT, Outcome
from hybrid.arena.problem import Problem
from hybrid.signals import cp_sat_solver


def decide_cpsat(problem: Problem, capacity: int, time_limit_s: float | None, workers: int = 1,
                 deterministic_time: float | None = None, seed: int | None = None) -> Outcome:
    """Is there an assignment within `capacity`? One rectangle per live segment, a buffer's segments sharing
    its offset variable (a multiple of its alignment).

    `deterministic_time` (CP-SAT's work measure) with one worker and a fixed `seed` gives the same answer
    whatever the machine's load; `time_limit_s=None` then leaves the clock out. `seed` None keeps CP-SAT's
    own fixed default (random_seed 1)."""
    a = problem.arrays
    m = cp_model.CpModel()
    xs, ys = [], []
    offs = []
    for b in range(len(problem)):
        size, al = int(a.size[b]), int(a.align[b])
        if size > capacity:
            return Outcome(INFEASIBLE, None, 0)
        k = m.NewIntVar(0, (capacity - size) // al, f"k{b}")
        off = k * al if al > 1 else k
        offs.append(k)
        if size == 0:
            continue
        y = m.NewFixedSizeIntervalVar(off, size, f"y{b}") if al == 1 else None
        if y is None:
            o = m.NewIntVar(0, capacity - size, f"o{b}")
            m.Add(o == off)
            y = m.NewFixedSizeIntervalVar(o, size, f"y{b}")
        for s in range(int(a.seg_first[b]), int(a.seg_first[b + 1])):
            lo, hi = int(a.seg_lo[s]), int(a.seg_hi[s])
            xs.append(m.NewFixedSizeIntervalVar(lo, hi - lo, f"x{b}_{s}"))
            ys.append(y)
    m.AddNoOverlap2D(xs, ys)
    solver = cp_sat_solver()
    if time_limit_s is not None:
        solver.parameters.max_time_in_seconds = time_limit_s
    if deterministic_time is not None:
        solver.parameters.max_deterministic_time = deterministic_time
    solver.parameters.num_workers = workers
    if seed is not None:
        solver.parameters.random_seed = seed
    st = solver.Solve(m)
    if st in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        out = np.array([solver.Value(k) for k in offs], np.int64) * a.align
        return Outcome(FOUND, out, int(solver.NumBranches()))
    if st == cp_model.INFEASIBLE:
        return Outcome(INFEASIBLE, None, int(solver.NumBranches()))
    return Outcome(TIMEOUT, None, int(solver.NumBranches()))
