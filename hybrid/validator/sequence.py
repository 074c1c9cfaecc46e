"""Rules 1-6 once more, in the one order the events run (`hybrid.plan.run_order.event_order`).

The other checks compare times within eps and resolve near-ties in the plan's favour; the executor runs the
events in a single order instead (docs/formats.md, *Run order*). Where the two part
(events shorter than eps: zero-time ops, copies of a few bytes without latency), a plan could pass on times and
then run otherwise: a reader before the update the schedule puts first, a swap_out before the update it should
save, a zero-time op's input still held when its outputs are allocated. This walk replays the plan in the run
order, as `executor.program.compile_program` does, and reports where it breaks a rule, so that a plan that
validates runs as it reads.

Versions: each first run of an op that updates a tensor makes its next version. A compute must read each input
at the version its place in the schedule implies (a rerun: that of the op's first run; its own updates
exempt), and a swap_in must bring back the current version.
"""
from __future__ import annotations

import heapq
from bisect import bisect_left

from hybrid.graph.rerun import own_updates_exempt
from hybrid.plan import ArenaAllocation, SizeClassAllocation
from hybrid.graph.liveness import occupied_bytes
from hybrid.units import format_bytes
from hybrid.validator.context import COMPUTE, SWAP_IN, SWAP_OUT, Context
from hybrid.validator.lifetimes import Copies
from hybrid.validator.report import Found

MAX_FOUND = 8   # once the run order parts from the times, later findings mostly restate the first
IN_ORDER = "in the order events run (the executor's: by start and end, zero-time ties as the file lists them)"


def allocated_by(ctx: Context, i: int) -> tuple[int, ...]:
    """The tensors event i allocates device copies of as it runs: a device compute's outputs, a swap_in's tensor."""
    k = ctx.kind[i]
    if k == COMPUTE:
        return () if ctx.on_cpu[i] else ctx.op_outputs[ctx.op[i]]
    return (ctx.tensor[i],) if k == SWAP_IN else ()


