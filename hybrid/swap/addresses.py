"""Addresses in the swap planner's walk: one offset per tensor for the whole iteration (FORMATS rule 5's arena).

The arena is a doubly linked list of address-ordered segments covering [0, capacity). Each segment records
its last occupant (a tensor, or -1 for bytes never used): the segment is taken while that tensor is resident
(`ts[occ, RES]`), and an allocation over it depends on the occupant's latest release node (`ts[occ, RELN]`),
so the executor can rely on edges alone. A tensor's first allocation chooses its home (`choose`); every
later copy of it (swap-in, rerun, the reload at the iteration's end) returns there, evicting whatever is
resident in the range then. Segment boundaries are home edges, so there are at most 2 x tensors + 1.

`choose` slides a window over the segments (two pointers, Coop-style: address-adjacent resident tensors and
holes) and takes the cheapest window that holds the tensor: cost = what evicting its residents costs (a
copy out when there is no valid host copy, and the copy back, weighted by how soon it is needed) plus, for
the homes of evicted tensors it covers that come back while the new tensor is still live, the copies that
clash will cost, plus how long after the compute clock its last bytes are free. Ties go to the window that
wastes fewest bytes (best fit). Windows that overlap the home of another input of an op that reads the new
tensor are forbidden: the two must be on the device together then, and one offset each cannot move.

What was tried, and what won (ResNet-18 at 64 MiB, Belady on the program order; per-evaluation time against
the byte-budget walk on benchmarks/planner_speed.py's 10k-op graphs, measured side by side in the timed slot):
- a clash costed once (the new tensor moved out and back once): RNN-8-8k's weights (51 GB in 15 GB) took
  turns at the same offsets, 18x the byte budget's bytes moved (192 s against 20.6 s); costing each switch
  between interleaved uses (`_alternations`) only got it to 187 s. Such graphs get size-class plans from the
  search (the pool option), 1% over the byte budget there.
- claims from the last occupant only: plans failed (an op needing a tensor back at an offset where another
  input of that op lay). Two claims per segment still failed (9 MiB weights moving over many activations'
  homes dropped their claims); the forbidden ranges of co-read tensors' homes made every plan tried feasible.
- full best-window scan over all segments: 21.0 ms (byte budget 15.4 ms re-bound in time order, 19.1 ms
  without), but 100-330x the byte-budget walk per evaluation on 10k ops (20k window scans of thousands of
  segments each).
- next fit from the last home chosen, then the best of `SCAN` more segments: 23.4 ms on that plan; with
  the scan's length scaled up on small graphs (`SCAN_WORK` / tensors, what won) 20.6 ms; 4.1-5.5x the
  byte-budget walk per evaluation on the 10k-op training graph and 3.3-3.5x on the random DAG at half its peak
  (at a quarter the walk finds no offsets): over the 1.5x goal.
  Most of it is the cost of each segment the scan visits (next uses, how the new tensor's uses interleave with
  the occupant's and the claims', when its bytes are free), about 20 visits per new tensor there. The search
  does better than either walk alone: on the README command it writes a plan faster than every laid-out
  baseline.
- segment lookups: `find` (the segment holding a byte) walked the list from the lowest address whenever a
  tensor's hint had been split or merged away: 6.5 million steps per evaluation on the training graph at half
  its peak; walking from the hint either way and forwarding merged-away segments, 340,000, and 2.6-3.6x the
  byte-budget walk (results/planner_speed.md; the same plans). What is left on the random DAG (3.2x): the
  window scans (about a third), `occupy` (a sixth), and a walk with 1.2x the byte budget's nodes
  (fragmentation: more copies), without its time-order re-binding.
- profiled (perf, the kernels' symbols mapped): the window scan is 44% of a pass and the walk's own bookkeeping
  most of the rest; with the scan free the flow would still be about 1.8x the byte budget's. Keeping every plan,
  passing `occupy` the segment just found and inlining `find`/`occupy`/`choose` gained nothing measurable; two
  more arrays in the segment tuple made a pass 1.5x slower (docs/arena.md).
- reruns that do not stop at co-read clashes (forbidden ranges taking the homes a reader's dropped inputs'
  reruns bring back; a drop whose rerun needs two overlapping homes swapped instead): NasNet-25's program-order
  walk 34.6 -> 22.1 s, but the README command's `--addresses` search 12.3 -> 14.3 ms; not kept (docs/arena.md).
- the byte budget's time-order re-binding (hybrid.swap.rewalk) has no counterpart here: an allocation's
  bytes are its home's, fixed; the ready-time term in the score is what stands in for it.

Why it loses on the SwapAdvisor suite (diagnosed on the program order at the suite's memory, Belady; issue 31):
- NasNet-25: with reruns (the genes the byte-budget search wins with: recompute ratio 1, depth 6; 12.07 s as a
  byte budget, 3,772 reruns) the walk stops at op 417 of 13,658: `relu_72` needs a weight back at its home,
  where `getitem_179`, which it also reads, lies (err_need < -1: a co-read clash the forbidden ranges did not
  foresee, as the rerun's inputs were placed before the clash existed). `SwapPlanner._run_grown` then plans
  swap-only: 34.61 s, 221 GB moved against 35 GB; so every arena individual loses to the size classes (28.9 s).
  BRNN-4-8k with reruns stops the same way (op 1,639 of 11,828).
- BRNN-4-8k swap-only: 252 s against the byte budget's 18.99 s, 1,818 GiB copied in against 89 GiB (5,221
  swap-ins against 2,071): its 1-2 GiB weights and activations (97% of the bytes, 15 GiB of memory) take turns
  at shared homes, each reload evicting the tensor the next op needs. Less memory barely moves it (10% less:
  264 s; the byte budget 19.60 s): the homes, not the bytes, are what is short.
- What won instead is outside the walk: `hybrid.arena.headroom` (`hybrid optimize --headroom`): byte budgets
  searched with the memory their layout needs given up, the winner laid out and re-planned with what the
  layout leaves (its docstring has the suite figures).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from hybrid.swap._tensor_state import CUR, HV, INIT, LNODE, PIN, RELN, RES

NEAR = 8.0       # a copy back needed this many ops from now weighs half (1 / (1 + distance / NEAR))
CLASH = 1.0      # weight of a clash with another tensor's home: per switch between their interleaved uses
SCAN = 16        # segments a window scan visits at least once it has a window: next fit from the last home,
                 # then the best of what it saw (a full scan is O(segments) per new tensor: 200x the byte budget
                 # on 10k ops)
SCAN_WORK = 200_000   # ... and up to this many over the graph's tensors (small graphs: nearly a full scan)


def scratch(n_t: int, n_in: int) -> tuple:
    """Segment arrays for `walk`: lo, hi, last occupant, claim, next, previous, free slots, meta (head, free
    slots, live segments), `choose`'s sliding-maximum queue and its forbidden ranges. Boundaries are home edges, so at most 2 x n_t + 1 segments live."""
    cap = 2 * n_t + 8
    return (np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(cap, np.int64),
            np.zeros(cap, np.int64),
            np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(cap, np.int64), np.zeros(4, np.int64),
            np.zeros(cap, np.int64), np.zeros(cap, np.float64), np.zeros(n_in + 8, np.int64),
            np.zeros(n_in + 8, np.int64), np.zeros(cap, np.float64), np.full(n_t, -1, np.int64))


