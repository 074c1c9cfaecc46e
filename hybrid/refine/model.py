"""The CP-SAT model of one window (`hybrid.refine.window.WindowSpec`) and its solution.

Variables: an integer start per node (end = start + duration, ticks); one
presence literal per optional (release, swap_in) pair. Constraints:
- compute nodes keep their schedule order (a chain of precedences);
- swap_ins share the h2d stream and swap_outs the d2h stream: NoOverlap of
  (optional) interval variables, in any order; frees take no stream;
- data precedences (a swap_in ends before its consumer starts, a release
  starts after the last node using the copy, a reload after the release), each
  enforced only when both ends are present, plus frozen lower bounds;
- memory: one reservoir per size class the window allocates from (objects) or
  one for the byte pool (bytes / gcd): an allocation takes at its start, a
  release (and a compute's workspace, byte pool) gives back at its end, frozen
  copies still in flight give back or take at their fixed ticks; the level
  (free objects or bytes) never drops below zero.
Objective, lexicographic: first the end of the window's last compute; then the
sum of all node ends, so copies that do not delay the window finish as early
as they can and leave the streams and memory free for the rest of the plan.
Two solves (the second bounded by the first's value) keep coefficients small.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from hybrid.refine.window import WindowSpec, greedy_starts
from hybrid.signals import cp_sat_solver

STATUS_NAMES = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible",
                cp_model.MODEL_INVALID: "invalid", cp_model.UNKNOWN: "unknown"}


@dataclass
class WindowSolution:
    status: str                 # optimal | feasible | infeasible | unknown | invalid
    starts: list[int]           # per WNode (absent nodes: their value, meaningless)
    present: list[bool]         # per pair
    last_end: int               # end of the window's last compute, ticks
    total_end: int              # second objective
    proved: bool                # the first objective was proved optimal

    @property
    def ok(self) -> bool:
        return self.status in ("optimal", "feasible")


@dataclass(frozen=True)
class SolveOptions:
    time_s: float = 1.0          # per window, split between the two objectives
    workers: int = 1
    seed: int = 1
    deterministic: bool = True   # bound the search by deterministic time, so a seed reproduces the result
    second_stage: bool = True
    # time.monotonic() at which the whole refinement's limit ends: no window's solve runs past it, whatever its
    # deterministic budget (the safety net alone let `--window-time 1e9s` run 12 s of a 10 s limit); a window cut
    # there may differ from its deterministic result, only at the end of the limit
    deadline: float | None = None


class WindowModel:
    """Builds the CP-SAT model of a window; `solve` runs the two lexicographic stages."""

    def __init__(self, spec: WindowSpec) -> None:
        self.spec = spec
        m = cp_model.CpModel()
        H = spec.horizon
        self.model = m
        self.lits = [m.new_bool_var(f"pair{j}") for j in range(len(spec.pairs))]
        self.start = []
        self.end = []
        intervals: dict[int, list] = {0: [], 1: [], 2: []}
        for i, n in enumerate(spec.nodes):
            s = m.new_int_var(n.lb, H, f"s{i}")
            e = s + n.dur
            self.start.append(s)
            self.end.append(e)
            if n.stream >= 0:
                if n.pair >= 0:
                    iv = m.new_optional_fixed_size_interval_var(s, n.dur, self.lits[n.pair], f"iv{i}")
                else:
                    iv = m.new_fixed_size_interval_var(s, n.dur, f"iv{i}")
                intervals[n.stream].append(iv)
        for st in (1, 2):
            if len(intervals[st]) > 1:
                m.add_no_overlap(intervals[st])
        for p in spec.precedences:
            c = m.add(self.start[p.after] >= self.end[p.before] + p.gap)
            enf = [self.lits[spec.nodes[x].pair] for x in (p.before, p.after) if spec.nodes[x].pair >= 0]
            if enf:
                c.only_enforce_if(list(dict.fromkeys(enf)))
        for r_i, r in enumerate(spec.reservoirs):
            times: list = [0]
            deltas: list[int] = [r.initial]
            actives: list = [True]
            for tk, d in r.fixed:
                times.append(tk)
                deltas.append(d)
                actives.append(True)
            for i, n in enumerate(spec.nodes):
                for rr, d, at_end in n.mem:
                    if rr != r_i or d == 0:
                        continue
                    times.append(self.end[i] if at_end else self.start[i])
                    deltas.append(d)
                    actives.append(self.lits[n.pair] if n.pair >= 0 else True)
            m.add_reservoir_constraint_with_active(times, deltas, actives, 0, max(0, sum(x for x in deltas if x > 0)))
        self.last = self.end[spec.last_compute]
        self.total = sum(self.end[i] for i in range(len(spec.nodes)))

    def _hint(self) -> None:
        greedy = greedy_starts(self.spec)
        for i, n in enumerate(self.spec.nodes):
            if greedy is not None:
                self.model.add_hint(self.start[i], greedy[i] if (n.pair < 0 or self.spec.pairs[n.pair].current) else n.lb)
            elif n.key >= 0:
                self.model.add_hint(self.start[i], min(max(n.hint, n.lb), self.spec.horizon))
        for j, p in enumerate(self.spec.pairs):
            self.model.add_hint(self.lits[j], p.current)

    def _solver(self, opt: SolveOptions, time_s: float) -> cp_model.CpSolver:
        solver = cp_sat_solver()
        prm = solver.parameters
        prm.num_workers = max(1, opt.workers)
        prm.random_seed = int(opt.seed) % (2**31)
        if opt.deterministic:
            prm.max_deterministic_time = max(0.01, time_s)
            # a safety net only: generous, so that a busy machine does not cut a window short (and change the result)
            prm.max_time_in_seconds = max(0.05, 10 * time_s + 5.0)
            if opt.deadline is not None:
                prm.max_time_in_seconds = min(prm.max_time_in_seconds, max(0.05, opt.deadline - time.monotonic()))
            if opt.workers > 1:
                prm.interleave_search = True
        else:
            prm.max_time_in_seconds = max(0.01, time_s)
        return solver

    def solve(self, opt: SolveOptions = SolveOptions()) -> WindowSolution:
        m = self.model
        self._hint()
        m.minimize(self.last)
        first = opt.time_s * (0.6 if opt.second_stage else 1.0)
        solver = self._solver(opt, first)
        st = solver.solve(m)
        name = STATUS_NAMES.get(st, "unknown")
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return WindowSolution(name, [], [], -1, -1, False)
        best_last = int(solver.value(self.last))
        sol = self._read(solver, name, st == cp_model.OPTIMAL)
        if not opt.second_stage:
            return sol
        # stage 2: keep the window's end, pull every other node as early as it goes
        m.clear_hints()
        for i, v in enumerate(self.start):
            m.add_hint(v, sol.starts[i])
        for j, lit in enumerate(self.lits):
            m.add_hint(lit, sol.present[j])
        m.add(self.last <= best_last)
        m.minimize(self.total)
        solver2 = self._solver(opt, opt.time_s - first)
        st2 = solver2.solve(m)
        if st2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            sol2 = self._read(solver2, name, sol.proved)
            if sol2.total_end <= sol.total_end:
                return sol2
        return sol

    def _read(self, solver: cp_model.CpSolver, name: str, proved: bool) -> WindowSolution:
        return WindowSolution(name, [int(solver.value(s)) for s in self.start],
                              [bool(solver.value(x)) for x in self.lits], int(solver.value(self.last)),
                              int(solver.value(self.total)), proved)


def solve_window(spec: WindowSpec, opt: SolveOptions = SolveOptions()) -> WindowSolution:
    return WindowModel(spec).solve(opt)
