"""Checkmate / Moccasin training graphs (networkx node-link JSON) → hybrid-graph/1.

Each node is one operator producing one tensor: `cost_cpu` (or `duration`)
is its run time in an unstated unit, `cost_ram` (or `out_cost`) its output's
bytes, `param_cost` (random_layered graphs) the bytes of a parameter it reads;
edges are data dependencies. Ops keep the file's topological order (`order`
in random_layered graphs, else node id order).

The file's structure is checked as it is read: a malformed file is refused in
one line naming the node (its id) and field, never with a Python traceback.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from hybrid.device import Device
from hybrid.errors import FormatError, HybridError
from hybrid.graph import Graph, Op, Tensor
from hybrid.jsonio import loads_strict
from hybrid.units import MAX_BYTES, MAX_SECONDS, format_bytes, parse_duration

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
# A node's cost_cpu/duration, in the file's own unit, is at most this, so the iteration's total stays finite in
# float64 (the units are unstated, so no tighter bound fits every file; the graph then bounds each op's time_s).
MAX_COST = 1e300


def time_unit_seconds(unit: str | float) -> float:
    """'us' -> 1e-6; a plain number is seconds per unit. NaN, infinity and non-positive numbers are refused here,
    naming the flag, rather than surfacing as an op's bad time_s."""
    if isinstance(unit, str) and unit in TIME_UNITS:
        return TIME_UNITS[unit]
    try:
        v = float(unit)
    except (TypeError, ValueError):
        raise FormatError(f"--time-unit {unit!r}: use s, ms, us, ns or a number of seconds per unit") from None
    if isinstance(unit, bool) or not (math.isfinite(v) and v > 0):
        raise FormatError(f"--time-unit must be a finite positive number of seconds per unit, got {unit!r}")
    return v


def scale_to_seconds(scale_to: str | float) -> float:
    """--scale-to in seconds; 0 is refused, as it would make every op take no time."""
    target = parse_duration(scale_to, "--scale-to")
    if not target > 0:
        raise HybridError(f"--scale-to must be more than 0, got {scale_to!r}: give the iteration's compute time, "
                          "e.g. 1.5s")
    return target


def _show(v: Any) -> str:
    """A value for an error line: its repr, cut short so a huge number or list cannot flood the line."""
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _kind(v: Any) -> str:
    """The JSON kind of `v`, for 'must be an object, got a list'."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(v), type(v).__name__)


def _is_id(v: Any) -> bool:
    """Node ids are integers or non-empty strings (what networkx writes); anything else cannot be matched."""
    return (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, str) and v != "")


def _cost(p: Path, k: Any, nd: dict[str, Any], fields: tuple[str, ...], *, integer: bool,
          null_is_zero: bool = False) -> float:
    """The first of `fields` present in node `k` (0 if none), checked: a non-negative number, whole for bytes."""
    field = next((f for f in fields if f in nd), None)
    if field is None:
        return 0
    v = nd[field]
    if v is None and null_is_zero:
        return 0
    what = f"{p}: node {_show(k)}: {field}"
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
        kind = "a non-negative integer (bytes)" if integer else "a non-negative number"
        raise FormatError(f"{what} must be {kind}, got {_show(v)}")
    hi = MAX_BYTES if integer else MAX_COST
    if not v <= hi:   # also 1e400, read as inf in files too large for loads_strict to check every float
        limit = f"{MAX_BYTES} ({format_bytes(MAX_BYTES)})" if integer else f"{MAX_COST:g}"
        raise FormatError(f"{what} must be at most {limit}, got {_show(v)}")
    if integer and v != int(v):
        raise FormatError(f"{what} must be a whole number of bytes, got {_show(v)}")
    return int(v) if integer else float(v)


def _nodes(p: Path, d: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    """The nodes by id (field 'id', else 'name' as in random_layered graphs), each an object with a unique id."""
    nodes = d["nodes"]
    if not isinstance(nodes, list):
        raise FormatError(f"{p}: field 'nodes' must be a list of node objects, got {_kind(nodes)}")
    if not nodes:
        raise FormatError(f"{p}: field 'nodes' is empty: a graph with no ops has nothing to plan")
    for i, nd in enumerate(nodes):
        if not isinstance(nd, dict):
            raise FormatError(f"{p}: nodes[{i}] must be an object with an 'id' or 'name', got {_show(nd)}")
    key = "id" if nodes and "id" in nodes[0] else "name"
    by_key: dict[Any, dict[str, Any]] = {}
    where: dict[Any, int] = {}
    for i, nd in enumerate(nodes):
        if key not in nd:
            raise FormatError(f"{p}: nodes[{i}] has no {key!r}")
        k = nd[key]
        if not _is_id(k):
            raise FormatError(f"{p}: nodes[{i}]: {key!r} must be an integer or a non-empty string, got {_show(k)}")
        if k in by_key:
            raise FormatError(f"{p}: node id {_show(k)} appears twice (nodes[{where[k]}] and nodes[{i}])")
        by_key[k] = nd
        where[k] = i
    return by_key


def _order(p: Path, attrs: dict[str, Any], by_key: dict[Any, dict[str, Any]]) -> list[Any]:
    """graph.order when given (each node exactly once), else the ids sorted, which needs ids of one kind."""
    order = attrs.get("order")
    if order is None or order == []:
        ints = [k for k in by_key if isinstance(k, int)]
        strs = [k for k in by_key if isinstance(k, str)]
        if ints and strs:
            raise FormatError(f"{p}: node ids mix integers and strings ({ints[0]!r} and {_show(strs[0])}), so their "
                              "order is unclear: use one kind of id or list the order in graph.order")
        return sorted(by_key)
    if not isinstance(order, list):
        raise FormatError(f"{p}: graph.order must be a list of node ids, got {_kind(order)}")
    seen: set[Any] = set()
    for i, k in enumerate(order):
        if not _is_id(k) or k not in by_key:
            raise FormatError(f"{p}: graph.order[{i}] names no node: {_show(k)}")
        if k in seen:
            raise FormatError(f"{p}: graph.order does not list every node exactly once: node {_show(k)} twice")
        seen.add(k)
    missing = next((k for k in by_key if k not in seen), None)
    if missing is not None:
        raise FormatError(f"{p}: graph.order does not list every node exactly once: node {_show(missing)} is missing")
    return order


def _preds(p: Path, d: dict[str, Any], by_key: dict[Any, dict[str, Any]]) -> dict[Any, list[Any]]:
    """Each node's predecessors, from links {source, target} (or {"0", "1"} in random_layered graphs)."""
    field = "links" if "links" in d else "edges"   # networkx 3.4 can write either name
    links = d[field]
    if not isinstance(links, list):
        raise FormatError(f"{p}: field {field!r} must be a list of {{source, target}} objects, got {_kind(links)}")
    preds: dict[Any, list[Any]] = {k: [] for k in by_key}
    for i, ln in enumerate(links):
        if not isinstance(ln, dict):
            raise FormatError(f"{p}: links[{i}] must be an object with 'source' and 'target', got {_show(ln)}")
        src = ln.get("source", ln.get("0"))
        dst = ln.get("target", ln.get("1"))
        if not (_is_id(src) and src in by_key and _is_id(dst) and dst in by_key):
            raise FormatError(f"{p}: links[{i}] names an unknown node ({_show(src)} -> {_show(dst)}); "
                              "'source' and 'target' must be node ids")
        preds[dst].append(src)
    return preds


