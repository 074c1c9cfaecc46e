"""Re-derive an augmented graph from its node sequence alone: edges, object ownership and times.

Refinement edits the *sequence* of nodes (compute / swap_in / release per
tensor, in issue order) and lets this walk rebuild everything else, so any
edit is either a valid augmented graph or rejected with a reason:

- data edges: a compute waits for the swap_in that brought each input; a
  release (swap_out or free) waits for the last node that touched the copy; a
  swap_in waits for the tensor's previous release and for the swap_out that made
  its host copy valid; a rerun waits for the release of each output's previous copy;
- reruns: a compute of an op that already ran in the sequence is a rerun (a plan's
  `"recompute": true` event). As the validator reads it, it regenerates its
  outputs' values (a host copy of them stays valid) and updates nothing;
- release kinds: a release is a `free` when the tensor is dead (non-persistent,
  and no compute reads it later before a rerun writes it again: a drop) or its
  host copy is valid, else a `swap_out`;
- ownership edges (memory safety, as in `hybrid.swap.kernel`): every
  allocation takes size-class objects (or byte chunks) released earlier in the
  sequence and depends on their release nodes. The walk picks, among objects
  already free when the node could otherwise start, the one freed last (best
  fit, so earlier-freed objects stay for nodes that could start sooner); if none
  is free yet, the one freed first. With this rule, re-walking a sequence sorted
  by any feasible timetable's starts never starts a node later than that
  timetable does (the property CP-SAT decoding relies on);
- times: each stream (compute, h2d, d2h) is FIFO in sequence order, frees take
  no stream, and every node starts as soon as its edges allow — exactly what
  `hybrid.simulator.simulate` computes from the edges it emits.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numba import njit

from hybrid.swap.pools import PoolArrays
from hybrid.device import Device
from hybrid.swap import free_memory as F
from hybrid.graph import Graph

# in an input sequence SWAP_OUT and FREE both mean "release"
from hybrid.plan.events import COMPUTE, FREE, SWAP_IN, SWAP_OUT

OK = 0
ERR_INPUT_MISSING, ERR_OUTPUT_RESIDENT, ERR_LOAD_RESIDENT, ERR_LOAD_NO_HOST, ERR_RELEASE_ABSENT = 1, 2, 3, 4, 5
ERR_NO_MEMORY, ERR_END_LEFT, ERR_END_MISSING, ERR_END_STALE, ERR_INITIAL = 6, 7, 8, 9, 10

ERROR_TEXT = {
    ERR_INPUT_MISSING: "a compute reads a tensor with no device copy",
    ERR_OUTPUT_RESIDENT: "a compute writes a tensor that already has a device copy",
    ERR_LOAD_RESIDENT: "a swap_in of a tensor already on the device",
    ERR_LOAD_NO_HOST: "a swap_in of a tensor without a valid host copy",
    ERR_RELEASE_ABSENT: "a release of a tensor with no device copy",
    ERR_NO_MEMORY: "an allocation finds no free object / bytes in the pool",
    ERR_END_LEFT: "a tensor not resident at the start is left on the device at the end",
    ERR_END_MISSING: "a tensor resident at the start is not on the device at the end",
    ERR_END_STALE: "an updated persistent tensor ends on the host with a stale copy",
    ERR_INITIAL: "the tensors resident at the start do not fit the pool",
}

# stats slots
S_H2D, S_D2H, S_NIN, S_NOUT, S_NFREE = range(5)


@njit(cache=True, inline="always")
def _take_token(c, est, tok_off, tok_n, tok_time, tok_node, tok_amt, fresh, pend, tok_dead):
    """Best-fit object of class c for a node that could start at est. Returns (release time, release node);
    node -1: an untouched object, -2: none left."""
    off = tok_off[c]
    if fresh[c] > 0 and F.live_at_most(tok_time, tok_amt, off, tok_n[c], est) < 0:
        fresh[c] -= 1  # nothing released by est: an untouched object is as early as it gets
        return 0.0, -1
    if tok_n[c] > 0:
        tok_n[c], got, start = F.take(tok_time, tok_node, tok_amt, off, tok_n[c], est, 1, pend, 0, tok_dead, c)
        if start >= 0:
            return start, (pend[0] if got > 0 else -1)
    if fresh[c] > 0:
        fresh[c] -= 1
        return 0.0, -1
    return -1.0, -2


@njit(cache=True, inline="always")
def _take_bytes(need, est, ch_bytes, ch_time, ch_node, n_ch, deps, n_deps, ch_dead):
    """Take `need` bytes from released chunks (best fit around est). Returns (start, n_ch, n_deps) or start < 0."""
    n_ch, n_deps, s = F.take(ch_time, ch_node, ch_bytes, 0, n_ch, est, need, deps, n_deps, ch_dead, 0)
    return s, n_ch, n_deps


@njit(cache=True, _nrt=False)
def walk_into(kind, ref, n, t_bytes, t_persist, in_ptr, in_idx, out_ptr, out_idx, upd_ptr, upd_idx, op_time, op_ws,
              by_bytes, t_class, class_count, capacity, t_mem, h2d_bw, d2h_bw, latency, resident, stop,
              start, end, dep_ptr, dep_idx, dep_own, stats, res, mat, last, hv, hvn, reln, made, updated,
              fresh, tok_off, tok_n, tok_time, tok_node, tok_amt, pend1, ch_bytes, ch_time, ch_node, clk, tmp,
              tok_dead, ch_dead):
    """The walk over caller-provided arrays (no allocation, no reference counting: it runs once per GA
    evaluation). kind (a copy of the whole input sequence, releases resolved in place) and the other outputs
    are written; nodes [0, n) are walked; sizes: nodes >= n, dep arrays >= the dependency count, tokens/chunks >= n + 2.
    Memory is counted in t_mem (each copy's aligned footprint); copies take t_bytes / bandwidth.
    Returns (status, err_node, n_deps, n_chunks)."""
    n_t = t_bytes.shape[0]
    n_c = class_count.shape[0]
    for i in range(n):
        start[i] = 0.0
        end[i] = 0.0
    for i in range(5):
        stats[i] = 0.0
    # Which releases drop a copy still read later: one backward pass, with res[t] meaning "a compute reads t
    # after this point before one writes it". A release is marked in kind (FREE: no such read, SWAP_OUT: read
    # later) until the forward pass resolves it.
    for t in range(n_t):
        res[t] = False
    for i in range(kind.shape[0] - 1, -1, -1):  # the whole sequence, also when only a prefix is walked
        r = ref[i]
        if kind[i] == COMPUTE:
            for j in range(out_ptr[r], out_ptr[r + 1]):
                res[out_idx[j]] = False
            for j in range(in_ptr[r], in_ptr[r + 1]):
                res[in_idx[j]] = True
        elif kind[i] != SWAP_IN:
            kind[i] = SWAP_OUT if res[r] else FREE
    for t in range(n_t):
        res[t] = False
        mat[t] = -1       # node that made the current device copy
        last[t] = -1      # last node touching the current copy
        hv[t] = t_persist[t]  # host copy valid
        hvn[t] = -1       # swap_out that made it valid
        reln[t] = -1      # release of the previous copy
        made[t] = 0       # a compute has written t (a later compute writing it is a rerun)
        updated[t] = False
    # Released objects per class (sorted runs sized by the releases the sequence holds) and byte chunks.
    for c in range(n_c):
        fresh[c] = class_count[c]
        tok_n[c] = 0
        tok_dead[c] = 0
        tok_off[c + 1] = 0
    ch_dead[0] = 0
    tok_off[0] = 0
    if not by_bytes:
        for i in range(n):
            if kind[i] != COMPUTE and kind[i] != SWAP_IN:
                tok_off[t_class[ref[i]] + 1] += 1
        for c in range(n_c):
            tok_off[c + 1] += tok_off[c]
    for i in range(max(1, tok_off[n_c])):
        tok_amt[i] = 1
    for i in range(3):
        clk[i] = 0.0
    n_ch = 0
    free_bytes = capacity
    for t in range(n_t):
        if resident[t]:
            res[t] = True
            hv[t] = False
            if by_bytes:
                free_bytes -= t_mem[t]
            else:
                fresh[t_class[t]] -= 1
                if fresh[t_class[t]] < 0:
                    return ERR_INITIAL, -1, 0, 0
    if by_bytes:
        if free_bytes < 0:
            return ERR_INITIAL, -1, 0, 0
        if free_bytes > 0:
            ch_bytes[0] = free_bytes
            ch_time[0] = 0.0
            ch_node[0] = -1
            n_ch = 1
    nd = 0
    for i in range(n):
        k = kind[i]
        r = ref[i]
        dep_ptr[i] = nd
        if k == COMPUTE:
            s = clk[0]
            for j in range(in_ptr[r], in_ptr[r + 1]):
                t = in_idx[j]
                if not res[t]:
                    return ERR_INPUT_MISSING, i, 0, 0
                m = mat[t]
                if m >= 0:
                    dep_idx[nd] = m
                    nd += 1
                    if end[m] > s:
                        s = end[m]
            rerun = False
            for j in range(out_ptr[r], out_ptr[r + 1]):
                t = out_idx[j]
                if made[t] != 0:
                    rerun = True
                    d = reln[t]
                    if d >= 0:  # the copy it regenerates is gone before it starts (validator rule 2)
                        dep_idx[nd] = d
                        nd += 1
                        if end[d] > s:
                            s = end[d]
            n_tmp = 0
            if by_bytes:
                need = op_ws[r]
                for j in range(out_ptr[r], out_ptr[r + 1]):
                    need += t_mem[out_idx[j]]
                if need > 0:
                    s2, n_ch, n_tmp = _take_bytes(need, s, ch_bytes, ch_time, ch_node, n_ch, tmp, 0, ch_dead)
                    if s2 < 0:
                        return ERR_NO_MEMORY, i, 0, 0
                    s = s2
            for j in range(out_ptr[r], out_ptr[r + 1]):
                t = out_idx[j]
                if res[t]:
                    return ERR_OUTPUT_RESIDENT, i, 0, 0
                if not by_bytes:
                    tt, node = _take_token(t_class[t], s, tok_off, tok_n, tok_time, tok_node, tok_amt, fresh, pend1, tok_dead)
                    if node == -2:
                        return ERR_NO_MEMORY, i, 0, 0
                    if tt > s:
                        s = tt
                    if node >= 0:
                        tmp[n_tmp] = node
                        n_tmp += 1
            for j in range(n_tmp):
                dep_idx[nd] = tmp[j]
                dep_own[nd] = True
                nd += 1
            start[i] = s
            end[i] = s + op_time[r]
            clk[0] = end[i]
            if not rerun:
                for j in range(upd_ptr[r], upd_ptr[r + 1]):
                    t = upd_idx[j]
                    hv[t] = False
                    hvn[t] = -1
                    updated[t] = True
            for j in range(in_ptr[r], in_ptr[r + 1]):
                last[in_idx[j]] = i
            for j in range(out_ptr[r], out_ptr[r + 1]):
                t = out_idx[j]
                res[t] = True
                mat[t] = i
                last[t] = i
                made[t] = 1
                if not rerun:
                    hv[t] = False
                    hvn[t] = -1
            if by_bytes and op_ws[r] > 0:
                n_ch = F.insert(ch_time, ch_node, ch_bytes, 0, n_ch, end[i], i, op_ws[r])
        elif k == SWAP_IN:
            t = r
            if res[t]:
                return ERR_LOAD_RESIDENT, i, 0, 0
            if not hv[t]:
                return ERR_LOAD_NO_HOST, i, 0, 0
            s = clk[1]
            for d in (hvn[t], reln[t]):
                if d >= 0:
                    dep_idx[nd] = d
                    nd += 1
                    if end[d] > s:
                        s = end[d]
            if by_bytes:
                if t_mem[t] > 0:
                    s2, n_ch, n_tmp = _take_bytes(t_mem[t], s, ch_bytes, ch_time, ch_node, n_ch, tmp, 0, ch_dead)
                    if s2 < 0:
                        return ERR_NO_MEMORY, i, 0, 0
                    s = s2
                    for j in range(n_tmp):
                        dep_idx[nd] = tmp[j]
                        dep_own[nd] = True
                        nd += 1
            else:
                tt, node = _take_token(t_class[t], s, tok_off, tok_n, tok_time, tok_node, tok_amt, fresh, pend1, tok_dead)
                if node == -2:
                    return ERR_NO_MEMORY, i, 0, 0
                if tt > s:
                    s = tt
                if node >= 0:
                    dep_idx[nd] = node
                    dep_own[nd] = True
                    nd += 1
            start[i] = s
            end[i] = s + t_bytes[t] / h2d_bw + latency
            clk[1] = end[i]
            stats[S_H2D] += t_bytes[t]
            stats[S_NIN] += 1
            res[t] = True
            mat[t] = i
            last[t] = i
        else:
            t = r
            if not res[t]:
                return ERR_RELEASE_ABSENT, i, 0, 0
            dead = (not t_persist[t]) and k == FREE  # marked by the backward pass
            s = 0.0
            d = last[t]
            if d >= 0:
                dep_idx[nd] = d
                nd += 1
                s = end[d]
            if dead or hv[t]:
                kind[i] = FREE
                start[i] = s
                end[i] = s
                stats[S_NFREE] += 1
            else:
                kind[i] = SWAP_OUT
                if clk[2] > s:
                    s = clk[2]
                start[i] = s
                end[i] = s + t_bytes[t] / d2h_bw + latency
                clk[2] = end[i]
                stats[S_D2H] += t_bytes[t]
                stats[S_NOUT] += 1
                hv[t] = True
                hvn[t] = i
            res[t] = False
            reln[t] = i
            mat[t] = -1
            last[t] = -1
            if by_bytes:
                if t_mem[t] > 0:
                    n_ch = F.insert(ch_time, ch_node, ch_bytes, 0, n_ch, end[i], i, t_mem[t])
            else:
                c = t_class[t]
                tok_n[c] = F.insert(tok_time, tok_node, tok_amt, tok_off[c], tok_n[c], end[i], i, 1)
    dep_ptr[n] = nd
    if stop >= 0:
        return OK, -1, nd, n_ch
    for t in range(n_t):
        if res[t] and not resident[t]:
            return ERR_END_LEFT, -1 - t, 0, 0
        if resident[t] and not res[t]:
            return ERR_END_MISSING, -1 - t, 0, 0
        if t_persist[t] and not res[t] and not hv[t]:
            return ERR_END_STALE, -1 - t, 0, 0
    return OK, -1, nd, n_ch




def walk_scratch(n: int, n_t: int, n_c: int, dep_cap: int) -> tuple:
    """Arrays for walk_into: (outputs..., state..., pool..., temporaries)."""
    ch_cap = 2 * n + 2
    return (np.zeros(n), np.zeros(n), np.zeros(n + 1, np.int64), np.empty(dep_cap, np.int64),
            np.zeros(dep_cap, np.bool_), np.zeros(5),
            np.zeros(n_t, np.bool_), np.zeros(n_t, np.int64), np.zeros(n_t, np.int64), np.zeros(n_t, np.bool_),
            np.zeros(n_t, np.int64), np.zeros(n_t, np.int64), np.zeros(n_t, np.int64), np.zeros(n_t, np.bool_),
            np.zeros(n_c, np.int64), np.zeros(n_c + 1, np.int64), np.zeros(n_c, np.int64), np.empty(n + 2),
            np.empty(n + 2, np.int64), np.ones(n + 2, np.int64), np.empty(2, np.int64),
            np.zeros(ch_cap, np.int64), np.zeros(ch_cap), np.zeros(ch_cap, np.int64), np.zeros(3),
            np.empty(ch_cap + 16, np.int64), np.zeros(n_c, np.int64), np.zeros(1, np.int64))


def walk(kind_in, ref, t_bytes, t_persist, in_ptr, in_idx, out_ptr, out_idx, upd_ptr, upd_idx, op_time, op_ws,
         by_bytes, t_class, class_count, capacity, t_mem, h2d_bw, d2h_bw, latency, resident, dep_cap, stop):
    """Returns (status, err_node, kind, start, end, dep_ptr, dep_idx, dep_own, stats, pool state).

    With stop < len(kind_in) only nodes [0, stop) are walked, the end-of-iteration checks are skipped and
    the pool state (free objects and byte chunks with their release times) is the one at that point.
    """
    n = kind_in.shape[0] if stop < 0 else stop
    kind = np.array(kind_in, dtype=np.int8)  # whole: the release kinds of a prefix depend on what follows it
    scr = walk_scratch(n, t_bytes.shape[0], class_count.shape[0], dep_cap)
    status, err, nd, n_ch = walk_into(kind, ref, n, t_bytes, t_persist, in_ptr, in_idx, out_ptr, out_idx, upd_ptr,
                                      upd_idx, op_time, op_ws, by_bytes, t_class, class_count, capacity,
                                      t_mem, h2d_bw, d2h_bw, latency, resident, stop, *scr)
    start, end, dep_ptr, dep_idx, dep_own, stats = scr[:6]
    fresh, tok_off, tok_n, tok_time, _tok_node, tok_amt = scr[14:20]
    ch_bytes, ch_time = scr[21], scr[22]
    state = (fresh, tok_off, tok_n, tok_time, tok_amt, ch_bytes, ch_time, n_ch if status == OK else 0)
    return status, err, kind[:n], start, end, dep_ptr, dep_idx[:nd], dep_own[:nd], stats, state



def dep_capacity(arrays, kind: np.ndarray, ref: np.ndarray, n_nodes: int) -> int:  # noqa: ANN001 - GraphArrays
    """Room for the edges `walk_into` makes on a sequence of `n_nodes` nodes: each compute waits on its inputs'
    copies and, a rerun, on each output's previous release; each copy or allocation on a few more."""
    comp = ref[kind == COMPUTE]
    n_in = int((arrays.in_ptr[comp + 1] - arrays.in_ptr[comp]).sum()) if len(comp) else 0
    n_out = int((arrays.out_ptr[comp + 1] - arrays.out_ptr[comp]).sum()) if len(comp) else 0
    return n_in + 2 * n_out + 4 * n_nodes + 8

@dataclass(frozen=True)
class Problem:
    """What stays fixed while refining one plan: graph, device, pool, schedule, impls, initial residents."""

    graph: Graph
    device: Device
    pool: PoolArrays
    schedule: np.ndarray
    op_time: np.ndarray
    op_ws: np.ndarray
    impl_choice: np.ndarray | None
    resident: np.ndarray
    options: object = None   # the PlannerOptions the plan was made with (carried into the AugmentedGraph)

    @staticmethod
    def from_augmented(aug) -> "Problem":
        return Problem(aug.graph, aug.device, aug.pool, np.asarray(aug.schedule, np.int32), aug.op_time, aug.op_ws,
                       aug.impl_choice, np.asarray(aug.resident_at_start, np.bool_), aug.options)


@dataclass
class Timeline:
    """A walked sequence: node kinds (releases resolved), times, and the edges (ownership flagged)."""

    kind: np.ndarray
    ref: np.ndarray
    start: np.ndarray
    end: np.ndarray
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    dep_own: np.ndarray
    stats: dict

    @property
    def n(self) -> int:
        return len(self.kind)

    @property
    def makespan(self) -> float:
        return float(self.end.max()) if self.n else 0.0

    def durations(self) -> np.ndarray:
        return self.end - self.start

    def reruns(self) -> np.ndarray:
        """Per node: a compute of an op that ran earlier in the sequence (a recompute event)."""
        out = np.zeros(self.n, np.bool_)
        comp = np.flatnonzero(self.kind == COMPUTE)
        _, first = np.unique(self.ref[comp], return_index=True)
        out[comp] = True
        out[comp[first]] = False
        return out

    def confirmed_makespan(self, atol: float) -> float | None:
        """The makespan `hybrid.simulator.simulate` gives from this timeline's own edges, or None where its end
        times differ from ours by more than `atol`: the check every refinement edit must pass to count."""
        from hybrid.simulator import simulate

        _, end = simulate(self.kind, self.end - self.start, self.dep_ptr, self.dep_idx)
        if not np.allclose(end, self.end, rtol=0, atol=atol):
            return None
        return float(end.max()) if len(end) else 0.0


class SequenceError(Exception):
    """A sequence that is not a valid augmented graph (internal: refinement rejects the edit)."""

    def __init__(self, code: int, node: int) -> None:
        super().__init__(f"{ERROR_TEXT.get(code, 'invalid sequence')} (node {node})")
        self.code = code
        self.node = node


def _walk(p: Problem, kind: np.ndarray, ref: np.ndarray, stop: int):
    a = p.graph.arrays
    dep_cap = dep_capacity(a, kind, ref, len(kind))
    d = p.device
    return walk(
        kind, ref, a.t_bytes, a.t_persistent, a.in_ptr, a.in_idx, a.out_ptr, a.out_idx, a.upd_ptr, a.upd_idx,
        np.asarray(p.op_time, np.float64), np.asarray(p.op_ws, np.int64), p.pool.by_bytes,
        p.pool.t_class, p.pool.class_count, np.int64(p.pool.capacity), p.pool.t_mem, float(d.h2d_bytes_per_s),
        float(d.d2h_bytes_per_s), float(d.transfer_latency_s), p.resident, dep_cap, stop)


def rebuild(p: Problem, kind: np.ndarray, ref: np.ndarray) -> Timeline:
    """Walk a node sequence; raises SequenceError if it is not a valid, periodic augmented graph."""
    kind = np.asarray(kind, np.int8)
    ref = np.asarray(ref, np.int64)
    status, err, k, s, e, dp, di, do, st, _ = _walk(p, kind, ref, -1)
    if status != OK:
        raise SequenceError(int(status), int(err))
    stats = {"bytes_h2d": int(st[S_H2D]), "bytes_d2h": int(st[S_D2H]), "swap_ins": int(st[S_NIN]),
             "swap_outs": int(st[S_NOUT]), "frees": int(st[S_NFREE])}
    return Timeline(k, ref.astype(np.int32), s, e, dp, di.astype(np.int32), do, stats)


@dataclass
class PoolState:
    """Free memory after a prefix of a timeline: per class, untouched objects and released ones (with times);
    for a byte pool, released chunks (bytes, times). What a window can allocate from, and from when."""

    fresh: np.ndarray                 # per class
    released: list[np.ndarray]        # per class: release times of free objects
    chunk_bytes: np.ndarray
    chunk_time: np.ndarray


def pool_state(p: Problem, tl: Timeline, stop: int) -> PoolState:
    status, err, *_, state = _walk(p, tl.kind, tl.ref.astype(np.int64), stop)
    if status != OK:
        raise SequenceError(int(status), int(err))
    fresh, tok_off, tok_n, tok_time, tok_amt, ch_bytes, ch_time, n_ch = state
    # Entries emptied in place (amount 0) are not free memory.
    released = []
    for c in range(len(tok_n)):
        sl = slice(tok_off[c], tok_off[c] + tok_n[c])
        released.append(tok_time[sl][tok_amt[sl] > 0].copy())
    live = ch_bytes[:n_ch] > 0
    return PoolState(fresh.copy(), released, ch_bytes[:n_ch][live].copy(), ch_time[:n_ch][live].copy())


def to_augmented(p: Problem, tl: Timeline):
    """The timeline as a `hybrid.swap.planner.AugmentedGraph` (three streams, FIFO in node order)."""
    from hybrid.swap.augmented import AugmentedGraph, PlannerOptions

    opts = p.options if p.options is not None else PlannerOptions()
    if not getattr(opts, "overlap", True):
        opts = replace(opts, overlap=True)
    rerun = tl.reruns()
    return AugmentedGraph(p.graph, p.device, p.pool, p.schedule, p.op_time, p.op_ws, p.impl_choice, opts,
                          tl.kind.copy(), tl.ref.copy(), tl.start.copy(), tl.end.copy(), tl.dep_ptr.copy(),
                          tl.dep_idx.copy(), p.resident.copy(), dict(tl.stats), rerun if rerun.any() else None)
