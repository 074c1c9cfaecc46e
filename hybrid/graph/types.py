"""The one graph type: an iteration's dataflow graph, `hybrid-graph/1` (docs/formats.md).

Loading validates everything FORMATS.md requires and names the offending id and
field; planners never see an invalid graph. Array forms for the hot loops live in
`hybrid.graph.arrays` and are built once per graph.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from hybrid.device import Device
from hybrid.errors import FormatError, HybridError
from hybrid.jsonio import dumps_strict, loads_strict
from hybrid.units import (MAX_BYTES, MAX_SECONDS, checked_bytes, checked_number, format_bytes, format_seconds,
                          shown_id)

if TYPE_CHECKING:
    from hybrid.graph.arrays import GraphArrays

GRAPH_FORMAT = "hybrid-graph/1"
TENSOR_KINDS = ("param", "input", "activation", "gradient", "optimizer_state", "other")
DEFAULT_IMPL = "default"

_TENSOR_FIELDS = {"id", "bytes", "kind", "persistent"}
_OP_FIELDS = {"id", "kind", "inputs", "outputs", "time_s", "workspace_bytes", "impls", "updates", "cpu_time_s"}
_GRAPH_FIELDS = {"format", "name", "device", "tensors", "ops"}
MISSPELT_CUTOFF = 0.8   # difflib's ratio: workspce_bytes 0.97, tme_s 0.91; the capture's own fields (shape, dtype,
                        # stride, aten, cost, phase, rng, model, bindings) are all under 0.6


@dataclass(frozen=True)
class Tensor:
    id: str
    bytes: int
    kind: str = "other"         # the file's default too (a tensor whose role is not stated)
    persistent: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"id": self.id, "bytes": self.bytes, "kind": self.kind}
        if self.persistent:
            d["persistent"] = True
        d.update(self.extra)
        return d


@dataclass(frozen=True)
class Impl:
    """One implementation of an op (e.g. a convolution algorithm)."""

    name: str
    time_s: float
    workspace_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "time_s": self.time_s, "workspace_bytes": self.workspace_bytes}


@dataclass(frozen=True)
class Op:
    id: str
    kind: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    time_s: float
    workspace_bytes: int = 0
    impls: tuple[Impl, ...] = ()
    updates: tuple[str, ...] = ()
    cpu_time_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def implementations(self) -> tuple[Impl, ...]:
        """Declared impls, or the single implicit one given by time_s/workspace_bytes."""
        return self.impls or (Impl(DEFAULT_IMPL, self.time_s, self.workspace_bytes),)

    @property
    def default_impl(self) -> int:
        """The impl matching the op's own time_s/workspace_bytes (a graph where none does is refused: `_check`).

        Graph writers set time_s to what the framework would run by default, so
        planners that do not choose implementations run that one.
        """
        for i, im in enumerate(self.impls):
            if im.time_s == self.time_s and im.workspace_bytes == self.workspace_bytes:
                return i
        for i, im in enumerate(self.impls):   # a float step apart (the validator's tolerance): the same figures
            if _is_default(self, im):
                return i
        return 0

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id, "kind": self.kind, "inputs": list(self.inputs), "outputs": list(self.outputs),
            "time_s": self.time_s, "workspace_bytes": self.workspace_bytes,
        }
        if self.impls:
            d["impls"] = [im.to_json() for im in self.impls]
        d["updates"] = list(self.updates)
        if self.cpu_time_s is not None:
            d["cpu_time_s"] = self.cpu_time_s
        d.update(self.extra)
        return d


class Graph:
    """A validated `hybrid-graph/1` (docs/formats.md): one training or inference iteration as ops and the
    tensors they read and write, what every planner plans. Construct with `Graph(...)`, `Graph.load` or
    `Graph.from_json`; a broken rule raises FormatError naming the id and field.

    Main fields: `name`; `tensors` (id, bytes, kind, persistent); `ops` (id, kind, inputs, outputs, time_s,
    workspace_bytes, impls); `device`, the device it was captured or costed for (None if none);
    `sha256`, the identity a plan's `graph_sha256` names.
    """

    def __init__(
        self,
        name: str,
        tensors: Iterable[Tensor],
        ops: Iterable[Op],
        device: Device | None = None,
        extra: dict[str, Any] | None = None,
        sha256: str | None = None,
    ) -> None:
        self.name = name
        self.tensors: tuple[Tensor, ...] = tuple(tensors)
        self.ops: tuple[Op, ...] = tuple(ops)
        self.device = device
        self.extra = dict(extra or {})
        self.tensor_index: dict[str, int] = {}
        self.op_index: dict[str, int] = {}
        _check(self)
        self._sha256 = sha256

    # ---- identity -------------------------------------------------------
    @property
    def sha256(self) -> str:
        """sha256 of the file's bytes when loaded from a file, else of its canonical JSON."""
        if self._sha256 is None:
            self._sha256 = hashlib.sha256(self.dumps().encode()).hexdigest()
        return self._sha256

    def tensor(self, tid: str) -> Tensor:
        return self.tensors[self.tensor_index[tid]]

    def require_ops(self) -> None:
        """One line for a search given a graph without ops (the file format allows it; no order exists to vary),
        rather than an IndexError deep in the planner."""
        if not self.ops:
            raise HybridError(f"graph {self.name!r} has no ops: there is nothing to schedule (a graph file holds "
                              "one iteration's ops and tensors; see docs/formats.md)")

    def op(self, oid: str) -> Op:
        return self.ops[self.op_index[oid]]

    @cached_property
    def arrays(self) -> "GraphArrays":
        from hybrid.graph.arrays import GraphArrays

        return GraphArrays.build(self)

    # ---- serialisation ----------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"format": GRAPH_FORMAT, "name": self.name}
        if self.device is not None:
            d["device"] = self.device.to_json()
        d["tensors"] = [t.to_json() for t in self.tensors]
        d["ops"] = [o.to_json() for o in self.ops]
        for k, v in self.extra.items():
            d.setdefault(k, v)
        return d

    def dumps(self) -> str:
        """Strict JSON (no NaN or Infinity, which other parsers reject)."""
        return dumps_strict(self.to_json(), f"graph {self.name!r}", indent=1)

    def save(self, path: str | Path) -> str:
        """Write the file whole or not at all; returns (and remembers) the sha256 of the bytes written."""
        from hybrid.files import write_whole

        data = self.dumps().encode()
        write_whole(path, data)
        self._sha256 = hashlib.sha256(data).hexdigest()
        return self._sha256

    @staticmethod
    def load(path: str | Path) -> "Graph":
        """The graph in a `hybrid-graph/1` file, its sha256 that of the file's bytes (what plans name).
        FormatError (a HybridError) for a file that cannot be read, is not strict JSON, or breaks a rule of the
        format, naming the offending id and field."""
        p = Path(path)
        try:
            data = p.read_bytes()
        except OSError as e:
            raise FormatError(f"cannot read graph file {str(p)!r}: {e.strerror}") from None
        d = loads_strict(data, str(p))
        g = Graph.from_json(d, where=str(p))
        g._sha256 = hashlib.sha256(data).hexdigest()
        return g

    @staticmethod
    def from_json(d: Any, where: str = "graph", sha256: str | None = None) -> "Graph":
        """The graph a JSON object describes; `sha256` keeps the identity of the file it came from when the
        object travelled as re-serialised JSON (another process), since plans name the file's bytes."""
        if not isinstance(d, dict):
            raise FormatError(f"{where}: a graph file is a JSON object with format, name, tensors, ops")
        fmt = d.get("format")
        if fmt != GRAPH_FORMAT:
            hint = (" (is this a plan? give here the graph file the plan was made for; use --plan for the plan "
                    "itself where a command takes one)") if str(fmt).startswith("hybrid-plan") else ""
            raise FormatError(f"{where}: field 'format' is {fmt!r}, expected {GRAPH_FORMAT!r}{hint}")
        for key in ("tensors", "ops"):
            if not isinstance(d.get(key), list):
                raise FormatError(f"{where}: field {key!r} must be a list")
        device = Device.from_json(d["device"], f"{where}: device") if d.get("device") is not None else None
        tensors = [_tensor_from_json(t, i, where) for i, t in enumerate(d["tensors"])]
        ops = [_op_from_json(o, i, where) for i, o in enumerate(d["ops"])]
        extra = {k: v for k, v in d.items() if k not in ("format", "name", "device", "tensors", "ops")}
        name = d.get("name", "unnamed")
        if not isinstance(name, str) or not name:
            # a plan names its graph (rule 0 refuses a plan naming none): an empty name could get no plan at all
            raise FormatError(f"{where}: field 'name' must be a non-empty string (plans name their graph by it), "
                              f"got {name!r}; leave it out for 'unnamed'")
        return Graph(name, tensors, ops, device, extra, sha256)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.ops)} ops, {len(self.tensors)} tensors)"

    def misspelt_fields(self) -> list[str]:
        """Extra fields named almost like a field the format reads ("workspce_bytes"), one line each. Extra
        fields are allowed and ignored, so such a typo drops a workspace or a time without a word; commands
        print these as warnings. Each distinct name is compared once (captured graphs carry 146k extra fields)."""
        import difflib

        out: list[str] = []
        from hybrid.device import DEVICE_FIELDS

        devices = [self.device] if self.device is not None else []
        for known, items, noun in ((_TENSOR_FIELDS, self.tensors, "tensor"), (_OP_FIELDS, self.ops, "op"),
                                   (_GRAPH_FIELDS, [self], "graph"), (set(DEVICE_FIELDS), devices, "device")):
            first: dict[str, str] = {}
            for item in items:
                for key in item.extra:
                    first.setdefault(key, getattr(item, "id", getattr(item, "name", self.name)))
            for key, where in first.items():
                close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=MISSPELT_CUTOFF)
                if close and key not in known and not _deliberate(key, close[0], known):
                    n = sum(key in item.extra for item in items)
                    others = f" and {n - 1} more" if n > 1 else ""
                    out.append(f"{noun} {where!r}{others}: field {key!r} is not read (did you mean {close[0]!r}?); "
                               "extra fields are ignored")
        return out


