"""Refinement of arena plans: every tensor keeps its offset, and copies that share bytes keep their order.

An arena plan (FORMATS rule 5, `allocation.kind = "arena"`) places each tensor at one offset; the plan is
valid because copies whose byte ranges overlap are never live at once. Re-timing must keep that, so the
walk that re-derives a node sequence (`hybrid.swap.rewalk.rebuild`) gets one more kind of edge here:

- memory is per tensor (each tensor its own size class of one object: its own bytes at its own offset), so
  the walk adds no ownership edge between different tensors;
- address edges: an allocation (a compute's output, a swap_in) waits for the release of every earlier copy
  that last occupied any byte of its range — for each elementary byte segment (between consecutive offset
  boundaries) the node that released it last. A copy still live there when the allocation is issued makes
  the sequence invalid (`SequenceError`): the order of two copies that share bytes never flips.

Address edges are ordinary (not ownership) edges, so a window (`hybrid.refine.window`) reads them as
precedences inside it and as lower bounds from the frozen prefix: CP-SAT keeps every allocation after the
release before it in the same bytes, and the re-walk keeps the suffix so. Times come from
`hybrid.simulator.simulate` on the merged edges (FIFO streams in sequence order, as the walk times them).
The refined plan states the input's allocation unchanged: the same offsets and `arena_bytes`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from hybrid.graph.liveness import occupied_bytes
from hybrid.plan import ArenaAllocation
from hybrid.plan.events import COMPUTE, SWAP_IN
from hybrid.swap import rewalk
from hybrid.swap.pools import PoolArrays
from hybrid.swap.rewalk import ERR_INITIAL, ERR_NO_MEMORY, Problem, SequenceError, Timeline

ERR_ADDRESS = 11          # an allocation's bytes are held by a live copy of another tensor
rewalk.ERROR_TEXT.setdefault(ERR_ADDRESS, "an allocation's arena bytes are held by a live copy of another tensor")


@dataclass(frozen=True)
class ArenaProblem(Problem):
    """A `Problem` whose memory is the plan's arena: per-tensor objects plus the byte segments each covers."""

    allocation: ArenaAllocation | None = None
    t_off: np.ndarray | None = None       # int64 [T]: offset, -1 for a tensor without one
    seg_lo: np.ndarray | None = None      # int64 [T]: first elementary byte segment the tensor covers
    seg_hi: np.ndarray | None = None      # int64 [T]: one past the last (== seg_lo: no bytes, or no offset)
    n_segs: int = 0

    def overlaps(self, t: int, u: int) -> bool:
        """Whether tensors t and u share arena bytes."""
        return t != u and bool(max(self.seg_lo[t], self.seg_lo[u]) < min(self.seg_hi[t], self.seg_hi[u]))

    def may_stay(self, tl: Timeline, t: int, release: int, load: int) -> bool:
        """Whether tensor t may stay resident from timeline node `release` to `load` (dropping that pair):
        no copy of another tensor is allocated in t's bytes in between."""
        a = self.graph.arrays
        for i in range(release + 1, load):
            k, r = int(tl.kind[i]), int(tl.ref[i])
            if k == SWAP_IN and self.overlaps(t, r):
                return False
            if k == COMPUTE and any(self.overlaps(t, int(u)) for u in a.out_idx[a.out_ptr[r]:a.out_ptr[r + 1]]):
                return False
        return True


def per_tensor_pool(graph, device) -> PoolArrays:  # noqa: ANN001 - Graph, Device
    """Each tensor its own class of one object of its aligned bytes: memory never binds two tensors."""
    n_t = graph.arrays.n_tensors
    mem = occupied_bytes(graph, device.alignment_bytes)
    return PoolArrays(False, np.arange(n_t, dtype=np.int32), np.ones(n_t, np.int64), mem.astype(np.int64),
                      int(mem.sum()), mem, device.alignment_bytes)


