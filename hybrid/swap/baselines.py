"""The obvious alternatives every optimized plan is measured against; each returns the one plan type.

- naive: the schedule as given, copies on demand, LRU eviction, nothing overlapped (one stream).
- odswap: SwapAdvisor's online baseline — LRU on demand in the first iteration; later iterations replay
  those decisions with prefetching. We report the second iteration (its start state is the first's end).
- vdnn: vDNN/TFLMS style — persistent tensors (parameters, optimizer state, inputs) stay resident and only
  activations and gradients are swapped, evicting the one needed farthest ahead, with prefetch.
- belady: this project's swap planner (Belady eviction, prefetch, periodic two-pass) on the program order;
  with `recompute=True` a victim without a host copy may instead be dropped and recomputed
  (hybrid.swap.recompute) where that costs less than its copies; the swap-only plan is kept when faster.
- recompute-only: Checkmate-style, no activation ever crosses the link: Belady order among the
  activations and gradients that can be regenerated from what is still on the device or host (chains of up
  to three single-output ops); the others stay resident. Persistent tensors (parameters, optimizer state)
  still start on the host and move as in belady: the heuristic decides activations only.
- ideal: unlimited memory, no copies at all: the compute time alone.
All but ideal use a byte budget (an allocator without size classes), as frameworks do.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from hybrid.swap.pools import byte_pool
from hybrid.graph.liveness import peak_live_counts
from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.swap.to_plan import to_plan
from hybrid.graph.order import program_order
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.planner import SwapPlanner

BASELINE_OPTIONS: dict[str, PlannerOptions] = {
    "naive": PlannerOptions(victim="lru", overlap=False, passes=1),
    "odswap": PlannerOptions(victim="lru", passes=2, keep="last", write_back=False),  # on demand only
    "vdnn": PlannerOptions(keep_persistent=True),
    "belady": PlannerOptions(),
    "recompute-only": PlannerOptions(recompute_only=True, recompute_depth=3),
    "ideal": PlannerOptions(keep_persistent=True),
}
BASELINES = tuple(BASELINE_OPTIONS)


RECOMPUTE_RATIO = 1.0  # `hybrid optimize`'s and the belady baseline's default: rerun when cheaper than the copies


def run_baseline(graph: Graph, device: Device, kind: str, schedule: np.ndarray | None = None,
                 recompute: bool = False) -> Plan:
    """Plan `graph` on `device` the way baseline `kind` would; raises InfeasibleError if it cannot run.
    `recompute` lets belady drop and recompute too (the other kinds model systems that only swap)."""
    if kind not in BASELINE_OPTIONS:
        raise HybridError(f"unknown baseline {kind!r}: choose one of {', '.join(BASELINES)}")
    order = program_order(graph) if schedule is None else np.asarray(schedule, dtype=np.int32)
    opt = BASELINE_OPTIONS[kind]
    if kind == "ideal":
        _, peak = peak_live_counts(graph, order)
        room = peak + device.alignment_bytes * graph.arrays.n_tensors + device.reserve_bytes  # aligned copies fit
        device = replace(device, name=f"{device.name}-unlimited", memory_bytes=max(device.memory_bytes, room))
    planner = SwapPlanner(graph, device)
    pool = byte_pool(graph, device)
    if recompute and kind == "belady":
        opt = planner.faster_options(order, pool, replace(opt, recompute_ratio=RECOMPUTE_RATIO))
    aug = planner.plan(order, pool, opt)
    info = {"name": kind, "options": opt.describe()}
    if schedule is not None:
        info["schedule"] = "given"
    return to_plan(aug, info)