def _deliberate(key: str, field_name: str, known: set[str]) -> bool:
    """A name close to a read field that is another field on purpose, not a typo: it contains a whole read name
    (gpu_time_s, nbytes, devices) or is the same name in another unit (time_us, time_ms beside time_s), unless it
    is a read name with a letter doubled. `key` is never a read name itself (the caller's check)."""
    def stem(name: str) -> str:
        return re.sub(r"_(ns|us|ms|s)$", "", name)

    # a doubled letter is a slip of the key, not another field (time_ss, bytess: they contain a read name too)
    if any(key[i] == key[i + 1] and key[:i] + key[i + 1:] in known for i in range(len(key) - 1)):
        return False
    return any(len(k) >= 4 and k in key for k in known) or stem(key) == stem(field_name)


# ---- parsing helpers ---------------------------------------------------------

def _num(d: dict, key: str, what: str, default: Any = None, integer: bool = False) -> Any:
    """A field that is a finite, non-negative number (a whole number of at most MAX_BYTES for bytes, at most
    MAX_SECONDS for times); anything else is refused naming the field."""
    if key not in d:
        if default is not None:
            return default
        raise FormatError(f"{what}: missing field {key!r}")
    try:
        if integer:
            return checked_bytes(d[key], f"{what}: field {key!r}")
        return checked_number(d[key], f"{what}: field {key!r}", lo=0.0, hi=MAX_SECONDS)
    except HybridError as e:
        raise FormatError(str(e)) from None


