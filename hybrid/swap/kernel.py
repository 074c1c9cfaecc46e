"""The swap planner's inner loop (SwapAdvisor §4.2) as a Numba kernel.

One call walks the schedule once. For each op it makes its inputs resident
(evicting victims chosen by `hybrid.swap.eviction`), places its outputs, and emits
the augmented graph's nodes — compute, swap_in, swap_out, free — with their
dependency (control) edges, timing each node as it is emitted on three FIFO
streams (compute, h2d, d2h). Emission order is a topological order of the
augmented graph, so timing while emitting equals re-simulating it afterwards
(`hybrid.simulator` does exactly that, and tests check the two agree).

Memory safety comes from ownership, not from a global clock: in a size-class
pool every tensor takes one object whose previous holder's release node
becomes a dependency of the allocation; in a byte pool every allocation takes
bytes from released chunks (earliest release first) and depends on each
chunk's release node. So however long each node really takes, no instant
holds more than the pool — the executor can rely on the edges alone.

Everything here is arrays; `hybrid.swap.planner` wraps it for Python callers.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from hybrid.swap._heap import heap_pop, heap_push
from hybrid.swap import eviction as E
from hybrid.swap import recompute as R
from hybrid.swap import addresses as A

# node kinds (also stream index for the first three): the plan's event kinds
from hybrid.plan.events import COMPUTE, FREE, SWAP_IN, SWAP_OUT  # noqa: F401
from hybrid.swap._tensor_state import CUR, DEP, DRP, EVI, HV, HVN, INIT, LNODE, LPOS, MAT, N_STATE, PIN, PROT, RELN, RES
# status codes
OK, INFEASIBLE, CHAIN_OVERFLOW = 0, 1, 2
# stats slots
ST_H2D, ST_D2H, ST_NIN, ST_NOUT, ST_NFREE, ST_MAKESPAN, ST_NRC, ST_RCTIME = range(8)


@njit(cache=True)
def schedule_uses(sched, in_ptr, in_idx, n_tensors):
    """CSR of each tensor's use positions (as an input) in schedule order."""
    n_ops = sched.shape[0]
    counts = np.zeros(n_tensors + 1, dtype=np.int64)
    for p in range(n_ops):
        o = sched[p]
        for k in range(in_ptr[o], in_ptr[o + 1]):
            counts[in_idx[k] + 1] += 1
    use_ptr = np.cumsum(counts)
    fill = use_ptr[:-1].copy()
    use_pos = np.empty(use_ptr[-1], dtype=np.int64)
    for p in range(n_ops):
        o = sched[p]
        for k in range(in_ptr[o], in_ptr[o + 1]):
            t = in_idx[k]
            use_pos[fill[t]] = p
            fill[t] += 1
    return use_ptr, use_pos


def scratch(n_t: int, n_c: int, obj_slots: int, node_cap: int):
    """Reusable arrays for `walk` (classes up to n_c, released-object slots up to obj_slots)."""
    chunk_cap = node_cap + n_t + 2  # releases + workspaces + dropped residents
    return (np.zeros((n_t, N_STATE), np.int64), np.zeros(n_c, np.int64), np.zeros(n_c, np.int64),
            np.zeros(n_c + 1, np.int64), np.empty(obj_slots, np.float64), np.empty(obj_slots, np.int64),
            np.zeros(n_c, np.int64), np.zeros(n_c, np.int64), np.zeros(chunk_cap, np.int64), np.full(chunk_cap, -1, np.int64),
            np.empty(chunk_cap, np.float64), np.empty(chunk_cap, np.int64), np.empty(chunk_cap + 64, np.int64),
            np.zeros(3, np.int64), np.zeros(3, np.float64), np.zeros(2, np.int64))


@njit(cache=True, inline="always", _nrt=False)
def _emit(kind, ref, dur, ctr, node_kind, node_ref, node_start, node_end, dep_ptr, dep_idx, clk, serialize):
    """Close the node whose deps were pushed since dep_ptr[k]; time it on its stream."""
    k = ctr[0]
    s = 0.0
    if kind != FREE:
        lane = 0 if serialize else kind
        s = clk[lane]
    for j in range(dep_ptr[k], ctr[1]):
        e = node_end[dep_idx[j]]
        if e > s:
            s = e
    node_kind[k] = kind
    node_ref[k] = ref
    node_start[k] = s
    node_end[k] = s + dur
    if kind != FREE:
        clk[0 if serialize else kind] = s + dur
    ctr[0] = k + 1
    dep_ptr[k + 1] = ctr[1]
    return k


