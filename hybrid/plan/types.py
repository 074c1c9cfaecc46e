"""The one plan type, `hybrid-plan/1` (docs/formats.md): what every planner returns.

Loading checks the file's shape (fields, types) with messages naming the event
index; whether the plan obeys the rules is the validator's job
(`hybrid.validator`), so a hand-written plan and a produced one are judged alike.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

import math

import numpy as np

from hybrid.device import Device
from hybrid.errors import FormatError, HybridError
from hybrid.jsonio import dumps_strict, loads_strict
from hybrid.plan.events import CPU_STREAM, EVENT_KINDS, STREAM_OF_KIND
from hybrid.units import MAX_BYTES, checked_bytes, checked_number, shown_id

if TYPE_CHECKING:
    from hybrid.graph import Graph

PLAN_FORMAT = "hybrid-plan/1"
# Metrics other tools read back (summaries, --json): numbers when present. Other keys are carried as they are.
NUMERIC_METRICS = ("ideal_s", "persistent_bound_s", "lower_bound_s", "stall_s", "bytes_h2d", "bytes_d2h",
                   "peak_bytes", "pool_bytes")


@dataclass(frozen=True)
class SizeClass:
    bytes: int
    count: int


@dataclass(frozen=True)
class SizeClassAllocation:
    """SwapAdvisor's pool: fixed-size objects per class; each tensor maps to one class."""

    classes: tuple[SizeClass, ...]
    class_of: dict[str, int]
    kind: str = "size_classes"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # fields this reader does
    #                                                                     not know, written back as read

    def pool_bytes(self, alignment: int = 1) -> int:
        """The pool's bytes: each object of a class rounded up to `alignment` (the device's, rule 5; 1: as
        stated)."""
        return sum(-(-c.bytes // alignment) * alignment * c.count for c in self.classes)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "classes": [{"bytes": c.bytes, "count": c.count} for c in self.classes],
                "class_of": dict(self.class_of), **self.extra}


@dataclass(frozen=True)
class ArenaAllocation:
    """One buffer with a byte offset per tensor (MegEngine-style static planning)."""

    arena_bytes: int
    offsets: dict[str, int]
    kind: str = "arena"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "arena_bytes": self.arena_bytes, "offsets": dict(self.offsets), **self.extra}


@dataclass(frozen=True)
class UnconstrainedAllocation:
    """Only the byte budget (rule 5's first sentence): any allocator that never fragments."""

    kind: str = "unconstrained"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **self.extra}


Allocation = Union[SizeClassAllocation, ArenaAllocation, UnconstrainedAllocation]
_ALLOCATION_FIELDS = {"size_classes": ("kind", "classes", "class_of"), "arena": ("kind", "arena_bytes", "offsets"),
                      "unconstrained": ("kind",)}


def allocation_from_json(d: Any, where: str = "allocation") -> Allocation:
    if not isinstance(d, dict):
        raise FormatError(f"{where}: expected an object with a 'kind'")
    kind = d.get("kind")
    if not isinstance(kind, str):
        raise FormatError(f"{where}: field 'kind' is {kind!r}; use \"size_classes\", \"arena\" or \"unconstrained\"")
    extra = {k: v for k, v in d.items() if k not in _ALLOCATION_FIELDS.get(kind, ())}
    try:
        if kind == "size_classes":
            if not isinstance(d["classes"], list) or not isinstance(d["class_of"], dict):
                raise FormatError(f"{where}: 'classes' must be a list and 'class_of' an object")
            classes = tuple(SizeClass(checked_bytes(_field(c, "bytes", f"{where}.classes[{i}]"),
                                                    f"{where}.classes[{i}].bytes"),
                                      checked_bytes(_field(c, "count", f"{where}.classes[{i}]"),
                                                    f"{where}.classes[{i}].count"))
                            for i, c in enumerate(d["classes"]))
            class_of = {k: checked_number(v, f"{where}.class_of.{k}", lo=0, hi=max(len(classes) - 1, 0),
                                          integer=True) for k, v in d["class_of"].items()}
            return SizeClassAllocation(classes, class_of, extra=extra)
        if kind == "arena":
            if not isinstance(d["offsets"], dict):
                raise FormatError(f"{where}: 'offsets' must be an object of tensor id: byte offset")
            return ArenaAllocation(checked_bytes(d["arena_bytes"], f"{where}.arena_bytes"),
                                   {k: checked_bytes(v, f"{where}.offsets.{k}") for k, v in d["offsets"].items()},
                                   extra=extra)
        if kind == "unconstrained":
            return UnconstrainedAllocation(extra=extra)
    except KeyError as e:
        raise FormatError(f"{where}: missing field {e.args[0]!r} for kind {kind!r}") from None
    except FormatError:
        raise
    except HybridError as e:
        raise FormatError(str(e)) from None
    raise FormatError(f"{where}: field 'kind' is {kind!r}; use size_classes, arena or unconstrained")


