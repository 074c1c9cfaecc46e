"""Checkmate / Moccasin training graphs (networkx node-link JSON) → hybrid-graph/1.

Each node is one operator producing one tensor: `cost_cpu` (or `duration`)
is its run time in an unstated unit, `cost_ram` (or `out_cost`) its output's
bytes, `param_cost` (random_layered graphs) the bytes of a parameter it reads;
edges are data dependencies. Ops keep the file's topological order (`order`
in random_layered graphs, else node id order).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from hybrid.device import Device
from hybrid.errors import FormatError
from hybrid.graph import Graph, Op, Tensor
from hybrid.jsonio import loads_strict
from hybrid.units import parse_duration

TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def time_unit_seconds(unit: str) -> float:
    """'us' -> 1e-6; a plain number is seconds per unit."""
    if unit in TIME_UNITS:
        return TIME_UNITS[unit]
    try:
        v = float(unit)
    except ValueError:
        raise FormatError(f"--time-unit {unit!r}: use s, ms, us, ns or a number of seconds per unit") from None
    if v <= 0:
        raise FormatError(f"--time-unit must be positive, got {unit!r}")
    return v


def load_checkmate(path: str | Path, time_unit: str = "us", scale_to: str | float | None = None,
                   device: Device | None = None, name: str | None = None) -> Graph:
    """Read a node-link file. scale_to: rescale times so that the iteration's compute totals this many seconds."""
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise FormatError(f"cannot read {str(p)!r}: {e.strerror}") from None
    d: dict[str, Any] = loads_strict(data, str(p))
    if not isinstance(d, dict) or "nodes" not in d or not ("links" in d or "edges" in d):
        raise FormatError(f"{p}: not a networkx node-link graph (needs 'nodes' and 'links')")
    nodes = d["nodes"]
    links = d.get("links", d.get("edges", []))
    key = "id" if nodes and "id" in nodes[0] else "name"
    by_key = {}
    for i, nd in enumerate(nodes):
        if key not in nd:
            raise FormatError(f"{p}: nodes[{i}] has no {key!r}")
        by_key[nd[key]] = nd
    order_keys = d.get("graph", {}).get("order") or sorted(by_key)
    if sorted(map(str, order_keys)) != sorted(map(str, by_key)):
        raise FormatError(f"{p}: graph.order does not list every node exactly once")
    preds: dict[Any, list[Any]] = {k: [] for k in by_key}
    for i, ln in enumerate(links):
        src = ln.get("source", ln.get("0"))
        dst = ln.get("target", ln.get("1"))
        if src not in by_key or dst not in by_key:
            raise FormatError(f"{p}: links[{i}] names an unknown node ({src!r} -> {dst!r})")
        preds[dst].append(src)

    unit = time_unit_seconds(time_unit)
    raw = {k: float(nd.get("cost_cpu", nd.get("duration", 0.0))) for k, nd in by_key.items()}
    if scale_to is not None:
        total = sum(raw.values())
        target = parse_duration(scale_to, "--scale-to")
        unit = target / total if total > 0 else 0.0
    ids: dict[Any, str] = {}
    seen: set[str] = set()
    for k in order_keys:
        nd = by_key[k]
        base = str(nd.get("name", k))
        tid = base if base not in seen else f"{base}#{k}"
        seen.add(tid)
        ids[k] = tid
    tensors: list[Tensor] = []
    ops: list[Op] = []
    for k in order_keys:
        nd = by_key[k]
        tid = ids[k]
        nbytes = int(nd.get("cost_ram", nd.get("out_cost", 0)))
        kind = "gradient" if nd.get("backward") else "activation"
        inputs = [ids[s] for s in dict.fromkeys(preds[k])]
        pbytes = int(nd.get("param_cost", 0) or 0)
        if pbytes > 0:
            tensors.append(Tensor(f"{tid}.param", pbytes, "param", True))
            inputs.append(f"{tid}.param")
        tensors.append(Tensor(tid, nbytes, kind))
        ops.append(Op(tid, "backward" if nd.get("backward") else "forward", tuple(inputs), (tid,), raw[k] * unit))
    gname = name or str(d.get("graph", {}).get("name", p.stem))
    extra = {"source": {"format": "checkmate-node-link", "file": p.name, "seconds_per_unit": unit}}
    return Graph(gname, tensors, ops, device, extra)
