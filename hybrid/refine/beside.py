"""CP-SAT refinement in a second process while the genetic search runs: its best plan, and its elites in turn.

Refining after the search (`hybrid.refine.handoff`) takes its time from the search:
when the windows find nothing, those seconds would have bought generations,
and GA+CP-SAT can end behind GA-only. On a machine where the search cannot
use another core (the serial GA is as fast as a two-process pool on two cores,
results/ga_evals_per_second.md), the refiner can run beside it instead:

- after every generation the search offers its best individual and the next
  `elites - 1` distinct ones of its population (`BesideRefiner.offer`; only
  arrays travel, the refiner rebuilds each plan itself);
- the refiner process takes the best if it has not refined it yet, else the
  next elite not yet refined, and refines it with a patience; it leaves a plan
  early when the search has found one faster than that plan's refined makespan
  (stop "stopped"), so it follows the search's progress;
- when the search ends, `finish` collects the fastest refined plan; the caller
  keeps it if it beats the search's best.

The search itself runs the same generations as without the refiner, so the
result is never worse than that search's own best. Which plans the refiner
saw depends on timing, so unlike the search (and `hybrid.refine.refine`) the
outcome is not fixed by the seed alone.

`Lockstep` replays the same protocol on counted work, for benchmarks that must give the same figures on
every run: the refiner takes an offer every `every` generations (the best if not refined yet, else the next
elite) and refines it with at most `windows` CP-SAT windows, as if W windows took as long as `every`
generations. Nothing a refinement finds goes back to the search, so the offers can be collected during the
search and refined after it, in one process; only its "leave a plan when the search has overtaken it" rule
is dropped (it depends on timing). The figures then measure what refining those elites gains, not how
the two processes share the machine.
"""
from __future__ import annotations

import atexit
import json
import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import numpy as np

from hybrid.device import Device
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.swap.augmented import PlannerOptions

if TYPE_CHECKING:
    from ga.algorithm import SearchState
    from ga.encoding import Individual
    from hybrid.refine.lns import RefineOptions

DEFAULT_ELITES = 4       # the best and three more distinct individuals of the population
GRACE_S = 1.0            # how long `finish` waits past the deadline for the refiner's last message
EARLY_GRACE_S = 10.0     # ... and, when the search stopped early, for the one it is in
INTERRUPT_GRACE_S = 1.5  # ... but after Ctrl-C or SIGTERM, whose best result must be written within 5 s
MARGIN_S = 0.3           # the refiner aims to be done this long before the deadline
# (key, schedule, cls, cnt, by_bytes, planner gene, makespan): what the search sends for one individual
Offer = tuple[bytes, np.ndarray, np.ndarray, np.ndarray, bool, int, float]


def refine_beside(eval_s: float, cores: int, workers: int | None = None, scheduler: str | None = None) -> bool:
    """`--refine-mode auto`: refine beside the search only where the core it takes would not speed the search.

    That is: the search evaluates on a Dask cluster; or it was given fewer processes than there are cores; or
    there are two or more cores and one evaluation (`eval_s`, `ga.evaluation.evaluation_seconds`) is too cheap
    for a process pool to pay (`ga.evaluation.POOL_MIN_EVAL_S`). On bigger graphs the second process gives the
    search about 1.5x the generations (results/ga_second_core.md), and with it GA-only was ahead of
    GA + CP-SAT beside on Inception-v4 and WResNet (results/refine_compare_beside.md); refining after the
    search then costs it less.
    """
    from ga.evaluation import POOL_MIN_EVAL_S

    if scheduler:
        return True
    if workers is not None:
        return workers < cores
    return cores >= 2 and eval_s < POOL_MIN_EVAL_S