def _field(d: Any, key: str, where: str) -> Any:
    if not isinstance(d, dict):
        raise FormatError(f"{where}: expected an object")
    if key not in d:
        raise FormatError(f"{where}: missing field {key!r}")
    return d[key]


@dataclass(frozen=True)
class Event:
    """One timeline entry. For `free`, start_s == end_s == the instant (`at_s` in the file)."""

    kind: str
    start_s: float
    end_s: float
    op: str | None = None
    tensor: str | None = None
    impl: str | None = None
    recompute: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    on_cpu: bool = False     # a compute event on the `cpu` stream (placement plans): runs on the host

    @property
    def stream(self) -> str | None:
        return CPU_STREAM if self.on_cpu else STREAM_OF_KIND.get(self.kind)

    @property
    def at_s(self) -> float:
        return self.start_s

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"kind": self.kind}
        if self.kind == "compute":
            d["op"] = self.op
            if self.impl is not None:
                d["impl"] = self.impl
            if self.recompute:
                d["recompute"] = True
        else:
            d["tensor"] = self.tensor
        if self.kind == "free":
            d["at_s"] = self.start_s
        else:
            d["stream"] = self.stream
            d["start_s"] = self.start_s
            d["end_s"] = self.end_s
        d.update(self.extra)
        return d

    @staticmethod
    def from_json(d: Any, i: int) -> "Event":
        what = f"events[{i}]"
        if not isinstance(d, dict):
            raise FormatError(f"{what}: expected an object")
        kind = d.get("kind")
        if kind not in EVENT_KINDS:
            said = "missing" if "kind" not in d else f"{kind!r}"
            raise FormatError(f"{what}: field 'kind' is {said}; use one of {', '.join(EVENT_KINDS)}")
        ref_key = "op" if kind == "compute" else "tensor"
        ref = d.get(ref_key)
        if not isinstance(ref, str):
            raise FormatError(f"{what} ({kind}): field {ref_key!r} must be a string id")
        desc = f"{what} ({kind} {ref!r})"
        try:
            if kind == "free":
                start = end = checked_number(d["at_s"], f"{desc}: at_s", lo=-math.inf)
                if d.get("stream") is not None:   # it was read past whatever it said ("gpu", 5)
                    raise FormatError(f"{desc}: a free runs on no stream, but it says stream {d['stream']!r}; "
                                      "leave the field out")
            else:
                start = checked_number(d["start_s"], f"{desc}: start_s", lo=-math.inf)
                end = checked_number(d["end_s"], f"{desc}: end_s", lo=-math.inf)
                allowed = (STREAM_OF_KIND[kind], CPU_STREAM) if kind == "compute" else (STREAM_OF_KIND[kind],)
                if "stream" in d and d["stream"] not in allowed:
                    raise FormatError(f"{desc}: stream is {d['stream']!r}, expected "
                                      f"{' or '.join(repr(x) for x in allowed)}")
        except KeyError as e:
            raise FormatError(f"{desc}: missing field {e.args[0]!r}") from None
        except FormatError:
            raise
        except HybridError as e:
            raise FormatError(str(e)) from None
        known = {"kind", "op", "tensor", "impl", "recompute", "stream", "start_s", "end_s", "at_s"}
        impl = d.get("impl")
        if impl is not None and not isinstance(impl, str):
            raise FormatError(f"{desc}: field 'impl' must be a string, got {impl!r}")
        recompute = d.get("recompute", False)
        if not isinstance(recompute, bool):
            raise FormatError(f"{desc}: field 'recompute' must be true or false, got {recompute!r}")
        return Event(kind, start, end, op=ref if kind == "compute" else None,
                     tensor=ref if kind != "compute" else None, impl=impl, recompute=recompute,
                     extra={k: v for k, v in d.items() if k not in known},
                     on_cpu=kind == "compute" and d.get("stream") == CPU_STREAM)


