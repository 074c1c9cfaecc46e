"""The generation loop (§5.1): crossover and mutation make children, the planner scores them, softmax selects.

One generation:
1. pick `children / 4` random parent pairs from the population;
2. each pair gives two schedules (prefix crossover) and two allocations (CLS
   one-point crossover, CNT through CNT_EXT; the pool kind and eviction
   policy go with the prefix), combined into four children; each child's
   schedule and allocation are mutated, then repaired;
3. the children are evaluated (the only expensive step, done by an
   `Evaluator`, possibly in parallel);
4. `population` survivors are drawn from parents + children by softmax over
   t_norm, keeping the best.

All randomness comes from one NumPy generator seeded by `GAConfig.seed` and
lives in this process, so a given seed and generation count gives the same
search whatever the evaluator.
"""
from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

import numpy as np

from ga.crossover import cross_allocations, cross_schedules
from ga.encoding import POLICIES, Individual, SearchSpace, recompute_settings
from ga.evaluation import Candidate, Evaluator
from ga.mutation import mutate_cls, mutate_cnt, mutate_planner, mutate_schedule, random_schedule
from ga.population import PoolMode, SearchMode, random_individuals, seeded
from ga.progress import ConvergenceLog, GenerationStats
from ga.repair import repair
from ga.selection import select_survivors
from ga.termination import Termination
from hybrid.errors import HybridError
from hybrid.swap.planner import SwapPlanner


_CACHE_SIZE = 20_000
_RETRIES = 4


def _key(ind: Individual) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for part in (ind.schedule,) if ind.by_bytes else (ind.schedule, ind.cls, ind.cnt):  # a byte pool ignores CLS/CNT
        h.update(np.ascontiguousarray(part).tobytes())
        h.update(b"|")
    h.update(b"B" if ind.by_bytes else b"C")
    h.update(int(ind.planner).to_bytes(2, "little"))
    return h.digest()


def _distinct(cands: list[Individual], n: int) -> list[Individual]:
    """Candidates without repeats, so copies of one individual cannot crowd out diversity; repeats come back
    (best first) only when fewer than `n` distinct ones exist."""
    seen: set[bytes] = set()
    first: list[Individual] = []
    repeats: list[Individual] = []
    for c in cands:
        k = _key(c)
        (repeats if k in seen else first).append(c)
        seen.add(k)
    if len(first) < n:
        first += sorted(repeats, key=lambda c: c.makespan)[:n - len(first)]
    return first


