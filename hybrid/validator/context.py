"""Rule 0: does the plan belong to this graph? Then the plan as flat per-event lists.

Everything after this module works on integer op/tensor indices and plain float
lists, so the rule checks are cheap loops and never look an id up twice.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from hybrid.graph import DEFAULT_IMPL, Graph
from hybrid.plan import ArenaAllocation, Event, Plan, SizeClassAllocation, UnconstrainedAllocation
from hybrid.plan.events import COMPUTE, FREE, KIND_CODE, SWAP_IN, SWAP_OUT  # noqa: F401 (rules import them here)
from hybrid.units import (MAX_ALIGNMENT, MAX_BYTES, MAX_INTEGER, MAX_RATE, MAX_SECONDS, MIN_RATE, format_bytes,
                          format_seconds, shown_id)
from hybrid.validator.report import Found, Violation

NO_EVENT = -1


def fmt_t(x: float) -> str:
    """A time in a finding: `format_seconds` with 12 significant digits, enough to tell apart two times that
    the tolerance (1e-9 of the makespan, at least 1 ns) parts."""
    return format_seconds(x, 12)


@dataclass
class Context:
    """The plan resolved against the graph: per-event lists indexed like `plan.events`."""

    graph: Graph
    plan: Plan
    kind: list[int]
    start: list[float]
    end: list[float]
    op: list[int]            # op index for compute events, -1 otherwise
    tensor: list[int]        # tensor index for swap/free events, -1 for compute
    recompute: list[bool]
    on_cpu: list[bool]       # compute on the host (`cpu` stream of a placement plan): host copies in and out
    impl_name: list[str]     # chosen impl (compute events), "" otherwise
    impl_time: list[float]   # chosen impl's time (compute), 0 otherwise
    impl_ws: list[int]       # chosen impl's workspace (compute), 0 otherwise
    t_bytes: list[int]
    t_persistent: list[bool]
    op_inputs: list[tuple[int, ...]]   # deduplicated
    op_outputs: list[tuple[int, ...]]
    op_updates: list[tuple[int, ...]]
    producer: list[int]      # per tensor, -1 for persistent
    resident: list[int]      # tensor indices of resident_at_start
    eps: float = 0.0
    times_finite: bool = True
    memory: int = 0

    @property
    def n(self) -> int:
        return len(self.kind)

    @functools.cached_property
    def run_order(self) -> list[int]:
        """Event indices in the one order they run (`hybrid.plan.run_order.event_order`)."""
        from hybrid.plan.run_order import event_order

        return event_order(self.graph, self.plan)

    @functools.cached_property
    def run_pos(self) -> np.ndarray:
        """Per event, its position in `run_order`."""
        pos = np.empty(self.n, dtype=np.float64)
        pos[np.asarray(self.run_order, dtype=np.int64)] = np.arange(self.n, dtype=np.float64)
        return pos

    # ---- messages ----------------------------------------------------------
    def describe(self, i: int) -> str:
        """`events[i] swap_in 'x' [0, 8.7e-05 s)`: how every message names an event."""
        if i == NO_EVENT:
            return "resident_at_start"
        k = self.kind[i]
        if k == COMPUTE:
            name = self.graph.ops[self.op[i]].id
            what = "recompute" if self.recompute[i] else "cpu compute" if self.on_cpu[i] else "compute"
            return f"events[{i}] {what} {name!r} [{fmt_t(self.start[i])}, {fmt_t(self.end[i])})"
        name = self.graph.tensors[self.tensor[i]].id
        if k == FREE:
            return f"events[{i}] free {name!r} at {fmt_t(self.start[i])}"
        kind = "swap_in" if k == SWAP_IN else "swap_out"
        return f"events[{i}] {kind} {name!r} [{fmt_t(self.start[i])}, {fmt_t(self.end[i])})"

    def updates_of(self, i: int) -> tuple[int, ...]:
        """Tensors compute event i updates in place: none for a recompute, which redoes batch norm's statistics
        on copies and replays a random op's generator (rule 1 rejects reruns of any other updating op)."""
        return () if self.recompute[i] else self.op_updates[self.op[i]]

    def found(self, rule: int, i: int | None, text: str) -> Found:
        """A violation about event i (None: about the whole plan; NO_EVENT: a resident copy at time 0)."""
        if i is None:
            return Found(-math.inf, -1, Violation(rule, text, None))
        if i == NO_EVENT:
            return Found(0.0, -1, Violation(rule, f"resident_at_start: {text}", None))
        t = self.start[i] if math.isfinite(self.start[i]) else math.inf
        return Found(t, i, Violation(rule, f"{self.describe(i)}: {text}", i))

    def tid(self, t: int) -> str:
        return repr(self.graph.tensors[t].id)

    def oid(self, o: int) -> str:
        return repr(self.graph.ops[o].id)

    def transfer_time(self, kind: int, t: int) -> float:
        dev = self.plan.device
        bw = dev.h2d_bytes_per_s if kind == SWAP_IN else dev.d2h_bytes_per_s
        return self.t_bytes[t] / bw + dev.transfer_latency_s


