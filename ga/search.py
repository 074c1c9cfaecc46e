"""`optimize`: the GA from Python — the graph in, a `SearchResult` (and its plan) out."""
from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from ga.algorithm import GAConfig, GeneticSearch, SearchState
from ga.checkpoint import load_checkpoint, save_checkpoint
from ga.encoding import SearchSpace
from ga.evaluation import CONNECT_S, Evaluator, make_evaluator
from ga.progress import GenerationStats
from ga.repair import check_feasible
from ga.result import SearchResult
from ga.termination import Termination, stop_on_sigint
from hybrid.device import Device
from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.swap.augmented import PlannerOptions


def optimize(graph: Graph, device: Device | None = None, config: GAConfig = GAConfig(), *,
             time_limit_s: float | None = None, generations: int | None = None,
             options: PlannerOptions = PlannerOptions(), workers: int | None = 1, scheduler: str | None = None,
             evaluator: Evaluator | None = None, checkpoint: str | Path | None = None, checkpoint_every: int = 10,
             resume: str | Path | None = None, on_generation: Callable[[GenerationStats], None] | None = None,
             handle_sigint: bool = False, observe: Callable[[SearchState], None] | None = None,
             stop_at_s: float | None = None, start: SearchState | None = None,
             rescore: bool = False, full_device: Device | None = None) -> SearchResult:
    """Search schedules and size-class pools for `graph` on `device` (default: the graph's own).

    Budget: `time_limit_s` (wall time from this call, setup such as loading `resume` and starting worker
    processes included, so that a caller's deadline holds) and/or `generations` (total, counting those
    before a resume). Evaluation: `evaluator`, else Dask at `scheduler`, else
    `workers` processes (1 = serial, in this process; None = all cores).
    `resume` continues a checkpoint with its own config (the `config` given
    here is then ignored); `checkpoint` is written every `checkpoint_every`
    generations and when the search ends. With `handle_sigint`, Ctrl-C stops
    the search and the best so far is returned. `observe` sees the live search state after each
    generation (`hybrid.refine.beside` takes the elites to refine from it). `stop_at_s` ends the search
    (stop reason "lower bound") once its best makespan is at most this: `hybrid optimize` passes the graph
    bound (`hybrid.bounds.graph_bound`), which no plan can beat.
    `start` continues a search this process ran (its `SearchResult.state`, with the same `config`); with
    `rescore` (it ran on another device) its population is scored afresh here first
    (`GeneticSearch.rescore`). The generation count, log and random generator go on from it: carried over
    without `rescore`, a search counted in generations makes the same plan as one run through.
    `full_device`: the device the plans are for (a headroom search plans on less memory than it has,
    `hybrid.arena.headroom`); `checkpoint` records it, so that a resume can tell the two apart.
    """
    called = time.monotonic()
    graph.require_ops()
    device = device or graph.device
    if device is None:
        from hybrid.device import PRESETS

        device = PRESETS["v100-16gb"]
    space = SearchSpace.build(graph, device, options)
    state: SearchState | None = None
    if resume is not None:
        config, state = load_checkpoint(resume, space)
    elif start is not None:
        state = start
    if config.pool != "bytes":
        try:
            check_feasible(space)
        except InfeasibleError:
            if config.pool == "classes":
                raise
            config = replace(config, pool="bytes")  # no size-class pool fits; the byte budget may still work
    term = Termination(time_limit_s, generations, start=called, target_s=stop_at_s)
    own = evaluator is None
    ev = evaluator or make_evaluator(graph, device, options, workers, scheduler,
                                     CONNECT_S if time_limit_s is None else time_limit_s)
    try:
        search = GeneticSearch(space, config, ev, state)
        if start is not None and rescore:
            search.rescore(term.expired)
        term.best = lambda: search.state.best.makespan if search.state is not None else float("inf")
        save = ((lambda st: save_checkpoint(checkpoint, space, config, st, full_device)) if checkpoint is not None
                else None)
        if handle_sigint:
            with stop_on_sigint(term):
                reason = search.run(term, on_generation, save, checkpoint_every, observe)
        else:
            reason = search.run(term, on_generation, save, checkpoint_every, observe)
        final = search.snapshot()
        if save is not None:
            save(final)
    finally:
        if own:
            ev.close()
    # the work done counts the evaluations of a generation a stop abandoned; the state to go on from does not
    return SearchResult(space, config, final.best.copy(), final.generation, final.evaluations + search.abandoned,
                        final.elapsed_s,
                        reason, final.log, ev.name, ev.workers, search.cache_hits, final)
