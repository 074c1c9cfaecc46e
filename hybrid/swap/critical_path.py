"""Where a plan's makespan goes: the chain of events that decides it, as stretches of one stream each.

Walking back from the event that ends last, each event's start is explained by
the predecessor that ended just then: an op or copy it depends on, or the
previous event on its own stream. The chain covers the makespan; a long
stretch of swap_outs (or swap_ins) on it means the copy stream ran back to
back there and the computation waited for it, which no re-timing of copies
can shorten, only fewer bytes moved then. Compute stretches are the time the
plan could not have saved at all.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.plan.events import EVENT_KINDS, FREE


def critical_chain(kind: np.ndarray, start: np.ndarray, end: np.ndarray, dep_ptr: np.ndarray,
                   dep_idx: np.ndarray) -> list[int]:
    """Node indices of the chain, first to last. Ties prefer a dependency of another stream (the cause)."""
    n = len(kind)
    if n == 0:
        return []
    tol = 1e-9 * max(1.0, float(end.max()))
    prev_same = np.full(n, -1, np.int64)
    for k in np.unique(kind):
        if k == FREE:  # frees take no stream time
            continue
        idx = np.nonzero(kind == k)[0]
        idx = idx[np.lexsort((end[idx], start[idx]))]
        prev_same[idx[1:]] = idx[:-1]
    by_end = np.argsort(end, kind="stable")
    ends = end[by_end]
    chain = [int(np.argmax(end))]
    while start[chain[-1]] > tol:
        i = chain[-1]
        best = -1
        for d in dep_idx[dep_ptr[i]:dep_ptr[i + 1]]:
            if abs(end[d] - start[i]) <= tol and (best < 0 or kind[d] != kind[i]):
                best = int(d)
        p = prev_same[i]
        if best < 0 and p >= 0 and abs(end[p] - start[i]) <= tol:
            best = int(p)
        if best < 0:
            # An edge the plan file does not show: the planner made this event wait for memory another event
            # released just then (from_plan recovers data and stream edges, not every such hand-off). Take an
            # event ending then that started earlier (the walk moves back in time), of another stream if any.
            lo, hi = np.searchsorted(ends, start[i] - tol), np.searchsorted(ends, start[i] + tol, side="right")
            cands = [int(j) for j in by_end[lo:hi] if start[j] < start[i] - tol]  # strictly earlier: no cycles
            if cands:
                best = min(cands, key=lambda j: (kind[j] == kind[i], kind[j] == FREE, j))
        if best < 0:  # waits for nothing that ends then (a latency or rounding): stop rather than guess
            break
        chain.append(best)
    return chain[::-1]


def critical_path(graph: Graph, plan: Plan) -> pd.DataFrame:
    """The chain as stretches: kind (compute, swap_in, swap_out), start_s, end_s, busy_s, events, bytes."""
    from hybrid.swap.from_plan import from_plan

    aug = from_plan(graph, plan)
    chain = critical_chain(aug.kind, aug.start, aug.end, aug.dep_ptr, aug.dep_idx)
    nbytes = graph.arrays.t_bytes
    rows: list[dict] = []
    for i in chain:
        k = EVENT_KINDS[int(aug.kind[i])]
        if k == "free":
            continue
        b = int(nbytes[aug.ref[i]]) if k != "compute" else 0
        dur = float(aug.end[i] - aug.start[i])
        if rows and rows[-1]["kind"] == k:
            r = rows[-1]
            r["end_s"] = float(aug.end[i])
            r["busy_s"] += dur
            r["events"] += 1
            r["bytes"] += b
        else:
            rows.append({"kind": k, "start_s": float(aug.start[i]), "end_s": float(aug.end[i]), "busy_s": dur,
                         "events": 1, "bytes": b})
    return pd.DataFrame(rows, columns=["kind", "start_s", "end_s", "busy_s", "events", "bytes"])


def path_shares(path: pd.DataFrame, makespan_s: float) -> dict[str, float]:
    """Seconds on the chain per kind, and the share of the makespan the copy streams decide."""
    out = {f"{k}_s": float(path.loc[path["kind"] == k, "busy_s"].sum()) for k in ("compute", "swap_out", "swap_in")}
    out["copy_share"] = (out["swap_out_s"] + out["swap_in_s"]) / makespan_s if makespan_s > 0 else 0.0
    return out
