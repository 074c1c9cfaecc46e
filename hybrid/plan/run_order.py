"""The one order in which a plan's events run.

The rules read a plan on times, within a tolerance; the executor issues its events one after another. This is
that order, shared by the executor (`executor.program`, through `hybrid.swap.from_plan`), the validator's
run-order replay and rule 5's count within an instant (`hybrid.validator`), so that a plan that validates runs
as it reads. docs/formats.md, *Run order*.
"""
from __future__ import annotations

from hybrid.graph import Graph
from hybrid.plan.types import Plan

_KIND = {"swap_in": 0, "compute": 1, "swap_out": 2, "free": 3}


def _tie(e) -> int:
    """Order among events tied in start and end. Those that take time are on different streams: copies in,
    the compute, copies out (none reads what another writes before it ends). Those that take none (zero-time
    ops, frees, copies of zero bytes without latency) as the file lists them: the order the planner issued
    them in, a swap_out before the swap_in that brings the copy back."""
    return _KIND[e.kind] if e.end_s > e.start_s else 0


def _releases_first(g: Graph, plan: Plan, order: list[int]) -> list[int]:
    """Releases at an allocation's instant (within eps) handed back before it, as rule 5 counts them.

    Sorting by start puts an allocation ahead of a `free` up to eps after it, and a hand-written file may list
    a zero-time compute before an unrelated `free` at its instant; the copies it allocates would then overlap one the plan
    has already released. Before each allocating event, a release within eps of its start moves ahead of it
    when its tensor is on the device and neither that event nor any between them touches the tensor.
    """
    events = plan.events
    a = g.arrays
    eps = plan.tolerance_s

    def outputs(e) -> set[int]:
        o = g.op_index[e.op]
        return {int(t) for t in a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]]}

    def touched(e) -> set[int]:
        if e.kind == "compute":
            o = g.op_index[e.op]
            return {int(t) for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]} | outputs(e)
        return {g.tensor_index[e.tensor]}

    def release_to_move(k: int) -> int | None:
        """Position of a release of a live tensor, at the instant of the allocating event at k, to put first.
        A compute re-making a live output (a zero-time rerun) releases the old copy first, as the validator
        pairs them (rule 2: while a copy is live its release goes first), whoever reads it at that instant: the
        readers after the rerun read the new copy."""
        e = events[out[k]]
        remade = outputs(e) & live if e.kind == "compute" else set()
        blocked = (touched(e) - remade) if e.kind == "compute" else set()
        for j in range(k + 1, len(out)):
            f = events[out[j]]
            if f.start_s > e.start_s + eps:
                return None
            if f.kind in ("swap_out", "free") and f.end_s <= e.start_s + eps:
                t = g.tensor_index[f.tensor]
                if t in live and t not in blocked:
                    return j
            blocked |= touched(f) - remade
        return None

    live = {g.tensor_index[t] for t in plan.resident_at_start}
    out = list(order)
    k = 0
    while k < len(out):
        e = events[out[k]]
        if e.kind in ("compute", "swap_in"):
            j = release_to_move(k)
            if j is not None:
                out.insert(k, out.pop(j))    # the release is handled first, at position k
                continue
            live |= touched(e)               # a compute's inputs are live already
        else:
            live.discard(g.tensor_index[e.tensor])
        k += 1
    return out