@njit(cache=True, _nrt=False)
def reset(capacity, ar):
    """One free segment [0, capacity)."""
    lo, hi, occ, cl, c2, nx, pv, stack, meta = ar[:9]
    n = lo.shape[0]
    for i in range(n):
        stack[i] = n - 1 - i
    meta[1] = n
    for i in range(n):
        lo[i] = -1
        hi[i] = -1
    hint = ar[14]
    for i in range(hint.shape[0]):
        hint[i] = -1
    s = _new(0, capacity, -1, -1, -1, ar)
    nx[s] = -1
    pv[s] = -1
    meta[0] = s
    meta[2] = 1   # live segments
    meta[3] = s   # where the next window scan starts (the last home chosen)


@njit(cache=True, inline="always", _nrt=False)
def _new(a, b, who, claim, claim2, ar):
    lo, hi, occ, cl, c2, nx, pv, stack, meta = ar[:9]
    meta[1] -= 1
    s = stack[meta[1]]
    lo[s] = a
    hi[s] = b
    occ[s] = who
    cl[s] = claim
    c2[s] = claim2
    meta[2] += 1
    return s


@njit(cache=True, inline="always", _nrt=False)
def _split(k, at, ar):
    """Split segment k at byte `at` (inside it): k keeps [at, hi); the new segment before it [lo, at)."""
    lo, hi, occ, cl, c2, nx, pv, stack, meta = ar[:9]
    s = _new(lo[k], at, occ[k], cl[k], c2[k], ar)
    p = pv[k]
    pv[s] = p
    nx[s] = k
    if p >= 0:
        nx[p] = s
    else:
        meta[0] = s
    pv[k] = s
    lo[k] = at


