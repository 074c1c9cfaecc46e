"""Drop-and-recompute: which tensors may be freed without a copy, and how they come back.

When the swap kernel (hybrid.swap.kernel) evicts a tensor that has no valid
host copy, it may drop it instead of swapping it out, and rerun its producer
(a `compute` event with `"recompute": true`) before the tensor's next use.
That pays compute time instead of PCIe time both ways: on graphs whose
activations are mostly outputs of cheap memory-bound ops the link is the
bottleneck, and a few milliseconds of recompute replace tens of milliseconds
of copies.

Which ops may rerun: `hybrid.graph.rerun` (the validator and the executor
read the same rule). A rerun regenerates every output of its op: outputs
that are still resident are dropped just before it (their values come back
equal), and outputs nobody reads any more are freed right after. Persistent
tensors are never dropped.

A dropped tensor `v` is regenerated at its next use `q` from its producer's
inputs. The kernel drops `v` only when that is possible at `q` (`drop_check`):
every input is persistent and not updated before `q`, or still has a use at
or after `q` (it is resident, swapped out, or itself dropped and regenerated
first), or is dead by then and can itself be regenerated the same way,
within `depth` producers in a chain. The inputs `v` relies on are protected
until `q`: they may be swapped out but not dropped, which keeps every chain
within its depth. At `q`, `expand_chain` lists what to do in order: swap in
the inputs on the host, rerun the producers bottom-up, then free the dead
intermediates. The cost of dropping is the chain's compute time; the kernel
drops when it is at most `ratio` times the copy time both ways (the GA's
recompute gene sets `ratio`; 0 is swap-only).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from hybrid.graph import Graph
from hybrid.graph.rerun import own_updates_exempt, why_not_rerunnable
from hybrid.swap._tensor_state import CUR, DEP, DRP, PIN, PROT, RES

# need-list actions (the kernel's per-op list of what to do before the op runs)
A_SWAPIN, A_ALLOC, A_WS, A_RC, A_RCWS, A_FREE, A_RCBEGIN, A_PREFREE, A_CACHE = 0, 1, 2, 3, 4, 5, 6, 7, 8


def recomputable_ops(graph: Graph) -> np.ndarray:
    """Per op: may the planner rerun it (`hybrid.graph.rerun.why_not_rerunnable`)."""
    return np.array([why_not_rerunnable(graph, op) == "" for op in graph.ops], dtype=np.bool_)


def own_updates_exempt_ops(graph: Graph) -> np.ndarray:
    """Per op: its own in-place updates do not stop a rerun (redone on copies, or the generator replayed)."""
    return np.array([bool(op.updates) and own_updates_exempt(graph, op) for op in graph.ops], dtype=np.bool_)


@njit(cache=True, _nrt=False)
def first_updates(sched, upd_ptr, upd_idx, out):
    """out[t]: the schedule position of t's first in-place update, len(sched) if none."""
    n = sched.shape[0]
    for t in range(out.shape[0]):
        out[t] = n
    for p in range(n):
        o = sched[p]
        for k in range(upd_ptr[o], upd_ptr[o + 1]):
            t = upd_idx[k]
            if out[t] == n:
                out[t] = p


@njit(cache=True, inline="always", _nrt=False)
def last_use(x, use_ptr, use_pos):
    return use_pos[use_ptr[x + 1] - 1] if use_ptr[x + 1] > use_ptr[x] else -1


@njit(cache=True, inline="always", _nrt=False)
def next_use(x, ts, use_ptr, use_pos):
    i = use_ptr[x] + ts[x, CUR]
    return use_pos[i] if i < use_ptr[x + 1] else -1


@njit(cache=True, inline="always", _nrt=False)
def _own_update(o, x, op_own, upd_ptr, upd_idx):
    """Does op o update x itself, in a way a rerun redoes on copies or replays (hybrid.graph.rerun)?"""
    if not op_own[o]:
        return False
    for k in range(upd_ptr[o], upd_ptr[o + 1]):
        if upd_idx[k] == x:
            return True
    return False


