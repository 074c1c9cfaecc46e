"""Per-op times for placement: re-cost a captured graph for a GPU preset and a CPU preset, or from profiles.

A captured op records its FLOPs, bytes moved, dtype and class (`extra.cost`), so its roofline time on
another processor is one formula away (`hybrid.capture.costs.roofline_s`). Measured times come from
`hybrid profile` files: a cuda profile sets `time_s`, a cpu profile `cpu_time_s` (`apply_profile`).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from hybrid.capture.costs import roofline_s
from hybrid.device import HOST_CPUS, PRESET_COMPUTE, ComputeSpec
from hybrid.errors import HybridError
from hybrid.graph import Graph, Impl


def _spec(name: str, table: dict[str, ComputeSpec], flag: str) -> ComputeSpec:
    if name not in table:
        raise HybridError(f"{flag} {name!r}: no such preset; choose one of {', '.join(sorted(table))}")
    return table[name]


def recost(graph: Graph, gpu: str | None = None, cpu: str | None = None) -> Graph:
    """A copy of `graph` with `time_s` from GPU preset `gpu` and `cpu_time_s` from CPU preset `cpu` (each only
    when given); an op's other implementations scale with its default's. Ops without a recorded cost are an
    error naming the op."""
    if gpu is None and cpu is None:
        return graph
    g_spec = _spec(gpu, PRESET_COMPUTE, "--device") if gpu is not None else None
    c_spec = _spec(cpu, HOST_CPUS, "--cpu") if cpu is not None else None
    ops = []
    for op in graph.ops:
        cost = op.extra.get("cost")
        if not isinstance(cost, dict) or "flops" not in cost:
            raise HybridError(f"op {op.id!r} records no FLOPs and bytes ('cost'), so it cannot be re-costed for "
                              "another processor; capture the graph with `hybrid capture`, or leave out --cpu/--device")
        args = (float(cost["flops"]), float(cost.get("io_bytes", 0)), str(cost.get("dtype", "float32")),
                str(cost.get("class", "vector")))
        changes: dict = {}
        if g_spec is not None:
            changes["time_s"] = t = roofline_s(*args, g_spec)
            if op.impls:   # the default impl takes the new time, the others its speed-up, so they stay one op's
                d = op.default_impl
                k = t / op.time_s if op.time_s > 0 else 1.0
                changes["impls"] = tuple(Impl(im.name, t if i == d else im.time_s * k, im.workspace_bytes)
                                         for i, im in enumerate(op.impls))
        if c_spec is not None:
            changes["cpu_time_s"] = roofline_s(*args, c_spec)
        ops.append(replace(op, **changes))
    extra = dict(graph.extra)
    extra["placement_costs"] = {"gpu": g_spec.name if g_spec else None, "cpu": c_spec.name if c_spec else None}
    return Graph(graph.name, graph.tensors, ops, graph.device, extra)


def with_profiles(graph: Graph, profiles: list[Path],
                  report: Callable[[Path, int, int, str], None] | None = None, graph_file: str = "G") -> Graph:
    """Measured times from `hybrid profile` files, over whatever the graph has.

    A profile matches ops by kernel and shapes, so one measured on another model (or batch) changes almost
    nothing and silently; `report(path, ops covered, ops, field)` is told each profile's coverage, and a
    profile that covers no op at all is an error naming the file (and `graph_file`, the graph's)."""
    from hybrid.capture.profile import Profile, apply_profile

    for p in profiles:
        prof = Profile.load(p)
        graph = apply_profile(graph, prof)
        last = graph.extra["capture"]["profiles"][-1]   # apply_profile's own count of the ops it set
        hits, n, field_name = int(last["ops_from_profile"]), int(last["ops"]), str(last["field"])
        if hits == 0:
            raise HybridError(f"--profile {str(p)!r} covers none of the {n} ops of graph {graph.name!r} (measured "
                              "on another model or batch?); measure this graph with "
                              f"`hybrid profile --graph {graph_file} --profile {p} --backend {prof.backend}`, "
                              "or leave it out")
        if report is not None:
            report(p, hits, n, field_name)
    return graph
