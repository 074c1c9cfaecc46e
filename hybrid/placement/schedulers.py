"""Schedulers: a device for every part of a part graph, each returning one `Placement`.

- `all_on`: every part on the CPU, or every part on the GPU;
- `greedy`: the paper's rule — each part on the device that runs it faster (on a chain every part is on the
  critical path) — then its correction loop: flip single parts in order, keep each flip that lowers the
  objective, stop after `rounds` passes in a row without a gain (the paper's x is not given; 3 here);
- `heft`: HEFT (upward rank, insertion-based earliest finish) on the part graph with the host input and
  output as zero-time tasks pinned to the CPU; its start times order the parts;
- `exact`: the optimum of the part model — dynamic programming (`chain.exact`) when the parts form a plain
  chain, CP-SAT (`cpsat`) otherwise; for throughput, CP-SAT on the busiest resource.
Every placement is timed by the same simulation (`timing`), so the figures compare like with like.

GPU memory (`memory`): each scheduler takes a `Budget`, and `place` passes one only where memory binds (all-GPU
does not fit the usable memory), so a graph that fits is placed exactly as without it. Under a budget: all-gpu
raises `DoesNotFit`; greedy repairs its start (`memory.repair`: parts to the CPU, least time lost per byte
freed first) and keeps only flips that fit; HEFT schedules as usual, then the same repair; exact solves CP-SAT
(also on chains) with the linear relaxation `memory.Cut`, excluding the solver's placement and lowering the cap
by its overshoot while it does not fit (MEMORY_ROUNDS), and never returns worse than its hint (greedy's). A
placement shaped by memory whose copies then find no arena layout is placed again with less (LAYOUT_TRIES).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.placement import chain as chain_mod
from hybrid.placement.chain import CPU, GPU, ChainCosts, Link
from hybrid.placement.cpsat import Hint, solve_latency, solve_period
from hybrid.placement.heft import TaskGraph, heft as heft_schedule
from hybrid.placement.memory import Budget, DoesNotFit, cut, floor, out_of_time, repair, score
from hybrid.placement.partition import HOST, PartGraph
from hybrid.placement.timing import D2H_LANE, H2D_LANE, Placement, evaluate, period, simulate_placement, to_plan

LATENCY, THROUGHPUT = "latency", "throughput"
SCHEDULERS = ("all-cpu", "all-gpu", "greedy", "heft", "exact")
THROUGHPUT_SCHEDULERS = ("greedy", "exact")   # the schedulers that place for --objective throughput
LAYOUT_TRIES = 2     # re-placements with less memory when a placement that fits has no arena layout
MEMORY_ROUNDS = 8   # CP-SAT solves under memory: each excludes the last placement (it did not fit), lowers the cap


def all_on(pg: PartGraph, link: Link, dev: str, memory: Budget | None = None) -> Placement:
    p = evaluate(pg, (dev,) * pg.n, link, f"all-{dev}")
    if memory is not None and not memory.fits(p):
        raise DoesNotFit(p.gpu_bytes, memory.usable_bytes)
    return p


def greedy(pg: PartGraph, link: Link, objective: str = LATENCY, rounds: int = 3,
           memory: Budget | None = None, deadline: float | None = None) -> Placement:
    """Each part where it runs faster, moved into `memory`, then the correction loop (`_flips`) until `deadline`
    (time.monotonic()) or a Ctrl-C/SIGTERM, which keep the best placement so far."""
    from hybrid.signals import new_call

    new_call()   # a library call's own count of stops: one left from an earlier call must not cut its loop
    devs = [GPU if not np.isfinite(pg.cpu_s[p]) or pg.gpu_s[p] < pg.cpu_s[p] else CPU for p in range(pg.n)]
    best = evaluate(pg, devs, link, "greedy")
    if memory is not None and not memory.fits(best):
        best = repair(pg, best, link, memory, objective, deadline)
    return _flips(pg, best, link, objective, rounds, memory, deadline)


def _flips(pg: PartGraph, best: Placement, link: Link, objective: str, rounds: int,
           memory: Budget | None, deadline: float | None = None) -> Placement:
    """The paper's correction loop from `best`: flip single parts in order, keep each flip that gains (and fits),
    until `rounds` passes in a row gain nothing, or `deadline` or a stop (`out_of_time`): each flip kept fits,
    so the best so far is a placement as good as any."""
    devs = list(best.devices)
    idle = 0
    while idle < rounds:
        gained = False
        for p in range(pg.n):
            if not np.isfinite(pg.cpu_s[p]):
                continue
            if out_of_time(deadline):   # a ResNet-152 at --parts fine: seconds per pass
                return best
            devs[p] = GPU if devs[p] == CPU else CPU
            cand = evaluate(pg, devs, link, best.scheduler, best.priority, status=best.status, extra=best.extra)
            if (memory is None or memory.fits(cand)) and score(cand, objective) < score(best, objective) - 1e-15:
                best, gained = cand, True
            else:
                devs[p] = GPU if devs[p] == CPU else CPU
        idle = 0 if gained else idle + 1
    return best


def heft(pg: PartGraph, link: Link, memory: Budget | None = None, deadline: float | None = None) -> Placement:
    """Tasks: 0 the host input, 1..n the parts, n+1 the host output; processor 0 the CPU, 1 the GPU. Under a
    budget its schedule is repaired afterwards (`memory.repair`), keeping its order of the parts."""
    never = 1e9
    n = pg.n
    cost = np.array([[0.0, never]] + [[pg.cpu_s[p] if np.isfinite(pg.cpu_s[p]) else never, pg.gpu_s[p]]
                                      for p in range(n)] + [[0.0, never]])
    comm: dict[tuple[int, int], float] = {}

    def add(a: int, b: int, nbytes: int) -> None:
        # HEFT has one cost per edge; the presets' links are symmetric, so the h2d time stands for both
        comm[(a, b)] = comm.get((a, b), 0.0) + link.copy_s(nbytes, GPU)

    for e in pg.edges:
        src = 0 if e.src == HOST else e.src + 1
        for q in e.dst:
            add(src, q + 1, e.bytes)
        if e.out:
            add(src, n + 1, e.bytes)
    has_pred = {b for _, b in comm}
    has_succ = {a for a, _ in comm}
    for p in range(1, n + 1):   # every part reachable from the entry task and reaching the exit task
        if p not in has_pred:
            comm[(0, p)] = 0.0
        if p not in has_succ:
            comm[(p, n + 1)] = 0.0
    s = heft_schedule(TaskGraph(cost, comm))
    devices = tuple(GPU if s.proc[p + 1] == 1 else CPU for p in range(n))
    placed = evaluate(pg, devices, link, "heft", priority=tuple(float(x) for x in s.start[1:n + 1]))
    if memory is not None and not memory.fits(placed):
        placed = repair(pg, placed, link, memory, LATENCY, deadline)
    return placed


def chain_costs(pg: PartGraph) -> ChainCosts:
    """The part graph as `chain.ChainCosts` (only for `pg.is_chain`)."""
    cut = {e.src: e.bytes for e in pg.edges if e.src != HOST and e.dst}
    out = sum(e.bytes for e in pg.edges if e.out)
    inp = sum(e.bytes for e in pg.edges if e.src == HOST)
    return ChainCosts(tuple(float(x) for x in pg.cpu_s), tuple(float(x) for x in pg.gpu_s),
                      tuple(cut[p] for p in range(pg.n - 1)) + (out,), inp)


def exact(pg: PartGraph, link: Link, objective: str = LATENCY, time_limit_s: float = 60.0,
          hint: Placement | None = None, workers: int = 1, seed: int = 0, deadline: float | None = None,
          memory: Budget | None = None) -> Placement:
    if memory is not None:
        return _exact_within(pg, link, objective, time_limit_s, hint, workers, seed, deadline, memory)
    if objective == THROUGHPUT:
        sol = solve_period(pg, link, time_limit_s, workers, seed, deadline)
        return evaluate(pg, sol.devices, link, "exact", status=sol.status, model_s=sol.objective_s)
    if pg.is_chain and np.isfinite(pg.cpu_s).all():
        dp = chain_mod.exact(chain_costs(pg), link)
        return evaluate(pg, dp.devices, link, "exact", status="optimal", model_s=dp.latency_s,
                        extra={"method": "dynamic programming"})
    sol = solve_latency(pg, link, time_limit_s, _hint(pg, link, hint) if hint is not None else None, workers,
                        seed, deadline)
    return evaluate(pg, sol.devices, link, "exact", priority=sol.starts, copy_priority=sol.copy_starts,
                    status=sol.status,
                    model_s=sol.objective_s, extra={"method": "cp-sat", "bound_s": sol.bound_s})


def _exact_within(pg: PartGraph, link: Link, objective: str, time_limit_s: float, hint: Placement | None,
                  workers: int, seed: int, deadline: float | None, memory: Budget) -> Placement:
    """CP-SAT with the memory relaxation (`memory.Cut`). A placement that fits in the first round is optimal where
    CP-SAT says so (the relaxation admits every placement that fits); one that does not fit is excluded, the cap
    lowered by its overshoot, and CP-SAT solves again (MEMORY_ROUNDS in all). Where no round fits, the last
    solver placement repaired (`memory.repair`) stands in. The fastest that fits wins, `hint` (greedy's)
    included, so exact is never slower than greedy; unless proven optimal, the correction loop's flips follow."""
    cap = memory.usable_bytes
    exclude: list[tuple[str, ...]] = []
    fitted: Placement | None = None
    last: Placement | None = None
    for k in range(MEMORY_ROUNDS):
        if k and out_of_time(deadline):   # a stop, or the time limit: the repair below stands in
            break
        c = dataclasses.replace(cut(pg, memory, cap), exclude=tuple(exclude))
        extra = {"method": "cp-sat", "memory_rounds": k + 1}
        try:
            if objective == THROUGHPUT:
                sol = solve_period(pg, link, time_limit_s, workers, seed, deadline, cut=c)
                p = evaluate(pg, sol.devices, link, "exact", status=sol.status, model_s=sol.objective_s, extra=extra)
            else:
                sol = solve_latency(pg, link, time_limit_s, _hint(pg, link, hint) if hint is not None else None,
                                    workers, seed, deadline, cut=c)
                p = evaluate(pg, sol.devices, link, "exact", priority=sol.starts, copy_priority=sol.copy_starts,
                             status=sol.status, model_s=sol.objective_s, extra={**extra, "bound_s": sol.bound_s})
        except HybridError:   # infeasible under this cap, or out of time without a placement
            break
        last = p
        if memory.fits(p):
            fitted = p if k == 0 else dataclasses.replace(   # a lowered cap may have excluded a faster fit
                p, status=f"fits after {k + 1} memory rounds, not proven optimal")
            break
        cap -= max(p.gpu_bytes - memory.usable_bytes, memory.alignment_bytes)
        exclude.append(p.devices)
    found = [fitted] if fitted is not None else []
    if fitted is None:
        start = last if last is not None else dataclasses.replace(floor(pg, link), scheduler="exact")
        found.append(dataclasses.replace(repair(pg, start, link, memory, objective, deadline),
                                         status="repaired to fit, not proven optimal",
                                         extra={"method": "cp-sat, repaired to fit"}))
    if hint is not None and memory.fits(hint):
        found.append(dataclasses.replace(hint, scheduler="exact", status=f"{hint.scheduler}'s, not proven optimal",
                                         extra={"method": f"{hint.scheduler} (CP-SAT found none better that fits)"}))
    best = min(found, key=lambda p: score(p, objective))   # ties: the solver's
    return best if best.status == "optimal" else _flips(pg, best, link, objective, 3, memory, deadline)


def _hint(pg: PartGraph, link: Link, p: Placement) -> Hint:
    """A placement's simulated timeline as a CP-SAT hint."""
    tm = simulate_placement(pg, p.devices, link, p.priority, ns_grid=True, copy_priority=p.copy_priority)
    op_start = {int(r): float(s) for k, r, s in zip(tm.kind, tm.ref, tm.start) if k not in (H2D_LANE, D2H_LANE)}
    copies = {(int(r), "h2d" if k == H2D_LANE else "d2h"): float(s)
              for k, r, s in zip(tm.kind, tm.ref, tm.start) if k in (H2D_LANE, D2H_LANE)}
    return Hint(p.devices, tuple(min(op_start[o] for o in ops) for ops in pg.ops), copies, tm.makespan)


def place(pg: PartGraph, link: Link, scheduler: str, objective: str = LATENCY, time_limit_s: float = 60.0,
          seed: int = 0, deadline: float | None = None, device: Device | None = None) -> Placement:
    """One scheduler by name (SCHEDULERS); `deadline` (time.monotonic()) caps CP-SAT's wall clock. `objective` is
    read by greedy and exact (THROUGHPUT_SCHEDULERS); heft places for latency whatever it is (`hybrid place`
    refuses --scheduler heft with --objective throughput), and all-cpu and all-gpu have one placement each.

    Within `device`'s usable memory (default: the graph's device; None there: no limit): where all-GPU fits,
    every scheduler places as if memory were unlimited (and only a placement that then does not fit, which a
    mixed placement's copies could in principle cause, is placed again under the budget); where it does not,
    under the budget, and then its plan's copies must also lay out in the arena. `DoesNotFit` says a scheduler
    found nothing that fits."""
    from hybrid.signals import new_call

    new_call()   # a fresh count of Ctrl-C / SIGTERM, as a command gets (hybrid.signals)
    device = pg.graph.device if device is None else device
    budget = Budget.of(device) if device is not None else None
    binds = budget is not None and not budget.fits(all_on(pg, link, GPU))
    placed = _place(pg, link, scheduler, objective, time_limit_s, seed, deadline, budget if binds else None)
    if budget is not None and not binds and not budget.fits(placed):
        placed = _place(pg, link, scheduler, objective, time_limit_s, seed, deadline, budget)
        binds = True
    if binds:   # said on the placement, so that a caller reads it here rather than deciding it again
        placed = _laid_out(pg, link, scheduler, objective, time_limit_s, seed, deadline, device, placed)
        placed = dataclasses.replace(placed, extra={**placed.extra, "memory_binds": True})
    return placed


def _overflow(pg: PartGraph, p: Placement, device: Device, link: Link) -> float | None:
    """How far the placement's arena layout misses the memory (`timing.to_plan`), None where it lays out."""
    plan = to_plan(pg, p, device, link)
    arena = plan.planner.get("arena") if isinstance(plan.planner, dict) else None
    if isinstance(arena, dict) and arena.get("laid_out") is False:
        return float(arena.get("overflow", 0.0))
    return None


def _laid_out(pg: PartGraph, link: Link, scheduler: str, objective: str, time_limit_s: float, seed: int,
              deadline: float | None, device: Device, placed: Placement) -> Placement:
    """A placement that memory shaped fits at its peak, but its plan's copies also need offsets in one arena
    (fragmentation can need more): where they do not lay out, place again with the overflow taken off the
    budget (LAYOUT_TRIES times), else `DoesNotFit` saying so."""
    full = Budget.of(device)
    budget = full
    for _ in range(LAYOUT_TRIES):
        over = _overflow(pg, placed, device, link)
        if over is None or out_of_time(deadline):
            break
        budget = Budget(budget.usable_bytes - max(int(placed.gpu_bytes * over), full.alignment_bytes),
                        full.alignment_bytes)
        try:
            placed = _place(pg, link, scheduler, objective, time_limit_s, seed, deadline, budget)
        except DoesNotFit as e:
            raise DoesNotFit(e.need, full.usable_bytes, "leaving room for its arena layout") from None
    over = _overflow(pg, placed, device, link)
    if over is None:
        return placed
    raise DoesNotFit(placed.gpu_bytes, full.usable_bytes,
                     f"its copies fit at their peak, but no arena layout of them does (best {100 * over:+.1f}%); "
                     "give the GPU more memory, or try --parts fine")


def _place(pg: PartGraph, link: Link, scheduler: str, objective: str, time_limit_s: float, seed: int,
           deadline: float | None, memory: Budget | None) -> Placement:
    if scheduler == "all-cpu":
        return all_on(pg, link, CPU, memory)
    if scheduler == "all-gpu":
        return all_on(pg, link, GPU, memory)
    if scheduler == "greedy":
        return greedy(pg, link, objective, memory=memory, deadline=deadline)
    if scheduler == "heft":
        return heft(pg, link, memory, deadline)
    if scheduler == "exact":
        hint = greedy(pg, link, objective, memory=memory, deadline=deadline)
        return exact(pg, link, objective, time_limit_s, hint=hint, seed=seed, deadline=deadline, memory=memory)
    raise ValueError(f"unknown scheduler {scheduler!r}; use one of {', '.join(SCHEDULERS)}")


__all__ = ["LATENCY", "THROUGHPUT", "SCHEDULERS", "THROUGHPUT_SCHEDULERS", "all_on", "greedy", "heft", "exact",
           "place", "period", "chain_costs", "Budget", "DoesNotFit"]
