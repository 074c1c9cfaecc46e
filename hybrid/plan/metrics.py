"""Figures every plan reports: ideal time, persistent-tensor bound, stall, bytes moved, peak device bytes."""
from __future__ import annotations

import numpy as np

from hybrid.graph import Graph


def persistent_bound_of(metrics: dict) -> float:
    """The plan's persistent-tensor bound (`hybrid.graph.info.persistent_bound`); files written before the
    rename call it `lower_bound_s`. Falls back to the ideal."""
    ideal = float(metrics.get("ideal_s", 0.0))
    return float(metrics.get("persistent_bound_s", metrics.get("lower_bound_s", ideal)))


def peak_from_intervals(alloc_t: np.ndarray, release_t: np.ndarray, nbytes: np.ndarray) -> int:
    """Largest sum of bytes over half-open intervals [alloc, release) alive at one instant."""
    if len(nbytes) == 0:
        return 0
    times = np.concatenate([alloc_t, release_t])
    delta = np.concatenate([nbytes, -nbytes]).astype(np.int64)
    # At equal times releases (negative) come first: intervals are half-open.
    order = np.lexsort((delta, times))
    return int(max(0, np.cumsum(delta[order]).max()))