@njit(cache=True, inline="always", _nrt=False)
def _push_dep(d, ctr, dep_idx):
    if d >= 0:
        dep_idx[ctr[1]] = d
        ctr[1] += 1


@njit(cache=True, inline="always", _nrt=False)
def _release(t, drop, t_bytes, d2h_bw, latency, ts, ctr, node_kind, node_ref, node_start, node_end, dep_ptr,
             dep_idx, clk, serialize, stats):
    """Emit t's release after its last touch: a free if `drop` (host copy valid, or not needed), else a
    swap_out that makes the host copy valid. Returns the release node."""
    dep_ptr[ctr[0]] = ctr[1]
    _push_dep(ts[t, LNODE], ctr, dep_idx)
    if drop:
        k = _emit(FREE, t, 0.0, ctr, node_kind, node_ref, node_start, node_end, dep_ptr, dep_idx, clk, serialize)
        stats[ST_NFREE] += 1
    else:
        k = _emit(SWAP_OUT, t, t_bytes[t] / d2h_bw + latency, ctr, node_kind, node_ref, node_start, node_end,
                  dep_ptr, dep_idx, clk, serialize)
        stats[ST_D2H] += t_bytes[t]
        stats[ST_NOUT] += 1
        ts[t, HV] = 1
        ts[t, HVN] = k
    ts[t, RELN] = k
    return k


@njit(cache=True, inline="always", _nrt=False)
def _release_into_pool(t, rel_t, rel_node, by_bytes, t_mem, t_class, chunk_bytes, chunk_node, ckeys, cvals,
                       nc, fresh, hkeys, hvals, hoff, hsize, arena):
    """Return t's memory to the pool as released at rel_t by rel_node (-1: free since time 0).

    nc = [number of chunks, chunk heap size, free bytes]. Returns nothing; updates in place. In an arena the
    address segments keep t as their last occupant (its release node is ts[t, RELN]): nothing to do."""
    if arena:
        return
    if by_bytes:
        nc[2] += t_mem[t]
        if t_mem[t] > 0:
            cid = nc[0]
            chunk_bytes[cid] = t_mem[t]
            chunk_node[cid] = rel_node
            nc[1] = heap_push(ckeys, cvals, 0, nc[1], rel_t, cid)
            nc[0] = cid + 1
    else:
        c = t_class[t]
        if rel_node < 0:
            fresh[c] += 1
        else:
            hsize[c] = heap_push(hkeys, hvals, hoff[c], hsize[c], rel_t, rel_node)


@njit(cache=True, inline="always", _nrt=False)
def _release_workspace(nbytes, k, node_end, chunk_bytes, chunk_node, ckeys, cvals, nc):
    """A byte pool gets compute node k's workspace back when k ends."""
    cid = nc[0]
    chunk_bytes[cid] = nbytes
    chunk_node[cid] = k
    nc[1] = heap_push(ckeys, cvals, 0, nc[1], node_end[k], cid)
    nc[0] = cid + 1
    nc[2] += nbytes


@njit(cache=True, inline="always", _nrt=False)
def _droppable(v, p, ts, t_prod, op_rc, op_own, t_persist, in_ptr, in_idx, upd_ptr, upd_idx, use_ptr, use_pos,
               t_updpos, n_ops, op_time, rc_cost, rc_depth, stk_t, stk_k):
    """May victim v (no host copy) be dropped now and regenerated at its next use?"""
    if rc_depth <= 0 or ts[v, PROT] >= p:
        return False
    qn = R.next_use(v, ts, use_ptr, use_pos)
    if qn <= p:
        return False
    ok, _c, _d = R.drop_check(v, qn, False, ts, t_prod, op_rc, op_own, t_persist, in_ptr, in_idx, upd_ptr, upd_idx,
                              use_ptr, use_pos, t_updpos, n_ops, op_time, rc_cost, rc_depth, stk_t, stk_k)
    return ok