@njit(cache=True, inline="always", _nrt=False)
def _merge_next(k, ar):
    """Absorb k's successor when both have the same occupant and claim; the freed slot forwards to k (a
    negative lo: -2 - k) for hints that still name it."""
    lo, hi, occ, cl, c2, nx, pv, stack, meta = ar[:9]
    j = nx[k]
    if j >= 0 and occ[j] == occ[k] and cl[j] == cl[k] and c2[j] == c2[k]:
        hi[k] = hi[j]
        nj = nx[j]
        nx[k] = nj
        if nj >= 0:
            pv[nj] = k
        stack[meta[1]] = j
        meta[1] += 1
        meta[2] -= 1
        lo[j] = -2 - k
        hi[j] = -1


@njit(cache=True, _nrt=False)
def find(a, s, ar):
    """The segment holding byte a, searched from segment s (a tensor's hint: the segment its home began at
    when it last took it), else from the lowest address. A hint stays useful as the arena changes: a split
    leaves it within a step or two of a (walked back or forth), and a merged-away segment forwards to the one
    that absorbed it (`_merge_next`) until its slot is reused. From the lowest address every time, finds
    walked 6.5 million segments per evaluation on the 10k-op training graph at half its peak (340,000 now)."""
    lo, hi, occ, cl, c2, nx, pv, stack, meta = ar[:9]
    while s >= 0 and lo[s] < -1:
        s = -2 - lo[s]
    if s >= 0 and lo[s] >= 0:
        k = s
        while lo[k] > a:
            k = pv[k]
    else:
        k = meta[0]
    while k >= 0 and hi[k] <= a:
        k = nx[k]
    return k


@njit(cache=True, _nrt=False)
def occupy(h, sz, m, ts, ar, pend, n_pend, use_ptr, use_pos, n_ops, t_persist):
    """Make [h, h + sz) occupied by m (its residents already evicted); each earlier occupant's release node is
    appended to pend (returns the new pend length). Each piece keeps a claim: the tensor overwritten there
    if it is needed again (it returns to these bytes), else the older claim while that one is."""
    lo, hi, occ, cl, c2, nx, pv, stack, meta = ar[:9]
    hint = ar[14]
    end = h + sz
    k = find(h, hint[m], ar)
    if lo[k] < h:
        _split(k, h, ar)
    before = pv[k]
    while k >= 0 and lo[k] < end:
        if hi[k] > end:
            _split(k, end, ar)
            k = pv[k]
        u = occ[k]
        if u >= 0 and u != m and ts[u, RELN] >= 0:
            pend[n_pend] = ts[u, RELN]
            n_pend += 1
        # claims: of the old occupant and the two old claims, the two needed again soonest (not m)
        a1 = -1
        q1 = n_ops + 1
        a2 = -1
        q2 = n_ops + 1
        for x in (u, cl[k], c2[k]):
            if x >= 0 and x != m and x != a1:
                q = next_need(x, ts, use_ptr, use_pos, n_ops, t_persist)
                if q >= 0:
                    if q < q1:
                        a2, q2, a1, q1 = a1, q1, x, q
                    elif q < q2 and x != a1:
                        a2, q2 = x, q
        cl[k] = a1
        c2[k] = a2
        occ[k] = m
        k = nx[k]
    # merge equal neighbours from the one before the range to the end of it
    k = before if before >= 0 else meta[0]
    while k >= 0 and lo[k] < end:
        j = nx[k]
        if j >= 0 and occ[j] == occ[k] and cl[j] == cl[k] and c2[j] == c2[k]:
            _merge_next(k, ar)
        else:
            k = j
    hint[m] = find(h, before, ar)
    return n_pend


@njit(cache=True, inline="always", _nrt=False)
def next_need(u, ts, use_ptr, use_pos, n_ops, t_persist):
    """Schedule position where u is next needed on the device (n_ops: the iteration's end; -1: never)."""
    i = use_ptr[u] + ts[u, CUR]
    if i < use_ptr[u + 1]:
        return use_pos[i]
    if t_persist[u] and ts[u, INIT] == 1:
        return n_ops
    return -1