class Holdings:
    """The device copies the executor holds as it runs the events in order: a copy is held from the event that
    allocates it until its release has run and the start (plus eps) of an allocating event reaches the release's
    time (a swap_out's end, a free's instant); its memory is handed back then, before that event allocates.
    The one reading of "held" that the run-order replay checks and the arena layout's lifetimes follow
    (`held_until`)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        n_t = len(ctx.t_bytes)
        self.present = [False] * n_t     # a device copy whose release has not run yet
        self.held = [False] * n_t        # its memory not yet handed back (a release waits for its time)
        self._pending: list[tuple[float, int, int]] = []   # (release time, order, tensor)

    def take(self, t: int) -> bool:
        """Hold a new device copy of t; False (nothing taken) while its previous copy is still held."""
        if self.held[t]:
            return False
        self.held[t] = self.present[t] = True
        return True

    def release(self, i: int, t: int) -> None:
        """Release event i of t has run; its memory is handed back once its time is reached."""
        self.present[t] = False
        heapq.heappush(self._pending, (self.ctx.end[i] if self.ctx.kind[i] == SWAP_OUT else self.ctx.start[i], i, t))

    def hand_back(self, i: int) -> list[int]:
        """Before allocating event i runs: the tensors whose memory is handed back, no longer held."""
        upto = self.ctx.start[i] + self.ctx.eps
        out: list[int] = []
        while self._pending and self._pending[0][0] <= upto:
            _, _, t = heapq.heappop(self._pending)
            self.held[t] = False
            out.append(t)
        return out


def held_until(ctx: Context, c: Copies) -> tuple[list[int], list[int]]:
    """The replay's (`Holdings`) reading of how long each copy (`hybrid.validator.lifetimes.Copies`) lives:
    (steps, until). `steps`: the allocating events in the run order; `until`, per copy, the last step at
    which it is still held, so that it must not share bytes with the copies that steps from the one making it
    to this one allocate (-1: none, a resident copy handed back before the first step, or a copy the replay
    never holds). Where copies or events are shorter than eps this can be later than where rule 5's sweep on
    times releases the copy (docs/formats.md, *Rule 5*); the arena layout (`hybrid.arena.lifetimes`) keeps
    both readings."""
    hold = Holdings(ctx)
    live = [-1] * len(ctx.t_bytes)     # per tensor, the copy held
    taken: list[int] = []
    for t in ctx.resident:
        if hold.take(t) and c.by_tensor[t]:
            live[t] = c.by_tensor[t][0]
            taken.append(live[t])
    steps: list[int] = []
    handed: dict[int, int] = {}        # copy -> the step before which its memory is handed back
    for i in ctx.run_order:
        outs = allocated_by(ctx, i)
        if outs:
            for t in hold.hand_back(i):
                if live[t] >= 0:
                    handed[live[t]] = len(steps)
                    live[t] = -1
            for t in outs:
                if hold.take(t):
                    live[t] = c.made_by.get((i, t), -1)
                    if live[t] >= 0:
                        taken.append(live[t])
            steps.append(i)
        elif ctx.kind[i] != COMPUTE and hold.present[ctx.tensor[i]]:
            hold.release(i, ctx.tensor[i])
    until = [-1] * len(c)
    for cid in taken:
        until[cid] = handed.get(cid, len(steps)) - 1
    return steps, until


def check_sequence(ctx: Context) -> list[Found]:
    g = ctx.graph
    plan = ctx.plan
    n_t = len(ctx.t_bytes)
    align = plan.device.alignment_bytes
    mem = occupied_bytes(g, align).tolist()   # each copy at the device's alignment, as rule 5 counts it
    alloc = plan.allocation
    offsets = ({g.tensor_index[k]: v for k, v in alloc.offsets.items() if k in g.tensor_index}
               if isinstance(alloc, ArenaAllocation) else None)
    classes = ({g.tensor_index[k]: v for k, v in alloc.class_of.items() if k in g.tensor_index}
               if isinstance(alloc, SizeClassAllocation) else None)

    # the version each first run reads: updates of the tensor by ops the schedule puts before it
    pos = {g.op_index[oid]: k for k, oid in enumerate(plan.schedule)}
    updaters: dict[int, list[int]] = {}
    for o, ups in enumerate(ctx.op_updates):
        for t in ups:
            updaters.setdefault(t, []).append(pos[o])
    for lst in updaters.values():
        lst.sort()

    def expected(o: int, t: int) -> int:
        return bisect_left(updaters[t], pos[o]) if t in updaters else 0

    version = [0] * n_t
    initial_host = {t for t in range(n_t) if ctx.t_persistent[t]} - set(ctx.resident)
    host_version: list[int | None] = [0 if t in initial_host else None for t in range(n_t)]
    hold = Holdings(ctx)
    present = hold.present
    used = 0
    per_class: dict[int, int] = {}
    # the arena's live byte ranges, disjoint, sorted by offset: a new range overlaps one iff the last range that
    # starts below its end ends above its start (a scan of every live range per allocation took 3.8 s of a
    # 10,555-event placement plan's 7 s)
    live_lo: list[int] = []
    live_ranges: list[tuple[int, int, int]] = []    # (offset, end, tensor), in live_lo's order
    range_lo: dict[int, int] = {}
    out: list[Found] = []

    def settle(i: int) -> None:
        """Memory handed back before allocating event i allocates."""
        nonlocal used
        for t in hold.hand_back(i):
            used -= mem[t]
            if classes is not None and t in classes:
                per_class[classes[t]] -= 1
            lo = range_lo.pop(t, None)
            if lo is not None:
                k = bisect_left(live_lo, lo)
                del live_lo[k], live_ranges[k]

    def take(t: int) -> str | None:
        """Allocate t's device copy; what rule 5 finds wrong, if anything."""
        nonlocal used
        hold.take(t)
        used += mem[t]
        if classes is not None and t in classes:
            c = classes[t]
            per_class[c] = per_class.get(c, 0) + 1
            if 0 <= c < len(alloc.classes) and per_class[c] > alloc.classes[c].count:
                return f"size class {c} has {per_class[c]} live objects, more than its count {alloc.classes[c].count}"
        if offsets is not None and t in offsets and ctx.t_bytes[t] > 0:
            lo, hi = offsets[t], offsets[t] + ctx.t_bytes[t]
            k = bisect_left(live_lo, hi)
            if k > 0 and live_ranges[k - 1][1] > lo:
                a, b, u = live_ranges[k - 1]
                return (f"{ctx.tid(t)} at [{lo}, {hi}) overlaps {ctx.tid(u)} at [{a}, {b}), whose release has "
                        "not run yet")
            j = bisect_left(live_lo, lo)
            live_lo.insert(j, lo)
            live_ranges.insert(j, (lo, hi, t))
            range_lo[t] = lo
        return None

    def allocate(i: int, t: int) -> None:
        if hold.held[t]:
            out.append(ctx.found(2, i, f"allocates {ctx.tid(t)} while its previous device copy is still held "
                                       f"{IN_ORDER}"))
            return
        why = take(t)
        if why:
            out.append(ctx.found(5, i, f"{why}, {IN_ORDER}"))

    def over_budget(i: int, workspace: int) -> None:
        """A byte budget (unconstrained allocation): the copies held and the event's workspace fit."""
        if offsets is None and classes is None and used + workspace > ctx.memory:
            what = "copies and workspace" if workspace else "copies"
            out.append(ctx.found(5, i, f"needs {format_bytes(used + workspace)} of device memory ({what}) "
                                       f"{IN_ORDER}, more than the usable {format_bytes(ctx.memory)}"))

    for t in ctx.resident:
        take(t)
    for i in ctx.run_order:
        k = ctx.kind[i]
        if k == COMPUTE:
            o = ctx.op[i]
            if ctx.on_cpu[i]:   # reads and writes host copies (rules 3 and 4 read them); nothing on the device
                for t in ctx.op_outputs[o]:
                    host_version[t] = version[t]
                continue
            exempt = set(ctx.op_updates[o]) if ctx.recompute[i] and own_updates_exempt(g, g.ops[o]) else set()
            for t in ctx.op_inputs[o]:
                if not present[t]:
                    out.append(ctx.found(3, i, f"input {ctx.tid(t)} has no device copy when it runs {IN_ORDER}; "
                                               "start it after the event that brings the input, not within the "
                                               "tolerance before it"))
                elif t not in exempt and version[t] != (want := expected(o, t)):
                    later = version[t] > want
                    out.append(ctx.found(1, i, f"reads {ctx.tid(t)} {'after' if later else 'before'} an in-place "
                                               f"update that the schedule puts {'after' if later else 'before'} "
                                               f"it, {IN_ORDER}; order the two by time, not within the "
                                               "tolerance"))
            outs = allocated_by(ctx, i)
            if outs:
                settle(i)
                for t in outs:
                    allocate(i, t)
                over_budget(i, ctx.impl_ws[i])
            for t in ctx.updates_of(i):
                version[t] += 1
        elif k == SWAP_IN:
            t = ctx.tensor[i]
            if host_version[t] != version[t]:
                what = "no host copy" if host_version[t] is None else "a stale host copy"
                out.append(ctx.found(4, i, f"brings back {what} of {ctx.tid(t)} {IN_ORDER}: the swap_out that "
                                           "saves its current value must run before it"))
            settle(i)
            allocate(i, t)
            over_budget(i, 0)
        else:
            t = ctx.tensor[i]
            if not present[t]:
                out.append(ctx.found(2, i, f"releases {ctx.tid(t)}, which has no device copy then {IN_ORDER}"))
                continue
            if k == SWAP_OUT:
                host_version[t] = version[t]
            hold.release(i, t)
        if len(out) >= MAX_FOUND:
            break
    if not out:
        for t in range(n_t):
            if ctx.t_persistent[t] and not present[t] and host_version[t] != version[t]:
                out.append(ctx.found(6, None, f"persistent tensor {ctx.tid(t)} ends the iteration with a stale host "
                                              f"copy {IN_ORDER}: its last swap_out runs before its last update"))
    return out

