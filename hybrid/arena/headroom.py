"""Headroom: the byte budget the search plans so that its plans lay out within the real memory (issue 31).

A byte-budget plan fills its budget to the brim; one offset per tensor needs 2-60% more than the live peak
(NasNet-25's plans 1.59x). Laid out after the search, the winner then misses and is re-planned with less
memory, with genes the search tuned for the memory it no longer has. `calibrate` measures the shrink up front
instead, on the search's seed plans (the Belady planner on the program and depth-first orders): their least
heuristic-layout overflow r says give up 1 - 1/r of the memory, plus MARGIN. The search
(`OptimizeOptions.headroom`, `hybrid optimize --headroom`) scores every individual on that smaller byte budget;
its winner is laid out within the full memory by `hybrid.arena.layout.lay_out`, which re-plans it with more of
the memory where it fits (`_grow_search`), or falls back as usual where it does not (reported). Halfway through
its generations (or time), `recalibrate` lays the search's incumbent out the same way: where it misses, the rest
of the search gives up what that layout says (its population scored afresh on the smaller device), since the
seeds are a poor guide to what the search converges to (Inception-v4-4: seeds 11%, its winner 18.7%).

One evaluation is the byte-budget walk (at less memory: 1.10-1.27x the walk at the full memory on
benchmarks/planner_speed.py's 10k-op graphs, against 2.6-3.6x for the arena walk); the calibration is one or
two layouts once (1.2-3.6 s there, 30 s on NasNet-25). Fitness is not the laid-out makespan: the Python lifetimes
and a best-fit layout cost 50-300x a walk on the 10k-op suite graphs, too much per evaluation.

What was tried (SwapAdvisor suite, 5 generations of 16, seed 1, refine none, timed slot; written plan over
the byte-budget search's best at full memory, the relaxation; docs/arena.md has the table):
- calibrating by the layout fallback's own shrink search (re-plans until the program order's plan lays out):
  BRNN-4-8k 1.257 (31% given up where the search's plans need 18-20%), WResNet 1.018; the overflow alone
  (1 - 1/r, one layout) won: BRNN 1.148, WResNet 1.012, RNN 0.991 (the default flow: 1.135, 1.015, 0.998).
- the program order alone: NasNet's program order overflows where its depth-first order lays out; the least
  overflow of both seeds is what runs. The largest op's footprint caps the shrink (VGG-UNet at 50% of peak
  was infeasible without the cap).
- growing only the winner's genes, only where it laid out: MobileNet (Checkmate) at 25% of peak 1.252, its
  seeds overflowing by 20% where the default search's winner lays out as found; every re-plan source (the
  population's next best too) at the full memory, also where the winner missed, made it 1.006 and BRNN 1.125.
- a fixed 18% on BRNN (what the default flow's fallback gave up): 21.64 s written against 21.35 s; the memory
  BRNN's layouts need (its 1-2 GiB tensors, 97% of the bytes, in 15 GiB) costs the search 12-15% whatever
  the order of search and layout.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import numpy as np

from hybrid.arena.layout import DEFAULT_BUDGET, QUICK_BUDGET, LayoutBudget, heuristic_layout
from hybrid.device import Device
from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.units import counted

MARGIN = 0.01     # given up beyond the calibrated shrink: other schedules fragment a little differently
MAX_SHRINK = 0.5  # at most this share of the memory given up (hybrid.arena.layout.MAX_SHRINK)


@dataclass(frozen=True)
class Headroom:
    """The share of the usable memory the search gives up, and how it was measured."""

    shrink: float                  # 0: the plan laid out within the full memory
    ratio: float                   # the calibration plan's heuristic arena over the capacity at full memory
    layouts: int                   # plans laid out to find it
    seconds: float
    trials: tuple[float, ...] = ()  # arena / capacity of each seed plan laid out (and of the incumbent, last,
    #                                 where the search was recalibrated halfway: `recalibrate`)
    seeded: float | None = None    # the shrink the seeds asked for, where the search's incumbent asked for more
    laid: tuple = dataclasses.field(default=(), compare=False, repr=False)   # seed plans that laid out within the
    #   full memory (arena plans): candidates for the written plan (`lay_out`'s `others`), never slower to keep
    capped: str = ""               # why less was given up than the layouts asked for ("" where it was not capped)
    least_usable: int = 0          # the usable bytes the search's device must keep (a size-class pool's floor)
    usable: int = 0                # the search's usable bytes as a checkpoint stored them (`resumed`); 0: from shrink

    @classmethod
    def resumed(cls, device: Device, memory_bytes: int) -> "Headroom":
        """The headroom a checkpoint's search planned with (its device's `memory_bytes`, less than `device`'s): a
        resume keeps it to the byte rather than calibrating afresh, whose result depends on the time left (under
        about 15 s it is left out) and would not be the memory the checkpoint's makespans were scored on."""
        usable = int(memory_bytes) - device.reserve_bytes
        return cls(1.0 - usable / max(device.usable_bytes, 1), 0.0, 0, 0.0, usable=usable)

    def device(self, device: Device) -> Device:
        """`device` with `shrink` of its usable memory given up (the search's device)."""
        if self.usable:
            return dataclasses.replace(device, memory_bytes=self.usable + device.reserve_bytes)
        if self.shrink <= 0.0:
            return device
        usable = int(device.usable_bytes * (1.0 - self.shrink))
        return dataclasses.replace(device, memory_bytes=usable + device.reserve_bytes)

    def to_json(self) -> dict:
        """The plan's record (`planner.headroom`): no wall time, so a plan's bytes are the seed's and budget's."""
        if self.usable:
            return {"shrink": self.shrink, "from_checkpoint": True}
        return {"shrink": self.shrink, "ratio": self.ratio, "layouts": self.layouts,
                "trials": list(self.trials), **({"seeded": self.seeded} if self.seeded is not None else {})}

    def describe(self) -> str:
        if self.usable:
            return (f"headroom: searched with {100 * self.shrink:.3g}% less memory, as the checkpoint's search was "
                    "(--resume keeps the memory its makespans were scored on)")
        if not self.layouts:
            return "headroom: none (no seed plan runs in this memory, so none was laid out)"
        capped = f"; {self.capped}" if self.capped else ""
        if self.seeded is not None:
            return (f"headroom: searched with {100 * self.seeded:.3g}% less memory, then {100 * self.shrink:.3g}% "
                    f"from halfway (its best plan then laid out {_over(self.trials[-1])} at full "
                    f"memory{capped}; {counted(self.layouts, 'layout')}, {self.seconds:.1f} s)")
        return (f"headroom: searched with {100 * self.shrink:.3g}% less memory (the seeds' best layout "
                f"{_over(self.ratio)} at full memory{capped}; {counted(self.layouts, 'layout')}, "
                f"{self.seconds:.1f} s)")