@dataclass
class BesideReport:
    """What the refiner did; `plan` is its fastest refined plan (None if no refinement lowered a makespan)."""

    plan: Plan | None = None
    from_plan: Plan | None = None          # the search's plan that `plan` was refined from
    from_makespan_s: float = float("nan")
    from_rank: int = -1                    # 0: it was the search's best when offered; k: its k-th elite after that
    rebind_makespan_s: float = float("nan")   # `from_plan` re-walked, then its copy streams re-ordered,
    reorder_makespan_s: float = float("nan")  # before any window (`hybrid.refine.RefineResult`)
    refined: int = 0                       # plans refined (started)
    elites: int = 0                        # of those, elites other than the search's best at the time
    improved: int = 0                      # refinements that lowered their plan's makespan
    windows: int = 0
    accepted: int = 0
    busy_s: float = 0.0                    # time spent refining (the rest: starting up, waiting for offers)
    overrun_s: float = 0.0                 # how long past the deadline `finish` waited
    error: str = ""
    log: list[dict[str, Any]] = field(default_factory=list)  # one entry per refinement

    def pick(self, search_plan: Plan) -> Plan:
        """The faster of the search's own best plan and the best refined one.

        A refined plan may come from an elite, so when it wins it records the search's best
        (`search_best_makespan_s` in its planner metadata).
        """
        if self.plan is None or self.plan.makespan_s >= search_plan.makespan_s:
            return search_plan
        self.plan.planner["search_best_makespan_s"] = search_plan.makespan_s
        return self.plan


