"""Figures every plan reports: ideal time, persistent-tensor bound, stall, bytes moved, peak device bytes."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from hybrid.plan import Plan


def persistent_bound_of(metrics: dict) -> float:
    """The plan's persistent-tensor bound (`hybrid.graph.info.persistent_bound`); files written before the
    rename call it `lower_bound_s`. Falls back to the ideal."""
    ideal = float(metrics.get("ideal_s", 0.0))
    return float(metrics.get("persistent_bound_s", metrics.get("lower_bound_s", ideal)))


def lives_no_time(starts: np.ndarray, ends: np.ndarray, eps: float) -> np.ndarray:
    """Per interval: no longer than eps, so rule 5 counts it at its instant (`sweep_points`). The second test
    catches an interval one rounding step longer, whose release at end - eps would sort before its start."""
    return (ends - starts <= eps) | (ends - eps <= starts)


def sweep_points(starts: np.ndarray, ends: np.ndarray, eps: float, held: np.ndarray | None = None,
                 alloc_pos: np.ndarray | None = None, release_pos: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Rule 5's sweep over intervals [start, end): the one reading of "at every instant" (docs/formats.md) that
    the validator and every plan's `peak_bytes` share. Returns per point (key, tie, interval, sign), unsorted;
    the sweep's order is np.lexsort((tie, key)). At one instant releases (at end - eps) come first; an interval
    no longer than eps is released at its instant, so what lives no time still needs room.

    Within an instant the rest follows the order the events run (`hybrid.plan.run_order.event_order`), given as
    each interval's `alloc_pos` and `release_pos` (positions in that order): a short interval's release comes
    before the allocations of events that run after its release, as the executor hands the memory back, and
    after those that run before it. Without positions every allocation at an instant comes before every short
    release there (the stricter reading). Infinite ends are never released. `held`
    (hybrid.validator.lifetimes.read_at_release): where not NaN, the interval is released at that time like a
    short one (its last reader takes no time and holds it while allocating)."""
    starts = np.asarray(starts, dtype=np.float64)
    ends = np.asarray(ends, dtype=np.float64)
    finite = np.isfinite(ends)
    short = finite & lives_no_time(starts, ends, eps)
    at = starts
    if held is not None:
        late = finite & ~short & ~np.isnan(held)
        short = short | late
        at = np.where(late, held, starts)
    long_ = finite & ~short
    idx = np.arange(len(starts), dtype=np.int64)
    a_pos = np.zeros(len(starts)) if alloc_pos is None else np.asarray(alloc_pos, dtype=np.float64)
    r_pos = np.maximum(a_pos, 0 if release_pos is None else np.asarray(release_pos, dtype=np.float64))
    n_long = int(long_.sum())
    key = np.concatenate([starts, ends[long_] - eps, at[short]])
    tie = np.concatenate([2 * a_pos, np.full(n_long, -np.inf), 2 * r_pos[short] + 1])
    which = np.concatenate([idx, idx[long_], idx[short]])
    sign = np.concatenate([np.ones(len(starts), np.int64), -np.ones(len(which) - len(starts), np.int64)])
    return key, tie, which, sign


def peak_from_intervals(alloc_t: np.ndarray, release_t: np.ndarray, nbytes: np.ndarray, eps: float = 0.0) -> int:
    """Largest sum of bytes alive at one instant, read as rule 5 reads it (`sweep_points`). Callers pass the bytes
    each copy occupies (rounded up to the device's alignment) and the plan's tolerance as eps, as the validator
    does. Without the order events run in, and without the copies a zero-time compute holds while it allocates
    (`held`), this is the validator's peak only where no event takes less than eps (`hybrid.swap.to_plan` asks
    the validator otherwise)."""
    if len(nbytes) == 0:
        return 0
    key, tie, which, sign = sweep_points(alloc_t, release_t, eps)
    delta = sign * np.asarray(nbytes, dtype=np.int64)[which]
    order = np.lexsort((tie, key))
    return int(max(0, np.cumsum(delta[order]).max()))


def compute_stalls(plan: "Plan") -> list[tuple[float, float]]:
    """(start, end) of every interval before the iteration's end where the GPU's compute stream is idle (a
    placement plan's host ops do not keep it busy): `metrics.stall_s` is their sum, and a timeline shades them."""
    comp = sorted((e.start_s, e.end_s) for e in plan.events if e.kind == "compute" and not e.on_cpu)
    out = []
    t = 0.0
    for s, e in comp:
        if s > t:
            out.append((t, s))
        t = max(t, e)
    if plan.makespan_s > t:
        out.append((t, plan.makespan_s))
    return out


def stall_of(makespan_s: float, busy_s: float) -> float:
    """`metrics.stall_s` (docs/formats.md): the makespan less the (GPU's) compute stream's busy time, reruns
    included: the sum of `compute_stalls`."""
    return max(0.0, makespan_s - busy_s)


def event_counts(plan: "Plan") -> dict[str, float | int]:
    """What a plan runs, counted from its events alone (no graph): copies each way, frees, reruns and their
    seconds, and all compute's seconds. `hybrid.validator.event_figures` adds the figures that need the graph."""
    ev = plan.events
    return {"swap_ins": sum(1 for e in ev if e.kind == "swap_in"),
            "swap_outs": sum(1 for e in ev if e.kind == "swap_out"),
            "frees": sum(1 for e in ev if e.kind == "free"),
            "recomputes": sum(1 for e in ev if e.kind == "compute" and e.recompute),
            "recompute_s": float(sum(e.end_s - e.start_s for e in ev if e.kind == "compute" and e.recompute)),
            "compute_s": float(sum(e.end_s - e.start_s for e in ev if e.kind == "compute"))}