@njit(cache=True, _nrt=False)
def drop_check(v, q, commit, ts, t_prod, op_rc, op_own, t_persist, in_ptr, in_idx, upd_ptr, upd_idx, use_ptr,
               use_pos, t_updpos, n_ops, op_time, rc_cost, depth_max, stk_t, stk_l):
    """Can v, dropped now, be regenerated at its next use q? Returns (ok, chain compute time, chain depth).

    With `commit`, the inputs the chain relies on are protected until q (checked first without it)."""
    stk_t[0] = v
    stk_l[0] = 1
    sp = 1
    cost = 0.0
    depth = 0
    cap = stk_t.shape[0]
    while sp > 0:
        sp -= 1
        t = stk_t[sp]
        lvl = stk_l[sp]
        o = t_prod[t]
        if o < 0 or not op_rc[o] or t_persist[t] or t_updpos[t] < n_ops:
            return False, 0.0, 0
        cost += op_time[o]
        if lvl > depth:
            depth = lvl
        for k in range(in_ptr[o], in_ptr[o + 1]):
            x = in_idx[k]
            if t_updpos[x] < q and not _own_update(o, x, op_own, upd_ptr, upd_idx):
                return False, 0.0, 0  # its value changes before q: the rerun would read another one
            if t_persist[x]:
                continue
            if last_use(x, use_ptr, use_pos) >= q:  # alive at q: resident, on the host, or dropped itself
                if ts[x, DRP] == 1:
                    d = lvl + ts[x, DEP]
                    if d > depth_max:
                        return False, 0.0, 0
                    if d > depth:
                        depth = d
                    cost += rc_cost[x]
                if commit and ts[x, PROT] < q:
                    ts[x, PROT] = q
                continue
            # dead by q: regenerated on the way, then freed
            if lvl + 1 > depth_max or sp >= cap:
                return False, 0.0, 0
            stk_t[sp] = x
            stk_l[sp] = lvl + 1
            sp += 1
    return True, cost, depth


@njit(cache=True, _nrt=False)
def expand_chain(t, stamp, ts, t_prod, t_persist, in_ptr, in_idx, out_ptr, out_idx, use_ptr, by_bytes, op_ws, mark,
                 nd_t, nd_a, n_nd, tr, n_tr, stk_t, stk_k):
    """Append to the need list what regenerates dropped tensor t: swap-ins of inputs on the host, then the
    producers' reruns bottom-up, each as RCBEGIN, PREFREE of its op's other outputs still resident, RCWS,
    ALLOC of those other outputs, RC; outputs nobody reads any more go to `tr` (freed after the chains).
    Returns (n_nd, n_tr), or (-1, -1) when the lists or the stack overflow."""
    cap = stk_t.shape[0]
    stk_t[0] = t
    stk_k[0] = in_ptr[t_prod[t]]
    mark[t] = stamp
    ts[t, PIN] = stamp
    sp = 1
    while sp > 0:
        r = stk_t[sp - 1]
        o = t_prod[r]
        k = stk_k[sp - 1]
        if k < in_ptr[o + 1]:
            stk_k[sp - 1] = k + 1
            x = in_idx[k]
            ts[x, PIN] = stamp
            if mark[x] == stamp or ts[x, RES] == 1:
                continue
            mark[x] = stamp
            dead = use_ptr[x] + ts[x, CUR] >= use_ptr[x + 1]
            if not t_persist[x] and (ts[x, DRP] == 1 or dead):
                if sp >= cap:
                    return -1, -1
                if dead and ts[x, DRP] == 0:
                    if n_tr >= tr.shape[0]:
                        return -1, -1
                    tr[n_tr] = x
                    n_tr += 1
                stk_t[sp] = x
                stk_k[sp] = in_ptr[t_prod[x]]
                sp += 1
            else:
                if n_nd >= nd_t.shape[0]:
                    return -1, -1
                nd_t[n_nd] = x
                nd_a[n_nd] = A_SWAPIN
                n_nd += 1
        else:
            sp -= 1
            n_o = out_ptr[o + 1] - out_ptr[o]
            if n_nd + 2 * n_o + 3 > nd_t.shape[0] or n_tr + n_o > tr.shape[0]:
                return -1, -1
            nd_t[n_nd] = r
            nd_a[n_nd] = A_RCBEGIN
            n_nd += 1
            for j in range(out_ptr[o], out_ptr[o + 1]):
                u = out_idx[j]
                ts[u, PIN] = stamp
                if u != r:  # dropped just before the rerun if resident then (decided when the list is walked)
                    nd_t[n_nd] = u
                    nd_a[n_nd] = A_PREFREE
                    n_nd += 1
            if by_bytes and op_ws[o] > 0:
                nd_t[n_nd] = r
                nd_a[n_nd] = A_RCWS
                n_nd += 1
            for j in range(out_ptr[o], out_ptr[o + 1]):
                u = out_idx[j]
                if u == r:
                    continue
                nd_t[n_nd] = u
                nd_a[n_nd] = A_ALLOC
                n_nd += 1
                if mark[u] != stamp:
                    mark[u] = stamp
                    if use_ptr[u] + ts[u, CUR] >= use_ptr[u + 1] and not t_persist[u]:
                        tr[n_tr] = u  # regenerated, read by nobody: freed after the chains
                        n_tr += 1
            nd_t[n_nd] = r
            nd_a[n_nd] = A_RC
            n_nd += 1
    return n_nd, n_tr


