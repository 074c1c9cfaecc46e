"""Perfect packings: random buffers that tile a capacity x T strip exactly, so the optimal arena is known.

Every instant of [0, T) is covered by buffers whose sizes sum to the capacity, so the peak of live bytes is
the capacity and the tiling itself is an assignment at it: the optimum is the capacity, whatever a solver
finds. Used as property tests and as a benchmark of the exact search beyond MiniMalloc's challenging set
(issue 34), whose instances come from one kind of graph.

The strip (time x bytes) starts as one rectangle and is cut until it holds n pieces:
- a guillotine cut splits a piece in two, across time (two buffers one after the other) or across bytes
  (two buffers live together, one above the other);
- a pinwheel (kind "mixed") splits a piece into five: four arms turning around a centre piece. No straight
  cut runs through a pinwheel, so the tiling is not guillotine and a solver cannot find it cut by cut.
The piece to cut is drawn with probability proportional to area ** `skew` (0: uniform over pieces, which
leaves a few large buffers and many small ones; 1: the large ones get cut, sizes even out), cut positions
uniformly at least `grain` bytes and one time step from the piece's edges. Deterministic by seed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybrid.arena.problem import Buffer, Problem

KINDS = ("guillotine", "mixed")
MIB = 1 << 20


@dataclass(frozen=True)
class Packing:
    """A generated instance: the problem, its optimal arena (`capacity`, the strip's height; the problem itself
    has no capacity, so heuristics' larger arenas stay valid) and the tiling's offsets (a witness)."""

    problem: Problem
    capacity: int
    offsets: np.ndarray
    seed: int
    kind: str


def _cut(rng: np.random.Generator, lo: int, hi: int, step: int) -> int | None:
    """A cut position in (lo, hi), a multiple of `step` from lo, leaving at least `step` each side."""
    k = (hi - lo) // step
    if k < 2:
        return None
    return lo + step * int(rng.integers(1, k))


def perfect_packing(n: int, seed: int, kind: str = "mixed", capacity: int = MIB, horizon: int | None = None,
                    grain: int = 64, skew: float | None = None) -> Packing:
    """n buffers tiling capacity x horizon (default horizon: 4 n steps). `grain`: sizes and byte cuts are
    multiples of it (capacity must be too); `skew`: see the module doc (default: drawn per instance from
    [0, 1], so a benchmark set mixes even and uneven sizes)."""
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r}: expected one of {', '.join(KINDS)}")
    if n < 1 or capacity % grain:
        raise ValueError(f"n={n}, capacity={capacity}, grain={grain}: need n >= 1 and capacity a multiple of grain")
    rng = np.random.default_rng([seed, n, KINDS.index(kind)])
    T = 4 * n if horizon is None else horizon
    a = float(rng.uniform(0.0, 1.0)) if skew is None else skew
    # pieces: (t0, t1, o0, o1), half-open in both dimensions
    pieces: list[tuple[int, int, int, int]] = [(0, T, 0, capacity)]
    p_pin = float(rng.uniform(0.1, 0.4)) if kind == "mixed" else 0.0
    stuck = 0
    while len(pieces) < n:
        if stuck > 50 * n:
            raise ValueError(f"n={n}: the {T} x {capacity} strip cannot be cut into {n} pieces at grain {grain}; "
                             "use a longer horizon or a smaller grain")
        area = np.array([(t1 - t0) * ((o1 - o0) / grain) for t0, t1, o0, o1 in pieces], float)
        w = area ** a
        i = int(rng.choice(len(pieces), p=w / w.sum()))
        t0, t1, o0, o1 = pieces[i]
        if n - len(pieces) >= 4 and rng.random() < p_pin:
            ta = _cut(rng, t0, t1, 1)
            oa = _cut(rng, o0, o1, grain)
            if ta is None or oa is None:
                stuck += 1
                continue
            tb = _cut(rng, ta, t1, 1)
            ob = _cut(rng, oa, o1, grain)
            if tb is None or ob is None:
                stuck += 1
                continue
            # four arms turning around the centre [ta, tb) x [oa, ob): no straight cut crosses the piece
            pieces[i] = (ta, tb, oa, ob)
            pieces += [(t0, tb, o0, oa), (tb, t1, o0, ob), (ta, t1, ob, o1), (t0, ta, oa, o1)]
            continue
        across_time = rng.random() < 0.5
        c = _cut(rng, t0, t1, 1) if across_time else _cut(rng, o0, o1, grain)
        if c is None:
            across_time = not across_time
            c = _cut(rng, t0, t1, 1) if across_time else _cut(rng, o0, o1, grain)
        if c is None:
            stuck += 1
            continue
        if across_time:
            pieces[i] = (t0, c, o0, o1)
            pieces.append((c, t1, o0, o1))
        else:
            pieces[i] = (t0, t1, o0, c)
            pieces.append((t0, t1, c, o1))
    order = rng.permutation(len(pieces))       # ids carry no hint of the tiling
    bufs = []
    offs = np.empty(len(pieces), np.int64)
    for k, j in enumerate(order):
        t0, t1, o0, o1 = pieces[j]
        bufs.append(Buffer(str(k), t0, t1, o1 - o0))
        offs[k] = o0
    return Packing(Problem(bufs), capacity, offs, seed, kind)

