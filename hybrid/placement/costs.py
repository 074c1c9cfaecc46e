"""Per-op times for placement: re-cost a captured graph for a GPU preset and a CPU preset, or from profiles.

A captured op records its FLOPs, bytes moved, dtype and class (`extra.cost`), so its roofline time on
another processor is one formula away (`hybrid.capture.costs.roofline_s`). Measured times come from
`hybrid profile` files: a cuda profile sets `time_s`, a cpu profile `cpu_time_s` (`apply_profile`).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hybrid.capture.costs import roofline_s
from hybrid.device import HOST_CPUS, PRESET_COMPUTE, ComputeSpec
from hybrid.errors import HybridError
from hybrid.graph import Graph


def _spec(name: str, table: dict[str, ComputeSpec], flag: str) -> ComputeSpec:
    if name not in table:
        raise HybridError(f"{flag} {name!r}: no such preset; choose one of {', '.join(sorted(table))}")
    return table[name]


def recost(graph: Graph, gpu: str | None = None, cpu: str | None = None) -> Graph:
    """A copy of `graph` with `time_s` from GPU preset `gpu` and `cpu_time_s` from CPU preset `cpu` (each only
    when given). Ops without a recorded cost are an error naming the op."""
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
        changes = {}
        if g_spec is not None:
            changes["time_s"] = roofline_s(*args, g_spec)
        if c_spec is not None:
            changes["cpu_time_s"] = roofline_s(*args, c_spec)
        ops.append(replace(op, **changes))
    extra = dict(graph.extra)
    extra["placement_costs"] = {"gpu": g_spec.name if g_spec else None, "cpu": c_spec.name if c_spec else None}
    return Graph(graph.name, graph.tensors, ops, graph.device, extra)


def with_profiles(graph: Graph, profiles: list[Path]) -> Graph:
    """Measured times from `hybrid profile` files, over whatever the graph has."""
    from hybrid.capture.profile import Profile, apply_profile

    for p in profiles:
        graph = apply_profile(graph, Profile.load(p))
    return graph