@njit(cache=True, _nrt=False)
def _evict(v, p, allow_drop, rc_depth, rc_only, rc_ratio, long_chains, ts, t_prod, op_rc, op_own, t_persist, in_ptr,
           in_idx, upd_ptr, upd_idx, use_ptr, use_pos, t_updpos, n_ops, op_time, rc_cost, stk_t, stk_k, t_bytes,
           h2d_bw, d2h_bw, latency, ctr, node_kind, node_ref, node_start, node_end, dep_ptr, dep_idx, clk, serialize,
           stats):
    """Evict resident v: a free when its host copy is valid, a drop (rerun later) when that is cheaper than
    the copies, else a swap-out. Returns (release time, release node; -1: free since time 0)."""
    ts[v, RES] = 0
    rel_t = 0.0
    rel_node = -1
    if ts[v, INIT] == 1 and ts[v, LPOS] < 0 and allow_drop:
        # An initial resident not yet used: it simply starts on the host instead.
        ts[v, INIT] = 0
        ts[v, HV] = 1
    else:
        drop = ts[v, HV] == 1
        if not drop and rc_depth > 0 and not t_persist[v] and ts[v, PROT] < p:
            # No host copy: drop it and rerun its producer later, when that costs less than the copies.
            qn = R.next_use(v, ts, use_ptr, use_pos)
            if qn > p:
                ok, cost, dep = R.drop_check(v, qn, False, ts, t_prod, op_rc, op_own, t_persist, in_ptr,
                                             in_idx, upd_ptr, upd_idx, use_ptr, use_pos, t_updpos, n_ops,
                                             op_time, rc_cost, rc_depth, stk_t, stk_k)
                # With long chains, the copy's price includes its wait behind the d2h stream's queue: while the
                # link is behind compute, a copy frees memory late and a rerun is the cheaper way out.
                backlog = max(0.0, clk[SWAP_OUT] - clk[0]) if long_chains and not serialize else 0.0
                if ok and (rc_only or cost <= rc_ratio * (t_bytes[v] / d2h_bw + t_bytes[v] / h2d_bw
                                                          + 2.0 * latency + backlog)):
                    R.drop_check(v, qn, True, ts, t_prod, op_rc, op_own, t_persist, in_ptr, in_idx, upd_ptr,
                                 upd_idx, use_ptr, use_pos, t_updpos, n_ops, op_time, rc_cost, rc_depth,
                                 stk_t, stk_k)
                    ts[v, DRP] = 1
                    ts[v, DEP] = dep
                    rc_cost[v] = cost
                    drop = True
        rel_node = _release(v, drop, t_bytes, d2h_bw, latency, ts, ctr, node_kind, node_ref,
                            node_start, node_end, dep_ptr, dep_idx, clk, serialize, stats)
        rel_t = node_end[rel_node]
        if ts[v, INIT] == 1:
            ts[v, EVI] = 1
    return rel_t, rel_node