class BesideRefiner:
    """The main process's side: start the refiner, offer it the search's elites, collect its best plan."""

    def __init__(self, graph: Graph, device: Device, options: PlannerOptions = PlannerOptions(), *,
                 deadline: float, seed: int = 1, elites: int = DEFAULT_ELITES, patience_s: float | None = None,
                 refine_options: "RefineOptions | None" = None, plan_info: dict[str, Any] | None = None) -> None:
        if elites < 1:
            from hybrid.errors import HybridError

            raise HybridError(f"--refine-elites must be at least 1, got {elites}")
        self.deadline = deadline
        self.elites = elites
        ctx = mp.get_context("spawn")  # a clean interpreter: no numba/OR-Tools threads inherited through fork
        self._inbox: Any = ctx.Queue()
        self._outbox: Any = ctx.Queue()
        self._stop = ctx.Event()
        self._ga_best = ctx.Value("d", float("inf"), lock=False)
        self._sent: tuple[bytes, ...] = ()
        self._report = BesideReport()
        # the graph goes through the inbox, first, not with the process's arguments: those are written to the new
        # interpreter's pipe by this thread, which blocks for good once more than the pipe holds (64 KiB) is left
        # unread, as when the child dies while it starts (a graph's JSON is hundreds of KiB); the queue's feeder
        # thread writes instead, and is not waited for at exit. The file's sha256 travels with the JSON: plans
        # the refiner builds must name the user's file, whose bytes (indentation, key order, number format)
        # differ from graph.dumps() when another tool wrote it
        self._inbox.cancel_join_thread()
        self._inbox.put(("graph", (graph.dumps(), graph.sha256)))
        args = (device.to_json(), options.describe(), seed, deadline, patience_s, refine_options, plan_info or {},
                self._inbox, self._outbox, self._stop, self._ga_best, os.getpid())
        self._proc = ctx.Process(target=_serve, args=args, name="hybrid-cpsat-beside", daemon=True)
        from hybrid.signals import children_ignore_stops

        # the refiner ignores SIGTERM, which multiprocessing's exit handler sends daemonic children before joining
        # them: however this process ends, kill it first (atexit runs the last registered first)
        atexit.register(self._kill)
        try:
            with children_ignore_stops():  # SIGTERM to the whole job, or Ctrl-C, is the search's to handle
                self._proc.start()
        except BaseException:  # a Ctrl-C or SIGTERM (raised as the signals are unblocked): nothing to collect
            self._kill()
            raise

    def offer(self, state: "SearchState") -> None:
        """Hand the search's best and elites over (only when they changed); call after every generation."""
        picked = pick_elites(state, self.elites)
        if not picked:
            return
        self._ga_best.value = float(picked[0][1].makespan)
        keys = tuple(k for k, _ in picked)
        if keys == self._sent:
            return
        self._sent = keys
        self._inbox.put([(k, i.schedule, i.cls, i.cnt, bool(i.by_bytes), int(i.planner), float(i.makespan))
                         for k, i in picked])

    def finish(self) -> BesideReport:
        """Stop the refiner (it also stops by itself at the deadline) and return what it found."""
        self._stop.set()
        r = self._report
        now = time.monotonic()
        # at the deadline the refiner is finishing by itself; stopped early (Ctrl-C, --generations) it may
        # still be building and validating the plan of the refinement it was in
        from hybrid.signals import received

        t_end = now + (GRACE_S if now >= self.deadline - MARGIN_S
                       else INTERRUPT_GRACE_S if received() else EARLY_GRACE_S)
        done = False
        while not done:
            try:
                kind, body = self._outbox.get(timeout=min(0.2, max(0.01, t_end - time.monotonic())))
            except queue.Empty:
                if not self._proc.is_alive() and self._outbox.empty():  # killed (out of memory?): nothing will come
                    r.error = r.error or f"the refiner process ended (exit status {self._proc.exitcode})"
                    break
                if time.monotonic() < t_end:
                    continue
                r.error = r.error or "the refiner did not stop in time; its last refinement was dropped"
                break
            except KeyboardInterrupt:  # a second Ctrl-C: keep what has arrived
                r.error = r.error or "interrupted while waiting for the refiner; its last refinement was dropped"
                break
            if kind == "done":
                done = True
            else:
                _take(r, kind, body)
        r.overrun_s = max(0.0, time.monotonic() - self.deadline)
        self.close()
        return r

    def close(self) -> None:
        from hybrid.signals import received

        self._stop.set()
        if self._proc.is_alive() and not received():  # after Ctrl-C or SIGTERM nothing is waited for
            self._proc.join(timeout=1.0)
        self._kill()
        for q in (self._inbox, self._outbox):
            q.cancel_join_thread()
            q.close()

    def _kill(self) -> None:
        """SIGKILL the refiner if it still runs (it ignores SIGTERM: the job's signals are the search's)."""
        atexit.unregister(self._kill)
        if self._proc.pid is not None and self._proc.is_alive():
            self._proc.kill()
            self._proc.join(timeout=1.0)

    def __enter__(self) -> "BesideRefiner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class Lockstep:
    """Deterministic stand-in for `BesideRefiner` (see the module's docstring): pass `offer` as the search's
    `observe`, then call `refine` once the search has ended."""

    every: int                             # an offer is taken at generations 0, every, 2*every, ...
    windows: int                           # CP-SAT windows per refined plan
    elites: int = DEFAULT_ELITES
    patience_windows: int | None = None    # windows without a gain before leaving a plan (None: all of them)
    offers: list[tuple[int, Offer]] = field(default_factory=list)  # (rank, offer) in the order taken
    _done: set[bytes] = field(default_factory=set)

    def __post_init__(self) -> None:
        from hybrid.errors import HybridError

        if self.every < 1:
            raise HybridError(f"--lockstep must be at least 1 generation, got {self.every}")
        if self.windows < 1:
            raise HybridError(f"--windows must be at least 1, got {self.windows}")
        if self.elites < 1:
            raise HybridError(f"--refine-elites must be at least 1, got {self.elites}")

    def offer(self, state: "SearchState") -> None:
        """At every `every`-th generation take the best, or the next elite, not taken before."""
        if state.generation % self.every:
            return
        for rank, (key, ind) in enumerate(pick_elites(state, self.elites)):
            if key not in self._done:
                self._done.add(key)
                self.offers.append((rank, (key, ind.schedule.copy(), ind.cls.copy(), ind.cnt.copy(),
                                           bool(ind.by_bytes), int(ind.planner), float(ind.makespan))))
                return

    def refine(self, graph: Graph, device: Device, options: PlannerOptions = PlannerOptions(), *, seed: int = 1,
               refine_options: "RefineOptions | None" = None, plan_info: dict[str, Any] | None = None,
               time_limit_s: float = 3600.0) -> BesideReport:
        """Refine the offers in order, in this process, as the refiner process would; its report."""
        from dataclasses import replace

        from hybrid.refine.lns import RefineOptions

        opts = replace(refine_options or RefineOptions(), max_windows=self.windows,
                       patience_windows=self.patience_windows)
        outbox: queue.Queue = queue.Queue()
        stop = threading.Event()      # never set: nothing interrupts a lockstep refinement
        never = SimpleNamespace(value=float("inf"))  # the search's best never overtakes a plan here (no timing)
        worker = _Refiner(graph, device, options, seed, time.monotonic() + time_limit_s, None, opts,
                          plan_info or {}, queue.Queue(), outbox, stop, never)
        for rank, offer in self.offers:
            worker.refine_one(rank, offer)
        report = BesideReport()
        while not outbox.empty():
            _take(report, *outbox.get_nowait())
        return report


