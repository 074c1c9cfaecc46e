"""Give a byte-budget plan exact arena offsets before it is written, falling back where it does not fit.

The search scores plans as if memory never fragments (a byte budget), and its plans fill that budget to the
brim: on the bundled ResNet-18 at 64 MiB the live bytes peak at 99.95% of the memory, while one offset per
tensor (FORMATS' arena; a tensor swapped out and back in keeps its offset) needs 8-11% more than the peak.
So the best plan rarely lays out as found, and giving memory up is steep there (1% less memory costs the
search's genes 3% makespan, 10% less 15%): the fallback must give up as little memory as it can.

`lay_out` tries, cheapest first, and keeps the fastest plan that fits:
1. the plan itself: the heuristics (milliseconds); where they miss by at most 15%, the repair under the
   capacity (`repaired`: evict-and-reinsert, a move budget), then the exact search (first fit, a node budget)
   when they missed by at most 6%;
2. its other candidates (the search's plan before refinement, the population's next best plans);
3. re-plans (`Replan`: the search's genes, the population's, the Belady planner) with a smaller byte
   budget: the first shrink is what the plan's own overflow says (arena / capacity = 1.2: 1/6 less memory),
   the next ones re-estimate from the last re-plan's overflow until one lays out, then regula falsi between
   the last budget that failed and the first that fit (the largest budget that lays out loses the least),
   laid out by the heuristics; the sources take turns, one re-plan each; the exact search then tries the
   fastest near misses (within 6% of fitting), which is what usually wins: a re-plan with 2% less memory that
   the heuristics lay out 0.7% over;
4. size classes (no offsets needed): the search's fastest size-class plans, and per-size classes.
A plan from the headroom search (`hybrid.arena.headroom`: its planner record says how much memory it gave up)
that lays out as found is also re-planned with more of the memory (the first re-plan source, the full memory
first, then regula falsi towards the largest budget that lays out: `_grow_search`; a re-plan the heuristics
miss is repaired too, with a quarter of the plan's moves, when it would be the fastest fit); the fastest that
fits wins.
`Layout` says which fired, how much memory it gave up and what it cost.

The work is counted, not timed (`LayoutBudget`: re-plans per source, exact-search nodes per try, repair moves,
`REPAIR_TOTAL_WORK` for all repairs), so one plan and budget give one layout whatever the load; the time limit
is a safety cap checked between steps, and a repair predicted to end after it is not started (`Layout.capped`
says when either happened). Every plan returned passes `hybrid.validator.validate`.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from hybrid.arena.heuristics import Solution
from hybrid.arena.problem import Problem
from hybrid.errors import HybridError, InfeasibleError
from hybrid.graph import Graph
from hybrid.graph.info import largest_workspace
from hybrid.plan import Plan
from hybrid.swap.augmented import PlannerOptions
from hybrid.units import format_bytes, format_change

NEAR_MISS = 0.06           # heuristic arena at most this far over the capacity: worth the exact search
MAX_SHRINK = 0.5           # re-plans give up at most this share of the memory
RESOLUTION = 0.002         # the shrink search stops when the last failure and the first fit are this close


@dataclass(frozen=True)
class LayoutBudget:
    """The work `lay_out` may do, in counts: the same plan and budget give the same layout on any load (the
    time limit is only a safety cap). A node is one buffer placed by the exact search (exact.decide's unit)."""

    sources: int = 5                 # re-plan sources tried (search genes, population, belady), taking turns
    per_source: int = 8              # re-plans laid out per source: ratio-guided shrink, then bisection
    work: int = 500_000              # buffers laid out by the heuristics in all (`heuristic_passes` per buffer,
                                     # the plan's own included): no new candidate that would go past it
                                     # (NasNet-25's plans: 28k buffers x 2 passes, 5 s a candidate here)
    exact_tries: int = 3             # near misses given to the exact search, fastest first (the plan's own first)
    exact_nodes: int = 50_000        # per exact try (ResNet-18's 490 buffers: 3 s at 60 us a node here)
    exact_max_buffers: int = 2_000   # larger problems: heuristics only (a node costs milliseconds there: 50k
                                     # nodes would take a minute)
    fast_above: int = 10_000         # larger problems: only best fit by size and MegEngine's simulation (all
                                     # five best-fit orders and greedy-by-size take 15 s on NasNet-25's 28k)
    repair_moves: int = 20_000       # evictions `repaired` may spend on the plan itself when the heuristics miss
                                     # (a quarter on each more-memory re-plan; 1-2 ms each on the suite's 4-12k
                                     # buffers; 0: no repair)


DEFAULT_BUDGET = LayoutBudget()
QUICK_BUDGET = LayoutBudget(sources=2, per_source=4, work=120_000, exact_tries=2, exact_nodes=50_000,
                            exact_max_buffers=3_000, fast_above=5_000, repair_moves=5_000)


@dataclass(frozen=True)
class Replan:
    """A way to plan the graph again for a byte budget (bytes -> Plan, InfeasibleError when it cannot);
    `aside`, where given, the same with the largest workspace held aside (`replan_schedule`'s
    workspaces_aside): what `lay_out` tries where some op states a workspace and nothing else lays out."""

    name: str
    make: Callable[[int], Plan]
    aside: Callable[[int], Plan] | None = None


@dataclass(frozen=True)
class Layout:
    """What `lay_out` wrote and why."""

    plan: Plan                 # what to write: an arena plan, or a size-class plan (the last fallback)
    fallback: str              # "" (laid out as found), "slower candidate", "re-planned", "size classes",
    #                            "more memory" (a headroom search's plan re-planned with some of the memory it left),
    #                            or "laid-out candidate" (one given laid out, e.g. a seed, faster than the rest)
    rounds: int                # candidate plans laid out (heuristics or exact search) to get here
    makespan_before_s: float   # the byte-budget plan's makespan, before any fallback
    solve_s: float
    source: str = ""           # which candidate was written (e.g. "search genes", "belady", "population 2")
    memory_given_up: float = 0.0   # share of the usable memory the written re-plan gave up
    overflow: float = 0.0      # the plan's own best layout over the capacity, minus 1 (0 when it fit)
    solver: str = ""           # who laid the written plan out
    trials: tuple[tuple[str, float, float, float], ...] = ()   # (source, memory given up, makespan, arena / cap)
    capped: bool = False       # the time limit (a safety cap) stopped the work budget early, or a repair was
    #                            left out as predicted to pass it: not reproducible
    search_shrink: float = 0.0     # the share of the memory the search itself planned without (its headroom)

    @property
    def gave_up_memory(self) -> bool:
        """The fallback issue 31 counts: a re-plan with less memory than the search planned with. One within
        the headroom (its search's best did not lay out, another plan with as much memory or more did) costs
        no memory the search had counted on."""
        return self.fallback == "re-planned" and self.memory_given_up > self.search_shrink

    @property
    def headroom_note(self) -> str:
        """Where a re-plan stands against the memory the headroom search planned without ('' without one)."""
        if self.fallback != "re-planned" or self.search_shrink <= 0:
            return ""
        return (f"{'beyond' if self.gave_up_memory else 'within'} the {100 * self.search_shrink:.2g}% the search "
                "planned without")

    @property
    def cost(self) -> float:
        """Makespan after over before, minus 1: what exact offsets cost against the fragmentation-free figure."""
        return self.plan.makespan_s / self.makespan_before_s - 1.0

    def describe(self, with_cost: bool = True) -> str:
        """One line on how the plan was laid out; `with_cost` False leaves the makespan's change out (a caller
        that prints both makespans beside it). A change that rounds to none is not said as one."""
        from hybrid.signals import interrupted_by, received

        cap = "" if not self.capped else f"; cut short by {interrupted_by()}" if received() else \
            "; stopped by the time limit"
        if not self.fallback:
            return ("laid out in the arena as planned" + cap) if self.plan.allocation.kind == "arena" else ""
        change = format_change(self.cost)
        cost = "" if not with_cost else f" ({change} makespan)" if change else " (the same makespan)"
        missed = f"the plan missed by {format_change(self.overflow, noise=0)}; " if self.overflow > 0 else ""
        if self.fallback == "more memory":
            shrink = f"{100 * self.search_shrink:.2g}% less" if self.search_shrink > 0 else "less"
            return (f"laid out in the arena: {missed}re-planned ({self.source}) with {self.memory_words()} (the "
                    f"headroom search planned with {shrink}){cost}{cap}")
        if self.fallback == "laid-out candidate":
            return (f"laid out in the arena: {missed}{self.source} plan, laid out within the memory, was the "
                    f"fastest{cost}{cap}")
        within = f", {self.headroom_note}" if self.headroom_note else ""
        how = {"re-planned": f"re-planned ({self.source}) with {self.memory_words()}{within}",
               "size classes": "re-planned with per-size classes",
               "slower candidate": f"laid out a slower candidate ({self.source})"}[self.fallback]
        return f"no arena layout within memory (best {format_change(self.overflow, noise=0)} over): {how}{cost}{cap}"

    def memory_words(self) -> str:
        """The memory a re-plan was given: 'the whole usable memory', not '0% less memory'."""
        if self.memory_given_up <= 0:
            return "the whole usable memory"
        return f"{100 * self.memory_given_up:.2g}% less memory"

    def to_json(self) -> dict:
        return {"fallback": self.fallback, "source": self.source, "rounds": self.rounds,
                "memory_given_up": self.memory_given_up, "search_shrink": self.search_shrink,
                "overflow": self.overflow, "cost": self.cost,
                "makespan_before_s": self.makespan_before_s, "solve_s": self.solve_s, "solver": self.solver,
                "capped": self.capped, "describe": self.describe()}


def replan_schedule(graph: Graph, plan: Plan, memory_bytes: int | None, size_classes: bool = False,
                    order: np.ndarray | None = None, options: PlannerOptions | None = None,
                    info: dict | None = None, recompute: bool = True, workspaces_aside: bool = False) -> Plan:
    """The plan's schedule (or `order`) planned again with a byte budget of `memory_bytes` (or per-size
    classes): by the Belady planner, the faster of swap-only and swap + recompute (swap-only when `recompute`
    is False, as `hybrid optimize --no-recompute` asks), or with `options` (the search's genes); the result
    names the original device. InfeasibleError when it cannot fit.

    `workspaces_aside`: the budget less the largest workspace holds the tensors at every op, and no op adds its
    own: the arena's own terms (rule 5: an arena leaves room beside the largest workspace). A byte budget
    counts an op's workspace only while it runs, so where one workspace is large (a cuDNN backward's scratch
    beside its result, 1.15 GiB of vgg16's 3 GiB on an H200) its plans need that much more once laid out, and a
    smaller budget cannot help: the op itself then no longer fits beside its workspace."""
    from hybrid.graph.order import from_ids
    from hybrid.swap.baselines import RECOMPUTE_RATIO
    from hybrid.swap.planner import SwapPlanner
    from hybrid.swap.pools import byte_pool, per_size_pool
    from hybrid.swap.to_plan import on_device, to_plan

    dev = plan.device if memory_bytes is None else dataclasses.replace(
        plan.device, memory_bytes=memory_bytes + plan.device.reserve_bytes)
    order = from_ids(graph, plan.schedule) if order is None else order
    aside = 0
    if workspaces_aside:
        aside = largest_workspace(graph, default_only=True)   # as the planner below reads the workspaces
        if dev.memory_bytes - aside <= dev.reserve_bytes:
            raise InfeasibleError(f"the largest workspace ({format_bytes(aside)}) leaves the tensors nothing")
        dev = dataclasses.replace(dev, memory_bytes=dev.memory_bytes - aside)
    pool = per_size_pool(graph, order, dev) if size_classes else byte_pool(graph, dev)
    planner = SwapPlanner(graph, dev)
    if aside:
        planner.op_ws = np.zeros_like(planner.op_ws)     # held aside above, for every op at once
    if options is None:
        options = (planner.faster_options(order, pool, PlannerOptions(recompute_ratio=RECOMPUTE_RATIO))
                   if recompute else PlannerOptions(recompute_ratio=0.0))
    aug = planner.plan(order, pool, options)
    name = dict(info if info is not None else plan.planner if isinstance(plan.planner, dict) else {})
    name["fallback"] = ("size classes" if size_classes else f"byte budget {memory_bytes}"
                        + (f", the largest workspace ({aside} bytes) aside" if aside else ""))
    out = on_device(graph, to_plan(aug, name), plan.device)
    if aside:   # the planner saw no workspaces: the peak the file states counts them, as the validator does
        from hybrid.validator import event_figures

        out = dataclasses.replace(out, metrics={**out.metrics, "peak_bytes": event_figures(graph, out)["peak_bytes"]})
    return out


def belady_replan(graph: Graph, plan: Plan, recompute: bool = True) -> Replan:
    """The Belady planner on the plan's schedule (`replan_schedule`), with its workspace-aside twin."""
    return Replan("belady", lambda b: replan_schedule(graph, plan, b, recompute=recompute),
                  lambda b: replan_schedule(graph, plan, b, recompute=recompute, workspaces_aside=True))


def heuristic_passes(n: int, budget: LayoutBudget) -> int:
    """Passes `heuristic_layout` makes over n buffers: greedy by size, five best-fit orders and
    MegEngine's simulation, or above `budget.fast_above` the two cheap ones (the unit of `budget.work`)."""
    return 2 if n > budget.fast_above else 7


# Best fit places each buffer against those placed before it that it overlaps in time: quadratic in the
# buffers on training graphs, where parameters and optimizer state overlap everything. Measured: 2.1 s of CPU
# on 17,866 buffers, 21.8 s on 53,194 (a 10k- and a 30k-op transformer, 2 loaded cores): about 8e-9 s per
# buffer pair and pass. MegEngine's simulation is near-linear (0.7 s on 53,194).
BEST_FIT_S_PER_PAIR = 8e-9
BEST_FIT_S_PER_WORK = 2e-8   # a buffer compared with one placed before it (NasNet-25: 1.8e-8 s measured, idle)


def heuristic_layout(problem: Problem, budget: LayoutBudget = DEFAULT_BUDGET, deadline: float | None = None
                     ) -> Solution:
    """The best heuristic layout; above `budget.fast_above` buffers only the two cheap ones (best fit in
    decreasing size then duration, XLA's first order, and MegEngine's simulation). With `deadline`
    (time.perf_counter), the several best-fit passes run only where their predicted time (BEST_FIT_S_PER_PAIR x
    n^2 a pass) ends before it, else one pass on a work budget that ends by it, so a time limit holds at 10^5
    buffers; MegEngine's simulation always runs. A Ctrl-C is acted on once it returns (`best_heuristic`)."""
    from hybrid.signals import interrupts_after

    with interrupts_after():
        return _heuristic_layout(problem, budget, deadline)


def _heuristic_layout(problem: Problem, budget: LayoutBudget, deadline: float | None) -> Solution:
    from hybrid.arena.heuristics import best_fit_by_size, best_heuristic, megengine

    n = len(problem)
    if n <= budget.fast_above and best_fit_in_time(n, heuristic_passes(n, budget) - 1, deadline):
        return best_heuristic(problem)
    # one best-fit pass on a work budget from the time left (its cost grows with the overlaps, not only n^2:
    # 7 s to 17 s for NasNet-25's 28,379 buffers), MegEngine's simulation always
    work = -1 if deadline is None else int(max(0.0, deadline - time.perf_counter()) / BEST_FIT_S_PER_WORK)
    fit = best_fit_by_size(problem, work) if work != 0 else None
    return min(([fit] if fit is not None else []) + [megengine(problem)], key=lambda s: s.arena_bytes)


# The exact search is compiled once per process (numba cannot cache its recursion): about 6 s on an idle
# machine, 40 s measured with 2 cores shared by 9 jobs. It starts only when this much time is left.
EXACT_COMPILE_S = 15.0


def exact_ready(deadline: float | None) -> bool:
    """Whether the exact search may start before `deadline`: compiled already, or time left to compile it."""
    from hybrid.arena import exact

    return (deadline is None or getattr(exact, "_warmed", False)
            or deadline - time.perf_counter() > EXACT_COMPILE_S)


def best_fit_in_time(n: int, passes: int, deadline: float | None, extra_s: float = 0.0) -> bool:
    """Whether `passes` best-fit passes over n buffers, and `extra_s` more, are predicted to end before `deadline`
    (None: no limit)."""
    return deadline is None or time.perf_counter() + passes * BEST_FIT_S_PER_PAIR * n * n + extra_s <= deadline


def exact_fit(problem: Problem, capacity: int, nodes: int, deadline: float) -> Solution | None:
    """A layout within `capacity` found by the exact search in at most `nodes` nodes (None: not found, or the
    deadline, a safety cap, came first): a work budget, so the same plan lays out the same way under any load."""
    from hybrid.arena import exact

    out = exact.decide(problem, capacity, deadline, node_budget=nodes)
    if out.status != exact.FOUND:
        return None
    offs = out.offsets
    end = int((offs + problem.arrays.size).max()) if len(offs) else 0
    return Solution(offs, end, "exact", 0.0, False, problem.peak_live())


# The repair's search (hybrid.arena.repair.repair_fit). Measured on the search's winners of the SwapAdvisor
# suite at v100-16gb that the heuristics did not lay out (5 generations of 16, seed 1; the live bytes peak at
# 70-85% of the memory, the heuristics' arenas at 100.3-112%): with these, RNN-8-8k fits after 214 moves
# (0.3 s), BRNN-4-8k after 2,581 (3 s), WResNet-152-10 after 7,871 (3 s); with the defaults (300 moves an
# attempt, 8 waiting) none does, nor with a lookahead of 16-64 at 5,000 moves except WResNet's. Inception-v4-4
# (live 89%, heuristics 107.9%) does not fit within 20,000 moves (35 s), nor by the exact search (50k nodes).
REPAIR_LOOKAHEAD = 4
REPAIR_ATTEMPT_MOVES = 5_000
REPAIR_MAX_PENDING = 256
REPAIR_MOVES_PER_BUFFER = 4    # moves beyond this many per buffer do not pay (WResNet's fit took 2.1; a tiny
                               # graph's hopeless repair spent 20,000 moves in 0.1 s of a 0.6 s layout)
REPAIR_WORK = 100_000_000      # moves x buffers (each move scans every buffer for conflicts): NasNet-25's 28k
                               # buffers get 3.5k moves; 20,000 moves took 48 s there and fit nothing
REPAIR_S_PER_WORK = 5e-7       # seconds per move and buffer, the slowest measured (Inception-v4-4: 35 s for
                               # 20,000 moves on 3,566 buffers; BRNN-4-8k 1e-7): a repair predicted to end after
                               # the deadline is not started
REPAIR_MISS = 0.15             # heuristic arenas further over the capacity are not repaired (fits were found
                               # 0.3-12% over; NasNet-25's winner without headroom, 19% over, found none)
REPAIR_TOTAL_WORK = 3 * REPAIR_WORK   # moves x buffers for all of one `lay_out`'s repairs (the suite's layouts
                                      # spent at most 1.2e8: BRNN-4-8k's 4 repairs, WResNet-152-10's 6)


def repaired(problem: Problem, moves: int, deadline: float | None = None) -> tuple[Solution | None, bool, int]:
    """Offsets within the capacity by repairing best fit under that top (hybrid.arena.repair: a buffer that fits
    no gap evicts the cheapest window and the evicted go back), for a plan the heuristics lay out over it:
    fragmentation, not bytes, where the live bytes peak well below the memory. A budget of `moves` evictions,
    at most `REPAIR_MOVES_PER_BUFFER` per buffer and `REPAIR_WORK` / buffers, seeded: the same offsets under any
    load. Also a flag, the repair was predicted to end after `deadline` (not started) or the deadline, a safety
    cap checked between attempts, stopped it (the result then depends on the load); and the moves spent."""
    from hybrid.arena.repair import repair_fit

    cap = int(problem.capacity or 0)
    n = len(problem)
    moves = min(moves, REPAIR_MOVES_PER_BUFFER * n, REPAIR_WORK // max(n, 1))
    if moves <= 0 or (problem.arrays.size > cap).any() or problem.peak_live() > cap:
        return None, False, 0
    if not best_fit_in_time(n, 1, deadline, REPAIR_S_PER_WORK * moves * n):   # its best-fit pass, then the moves
        return None, True, 0
    t0 = time.perf_counter()
    off, spent = repair_fit(problem, cap, moves, lookahead=REPAIR_LOOKAHEAD,
                            attempt_moves=min(moves, REPAIR_ATTEMPT_MOVES), max_pending=REPAIR_MAX_PENDING,
                            deadline=deadline)
    if off is None:
        return None, spent < moves and deadline is not None and time.perf_counter() >= deadline, spent
    arena = int((off + problem.arrays.size).max())
    return Solution(off, arena, "repair", time.perf_counter() - t0, lower_bound=problem.peak_live(),
                    nodes=spent), False, spent


@dataclass
class _Tried:
    """Candidates laid out so far: the fastest that fits, and the near misses worth an exact search."""

    capacity: int
    fits: list[tuple[float, int, Plan, str, float, str]] = field(default_factory=list)
    near: list[tuple[float, int, Plan, str, float, object, float, str]] = field(default_factory=list)
    count: int = 0
    work: int = 0              # buffers laid out by the heuristics so far (and by the repairs' best-fit passes)
    last: int = 0              # ... by the last candidate (the next is assumed to cost as much)
    log: list[tuple[str, float, float, float]] = field(default_factory=list)
    timed: bool = False        # a repair was left out or stopped by the time: the result depends on the load
    repair_work: int = 0       # moves x buffers the repairs spent (at most REPAIR_TOTAL_WORK)

    def best_s(self) -> float:
        return min((f[0] for f in self.fits), default=float("inf"))


def lay_out(graph: Graph, plan: Plan, time_limit_s: float | None = 60.0, others: list[Plan] | tuple[Plan, ...] = (),
            replans: list[Replan] | tuple[Replan, ...] | None = None, budget: LayoutBudget = DEFAULT_BUDGET,
            recompute: bool = True, stop: Callable[[], bool] | None = None, classes: bool = True) -> Layout:
    """`plan` with arena offsets (see the module docstring); plans that are not byte budgets pass through.

    `others`: slower candidates (e.g. the search's own plan before refinement) tried before any re-plan;
    size-class plans among them (the search's best size-class individuals) are kept as they are, and so are
    arena plans (the headroom calibration's seeds that laid out within the memory), whatever the plan's fate.
    `replans`: ways to plan again for a smaller byte budget (default: the Belady planner on the plan's
    schedule), the first `budget.sources` of them tried. Of everything that fits, the fastest is written.
    `budget` counts the work; `time_limit_s` is a safety cap checked between steps (a candidate started is
    laid out by the heuristics whatever the time); None: no cap, the work budget alone decides, so the layout is
    the same on any machine and load (what a benchmark table needs; the time it takes is not bounded); `stop` returning True (Ctrl-C or SIGTERM: the result must be
    written within seconds) acts as that cap, and the exact search, whose first use in a process compiles for
    seconds, is then not started. `classes` False: no per-size-class fallback (the Belady planner's: a baseline
    laid out through its own re-plans must not be replaced by another planner's plan). HybridError if the layout
    chosen fails validation (a bug)."""
    from hybrid.arena import exact
    from hybrid.arena.lifetimes import arena_plan, plan_buffers
    from hybrid.validator import validate

    t0 = time.perf_counter()
    deadline = None if time_limit_s is None else t0 + time_limit_s
    before = plan.makespan_s
    if plan.allocation.kind != "unconstrained":
        return Layout(plan, "", 0, before, 0.0)
    usable = plan.device.usable_bytes
    first = plan_buffers(graph, plan)
    tried = _Tried(int(first.problem.capacity or 0))
    capped = False

    def out_of_time() -> bool:
        nonlocal capped
        capped = (capped or (deadline is not None and time.perf_counter() > deadline)
                  or (stop is not None and stop()))
        return capped

    def spent() -> bool:
        """One more candidate would go past the work budget once something fits (counted: reproducible; until
        then only `per_source` bounds the re-plans), or the safety cap fired (timed: not)."""
        return (bool(tried.fits) and tried.work + tried.last > budget.work) or out_of_time()

    def fit(p: Plan, source: str, shrink: float, kind: str, pb=None, moves: int = 0) -> float:  # noqa: ANN001
        """Lay `p` out by the heuristics, and where they miss and `p` would be the fastest fit, by the repair
        (`moves` evictions); record it as a fit or a near miss. Its arena over the capacity."""
        nonlocal capped
        pb = pb or plan_buffers(graph, p)
        n = len(pb.problem)
        capped = capped or not best_fit_in_time(n, 1, deadline)   # best fit left out: timed
        sol = heuristic_layout(pb.problem, budget, deadline)
        tried.count += 1
        tried.last = n * heuristic_passes(n, budget)
        cap = pb.problem.capacity or 0
        moves = min(moves, (REPAIR_TOTAL_WORK - tried.repair_work) // max(n, 1))
        if (cap < sol.arena_bytes <= cap * (1.0 + REPAIR_MISS) and moves > 0 and p.makespan_s < tried.best_s()
                and not out_of_time()):
            fixed, timed, spent_moves = repaired(pb.problem, moves, deadline)
            tried.timed = tried.timed or timed
            tried.repair_work += spent_moves * n
            tried.last += n                        # its best-fit pass (the moves are bounded on their own)
            sol = fixed or sol
        tried.work += tried.last
        ratio = sol.arena_bytes / max(cap, 1)
        tried.log.append((source, shrink, p.makespan_s, ratio))
        if sol.arena_bytes <= cap:
            tried.fits.append((p.makespan_s, len(tried.fits), arena_plan(p, pb, sol), source, shrink, kind))
        elif ratio - 1.0 <= NEAR_MISS:
            tried.near.append((p.makespan_s, len(tried.near), p, source, shrink, pb, ratio - 1.0, kind))
        return ratio

    def try_exact(pb, ms: float, cand: Plan, source: str, shrink: float, kind: str) -> bool:  # noqa: ANN001
        if len(pb.problem) > budget.exact_max_buffers or out_of_time():
            return False
        exact.warm_up()
        sol = exact_fit(pb.problem, int(pb.problem.capacity or 0), budget.exact_nodes,
                        math.inf if deadline is None else deadline)
        tried.count += 1
        if sol is None:
            out_of_time()        # a search the deadline stopped is not reproducible: say so
            return False
        tried.fits.append((ms, len(tried.fits), arena_plan(cand, pb, sol), source, shrink, kind))
        return True

    ratio0 = fit(plan, "the plan", 0.0, "", first, budget.repair_moves)
    overflow = max(ratio0 - 1.0, 0.0)
    head = float(plan.planner.get("headroom", {}).get("shrink", 0.0)) if isinstance(plan.planner, dict) else 0.0

    def grow(steps: int) -> None:
        """A plan planned with memory given up (hybrid.arena.headroom): the memory it left unused may buy a
        faster plan; the re-plan sources take turns, `steps` re-plans each."""
        def fit_grown(p: Plan, source: str, shrink: float, kind: str) -> float:
            return fit(p, source, shrink, kind, None, budget.repair_moves // 4)

        grows = [_grow_search(rp, usable, head, steps, fit_grown, "more memory")
                 for rp in list(replans or ())[:budget.sources]]
        _in_turns(grows, spent)

    if tried.fits and head > 0.0:
        grow(budget.per_source)
    if not tried.fits and tried.near and budget.exact_tries > 0:
        try_exact(first, plan.makespan_s, plan, "the plan", 0.0, "")
        tried.near.clear()
    if not tried.fits:
        for k, other in enumerate(o for o in others if o.allocation.kind == "unconstrained"):
            if spent():
                break
            who = other.planner.get("name", "") if isinstance(other.planner, dict) else ""
            fit(other, f"candidate {k + 1}" + (f", {who}'s" if who else ""), 0.0, "slower candidate")
        if replans is None:
            replans = (belady_replan(graph, plan, recompute),)
        # the sources take turns, one re-plan each, so a small budget still tries each of them
        searches = [_shrink_search(rp, usable, ratio0, budget.per_source, fit) for rp in list(replans)[:budget.sources]]
        _in_turns(searches, spent)
        if head > 0.0:
            grow(1)      # the full memory, which the shrink searches above do not try
        # the exact search for the fastest near misses that would beat every fit found
        near = sorted(n for n in tried.near if n[0] < tried.best_s())[:budget.exact_tries]
        for ms, _, cand, source, shrink, pb, _, kind in near:
            if ms >= tried.best_s():
                break
            try_exact(pb, ms, cand, source, shrink, kind or ("slower candidate" if shrink == 0.0 else "re-planned"))
        if not tried.fits and int(graph.arrays.op_ws.max(initial=0)) > 0:
            # nothing laid out, and an arena leaves room beside the largest workspace, which a byte budget counts
            # only while its op runs: the re-plan sources again with that workspace held aside throughout
            # (`replan_schedule`'s workspaces_aside), the whole usable memory first, then less. Where one workspace
            # is large, less memory alone cannot help: the op no longer fits beside it (vgg16 on the H200's op
            # times: 1,178 MiB beside one backward convolution). Only here, where nothing else fits, so that plans
            # that lay out as before stay as they were (a search of the whole iteration that way, which wins more
            # often than these re-plans: `hybrid optimize --workspaces-aside`)
            # every source that has its twin (Belady, last among them, is often the one that fits: vgg16)
            asides = [_aside_search(Replan(f"{rp.name}, the largest workspace aside", rp.aside), usable,
                                    budget.per_source, fit)
                      for rp in replans if rp.aside is not None]
            _in_turns(asides, spent)
        for k, other in enumerate(o for o in others if o.allocation.kind == "size_classes"):   # need no offsets
            tried.fits.append((other.makespan_s, len(tried.fits), other, f"the search's size-class plan {k + 1}",
                               0.0, "size classes"))
        if classes:
            try:
                by_size = replan_schedule(graph, plan, None, size_classes=True, recompute=recompute)
                tried.fits.append((by_size.makespan_s, len(tried.fits), by_size, "per-size classes", 0.0,
                                   "size classes"))
            except InfeasibleError:
                pass
    for k, other in enumerate(o for o in others if o.allocation.kind == "arena"):   # laid out already: kept as is
        who = other.planner.get("name", "") if isinstance(other.planner, dict) else ""
        tried.fits.append((other.makespan_s, len(tried.fits), other, f"laid-out candidate {k + 1}"
                           + (f", {who}'s" if who else ""), 0.0, "laid-out candidate"))
    if not tried.fits and capped:   # the time (or a stop) cut the re-plans short: say that, not "more memory"
        replanned = sum(1 for entry in tried.log if entry[1] > 0.0)
        why = ("a stop (Ctrl-C or SIGTERM) came" if stop is not None and stop() else "the time limit ran out")
        raise InfeasibleError("no arena layout of the plan fits the memory" + (", nor do per-size classes" if classes
                                                                               else "")
                              + f", and {why} " + (f"after {replanned} re-plan{'s' if replanned != 1 else ''}"
                                                   if replanned else "before any re-plan")
                              + f" with less memory (up to {100 * MAX_SHRINK:.0f}% less may be tried); give more "
                                "time (--time-limit)")
    if not tried.fits:
        raise InfeasibleError("no arena layout of the plan fits the memory, and neither a re-plan with up to "
                              f"{100 * MAX_SHRINK:.0f}% less memory" + (" nor per-size classes do" if classes else
                                                                        " does") + "; give a little more memory")
    _, _, best, source, shrink, how = min(tried.fits, key=lambda x: x[:2])
    report = validate(graph, best)
    if not report.valid:       # a bug in the lifetimes or a solver: never hand back a broken layout
        raise HybridError(f"the layout of {source} failed validation ({report.violations[0]}); please report "
                          "this with the graph file")
    solver = str(best.planner.get("arena", {}).get("solver", "")) if isinstance(best.planner, dict) else ""
    if source == "the plan":
        how, overflow = "", 0.0
    return Layout(best, how, tried.count, before, time.perf_counter() - t0, source, shrink, overflow, solver,
                  tuple(tried.log), capped or tried.timed, head)


def _shrink_search(rp: Replan, usable: int, ratio0: float, steps: int, fit) -> Iterator[None]:  # noqa: ANN001
    """Re-plan with less memory until one lays out, then bisect towards the largest budget that does; yields
    after each re-plan (the caller interleaves sources and checks its budget), returns when done.

    The first shrink is the plan's own overflow (arena / capacity = r: 1 - 1/r less memory); after a re-plan
    at shrink s that lays out r over, the next is 1 - (1 - s) / r (its fragmentation, assumed to scale with the
    budget), a little more so as not to creep up on it; once one fits, regula falsi between the last failure
    and the first fit (where their ratios' line crosses 1, safeguarded). At most `steps` re-plans."""
    failed, fitted, ceiling = 0.0, None, MAX_SHRINK + RESOLUTION   # ceiling: the least shrink the planner refused
    r_failed, r_fitted = max(ratio0, 1.0), 1.0
    s = min(MAX_SHRINK, max(RESOLUTION, 1.0 - 1.0 / max(ratio0, 1.0)))
    for _ in range(steps):
        r = _replan_fit(rp, usable, s, fit, "re-planned")
        yield None
        if r is None:
            ceiling = s                  # the planner cannot run with this little memory
        elif r <= 1.0:
            fitted, r_fitted = s, r
        else:
            failed, r_failed = s, r
        if fitted is None:
            if r is not None:            # a miss: shrink by what its overflow says, a little more
                s = max(s + RESOLUTION, 1.0 - (1.0 - s) / (r * (1.0 + 0.25 * (r - 1.0))))
            if s >= ceiling or r is None:
                s = 0.5 * (failed + ceiling)     # below what the planner refused
            s = min(s, MAX_SHRINK)
            if ceiling - failed < RESOLUTION or s <= failed:
                return
        else:
            if fitted - failed < RESOLUTION:
                return
            s = _falsi(failed, fitted, r_failed, r_fitted)


def _in_turns(searches: list[Iterator[None]], spent: Callable[[], bool]) -> None:
    """Advance the searches one re-plan each in turn, until every one has ended or `spent()`."""
    while searches and not spent():
        searches = [sr for sr in searches if not spent() and next(sr, True) is None]


def _aside_search(rp: Replan, usable: int, steps: int, fit) -> Iterator[None]:  # noqa: ANN001
    """`rp` (a source with the largest workspace held aside) at the whole usable memory, then, where that lays
    out over the capacity, with less (`_shrink_search`): at most `steps` re-plans."""
    r = _replan_fit(rp, usable, 0.0, fit, "re-planned")
    yield None
    if r is not None and r > 1.0 and steps > 1:
        yield from _shrink_search(rp, usable, r, steps - 1, fit)


def _grow_search(rp: Replan, usable: int, fitted: float, steps: int, fit, kind: str  # noqa: ANN001
                 ) -> Iterator[None]:
    """Re-plan a plan that laid out at shrink `fitted` with more memory: the full memory first, then regula
    falsi between the largest shrink that failed and the smallest that fit (at most `steps` re-plans)."""
    failed, r_failed, r_fitted, s = None, 1.0, 1.0, 0.0
    for _ in range(steps):
        r = _replan_fit(rp, usable, s, fit, kind)
        yield None
        if r is not None and r <= 1.0:
            fitted, r_fitted = s, r
        else:
            failed, r_failed = s, (r if r is not None else r_failed)
        if failed is None or fitted - failed < RESOLUTION:
            return
        s = _falsi(failed, fitted, r_failed, r_fitted)


def _replan_fit(rp: Replan, usable: int, shrink: float, fit, kind: str) -> float | None:  # noqa: ANN001
    """`rp` re-planned with `shrink` of the usable memory given up, laid out by `fit`: its arena over the
    capacity, or None where the planner cannot run with that little."""
    try:
        cand = rp.make(int(usable * (1.0 - shrink)))
    except InfeasibleError:
        return None
    return fit(cand, rp.name, shrink, kind)


def _falsi(failed: float, fitted: float, r_failed: float, r_fitted: float) -> float:
    """The shrink where the line through (failed, its ratio) and (fitted, its ratio) crosses 1, kept inside
    the middle 80% of the bracket (the ratios are heuristic layouts: noisy)."""
    cross = (r_failed - 1.0) / max(r_failed - r_fitted, 1e-12)
    return failed + (fitted - failed) * min(0.9, max(0.1, cross))


def fit_offsets(graph: Graph, plan: Plan, time_limit_s: float = 30.0, budget: LayoutBudget = DEFAULT_BUDGET
                ) -> Plan | None:
    """`plan` with arena offsets within its memory, or None where none is found: the best heuristic layout,
    then the exact search (`budget.exact_nodes`) when that misses by at most `NEAR_MISS`. One plan, as it is:
    no fallback and no re-plan, for planners whose plan must stay their own (recompute, the MILP, placement,
    refinement's re-laid-out plans); `lay_out` adds the fallbacks. `time_limit_s` is a safety cap. The plan
    returned passes `hybrid.validator.validate` (HybridError otherwise: a bug)."""
    return _fit(graph, plan, time_limit_s, budget)[0]


def _fit(graph: Graph, plan: Plan, time_limit_s: float, budget: LayoutBudget) -> tuple[Plan | None, float]:
    """(`fit_offsets`'s answer, the best heuristic arena over the capacity: above 1 where none fit)."""
    from hybrid.arena.lifetimes import arena_plan, plan_buffers
    from hybrid.validator import validate

    deadline = time.perf_counter() + time_limit_s
    pb = plan_buffers(graph, plan)
    cap = int(pb.problem.capacity or 0)
    sol = heuristic_layout(pb.problem, budget, deadline)
    ratio = sol.arena_bytes / max(cap, 1)
    if sol.arena_bytes > cap:
        if (sol.arena_bytes > cap * (1.0 + NEAR_MISS) or budget.exact_tries <= 0
                or len(pb.problem) > budget.exact_max_buffers or not exact_ready(deadline)):
            return None, ratio
        from hybrid.arena import exact

        exact.warm_up()
        sol = exact_fit(pb.problem, cap, budget.exact_nodes, deadline)
        if sol is None:
            return None, ratio
    out = arena_plan(plan, pb, sol)
    report = validate(graph, out)
    if not report.valid:
        raise HybridError(f"the arena layout of the plan failed validation ({report.violations[0]}); please "
                          "report this with the graph file")
    return out, ratio


@dataclass(frozen=True)
class Tightened:
    """What the exact post-pass did to a laid-out plan."""

    plan: Plan                 # the tighter layout, or the input unchanged
    freed_bytes: int           # arena bytes given back (0: the input was kept)
    proven_optimal: bool       # the exact search proved the arena it returned the smallest

    def describe(self) -> str:
        if not self.freed_bytes:
            return "exact arena post-pass: the layout was already as tight as it found"
        from hybrid.units import format_bytes

        return f"exact arena post-pass: {format_bytes(self.freed_bytes)} freed"


def tighten(graph: Graph, plan: Plan, time_limit_s: float = 10.0, node_budget: int | None = None) -> Tightened:
    """The exact arena search as a post-pass on a laid-out plan: the same events, offsets with a smaller
    `arena_bytes` where it finds them, else the input (never worse). Plans without offsets pass through.
    Turning the freed bytes into fewer copies needs the planner to plan with them (not done here)."""
    from hybrid.arena import exact
    from hybrid.arena.lifetimes import arena_plan, plan_buffers
    from hybrid.plan import ArenaAllocation
    from hybrid.validator import validate

    alloc = plan.allocation
    if not isinstance(alloc, ArenaAllocation):
        return Tightened(plan, 0, False)
    pb = plan_buffers(graph, plan)
    if not len(pb.problem):
        return Tightened(plan, 0, False)
    sol = exact.solve(pb.problem, time_limit_s, capacity=min(int(alloc.arena_bytes), int(pb.problem.capacity or 0)),
                      node_budget=node_budget)
    if sol.arena_bytes >= alloc.arena_bytes:
        return Tightened(plan, 0, bool(sol.proven_optimal and sol.arena_bytes == alloc.arena_bytes))
    out = arena_plan(plan, pb, sol)
    if not validate(graph, out).valid:      # never hand back a broken layout: keep the input
        return Tightened(plan, 0, False)
    return Tightened(out, int(alloc.arena_bytes - sol.arena_bytes), bool(sol.proven_optimal))


def laid_out(graph: Graph, plan: Plan, time_limit_s: float = 30.0, budget: LayoutBudget = QUICK_BUDGET) -> Plan:
    """The one way a planner's own plan gets offsets (the MILP's, placement's): an arena plan as it is, else
    `fit_offsets`; where no layout fits, the plan as it is (a byte budget: the executor then places it online),
    with `planner["arena"]["laid_out"] = False` saying so. Same times, same events: only the allocation
    changes, so comparisons of makespans hold either way."""
    if plan.allocation.kind == "arena":
        return plan
    out, ratio = _fit(graph, plan, time_limit_s, budget)
    if out is not None:
        return out
    info = dict(plan.planner) if isinstance(plan.planner, dict) else {}
    info["arena"] = {"laid_out": False, "overflow": ratio - 1.0,
                     "why": f"no arena layout of its device copies fits the memory (best "
                            f"{format_change(ratio - 1.0, noise=0) or '+0%'})"}
    return dataclasses.replace(plan, planner=info)
