"""The one order in which a plan's events run.

The rules read a plan on times, within a tolerance; the executor issues its events one after another. This is
that order, shared by the executor (`executor.program`, through `hybrid.swap.from_plan`), the validator's
run-order replay and rule 5's count within an instant (`hybrid.validator`), so that a plan that validates runs
as it reads. docs/formats.md, *Run order*, states it for users.
"""
from __future__ import annotations

from collections.abc import Iterator

from hybrid.graph import Graph
from hybrid.plan.types import Event, Plan

_KIND = {"swap_in": 0, "compute": 1, "swap_out": 2, "free": 3}


def _tie(e: Event) -> int:
    """Order among events tied in start and end. Those that take time are on different streams, so none reads
    what another writes before it ends and only the issue order is at stake: copies in, the compute, copies
    out. Those that take none run as the file lists them: the order the planner issued them in (a zero-time op
    before the free of its input, a swap_out before the swap_in that brings the copy back), which no rule on
    kinds recovers."""
    return _KIND[e.kind] if e.end_s > e.start_s else 0


def _ties(events: list[Event], order: list[int]) -> Iterator[tuple[int, int]]:
    """[k, j) ranges of `order` whose events tie in start and end (one range per event that ties with none)."""
    k = 0
    while k < len(order):
        e = events[order[k]]
        j = k + 1
        while j < len(order) and (events[order[j]].start_s, events[order[j]].end_s) == (e.start_s, e.end_s):
            j += 1
        yield k, j
        k = j


