"""Figures every plan reports: ideal time, lower bound, stall, bytes moved, peak device bytes."""
from __future__ import annotations

import numpy as np

from hybrid.graph import Graph


def peak_from_intervals(alloc_t: np.ndarray, release_t: np.ndarray, nbytes: np.ndarray) -> int:
    """Largest sum of bytes over half-open intervals [alloc, release) alive at one instant."""
    if len(nbytes) == 0:
        return 0
    times = np.concatenate([alloc_t, release_t])
    delta = np.concatenate([nbytes, -nbytes]).astype(np.int64)
    # At equal times releases (negative) come first: intervals are half-open.
    order = np.lexsort((delta, times))
    return int(max(0, np.cumsum(delta[order]).max()))