@njit(cache=True, inline="always", _nrt=False)
def _feeds_dropped(x, ts, sched, use_ptr, use_pos, out_ptr, out_idx, mark, stamp):
    """Does an op that read x make a tensor that is dropped now and not regenerated by this need list?"""
    for i in range(use_ptr[x], use_ptr[x + 1]):
        o = sched[use_pos[i]]
        for k in range(out_ptr[o], out_ptr[o + 1]):
            u = out_idx[k]
            if u != x and ts[u, DRP] == 1 and ts[u, RES] == 0 and mark[u] != stamp:
                return True
    return False


@njit(cache=True, _nrt=False)
def place_frees(nd_t, nd_a, n_nd, tr, n_tr, t_prod, in_ptr, in_idx, out_ptr, out_idx, last, ts, sched, use_ptr,
                use_pos, mark, stamp):
    """Put the free of each chain transient in `tr` right after the last rerun in the need list that reads or
    makes it (in place; `last`: scratch of at least n_tr). Freed only after every chain, a long chain's
    intermediates were all resident at once: at tight memory no victim was left and the walk failed.
    A transient that an op makes another dropped tensor from (a fused q/k/v projection read by three
    splits) is kept instead (A_CACHE): resident, no later use, freed when first evicted; the next chain
    through it finds it there rather than rerunning its producer again. Returns the need list's new length."""
    for j in range(n_tr):
        x = tr[j]
        best = n_nd - 1
        for i in range(n_nd):
            if nd_a[i] != A_RC:
                continue
            o = t_prod[nd_t[i]]
            hit = False
            for k in range(in_ptr[o], in_ptr[o + 1]):
                if in_idx[k] == x:
                    hit = True
            for k in range(out_ptr[o], out_ptr[o + 1]):
                if out_idx[k] == x:
                    hit = True
            if hit:
                best = i
        last[j] = best
        if _feeds_dropped(x, ts, sched, use_ptr, use_pos, out_ptr, out_idx, mark, stamp):
            last[j] = -2 - best   # cached, not freed
    # Merge from the back: the write position never falls below the read position.
    w = n_nd + n_tr - 1
    for r in range(n_nd - 1, -1, -1):
        for j in range(n_tr - 1, -1, -1):
            if last[j] == r or last[j] == -2 - r:
                nd_t[w] = tr[j]
                nd_a[w] = A_FREE if last[j] >= 0 else A_CACHE
                w -= 1
        nd_t[w] = nd_t[r]
        nd_a[w] = nd_a[r]
        w -= 1
    return n_nd + n_tr


def scratch(n_t: int, max_ops_inputs: int) -> tuple[np.ndarray, ...]:
    """Reusable arrays for the kernel's recompute path: first updates, chain costs, marks, need list,
    transients, two DFS stacks, and the victims a recompute-only walk passed over."""
    cap = 4 * max_ops_inputs + 64
    return (np.zeros(n_t, np.int64), np.zeros(n_t, np.float64), np.full(n_t, -1, np.int64),
            np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(cap, np.int64),
            np.zeros(256, np.int64), np.zeros(256, np.int64), np.zeros(n_t + 1, np.int64))
