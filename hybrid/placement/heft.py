"""HEFT (Topcuoglu, Hariri and Wu, 2002): list scheduling of a task DAG on heterogeneous processors.

Tasks are ranked by their upward rank — mean compute cost plus the longest path of mean costs (edge
communication included) to an exit task — and, in decreasing rank, each goes to the processor where it
finishes earliest, inserted into the first idle gap long enough (insertion-based policy). Communication
costs nothing between tasks on one processor. Ties in rank go to the lower task index, and ties in finish
time to the lower processor index, so the schedule is deterministic.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class TaskGraph:
    """`cost[t, p]`: task t's time on processor p; `comm[(a, b)]`: time to move a's result to b across
    processors (0 on the same one). Tasks are 0..n-1; edges go from lower to higher topological rank."""

    cost: np.ndarray
    comm: dict[tuple[int, int], float]

    @property
    def n(self) -> int:
        return int(self.cost.shape[0])

    @property
    def processors(self) -> int:
        return int(self.cost.shape[1])

    def successors(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.n)]
        for a, b in self.comm:
            out[a].append(b)
        return out

    def predecessors(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(self.n)]
        for a, b in self.comm:
            out[b].append(a)
        return out


@dataclass(frozen=True)
class Schedule:
    """Per task: its processor, start and finish; the makespan is the last finish."""

    proc: np.ndarray
    start: np.ndarray
    finish: np.ndarray

    @property
    def makespan(self) -> float:
        return float(self.finish.max()) if len(self.finish) else 0.0


def upward_ranks(g: TaskGraph) -> np.ndarray:
    """rank_u(t) = mean cost of t + max over successors s of (comm(t, s) + rank_u(s))."""
    mean = g.cost.mean(axis=1)
    succ = g.successors()
    rank = np.zeros(g.n)
    for t in _reverse_topological(g):
        rank[t] = mean[t] + max((g.comm[(t, s)] + rank[s] for s in succ[t]), default=0.0)
    return rank


def heft(g: TaskGraph) -> Schedule:
    rank = upward_ranks(g)
    order = sorted(range(g.n), key=lambda t: (-round(rank[t], 9), t))
    preds = g.predecessors()
    proc = np.full(g.n, -1)
    start = np.zeros(g.n)
    finish = np.zeros(g.n)
    busy: list[list[tuple[float, float]]] = [[] for _ in range(g.processors)]  # sorted (start, finish) slots
    for t in order:
        best = None
        for p in range(g.processors):
            ready = max((finish[a] + (0.0 if proc[a] == p else g.comm[(a, t)]) for a in preds[t]), default=0.0)
            s = _earliest_gap(busy[p], ready, float(g.cost[t, p]))
            f = s + float(g.cost[t, p])
            if best is None or f < best[0] - 1e-12:
                best = (f, s, p)
        f, s, p = best  # type: ignore[misc]
        proc[t], start[t], finish[t] = p, s, f
        busy[p].append((s, f))
        busy[p].sort()
    return Schedule(proc, start, finish)


def _earliest_gap(slots: list[tuple[float, float]], ready: float, dur: float) -> float:
    """The earliest start >= ready where `dur` fits between the processor's booked slots."""
    t = ready
    for s, f in slots:
        if t + dur <= s + 1e-12:
            return t
        t = max(t, f)
    return t


def _reverse_topological(g: TaskGraph) -> list[int]:
    succ = g.successors()
    indeg = np.zeros(g.n, np.int64)
    for a, b in g.comm:
        indeg[b] += 1
    ready = [t for t in range(g.n) if indeg[t] == 0]
    order: list[int] = []
    while ready:
        t = ready.pop()
        order.append(t)
        for s in succ[t]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if len(order) != g.n:
        raise ValueError("the task graph has a cycle")
    return order[::-1]
