"""How fast any plan with a given schedule can be: the bound that says when re-timing copies cannot help.

CP-SAT refinement (`hybrid.refine`) keeps a plan's schedule, its memory and the
tensors resident at the start; so does any re-timing of its copies or change
of its evictions. `schedule_bound` is a lower bound on the makespan of every
such plan, whatever it evicts and whenever it copies. A plan close to it has
nothing left for refinement; only another schedule (or recomputation) helps.

For every op k, the bytes it needs on the device — live activations, the
tensors resident at the start (they have no valid host copy, so they can only
leave by a swap-out and must be back by the end of the iteration), op k's own
persistent tensors and workspace — minus the memory are `out_k` bytes that
are off the device while k runs. They went out on the d2h stream, each no
sooner than its value was written (a copy made then may be dropped and
re-dropped clean), and come back on the h2d stream, each
before its next use starts. With compute never stalled counted as the earliest
anything can happen, the cheapest `out_k` bytes to move out (the earliest
available) and to bring back (the latest needed) give

    makespan >= max(compute before k, d2h done with out_k) + max(compute from k, h2d done with out_k)

(each part a single-machine schedule with release dates, solved greedily on
bytes). Two more terms: persistent tensors not resident at the start must be
loaded before their first use, and written back after their last in-place
update. Everything is relaxed (one op at a time, fractional tensors, no
latency), so the bound is valid but not always tight.
"""
from __future__ import annotations

import numpy as np

from hybrid.graph import Graph
from hybrid.plan import Plan


def _completion(release: np.ndarray, nbytes: np.ndarray, need: float, bandwidth: float) -> float:
    """Least time to move `need` bytes (fractions allowed) chosen among items available from `release`."""
    if need <= 0:
        return 0.0
    o = np.argsort(release, kind="stable")
    rel, b = release[o], nbytes[o].astype(np.float64)
    cum = np.cumsum(b)
    cut = int(np.searchsorted(cum, need))
    if cut >= len(b):
        return float("inf")  # cannot happen for a valid plan: more must leave than there is
    b = b[:cut + 1]
    b[-1] -= cum[cut] - need
    after = np.cumsum(b[::-1])[::-1]  # bytes moved from item i on
    return float(np.max(rel[:cut + 1] + after / bandwidth))


