"""Recover the augmented graph (nodes, control edges, stream orders) from any plan's timeline.

Plans are files; refinement and the executor need edges, not just times. For
a valid plan the edges are implied by the rules it obeys:
- a compute waits for the node that made each input's device copy
  (producing compute or swap_in);
- a swap_out or free waits for that node and for every compute that used
  the tensor before it started;
- a swap_in waits for the swap_out that made the host copy (if any) and for
  the release of the tensor's previous device copy;
- every allocation waits for the release of the memory it reuses: the
  earliest-released free object of its size class, or for a byte budget the
  earliest-released free bytes, or for an arena the last occupants of its
  byte range.
Each stream keeps the plan's order. Re-simulating the result with the plan's
durations gives every event at or before its planned time (exactly for the
swap planner's own plans), which is what lets a simulator change and compare.
"""
from __future__ import annotations

import bisect
import heapq

import numpy as np

from hybrid.errors import HybridError
from hybrid.graph.liveness import occupied_bytes
from hybrid.swap.pools import pool_from_allocation
from hybrid.graph import Graph, Op
from hybrid.plan import ArenaAllocation, Plan, SizeClassAllocation, UnconstrainedAllocation
from hybrid.plan.events import KIND_CODE
from hybrid.plan.run_order import event_order
from hybrid.graph.order import from_ids
from hybrid.swap.augmented import AugmentedGraph, PlannerOptions, serialized


class _Memory:
    """Which earlier releases an allocation at time s depends on, per allocation kind."""

    def __init__(self, g: Graph, plan: Plan, op_ws: np.ndarray) -> None:
        self.g = g
        self.alloc = plan.allocation
        self.pending: list[tuple[float, int, int, int]] = []  # (time, seq, tensor or -1-bytes, node)
        self.seq = 0
        self.occupied = plan.device.occupied
        a = plan.allocation
        if isinstance(a, SizeClassAllocation):
            self.fresh = [c.count for c in a.classes]
            self.free_objs: list[list[tuple[float, int]]] = [[] for _ in a.classes]
            for tid in plan.resident_at_start:
                self.fresh[a.class_of[tid]] -= 1
        elif isinstance(a, UnconstrainedAllocation):
            held = sum(plan.device.occupied(g.tensor(t).bytes) for t in plan.resident_at_start)
            self.chunks: list[list] = [[0.0, 0, plan.device.usable_bytes - held, -1]]  # heap: [time, seq, bytes, node]
        else:
            assert isinstance(a, ArenaAllocation)
            # Disjoint byte segments [lo, hi) -> node that last released them (-1: never used).
            self.seg_lo: list[int] = [0]
            self.seg_node: list[int] = [-1]

    def release(self, when: float, tensor: int, nbytes: int, node: int) -> None:
        heapq.heappush(self.pending, (when, self.seq, tensor if tensor >= 0 else -1 - nbytes, node))
        self.seq += 1

    def _settle(self, upto: float) -> None:
        """Make releases that happen by `upto` available."""
        while self.pending and self.pending[0][0] <= upto:
            when, _, who, node = heapq.heappop(self.pending)
            a = self.alloc
            if isinstance(a, SizeClassAllocation):
                if who >= 0:
                    heapq.heappush(self.free_objs[a.class_of[self.g.tensors[who].id]], (when, node))
            elif isinstance(a, UnconstrainedAllocation):
                nbytes = self.occupied(self.g.tensors[who].bytes) if who >= 0 else -1 - who
                heapq.heappush(self.chunks, [when, self.seq, nbytes, node])
                self.seq += 1
            elif who >= 0:
                t = self.g.tensors[who]
                off = a.offsets[t.id]
                self._paint(off, off + t.bytes, node)

    def take(self, s: float, tensor: int, nbytes: int) -> list[int]:
        """Dependencies of allocating (tensor, or workspace when tensor < 0) at time s."""
        self._settle(s)
        a = self.alloc
        deps: list[int] = []
        if isinstance(a, SizeClassAllocation):
            if tensor < 0:
                return deps
            c = a.class_of[self.g.tensors[tensor].id]
            if self.fresh[c] > 0:
                self.fresh[c] -= 1
            elif self.free_objs[c]:
                deps.append(heapq.heappop(self.free_objs[c])[1])
        elif isinstance(a, UnconstrainedAllocation):
            left = nbytes
            while left > 0 and self.chunks:
                ch = self.chunks[0]
                if ch[3] >= 0:
                    deps.append(ch[3])
                if ch[2] > left:
                    ch[2] -= left
                    left = 0
                else:
                    left -= ch[2]
                    heapq.heappop(self.chunks)
        elif tensor >= 0:
            t = self.g.tensors[tensor]
            off = a.offsets[t.id]
            deps.extend(self._occupants(off, off + t.bytes))
        return [d for d in dict.fromkeys(deps) if d >= 0]

    # -- arena segments ------------------------------------------------------
    def _split(self, x: int) -> int:
        i = bisect.bisect_right(self.seg_lo, x) - 1
        if self.seg_lo[i] != x:
            self.seg_lo.insert(i + 1, x)
            self.seg_node.insert(i + 1, self.seg_node[i])
            i += 1
        return i

    def _occupants(self, lo: int, hi: int) -> list[int]:
        if hi <= lo:
            return []
        i = bisect.bisect_right(self.seg_lo, lo) - 1
        out = []
        while i < len(self.seg_lo) and self.seg_lo[i] < hi:
            out.append(self.seg_node[i])
            i += 1
        return out

    def _paint(self, lo: int, hi: int, node: int) -> None:
        if hi <= lo:
            return
        i = self._split(lo)
        j = self._split(hi)
        self.seg_lo[i:j] = [lo]
        self.seg_node[i:j] = [node]