def arena_problem(aug, allocation: ArenaAllocation) -> ArenaProblem:  # noqa: ANN001 - AugmentedGraph
    """The refinement problem of an arena plan's augmented graph (`hybrid.swap.from_plan.from_plan`)."""
    g = aug.graph
    a = g.arrays
    mem = occupied_bytes(g, aug.device.alignment_bytes)
    off = np.full(a.n_tensors, -1, np.int64)
    for name, o in allocation.offsets.items():
        k = g.tensor_index.get(name)
        if k is not None:
            off[k] = int(o)
    has = (off >= 0) & (mem > 0)
    bounds = np.unique(np.concatenate([off[has], off[has] + mem[has]]))
    seg_lo = np.zeros(a.n_tensors, np.int64)
    seg_hi = np.zeros(a.n_tensors, np.int64)
    seg_lo[has] = np.searchsorted(bounds, off[has])
    seg_hi[has] = np.searchsorted(bounds, off[has] + mem[has])
    return ArenaProblem(g, aug.device, per_tensor_pool(g, aug.device), np.asarray(aug.schedule, np.int32),
                        aug.op_time, aug.op_ws, aug.impl_choice, np.asarray(aug.resident_at_start, np.bool_),
                        aug.options, allocation, off, seg_lo, seg_hi, max(0, len(bounds) - 1))


@njit(cache=True)
def _address_edges(kind, ref, out_ptr, out_idx, t_off, t_bytes, seg_lo, seg_hi, n_segs, resident):
    """Per node, the release nodes that last held its allocation's bytes: (status, node, ptr, idx)."""
    n = kind.shape[0]
    occ = np.full(max(n_segs, 1), -1, np.int64)       # tensor whose live copy holds the segment
    painter = np.full(max(n_segs, 1), -1, np.int64)   # node that released it last
    seen = np.full(n, -1, np.int64)
    ptr = np.zeros(n + 1, np.int64)
    cap = 4 * n + 16
    idx = np.empty(cap, np.int64)
    nd = 0
    for t in range(t_off.shape[0]):
        if resident[t]:
            for k in range(seg_lo[t], seg_hi[t]):
                if occ[k] >= 0:
                    return ERR_INITIAL, -1, ptr, idx[:0]
                occ[k] = t
    for i in range(n):
        ptr[i] = nd
        k = kind[i]
        r = ref[i]
        if k == COMPUTE or k == SWAP_IN:
            lo = out_ptr[r] if k == COMPUTE else 0
            hi = out_ptr[r + 1] if k == COMPUTE else 1
            for j in range(lo, hi):
                t = out_idx[j] if k == COMPUTE else r
                if t_bytes[t] > 0 and t_off[t] < 0:
                    return ERR_NO_MEMORY, i, ptr, idx[:0]
                for s in range(seg_lo[t], seg_hi[t]):
                    if occ[s] >= 0:
                        return ERR_ADDRESS, i, ptr, idx[:0]
                    d = painter[s]
                    if d >= 0 and seen[d] != i:
                        seen[d] = i
                        if nd == cap:
                            cap *= 2
                            grown = np.empty(cap, np.int64)
                            grown[:nd] = idx[:nd]
                            idx = grown
                        idx[nd] = d
                        nd += 1
                    occ[s] = t
        else:
            for s in range(seg_lo[r], seg_hi[r]):
                occ[s] = -1
                painter[s] = i
    ptr[n] = nd
    return 0, -1, ptr, idx[:nd]