def _take(r: BesideReport, kind: str, body: Any) -> None:
    """Fold one of the refiner's messages into the report."""
    if kind == "plan":
        plan = Plan.from_json(json.loads(body["plan"]))
        if r.plan is None or plan.makespan_s < r.plan.makespan_s:
            r.plan, r.from_makespan_s, r.from_rank = plan, body["from_makespan_s"], body["rank"]
            r.rebind_makespan_s, r.reorder_makespan_s = body["rebind_makespan_s"], body["reorder_makespan_s"]
            r.from_plan = Plan.from_json(json.loads(body["from_plan"]))
    elif kind == "run":
        r.log.append(body)
        r.refined += 1
        r.elites += int(body["rank"] > 0)
        r.improved += int(body["improved"])
        r.windows += body["windows"]
        r.accepted += body["accepted"]
        r.busy_s += body["seconds"]
    elif kind == "error":
        r.error = body


def pick_elites(state: "SearchState", n: int) -> list[tuple[bytes, "Individual"]]:
    """The search's best, then up to n - 1 more of its population, fastest first, each genome once."""
    from ga.algorithm import _key

    best = state.best
    if not np.isfinite(best.makespan):
        return []
    picked = [(_key(best), best)]
    for ind in sorted(state.population, key=lambda i: i.makespan):
        if len(picked) >= n:
            break
        k = _key(ind)
        if np.isfinite(ind.makespan) and all(k != q for q, _ in picked):
            picked.append((k, ind))
    return picked


def _serve(device_json: dict, options: dict, seed: int, deadline: float, patience_s: float | None,
           refine_options: "RefineOptions | None", plan_info: dict, inbox: Any, outbox: Any, stop: Any, ga_best: Any,
           parent: int) -> None:
    """The refiner process: refine offered plans until told to stop, the deadline passes or the parent is gone.
    The graph is the inbox's first message."""
    # Ctrl-C and SIGTERM (sent to the whole process group by `timeout`, Slurm) are the search's to handle; it then
    # calls finish(), which collects what this process found and stops it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        try:
            kind, (graph_json, sha256) = inbox.get(timeout=1.0)
            break
        except queue.Empty:
            if stop.is_set() or os.getppid() != parent or time.monotonic() >= deadline:
                outbox.put(("done", None))
                return
    try:
        _Refiner(Graph.from_json(json.loads(graph_json), sha256=sha256), Device.from_json(device_json),
                 PlannerOptions(**options), seed, deadline, patience_s, refine_options, plan_info, inbox, outbox,
                 stop, ga_best, parent).loop()
    except Exception as e:  # noqa: BLE001 - reported to the main process, which keeps the GA's plan
        outbox.put(("error", f"{type(e).__name__}: {e}"))
    outbox.put(("done", None))


