"""Give a byte-budget plan exact arena offsets before it is written, falling back where it does not fit.

The search scores plans as if memory never fragments (a byte budget). A plan that is written must say where
every device copy lives, so the best plan is laid out (`lifetimes.with_arena`: the heuristics first, the
exact search only when they overflow). Where even the exact search finds no layout within the memory, the
plan's other candidates are laid out (the search's plan before refinement), its schedule is planned again
(the Belady planner, the faster of swap-only and swap + recompute, or the search's own genes) with 2%, 4%,
8%, ... less memory, at most `rounds` times, and with a per-size class pool, which needs no offsets; the
fastest of these is kept.
`Layout` says which happened and what it cost.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.swap.augmented import PlannerOptions


@dataclass(frozen=True)
class Layout:
    plan: Plan                 # what to write: an arena plan, or a size-class plan (the last fallback)
    fallback: str              # "" (laid out as found), "slower candidate", "re-planned", or "size classes"
    rounds: int                # re-plans with a smaller budget
    makespan_before_s: float   # the byte-budget plan's makespan, before any fallback
    solve_s: float

    @property
    def cost(self) -> float:
        """Makespan after over before, minus 1: what exact offsets cost against the fragmentation-free figure."""
        return self.plan.makespan_s / self.makespan_before_s - 1.0

    def describe(self) -> str:
        if not self.fallback:
            return "laid out in the arena as planned"
        how = {"re-planned": f"re-planned {self.rounds}x with less memory",
               "size classes": "re-planned with per-size classes",
               "slower candidate": "laid out the search's own plan instead"}[self.fallback]
        return f"no arena layout within memory: {how} ({100 * self.cost:+.2f}% makespan)"


def replan_schedule(graph: Graph, plan: Plan, memory_bytes: int | None, size_classes: bool = False,
                    order: np.ndarray | None = None, options: PlannerOptions | None = None,
                    info: dict | None = None) -> Plan:
    """The plan's schedule (or `order`) planned again with a byte budget of `memory_bytes` (or per-size
    classes): by the Belady planner, the faster of swap-only and swap + recompute, or with `options` (the
    search's genes); the result names the original device. InfeasibleError when it cannot fit."""
    from hybrid.graph.order import from_ids
    from hybrid.swap.baselines import RECOMPUTE_RATIO
    from hybrid.swap.planner import SwapPlanner
    from hybrid.swap.pools import byte_pool, per_size_pool
    from hybrid.swap.to_plan import to_plan

    dev = plan.device if memory_bytes is None else dataclasses.replace(
        plan.device, memory_bytes=memory_bytes + plan.device.reserve_bytes)
    order = from_ids(graph, plan.schedule) if order is None else order
    pool = per_size_pool(graph, order, dev) if size_classes else byte_pool(graph, dev)
    planner = SwapPlanner(graph, dev)
    if options is None:
        options = planner.faster_options(order, pool, PlannerOptions(recompute_ratio=RECOMPUTE_RATIO))
    aug = planner.plan(order, pool, options)
    name = dict(info if info is not None else plan.planner if isinstance(plan.planner, dict) else {})
    name["fallback"] = "size classes" if size_classes else f"byte budget {memory_bytes}"
    return dataclasses.replace(to_plan(aug, name), device=plan.device)


def lay_out(graph: Graph, plan: Plan, time_limit_s: float = 10.0, rounds: int = 4,
            others: list[Plan] | tuple[Plan, ...] = (),
            replans: tuple[Callable[[int], Plan], ...] | None = None) -> Layout:
    """`plan` with arena offsets (see the module docstring); plans that are not byte budgets pass through.

    `others`: slower candidates (e.g. the search's own plan before refinement) tried before any fallback.
    `replans`: ways to plan again for a byte budget (default: the Belady planner on the plan's schedule; the
    search passes its best individual's genes too). Of everything that fits, the fastest is kept."""
    from hybrid.arena.lifetimes import plan_buffers, with_arena

    t0 = time.perf_counter()
    before = plan.makespan_s
    if plan.allocation.kind != "unconstrained":
        return Layout(plan, "", 0, before, 0.0)
    per_try = time_limit_s / (rounds * (1 if replans is None else len(replans)) + 1 + len(others))

    def fit(p: Plan) -> Plan | None:
        try:
            return with_arena(graph, p, per_try, first_fit=True)[0]
        except InfeasibleError:
            return None

    laid = fit(plan)
    if laid is not None:
        return Layout(laid, "", 0, before, time.perf_counter() - t0)
    found: list[tuple[float, int, Plan, str, int]] = []
    for other in (o for o in others if o.allocation.kind == "unconstrained"):
        got = fit(other)
        if got is not None:
            found.append((got.makespan_s, len(found), got, "slower candidate", 0))
    if replans is None:
        replans = (lambda budget: replan_schedule(graph, plan, budget),)
    for replan in replans:
        for k in range(1, rounds + 1):
            # 2%, then 4%, 8%, ... of the memory less: the largest budget that lays out loses the least
            budget = int(plan.device.usable_bytes * (1 - 0.02 * 2 ** (k - 1)))
            try:
                cand = replan(budget)
            except InfeasibleError:
                break
            got = fit(cand)
            if got is not None:
                found.append((got.makespan_s, len(found), got, "re-planned", k))
                break
    try:
        classes = replan_schedule(graph, plan, None, size_classes=True)
        found.append((classes.makespan_s, len(found), classes, "size classes", 0))
    except InfeasibleError:
        pass
    if not found:
        raise InfeasibleError("no arena layout of the plan fits the memory, and neither a re-plan with less memory "
                              "nor per-size classes do; give a little more memory")
    _, _, best, how, k = min(found, key=lambda x: x[:2])
    return Layout(best, how, k, before, time.perf_counter() - t0)