def calibrate(graph: Graph, device: Device, recompute: bool = True, budget: LayoutBudget = QUICK_BUDGET,
              deadline: float | None = None, base=None,  # noqa: ANN001 - PlannerOptions | None
              least_usable: int = 0) -> Headroom:
    """From the seed plans' heuristic layouts at full memory (the Belady planner, swap + recompute where faster,
    on the program order and the depth-first order: the search's seeds), the least overflow r: the search then
    gives up 1 - 1/r of the memory plus MARGIN (0 where a seed lays out), but never so much that the largest
    op no longer fits. `deadline` (time.perf_counter): no second layout starts after it (a layout started is
    finished: cut short, its arena would overstate the shrink, as a first run's +98.9% for 13% once did).
    `base`: the search's planner options (its seeds are planned with them; default: the planner's, with
    `recompute`'s ratio). `least_usable`: bytes the search's device must keep usable (`--pool classes`: the least
    size-class pool and its workspace), or the search it is for could not start."""
    from hybrid.arena.lifetimes import arena_plan, plan_buffers
    from hybrid.graph.order import depth_first_order, program_order
    from hybrid.swap.baselines import RECOMPUTE_RATIO
    from hybrid.swap.planner import SwapPlanner
    from hybrid.swap.pools import byte_pool
    from hybrid.swap.to_plan import on_device, to_plan

    t0 = time.perf_counter()
    planner = SwapPlanner(graph, device)
    pool = byte_pool(graph, device)
    base = (_options(RECOMPUTE_RATIO if recompute else 0.0) if base is None
            else dataclasses.replace(base, addresses=False))
    prog, dfs = program_order(graph), depth_first_order(graph)
    ratios: list[float] = []
    laid: list = []
    for order in [prog] if np.array_equal(prog, dfs) else [prog, dfs]:
        if ratios and (min(ratios) <= 1.0 or (deadline is not None and time.perf_counter() > deadline)):
            break
        opt = planner.faster_options(order, pool, base)
        try:
            plan = on_device(graph, to_plan(planner.plan(order, pool, opt), {"name": "belady"}), device)
        except InfeasibleError:
            continue
        pb = plan_buffers(graph, plan)
        sol = heuristic_layout(pb.problem, budget, None)   # whole: a layout cut short overstates the shrink
        ratios.append(sol.arena_bytes / max(int(pb.problem.capacity or 0), 1))
        if sol.arena_bytes <= int(pb.problem.capacity or 0):
            laid.append(dataclasses.replace(arena_plan(plan, pb, sol),
                                            planner={**plan.planner, "name": "belady", "seed": len(ratios)}))
    ratio = min(ratios, default=1.0)
    shrink = 0.0 if ratio <= 1.0 else 1.0 - 1.0 / ratio + MARGIN
    kept, capped = _within_room(graph, device, shrink, least_usable)
    return Headroom(kept, ratio, len(ratios), time.perf_counter() - t0, tuple(ratios), laid=tuple(laid),
                    capped=capped, least_usable=least_usable)


