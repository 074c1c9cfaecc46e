"""Give a byte-budget plan exact arena offsets before it is written, falling back where it does not fit.

The search scores plans as if memory never fragments (a byte budget), and its plans fill that budget to the
brim: on the bundled ResNet-18 at 64 MiB the live bytes peak at 99.95% of the memory, while one offset per
tensor (FORMATS' arena; a tensor swapped out and back in keeps its offset) needs 8-11% more than the peak.
So the best plan rarely lays out as found, and giving memory up is steep there (1% less memory costs the
search's genes 3% makespan, 10% less 15%): the fallback must give up as little memory as it can.

`lay_out` tries, cheapest first, and keeps the fastest plan that fits:
1. the plan itself: the heuristics (milliseconds), then the exact search (first fit, a share of the time);
2. its other candidates (the search's plan before refinement, the population's next best plans);
3. re-plans (`Replan`: the search's genes, the population's, the Belady planner) with a smaller byte
   budget: 0.5%, 1%, 2%, ..., 50% less memory until one lays out, then a bisection between the last budget that
   failed and the first that fit (the largest budget that lays out loses the least), laid out by the
   heuristics; the exact search then gets the time left for the fastest near misses (within 6% of fitting),
   which is what usually wins: a re-plan with 2% less memory that the heuristics lay out 0.7% over;
4. size classes (no offsets needed): the search's fastest size-class plans, and per-size classes.
`Layout` says which fired, how much memory it gave up and what it cost.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.swap.augmented import PlannerOptions

SHRINK_STEPS = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.5)   # memory given up, tried in turn until a re-plan lays out
NEAR_MISS = 0.06                                  # heuristic arena at most this far over: worth the exact search
EXACT_TRIES = 4                                   # near misses given to the exact search, fastest first


@dataclass(frozen=True)
class Replan:
    """A way to plan the graph again for a byte budget (bytes -> Plan, InfeasibleError when it cannot)."""

    name: str
    make: Callable[[int], Plan]


@dataclass(frozen=True)
class Layout:
    """What `lay_out` wrote and why."""

    plan: Plan                 # what to write: an arena plan, or a size-class plan (the last fallback)
    fallback: str              # "" (laid out as found), "slower candidate", "re-planned", or "size classes"
    rounds: int                # candidate plans laid out (heuristics or exact search) to get here
    makespan_before_s: float   # the byte-budget plan's makespan, before any fallback
    solve_s: float
    source: str = ""           # which candidate was written (e.g. "search genes", "belady", "population 2")
    memory_given_up: float = 0.0   # share of the usable memory the written re-plan gave up
    overflow: float = 0.0      # the plan's own best layout over the capacity, minus 1 (0 when it fit)
    solver: str = ""           # who laid the written plan out
    trials: tuple[tuple[str, float, float, float], ...] = ()   # (source, memory given up, makespan, arena / cap)

    @property
    def cost(self) -> float:
        """Makespan after over before, minus 1: what exact offsets cost against the fragmentation-free figure."""
        return self.plan.makespan_s / self.makespan_before_s - 1.0

    def describe(self) -> str:
        if not self.fallback:
            return "laid out in the arena as planned" if self.plan.allocation.kind == "arena" else ""
        how = {"re-planned": f"re-planned ({self.source}) with {100 * self.memory_given_up:.2g}% less memory",
               "size classes": "re-planned with per-size classes",
               "slower candidate": f"laid out a slower candidate ({self.source})"}[self.fallback]
        return (f"no arena layout within memory (best {100 * self.overflow:+.1f}% over): {how} "
                f"({100 * self.cost:+.2f}% makespan)")

    def to_json(self) -> dict:
        return {"fallback": self.fallback, "source": self.source, "rounds": self.rounds,
                "memory_given_up": self.memory_given_up, "overflow": self.overflow, "cost": self.cost,
                "makespan_before_s": self.makespan_before_s, "solve_s": self.solve_s, "solver": self.solver,
                "describe": self.describe()}


def replan_schedule(graph: Graph, plan: Plan, memory_bytes: int | None, size_classes: bool = False,
                    order: np.ndarray | None = None, options: PlannerOptions | None = None,
                    info: dict | None = None, recompute: bool = True) -> Plan:
    """The plan's schedule (or `order`) planned again with a byte budget of `memory_bytes` (or per-size
    classes): by the Belady planner, the faster of swap-only and swap + recompute (swap-only when `recompute`
    is False, as `hybrid optimize --no-recompute` asks), or with `options` (the search's genes); the result
    names the original device. InfeasibleError when it cannot fit."""
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
        options = (planner.faster_options(order, pool, PlannerOptions(recompute_ratio=RECOMPUTE_RATIO))
                   if recompute else PlannerOptions(recompute_ratio=0.0))
    aug = planner.plan(order, pool, options)
    name = dict(info if info is not None else plan.planner if isinstance(plan.planner, dict) else {})
    name["fallback"] = "size classes" if size_classes else f"byte budget {memory_bytes}"
    return dataclasses.replace(to_plan(aug, name), device=plan.device)


@dataclass
class _Tried:
    """Candidates laid out so far: the fastest that fits, and the near misses worth an exact search."""

    capacity: int
    fits: list[tuple[float, int, Plan, str, float, str]] = field(default_factory=list)
    near: list[tuple[float, int, Plan, str, float, object, float]] = field(default_factory=list)
    count: int = 0
    log: list[tuple[str, float, float, float]] = field(default_factory=list)

    def best_s(self) -> float:
        return min((f[0] for f in self.fits), default=float("inf"))


def lay_out(graph: Graph, plan: Plan, time_limit_s: float = 10.0, others: list[Plan] | tuple[Plan, ...] = (),
            replans: list[Replan] | tuple[Replan, ...] | None = None, bisect_steps: int = 4,
            rounds: int | None = None, recompute: bool = True) -> Layout:
    """`plan` with arena offsets (see the module docstring); plans that are not byte budgets pass through.

    `others`: slower candidates (e.g. the search's own plan before refinement) tried before any re-plan;
    size-class plans among them (the search's best size-class individuals) are kept as they are.
    `replans`: ways to plan again for a smaller byte budget (default: the Belady planner on the plan's
    schedule); each is tried with 1%, 2%, 4%, ... less memory, then bisected `bisect_steps` times. Of
    everything that fits, the fastest is kept. `rounds` (legacy) caps the shrink steps tried per re-plan.
    The time limit bounds the search; a candidate is always laid out by the heuristics, whatever the time."""
    from hybrid.arena import exact
    from hybrid.arena.heuristics import best_heuristic
    from hybrid.arena.lifetimes import arena_plan, plan_buffers

    t0 = time.perf_counter()
    deadline = t0 + time_limit_s
    before = plan.makespan_s
    if plan.allocation.kind != "unconstrained":
        return Layout(plan, "", 0, before, 0.0)
    usable = plan.device.usable_bytes
    first = plan_buffers(graph, plan)
    tried = _Tried(int(first.problem.capacity or 0))

    def fit(p: Plan, source: str, shrink: float, kind: str, pb=None) -> bool:  # noqa: ANN001
        """Lay `p` out by the heuristics; record it as a fit or a near miss. Whether it fits."""
        pb = pb or plan_buffers(graph, p)
        sol = best_heuristic(pb.problem)
        tried.count += 1
        cap = pb.problem.capacity or 0
        over = sol.arena_bytes / max(cap, 1) - 1.0
        tried.log.append((source, shrink, p.makespan_s, over + 1.0))
        if sol.arena_bytes <= cap:
            tried.fits.append((p.makespan_s, len(tried.fits), arena_plan(p, pb, sol), source, shrink, kind))
            return True
        if over <= NEAR_MISS:
            tried.near.append((p.makespan_s, len(tried.near), p, source, shrink, pb, over))
        return False

    def done(how: str, source: str, shrink: float, laid: Plan) -> Layout:
        solver = str(laid.planner.get("arena", {}).get("solver", "")) if isinstance(laid.planner, dict) else ""
        return Layout(laid, how, tried.count, before, time.perf_counter() - t0, source, shrink, overflow, solver,
                      tuple(tried.log))

    if fit(plan, "the plan", 0.0, "", first):
        overflow = 0.0
        return done("", "the plan", 0.0, tried.fits[0][2])
    overflow = tried.log[0][3] - 1.0
    if tried.near:        # a near miss: the exact search on the plan itself, for a quarter of the time
        deadline += exact.warm_up()       # its one-off compile is not search time
        sol = exact.solve(first.problem, 0.25 * time_limit_s, first_fit=True)
        tried.count += 1
        if sol.arena_bytes <= tried.capacity:
            return done("", "the plan", 0.0, arena_plan(plan, first, sol))
        tried.near.clear()
    for k, other in enumerate(o for o in others if o.allocation.kind == "unconstrained"):
        who = other.planner.get("name", "") if isinstance(other.planner, dict) else ""
        fit(other, f"candidate {k + 1}" + (f", {who}'s" if who else ""), 0.0, "slower candidate")
    if replans is None:
        replans = (Replan("belady", lambda budget: replan_schedule(graph, plan, budget, recompute=recompute)),)
    steps = SHRINK_STEPS if rounds is None else SHRINK_STEPS[:max(rounds, 1)]
    sweep_end = t0 + 0.6 * (deadline - t0)    # the rest is for the exact search on the fastest near misses
    for rp in replans:
        if time.perf_counter() > sweep_end and tried.fits:
            break

        def attempt(shrink: float) -> bool | None:
            """Whether the re-plan at this shrink lays out (None: the planner cannot fit the budget)."""
            try:
                cand = rp.make(int(usable * (1.0 - shrink)))
            except InfeasibleError:
                return None
            return fit(cand, rp.name, shrink, "re-planned")

        failed, fitted = 0.0, None
        for s in steps:
            ok = attempt(s)
            if ok is None:
                break
            if ok:
                fitted = s
                break
            failed = s
        if fitted is None:
            continue
        for _ in range(bisect_steps):        # the largest budget that lays out: it loses the least
            if time.perf_counter() > sweep_end:
                break
            mid = 0.5 * (failed + fitted)
            if fitted - failed < 0.001:
                break
            ok = attempt(mid)
            if ok:
                fitted = mid
            else:
                failed = mid
    # the exact search for the fastest near misses that would beat every fit found
    near = sorted(n for n in tried.near if n[0] < tried.best_s())[:EXACT_TRIES]
    if near:
        deadline += exact.warm_up()
    for k, (ms, _, cand, source, shrink, pb, _) in enumerate(near):
        left = deadline - time.perf_counter()
        if left <= 0.2 or ms >= tried.best_s():
            break
        sol = exact.solve(pb.problem, left / (len(near) - k), first_fit=True)
        tried.count += 1
        if sol.arena_bytes <= (pb.problem.capacity or 0):
            kind = "slower candidate" if shrink == 0.0 else "re-planned"
            tried.fits.append((ms, len(tried.fits), arena_plan(cand, pb, sol), source, shrink, kind))
    for k, other in enumerate(o for o in others if o.allocation.kind == "size_classes"):   # need no offsets
        tried.fits.append((other.makespan_s, len(tried.fits), other, f"the search's size-class plan {k + 1}", 0.0,
                           "size classes"))
    try:
        classes = replan_schedule(graph, plan, None, size_classes=True, recompute=recompute)
        tried.fits.append((classes.makespan_s, len(tried.fits), classes, "per-size classes", 0.0, "size classes"))
    except InfeasibleError:
        pass
    if not tried.fits:
        raise InfeasibleError("no arena layout of the plan fits the memory, and neither a re-plan with up to "
                              f"{100 * steps[-1]:.0f}% less memory nor per-size classes do; give a little more memory")
    _, _, best, source, shrink, how = min(tried.fits, key=lambda x: x[:2])
    return done(how, source, shrink, best)
