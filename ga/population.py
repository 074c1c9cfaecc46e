"""The first generation: a few seeded individuals, the rest random.

Seeded, so the search starts no worse than the usual baselines — the
framework's order (`program_order`) with every allowed eviction policy, and a
depth-first order with the first one, each with:
- the plain byte budget, when byte pools are allowed: with the Belady, LRU
  and pinned policies these are the belady baseline exactly and at least as
  fast as the odswap and vdnn baselines (which keep a later pass, not the
  fastest one);
- one class per size (when its floor fits; `per_size_pool`'s idea), and the
  lowest-floor CLS (when it differs), each with counts from the order's
  unswapped peak per class, the part above each class's minimum scaled down
  to fit the budget.
Random ones: a random topological order (a uniformly random ready op at each
step) with a random monotone CLS whose counts start from that order's
unswapped peak, scaled by log-normal noise, then repaired, and random planner
settings (policy, recency, lookahead); when both pool kinds are searched, half of them use the byte budget.

Searching only the schedule (`--search schedule`) fixes every pool to the
best seeded pool on the program order; searching only the allocation fixes
every schedule to the program order.
"""
from __future__ import annotations

from typing import Literal

import numpy as np

from ga.encoding import (LOOKAHEAD, RECENCY, Individual, PlannerGene, SearchSpace, canonical_free,
                         recompute_settings)
from ga.mutation import random_schedule
from ga.repair import fit_counts, floor_bytes, min_floor_cls, repair
from hybrid.graph.liveness import unswapped_lifetimes
from hybrid.graph.order import depth_first_order, program_order

SearchMode = Literal["both", "schedule", "allocation"]
PoolMode = Literal["both", "classes", "bytes"]


def class_peak_counts(space: SearchSpace, order: np.ndarray, cls: np.ndarray) -> np.ndarray:
    """Per class, the most tensors of it alive at once when `order` runs without swapping."""
    n = space.graph.arrays.n_ops
    first, last = unswapped_lifetimes(space.graph, order)
    tcls = cls[space.size_idx]
    n_classes = int(cls.max()) + 1
    delta = np.zeros((n_classes, n + 1), dtype=np.int64)
    np.add.at(delta, (tcls, first), 1)
    np.add.at(delta, (tcls, last + 1), -1)
    return np.cumsum(delta, axis=1)[:, :n].max(axis=1)