def load_checkmate(path: str | Path, time_unit: str | float = "us", scale_to: str | float | None = None,
                   device: Device | None = None, name: str | None = None) -> Graph:
    """Read a node-link file. scale_to: rescale times so that the iteration's compute totals this many seconds."""
    unit = time_unit_seconds(time_unit)      # the flags first: a bad flag is named before the file is read
    target = None if scale_to is None else scale_to_seconds(scale_to)
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise FormatError(f"cannot read {str(p)!r}: {e.strerror}") from None
    d: dict[str, Any] = loads_strict(data, str(p))
    if not isinstance(d, dict) or "nodes" not in d or not ("links" in d or "edges" in d):
        raise FormatError(f"{p}: not a networkx node-link graph (needs 'nodes' and 'links')")
    attrs = d.get("graph")
    if attrs is None:
        attrs = {}
    if not isinstance(attrs, dict):
        raise FormatError(f"{p}: field 'graph' must be an object of graph attributes (name, order), got {_kind(attrs)}")
    by_key = _nodes(p, d)
    order_keys = _order(p, attrs, by_key)
    preds = _preds(p, d, by_key)

    raw = {k: _cost(p, k, nd, ("cost_cpu", "duration"), integer=False) for k, nd in by_key.items()}
    if target is not None:
        total = sum(raw.values())
        if not (total > 0 and math.isfinite(target / total)):
            raise HybridError(f"--scale-to: {p}'s nodes' cost_cpu/duration add up to {total:g}, which cannot be "
                              "scaled; use --time-unit")
        unit = target / total
    else:
        k_max = max(raw, key=raw.__getitem__)
        if not raw[k_max] * unit <= MAX_SECONDS:
            raise HybridError(f"--time-unit {time_unit}: node {_show(k_max)}'s cost_cpu/duration {raw[k_max]:g} would "
                              f"take {raw[k_max] * unit:.3g} s (over {MAX_SECONDS:g} s); give the file's unit "
                              "(s, ms, us, ns) or --scale-to")
    ids: dict[Any, str] = {}
    seen: set[str] = set()
    for k in order_keys:
        nd = by_key[k]
        base = nd.get("name")
        if base is None:
            base = k
        if not _is_id(base):
            raise FormatError(f"{p}: node {_show(k)}: name must be a non-empty string or an integer, got {_show(base)}")
        tid = str(base)
        while tid in seen:   # names repeat in some files: the node id tells them apart
            tid = f"{tid}#{k}"
        seen.add(tid)
        ids[k] = tid
    tensors: list[Tensor] = []
    ops: list[Op] = []
    for k in order_keys:
        nd = by_key[k]
        tid = ids[k]
        nbytes = _cost(p, k, nd, ("cost_ram", "out_cost"), integer=True)
        backward = nd.get("backward")
        if backward is not None and not isinstance(backward, bool):
            raise FormatError(f"{p}: node {_show(k)}: backward must be true or false, got {_show(backward)}")
        kind = "gradient" if backward else "activation"
        inputs = [ids[s] for s in dict.fromkeys(preds[k])]
        pbytes = _cost(p, k, nd, ("param_cost",), integer=True, null_is_zero=True)
        if pbytes > 0:
            tensors.append(Tensor(f"{tid}.param", int(pbytes), "param", True))
            inputs.append(f"{tid}.param")
        tensors.append(Tensor(tid, int(nbytes), kind))
        ops.append(Op(tid, "backward" if backward else "forward", tuple(inputs), (tid,), raw[k] * unit))
    gname = attrs.get("name")
    if gname is None:
        gname = p.stem
    if not name and not _is_id(gname):
        raise FormatError(f"{p}: graph.name must be a non-empty string, got {_show(gname)}; or give --name")
    extra = {"source": {"format": "checkmate-node-link", "file": p.name, "seconds_per_unit": unit}}
    return Graph(name or str(gname), tensors, ops, device, extra)
