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
"""
from __future__ import annotations

import numpy as np

from hybrid.placement import chain as chain_mod
from hybrid.placement.chain import CPU, GPU, ChainCosts, Link
from hybrid.placement.cpsat import Hint, solve_latency, solve_period
from hybrid.placement.heft import TaskGraph, heft as heft_schedule
from hybrid.placement.partition import HOST, PartGraph
from hybrid.placement.timing import D2H_LANE, H2D_LANE, Placement, evaluate, period, simulate_placement

LATENCY, THROUGHPUT = "latency", "throughput"
SCHEDULERS = ("all-cpu", "all-gpu", "greedy", "heft", "exact")
THROUGHPUT_SCHEDULERS = ("greedy", "exact")   # the schedulers that place for --objective throughput


def _score(p: Placement, objective: str) -> float:
    return p.latency_s if objective == LATENCY else p.period_s


def all_on(pg: PartGraph, link: Link, dev: str) -> Placement:
    return evaluate(pg, (dev,) * pg.n, link, f"all-{dev}")


def greedy(pg: PartGraph, link: Link, objective: str = LATENCY, rounds: int = 3) -> Placement:
    devs = [GPU if not np.isfinite(pg.cpu_s[p]) or pg.gpu_s[p] < pg.cpu_s[p] else CPU for p in range(pg.n)]
    best = evaluate(pg, devs, link, "greedy")
    idle = 0
    while idle < rounds:
        gained = False
        for p in range(pg.n):
            if not np.isfinite(pg.cpu_s[p]):
                continue
            devs[p] = GPU if devs[p] == CPU else CPU
            cand = evaluate(pg, devs, link, "greedy")
            if _score(cand, objective) < _score(best, objective) - 1e-15:
                best, gained = cand, True
            else:
                devs[p] = GPU if devs[p] == CPU else CPU
        idle = 0 if gained else idle + 1
    return best


def heft(pg: PartGraph, link: Link) -> Placement:
    """Tasks: 0 the host input, 1..n the parts, n+1 the host output; processor 0 the CPU, 1 the GPU."""
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
    return evaluate(pg, devices, link, "heft", priority=tuple(float(x) for x in s.start[1:n + 1]))


def chain_costs(pg: PartGraph) -> ChainCosts:
    """The part graph as `chain.ChainCosts` (only for `pg.is_chain`)."""
    cut = {e.src: e.bytes for e in pg.edges if e.src != HOST and e.dst}
    out = sum(e.bytes for e in pg.edges if e.out)
    inp = sum(e.bytes for e in pg.edges if e.src == HOST)
    return ChainCosts(tuple(float(x) for x in pg.cpu_s), tuple(float(x) for x in pg.gpu_s),
                      tuple(cut[p] for p in range(pg.n - 1)) + (out,), inp)


def exact(pg: PartGraph, link: Link, objective: str = LATENCY, time_limit_s: float = 60.0,
          hint: Placement | None = None, workers: int = 1, seed: int = 0, deadline: float | None = None) -> Placement:
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


def _hint(pg: PartGraph, link: Link, p: Placement) -> Hint:
    """A placement's simulated timeline as a CP-SAT hint."""
    tm = simulate_placement(pg, p.devices, link, p.priority, ns_grid=True, copy_priority=p.copy_priority)
    op_start = {int(r): float(s) for k, r, s in zip(tm.kind, tm.ref, tm.start) if k not in (H2D_LANE, D2H_LANE)}
    copies = {(int(r), "h2d" if k == H2D_LANE else "d2h"): float(s)
              for k, r, s in zip(tm.kind, tm.ref, tm.start) if k in (H2D_LANE, D2H_LANE)}
    return Hint(p.devices, tuple(min(op_start[o] for o in ops) for ops in pg.ops), copies, tm.makespan)


def place(pg: PartGraph, link: Link, scheduler: str, objective: str = LATENCY, time_limit_s: float = 60.0,
          seed: int = 0, deadline: float | None = None) -> Placement:
    """One scheduler by name (SCHEDULERS); `deadline` (time.monotonic()) caps CP-SAT's wall clock. `objective` is
    read by greedy and exact (THROUGHPUT_SCHEDULERS); heft places for latency whatever it is (`hybrid place`
    refuses --scheduler heft with --objective throughput), and all-cpu and all-gpu have one placement each."""
    if scheduler == "all-cpu":
        return all_on(pg, link, CPU)
    if scheduler == "all-gpu":
        return all_on(pg, link, GPU)
    if scheduler == "greedy":
        return greedy(pg, link, objective)
    if scheduler == "heft":
        return heft(pg, link)
    if scheduler == "exact":
        return exact(pg, link, objective, time_limit_s, hint=greedy(pg, link, objective), seed=seed,
                     deadline=deadline)
    raise ValueError(f"unknown scheduler {scheduler!r}; use one of {', '.join(SCHEDULERS)}")


__all__ = ["LATENCY", "THROUGHPUT", "SCHEDULERS", "THROUGHPUT_SCHEDULERS", "all_on", "greedy", "heft", "exact",
           "place", "period", "chain_costs"]