def _id(d: Any, what: str) -> str:
    if not isinstance(d, dict):
        raise FormatError(f"{what}: expected an object")
    v = d.get("id")
    if not isinstance(v, str) or not v:
        raise FormatError(f"{what}: field 'id' must be a non-empty string, got {v!r}")
    return v


def _str_list(d: dict, key: str, what: str) -> tuple[str, ...]:
    v = d.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise FormatError(f"{what}: field {key!r} must be a list of tensor ids")
    return tuple(v)


def _tensor_from_json(d: Any, i: int, where: str) -> Tensor:
    tid = _id(d, f"{where}: tensors[{i}]")
    what = f"{where}: tensor {tid!r}"
    kind = d.get("kind", "other")
    if kind not in TENSOR_KINDS:
        raise FormatError(f"{what}: field 'kind' is {kind!r}; use one of {', '.join(TENSOR_KINDS)}")
    persistent = d.get("persistent", False)
    if not isinstance(persistent, bool):
        raise FormatError(f"{what}: field 'persistent' must be true or false")
    extra = {k: v for k, v in d.items() if k not in _TENSOR_FIELDS}
    return Tensor(tid, _num(d, "bytes", what, integer=True), kind, persistent, extra)


def _op_from_json(d: Any, i: int, where: str) -> Op:
    oid = _id(d, f"{where}: ops[{i}]")
    what = f"{where}: op {oid!r}"
    impls = []
    raw_impls = d.get("impls")
    if raw_impls is None:      # absent (or null): one implementation, the op's own figures
        raw_impls = []
    elif not isinstance(raw_impls, list):   # {}, 0, false and "" too: not a list of implementations
        raise FormatError(f"{what}: field 'impls' must be a list, got {type(raw_impls).__name__}")
    for k, im in enumerate(raw_impls):
        if not isinstance(im, dict) or not isinstance(im.get("name"), str):
            raise FormatError(f"{what}: impls[{k}] needs a string 'name'")
        iw = f"{what}: impl {im['name']!r}"
        impls.append(Impl(im["name"], float(_num(im, "time_s", iw)), _num(im, "workspace_bytes", iw, 0, integer=True)))
    # An op that lists impls may leave out its own time and workspace: each one left out is the first impl's
    # (docs/formats.md); one given is kept, as given
    first = impls[0] if impls else None
    time_s = first.time_s if first is not None and "time_s" not in d else float(_num(d, "time_s", what))
    ws = _num(d, "workspace_bytes", what, 0 if first is None else first.workspace_bytes, integer=True)
    cpu = d.get("cpu_time_s")
    cpu_time = None if cpu is None else float(_num(d, "cpu_time_s", what))
    extra = {k: v for k, v in d.items() if k not in _OP_FIELDS}
    kind = d.get("kind", "op")
    if not isinstance(kind, str):
        raise FormatError(f"{what}: field 'kind' must be a string")
    return Op(oid, kind, _str_list(d, "inputs", what), _str_list(d, "outputs", what), time_s, ws,
              tuple(impls), _str_list(d, "updates", what), cpu_time, extra)


