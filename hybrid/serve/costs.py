"""What a model costs to serve: its compute time, its swap plan's makespan at a share of GPU memory, its bytes.

The swap plan is made by the Belady swap planner on the program order (fast), or by the genetic search for a
fixed number of generations (`hybrid optimize --refine none --generations G`, deterministic for a seed); every
plan passes `hybrid.validator.validate`.
"""
from __future__ import annotations

import dataclasses
from typing import Literal

from hybrid.device import Device
from hybrid.errors import HybridError, InfeasibleError
from hybrid.graph import Graph
from hybrid.graph.info import ideal_time, largest_op, unswapped_peak
from hybrid.plan import Plan
from hybrid.serve.simulate import ModelCosts
from hybrid.units import format_bytes

Planner = Literal["belady", "ga"]


def swap_plan(graph: Graph, device: Device, memory_bytes: int, planner: Planner = "belady", generations: int = 20,
              seed: int = 1) -> Plan:
    """A validated swap plan for `graph` within `memory_bytes` of `device` (no reserve: the share is what the
    model may fill)."""
    from hybrid.validator import validate

    dev = dataclasses.replace(device, memory_bytes=int(memory_bytes), reserve_bytes=0)
    _, big = largest_op(graph, dev.alignment_bytes)
    if big > memory_bytes:
        raise HybridError(f"--memory: model {graph.name!r} gets {format_bytes(memory_bytes)}, less than its largest "
                          f"op alone needs ({format_bytes(big)}); give more --memory or serve fewer models")
    try:
        if planner == "ga":
            from ga import GAConfig, optimize

            plan = optimize(graph, dev, GAConfig(seed=seed), generations=generations, workers=1).to_plan()
        elif planner == "belady":
            from hybrid.swap.baselines import run_baseline

            plan = run_baseline(graph, dev, "belady")
        else:
            raise HybridError(f"--planner {planner!r}: choose belady or ga")
    except InfeasibleError as e:
        raise HybridError(f"--memory: no swap plan for {graph.name!r} in {format_bytes(memory_bytes)}: {e}") from e
    report = validate(graph, plan)
    if not report.valid:
        raise HybridError(f"the {planner} plan for {graph.name!r} failed validation: {report}")
    return plan


def model_costs(graph: Graph, device: Device, share_bytes: int, planner: Planner = "belady", generations: int = 20,
                seed: int = 1, name: str | None = None) -> ModelCosts:
    """`ModelCosts` of `graph` given `share_bytes` of device memory for its swap plan."""
    a = graph.arrays
    params = int(a.t_bytes[a.t_persistent].sum())
    peak = unswapped_peak(graph, device.alignment_bytes)
    ideal = ideal_time(graph)
    if peak <= share_bytes:
        swap = ideal  # fits whole in its share: nothing to swap
    else:
        swap = max(swap_plan(graph, device, share_bytes, planner, generations, seed).makespan_s, ideal)
    return ModelCosts(name or graph.name, ideal, swap, params, max(peak - params, 0))