@njit(cache=True, inline="always", _nrt=False)
def evictable(u, stamp, keep_persistent, rc_only, ts, t_persist):
    """May resident u be evicted for the current op? (recompute-only: the walk pins what it may not drop.)"""
    return not (ts[u, PIN] == stamp or (keep_persistent and t_persist[u]))


@njit(cache=True, inline="always", _nrt=False)
def _alternations(u, m, last_m, ts, use_ptr, use_pos):
    """How many times the device must switch between u and m (their uses interleaved, from their next uses up
    to last_m), or -1 when an op reads both (they must be on the device together)."""
    i = use_ptr[u] + ts[u, CUR]
    iu = use_ptr[u + 1]
    j = use_ptr[m] + ts[m, CUR]
    jm = use_ptr[m + 1]
    last = -1          # whose use came last: 0 u, 1 m
    n = 0
    while i < iu or j < jm:
        a = use_pos[i] if i < iu else last_m + 1
        b = use_pos[j] if j < jm else last_m + 1
        if a > last_m and b > last_m:
            break
        if a == b:
            return -1
        who = 0 if a < b else 1
        if last >= 0 and who != last:
            n += 1
        last = who
        if who == 0:
            i += 1
        else:
            j += 1
    return n


@njit(cache=True, inline="always", _nrt=False)
def _tensor_cost(u, m, p, last_m, m_copy, ts, use_ptr, use_pos, n_ops, t_persist, t_bytes, h2d_bw, d2h_bw,
                 latency):
    """What putting m over u's home costs (seconds of copies, weighted): evicting u if resident, and m's
    and u's copies out and back each time the device switches between them while m is live (their uses
    interleave); inf when an op needs both (one offset each)."""
    q = next_need(u, ts, use_ptr, use_pos, n_ops, t_persist)
    c = 0.0
    if q >= 0 and q <= last_m:
        n = _alternations(u, m, last_m, ts, use_ptr, use_pos)
        if n < 0:
            return np.inf
        # each switch between them moves one out and the other back in
        u_copy = t_bytes[u] / d2h_bw + t_bytes[u] / h2d_bw + 2.0 * latency
        c += CLASH * max(n, 1) * 0.5 * (m_copy + u_copy)
    if ts[u, RES] == 1:
        if ts[u, HV] == 0 and (q >= 0 or t_persist[u]):
            c += t_bytes[u] / d2h_bw + latency
        if q >= 0:
            c += (t_bytes[u] / h2d_bw + latency) / (1.0 + (q - p) / NEAR)
    return c


@njit(cache=True, inline="always", _nrt=False)
def _seg_cost(k, m, p, last_m, m_copy, ts, ar, use_ptr, use_pos, n_ops, t_persist, t_bytes, t_mem, h2d_bw,
              d2h_bw, latency):
    """What putting m over segment k costs: its occupant's and its claim's costs, each in proportion to the
    share of their home the segment is (a home may span several segments)."""
    lo, hi, occ, cl, c2, nx, pv, stack, meta = ar[:9]
    c = 0.0
    w = hi[k] - lo[k]
    u = occ[k]
    if u >= 0 and u != m:
        x = _tensor_cost(u, m, p, last_m, m_copy, ts, use_ptr, use_pos, n_ops, t_persist, t_bytes, h2d_bw, d2h_bw,
                         latency)
        if x == np.inf:
            return x
        c += x * w / t_mem[u]
    for u in (cl[k], c2[k]):
        if u >= 0 and u != m and u != occ[k] and ts[u, RES] == 0:
            x = _tensor_cost(u, m, p, last_m, m_copy, ts, use_ptr, use_pos, n_ops, t_persist, t_bytes, h2d_bw,
                             d2h_bw, latency)
            if x == np.inf:
                return x
            c += x * w / t_mem[u]
    return c


@njit(cache=True, inline="always", _nrt=False)
def _seg_ready(k, ts, ar, node_end, d2h_clock, t_bytes, d2h_bw, latency):
    """When segment k's bytes are free (a resident occupant would be evicted now: freed after its last
    reader, or copied out after it on the d2h stream)."""
    lo, hi, occ, cl, c2, nx, pv, stack, meta = ar[:9]
    u = occ[k]
    if u < 0:
        return 0.0
    if ts[u, RES] == 1:
        last = node_end[ts[u, LNODE]] if ts[u, LNODE] >= 0 else 0.0
        if ts[u, HV] == 1:
            return last
        return max(d2h_clock, last) + t_bytes[u] / d2h_bw + latency
    return node_end[ts[u, RELN]] if ts[u, RELN] >= 0 else 0.0