# ---- structural checks -------------------------------------------------------

def _same_time(a: float, b: float) -> bool:
    """Equal within a relative 1e-9, inside the validator's tolerance (1e-9 x at least 1 s), so a plan timing the
    op by either validates: an op's time and its default impl's computed apart (a profile's sum) may differ in
    the last bits."""
    return abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def _is_default(op: Op, im: Impl) -> bool:
    """Whether `im` has the op's own figures, its default implementation's (time within `_same_time`)."""
    return _same_time(im.time_s, op.time_s) and im.workspace_bytes == op.workspace_bytes


def _check(g: Graph) -> None:
    """Every rule of FORMATS.md's graph section; the first broken one raises FormatError."""
    where = f"graph {g.name!r}"
    if not isinstance(g.name, str) or not g.name:   # as from_json: plans name their graph by it (rule 0)
        raise FormatError(f"{where}: its name must be a non-empty string (plans name their graph by it)")
    for i, t in enumerate(g.tensors):
        if t.id in g.tensor_index:
            raise FormatError(f"{where}: tensor id {t.id!r} appears twice (tensors[{g.tensor_index[t.id]}] and tensors[{i}])")
        if not 0 <= t.bytes <= MAX_BYTES:   # NaN fails too
            raise FormatError(f"{where}: tensor {t.id!r}: field 'bytes' must be a whole number from 0 to "
                              f"{MAX_BYTES}, got {t.bytes!r}")
        g.tensor_index[t.id] = i
    producer: dict[str, str] = {}
    for i, o in enumerate(g.ops):
        if o.id in g.op_index:
            raise FormatError(f"{where}: op id {o.id!r} appears twice (ops[{g.op_index[o.id]}] and ops[{i}])")
        g.op_index[o.id] = i
        for time_s, ws in ((o.time_s, o.workspace_bytes), *((im.time_s, im.workspace_bytes) for im in o.impls)):
            if not 0 <= time_s <= MAX_SECONDS or not 0 <= ws <= MAX_BYTES:   # NaN fails these too
                raise FormatError(f"{where}: op {o.id!r}: time_s must be finite, from 0 to {MAX_SECONDS:g} s, and "
                                  f"workspace_bytes from 0 to {MAX_BYTES}; got {time_s!r} and {ws!r}")
        if o.cpu_time_s is not None and not 0 <= o.cpu_time_s <= MAX_SECONDS:
            raise FormatError(f"{where}: op {o.id!r}: cpu_time_s must be finite, from 0 to {MAX_SECONDS:g} s, got "
                              f"{o.cpu_time_s!r}")
        if o.impls and not any(_is_default(o, im) for im in o.impls):
            # the op's own figures are its default implementation's, the one a plan that chooses none runs: matching
            # none, the planners timed the op by its figures and the validator by its first impl (no plan passed)
            times = [o.time_s, *(im.time_s for im in o.impls)]
            shown = [format_seconds(t) for t in times]
            if len(set(shown)) < len(set(times)):   # rounded alike, not alike: the exact values say where they differ
                shown = [f"{t!r} s" for t in times]
            listed = ", ".join(f"{im.name} {t}/{format_bytes(im.workspace_bytes)}"
                               for im, t in zip(o.impls[:3], shown[1:])) + (", ..." if len(o.impls) > 3 else "")
            raise FormatError(f"{where}: op {o.id!r}: its time_s and workspace_bytes "
                              f"({shown[0]}/{format_bytes(o.workspace_bytes)}) match none of its "
                              f"impls ({listed}); they are its default implementation's: set them to one impl's "
                              "figures, or leave both out (then the first impl's)")
        names = [im.name for im in o.impls]
        twice = [n for k, n in enumerate(names) if n in names[:k]]
        if twice:
            raise FormatError(f"{where}: op {o.id!r} lists impl name {twice[0]!r} more than once (impl names are "
                              "unique within an op)")
        for field_name in ("inputs", "outputs", "updates"):
            for tid in getattr(o, field_name):
                if tid not in g.tensor_index:
                    raise FormatError(f"{where}: op {o.id!r} field {field_name!r} names unknown tensor {tid!r}")
        if len(set(o.outputs)) != len(o.outputs):
            raise FormatError(f"{where}: op {o.id!r} lists an output twice")
        for tid in o.updates:
            if tid not in o.inputs:
                raise FormatError(f"{where}: op {o.id!r} updates {tid!r}, which is not among its inputs; list it in 'inputs' too")
            if not g.tensor(tid).persistent:
                raise FormatError(f"{where}: op {o.id!r} updates {tid!r} in place, but only persistent tensors may be updated")
        for tid in o.outputs:
            t = g.tensor(tid)
            if t.persistent:
                raise FormatError(f"{where}: op {o.id!r} outputs persistent tensor {tid!r}; persistent tensors are produced by no op (use 'updates' for in-place changes)")
            if tid in producer:
                raise FormatError(f"{where}: tensor {tid!r} is an output of both op {producer[tid]!r} and op {o.id!r}")
            if tid in o.inputs:
                raise FormatError(f"{where}: op {o.id!r} reads its own output {tid!r}")
            producer[tid] = o.id
    # every plan lasts at least this long (each op at its fastest, on the device or the host, the two side by
    # side), and a plan may last at most MAX_SECONDS: such a graph loaded, then every plan of it was refused
    least = sum(min([o.time_s, *(im.time_s for im in o.impls)]
                    + ([o.cpu_time_s] if o.cpu_time_s is not None else [])) for o in g.ops) / 2
    if least > MAX_SECONDS:
        raise FormatError(f"{where}: its ops take at least {format_seconds(least)} (each at its fastest, the host's "
                          f"beside the device's), more than {MAX_SECONDS:g} s, the longest a plan may last; check "
                          "the 'time_s' fields")
    workspace = (ws for o in g.ops for ws in (o.workspace_bytes, *(im.workspace_bytes for im in o.impls)))
    total = sum(t.bytes for t in g.tensors) + max(workspace, default=0)
    if total > MAX_BYTES:
        raise FormatError(f"{where}: its tensors and largest workspace add up to {format_bytes(total)}, more than "
                          f"{format_bytes(MAX_BYTES)}, the most this tool takes; check the 'bytes' fields")
    for t in g.tensors:
        if not t.persistent and t.id not in producer:
            raise FormatError(f"{where}: tensor {t.id!r} is not persistent and no op outputs it; mark it persistent (an input fed each iteration) or add its producer")
    _check_acyclic(g)


