"""Headroom: the byte budget the search plans so that its plans lay out within the real memory (issue 31).

A byte-budget plan fills its budget to the brim; one offset per tensor needs 2-60% more than the live peak
(NasNet-25's plans 1.59x). Laid out after the search, the winner then misses and is re-planned with less
memory, with genes the search tuned for the memory it no longer has. `calibrate` measures the shrink up
front instead, on one plan (the Belady planner on the program order): the largest share of the memory to give
up so that its heuristic layout fits (the same ratio-guided shrink and regula falsi as the layout's fallback,
`hybrid.arena.layout._shrink_search`). The search (`OptimizeOptions.headroom`) then scores every individual on
that smaller byte budget, and its winner is laid out within the real memory by `hybrid.arena.layout.lay_out`
(the heuristics, the exact search for near misses, its re-plans only where none of that fits: reported).

Fragmentation depends on the schedule, so the shrink is an estimate for the search's individuals: what
matters is that it is measured on the graph and memory at hand, once (a few layouts), not per evaluation
(the Python lifetimes and the best-fit layout cost 50-300x a walk on the 10k-op suite graphs).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from hybrid.arena.layout import QUICK_BUDGET, LayoutBudget, Replan, _shrink_search, heuristic_layout
from hybrid.device import Device
from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.plan import Plan

STEPS = 0         # re-plans of a shrink search after the first layout (0: its overflow alone, what won)
MARGIN = 0.01     # given up beyond the calibrated shrink: other schedules fragment a little differently


@dataclass(frozen=True)
class Headroom:
    """The share of the usable memory the search gives up, and how it was measured."""

    shrink: float                  # 0: the plan laid out within the full memory
    ratio: float                   # the calibration plan's heuristic arena over the capacity at full memory
    layouts: int                   # plans laid out to find it
    seconds: float
    trials: tuple[tuple[float, float], ...] = ()   # (shrink, arena / capacity) per layout

    def device(self, device: Device) -> Device:
        """`device` with `shrink` of its usable memory given up (the search's device)."""
        if self.shrink <= 0.0:
            return device
        usable = int(device.usable_bytes * (1.0 - self.shrink))
        return dataclasses.replace(device, memory_bytes=usable + device.reserve_bytes)

    def to_json(self) -> dict:
        return {"shrink": self.shrink, "ratio": self.ratio, "layouts": self.layouts, "seconds": round(self.seconds, 3),
                "trials": [list(t) for t in self.trials]}

    def describe(self) -> str:
        return (f"headroom: searched with {100 * self.shrink:.3g}% less memory (the program order's Belady plan "
                f"laid out {100 * (self.ratio - 1):+.1f}% over at full memory; {self.layouts} layouts, "
                f"{self.seconds:.1f} s)")


def calibrate(graph: Graph, device: Device, recompute: bool = True, steps: int | None = None,
              budget: LayoutBudget = QUICK_BUDGET, deadline: float | None = None) -> Headroom:
    """The smallest shrink found (at most `steps` re-plans) at which the Belady plan of the program order lays
    out within `device`'s memory by the heuristics, plus MARGIN (0 where it lays out at full memory)."""
    from hybrid.arena.layout import replan_schedule
    from hybrid.arena.lifetimes import plan_buffers
    from hybrid.graph.order import program_order
    from hybrid.swap.baselines import RECOMPUTE_RATIO
    from hybrid.swap.planner import SwapPlanner
    from hybrid.swap.pools import byte_pool
    from hybrid.swap.to_plan import to_plan

    t0 = time.perf_counter()
    steps = STEPS if steps is None else steps
    order = program_order(graph)
    trials: list[tuple[float, float]] = []

    def ratio_of(p: Plan, shrink: float) -> float:
        pb = plan_buffers(graph, p)
        sol = heuristic_layout(pb.problem, budget, deadline)
        r = sol.arena_bytes / max(int(pb.problem.capacity or 0), 1)
        trials.append((shrink, r))
        return r

    planner = SwapPlanner(graph, device)
    pool = byte_pool(graph, device)
    opt = (planner.faster_options(order, pool, _options(RECOMPUTE_RATIO)) if recompute else _options(0.0))
    try:
        first = dataclasses.replace(to_plan(planner.plan(order, pool, opt), {"name": "belady"}), device=device)
    except InfeasibleError:
        return Headroom(0.0, 1.0, 0, time.perf_counter() - t0)
    ratio0 = ratio_of(first, 0.0)
    if ratio0 <= 1.0:
        return Headroom(0.0, ratio0, 1, time.perf_counter() - t0, tuple(trials))
    if steps <= 0:     # the overflow alone: an arena r x the capacity needs 1 - 1/r of the memory given up
        return Headroom(min(1.0 - 1.0 / ratio0 + MARGIN, 0.5), ratio0, 1, time.perf_counter() - t0, tuple(trials))
    rp = Replan("belady", lambda b: replan_schedule(graph, first, b, order=order, options=opt))
    fitted = [s for s, r in trials if r <= 1.0]

    def fit(p: Plan, source: str, shrink: float, kind: str) -> float:  # noqa: ARG001 - _shrink_search's callback
        r = ratio_of(p, shrink)
        if r <= 1.0:
            fitted.append(shrink)
        return r

    for _ in _shrink_search(rp, device.usable_bytes, ratio0, steps, fit):
        if deadline is not None and time.perf_counter() > deadline:
            break
    shrink = min(fitted) + MARGIN if fitted else max(s for s, _ in trials) + MARGIN
    return Headroom(min(shrink, 0.5), ratio0, len(trials), time.perf_counter() - t0, tuple(trials))


def _options(ratio: float):  # noqa: ANN202 - PlannerOptions
    from hybrid.swap.augmented import PlannerOptions

    return PlannerOptions(recompute_ratio=ratio)
