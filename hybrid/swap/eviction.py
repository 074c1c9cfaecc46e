"""Which resident tensor to evict when a size class (or the byte pool) is full.

Belady (SwapAdvisor §4.2): the tensor whose next use is farthest in the
schedule, skipping tensors used within the last `recency` ops so that the
copy that frees their memory can start early enough (if all are that recent,
the farthest anyway); ties prefer a tensor whose host copy is still valid
(freed without a copy), then the least recently used. LRU (the online
baselines): the least recently used tensor. Tensors the current op reads or
writes are never victims.

Data structures (per size class, all flat arrays, O(1) to note a candidate):
- Belady, next use at schedule position q < n_ops: bit q of a two-level
  bitmap. The tensors behind bit q are the inputs of the op at q whose next
  use is q, so no list is stored; stale bits are cleared when found empty.
- Belady, no further use: FIFO queues (host copy valid / not), oldest first.
- LRU: one FIFO in order of last use (uses arrive in schedule order).
FIFO entries carry a per-tensor version so only the latest note counts.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from hybrid.swap._tensor_state import CUR as _CUR
from hybrid.swap._tensor_state import HV as _HV
from hybrid.swap._tensor_state import INIT as _INIT
from hybrid.swap._tensor_state import LNODE as _LNODE
from hybrid.swap._tensor_state import LPOS as _LPOS
from hybrid.swap._tensor_state import PIN as _PIN
from hybrid.swap._tensor_state import RES as _RES


@njit(cache=True, inline="always", _nrt=False)
def _hibit(x):
    """Index of the highest set bit of a non-zero uint64."""
    n = 0
    if x >> np.uint64(32):
        x >>= np.uint64(32)
        n += 32
    if x >> np.uint64(16):
        x >>= np.uint64(16)
        n += 16
    if x >> np.uint64(8):
        x >>= np.uint64(8)
        n += 8
    if x >> np.uint64(4):
        x >>= np.uint64(4)
        n += 4
    if x >> np.uint64(2):
        x >>= np.uint64(2)
        n += 2
    if x >> np.uint64(1):
        n += 1
    return n


@njit(cache=True, inline="always", _nrt=False)
def _low_mask(b):
    """Bits 0..b set."""
    return np.uint64(0xFFFFFFFFFFFFFFFF) if b >= 63 else (np.uint64(1) << np.uint64(b + 1)) - np.uint64(1)


def scratch(n_c: int, n_ops: int, n_t: int, notes: int):
    """Arrays for `reset`, sized for up to n_c classes and `notes` candidate notes per FIFO kind."""
    w1 = (n_ops >> 6) + 1
    w2 = (w1 >> 6) + 1
    fifo = 3 * (notes + 8 * n_c)
    return (np.zeros(n_c * w1, np.uint64), np.zeros(n_c * w2, np.uint64), np.zeros(3 * n_c + 1, np.int64),
            np.empty(fifo, np.int64), np.empty(fifo, np.int64), np.zeros(3 * n_c, np.int64),
            np.zeros(3 * n_c, np.int64), np.zeros(n_t, np.int64), np.empty(n_t + 1, np.int64),
            np.empty(n_t + 1, np.int64))


@njit(cache=True, _nrt=False)
def reset(n_c, n_ops, n_t, fifo_cap_per_class, bits, summ, off, head, tail, ver):
    """Empty the structures for a walk with n_c classes; returns the bitmap word counts (w1, w2)."""
    w1 = (n_ops >> 6) + 1
    w2 = (w1 >> 6) + 1
    for i in range(n_c * w1):
        bits[i] = 0
    for i in range(n_c * w2):
        summ[i] = 0
    # Three FIFOs per class: 0 = never-used with valid host copy, 1 = never-used otherwise, 2 = LRU.
    off[0] = 0
    for c in range(n_c):
        for k in range(3):
            off[3 * c + k + 1] = off[3 * c + k] + fifo_cap_per_class[c]
    for i in range(3 * n_c):
        head[i] = off[i]
        tail[i] = off[i]
    for i in range(n_t):
        ver[i] = 0
    return w1, w2


@njit(cache=True, inline="always", _nrt=False)
def _set_bit(c, q, bits, summ, w1, w2):
    w = q >> 6
    bits[c * w1 + w] |= np.uint64(1) << np.uint64(q & 63)
    summ[c * w2 + (w >> 6)] |= np.uint64(1) << np.uint64(w & 63)


@njit(cache=True, inline="always", _nrt=False)
def _clear_bit(c, q, bits, summ, w1, w2):
    w = q >> 6
    i = c * w1 + w
    bits[i] &= ~(np.uint64(1) << np.uint64(q & 63))
    if bits[i] == 0:
        summ[c * w2 + (w >> 6)] &= ~(np.uint64(1) << np.uint64(w & 63))


@njit(cache=True, inline="always", _nrt=False)
def _highest_at_most(c, q, bits, summ, w1, w2):
    """Highest set position <= q in class c, or -1."""
    if q < 0:
        return -1
    w = q >> 6
    word = bits[c * w1 + w] & _low_mask(q & 63)
    if word != 0:
        return (w << 6) + _hibit(word)
    if w == 0:
        return -1
    # Highest non-empty word below w, through the summary level.
    w -= 1
    sw = w >> 6
    sword = summ[c * w2 + sw] & _low_mask(w & 63)
    while True:
        if sword != 0:
            w = (sw << 6) + _hibit(sword)
            return (w << 6) + _hibit(bits[c * w1 + w])
        if sw == 0:
            return -1
        sw -= 1
        sword = summ[c * w2 + sw]


@njit(cache=True, inline="always", _nrt=False)
def _fifo_push(k, v, ver, q_t, q_v, tail):
    i = tail[k]
    q_t[i] = v
    q_v[i] = ver[v]
    tail[k] = i + 1


@njit(cache=True, inline="always", _nrt=False)
def next_use(v, ts, use_ptr, use_pos, n_ops):
    i = use_ptr[v] + ts[v, _CUR]
    return use_pos[i] if i < use_ptr[v + 1] else n_ops


@njit(cache=True, inline="always", _nrt=False)
def note(v, c, ts, use_ptr, use_pos, n_ops, lru, bits, summ, w1, w2, q_t, q_v, tail, ver):
    """Record resident tensor v (class c) as a candidate with its current key; older notes become stale."""
    ver[v] += 1
    if lru:
        _fifo_push(3 * c + 2, v, ver, q_t, q_v, tail)
        return
    q = next_use(v, ts, use_ptr, use_pos, n_ops)
    if q < n_ops:
        _set_bit(c, q, bits, summ, w1, w2)
    else:
        cheap = ts[v, _HV] == 1 or (ts[v, _INIT] == 1 and ts[v, _LPOS] < 0)
        _fifo_push(3 * c + (0 if cheap else 1), v, ver, q_t, q_v, tail)


@njit(cache=True, inline="always", _nrt=False)
def _usable(v, stamp, keep_persistent, t_persist, ts):
    return ts[v, _PIN] != stamp and not (keep_persistent and t_persist[v])


@njit(cache=True, _nrt=False)
def _collect_fifo(k, p, stamp, recency, keep_persistent, t_persist, ts, q_t, q_v, head, tail, ver, strict,
                  cand, group, n, want, g):
    """Append up to `want` (total) evictable entries of FIFO k to cand[n:], each its own group; returns (n, g)."""
    i = head[k]
    # Drop stale entries at the front for good.
    while i < tail[k] and (q_t[i] < 0 or ts[q_t[i], _RES] != 1 or q_v[i] != ver[q_t[i]]):
        i += 1
    head[k] = i
    while i < tail[k] and n < want:
        v = q_t[i]
        if v >= 0 and ts[v, _RES] == 1 and q_v[i] == ver[v] and _usable(v, stamp, keep_persistent, t_persist, ts):
            if not strict or recency <= 0 or ts[v, _LPOS] < p - recency:
                cand[n] = v
                group[n] = g
                n += 1
                g += 1
        i += 1
    return n, g


@njit(cache=True, _nrt=False)
def _collect_buckets(c, p, stamp, recency, keep_persistent, t_persist, ts, sched, in_ptr, in_idx, t_class,
                     use_ptr, use_pos, n_ops, bits, summ, w1, w2, strict, cand, group, n, want, g):
    """Append whole buckets (farthest next use first) until at least `want` candidates; returns (n, g)."""
    q = _highest_at_most(c, n_ops - 1, bits, summ, w1, w2)
    while q >= 0 and n < want:
        o = sched[q]
        any_valid = False
        for k in range(in_ptr[o], in_ptr[o + 1]):
            v = in_idx[k]
            if t_class[v] != c or ts[v, _RES] != 1 or next_use(v, ts, use_ptr, use_pos, n_ops) != q:
                continue
            if keep_persistent and t_persist[v]:
                continue
            any_valid = True
            if ts[v, _PIN] == stamp:
                continue
            if strict and recency > 0 and ts[v, _LPOS] >= p - recency:
                continue
            if n < cand.shape[0]:
                cand[n] = v
                group[n] = g
                n += 1
        g += 1
        if not any_valid:
            _clear_bit(c, q, bits, summ, w1, w2)
        q = _highest_at_most(c, q - 1, bits, summ, w1, w2)
    return n, g


@njit(cache=True, inline="always", _nrt=False)
def _cheap(v, ts):
    return 1 if (ts[v, _HV] == 1 or (ts[v, _INIT] == 1 and ts[v, _LPOS] < 0)) else 0


@njit(cache=True, _nrt=False)
def pop_victim(c, p, stamp, lru, recency, keep_persistent, t_persist, ts, sched, in_ptr, in_idx, t_class,
               use_ptr, use_pos, n_ops, bits, summ, w1, w2, q_t, q_v, head, tail, ver,
               lookahead, cand, group, node_end, d2h_clock, t_bytes, d2h_bw, latency):
    """Choose (and forget) the victim in class c, or -1 if every resident candidate is pinned.

    The first `lookahead` candidates in policy order (whole buckets for Belady) are compared; the one whose
    memory would be free earliest wins (ties: policy order, then a valid host copy, then least recently used).
    lookahead=1 is the pure policy.
    """
    for strict in (True, False):
        n = 0
        g = 0
        if lru:
            n, g = _collect_fifo(3 * c + 2, p, stamp, recency, keep_persistent, t_persist, ts, q_t, q_v, head, tail,
                                 ver, strict, cand, group, n, lookahead, g)
        else:
            n, g = _collect_fifo(3 * c, p, stamp, recency, keep_persistent, t_persist, ts, q_t, q_v, head, tail,
                                 ver, strict, cand, group, n, lookahead, g)
            if n < lookahead:
                n, g = _collect_fifo(3 * c + 1, p, stamp, recency, keep_persistent, t_persist, ts, q_t, q_v, head,
                                     tail, ver, strict, cand, group, n, lookahead, g)
            if n < lookahead:
                n, g = _collect_buckets(c, p, stamp, recency, keep_persistent, t_persist, ts, sched, in_ptr, in_idx,
                                        t_class, use_ptr, use_pos, n_ops, bits, summ, w1, w2, strict, cand, group,
                                        n, lookahead, g)
        if n > 0:
            best = -1
            b_rel = 0.0
            b_group = 0
            b_cheap = 0
            b_last = 0
            for j in range(n):
                v = cand[j]
                cheap = _cheap(v, ts)
                ln = ts[v, _LNODE]
                rel = node_end[ln] if ln >= 0 else 0.0
                if cheap == 0:
                    if d2h_clock > rel:
                        rel = d2h_clock
                    rel += t_bytes[v] / d2h_bw + latency
                if lookahead <= 1:
                    rel = 0.0
                last = ts[v, _LPOS]
                if (best < 0 or rel < b_rel or (rel == b_rel and (group[j] < b_group or (group[j] == b_group and (
                        cheap > b_cheap or (cheap == b_cheap and last < b_last)))))):
                    best, b_rel, b_group, b_cheap, b_last = v, rel, group[j], cheap, last
            ver[best] += 1
            return best
        if recency <= 0:
            break
    return -1
