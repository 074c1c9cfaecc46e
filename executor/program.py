"""Compile (graph, plan) into the linear program the runtime replays every iteration.

The augmented graph (`hybrid.swap.from_plan.from_plan`) gives the nodes in a
topological order that every stream follows (FIFO), and the control and data
edges between them. What it leaves implicit, and this module makes explicit:

- *When memory changes hands.* A device copy is allocated at the start of its
  producing compute or swap_in, and released at the end of its swap_out or at
  its free. Releases wait in a queue keyed by their plan time and are handed
  back to the pool just before the first allocation that starts at or after
  that time (within the validator's tolerance), the same reading
  `from_plan` uses to derive memory edges. So the pool's live set at every
  allocation is the plan's live set at that instant, and a valid plan never
  asks for more than its allocation holds.
- *What a node waits for.* Each node's dependencies are folded into a
  frontier: for each stream, the latest node on it that must have finished.
  A `free` has no stream; its frontier is that of its dependencies, and it is
  what the memory it releases carries to whoever reuses it.

Everything here is static; the runtime adds only the pool's dynamic choices.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from hybrid.plan import events as E
from hybrid.swap.from_plan import from_plan
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.swap.augmented import AugmentedGraph, serialized

from executor.streams import COMPUTE, D2H, H2D

Frontier = tuple[int, int, int]   # per stream (compute, h2d, d2h): latest node that must be done, -1 for none
NO_FRONTIER: Frontier = (-1, -1, -1)


def merge(a: Frontier, b: Frontier) -> Frontier:
    return (max(a[0], b[0]), max(a[1], b[1]), max(a[2], b[2]))


@dataclass(frozen=True)
class Release:
    tensor: int
    interval: int
    frontier: Frontier      # what must be done before this memory may be written again


@dataclass(frozen=True)
class Alloc:
    tensor: int
    interval: int


@dataclass(frozen=True)
class Step:
    node: int
    kind: int               # hybrid.swap.kernel COMPUTE / SWAP_IN / SWAP_OUT / FREE
    ref: int                # op index (compute) or tensor index
    stream: int             # COMPUTE / H2D / D2H; -1 for free (no stream)
    frontier: Frontier      # dependencies folded per stream (this node's own stream included)
    releases: tuple[Release, ...]   # handed back to the pool before this node allocates
    allocs: tuple[Alloc, ...]


@dataclass
class Interval:
    """One device copy: from its allocation to its release, in program sequence numbers."""

    tensor: int
    nbytes: int
    start: int              # sequence number of the allocation (0: resident at the iteration's start)
    end: int                # sequence number of the release
    wrap_start: int = -1    # resident across the iteration boundary: also live over [wrap_start, total)


@dataclass
class Program:
    graph: Graph
    plan: Plan
    aug: AugmentedGraph
    steps: list[Step]
    final_releases: tuple[Release, ...]    # pending at the iteration's end (handed back after it)
    intervals: list[Interval]
    resident: tuple[int, ...]              # tensors on the device at the start (and end) of every iteration
    resident_interval: dict[int, int]      # resident tensor -> its interval
    host_tensors: tuple[int, ...]          # tensors that ever need a host copy
    total_seq: int                         # number of allocation/release sequence numbers used
    serialize: bool                        # the plan runs everything on one stream (naive baseline)
    stats: dict = field(default_factory=dict)

    @property
    def n_nodes(self) -> int:
        return len(self.steps)


def compile_program(graph: Graph, plan: Plan, aug: AugmentedGraph | None = None) -> Program:
    """The program of a plan (validate the plan first; this only re-checks what the runtime relies on)."""
    if aug is None:
        aug = from_plan(graph, plan)
    a = graph.arrays
    eps = plan.tolerance_s
    serialize = serialized(plan)
    n = aug.n_nodes
    stream_of_kind = {E.COMPUTE: COMPUTE, E.SWAP_IN: H2D, E.SWAP_OUT: D2H, E.FREE: -1}

    resident = tuple(int(t) for t in np.nonzero(aug.resident_at_start)[0])
    live: dict[int, int] = {}           # tensor -> its open interval
    intervals: list[Interval] = []
    for t in resident:
        live[t] = len(intervals)
        intervals.append(Interval(t, int(a.t_bytes[t]), 0, -1))
    resident_interval = dict(live)
    seq = 1
    pending: list[tuple[float, int, int, Frontier]] = []   # (release time, order, tensor, frontier)
    order = 0
    node_frontier: list[Frontier] = []
    steps: list[Step] = []
    host: set[int] = {int(t) for t in np.nonzero(a.t_persistent)[0] if not aug.resident_at_start[t]}

    def settle(upto: float) -> list[Release]:
        nonlocal seq
        out = []
        while pending and pending[0][0] <= upto:
            _, _, t, fr = heapq.heappop(pending)
            k = live.pop(t)
            intervals[k].end = seq
            seq += 1
            out.append(Release(t, k, fr))
        return out

    def allocate(t: int, node: int) -> Alloc:
        nonlocal seq
        if t in live:
            raise HybridError(f"plan allocates tensor {graph.tensors[t].id!r} again while it is on the device "
                              f"(node {aug.label(node)}); validate the plan")
        live[t] = len(intervals)
        intervals.append(Interval(t, int(a.t_bytes[t]), seq, -1))
        seq += 1
        return Alloc(t, live[t])

    for i in range(n):
        kind = int(aug.kind[i])
        ref = int(aug.ref[i])
        stream = stream_of_kind[kind]
        if serialize and stream >= 0:
            stream = COMPUTE
        fr = NO_FRONTIER
        for d in aug.deps(i):
            fr = merge(fr, node_frontier[int(d)])
        releases: list[Release] = []
        allocs: list[Alloc] = []
        if kind == E.COMPUTE:
            for t in a.in_idx[a.in_ptr[ref]:a.in_ptr[ref + 1]]:
                if int(t) not in live:
                    raise HybridError(f"op {graph.ops[ref].id!r} reads {graph.tensors[int(t)].id!r}, which has no "
                                      "device copy at that point of the plan; validate the plan")
            outs = a.out_idx[a.out_ptr[ref]:a.out_ptr[ref + 1]]
            if len(outs):
                releases = settle(float(aug.start[i]) + eps)
                allocs = [allocate(int(t), i) for t in outs]
        elif kind == E.SWAP_IN:
            releases = settle(float(aug.start[i]) + eps)
            allocs = [allocate(ref, i)]
            host.add(ref)
        else:
            if ref not in live:
                raise HybridError(f"plan releases {graph.tensors[ref].id!r} at node {aug.label(i)} but it has no "
                                  "device copy then; validate the plan")
            if kind == E.SWAP_OUT:
                host.add(ref)
        own = fr
        if stream >= 0:
            own = tuple(i if s == stream else -1 for s in range(3))  # type: ignore[assignment]
        node_frontier.append(own if stream >= 0 else fr)
        if kind in (E.SWAP_OUT, E.FREE):
            when = float(aug.end[i]) if kind == E.SWAP_OUT else float(aug.start[i])
            heapq.heappush(pending, (when, order, ref, node_frontier[i]))
            order += 1
        steps.append(Step(i, kind, ref, stream, fr, tuple(releases), tuple(allocs)))

    final = settle(float("inf"))
    left = set(live)
    if left != set(resident):
        extra = sorted(left - set(resident))
        missing = sorted(set(resident) - left)
        what = (f"tensor {graph.tensors[extra[0]].id!r} is still on the device at the end" if extra else
                f"resident tensor {graph.tensors[missing[0]].id!r} is not on the device at the end")
        raise HybridError(f"plan is not periodic: {what}; validate the plan")
    # A resident tensor's last device copy continues into the next iteration as its first one.
    for t in resident:
        first = resident_interval[t]
        last = live[t]
        if last != first:
            intervals[first].wrap_start = intervals[last].start
            intervals[last].end = -2            # merged into `first`
            resident_interval[t] = first
    for iv in intervals:
        if iv.end == -1:                        # resident throughout the iteration
            iv.end = seq
    return Program(graph, plan, aug, steps, tuple(final), intervals, resident, resident_interval,
                   tuple(sorted(host)), seq, serialize,
                   {"nodes": n, "intervals": sum(1 for iv in intervals if iv.end != -2)})