class _Refiner:
    def __init__(self, graph: Graph, device: Device, options: PlannerOptions, seed: int, deadline: float,
                 patience_s: float | None, refine_options: "RefineOptions | None", plan_info: dict,
                 inbox: Any, outbox: Any, stop: Any, ga_best: Any, parent: int | None = None) -> None:
        from dataclasses import replace

        from ga.encoding import SearchSpace
        from hybrid.refine.lns import RefineOptions
        from hybrid.swap.planner import SwapPlanner

        self.graph, self.seed, self.deadline, self.plan_info = graph, seed, deadline, plan_info
        self.inbox, self.outbox, self.stop_event, self.ga_best = inbox, outbox, stop, ga_best
        self.parent = parent
        self.space = SearchSpace.build(graph, device, options)
        self.planner = SwapPlanner(graph, device)
        self.options = replace(refine_options or RefineOptions(), patience_s=patience_s)
        self.latest: list[Offer] = []
        self.done: set[bytes] = set()
        self.best_sent = float("inf")
        self.runs = 0

    def _drain(self, timeout: float = 0.0) -> None:
        """Take the newest offer (older ones are stale); wait up to `timeout` for one."""
        try:
            self.latest = self.inbox.get(timeout=timeout) if timeout > 0 else self.inbox.get_nowait()
            while True:
                self.latest = self.inbox.get_nowait()
        except queue.Empty:
            pass

    def _over(self) -> bool:
        return self.stop_event.is_set() or time.monotonic() >= self.deadline - MARGIN_S or self._orphaned()

    def _orphaned(self) -> bool:
        """The search's process is gone (killed with SIGKILL): nobody will collect a result, so stop now."""
        return self.parent is not None and os.getppid() != self.parent

    def loop(self) -> None:
        while not self._over():
            self._drain()
            todo = [(rank, o) for rank, o in enumerate(self.latest) if o[0] not in self.done]
            if not todo:
                self._drain(timeout=min(0.2, max(0.01, self.deadline - time.monotonic())))
                continue
            self.refine_one(*todo[0])

    def refine_one(self, rank: int, offer: Offer) -> None:
        from ga.encoding import Individual, PlannerGene, POLICIES
        from hybrid.swap.to_plan import to_plan
        from hybrid.refine.lns import RefineProgress, refine

        key, schedule, cls, cnt, by_bytes, gene, makespan = offer
        self.done.add(key)
        ind = Individual(schedule, cls, cnt, by_bytes, gene, makespan)
        t0 = time.monotonic()
        aug = self.planner.plan(schedule, self.space.pool(ind), self.space.options_for(ind))
        info = {**self.plan_info, "name": "ga", "seed": self.seed,
                "policy": POLICIES[PlannerGene.unpack(gene).policy],
                "planner_gene": PlannerGene.unpack(gene).describe(),
                "planner_options": self.space.options_for(ind).describe(),
                "refined_beside_search": {"rank": rank, "run": self.runs}}
        plan = to_plan(aug, info)
        if not self.options.reruns and aug.recompute is not None and aug.recompute.any():
            return  # RefineOptions.reruns off: such plans are kept as they are
        current = [plan.makespan_s]

        def progress(p: RefineProgress) -> None:
            current[0] = p.makespan

        def stop() -> bool:
            # leave this plan when told to, or when the search has found one faster than it is even refined
            if self.stop_event.is_set() or self._orphaned():
                return True
            self._drain()
            fresh = bool(self.latest) and self.latest[0][0] != key and self.latest[0][0] not in self.done
            return fresh and self.ga_best.value < current[0]

        left = self.deadline - MARGIN_S - time.monotonic()
        res = refine(self.graph, plan, time_limit_s=left, seed=self.seed + self.runs, workers=1,
                     progress=progress, options=self.options, stop=stop)
        self.runs += 1
        self.outbox.put(("run", {"rank": rank, "from_makespan_s": plan.makespan_s, "makespan_s": res.makespan,
                                 "improved": res.improved, "windows": res.windows, "accepted": res.accepted,
                                 "stop": res.stop, "seconds": time.monotonic() - t0,
                                 "graph_sha256": plan.graph_sha256}))
        if res.improved and res.makespan < self.best_sent:
            self.best_sent = res.makespan
            self.outbox.put(("plan", {"plan": res.plan.dumps(), "from_plan": plan.dumps(),
                                      "from_makespan_s": plan.makespan_s, "rank": rank,
                                      "rebind_makespan_s": res.rebind_makespan,
                                      "reorder_makespan_s": res.reorder_makespan}))
