"""Binary min-heaps on segments of flat arrays, for Numba kernels (no Python objects in the hot loop).

A heap lives in keys[off:off+cap], vals[off:off+cap]; its size is kept by the
caller. Ties on key are broken by val so results never depend on push history.
"""
from __future__ import annotations

from numba import njit


@njit(cache=True, inline="always", _nrt=False)
def _less(keys, vals, i, j):
    return keys[i] < keys[j] or (keys[i] == keys[j] and vals[i] < vals[j])


@njit(cache=True, inline="always", _nrt=False)
def _swap(keys, vals, i, j):
    k = keys[i]
    keys[i] = keys[j]
    keys[j] = k
    v = vals[i]
    vals[i] = vals[j]
    vals[j] = v


@njit(cache=True, inline="always", _nrt=False)
def heap_push(keys, vals, off, size, key, val):
    """Insert; returns the new size."""
    i = size
    keys[off + i] = key
    vals[off + i] = val
    while i > 0:
        p = (i - 1) >> 1
        if _less(keys, vals, off + i, off + p):
            _swap(keys, vals, off + i, off + p)
            i = p
        else:
            break
    return size + 1


@njit(cache=True, inline="always", _nrt=False)
def heap_pop(keys, vals, off, size):
    """Remove the minimum; returns (key, val, new size). Size must be > 0."""
    key = keys[off]
    val = vals[off]
    size -= 1
    if size > 0:
        keys[off] = keys[off + size]
        vals[off] = vals[off + size]
        i = 0
        while True:
            left = 2 * i + 1
            if left >= size:
                break
            c = left
            if left + 1 < size and _less(keys, vals, off + left + 1, off + left):
                c = left + 1
            if _less(keys, vals, off + c, off + i):
                _swap(keys, vals, off + c, off + i)
                i = c
            else:
                break
    return key, val, size