@dataclass(frozen=True)
class GAConfig:
    """Search parameters.

    Where they differ from the paper, measured on this project's 2-core machine (results/ga_ablation.md):
    N_p = 48 rather than 144 (the paper sized 144 to split over 72 cores; with a few cores a smaller
    population gets more generations in the same minutes and did better in 90-second runs on BRNN-4-8K and
    Inception-4); selection temperature 0.05 rather than eq. 1's 1 (a population gathered near the best;
the best itself came out the same within noise, see ga.selection); the schedule
    mutation's P drawn per child, log-uniform between 1/n_ops and P (the paper's 10% moves hundreds of ops
    at once on a 10,000-op graph, while one or two moves refine a good schedule; drawing it covers both).
    """

    population: int = 48                  # N_p, individuals alive after each selection (the paper: 144 on 72 cores)
    children: int = 48                    # new individuals per generation (4 per crossover); S = population + children
    mutation_rate: float = 0.1            # P: per element of CLS and CNT
    schedule_mutation_rate: float = 0.1   # highest P for schedules, per ready-set step (drawn per child)
    count_sigma: float = 0.2              # CNT mutation: Gaussian sigma as a fraction of the count (>= 1 object)
    temperature: float = 0.05             # softmax temperature over t_norm (1 = the paper's eq. 1; see selection.py)
    elite: int = 1                        # best individuals that always survive
    search: SearchMode = "both"           # what the search may change (Figure 10's ablations)
    pool: PoolMode = "both"               # pool kinds: size classes (the paper), the byte budget, or both
    policies: tuple[str, ...] = POLICIES  # eviction policies the search may pick (encoding.POLICIES)
    planner_knobs: bool = True            # also search the planner's recency window and lookahead
    seed: int = 1
    class_mapping: str = "monotone"       # size -> class: the paper's monotone CLS, or "free" (its Figure 9c)
    start: str = "program"                # seeded schedules: the program and depth-first orders, or "random" (one
                                          # random topological order, MXNet's default: the paper's Figure 10)

    def __post_init__(self) -> None:
        for name in ("population", "children", "seed"):   # numpy's own errors came 15 frames deep
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise HybridError(f"--{name} ({name}) must be a whole number, got {v!r}")
        if self.seed < 0:
            raise HybridError(f"--seed (seed) must be 0 or more, got {self.seed}")
        if self.population < 2:
            raise HybridError(f"--population (population) must be at least 2, got {self.population}")
        if self.children < 1:
            raise HybridError(f"--children (children per generation) must be at least 1, got {self.children}")
        for name in ("mutation_rate", "schedule_mutation_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                flag = "--mutation-rate (mutation_rate)" if name == "mutation_rate" else name   # the other: no flag
                raise HybridError(f"{flag} must be within [0, 1], got {getattr(self, name)}")
        if self.temperature <= 0:
            raise HybridError(f"--temperature (temperature, the selection's) must be positive, got {self.temperature}")
        if self.search not in ("both", "schedule", "allocation"):
            raise HybridError(f"--search must be schedule, allocation or both, not {self.search!r}")
        if self.pool not in ("both", "classes", "bytes"):
            raise HybridError(f"--pool must be classes, bytes or both, not {self.pool!r}")
        if self.class_mapping not in ("monotone", "free"):
            raise HybridError(f"--class-mapping must be monotone or free, not {self.class_mapping!r}")
        if self.start not in ("program", "random"):
            raise HybridError(f"--start must be program or random, not {self.start!r}")
        bad = [p for p in self.policies if p not in POLICIES]
        if bad or not self.policies:
            raise HybridError(f"--policy must name some of {', '.join(POLICIES)}, not {', '.join(bad) or 'none'}")
        object.__setattr__(self, "policies", tuple(dict.fromkeys(self.policies)))

    @property
    def policy_ids(self) -> tuple[int, ...]:
        return tuple(POLICIES.index(p) for p in self.policies)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class SearchState:
    """Everything a resumed search needs to continue exactly where it stopped."""

    population: list[Individual]
    best: Individual
    generation: int
    evaluations: int
    elapsed_s: float                      # search time spent before this run (resumes add to it)
    rng: np.random.Generator
    log: ConvergenceLog = field(default_factory=ConvergenceLog)


class GeneticSearch:
    def __init__(self, space: SearchSpace, config: GAConfig, evaluator: Evaluator,
                 state: SearchState | None = None) -> None:
        self.space = space
        self.config = config
        self.evaluator = evaluator
        self.state = state
        self._run_start = time.monotonic()
        self._seen: dict[bytes, float] = {}   # fitness of recent individuals, oldest first
        self.cache_hits = 0
        # evaluations of a generation abandoned by a stop: done, but not in the state a checkpoint stores, since a
        # resume replays that generation (counted twice, a resumed search's total exceeded an uninterrupted one's)
        self.abandoned = 0

    # ---- evaluation ------------------------------------------------------
    def _evaluate(self, inds: list[Individual], stop: Callable[[], bool] | None) -> bool:
        """Fill in makespans; False when stopped before all were done (those stay NaN).

        Fitness is deterministic, so an individual seen before (a child equal to a parent, or two equal
        children of a converged population) takes its makespan from a cache instead of the planner.
        """
        todo: dict[bytes, list[int]] = {}
        for i, ind in enumerate(inds):
            if not np.isnan(ind.makespan):
                continue
            key = _key(ind)
            hit = self._seen.get(key)
            if hit is not None:
                ind.makespan = hit
                self.cache_hits += 1
            else:
                todo.setdefault(key, []).append(i)
        keys = list(todo)
        firsts = [inds[todo[k][0]] for k in keys]
        items: list[Candidate] = [(i.schedule, i.cls, i.cnt, i.by_bytes, i.planner) for i in firsts]
        times = self.evaluator.evaluate(items, stop)
        for k, t in zip(keys, times):
            for i in todo[k]:
                inds[i].makespan = float(t)
            if not np.isnan(t):
                if len(self._seen) >= _CACHE_SIZE:
                    self._seen.pop(next(iter(self._seen)))
                self._seen[k] = float(t)
        if self.state is not None:
            self.state.evaluations += int(np.count_nonzero(~np.isnan(times)))
        return not np.isnan(times).any()

    def _lost(self) -> str | None:
        """Why the evaluator's workers were lost (ga.evaluation), if they were."""
        return getattr(self.evaluator, "lost", None)

    def _elapsed(self) -> float:
        base = self.state.elapsed_s if self.state is not None else 0.0
        return base + time.monotonic() - self._run_start

    # ---- the loop ----------------------------------------------------------
    def initialize(self, stop: Callable[[], bool] | None = None) -> SearchState:
        """Generation 0. Seeded individuals are evaluated first, so even an early stop has a plan."""
        cfg = self.config
        rng = np.random.default_rng(cfg.seed)
        t0 = time.monotonic()
        start = None
        if cfg.start == "random":  # its own generator, so the rest of the search draws as it would
            start = random_schedule(self.space, np.random.default_rng([cfg.seed, 10]))
        seeds = seeded(self.space, cfg.pool, cfg.policy_ids, start)
        self.state = SearchState(seeds, seeds[0], 0, 0, 0.0, rng)
        self._run_start = t0
        # the first seed (the program order on the byte budget, or its first pool) whatever the time, so even an
        # early stop has a plan; the others unless the budget ends first (on 13,000 ops: a second or more each)
        self._evaluate(seeds[:1], None)
        if self._lost() is not None and np.isnan(seeds[0].makespan):
            raise HybridError(f"the search has no plan: {self._lost()}")
        self._evaluate(seeds[1:], stop)
        seeds = [s for s in seeds if not np.isnan(s.makespan)]
        if not any(np.isfinite(s.makespan) for s in seeds):
            # Nothing runs: let the planner say which op does not fit, and why.
            SwapPlanner(self.space.graph, self.space.device).plan(seeds[0].schedule, self.space.pool(seeds[0]),
                                                                   self.space.options_for(seeds[0]))
        prog = [s for s in seeds if np.array_equal(s.schedule, seeds[0].schedule)]
        fixed = min(prog, key=lambda i: i.makespan)  # what --search schedule/allocation keeps fixed
        if cfg.search == "allocation":
            seeds = prog
        elif cfg.search == "schedule":
            others = {s.schedule.tobytes(): s.schedule for s in seeds
                      if not np.array_equal(s.schedule, fixed.schedule)}
            extra = [Individual(o, fixed.cls, fixed.cnt, fixed.by_bytes, fixed.planner) for o in others.values()]
            self._evaluate(extra, None)
            seeds = [fixed] + extra
        seeds = seeds[:cfg.population]
        rest = random_individuals(self.space, cfg.population - len(seeds), cfg.search, cfg.pool, cfg.policy_ids,
                                  rng, fixed, cfg.planner_knobs, cfg.class_mapping == "free")
        self._evaluate(rest, stop)
        pop = seeds + [ind for ind in rest if not np.isnan(ind.makespan)]
        self.state.population = pop
        self.state.best = min(pop, key=lambda i: i.makespan).copy()
        self._log(time.monotonic() - t0, len(pop))
        return self.state

    def rescore(self, stop: Callable[[], bool] | None = None) -> None:
        """Score the population afresh on this search's space: a search carried over to a device with less
        memory (`ga.optimize`'s `start`: hybrid.arena.headroom's recalibration). Size-class genes are repaired
        to fit it (an individual whose pool cannot fit is inf); the best is the best of the rescored."""
        st = self.state
        assert st is not None, "a state to rescore"
        free = self.config.class_mapping == "free"
        inds = []
        for ind in st.population:
            cls, cnt, ok = repair(self.space, ind.cls.copy(), ind.cnt.copy(), free)
            inds.append(Individual(ind.schedule, cls, cnt, ind.by_bytes, ind.planner,
                                   float("inf") if not ok and not ind.by_bytes else float("nan")))
        # the best that can fit whatever the time, as initialize() does its first seed: a stop before any other
        # evaluation still leaves a scored population
        order = sorted(range(len(inds)), key=lambda k: st.population[k].makespan)   # the old best first
        self._evaluate([next((inds[k] for k in order if np.isnan(inds[k].makespan)), inds[order[0]])], None)
        self._evaluate(inds, stop)
        done = [i for i in inds if not np.isnan(i.makespan)]
        st.population = done
        st.best = min(done, key=lambda i: i.makespan).copy()

    def step(self, stop: Callable[[], bool] | None = None) -> bool:
        """One generation; False if it was abandoned (stop() became true during evaluation)."""
        st = self.state
        assert st is not None, "initialize() first"
        t0 = time.monotonic()
        rng_state = st.rng.bit_generator.state
        before = st.evaluations
        self.abandoned = 0
        children = self._children()
        complete = self._evaluate(children, stop)
        done = [c for c in children if not np.isnan(c.makespan)]
        for c in done:
            if c.makespan < st.best.makespan:
                st.best = c.copy()
        if not complete:
            st.rng.bit_generator.state = rng_state  # a resume replays this generation exactly
            self.abandoned = st.evaluations - before
            return False
        cand = _distinct(st.population + done, self.config.population)
        times = np.array([c.makespan for c in cand])
        keep = select_survivors(times, self.config.population, st.best.makespan, st.rng,
                                self.config.temperature, self.config.elite)
        st.population = [cand[i] for i in keep]
        st.generation += 1
        self._log(time.monotonic() - t0, len(children))
        return True

    def run(self, termination: Termination, on_generation: Callable[[GenerationStats], None] | None = None,
            on_checkpoint: Callable[[SearchState], None] | None = None, checkpoint_every: int = 10,
            observe: Callable[[SearchState], None] | None = None) -> str:
        """Generations until the budget ends; returns why it stopped.

        `observe` sees the live state after each generation (read it, do not change it): the CP-SAT
        refiner beside the search takes its best and elites from there.
        """
        self._run_start = time.monotonic()
        if self.state is None:
            self.initialize(termination.expired)
            if on_generation:
                on_generation(self.state.log.rows[-1])
        if observe:
            observe(self.state)
        while True:
            reason = termination.reason(self.state.generation)
            if reason:
                break
            if not self.step(termination.expired):
                lost = self._lost()
                reason = (f"evaluation lost ({lost})" if lost is not None else
                          termination.reason(self.state.generation) or "stopped")
                break
            if on_generation:
                on_generation(self.state.log.rows[-1])
            if observe:
                observe(self.state)
            if on_checkpoint and checkpoint_every > 0 and self.state.generation % checkpoint_every == 0:
                on_checkpoint(self.snapshot())
        return reason

    def snapshot(self) -> SearchState:
        """The state with search time up to now (what a checkpoint stores), without the evaluations of a generation
        abandoned by a stop (`abandoned`: a resume replays it)."""
        return replace(self.state, elapsed_s=self._elapsed(), evaluations=self.state.evaluations - self.abandoned)

    # ---- making children ----------------------------------------------------
    def _children(self) -> list[Individual]:
        cfg = self.config
        sp = self.space
        st = self.state
        rng = st.rng
        pop = st.population
        p = cfg.mutation_rate
        out: list[Individual] = []
        alive = {_key(i) for i in pop}
        while len(out) < cfg.children:
            i, j = rng.choice(len(pop), size=2, replace=False) if len(pop) > 1 else (0, 0)
            a, b = pop[i], pop[j]
            if cfg.search != "allocation" and sp.n_ops > 1:
                scheds = cross_schedules(a.schedule, b.schedule, int(rng.integers(1, sp.n_ops)))
            else:
                scheds = (a.schedule, b.schedule)
            if cfg.search != "schedule" and sp.n_sizes > 1:
                (c1, n1), (c2, n2) = cross_allocations(a.cls, a.cnt, b.cls, b.cnt, int(rng.integers(1, sp.n_sizes)),
                                                         cfg.class_mapping == "free")
                # pool kind and planner settings travel with the prefix
                allocs = ((c1, n1, b.by_bytes, b.planner), (c2, n2, a.by_bytes, a.planner))
            else:
                allocs = ((a.cls, a.cnt, a.by_bytes, a.planner), (b.cls, b.cnt, b.by_bytes, b.planner))
            for s in scheds:
                for cls, cnt, by_bytes, gene in allocs:
                    if len(out) == cfg.children:
                        break
                    # A copy of a living individual teaches nothing: mutate afresh (a few times at most). Only
                    # the population and this generation count, so a resumed search retries identically.
                    for _ in range(_RETRIES):
                        child = self._mutate(s, cls, cnt, by_bytes, gene, p, rng)
                        key = _key(child)
                        if key not in alive:
                            break
                    alive.add(key)
                    out.append(child)
        return out

    def _mutate(self, s: np.ndarray, cls: np.ndarray, cnt: np.ndarray, by_bytes: bool, gene: int, p: float,
                rng: np.random.Generator) -> Individual:
        cfg = self.config
        if cfg.search != "allocation":
            s = mutate_schedule(self.space, s, self._schedule_rate(rng), rng)
        if cfg.search != "schedule":
            if cfg.pool == "both" and rng.random() < p:
                by_bytes = not by_bytes
            gene = mutate_planner(gene, cfg.policy_ids, cfg.planner_knobs, p, rng,
                                  recompute_settings(self.space.options) if self.space.options.recomputes else 0)
            free = cfg.class_mapping == "free"
            cls, cnt = mutate_cls(cls, cnt, p, rng, free)
            cnt = mutate_cnt(cnt, p, cfg.count_sigma, rng)
            cls, cnt, ok = repair(self.space, cls, cnt, free)
            if not ok and not by_bytes:
                return Individual(s, cls, cnt, by_bytes, gene, float("inf"))
        return Individual(s, cls, cnt, by_bytes, gene)

    def _schedule_rate(self, rng: np.random.Generator) -> float:
        """Per child, log-uniform between about one random pick per schedule and the configured P."""
        hi = self.config.schedule_mutation_rate
        lo = min(hi, 1.0 / max(self.space.n_ops, 1))
        if hi <= 0 or lo >= hi:
            return hi
        return float(np.exp(rng.uniform(np.log(lo), np.log(hi))))

    # ---- log ---------------------------------------------------------------
    def _log(self, gen_seconds: float, n_evaluated: int) -> None:
        st = self.state
        times = np.array([i.makespan for i in st.population])
        st.log.append(GenerationStats.of(
            times, time_s=self._elapsed(), generation=st.generation, evaluations=st.evaluations,
            best_ever_s=st.best.makespan, evals_per_s=n_evaluated / max(gen_seconds, 1e-9),
            memory_bytes=int(self.space.device.memory_bytes)))