def _within_room(graph: Graph, device: Device, shrink: float, least_usable: int = 0) -> tuple[float, str]:
    """`shrink` within [0, MAX_SHRINK], and never so much that the largest op, or `least_usable` bytes (a
    size-class pool's floor), no longer fit the search's device; and why it was capped, where it was ("" where
    not)."""
    from hybrid.graph.info import largest_op
    from hybrid.units import format_bytes_up

    usable = max(device.usable_bytes, 1)
    op_bytes = largest_op(graph, device.alignment_bytes)[1]
    op_room = 1.0 - op_bytes / usable - MARGIN
    pool_room = 1.0 - (least_usable + 1) / usable   # in bytes, as the pool is checked (the byte: rounding)
    kept = max(0.0, min(shrink, MAX_SHRINK, op_room, pool_room))
    if kept >= shrink:
        return kept, ""
    if pool_room < min(op_room, MAX_SHRINK):
        return kept, (f"it asked for {100 * shrink:.3g}%, but the least size-class pool (--pool classes) needs "
                      f"{format_bytes_up(least_usable)} of the memory")
    if op_room <= MAX_SHRINK:
        return kept, (f"it asked for {100 * shrink:.3g}%, but the largest single op needs "
                      f"{format_bytes_up(op_bytes)} of the memory")
    return kept, f"it asked for {100 * shrink:.3g}%, at most {100 * MAX_SHRINK:.0f}% is given up"


RECALIBRATE_STEP = 0.01   # a recalibrated shrink this little above the search's is not worth a change of device


def recalibrate(graph: Graph, device: Device, plan, head: Headroom,  # noqa: ANN001 - Plan
                budget: LayoutBudget = DEFAULT_BUDGET, deadline: float | None = None) -> Headroom | None:
    """Halfway through the search, its incumbent `plan` (planned with `head.shrink` of the memory given up) laid
    out within the full memory of `device`: by the heuristics and, where they miss by at most REPAIR_MISS, the
    repair (as `lay_out` lays out the winner). Where it does not fit, the shrink it needs, 1 - (1 - s) / r for
    its arena r x the capacity (plus MARGIN, within MAX_SHRINK and the largest op's room), when that is at
    least RECALIBRATE_STEP more than the search's: the search then goes on with that much given up, so its
    winner lays out instead of falling back to a re-plan of genes tuned for another memory. None: go on as
    is (it fits, or needs little more). The seeds `calibrate` reads are a poor guide to what the search
    converges to: Inception-v4-4's seeds asked for 11% and its winner needed 18.7% (docs/arena.md)."""
    from hybrid.arena.layout import REPAIR_MISS, repaired
    from hybrid.arena.lifetimes import plan_buffers

    t0 = time.perf_counter()
    pb = plan_buffers(graph, dataclasses.replace(plan, device=device))
    cap = max(int(pb.problem.capacity or 0), 1)
    sol = heuristic_layout(pb.problem, budget, None)
    ratio = sol.arena_bytes / cap
    if 1.0 < ratio <= 1.0 + REPAIR_MISS and budget.repair_moves > 0:
        fixed, _, _ = repaired(pb.problem, budget.repair_moves, deadline)
        ratio = 1.0 if fixed is not None else ratio
    seconds = head.seconds + time.perf_counter() - t0
    if ratio <= 1.0:
        return None
    shrink, capped = _within_room(graph, device, 1.0 - (1.0 - head.shrink) / ratio + MARGIN, head.least_usable)
    if shrink < head.shrink + RECALIBRATE_STEP:
        return None
    return Headroom(shrink, head.ratio, head.layouts + 1, seconds, head.trials + (ratio,), head.shrink,
                    laid=head.laid, capped=capped, least_usable=head.least_usable)


def _options(ratio: float):  # noqa: ANN202 - PlannerOptions
    from hybrid.swap.augmented import PlannerOptions

    return PlannerOptions(recompute_ratio=ratio)


def _over(ratio: float) -> str:
    """A layout's arena against the memory, said the way it goes: "2.2% over", "2.2% under"."""
    return f"{100 * abs(ratio - 1):.1f}% {'over' if ratio > 1 else 'under'}"
