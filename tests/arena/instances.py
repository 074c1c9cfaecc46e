"""Random arena instances shared by the solver and repair tests."""
from __future__ import annotations

import numpy as np

from hybrid.arena.problem import Buffer, Problem


def random_problem(seed: int, n: int, align: int, gaps: bool) -> Problem:
    """n buffers on a 40-step timeline, sizes up to 5,000 bytes; with `gaps`, about half of the longer ones have a
    hole (a tensor swapped out and back in: one buffer, one offset, two live spans)."""
    rng = np.random.default_rng(seed)
    bufs = []
    for k in range(n):
        lo = int(rng.integers(0, 30))
        hi = int(rng.integers(lo + 1, 40))
        g: tuple[tuple[int, int], ...] = ()
        if gaps and hi - lo >= 3 and rng.random() < 0.5:
            a = int(rng.integers(lo + 1, hi - 1))
            g = ((a, int(rng.integers(a + 1, hi))),)
        bufs.append(Buffer(str(k), lo, hi, int(rng.integers(0, 5000)), align, g))
    return Problem(bufs)