def peak_allocation(space: SearchSpace, order: np.ndarray, cls: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Counts for `cls` from the unswapped peak: the part above each minimum scaled so the pool fits."""
    need = space.class_need(cls)
    nbytes = space.class_bytes(cls)
    peak = np.maximum(class_peak_counts(space, order, cls), need)
    extra = int(((peak - need) * nbytes).sum())
    room = space.budget - int((need * nbytes).sum())
    cnt = peak if extra <= room else need + np.floor((peak - need) * (room / max(extra, 1))).astype(np.int64)
    cnt, _ = fit_counts(space, cls, cnt)
    return cls, cnt


def seeded(space: SearchSpace, pool: PoolMode = "both", policies: tuple[int, ...] = (0,),
           order: np.ndarray | None = None) -> list[Individual]:
    """The seeds, with the base planner options' recency and lookahead (so they reproduce the baselines).
    `order`: seed this one schedule instead of the program and depth-first orders (`GAConfig.start = "random"`,
    a random topological order as MXNet's default, the paper's Figure 10)."""
    per_size = np.arange(space.n_sizes, dtype=np.int64)
    lowest, _ = min_floor_cls(space)
    class_choices = [c for c in (per_size, lowest) if floor_bytes(space, c) <= space.budget]
    if len(class_choices) == 2 and np.array_equal(*class_choices):
        class_choices = class_choices[:1]
    out: list[Individual] = []
    prog = program_order(space.graph)
    dfs = depth_first_order(space.graph)
    orders = [order] if order is not None else [prog] if np.array_equal(prog, dfs) else [prog, dfs]
    allocs0: list = []
    for k, order in enumerate(orders):
        allocs = [peak_allocation(space, order, c) for c in class_choices]
        allocs0 = allocs0 if k else allocs
        # With recompute allowed, each seed also comes swap-only, so the search starts from the swap-only plans.
        for policy in policies if k == 0 else policies[:1]:
            for rc in (None, 0) if space.options.recomputes else (None,):
                gene = PlannerGene.of(space.options, policy, rc).pack()
                if pool != "classes":
                    dormant = allocs[0] if allocs else (lowest, space.class_need(lowest))
                    out.append(Individual(order, *dormant, by_bytes=True, planner=gene))
                if pool != "bytes":
                    out.extend(Individual(order, cls, cnt, planner=gene) for cls, cnt in allocs)
    if space.options.recomputes and space.options.long_chains and pool != "classes":
        # The first order with every other recompute setting, on the byte budget: how long a chain pays off
        # depends on the graph (NasNet: 6 producers; a transformer block: 14 and up), and a walk costs
        # milliseconds, so the search starts from the best of them rather than waiting for mutation to reach it.
        have = {PlannerGene.unpack(ind.planner).recompute for ind in out}
        dormant = allocs0[0] if allocs0 else (lowest, space.class_need(lowest))
        out.extend(Individual(orders[0], *dormant, by_bytes=True, planner=PlannerGene.of(space.options, policies[0],
                                                                                          rc).pack())
                   for rc in range(recompute_settings(space.options)) if rc not in have)
    return out


def random_allocation(space: SearchSpace, order: np.ndarray, rng: np.random.Generator,
                      noise: float = 0.5, free: bool = False) -> tuple[np.ndarray, np.ndarray]:
    if free:  # unrestricted: a random number of classes, each size in any of them
        k = int(rng.integers(1, space.n_sizes + 1))
        cls = canonical_free(rng.integers(0, k, size=space.n_sizes))
    else:
        boundary_rate = rng.random()
        steps = (rng.random(space.n_sizes - 1) < boundary_rate).astype(np.int64)
        cls = np.concatenate([[0], np.cumsum(steps)]).astype(np.int64)
    cnt = class_peak_counts(space, order, cls)
    cnt = np.rint(cnt * rng.lognormal(0.0, noise, size=len(cnt))).astype(np.int64)
    nbytes = space.class_bytes(cls)
    total = float((nbytes * cnt).sum())
    if total > space.budget:  # scale to fit first, so repair's equal-bytes cut only trims
        cnt = np.floor(cnt * (space.budget / total)).astype(np.int64)
    cls, cnt, _ = repair(space, cls, cnt, free)
    return cls, cnt


def random_individuals(space: SearchSpace, n: int, mode: SearchMode, pool: PoolMode, policies: tuple[int, ...],
                       rng: np.random.Generator, fixed: Individual, knobs: bool = True,
                       free: bool = False) -> list[Individual]:
    """`n` random individuals; `fixed` supplies what the search mode keeps fixed; `free`: unrestricted CLS."""
    out = []
    for _ in range(n):
        sched = fixed.schedule if mode == "allocation" else random_schedule(space, rng)
        if mode == "schedule":
            out.append(Individual(sched, fixed.cls, fixed.cnt, fixed.by_bytes, fixed.planner))
            continue
        cls, cnt = random_allocation(space, sched, rng, free=free)
        by_bytes = pool == "bytes" or (pool == "both" and bool(rng.random() < 0.5))
        gene = PlannerGene.of(space.options, policies[int(rng.integers(len(policies)))])
        if knobs:
            gene = PlannerGene(gene.policy, int(rng.integers(len(RECENCY))), int(rng.integers(len(LOOKAHEAD))),
                               int(rng.integers(2)),
                               int(rng.integers(recompute_settings(space.options))) if space.options.recomputes
                               else gene.recompute)
        out.append(Individual(sched, cls, cnt, by_bytes, gene.pack()))
    return out