def finite_number(v: object) -> bool:
    """A finite JSON number in float range (not true/false, which Python reads as 1 and 0; not an integer of
    hundreds of digits, which JSON allows and `math.isfinite` overflows on)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    return abs(v) <= MAX_INTEGER if isinstance(v, int) else math.isfinite(v)


def device_problems(dev: object) -> list[str]:
    """The validator's own reading of the plan's device: what makes it unusable for timing copies or sizing
    memory (a NaN latency would make every copy's duration check pass), within the ranges every flag and file
    is held to (`hybrid.units`: beyond them sums over the plan overflow, a latency of 1e308 s, or leave int64,
    an alignment of 2^80). Independent of Device's own checks, which a plan built in Python could bypass."""
    out = []
    mem = getattr(dev, "memory_bytes", None)
    if not finite_number(mem) or mem < 1 or mem != int(mem) or mem > MAX_BYTES:
        out.append(f"device.memory_bytes must be a positive whole number, at most {format_bytes(MAX_BYTES)}, "
                   f"got {mem!r}")
    for key in ("h2d_bytes_per_s", "d2h_bytes_per_s"):
        v = getattr(dev, key, None)
        if not finite_number(v) or v <= 0:
            out.append(f"device.{key} must be a positive finite number, got {v!r}")
        elif not MIN_RATE <= v <= MAX_RATE:
            out.append(f"device.{key} must be from {MIN_RATE:g} to {MAX_RATE:g} bytes/s, got {v!r}")
    lat = getattr(dev, "transfer_latency_s", None)
    if not finite_number(lat) or lat < 0 or lat > MAX_SECONDS:
        out.append(f"device.transfer_latency_s must be a finite number of seconds, at least 0 and at most "
                   f"{MAX_SECONDS:g} s, got {lat!r}")
    a = getattr(dev, "alignment_bytes", None)
    if not finite_number(a) or a != int(a) or a < 1 or int(a) & (int(a) - 1) or a > MAX_ALIGNMENT:
        out.append(f"device.alignment_bytes must be a power of two, at most {format_bytes(MAX_ALIGNMENT)}, "
                   f"got {a!r}")
    r = getattr(dev, "reserve_bytes", None)
    if not finite_number(r) or r < 0 or r != int(r) or (finite_number(mem) and r >= mem):
        out.append(f"device.reserve_bytes must be a whole number from 0 to below memory_bytes, got {r!r}")
    return out


def whole(v: object) -> bool:
    """A byte count or an index as the file holds it: an int, not a bool (Python reads true as 1)."""
    return isinstance(v, int) and not isinstance(v, bool)


def shape_problems(plan: Plan) -> list[str]:
    """What a plan built in Python (not read by `Plan.from_json`, which refuses all of it) can get wrong in its
    types: each later rule reads these fields as the format's types."""
    out = []
    for key in ("graph", "graph_sha256"):
        if not isinstance(getattr(plan, key, None), str):
            out.append(f"{key} must be a string, got {getattr(plan, key, None)!r}")
    if not isinstance(plan.planner, dict):   # written as the file's "planner" object (Plan.to_json)
        out.append(f"planner must be a dict (the file's object), got {plan.planner!r}")
    for key in ("schedule", "resident_at_start"):
        v = getattr(plan, key, None)
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
            out.append(f"{key} must be a list of id strings")
    if not finite_number(plan.makespan_s):
        out.append(f"makespan_s must be a finite number, got {plan.makespan_s!r}")
    elif not abs(plan.makespan_s) <= MAX_SECONDS:
        out.append(f"makespan_s must be at most {MAX_SECONDS:g} s, got {plan.makespan_s!r}")
    if not isinstance(plan.metrics, dict):
        out.append(f"metrics must be an object, got {plan.metrics!r}")
    alloc = plan.allocation
    if isinstance(alloc, SizeClassAllocation) and not (isinstance(alloc.classes, (list, tuple))
                                                      and isinstance(alloc.class_of, dict)):
        out.append(f"allocation: classes must be a list of size classes and class_of a dict of tensor ids to class "
                   f"indices, got {type(alloc.classes).__name__} and {type(alloc.class_of).__name__}")
    elif isinstance(alloc, ArenaAllocation) and not isinstance(alloc.offsets, dict):
        out.append(f"allocation.offsets must be a dict of tensor ids to byte offsets, got "
                   f"{type(alloc.offsets).__name__}")
    elif isinstance(alloc, SizeClassAllocation):
        for k, c in enumerate(alloc.classes):
            if not all(whole(x) and 0 <= x <= MAX_BYTES for x in (getattr(c, "bytes", None),
                                                                   getattr(c, "count", None))):
                out.append(f"allocation.classes[{k}]: bytes and count must be whole numbers from 0 to "
                           f"{format_bytes(MAX_BYTES)}")
        for tid, c in alloc.class_of.items():   # an index out of range is rule 5's, at the event that needs it
            if not whole(c):
                out.append(f"allocation.class_of[{tid!r}] must be a class index (a whole number), got {c!r}")
                break
    elif isinstance(alloc, ArenaAllocation):
        if not (whole(alloc.arena_bytes) and 0 <= alloc.arena_bytes <= MAX_BYTES):
            out.append(f"allocation.arena_bytes must be a whole number from 0 to {format_bytes(MAX_BYTES)}, "
                       f"got {alloc.arena_bytes!r}")
        for tid, off in alloc.offsets.items():
            if not (whole(off) and 0 <= off <= MAX_BYTES):
                out.append(f"allocation.offsets[{tid!r}] must be a whole number of bytes from 0, got {off!r}")
                break
    elif not isinstance(alloc, UnconstrainedAllocation):
        out.append(f"allocation must be a size-class, arena or unconstrained allocation, got {alloc!r}")
    if not isinstance(plan.events, (list, tuple)):
        out.append("events must be a list of Event")
        return out
    for i, ev in enumerate(plan.events):
        if not isinstance(ev, Event):
            out.append(f"events[{i}] must be an Event, got {ev!r}")
            break
        fields = (("kind", ev.kind, str, "a string"), ("op", ev.op, (str, type(None)), "an id string or None"),
                  ("tensor", ev.tensor, (str, type(None)), "an id string or None"),
                  ("impl", ev.impl, (str, type(None)), "a string or None"),
                  ("recompute", ev.recompute, bool, "True or False"), ("on_cpu", ev.on_cpu, bool, "True or False"))
        wrong = next((f"{key} must be {want}, got {v!r}" for key, v, types, want in fields
                      if not isinstance(v, types)), None)
        if wrong:
            out.append(f"events[{i}]: {wrong}")
            return out
        times = (("at_s", ev.start_s),) if ev.kind == "free" else (("start_s", ev.start_s), ("end_s", ev.end_s))
        for key, v in times:   # NaN and inf are rule 1's; a free's one instant is its at_s in the file
            if (not isinstance(v, (int, float)) or isinstance(v, bool) or (isinstance(v, int) and not finite_number(v))
                    or (finite_number(v) and abs(v) > MAX_SECONDS)):
                out.append(f"events[{i}] {ev.kind}: {key} must be a number of seconds up to {MAX_SECONDS:g}, "
                           f"got {v!r}")
                return out
    return out


def build_context(graph: Graph, plan: Plan, types_checked: bool = False) -> tuple[Context | None, list[Found]]:
    """Resolve every id of the plan against the graph; rule-0 findings stop validation. `types_checked`: the
    caller has found no `device_problems` or `shape_problems` already (a pass over every event, not run twice)."""
    bad: list[Found] = []

    def plan_level(text: str) -> None:
        bad.append(Found(-math.inf, -1, Violation(0, text, None)))

    for text in [] if types_checked else device_problems(plan.device) + shape_problems(plan):
        plan_level(text)
    if bad:   # every later rule times copies and sizes pools with the device
        return None, bad
    for why in plan.graph_mismatch(graph):
        plan_level(why)
    ti, oi = graph.tensor_index, graph.op_index
    for k, oid in enumerate(plan.schedule):
        if oid not in oi:
            plan_level(f"schedule[{k}] names unknown op {oid!r}")
    seen: set[str] = set()
    resident: list[int] = []
    for tid in plan.resident_at_start:
        if tid not in ti:
            plan_level(f"resident_at_start names unknown tensor {tid!r}")
        elif tid in seen:
            plan_level(f"resident_at_start lists tensor {tid!r} twice")
        elif not graph.tensor(tid).persistent:
            plan_level(f"resident_at_start lists {tid!r}, which is not persistent; only persistent tensors "
                       "can be on the device when an iteration starts")
        else:
            resident.append(ti[tid])
        seen.add(tid)
    alloc = plan.allocation
    names = (alloc.class_of if isinstance(alloc, SizeClassAllocation)
             else alloc.offsets if isinstance(alloc, ArenaAllocation) else {})
    field_name = "class_of" if isinstance(alloc, SizeClassAllocation) else "offsets"
    for tid in names:
        if tid not in ti:
            plan_level(f"allocation.{field_name} names unknown tensor {tid!r}")

    n = len(plan.events)
    kind = [0] * n
    start = [0.0] * n
    end = [0.0] * n
    op = [-1] * n
    tensor = [-1] * n
    recompute = [False] * n
    on_cpu = [False] * n
    impl_name = [""] * n
    impl_time = [0.0] * n
    impl_ws = [0] * n
    ops = graph.ops
    for i, ev in enumerate(plan.events):
        k = KIND_CODE.get(ev.kind)
        if k is None:
            bad.append(Found(-math.inf, i, Violation(
                0, f"events[{i}] has kind {ev.kind!r}; use one of {', '.join(KIND_CODE)}", i)))
            continue
        kind[i] = k
        try:
            start[i], end[i] = float(ev.start_s), float(ev.end_s)
        except (TypeError, ValueError):
            bad.append(Found(-math.inf, i, Violation(0, f"events[{i}] {ev.kind}: times must be numbers", i)))
            continue
        if k == COMPUTE:
            recompute[i] = ev.recompute
            o = oi.get(ev.op) if ev.op is not None else None
            if o is None:
                bad.append(Found(-math.inf, i, Violation(0, f"events[{i}] compute names unknown op {ev.op!r}", i)))
                continue
            op[i] = o
            spec = ops[o]
            if ev.on_cpu:
                why = ("it is a recompute (reruns are planned on the device only)" if ev.recompute
                       else "the op has no cpu_time_s (capture with a --device that has a host CPU, or "
                            "`hybrid profile --backend cpu`)" if spec.cpu_time_s is None
                       else "the op updates tensors in place (only inference ops run on the host)" if spec.updates
                       else f"impl {ev.impl!r} given, but the host runs the op's cpu_time_s (omit 'impl' or write "
                            "'cpu')" if ev.impl not in (None, "cpu")
                       else "")
                if why:
                    bad.append(Found(-math.inf, i, Violation(
                        0, f"events[{i}] compute {ev.op!r} on the cpu stream: {why}", i)))
                    continue
                on_cpu[i] = True
                impl_name[i], impl_time[i], impl_ws[i] = "cpu", float(spec.cpu_time_s), 0
            elif spec.impls:
                if ev.impl is None:
                    im = spec.impls[spec.default_impl]
                else:
                    im = next((x for x in spec.impls if x.name == ev.impl), None)
                    if im is None:
                        choices = ", ".join(shown_id(x.name) for x in spec.impls)
                        bad.append(Found(-math.inf, i, Violation(
                            0, f"events[{i}] compute {ev.op!r}: impl {ev.impl!r} is not one of the op's impls "
                               f"({choices})", i)))
                        continue
                impl_name[i], impl_time[i], impl_ws[i] = im.name, im.time_s, im.workspace_bytes
            else:
                if ev.impl is not None and ev.impl != DEFAULT_IMPL:
                    bad.append(Found(-math.inf, i, Violation(
                        0, f"events[{i}] compute {ev.op!r}: impl {ev.impl!r} given, but the op lists no impls "
                           f"(omit 'impl' or write {DEFAULT_IMPL!r})", i)))
                    continue
                impl_name[i], impl_time[i], impl_ws[i] = DEFAULT_IMPL, spec.time_s, spec.workspace_bytes
        else:
            t = ti.get(ev.tensor) if ev.tensor is not None else None
            if t is None:
                bad.append(Found(-math.inf, i, Violation(
                    0, f"events[{i}] {ev.kind} names unknown tensor {ev.tensor!r}", i)))
                continue
            tensor[i] = t
    if bad:
        bad.sort()
        return None, bad

    producer = [-1] * len(graph.tensors)
    for o, spec in enumerate(ops):
        for tid in spec.outputs:
            producer[ti[tid]] = o
    ctx = Context(
        graph=graph, plan=plan, kind=kind, start=start, end=end, op=op, tensor=tensor, recompute=recompute, on_cpu=on_cpu,
        impl_name=impl_name, impl_time=impl_time, impl_ws=impl_ws,
        t_bytes=[t.bytes for t in graph.tensors], t_persistent=[t.persistent for t in graph.tensors],
        op_inputs=[tuple(dict.fromkeys(ti[x] for x in o.inputs)) for o in ops],
        op_outputs=[tuple(ti[x] for x in o.outputs) for o in ops],
        op_updates=[tuple(dict.fromkeys(ti[x] for x in o.updates)) for o in ops],
        producer=producer, resident=resident, memory=plan.device.usable_bytes,
    )
    finite_ends = [x for x in end if math.isfinite(x)]
    ctx.times_finite = len(finite_ends) == n and all(math.isfinite(x) for x in start)
    # The tolerance the format gives (1e-9 x the plan's makespan or last end), but never looser than 1e-9 x the
    # busy time recomputed here: a plan that pads its makespan with one far-off event (a free at 1e8 s) would
    # otherwise loosen every check to 0.1 s, enough to pass zero-length copies. A plan that never idles (every
    # planner's) has makespan <= busy time, so this is the format's tolerance for it.
    busy = math.fsum(impl_time[i] if kind[i] == COMPUTE else ctx.transfer_time(kind[i], tensor[i])
                     for i in range(n) if kind[i] != FREE)
    ctx.eps = min(plan.tolerance_s, 1e-9 * max(1.0, busy)) if math.isfinite(busy) else plan.tolerance_s
    return ctx, []