@njit(cache=True, _nrt=False)
def choose(sz, m, p, stamp, keep_persistent, rc_only, ts, ar, use_ptr, use_pos, n_ops, t_persist, t_bytes,
           t_mem, h2d_bw, d2h_bw, latency, node_end, now, d2h_clock, sched, in_ptr, in_idx, home, scan):
    """The home for m (sz bytes), first allocated at schedule position p: the start of the cheapest window
    of address-adjacent segments holding sz bytes (see the module docstring), or -1 when every window holds
    a tensor that cannot be evicted now. A window's score is its copies' cost plus how long after `now`
    (the compute stream's clock) its last bytes are free (a sliding maximum over the window). Forbidden: the
    homes of the other inputs of every op that reads m (they must be on the device with it then), so a
    copy never has to return where a tensor its op needs lies."""
    lo, hi, occ, cl, c2, nx, pv, stack, meta, dq, dv, f_lo, f_hi, sc, hint = ar
    nu = use_ptr[m + 1] - use_ptr[m]
    last_m = use_pos[use_ptr[m + 1] - 1] if nu > 0 else p
    if t_persist[m] and keep_persistent:
        last_m = n_ops
    m_copy = t_bytes[m] / d2h_bw + t_bytes[m] / h2d_bw + 2.0 * latency
    nf = 0
    for k in range(use_ptr[m], use_ptr[m + 1]):
        o = sched[use_pos[k]]
        for kk in range(in_ptr[o], in_ptr[o + 1]):
            u = in_idx[kk]
            if u != m and home[u] >= 0 and t_mem[u] > 0:
                f_lo[nf] = home[u]
                f_hi[nf] = home[u] + t_mem[u]
                nf += 1
    best = -1
    best_c = np.inf
    best_w = 0
    best_s = -1
    visits = 0
    rover = meta[3] if (meta[3] >= 0 and lo[meta[3]] >= 0) else meta[0]
    for attempt in range(2):     # from the last home chosen to the top, then from the bottom
        i = rover if attempt == 0 else meta[0]
        j = i
        cost = 0.0
        length = 0
        qh = 0      # sliding maximum of ready times: dq[qh:qt] segments, dv their times, decreasing
        qt = 0
        while i >= 0 and not (best >= 0 and visits > scan):
            if attempt == 1 and i == rover:
                break
            while length < sz and j >= 0:
                u = occ[j]
                if u >= 0 and u != m and ts[u, RES] == 1 and not evictable(u, stamp, keep_persistent, rc_only, ts,
                                                                            t_persist):
                    break
                cj = _seg_cost(j, m, p, last_m, m_copy, ts, ar, use_ptr, use_pos, n_ops, t_persist, t_bytes, t_mem,
                               h2d_bw, d2h_bw, latency)
                if cj == np.inf:
                    break
                clash = False
                for f in range(nf):
                    if f_lo[f] < hi[j] and f_hi[f] > lo[j]:
                        clash = True
                        break
                if clash:
                    break
                visits += 1
                sc[j] = cj
                cost += cj
                length += hi[j] - lo[j]
                r = _seg_ready(j, ts, ar, node_end, d2h_clock, t_bytes, d2h_bw, latency)
                while qt > qh and dv[qt - 1] <= r:
                    qt -= 1
                dq[qt] = j
                dv[qt] = r
                qt += 1
                j = nx[j]
            if length >= sz:
                waste = length - sz
                score = cost + max(0.0, dv[qh] - now)
                if score < best_c or (score == best_c and waste < best_w):
                    best, best_c, best_w, best_s = lo[i], score, waste, i
                    if score == 0.0 and waste == 0:
                        meta[3] = i
                        hint[m] = i
                        return best
                cost -= sc[i]
                if cost < 1e-15:
                    cost = 0.0     # rounding left by the subtraction
                if dq[qh] == i:
                    qh += 1
                length -= hi[i] - lo[i]
                i = nx[i]
                if length <= 0:
                    cost = 0.0
                    length = 0
                    j = i
                    qh = 0
                    qt = 0
            else:
                visits += 1
                if j < 0:
                    break
                i = nx[j]      # j holds a tensor that must stay: restart past it
                j = i
                cost = 0.0
                length = 0
                qh = 0
                qt = 0
        if best >= 0 and visits > scan or rover == meta[0]:
            break
    if best_s >= 0:
        meta[3] = best_s
        hint[m] = best_s
    return best
