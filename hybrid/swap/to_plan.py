"""Turn a timed augmented graph into the one plan type (`hybrid.plan.Plan`)."""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from hybrid.swap.pools import allocation_of
from hybrid.graph.info import ideal_time, persistent_bound
from hybrid.plan.metrics import lives_no_time, peak_from_intervals, stall_of
from hybrid.plan import Allocation, ArenaAllocation, Event, Plan
from hybrid.plan.events import COMPUTE, EVENT_KINDS, FREE, SWAP_IN
from hybrid.units import round_up
from hybrid.swap.augmented import AugmentedGraph
from hybrid.device import Device
from hybrid.graph import Graph


def device_intervals(aug: AugmentedGraph, workspaces: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(alloc, release, bytes) of every device copy and (with `workspaces`) workspace in the timeline; a copy
    occupies its bytes rounded up to the device's alignment (rule 5)."""
    g = aug.graph
    a = g.arrays
    occupied = round_up(np.asarray(a.t_bytes, dtype=np.int64), aug.device.alignment_bytes)
    alloc_at = np.full(a.n_tensors, -1.0)
    alloc_at[aug.resident_at_start] = 0.0
    starts: list[float] = []
    ends: list[float] = []
    sizes: list[int] = []
    for i in range(aug.n_nodes):
        k = int(aug.kind[i])
        r = int(aug.ref[i])
        if k == COMPUTE:
            for t in a.out_idx[a.out_ptr[r]:a.out_ptr[r + 1]]:
                alloc_at[t] = aug.start[i]
            if workspaces and aug.op_ws[r] > 0:
                starts.append(aug.start[i])
                ends.append(aug.end[i])
                sizes.append(int(aug.op_ws[r]))
        elif k == SWAP_IN:
            alloc_at[r] = aug.start[i]
        else:
            starts.append(alloc_at[r])
            ends.append(aug.end[i])
            sizes.append(int(occupied[r]))
            alloc_at[r] = -1.0
    makespan = aug.makespan
    for t in np.nonzero(alloc_at >= 0)[0]:  # still resident at the end (initial residents)
        starts.append(alloc_at[t])
        ends.append(makespan)
        sizes.append(int(occupied[t]))
    return np.array(starts), np.array(ends), np.array(sizes, dtype=np.int64)


def events_of(aug: AugmentedGraph) -> list[Event]:
    g = aug.graph
    order = np.lexsort((np.arange(aug.n_nodes), aug.start))
    out: list[Event] = []
    for i in order:
        k = int(aug.kind[i])
        r = int(aug.ref[i])
        s, e = float(aug.start[i]), float(aug.end[i])
        if k == COMPUTE:
            op = g.ops[r]
            impl = None
            if op.impls:
                idx = op.default_impl if aug.impl_choice is None else int(aug.impl_choice[r])
                impl = op.impls[idx].name
            rec = aug.recompute is not None and bool(aug.recompute[i])
            out.append(Event("compute", s, e, op=op.id, impl=impl, recompute=rec))
        else:
            out.append(Event(EVENT_KINDS[k], s, e, tensor=g.tensors[r].id))
    return out


def _tolerance(aug: AugmentedGraph) -> float:
    """The validator's eps for this timeline (Plan.tolerance_s, never looser than 1e-9 x the busy time)."""
    busy = float(np.sum((aug.end - aug.start)[aug.kind != FREE])) if aug.n_nodes else 0.0
    return 1e-9 * min(max(1.0, aug.makespan), max(1.0, busy))


def plan_metrics(aug: AugmentedGraph) -> dict[str, Any]:
    makespan = aug.makespan
    ideal = ideal_time(aug.graph, aug.op_time)
    m: dict[str, Any] = {
        "ideal_s": ideal,
        "persistent_bound_s": persistent_bound(aug.graph, aug.device),
        "stall_s": stall_of(makespan, float(np.sum((aug.end - aug.start)[aug.kind == COMPUTE]))),
        "peak_bytes": peak_from_intervals(*device_intervals(aug), eps=_tolerance(aug)),
    }
    m.update(aug.stats)
    # reruns counted from the nodes themselves, whoever made them (the walk's counters, a re-walk or a refinement
    # that kept them, a plan read back): every plan states them, 0 where none (some wrote none at all)
    rc = (aug.kind == COMPUTE) & (aug.recompute if aug.recompute is not None else False)
    m["recomputes"] = int(np.count_nonzero(rc))
    m["recompute_s"] = float(np.sum((aug.end - aug.start)[rc])) if m["recomputes"] else 0.0
    if aug.pool is not None and not aug.pool.by_bytes:
        m["pool_bytes"] = int(aug.pool.capacity)
    return m


def arena_allocation(aug: AugmentedGraph) -> ArenaAllocation:
    """The arena the walk laid out: each tensor ever on the device at its offset (`aug.offsets`)."""
    g = aug.graph
    off = aug.offsets
    on = np.flatnonzero(off >= 0)
    mem = aug.pool.t_mem
    top = int((off[on] + mem[on]).max()) if len(on) else 0
    return ArenaAllocation(top,
                           {g.tensors[int(t)].id: int(off[t]) for t in on})


def to_plan(aug: AugmentedGraph, planner: dict[str, Any], allocation: Allocation | None = None) -> Plan:
    """The plan of a timed augmented graph; `allocation` overrides the record of aug.pool (e.g. an arena)."""
    g = aug.graph
    if allocation is None and aug.pool is not None and aug.pool.arena and aug.offsets is not None:
        allocation = arena_allocation(aug)
    metrics, info = plan_metrics(aug), dict(planner)
    if isinstance(allocation, ArenaAllocation):
        # what the file states is what these events do: a pool's size belongs to size classes (a re-timed arena
        # plan's decoder pool is no allocation of it), and a carried layout record's live peak is re-measured
        metrics.pop("pool_bytes", None)
        if isinstance(info.get("arena"), dict):   # the arena's own figure: the copies alone (workspace outside it)
            live = peak_from_intervals(*device_intervals(aug, workspaces=False), eps=_tolerance(aug))
            info["arena"] = {**info["arena"], "peak_live_bytes": int(live)}
    plan = Plan(
        graph=g.name, graph_sha256=g.sha256, device=aug.device, planner=info,
        schedule=[g.ops[int(i)].id for i in aug.schedule],
        allocation=allocation if allocation is not None else allocation_of(g, aug.pool),
        resident_at_start=[g.tensors[int(t)].id for t in np.nonzero(aug.resident_at_start)[0]],
        events=events_of(aug), makespan_s=aug.makespan, metrics=metrics,
    )
    if _lives_no_time(aug):
        # within an instant rule 5 follows the order the events run (`hybrid.plan.run_order.event_order`), and
        # holds what a zero-time op reads while it allocates, which the intervals alone do not give: the
        # validator's own sweep of the plan, so the stated peak is its peak
        from hybrid.validator import memory_over_time

        plan.metrics["peak_bytes"] = int(memory_over_time(g, plan)[1].max())
    return plan


def on_device(graph: Graph, plan: Plan, device: Device, **changes: Any) -> Plan:
    """`plan`, made on another device (a re-plan with less memory, the headroom search's smaller device, the
    workspaces-aside problem), as a plan of `device`: the file's persistent-tensor bound is its own device's,
    so it is restated for `device` (a re-planned baseline stated the smaller device's, and its table row divided
    by that). `changes`: other fields replaced at once (`planner`, `graph_sha256`)."""
    metrics = dict(plan.metrics)
    if "persistent_bound_s" in metrics or "lower_bound_s" in metrics:
        metrics.pop("lower_bound_s", None)
        metrics["persistent_bound_s"] = persistent_bound(graph, device)
    return dataclasses.replace(plan, device=device, metrics=metrics, **changes)


def _lives_no_time(aug: AugmentedGraph) -> bool:
    """Whether some event takes no longer than the tolerance (a zero-time op, a copy of zero bytes without
    latency): only then does the order within an instant move rule 5's count."""
    busy = aug.kind != FREE
    return bool(np.any(lives_no_time(aug.start[busy], aug.end[busy], _tolerance(aug))))
