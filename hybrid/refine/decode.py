"""A window's CP-SAT solution -> a new node sequence -> a re-walked, re-timed augmented graph.

The window's present nodes are issued in the order of their solved start
times (a topological sort of the window's precedences, ties: frees first, then
the current order), between the frozen prefix and the unchanged suffix.
Dropped pairs disappear, chosen candidates appear. `hybrid.swap.rewalk.rebuild`
then re-derives edges, release kinds, object ownership and times from the
sequence; sorted by a feasible timetable, no window node starts later than the
solver said (in real time), and the suffix is re-timed as it now falls.
"""
from __future__ import annotations

import heapq

import numpy as np

from hybrid.refine.model import WindowSolution
from hybrid.plan.events import FREE
from hybrid.refine.offsets import rebuild
from hybrid.swap.rewalk import Problem, Timeline
from hybrid.refine.window import WindowSpec


def window_order(spec: WindowSpec, sol: WindowSolution) -> list[int]:
    """WNode indices of the present nodes, in issue order."""
    nodes = spec.nodes
    present = [n.pair < 0 or sol.present[n.pair] for n in nodes]
    succ: list[list[int]] = [[] for _ in nodes]
    indeg = [0] * len(nodes)
    for p in spec.precedences:
        if present[p.before] and present[p.after]:
            succ[p.before].append(p.after)
            indeg[p.after] += 1

    def key(i: int) -> tuple[int, int, int, int]:
        n = nodes[i]
        return (sol.starts[i], 0 if n.kind == FREE else 1, 0 if n.key >= 0 else 1, n.key if n.key >= 0 else -n.key)

    heap = [(key(i), i) for i in range(len(nodes)) if present[i] and indeg[i] == 0]
    heapq.heapify(heap)
    out: list[int] = []
    while heap:
        _, i = heapq.heappop(heap)
        out.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, (key(j), j))
    if len(out) != sum(present):
        raise ValueError("window precedences form a cycle")
    return out


def decode(p: Problem, tl: Timeline, spec: WindowSpec, sol: WindowSolution) -> Timeline:
    """The whole plan with the window re-issued as solved; raises SequenceError if the walk rejects it."""
    order = window_order(spec, sol)
    wk = np.array([spec.nodes[i].kind for i in order], np.int8)
    wr = np.array([spec.nodes[i].ref for i in order], np.int64)
    keep = np.ones(tl.n - spec.hi, np.bool_)
    for pr, on in zip(spec.pairs, sol.present):
        if on and pr.moves >= 0:  # an eviction moved into the window leaves its old place
            keep[pr.moves - spec.hi] = False
    kind = np.concatenate([tl.kind[:spec.lo], wk, tl.kind[spec.hi:][keep]])
    ref = np.concatenate([tl.ref[:spec.lo].astype(np.int64), wr, tl.ref[spec.hi:].astype(np.int64)[keep]])
    return rebuild(p, kind, ref)
