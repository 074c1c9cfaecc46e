"""Released device memory waiting to be reused, ordered by release time: which allocation takes which.

One sorted run per size class (objects, amount 1 each) or a single run for a
byte budget (chunks of bytes). An allocation that could start at `est`
takes, best fit, the memory released latest but still by `est` — so memory
freed early stays free for a later prefetch that could start early — and
only if there is none (or not enough bytes), the memory released soonest
after `est`. Each entry taken makes its release node a dependency of the
allocation. Used where allocations are decided in time order (hybrid.swap.rewalk):
releases then arrive roughly in time order, so inserts and removals touch
the end of a run and stay cheap.
"""
from __future__ import annotations

from numba import njit


@njit(cache=True, inline="always")
def insert(keys, nodes, amts, off, size, key, node, amt):
    """Add (release time, release node, amount) keeping the run sorted by time; returns the new size."""
    i = size
    while i > 0 and (keys[off + i - 1] > key or (keys[off + i - 1] == key and nodes[off + i - 1] > node)):
        keys[off + i] = keys[off + i - 1]
        nodes[off + i] = nodes[off + i - 1]
        amts[off + i] = amts[off + i - 1]
        i -= 1
    keys[off + i] = key
    nodes[off + i] = node
    amts[off + i] = amt
    return size + 1


@njit(cache=True, inline="always")
def _compact(keys, nodes, amts, off, size):
    """Drop emptied entries (amount 0); returns the new size."""
    k = 0
    for j in range(size):
        if amts[off + j] > 0:
            keys[off + k] = keys[off + j]
            nodes[off + k] = nodes[off + j]
            amts[off + k] = amts[off + j]
            k += 1
    return k


@njit(cache=True, inline="always")
def _last_at_most(keys, off, size, x):
    """Index of the last entry released at or before x, or -1."""
    lo = 0
    hi = size
    while lo < hi:
        mid = (lo + hi) >> 1
        if keys[off + mid] <= x:
            lo = mid + 1
        else:
            hi = mid
    return lo - 1


@njit(cache=True, inline="always")
def live_at_most(keys, amts, off, size, x):
    """Index of the last non-empty entry released at or before x, or -1."""
    i = _last_at_most(keys, off, size, x)
    while i >= 0 and amts[off + i] == 0:
        i -= 1
    return i


@njit(cache=True, inline="always")
def _use_entry(nodes, amts, k, need, pend, n_pend, emptied):
    """Take up to `need` units from entry k (skipped when already empty); its release node joins pend.
    Returns (need left, n_pend, emptied)."""
    if amts[k] > 0:
        if nodes[k] >= 0:
            pend[n_pend] = nodes[k]
            n_pend += 1
        if amts[k] > need:
            amts[k] -= need
            need = 0
        else:
            need -= amts[k]
            amts[k] = 0
            emptied += 1
    return need, n_pend, emptied


@njit(cache=True, inline="always")
def take(keys, nodes, amts, off, size, est, need, pend, n_pend, dead, dead_i):
    """Take `need` units for an allocation that could start at `est`.

    Returns (new size, n_pend, start): the release nodes of the entries used are
    appended to pend; start = max(est, latest release time taken) (-1 if the run
    holds fewer than `need` units). dead[dead_i] counts the run's emptied entries.
    """
    # Used entries are emptied (amount 0) in place rather than removed, so the entries released after est
    # (often many pending copies) are not shifted each time; the run is compacted when half of it is empty.
    start = est
    emptied = 0
    last = _last_at_most(keys, off, size, est)
    i = last
    while need > 0 and i >= 0:  # released by est: latest first
        need, n_pend, emptied = _use_entry(nodes, amts, off + i, need, pend, n_pend, emptied)
        i -= 1
    j = last + 1
    while need > 0 and j < size:  # not enough by est: the soonest released after it
        if amts[off + j] > 0 and keys[off + j] > start:
            start = keys[off + j]
        need, n_pend, emptied = _use_entry(nodes, amts, off + j, need, pend, n_pend, emptied)
        j += 1
    if need > 0:
        start = -1.0  # not enough memory: the caller reports it
    dead[dead_i] += emptied
    if 2 * dead[dead_i] > size:
        size = _compact(keys, nodes, amts, off, size)
        dead[dead_i] = 0
    return size, n_pend, start