class _Tensors:
    """The tensors an event reads and makes, as tensor indices."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.a = g.arrays

    def reads(self, e: Event) -> set[int]:
        if e.kind != "compute":
            return set()
        o = self.g.op_index[e.op]
        return {int(t) for t in self.a.in_idx[self.a.in_ptr[o]:self.a.in_ptr[o + 1]]}

    def makes(self, e: Event) -> set[int]:
        if e.kind == "swap_in":
            return {self.g.tensor_index[e.tensor]}
        if e.kind == "compute":
            o = self.g.op_index[e.op]
            return {int(t) for t in self.a.out_idx[self.a.out_ptr[o]:self.a.out_ptr[o + 1]]}
        return set()

    def touched(self, e: Event) -> set[int]:
        return self.reads(e) | self.makes(e) if e.kind == "compute" else {self.g.tensor_index[e.tensor]}


def _releases_first(g: Graph, plan: Plan, order: list[int]) -> list[int]:
    """Releases at an allocation's instant (within eps) handed back before it, as rule 5 counts them.

    Sorting by start puts an allocation ahead of a `free` up to eps after it, and a hand-written file may list
    a zero-time compute before an unrelated `free` at its instant; the copies it allocates would then overlap
    one the plan has already released. Before each allocating event, a release within eps of its start moves
    ahead of it when its tensor is on the device and neither that event nor any between them touches the
    tensor.
    """
    events = plan.events
    eps = plan.tolerance_s
    ts = _Tensors(g)

    def release_to_move(k: int) -> int | None:
        """Position of a release of a live tensor, at the instant of the allocating event at k, to put first.
        A compute re-making a live output (a zero-time rerun) releases the old copy first, as the validator
        pairs them (rule 2: while a copy is live its release goes first), whoever reads it at that instant: the
        readers after the rerun read the new copy."""
        e = events[out[k]]
        remade = ts.makes(e) & live if e.kind == "compute" else set()
        blocked = (ts.touched(e) - remade) if e.kind == "compute" else set()
        for j in range(k + 1, len(out)):
            f = events[out[j]]
            if f.start_s > e.start_s + eps:
                return None
            if f.kind in ("swap_out", "free") and f.end_s <= e.start_s + eps:
                t = g.tensor_index[f.tensor]
                if t in live and t not in blocked:
                    return j
            blocked |= ts.touched(f) - remade
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
            live |= ts.touched(e)            # a compute's inputs are live already
        else:
            live.discard(g.tensor_index[e.tensor])
        k += 1
    return out


def _ties_as_they_can_run(g: Graph, plan: Plan, order: list[int]) -> list[int]:
    """Ties listed in an order that cannot run, mended; a plan whose ties are listed as they run (every
    planner's) is left as it is.

    The rules on times allow, at one instant, a copy's release and a zero-time compute that reads it, or a
    zero-length swap_in (zero bytes, no latency) and its reader, in either file order, so a hand-written or
    re-sorted file may list them so that they cannot run. A release listed before the copy exists moves after
    the tied event that makes it; one listed before tied computes that read the copy moves after the last of
    them (before the next event that makes or releases the tensor), once. A compute listed before the tied
    swap_in or rerun that brings its input has that one moved before it."""
    events = plan.events
    ts = _Tensors(g)
    out = list(order)
    # a tie of releases alone (the frees after an op) needs no mending; moves stay inside a tie
    tie_end = [0] * len(out)
    mend = [False] * len(out)
    for k, j in _ties(events, out):
        tie_end[k:j] = [j] * (j - k)
        mend[k:j] = [j - k > 1 and any(events[out[p]].kind in ("compute", "swap_in") for p in range(k, j))] * (j - k)

    def release_after(k: int, t: int, live: bool) -> int | None:
        """Where the release of t at k goes: after the tied readers of its copy (and, with no copy yet, after
        the event that makes it), before the next event that makes or releases t; None: where it is."""
        after = None
        made = live
        for p in range(k + 1, tie_end[k]):
            f = events[out[p]]
            if t in ts.makes(f):
                if made:
                    break
                made, after = True, p
            elif f.kind != "compute":
                if g.tensor_index[f.tensor] == t:
                    break
            elif made and t in ts.reads(f):
                after = p
        return after if made else None

    live = {g.tensor_index[t] for t in plan.resident_at_start}
    moved: set[int] = set()     # each release moves once; each pulled copy once (a cycle of ties stops)
    k = 0
    while k < len(out):
        e = events[out[k]]
        if mend[k] and out[k] not in moved:
            if e.kind in ("free", "swap_out"):
                p = release_after(k, g.tensor_index[e.tensor], g.tensor_index[e.tensor] in live)
            else:
                missing = ts.reads(e) - live
                p = next((p for p in range(k + 1, tie_end[k]) if missing & ts.makes(events[out[p]])
                          and (events[out[p]].kind == "swap_in" or events[out[p]].recompute)), None)
            if p is not None:
                i = out.pop(k if e.kind in ("free", "swap_out") else p)
                out.insert(p if e.kind in ("free", "swap_out") else k, i)   # the event now at k is looked at next
                moved.add(i)
                continue
        if e.kind in ("free", "swap_out"):
            live.discard(g.tensor_index[e.tensor])
        else:
            live |= ts.makes(e)
        k += 1
    return out


def event_order(graph: Graph, plan: Plan) -> list[int]:
    """The one order in which a plan's events run (docs/formats.md, *Run order*): by start, end and `_tie`;
    first runs tied at one instant take their places in schedule order (the rules bind computes to the
    schedule, whatever the file's order); then `_ties_as_they_can_run` and `_releases_first`."""
    events = plan.events
    rank = {oid: k for k, oid in enumerate(plan.schedule)}
    order = sorted(range(len(events)), key=lambda i: (events[i].start_s, events[i].end_s, _tie(events[i]), i))
    for k, j in _ties(events, order):
        slots = [p for p in range(k, j) if events[order[p]].kind == "compute" and not events[order[p]].recompute]
        if len(slots) > 1:
            firsts = sorted((order[p] for p in slots), key=lambda i: rank.get(events[i].op, -1))
            for p, i in zip(slots, firsts):
                order[p] = i
    return _releases_first(graph, plan, _ties_as_they_can_run(graph, plan, order))