def _check_acyclic(g: Graph) -> None:
    from hybrid.graph.arrays import dependency_edges

    n = len(g.ops)
    succ: list[list[int]] = [[] for _ in range(n)]
    indeg = [0] * n
    for a, b, _why in dependency_edges(g):
        succ[a].append(b)
        indeg[b] += 1
    stack = [i for i in range(n) if indeg[i] == 0]
    seen = 0
    while stack:
        i = stack.pop()
        seen += 1
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                stack.append(j)
    if seen < n:
        # Walk predecessors inside the leftover set until an op repeats: that is a cycle.
        left = {i for i in range(n) if indeg[i] > 0}
        pred: dict[int, int] = {}
        for a, b, _ in dependency_edges(g):
            if a in left and b in left:
                pred.setdefault(b, a)
        cur = next(iter(left))
        path: list[int] = []
        on_path: set[int] = set()
        while cur not in on_path:
            on_path.add(cur)
            path.append(cur)
            cur = pred[cur]
        cycle = path[path.index(cur):][::-1]
        ids = " -> ".join(shown_id(g.ops[i].id) for i in cycle + [cycle[0]])
        data = {(a, b) for a, b, why in dependency_edges(g) if why == "data"}
        order = [_update_order(g, a, b) for a, b in zip(cycle, cycle[1:] + cycle[:1]) if (a, b) not in data]
        raise FormatError(f"graph {g.name!r}: ops form a cycle through their tensors: {ids}"
                          + (f"; {order[0]}" if order else ""))


def _update_order(g: Graph, a: int, b: int) -> str:
    """Why op a comes before op b when no tensor flows from a to b: the program order of an in-place update
    (docs/formats.md: readers listed before an update run before it, those listed after it after it), and how
    to change it."""
    oa, ob = g.ops[a], g.ops[b]
    t = next((t for t in oa.updates if t in ob.inputs), None)
    if t is not None:
        why = f"{ob.id!r} reads {t!r} after {oa.id!r} updates it in place"
    else:
        t = next(t for t in ob.updates if t in oa.inputs)
        why = f"{oa.id!r} reads {t!r} before {ob.id!r} updates it in place"
    return (f"the edge {shown_id(oa.id)} -> {shown_id(ob.id)} is not dataflow but the order of an in-place update: "
            f"{why}, because "
            f"ops[{a}] {oa.id!r} is listed before ops[{b}] {ob.id!r} (ops that read and update a tensor run in "
            f"their list order); if {ob.id!r} should run first, list it before {oa.id!r} in 'ops'")