def from_plan(graph: Graph, plan: Plan) -> AugmentedGraph:
    """The augmented graph of a (valid) plan. Validate the plan first: edges of an invalid one mean little."""
    g = graph
    a = g.arrays
    t_mem = occupied_bytes(g, plan.device.alignment_bytes)
    events = plan.events
    n = len(events)
    order = event_order(g, plan)
    impl_choice = plan.impl_choice(g)
    op_time, op_ws = a.impl_arrays(impl_choice)
    mem = _Memory(g, plan, op_ws)
    uses_ws = isinstance(plan.allocation, UnconstrainedAllocation)

    kind = np.empty(n, np.int8)
    ref = np.empty(n, np.int32)
    start = np.empty(n, np.float64)
    end = np.empty(n, np.float64)
    recompute = np.zeros(n, np.bool_)
    impl = np.full(n, -1, np.int32)
    dep_ptr = np.zeros(n + 1, np.int64)
    deps_flat: list[int] = []
    mat = np.full(a.n_tensors, -1, np.int64)
    host = np.full(a.n_tensors, -1, np.int64)
    rel = np.full(a.n_tensors, -1, np.int64)
    readers_since: list[list[int]] = [[] for _ in range(a.n_tensors)]
    for k, i in enumerate(order):
        e = events[i]
        kind[k] = KIND_CODE[e.kind]
        start[k], end[k] = e.start_s, e.end_s
        deps: list[int] = []
        if e.kind == "compute":
            o = g.op_index[e.op]
            ref[k] = o
            recompute[k] = e.recompute
            impl[k] = _impl_index(g.ops[o], e.impl)
            ins = a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]
            deps.extend(int(mat[t]) for t in ins if mat[t] >= 0)
            for t in a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]]:
                deps.extend(mem.take(e.start_s, int(t), int(t_mem[t])))
                mat[t] = k
                readers_since[t] = [k]
            if uses_ws and op_ws[o] > 0:
                deps.extend(mem.take(e.start_s, -1, int(op_ws[o])))
                mem.release(e.end_s, -1, int(op_ws[o]), k)
            for t in ins:
                readers_since[t].append(k)
        else:
            t = g.tensor_index[e.tensor]
            ref[k] = t
            if e.kind == "swap_in":
                deps.extend(d for d in (host[t], rel[t]) if d >= 0)
                deps.extend(mem.take(e.start_s, t, int(t_mem[t])))
                mat[t] = k
                readers_since[t] = [k]
            else:
                deps.extend(readers_since[t])
                rel[t] = k
                if e.kind == "swap_out":
                    host[t] = k
                mem.release(e.end_s, t, int(t_mem[t]), k)
                readers_since[t] = []
        deps_flat.extend(dict.fromkeys(d for d in deps if d != k))
        dep_ptr[k + 1] = len(deps_flat)
    pool = None
    if not isinstance(plan.allocation, ArenaAllocation):
        pool = pool_from_allocation(g, plan.allocation, plan.device)
    resident = np.zeros(a.n_tensors, np.bool_)
    for tid in plan.resident_at_start:
        resident[g.tensor_index[tid]] = True
    return AugmentedGraph(
        g, plan.device, pool, from_ids(g, plan.schedule, "plan schedule"), op_time, op_ws, impl_choice,
        PlannerOptions(overlap=not serialized(plan)), kind, ref, start, end, dep_ptr,
        np.array(deps_flat, dtype=np.int32), resident,
        {}, recompute, impl,
    )


def _impl_index(op: Op, name: str | None) -> int:
    """Index of the impl a compute event names in `op.implementations` (its default when it names none)."""
    if name is None:
        return op.default_impl
    for v, im in enumerate(op.implementations):
        if im.name == name:
            return v
    raise HybridError(f"plan: op {op.id!r} has no implementation {name!r}")
