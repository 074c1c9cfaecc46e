"""What a model costs to serve: its compute time, its swap plan's makespan at a share of GPU memory, its bytes.

The swap plan is made by the Belady swap planner on the program order (fast), or by the genetic search for a
fixed number of generations (`hybrid optimize --refine none --generations G`, deterministic for a seed); every
plan passes `hybrid.validator.validate`.

Serving needs an inference graph (`hybrid.graph.info.training_reason` says why one is not), and op times for the GPU it is
served on: `costed_for` names the preset a graph's times are for, `recost_for` re-costs them for another.
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


def costed_for(graph: Graph) -> str | None:
    """The device whose op times `graph` carries: the preset it was last re-costed or captured for, else the
    device it names (an imported graph's times are its own device's); None when it names none."""
    from hybrid.device import PRESET_COMPUTE

    placed = graph.extra.get("placement_costs")
    if isinstance(placed, dict) and placed.get("gpu"):   # recost records the compute figures' name: the preset's
        gpu = str(placed["gpu"])
        return next((k for k, spec in PRESET_COMPUTE.items() if spec.name == gpu), gpu)
    capture = graph.extra.get("capture")
    costs = capture.get("costs") if isinstance(capture, dict) else None
    if isinstance(costs, dict) and costs.get("device"):
        return str(costs["device"])
    return graph.device.name if graph.device is not None else None


def recost_for(graph: Graph, device: Device, where: str) -> Graph:
    """`graph` with op times re-costed for preset `device.name` (hybrid.placement.costs.recost: the roofline of
    each op's recorded FLOPs and bytes) and `device` as its device, so serving on another GPU does not keep the
    old GPU's compute times. A graph without recorded costs is refused, naming `where` (its file)."""
    from hybrid.placement.costs import recost

    try:
        new = recost(graph, gpu=device.name)
    except HybridError as e:
        raise HybridError(f"--device {device.name}: {where} records no FLOPs and bytes to re-cost its op times "
                          f"(they are {costed_for(graph) or 'of an unnamed device'}'s); leave out --device and "
                          "give --memory/--h2d to change only the GPU's memory and link") from e
    return Graph(graph.name, graph.tensors, new.ops, device, new.extra)


def model_costs(graph: Graph, device: Device, share_bytes: int, planner: Planner = "belady", generations: int = 20,
                seed: int = 1, name: str | None = None, swapping: bool = True) -> ModelCosts:
    """`ModelCosts` of `graph` given `share_bytes` of device memory for its swap plan. Its parameters are its
    persistent tensors other than inputs (a request's input is not what time-sharing keeps resident or
    copies in to switch models; it is counted in the workspace). Without `swapping` no swap plan is made
    (`swap_s` is None: the swapping policy is not served, and `share_bytes` need not hold the largest op).
    `input_bytes` and `output_bytes` are a batch's inputs and outputs (`hybrid.placement.partition.graph_outputs`),
    which no service time counts."""
    from hybrid.placement.partition import graph_outputs

    params = sum(t.bytes for t in graph.tensors if t.persistent and t.kind != "input")
    read = {t for op in graph.ops for t in op.inputs}
    inputs = sum(t.bytes for t in graph.tensors if t.kind == "input" and t.id in read)
    outputs = sum(graph.tensors[i].bytes for i in graph_outputs(graph))
    peak = unswapped_peak(graph, device.alignment_bytes)
    ideal = ideal_time(graph)
    swap: float | None
    if not swapping:
        swap = None
    elif peak <= share_bytes:
        swap = ideal  # fits whole in its share: nothing to swap
    else:
        swap = max(swap_plan(graph, device, share_bytes, planner, generations, seed).makespan_s, ideal)
    return ModelCosts(name or graph.name, ideal, swap, params, max(peak - params, 0), inputs, outputs)