def _keyed(tensors: np.ndarray, positions: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sorted unique (tensor, position) pairs as keys tensor * (n + 2) + position + 1, and the pairs."""
    key = np.unique(tensors.astype(np.int64) * (n + 2) + (positions.astype(np.int64) + 1))
    return key, key // (n + 2), key % (n + 2) - 1


def schedule_bound(graph: Graph, plan: Plan, max_ops: int | None = 512) -> float:
    """A lower bound on the makespan of any plan with this plan's schedule, memory, op implementations and
    tensors resident at the start (see the module docstring). `max_ops` caps the ops examined (None: all),
    which keeps a 16,000-op graph at about two seconds; fewer ops give a lower, still valid, bound."""
    from hybrid.graph.order import from_ids

    a = graph.arrays
    order = from_ids(graph, plan.schedule)
    n = len(order)
    if n == 0:
        return 0.0
    t_op, ws = a.impl_arrays(plan.impl_choice(graph))
    dev = plan.device
    pos = np.empty(a.n_ops, np.int64)
    pos[order] = np.arange(n)
    per = a.t_persistent
    resident = np.zeros(a.n_tensors, np.bool_)
    resident[[graph.tensor_index[t] for t in plan.resident_at_start if t in graph.tensor_index]] = True
    resident &= per
    r = np.nonzero(resident)[0]
    reads = np.repeat(pos, np.diff(a.in_ptr))
    writes = np.repeat(pos, np.diff(a.out_ptr))
    # every op touching a tensor, and -1 / n for the resident ones (on the device at both ends)
    use_key, use_t, use_pos = _keyed(np.concatenate([a.out_idx, a.in_idx, r, r]),
                                     np.concatenate([writes, reads, np.full(len(r), -1), np.full(len(r), n)]), n)
    w_key, w_t, w_pos = _keyed(np.concatenate([a.out_idx, a.upd_idx]),
                               np.concatenate([writes, np.repeat(pos, np.diff(a.upd_ptr))]), n)
    first = np.full(a.n_tensors, n, np.int64)
    last = np.full(a.n_tensors, -1, np.int64)
    np.minimum.at(first, use_t, use_pos)
    np.maximum.at(last, use_t, use_pos)
    comp = t_op[order]
    before = np.concatenate([[0.0], np.cumsum(comp)])  # before[k]: compute of the ops ahead of position k
    total = float(before[-1])
    # tensors that may be off the device at some op: activations, and persistent tensors resident at the start
    moves = (~per & (a.t_producer >= 0)) | resident
    delta = np.zeros(n + 2, np.int64)
    np.add.at(delta, np.maximum(first[moves], 0), a.t_bytes[moves])
    np.add.at(delta, np.minimum(last[moves], n - 1) + 1, -a.t_bytes[moves])
    need = np.cumsum(delta)[:n] + ws[order]
    own: list[np.ndarray] = []
    for k, o in enumerate(order):
        ts = np.unique(np.concatenate([a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]], a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]]]))
        own.append(ts)
        need[k] += int(a.t_bytes[ts[per[ts] & ~resident[ts]]].sum())
    out = (need - int(dev.usable_bytes)).astype(np.float64)   # raw bytes against usable memory: never above aligned
    d2h_bw, h2d_bw = dev.d2h_bytes_per_s, dev.h2d_bytes_per_s

    def at(k: int) -> float:
        mask = moves & (first <= k) & (last >= k)
        mask[own[k]] = False
        cand = np.nonzero(mask)[0]
        base = cand * (n + 2)
        next_use = use_pos[np.searchsorted(use_key, base + k + 2)]  # first use after k
        wi = np.searchsorted(w_key, base + k + 1) - 1                 # last write before k, if any
        ok = wi >= 0
        ok[ok] = w_t[wi[ok]] == cand[ok]
        written = np.where(ok, w_pos[np.maximum(wi, 0)], -1)
        b = a.t_bytes[cand]
        # a copy out may have been made any time after the value was written (then dropped clean later)
        d2h = _completion(before[written + 1], b, float(out[k]), d2h_bw)
        h2d = _completion(total - before[next_use], b, float(out[k]), h2d_bw)
        return max(before[k], d2h) + max(total - before[k], h2d)

    bound = total
    # Any op gives a valid bound. The ones where the simple bound (no copy waits for its value or its next use)
    # is highest are tried first, up to `max_ops` of them, stopping early where even
    # total + out_k / d2h + out_k / h2d (the most the bound at k can be) cannot raise it.
    after = total - before[:n]
    simple = np.maximum(before[:n], out / d2h_bw) + np.maximum(after, out / h2d_bw)
    for k in np.argsort(-simple, kind="stable")[:max_ops]:
        if out[k] <= 0 or total + out[k] / d2h_bw + out[k] / h2d_bw <= bound:
            continue
        bound = max(bound, at(int(k)))
    has = np.bincount(use_t, minlength=a.n_tensors) > 0
    # persistent tensors on the host at the start: loaded before their first use, written back after an update
    host = per & ~resident & has
    if host.any():
        f = first[host]
        bound = max(bound, _completion(total - before[f], a.t_bytes[host], float(a.t_bytes[host].sum()),
                                       dev.h2d_bytes_per_s))
    if len(a.upd_idx):
        last_upd = np.full(a.n_tensors, -1, np.int64)
        np.maximum.at(last_upd, a.upd_idx, np.repeat(pos, np.diff(a.upd_ptr)))
        wb = host & (last_upd >= 0)
        if wb.any():
            bound = max(bound, _completion(before[last_upd[wb] + 1], a.t_bytes[wb], float(a.t_bytes[wb].sum()),
                                           dev.d2h_bytes_per_s))
    return float(bound)