@njit(cache=True, _nrt=False)
def walk(
    # graph
    t_bytes, t_persist, in_ptr, in_idx, out_ptr, out_idx, upd_ptr, upd_idx, op_time, op_ws,
    # schedule
    sched, use_ptr, use_pos,
    # pool (t_mem: bytes a device copy occupies, aligned; t_bytes above times the copies)
    by_bytes, t_class, class_count, capacity, t_mem,
    # arena (hybrid.swap.addresses): every device copy at its tensor's one offset in [0, capacity); workspaces
    # lie outside the arena (capacity is the usable memory less the largest workspace)
    arena,
    # device
    h2d_bw, d2h_bw, latency,
    # policy
    lru, recency, serialize, keep_persistent, allow_drop, write_back, initial, lookahead,
    # recompute (hybrid.swap.recompute): producer per tensor, may each op rerun, cost ratio, chain depth (0: off),
    # recompute-only (tensors without a host copy are dropped or kept, never swapped out), and long chains
    # (PlannerOptions.long_chains: chain transients freed after their last rerun reader, the d2h backlog priced)
    t_prod, op_rc, op_own, rc_ratio, rc_depth, rc_only, long_chains,
    # outputs
    node_kind, node_ref, node_start, node_end, dep_ptr, dep_idx, init_out, evicted_out, resident_end, stats,
    node_rc, home,
    # scratch (hybrid.swap.kernel.scratch, hybrid.swap.recompute.scratch, hybrid.swap.addresses.scratch),
    # reused so pages stay warm
    scr, cand_scr, rc_scr, ar_scr,
):
    """One pass over the schedule. Returns (status, n_nodes, err_op, err_need)."""
    n_t = t_bytes.shape[0]
    n_c = class_count.shape[0]
    n_ops = sched.shape[0]
    ts, cand_cap, obj_cap, obj_off, hkeys, hvals, hsize, fresh, chunk_bytes, chunk_node, ckeys, cvals, pend, nc, clk, ctr = scr
    bits, summ, q_off, q_t, q_v, q_head, q_tail, ver, cand, group = cand_scr
    t_updpos, rc_cost, mark, nd_t, nd_a, tr, stk_t, stk_k, skipped = rc_scr
    ws_in_pool = by_bytes and not arena   # a byte budget holds the workspaces; an arena leaves them outside
    if rc_depth > 0:
        R.first_updates(sched, upd_ptr, upd_idx, t_updpos)
        for t in range(n_t):
            mark[t] = -1
    for t in range(n_t):
        for j in range(N_STATE):
            ts[t, j] = 0
    for t in range(n_t):
        ts[t, MAT] = -1
        ts[t, LNODE] = -1
        ts[t, LPOS] = -1
        ts[t, HVN] = -1
        ts[t, RELN] = -1
        ts[t, HV] = 1 if t_persist[t] else 0
    # Per-class capacities: candidate notes and objects ever held.
    for c in range(n_c):
        cand_cap[c] = 0
        obj_cap[c] = 0
    for t in range(n_t):
        c = t_class[t]
        u = use_ptr[t + 1] - use_ptr[t]
        cand_cap[c] += 3 + 2 * u
        obj_cap[c] += 2 + u  # allocations in a class: first placement, one per use, one at the end
    obj_off[0] = 0
    for c in range(n_c):
        cand_cap[c] += 8
        if obj_cap[c] > class_count[c]:
            obj_cap[c] = class_count[c]
        obj_cap[c] += 1
        obj_off[c + 1] = obj_off[c] + (0 if by_bytes else obj_cap[c])
    w1, w2 = E.reset(n_c, n_ops, n_t, cand_cap, bits, summ, q_off, q_head, q_tail, ver)
    # Size classes: untouched objects (fresh) and a heap of released objects by release time.
    for c in range(n_c):
        fresh[c] = class_count[c]
        hsize[c] = 0
    # Byte pool: chunks of released bytes in a heap by release time (nc: chunks made, heap size, free bytes).
    nc[0] = 0
    nc[1] = 0
    nc[2] = capacity
    for i in range(3):
        clk[i] = 0.0
    ctr[0] = 0
    ctr[1] = 0
    dep_ptr[0] = 0
    for s in range(stats.shape[0]):
        stats[s] = 0.0
    for i in range(node_rc.shape[0]):
        node_rc[i] = False

    # Initially resident tensors occupy their objects/bytes from time 0 (in an arena: packed from offset 0).
    for t in range(n_t):
        home[t] = -1
    if arena:
        A.reset(capacity, ar_scr)
        top = 0
        prev = -1
        for t in range(n_t):
            if initial[t]:
                home[t] = top
                if t_mem[t] > 0:
                    if top + t_mem[t] > capacity:
                        return INFEASIBLE, 0, -1, top + t_mem[t]
                    if prev >= 0:
                        ar_scr[14][t] = ar_scr[14][prev]   # packed upwards: search from the one below
                    A.occupy(top, t_mem[t], t, ts, ar_scr, pend, 0, use_ptr, use_pos, n_ops, t_persist)
                    top += t_mem[t]
                    prev = t
    for t in range(n_t):
        if initial[t]:
            c = t_class[t]
            if by_bytes:
                nc[2] -= t_mem[t]
            else:
                fresh[c] -= 1
                if fresh[c] < 0:
                    return INFEASIBLE, 0, -1, -1 - c
            ts[t, INIT] = 1
            ts[t, HV] = 0
            ts[t, RES] = 1
            if not (keep_persistent and t_persist[t]):
                E.note(t, c, ts, use_ptr, use_pos, n_ops, lru, bits, summ, w1, w2, q_t, q_v, q_tail, ver)
    if by_bytes and nc[2] < 0:
        return INFEASIBLE, 0, -1, capacity - nc[2]
    if by_bytes and nc[2] > 0:
        chunk_bytes[0] = nc[2]
        chunk_node[0] = -1
        nc[1] = heap_push(ckeys, cvals, 0, nc[1], 0.0, 0)
        nc[0] = 1

    for p in range(n_ops + 1):
        final = p == n_ops
        o = sched[p] if not final else -1
        stamp = p + 1
        if not final:
            for k in range(in_ptr[o], in_ptr[o + 1]):
                ts[in_idx[k], PIN] = stamp
            for k in range(out_ptr[o], out_ptr[o + 1]):
                ts[out_idx[k], PIN] = stamp
        else:
            # End of the iteration: non-persistent tensors and persistent ones not resident at the start leave.
            for t in range(n_t):
                resident_end[t] = ts[t, RES] == 1 and t_persist[t]
            for t in range(n_t):
                if ts[t, RES] == 1 and (not t_persist[t] or ts[t, INIT] == 0):
                    ts[t, RES] = 0
                    k = _release(t, ts[t, HV] == 1 or not t_persist[t], t_bytes, d2h_bw, latency, ts, ctr, node_kind,
                                 node_ref, node_start, node_end, dep_ptr, dep_idx, clk, serialize, stats)
                    _release_into_pool(t, node_end[k], k, by_bytes, t_mem, t_class, chunk_bytes, chunk_node,
                                       ckeys, cvals, nc, fresh, hkeys, hvals, obj_off, hsize, arena)
        n_pend = 0
        n_nd = 0
        if not final:
            # The need list: inputs to bring back (swapped in, or regenerated by rerunning their producers),
            # dead intermediates of those reruns to free, outputs to place, the workspace.
            n_tr = 0
            for k in range(in_ptr[o], in_ptr[o + 1]):
                t = in_idx[k]
                if rc_depth > 0 and ts[t, RES] == 0 and ts[t, DRP] == 1 and mark[t] != stamp:
                    n_nd, n_tr = R.expand_chain(t, stamp, ts, t_prod, t_persist, in_ptr, in_idx, out_ptr, out_idx,
                                                use_ptr, ws_in_pool, op_ws, mark, nd_t, nd_a, n_nd, tr, n_tr, stk_t,
                                                stk_k)
                    if n_nd < 0:
                        return CHAIN_OVERFLOW, ctr[0], o, 0
                else:
                    nd_t[n_nd] = t
                    nd_a[n_nd] = R.A_SWAPIN
                    n_nd += 1
            if n_nd + n_tr + (out_ptr[o + 1] - out_ptr[o]) + 1 > nd_t.shape[0]:
                return CHAIN_OVERFLOW, ctr[0], o, 0
            if long_chains and n_tr > 0:
                # each dead intermediate freed after its last rerun reader (`skipped` is free scratch here)
                n_nd = R.place_frees(nd_t, nd_a, n_nd, tr, n_tr, t_prod, in_ptr, in_idx, out_ptr, out_idx,
                                     skipped, ts, sched, use_ptr, use_pos, mark, stamp)
            else:   # every dead intermediate freed after all the need list's reruns
                for j in range(n_tr):
                    nd_t[n_nd] = tr[j]
                    nd_a[n_nd] = R.A_FREE
                    n_nd += 1
            for k in range(out_ptr[o], out_ptr[o + 1]):
                nd_t[n_nd] = out_idx[k]
                nd_a[n_nd] = R.A_ALLOC
                n_nd += 1
            if ws_in_pool and op_ws[o] > 0:
                nd_t[n_nd] = -1
                nd_a[n_nd] = R.A_WS
                n_nd += 1
        n_need = n_t if final else n_nd
        rc_dep0 = 0
        for q in range(n_need):
            if rc_depth > 0 and (ctr[0] + n_t + 8 > node_kind.shape[0] or ctr[1] + 4 * n_t + 64 > dep_idx.shape[0]):
                return CHAIN_OVERFLOW, ctr[0], o, 1  # reruns made more nodes than the buffers hold: grow, retry
            # What this need is: tensor t (or -1: a workspace), whether it arrives by swap-in or by a rerun.
            t = -1
            act = R.A_ALLOC
            swap_in = False
            if not final:
                t = nd_t[q]
                act = nd_a[q]
                if act == R.A_SWAPIN:
                    if ts[t, RES] == 1:
                        continue
                    swap_in = True
                elif act == R.A_RCBEGIN:
                    rc_dep0 = n_pend  # the rerun waits for every allocation from here on
                    continue
                elif act == R.A_CACHE:
                    if ts[t, RES] == 1:   # no later use: its eviction is a free (hybrid.swap.recompute.place_frees)
                        ts[t, HV] = 1
                        ts[t, HVN] = -1
                        E.note(t, t_class[t], ts, use_ptr, use_pos, n_ops, lru, bits, summ, w1, w2, q_t, q_v, q_tail,
                               ver)
                    continue
                elif act == R.A_FREE or act == R.A_PREFREE:
                    if ts[t, RES] == 1:
                        ts[t, RES] = 0
                        f = _release(t, True, t_bytes, d2h_bw, latency, ts, ctr, node_kind, node_ref, node_start,
                                     node_end, dep_ptr, dep_idx, clk, serialize, stats)
                        _release_into_pool(t, node_end[f], f, by_bytes, t_mem, t_class, chunk_bytes, chunk_node,
                                           ckeys, cvals, nc, fresh, hkeys, hvals, obj_off, hsize, arena)
                    continue
            else:
                # Initial residents evicted during the iteration come back for the next one.
                if not (ts[q, INIT] == 1 and ts[q, RES] == 0):
                    continue
                t = q
                ts[t, PIN] = stamp
                swap_in = True
            m = t  # the tensor taking the memory; -1 for a workspace
            if act == R.A_WS:
                m = -1
                nbytes = op_ws[o]
            elif act == R.A_RCWS:
                m = -1
                nbytes = op_ws[t_prod[t]]
            else:
                nbytes = t_mem[t]
            c = t_class[m] if m >= 0 else 0
            first_dep = n_pend
            if arena:
                # The tensor's home: chosen at its first allocation, where every later copy returns; what is
                # resident there now is evicted (a tensor the op needs too cannot be: the plan fails).
                h = home[m]
                if nbytes > 0:
                    if h < 0:
                        n_skip = 0
                        if rc_only:   # activations that can be neither dropped nor swapped stay: pinned for now
                            for v in range(n_t):
                                if (ts[v, RES] == 1 and ts[v, PIN] != stamp and not t_persist[v] and ts[v, HV] == 0
                                        and not _droppable(v, p, ts, t_prod, op_rc, op_own, t_persist, in_ptr,
                                                           in_idx, upd_ptr, upd_idx, use_ptr, use_pos, t_updpos,
                                                           n_ops, op_time, rc_cost, rc_depth, stk_t, stk_k)):
                                    ts[v, PIN] = stamp
                                    skipped[n_skip] = v
                                    n_skip += 1
                        h = A.choose(nbytes, m, p, stamp, keep_persistent, rc_only, ts, ar_scr, use_ptr, use_pos,
                                     n_ops, t_persist, t_bytes, t_mem, h2d_bw, d2h_bw, latency, node_end, clk[0],
                                     clk[0] if serialize else clk[SWAP_OUT], sched, in_ptr, in_idx, home,
                                     max(A.SCAN, A.SCAN_WORK // max(n_t, 1)))
                        for j in range(n_skip):
                            ts[skipped[j], PIN] = 0
                        if h < 0:
                            return INFEASIBLE, ctr[0], o, nbytes
                    kk = A.find(h, ar_scr[14][m], ar_scr)
                    while kk >= 0 and ar_scr[0][kk] < h + nbytes:
                        v = ar_scr[2][kk]
                        if v >= 0 and v != m and ts[v, RES] == 1:
                            if final or not A.evictable(v, stamp, keep_persistent, rc_only, ts, t_persist) or (
                                    rc_only and not t_persist[v] and ts[v, HV] == 0 and not _droppable(
                                        v, p, ts, t_prod, op_rc, op_own, t_persist, in_ptr, in_idx, upd_ptr, upd_idx,
                                        use_ptr, use_pos, t_updpos, n_ops, op_time, rc_cost, rc_depth, stk_t,
                                        stk_k)):
                                return INFEASIBLE, ctr[0], o, -2 - m * n_t - v   # m's offset holds v
                            _evict(v, p, allow_drop, rc_depth, rc_only, rc_ratio, long_chains, ts, t_prod, op_rc,
                                   op_own, t_persist, in_ptr, in_idx, upd_ptr, upd_idx, use_ptr, use_pos, t_updpos,
                                   n_ops, op_time, rc_cost, stk_t, stk_k, t_bytes, h2d_bw, d2h_bw, latency, ctr,
                                   node_kind, node_ref, node_start, node_end, dep_ptr, dep_idx, clk, serialize, stats)
                        kk = ar_scr[5][kk]
                    n_pend = A.occupy(h, nbytes, m, ts, ar_scr, pend, n_pend, use_ptr, use_pos, n_ops, t_persist)
                home[m] = h if h >= 0 else 0
            # Make room: evict until the class has an object / the pool has the bytes.
            n_skip = 0
            while not arena and ((nc[2] < nbytes) if by_bytes else (fresh[c] + hsize[c] == 0)):
                v = -1
                d2h_clock = clk[0] if serialize else clk[SWAP_OUT]
                if not final:  # at the end only initial residents remain, and they stay
                    v = E.pop_victim(c, p, stamp, lru, recency, keep_persistent, t_persist, ts, sched, in_ptr, in_idx,
                                     t_class, use_ptr, use_pos, n_ops, bits, summ, w1, w2, q_t, q_v, q_head, q_tail, ver,
                                     lookahead, cand, group, node_end, d2h_clock,
                                     t_bytes, d2h_bw, latency)
                if v < 0:
                    return INFEASIBLE, ctr[0], o, (nbytes if by_bytes else -1 - c)
                if rc_only and not t_persist[v] and ts[v, HV] == 0 and not _droppable(
                        v, p, ts, t_prod, op_rc, op_own, t_persist, in_ptr, in_idx, upd_ptr, upd_idx, use_ptr,
                        use_pos, t_updpos, n_ops, op_time, rc_cost, rc_depth, stk_t, stk_k):
                    ts[v, PIN] = stamp  # kept: passed over until this need is met, then a candidate again
                    skipped[n_skip] = v
                    n_skip += 1
                    continue
                rel_t, rel_node = _evict(v, p, allow_drop, rc_depth, rc_only, rc_ratio, long_chains, ts, t_prod,
                                         op_rc, op_own, t_persist, in_ptr, in_idx, upd_ptr, upd_idx, use_ptr, use_pos,
                                         t_updpos, n_ops, op_time, rc_cost, stk_t, stk_k, t_bytes, h2d_bw, d2h_bw,
                                         latency, ctr, node_kind, node_ref, node_start, node_end, dep_ptr, dep_idx,
                                         clk, serialize, stats)
                _release_into_pool(v, rel_t, rel_node, by_bytes, t_mem, t_class, chunk_bytes, chunk_node,
                                   ckeys, cvals, nc, fresh, hkeys, hvals, obj_off, hsize, arena)
            for j in range(n_skip):
                v = skipped[j]
                ts[v, PIN] = 0
                E.note(v, t_class[v], ts, use_ptr, use_pos, n_ops, lru, bits, summ, w1, w2, q_t, q_v, q_tail, ver)
            # Take the room: earliest-released object / chunks; their release nodes become dependencies.
            if arena:
                pass
            elif by_bytes:
                nc[2] -= nbytes
                left = nbytes
                while left > 0:
                    key, cid, nc[1] = heap_pop(ckeys, cvals, 0, nc[1])
                    if chunk_node[cid] >= 0:
                        pend[n_pend] = chunk_node[cid]
                        n_pend += 1
                    if chunk_bytes[cid] > left:
                        chunk_bytes[cid] -= left
                        left = 0
                        nc[1] = heap_push(ckeys, cvals, 0, nc[1], key, cid)
                    else:
                        left -= chunk_bytes[cid]
            else:
                # A released object already free by the time this allocation could start is as good as a
                # fresh one; prefer it so fresh objects stay for later.
                horizon = clk[0] if (serialize or not swap_in) else clk[SWAP_IN]
                off = obj_off[c]
                if hsize[c] > 0 and (fresh[c] == 0 or hkeys[off] <= horizon):
                    key, node, hsize[c] = heap_pop(hkeys, hvals, off, hsize[c])
                    pend[n_pend] = node
                    n_pend += 1
                else:
                    fresh[c] -= 1
            if m >= 0:
                ts[m, RES] = 1
            if swap_in:
                dep_ptr[ctr[0]] = ctr[1]
                for j in range(first_dep, n_pend):
                    _push_dep(pend[j], ctr, dep_idx)
                n_pend = first_dep
                _push_dep(ts[t, HVN], ctr, dep_idx)
                if ts[t, RELN] != ts[t, HVN]:
                    _push_dep(ts[t, RELN], ctr, dep_idx)
                k = _emit(SWAP_IN, t, t_bytes[t] / h2d_bw + latency, ctr, node_kind, node_ref, node_start, node_end, dep_ptr, dep_idx, clk, serialize)
                stats[ST_H2D] += t_bytes[t]
                stats[ST_NIN] += 1
                ts[t, MAT] = k
                ts[t, LNODE] = k
                if final:
                    ts[t, EVI] = 0
            elif act == R.A_RC:
                # The rerun: waits for its swapped-in inputs, the memory it takes, and the drop it undoes.
                o_r = t_prod[t]
                dep_ptr[ctr[0]] = ctr[1]
                for kk in range(in_ptr[o_r], in_ptr[o_r + 1]):
                    mm = ts[in_idx[kk], MAT]
                    if mm >= 0 and node_kind[mm] != COMPUTE:
                        _push_dep(mm, ctr, dep_idx)
                for j in range(rc_dep0, n_pend):
                    _push_dep(pend[j], ctr, dep_idx)
                n_pend = rc_dep0
                # ... and every output's previous device copy: a sibling dropped just before it (PREFREE, freed
                # once its swap-in lands) or still being swapped out holds its copy until that release
                for kk in range(out_ptr[o_r], out_ptr[o_r + 1]):
                    _push_dep(ts[out_idx[kk], RELN], ctr, dep_idx)
                k = _emit(COMPUTE, o_r, op_time[o_r], ctr, node_kind, node_ref, node_start, node_end, dep_ptr,
                          dep_idx, clk, serialize)
                node_rc[k] = True
                stats[ST_NRC] += 1
                stats[ST_RCTIME] += op_time[o_r]
                for kk in range(in_ptr[o_r], in_ptr[o_r + 1]):
                    ts[in_idx[kk], LNODE] = k
                for kk in range(out_ptr[o_r], out_ptr[o_r + 1]):
                    u = out_idx[kk]
                    ts[u, MAT] = k
                    ts[u, LNODE] = k
                    ts[u, DRP] = 0
                    if u != t and use_ptr[u] + ts[u, CUR] < use_ptr[u + 1]:
                        E.note(u, t_class[u], ts, use_ptr, use_pos, n_ops, lru, bits, summ, w1, w2, q_t, q_v, q_tail,
                               ver)
                if ws_in_pool and op_ws[o_r] > 0:
                    _release_workspace(op_ws[o_r], k, node_end, chunk_bytes, chunk_node, ckeys, cvals, nc)
                if use_ptr[t] + ts[t, CUR] < use_ptr[t + 1]:
                    E.note(t, t_class[t], ts, use_ptr, use_pos, n_ops, lru, bits, summ, w1, w2, q_t, q_v, q_tail, ver)
        if final:
            break
        # The compute node: waits for swapped-in inputs and for the release of every object it takes.
        dep_ptr[ctr[0]] = ctr[1]
        for kk in range(in_ptr[o], in_ptr[o + 1]):
            m = ts[in_idx[kk], MAT]
            if m >= 0 and node_kind[m] != COMPUTE:
                _push_dep(m, ctr, dep_idx)
        for j in range(n_pend):
            _push_dep(pend[j], ctr, dep_idx)
        k = _emit(COMPUTE, o, op_time[o], ctr, node_kind, node_ref, node_start, node_end, dep_ptr, dep_idx, clk, serialize)
        for kk in range(upd_ptr[o], upd_ptr[o + 1]):
            t = upd_idx[kk]
            ts[t, HV] = 0
            ts[t, HVN] = -1
        for kk in range(in_ptr[o], in_ptr[o + 1]):
            t = in_idx[kk]
            ts[t, LNODE] = k
            ts[t, LPOS] = p
            ts[t, CUR] += 1
        for kk in range(out_ptr[o], out_ptr[o + 1]):
            t = out_idx[kk]
            ts[t, MAT] = k
            ts[t, LNODE] = k
            ts[t, LPOS] = p
        if ws_in_pool and op_ws[o] > 0:
            _release_workspace(op_ws[o], k, node_end, chunk_bytes, chunk_node, ckeys, cvals, nc)
        # Tensors with no later use die here; the others become eviction candidates with fresh keys.
        for phase in range(2):
            lo = in_ptr[o] if phase == 0 else out_ptr[o]
            hi = in_ptr[o + 1] if phase == 0 else out_ptr[o + 1]
            for kk in range(lo, hi):
                t = in_idx[kk] if phase == 0 else out_idx[kk]
                later = use_ptr[t] + ts[t, CUR] < use_ptr[t + 1]
                # A persistent tensor not resident at the start must leave by the end anyway: with write-back it
                # leaves now, while the d2h stream is usually idle, rather than in a burst after the last op
                # (measured: deferring it while the d2h stream is busy gives longer plans).
                leave = write_back and t_persist[t] and not later and ts[t, INIT] == 0 and not keep_persistent
                if not leave and (t_persist[t] or later):
                    if not (keep_persistent and t_persist[t]):
                        E.note(t, t_class[t], ts, use_ptr, use_pos, n_ops, lru, bits, summ, w1, w2, q_t, q_v, q_tail, ver)
                    continue
                # Dead here (freed), or written back (its LNODE is this op, k).
                ts[t, RES] = 0
                f = _release(t, not t_persist[t] or ts[t, HV] == 1, t_bytes, d2h_bw, latency, ts, ctr, node_kind,
                             node_ref, node_start, node_end, dep_ptr, dep_idx, clk, serialize, stats)
                _release_into_pool(t, node_end[f], f, by_bytes, t_mem, t_class, chunk_bytes, chunk_node,
                                   ckeys, cvals, nc, fresh, hkeys, hvals, obj_off, hsize, arena)
    makespan = 0.0
    for i in range(ctr[0]):
        if node_end[i] > makespan:
            makespan = node_end[i]
    stats[ST_MAKESPAN] = makespan
    for t in range(n_t):
        init_out[t] = ts[t, INIT] == 1
        evicted_out[t] = ts[t, EVI] == 1
    return OK, ctr[0], -1, 0