def rebuild(p: Problem, kind: np.ndarray, ref: np.ndarray) -> Timeline:
    """`hybrid.swap.rewalk.rebuild`, with the address edges and times of an arena problem (other problems:
    the walk as it is). SequenceError when the sequence is invalid or breaks the order of shared bytes."""
    tl = rewalk.rebuild(p, kind, ref)
    if not isinstance(p, ArenaProblem):
        return tl
    from hybrid.simulator import simulate

    a = p.graph.arrays
    status, err, aptr, aidx = _address_edges(tl.kind, tl.ref.astype(np.int64), a.out_ptr, a.out_idx, p.t_off,
                                             a.t_bytes, p.seg_lo, p.seg_hi, p.n_segs, p.resident)
    if status != 0:
        raise SequenceError(int(status), int(err))
    n = tl.n
    # merged CSR: each node's walk edges, then its address edges (not ownership: windows see precedences)
    cnt = np.diff(tl.dep_ptr) + np.diff(aptr)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(cnt, out=ptr[1:])
    node = np.concatenate([np.repeat(np.arange(n), np.diff(tl.dep_ptr)), np.repeat(np.arange(n), np.diff(aptr))])
    order = np.argsort(node, kind="stable")
    idx = np.concatenate([tl.dep_idx.astype(np.int64), aidx])[order]
    own = np.concatenate([tl.dep_own, np.zeros(len(aidx), np.bool_)])[order]
    start, end = simulate(tl.kind, tl.end - tl.start, ptr, idx)
    return Timeline(tl.kind, tl.ref, start, end, ptr, idx.astype(np.int32), own, tl.stats)


def relaid(graph, plan, *, time_limit_s: float, seed: int, workers: int, options,  # noqa: ANN001
           stop=None, tries: int = 2):  # noqa: ANN001
    """The other way to refine an arena plan: forget its offsets, refine it as a byte budget, and lay the result
    out again (`hybrid.arena.layout.fit_offsets`). The first budget is the input's own peak (copies and
    workspace: the input fits it as it is); where the refined plan does not lay out, the next is that budget
    less the layout's overflow (where no plan fits it, the tries stop), up to `tries` budgets, each with an
    equal share of the time. The laid-out plan, or None when none gained or laid out within the memory; the
    caller keeps the faster of this and the plan refined with its offsets kept.

    Measured on the README's ResNet-18 (its 2026-11-21 capture) at 64 MiB (the written 14.68 ms plan, 15 s each): refined at the full
    arena 12.64 ms but 7.8% over once laid out; at the input's peak (58.1 MiB) 13.34 ms, 6.8% over; at budgets
    that lay out (53.8 and 55.8 MiB) 14.08 and 13.84 ms, slower than the 13.48 ms refined with its offsets
    kept in 30 s. So `RefineOptions.relayout` is off by default."""
    import dataclasses
    import time

    from hybrid.arena.layout import QUICK_BUDGET, _fit
    from hybrid.errors import HybridError
    from hybrid.plan import UnconstrainedAllocation
    from hybrid.refine.lns import refine
    from hybrid.swap.to_plan import on_device
    from hybrid.validator import validate

    t0 = time.perf_counter()
    dev = plan.device
    budget = min(dev.usable_bytes, int(validate(graph, plan).peak_bytes))
    best = None
    for k in range(tries):
        share = (time_limit_s - (time.perf_counter() - t0)) / (tries - k)
        if share <= 1.0 or (stop is not None and stop()):
            break
        tight = dataclasses.replace(dev, memory_bytes=budget + dev.reserve_bytes)
        as_bytes = dataclasses.replace(plan, allocation=UnconstrainedAllocation(), device=tight)
        try:
            res = refine(graph, as_bytes, time_limit_s=0.8 * share, seed=seed, workers=workers,
                         options=dataclasses.replace(options, relayout=False), stop=stop)
        except HybridError:
            if k == 0:   # the input fits its own peak: a failure there is not the budget's
                raise
            break        # a budget below the plan's own peak that no re-walk or re-plan fits: nothing laid out
        if not res.improved:
            break
        out, ratio = _fit(graph, on_device(graph, res.plan, dev), max(1.0, 0.2 * share), QUICK_BUDGET)
        if out is not None:
            if best is None or out.makespan_s < best.makespan_s:
                best = out
            break
        budget = int(budget / ratio * 0.995)
    return best