def _events(items: list, where: str) -> list[Event]:
    try:
        return [Event.from_json(e, i) for i, e in enumerate(items)]
    except FormatError as e:
        raise FormatError(f"{where}: {e}") from None


@dataclass(repr=False)
class Plan:
    """A `hybrid-plan/1` (docs/formats.md): how to run one iteration of a graph within a device's memory, as
    every planner returns it and `hybrid execute` runs it. `Plan.load(path)` reads a file, `save` writes one.

    Main fields: `graph` and `graph_sha256` name the graph (and its file's bytes) it was made for; `device` the
    memory and copy speeds it was planned for; `schedule` the op order; `allocation` how memory is laid out
    (arena offsets, size classes, or only a byte budget); `events` the timed computes, swaps and frees;
    `makespan_s` the iteration's time in seconds; `metrics` the planner's figures (`ideal_s`, `peak_bytes`, ...).
    A loaded plan has the right shape, not necessarily valid rules: `hybrid.validator.validate(graph, plan)`
    judges it.
    """

    graph: str
    graph_sha256: str
    device: Device
    planner: dict[str, Any]
    schedule: list[str]
    allocation: Allocation
    resident_at_start: list[str]
    events: list[Event]
    makespan_s: float
    metrics: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        """Short, for notebooks: the dataclass default printed every event (196 KB for one ResNet plan)."""
        from hybrid.units import format_bytes, format_seconds

        name = self.planner.get("name", "?") if isinstance(self.planner, dict) else "?"
        ideal = self.metrics.get("ideal_s") if isinstance(self.metrics, dict) else None
        ratio = f" (ideal/makespan {ideal / self.makespan_s:.3f})" if ideal and self.makespan_s > 0 else ""
        return (f"Plan({self.graph!r}, planner {name!r}, {len(self.events)} events, makespan "
                f"{format_seconds(self.makespan_s)}{ratio}, {self.allocation.kind} pool in "
                f"{format_bytes(self.device.usable_bytes)}, device {self.device.name!r})")

    def graph_mismatch(self, graph: "Graph") -> list[str]:
        """Rule 0's first reading (`hybrid.validator.require_plan_of` raises on it): the plan names this graph,
        and this version of its file when it states a sha256. Empty when it is this graph's plan."""
        out = []
        if not self.graph:
            out.append(f"the plan names no graph (its field 'graph' is missing or empty); a plan for this graph "
                       f"says \"graph\": {graph.name!r}")
        elif self.graph != graph.name:
            out.append(f"plan is for graph {self.graph!r}, not {graph.name!r}")
        if self.graph_sha256 and self.graph_sha256.lower() != graph.sha256.lower():   # hex digits in either case
            out.append(f"graph_sha256 {shown_id(self.graph_sha256[:12])}… does not match the graph's "
                       f"{graph.sha256[:12]}… "
                       "(the plan was made for another graph file of that name, or another version of it)")
        return out

    def require_graph(self, graph: "Graph", what: str) -> None:
        """One line for a reader given something else than this plan's graph (a path, another graph's plan:
        read against another graph every tensor it lacks counted 0 bytes)."""
        from hybrid.errors import InvalidPlanError, require_instance
        from hybrid.graph import Graph

        require_instance("graph", graph, Graph, "hybrid.graph.Graph (Graph.load(path))")
        why = self.graph_mismatch(graph)
        if why:
            raise InvalidPlanError(f"the plan was made for another graph than graph {graph.name!r} ({why[0]}); "
                                   f"give {what} the graph it was made for")

    def events_frame(self, graph: "Graph | None" = None) -> "pd.DataFrame":  # noqa: F821 - pandas, core
        """The events as a pandas table, one row each in the plan's order: kind, stream, op, tensor, impl,
        recompute, start_s, end_s, duration_s, and the tensor's arena offset where the plan has offsets (else
        missing). For a notebook: filter, group by stream, sum the copies' time.
        `impl` is the event's own, which the format leaves out where the op runs its default implementation
        (docs/formats.md); given the plan's `graph`, every compute event names the one it runs, and a `bytes`
        column gives each copy's and free's tensor size."""
        import pandas as pd

        if not isinstance(self.events, (list, tuple)) or not all(isinstance(e, Event) for e in self.events):
            # a Python-built plan's events=None was a TypeError here (the validator's rule 0 says the same)
            raise HybridError("the plan's fields are not what the format allows: events must be a list of Event; "
                              "hybrid.validator.validate(graph, plan) lists them")
        if graph is not None:
            self.require_graph(graph, "events_frame")
        offsets = getattr(self.allocation, "offsets", None) or {}

        def impl(e: Event) -> str | None:
            if e.impl is not None or graph is None or e.kind != "compute" or e.op not in graph.op_index:
                return e.impl
            op = graph.op(e.op)
            return op.implementations[op.default_impl].name

        rows = [{"kind": e.kind, "stream": e.stream, "op": e.op, "tensor": e.tensor, "impl": impl(e),
                 "recompute": bool(e.recompute), "start_s": e.start_s, "end_s": e.end_s,
                 "duration_s": e.end_s - e.start_s,
                 "offset": offsets.get(e.tensor) if e.tensor is not None else None} for e in self.events]
        df = pd.DataFrame(rows, columns=["kind", "stream", "op", "tensor", "impl", "recompute", "start_s", "end_s",
                                         "duration_s", "offset"])
        df["offset"] = df["offset"].astype("Int64")
        if graph is not None:   # a copy's bytes, so its bandwidth is a column division away
            size = {t.id: t.bytes for t in graph.tensors}
            df["bytes"] = pd.array([size.get(t) if t is not None else None for t in df["tensor"]], dtype="Int64")
        return df

    @property
    def recomputes(self) -> bool:
        """Whether the plan reruns ops (recompute events): only bounds with recompute hold for it."""
        return any(e.kind == "compute" and e.recompute for e in self.events)

    @property
    def tolerance_s(self) -> float:
        """The time tolerance every reader of this plan applies (docs/formats.md): 1e-9 x max(1 s, makespan_s,
        the last finite event end). Near-ties within it resolve in the plan's favour, in the validator and in
        the executor alike."""
        ends = [e.end_s for e in self.events if np.isfinite(e.end_s)]
        ms = self.makespan_s if np.isfinite(self.makespan_s) else 0.0
        return 1e-9 * max(1.0, ms, max(ends, default=0.0))

    def impl_choice(self, graph: "Graph") -> np.ndarray:
        """Each op's implementation as this plan's compute events name it (index into the op's
        `implementations`; the default where no event names one): what the planner, the walk and the bound
        must time ops with. A name the op does not have is an error naming both."""
        a = graph.arrays
        choice = a.default_impl.astype(np.int32)
        for e in self.events:
            if e.kind == "compute" and not e.recompute and e.impl is not None and e.op in graph.op_index:
                names = [im.name for im in graph.op(e.op).implementations]
                if e.impl not in names:
                    raise HybridError(f"plan: op {e.op!r} has no implementation {e.impl!r} (it has: "
                                      f"{', '.join(names) or 'none'})")
                choice[graph.op_index[e.op]] = names.index(e.impl)
        return choice

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": PLAN_FORMAT, "graph": self.graph, "graph_sha256": self.graph_sha256,
            "device": self.device.to_json(), "planner": dict(self.planner), "schedule": list(self.schedule),
            "allocation": self.allocation.to_json(), "resident_at_start": list(self.resident_at_start),
            "events": [e.to_json() for e in self.events], "makespan_s": self.makespan_s,
            "metrics": dict(self.metrics),
        }
        for k, v in self.extra.items():
            d.setdefault(k, v)
        return d

    def dumps(self) -> str:
        """Strict JSON: a NaN or infinite figure is an error naming its field, before anything is written."""
        return dumps_strict(self.to_json(), f"plan for graph {self.graph!r}", separators=(",", ":"))

    def save(self, path: str | Path) -> None:
        """Write the file whole or not at all (a temporary file, then a rename), so that a job stopped while
        writing never leaves a truncated plan where an earlier one was."""
        from hybrid.files import write_whole

        write_whole(path, self.dumps())

    @staticmethod
    def load(path: str | Path) -> "Plan":
        """The plan in a `hybrid-plan/1` file. FormatError (a HybridError) for a file that cannot be read, is
        not strict JSON or breaks the format's shape, naming the field or event; the plan's rules are not
        checked here (`hybrid.validator.validate`)."""
        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as e:
            raise FormatError(f"cannot read plan file {str(p)!r}: {e.strerror}") from None
        return Plan.from_json(loads_strict(data, str(p)), where=str(p))

    @staticmethod
    def from_json(d: Any, where: str = "plan") -> "Plan":
        if not isinstance(d, dict):
            raise FormatError(f"{where}: a plan file is a JSON object")
        if d.get("format") != PLAN_FORMAT:
            hint = " (is this a graph? use --graph)" if str(d.get("format")).startswith("hybrid-graph") else ""
            raise FormatError(f"{where}: field 'format' is {d.get('format')!r}, expected {PLAN_FORMAT!r}{hint}")
        for key, typ in (("schedule", list), ("events", list), ("allocation", dict), ("device", dict)):
            if not isinstance(d.get(key), typ):
                raise FormatError(f"{where}: field {key!r} is missing or not a {typ.__name__}")
        if not all(isinstance(x, str) for x in d["schedule"]):
            raise FormatError(f"{where}: 'schedule' must be a list of op ids")
        resident = d.get("resident_at_start", [])
        if not isinstance(resident, list) or not all(isinstance(x, str) for x in resident):
            raise FormatError(f"{where}: 'resident_at_start' must be a list of tensor ids")
        for key in ("planner", "metrics"):
            if d.get(key) is not None and not isinstance(d[key], dict):
                raise FormatError(f"{where}: field {key!r} must be an object, got {d[key]!r}")
        for key in ("graph", "graph_sha256"):
            if not isinstance(d.get(key, ""), str):
                raise FormatError(f"{where}: field {key!r} must be a string, got {d[key]!r}")
        metrics = dict(d.get("metrics") or {})
        if "makespan_s" not in d:
            raise FormatError(f"{where}: field 'makespan_s' is missing (the largest event end, docs/formats.md "
                              "rule 7)")
        try:
            makespan = checked_number(d["makespan_s"], f"{where}: makespan_s", lo=-math.inf)
            for key in NUMERIC_METRICS:
                if key in metrics:
                    checked_number(metrics[key], f"{where}: metrics.{key}", lo=-MAX_BYTES, hi=MAX_BYTES)
        except HybridError as e:
            raise FormatError(str(e)) from None
        known = {"format", "graph", "graph_sha256", "device", "planner", "schedule", "allocation",
                 "resident_at_start", "events", "makespan_s", "metrics"}
        return Plan(
            graph=d.get("graph", ""), graph_sha256=d.get("graph_sha256", ""),
            device=Device.from_json(d["device"], f"{where}: device"),
            planner=dict(d.get("planner") or {}), schedule=list(d["schedule"]),
            allocation=allocation_from_json(d["allocation"], f"{where}: allocation"),
            resident_at_start=list(resident),
            events=_events(d["events"], where),
            makespan_s=makespan, metrics=metrics,
            extra={k: v for k, v in d.items() if k not in known},
        )