def _ties_as_they_can_run(g: Graph, plan: Plan, order: list[int]) -> list[int]:
    """Events tied in start and end run as the file lists them, unless that order cannot run.

    The rules on times allow a copy's release at the instant of a compute that reads it, and a zero-length
    swap_in (zero bytes, no latency) at the instant of its reader, in either file order. Where the file lists a
    release before the copy exists or before a tied compute that reads it, the release moves after that event;
    where it lists a compute before the tied swap_in or rerun that brings its input, that one moves before it.
    A plan whose ties are listed as they run (every planner's) is left as it is."""
    events = plan.events
    a = g.arrays

    def reads(e) -> set[int]:
        o = g.op_index[e.op]
        return {int(t) for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]}

    def makes(e) -> set[int]:
        if e.kind == "swap_in":
            return {g.tensor_index[e.tensor]}
        if e.kind == "compute":
            o = g.op_index[e.op]
            return {int(t) for t in a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]]}
        return set()

    def touches(f, t: int) -> bool:
        return t in reads(f) | makes(f) if f.kind == "compute" else g.tensor_index[f.tensor] == t

    live = {g.tensor_index[t] for t in plan.resident_at_start}
    out = list(order)
    # each position's tie ends where; moves stay inside a tie, so these hold throughout. A tie of releases
    # alone (the frees after an op) needs no mending: `mend` is False there
    tie_end = [0] * len(out)
    mend = [False] * len(out)
    k = 0
    while k < len(out):
        e = events[out[k]]
        j = k + 1
        while j < len(out) and (events[out[j]].start_s, events[out[j]].end_s) == (e.start_s, e.end_s):
            j += 1
        some = j - k > 1 and any(events[out[p]].kind in ("compute", "swap_in") for p in range(k, j))
        tie_end[k:j] = [j] * (j - k)
        mend[k:j] = [some] * (j - k)
        k = j
    moves = 4 * len(out)    # a plan whose ties cannot run in any order (a cycle) stops being mended
    k = 0
    while k < len(out):
        e = events[out[k]]
        end = tie_end[k]
        if not mend[k]:
            if e.kind in ("free", "swap_out"):
                live.discard(g.tensor_index[e.tensor])
            else:
                live |= makes(e)
            k += 1
            continue
        if e.kind in ("free", "swap_out"):
            t = g.tensor_index[e.tensor]
            if t in live:    # the next tied event touching t reads it: after that one
                j = next((j for j in range(k + 1, end) if touches(events[out[j]], t)), None)
                j = j if j is not None and events[out[j]].kind == "compute" and t in reads(events[out[j]]) else None
            else:            # no copy yet: after the tied event that makes it
                j = next((j for j in range(k + 1, end) if t in makes(events[out[j]])), None)
            if moves and j is not None:
                out.insert(j, out.pop(k))   # after it; the event now at k is looked at next
                moves -= 1
                continue
            live.discard(t)
        else:
            missing = reads(e) - live if e.kind == "compute" else set()
            j = next((j for j in range(k + 1, end) if missing & makes(events[out[j]])
                      and (events[out[j]].kind == "swap_in" or events[out[j]].recompute)), None)
            if moves and j is not None:
                out.insert(k, out.pop(j))   # the copy first; it is looked at next
                moves -= 1
                continue
            live |= makes(e)
        k += 1
    return out


def event_order(graph: Graph, plan: Plan) -> list[int]:
    """The one order in which a plan's events run (the executor issues them so; the validator checks every rule
    in it too): by start, then end, then `_tie`: events tied in both that take no time (zero-time ops, frees,
    copies of zero bytes without latency) run as the file lists them, the order every planner issued them in,
    first runs of ops taking their tied places in schedule order; a tie listed in an order that
    cannot run (a release before its copy exists or before a tied compute that reads it, a compute before the
    tied swap_in or rerun that brings its input) is mended (`_ties_as_they_can_run`); then a release at an
    allocating event's instant moves before it where nothing between them touches its tensor
    (`_releases_first`)."""
    events = plan.events
    rank = {oid: k for k, oid in enumerate(plan.schedule)}
    order = sorted(range(len(events)), key=lambda i: (events[i].start_s, events[i].end_s, _tie(events[i]), i))
    k = 0
    while k < len(order):   # within a tie, first runs take their slots in schedule order
        j = k
        e = events[order[k]]
        while j + 1 < len(order) and (events[order[j + 1]].start_s, events[order[j + 1]].end_s) == (e.start_s, e.end_s):
            j += 1
        slots = [p for p in range(k, j + 1) if events[order[p]].kind == "compute" and not events[order[p]].recompute]
        if len(slots) > 1:
            firsts = sorted((order[p] for p in slots), key=lambda i: rank.get(events[i].op, -1))
            for p, i in zip(slots, firsts):
                order[p] = i
        k = j + 1
    return _releases_first(graph, plan, _ties_as_they_can_run(graph, plan, order))
