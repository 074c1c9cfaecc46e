"""`hybrid optimize`: the genetic search over schedules and pools (SwapAdvisor §5), then CP-SAT refinement."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

import click
import numpy as np

from hybrid.cli.options import (device_from, device_options, graph_option, json_summary, load_graph, patience_option,
                                prepare_output, recompute_option, seed_option)
from hybrid.errors import HybridError
from hybrid.refine.handoff import patience_s
from hybrid.units import format_bytes, format_seconds, parse_duration


def _refine_available() -> bool:
    """Whether the CP-SAT refinement (hybrid.refine) is installed; checked without importing it."""
    return importlib.util.find_spec("hybrid.refine") is not None


DEFAULT_REFINE = "cpsat" if _refine_available() else "none"
ARENA_AUTO_S = 60.0     # `--arena auto`: the safety cap on the layout's counted work (hybrid.arena.layout.LayoutBudget)


@click.command("optimize")
@graph_option
@click.option("--time-limit", default="30m", show_default=True,
              help="Search budget, e.g. 90s, 5m, 1h; a bare number is seconds (refinement included; the first run "
                   "after an install also compiles the planner's kernels, outside it). The search also stops when its "
                   "best plan reaches the lower bound. Ctrl-C or SIGTERM stops early and writes the best plan so far.")
@click.option("--generations", type=int, default=None,
              help="Stop after this many generations (counting those before --resume), if the time limit allows.")
@seed_option
@click.option("--population", type=int, default=48, show_default=True,
              help="Individuals alive after each generation (N_p).")
@click.option("--children", type=int, default=None,
              help="New individuals per generation, four per crossover [default: --population].")
@click.option("--workers", type=int, default=None,
              help="Evaluation processes on this machine [default: all cores, one fewer when the CP-SAT refiner "
                   "runs beside the search; 1 when one evaluation takes under 1 ms, where a pool is slower]; "
                   "1 = serial, in this process.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Evaluate on a Dask cluster instead, e.g. tcp://host:8786 (pip install 'hybrid-offload[dask]').")
@click.option("--search", type=click.Choice(["both", "schedule", "allocation"]), default="both", show_default=True,
              help="What the search may change; the other part stays at its best seed (the paper's Figure 10).")
@click.option("--pool", type=click.Choice(["both", "classes", "bytes"]), default="both", show_default=True,
              help="Pool kinds to search: size classes (the paper's allocator), the plain byte budget, or both.")
@click.option("--class-mapping", type=click.Choice(["monotone", "free"]), default="monotone", show_default=True,
              help="How tensor sizes map to size classes: monotone (the paper's restriction: each class a run of "
                   "consecutive sizes) or free (any size in any class, its Figure 9c).")
@click.option("--start", "start_order", type=click.Choice(["program", "random"]), default="program", show_default=True,
              help="Seed the search with the program and depth-first orders, or with one random topological order "
                   "(MXNet's default; with --search allocation the schedule stays there: the paper's Figure 10).")
@click.option("--policy", "policies", multiple=True, type=click.Choice(["belady", "lru", "pinned"]),
              help="Eviction policies the search may pick (repeatable) [default: all]: belady (farthest next use), "
                   "lru (as ODSwap), pinned (belady, persistent tensors kept on the device, as vDNN).")
@recompute_option
@click.option("--planner-knobs/--no-planner-knobs", default=True, show_default=True,
              help="Also search the planner's recency window and victim lookahead (else the planner's defaults).")
@click.option("--mutation-rate", type=float, default=0.1, show_default=True,
              help="P: chance that a CLS/CNT element mutates, and the highest chance of a random pick per schedule step.")
@click.option("--temperature", type=float, default=0.05, show_default=True,
              help="Selection softmax temperature over t_norm (1 = the paper's eq. 1; smaller selects harder).")
@click.option("--refine", type=click.Choice(["cpsat", "none"]), default=DEFAULT_REFINE, show_default=True,
              help="Re-time the search's plans' copies (and evictions) with CP-SAT (hybrid.refine).")
@click.option("--refine-mode", type=click.Choice(["auto", "beside", "after"]), default="auto", show_default=True,
              help="beside: a second process refines the search's best plan and its elites while the search runs "
                   "(the search gets the other cores); after: the search stops at 1 - --refine-share of the budget "
                   "and its best plan is refined. auto: beside where the core it takes would not speed up the search "
                   "(one evaluation under 1 ms, fewer --workers than cores, or --scheduler), else after.")
@click.option("--refine-share", type=float, default=0.2, show_default=True,
              help="after: fraction of --time-limit kept for refinement (beside: sets the patience's scale).")
@patience_option
@click.option("--refine-elites", type=click.IntRange(1), default=4, show_default=True,
              help="beside: how many of the search's best distinct individuals are offered to the refiner after "
                   "each generation (1: its best only).")
@click.option("--checkpoint", "checkpoint_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Save the search here every --checkpoint-every generations and at the end.")
@click.option("--checkpoint-every", type=int, default=10, show_default=True, help="Generations between checkpoints.")
@click.option("--resume", "resume_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Continue a checkpoint (its population, random state and settings) with a new budget.")
@device_options
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Write the best plan here (hybrid-plan/1).")
@click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the convergence log (time, generation, best/mean/worst makespan) as CSV.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Plot best/mean/worst makespan against search time (PNG), like the paper's Figure 9.")
@click.option("--quiet", is_flag=True, help="No progress line; only the final summary.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as one JSON object on stdout (makespan_s, ideal_s, ratio, plan, memory_bytes, "
                   "planner, generations, search_s, wall_s, stop_reason, ...) instead of the text.")
@click.option("--arena", "arena_time", default="auto", show_default=True, metavar="auto|TIME|0",
              help="A byte-budget plan is written with exact arena offsets (hybrid.arena), so the executor never "
                   "compacts. Where it does not lay out within the memory, its other candidates and re-plans with "
                   "less memory (the search's genes, its population's next best, the Belady planner; bisected to "
                   "the largest budget that lays out) are laid out, then per-size classes; the fastest that fits is "
                   "written and the summary's pool line says which fallback fired and its makespan cost. The work "
                   "is counted (re-plans, exact-search nodes), so one seed gives one plan; TIME (e.g. 60s) is only "
                   "a safety cap on it after --time-limit (auto: 60s). 0, as --no-arena: no offsets.")
@click.option("--no-arena", "no_arena", is_flag=True,
              help="Write the byte budget as searched, without offsets (the executor places it, compacting at run "
                   "time if it must): the search's own makespan, no layout fallback. Same as --arena 0.")
@click.option("--compare-baselines", is_flag=True,
              help="At the end, also plan the naive, odswap, vdnn, belady (with recompute) and recompute-only "
                   "baselines (outside the time limit) and print one table with them and the optimized plan.")
def command(graph_path: Path, time_limit: str, generations: int | None, seed: int, population: int,
            children: int | None, workers: int | None, scheduler: str | None, search: str, pool: str,
            class_mapping: str, start_order: str,
            policies: tuple[str, ...], recompute: bool, planner_knobs: bool, mutation_rate: float, temperature: float, refine: str,
            refine_mode: str, refine_share: float, refine_patience: float, refine_elites: int,
            checkpoint_path: Path | None, checkpoint_every: int, resume_path: Path | None, out_path: Path,
            log_path: Path | None, plot_path: Path | None, quiet: bool, as_json: bool, compare_baselines: bool,
            arena_time: str, no_arena: bool, **kw: object) -> None:
    """Search operator orders and memory pools for the fastest swapping plan.

    A genetic algorithm (SwapAdvisor §5) evolves individuals made of a
    schedule (a topological order), a pool (size classes CLS/CNT, or the
    plain byte budget) and the planner's eviction policy; the swap planner
    and simulator score each one. The first generation includes the program
    order with every policy and a depth-first order, so the result is never
    slower than the belady, odswap and vdnn baselines. A byte-budget winner is then given exact arena
    offsets (--no-arena: not); where it does not lay out within the memory, the fallback written may be slower
    (the summary's pool line says which fallback fired and its makespan cost). With --refine cpsat, CP-SAT re-times the copies of
    the search's plans: in a second process while the search runs (its best plan, and in turn its next-best
    ones when that stalls) where the search could not use that core (see --refine-mode), else after the search,
    whose best plan is refined until that stops finding anything faster (--refine-patience) and the
    search then resumes with the time left. The fastest plan is kept. Prints a line per generation (best, population
    mean and worst makespan, evaluations per second, time left), and at the
    end the makespan, its ratio to the ideal, the lower bound and bytes moved (--json: as JSON).

    The search ends at --time-limit, after --generations, when its best plan
    reaches the lower bound (no plan can be faster), or on Ctrl-C or SIGTERM
    (as sent by timeout, Slurm, Kubernetes): then the best plan so far is
    written and the exit status is 0. Output paths are checked (their folders
    created) before any work starts. Exit status 2: a user error (a bad flag or
    file, no plan fits), nothing written; 1: a refined plan failed validation,
    the search's own valid best plan was written instead.

    The same --seed and --generations give the same search, whatever
    --workers or --scheduler (evaluation is deterministic; only speed differs).
    How far CP-SAT gets within the time limit, and (beside) which of the
    search's plans it reaches, depends on timing; for a plan fixed by the
    seed use --refine none.

    \b
    Examples:
      hybrid optimize --graph g.json --time-limit 30m --out plan.json
      hybrid optimize --graph g.json --time-limit 5m --memory 8GiB --log conv.csv --plot conv.png --out plan.json
      hybrid optimize --graph g.json --time-limit 2h --scheduler tcp://head:8786 --checkpoint ga.ckpt --out plan.json
      hybrid optimize --graph g.json --time-limit 1h --resume ga.ckpt --checkpoint ga.ckpt --out plan.json
    """
    from ga import GAConfig, optimize
    from ga.evaluation import make_evaluator
    from ga.progress import ProgressLine
    from hybrid.signals import deferred_interrupts, interrupted_by, start_forkserver
    from hybrid.plan.bounds import graph_bound
    from hybrid.swap.augmented import PlannerOptions
    from hybrid.swap.baselines import RECOMPUTE_RATIO
    from hybrid.swap.planner import compile_kernels

    start = wall0 = time.monotonic()
    total = parse_duration(time_limit, "--time-limit")
    arena_s: float | None = (None if no_arena else ARENA_AUTO_S if arena_time.strip().lower() == "auto"
                             else parse_duration(arena_time, "--arena"))
    if arena_s is not None and arena_s < 0:
        raise HybridError(f"--arena must be auto, a duration such as 60s, or 0 to write no offsets; got {arena_time!r}")
    arena_s = arena_s or None
    if total <= 0:
        raise HybridError(f"--time-limit must be positive, got {time_limit!r}")
    if refine == "cpsat" and not _refine_available():
        raise HybridError("--refine cpsat needs the CP-SAT refinement (hybrid.refine), which is not in this "
                          "installation; use --refine none")
    if not 0.0 <= refine_share < 1.0:
        raise HybridError(f"--refine-share must be within [0, 1), got {refine_share}")
    if workers is not None and workers < 1:
        raise HybridError(f"--workers must be at least 1, got {workers}")
    if scheduler and workers is not None:
        raise HybridError("give either --workers (processes here) or --scheduler (a Dask cluster), not both")
    for path, flag in ((out_path, "--out"), (log_path, "--log"), (plot_path, "--plot"),
                       (checkpoint_path, "--checkpoint")):
        prepare_output(path, flag)  # a bad folder fails now, not after the search
    if refine == "cpsat":
        import hybrid.refine  # noqa: F401 - imported now so its import time counts against the budget
    graph = load_graph(graph_path)
    device = device_from(graph, kw)
    t0 = time.monotonic()
    compile_kernels()  # kept out of the budget: right after an install this takes tens of seconds, once
    if (took := time.monotonic() - t0) > 2.0:
        start += took
        if not quiet:
            click.echo(f"compiled the planner's kernels in {format_seconds(took)} (first run after an install; "
                       "cached from now on), not counted in --time-limit", err=True)
    from hybrid.refine.beside import placement

    beside, workers = placement(graph, device, refine == "cpsat", refine_mode, workers, scheduler)
    ga_time = total * (1.0 - refine_share) if refine == "cpsat" and not beside else total
    config = GAConfig(population=population, children=children or population, mutation_rate=mutation_rate,
                      schedule_mutation_rate=mutation_rate, temperature=temperature, search=search,  # type: ignore[arg-type]
                      pool=pool, seed=seed, planner_knobs=planner_knobs, class_mapping=class_mapping, start=start_order,
                      **({"policies": policies} if policies else {}))  # type: ignore[arg-type]
    # no plan beats the graph bound (with recompute when the search may rerun ops): stop there (relative slack,
    # as equal sums in another order differ in the last bits); on a graph that fits, generation 0 reaches it
    bound_s = graph_bound(graph, device, recompute=recompute)
    stop_at = bound_s * (1.0 + 1e-9)
    deadline = start + ga_time
    failures: list[str] = []   # refined plans that failed validation (the search's own plan is kept)
    interrupted = False
    # one evaluator for the search and, after refinement, its resumption: a second process pool would spend
    # the seconds refinement hands back starting up (the resumed search then ran 0 generations)
    start_forkserver()  # worker processes then leave SIGTERM and Ctrl-C to this process, which stops them in order
    options = PlannerOptions(recompute_ratio=RECOMPUTE_RATIO if recompute else 0.0)  # the search's genes set the ratio
    evaluator = make_evaluator(graph, device, options, workers, scheduler)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # refinement may hand its time back to the search, which then resumes from the split's checkpoint
            split_ckpt = checkpoint_path or (Path(tmp) / "split.ckpt" if refine == "cpsat" and not beside
                                             else None)
            line = None if quiet else ProgressLine(time_left=lambda: max(0.0, deadline - time.monotonic()))
            refiner = _start_refiner(graph, device, options, deadline, seed, refine_elites,
                                     patience_s(refine_share * total, refine_patience), total) if beside else None
            result = report = None
            last_population: list = []     # the arena fallback re-plans the next best byte-budget individuals

            def watch(state) -> None:  # noqa: ANN001 - ga.algorithm.SearchState
                last_population[:] = state.population
                if refiner is not None:
                    refiner.offer(state)

            try:
                result = optimize(graph, device, config, time_limit_s=max(1e-3, deadline - time.monotonic()),
                                  generations=generations, evaluator=evaluator, options=options,
                                  checkpoint=split_ckpt,
                                  checkpoint_every=checkpoint_every if checkpoint_path else 0,
                                  resume=resume_path, on_generation=line, handle_sigint=True,
                                  observe=watch, stop_at_s=stop_at)
            finally:
                if line is not None:
                    line.close()
                if refiner is not None:
                    with deferred_interrupts():
                        if result is None or result.stop_reason == "lower bound":
                            refiner.close()  # nothing can beat the lower bound (or no search): do not wait for it
                        else:
                            report = refiner.finish()
            with deferred_interrupts() as hits:  # the best plan is written whole, even if a signal comes now
                plan = result.to_plan(time_limit_s=total)
                problem = _problem(graph, plan)
                if problem:  # a planner bug: say so rather than write a plan the executor would reject
                    raise HybridError(f"the best plan failed validation ({problem}); please report this with "
                                      "the graph file")
                ga_plan = plan
                refined = ""
                if report is not None:
                    plan, refined = _beside_outcome(report, plan)
                    plan = _valid_or(graph, plan, ga_plan, "the plan refined beside the search", failures)
                # written now, so an interrupted refinement still leaves the best so far
                written = _save_laid_out(graph, plan, out_path, arena_s, [ga_plan], result, last_population,
                                         recompute=recompute,
                                         stop=lambda: result.stop_reason == "interrupted" or bool(hits))
            interrupted = result.stop_reason == "interrupted" or bool(hits)
            done = result.stop_reason in ("interrupted", "lower bound") or hits
            if refine == "cpsat" and not beside and not done:
                # a search that ran out of generations has nothing to resume: refine for the whole share then
                more = result.stop_reason == "time limit"
                before = plan
                plan, refined, resumed, stopped = _refine(
                    graph, device, plan, split_ckpt if more else None, start + total, seed,
                    refine_patience if more else None, quiet, {"time_limit_s": total}, generations=generations,
                    evaluator=evaluator, options=options, checkpoint=checkpoint_path,
                    checkpoint_every=checkpoint_every, stop_at_s=stop_at)
                interrupted = interrupted or stopped
                result = resumed or result
                with deferred_interrupts() as hits:
                    if plan is not before:
                        plan = _valid_or(graph, plan, before, "the refined plan", failures)
                        if plan is not before:
                            written = _save_laid_out(graph, plan, out_path, arena_s, [before, ga_plan], result,
                                                     last_population, recompute=recompute,
                                                     stop=lambda: stopped or bool(hits))
                interrupted = interrupted or bool(hits)
    finally:
        evaluator.close()
    with deferred_interrupts():
        _finish(graph, device, result, written.plan, ga_plan, refined, out_path, log_path, plot_path, as_json,
                compare_baselines, time.monotonic() - wall0, interrupted, written, searched=plan)
    if interrupted:
        click.echo(f"interrupted ({interrupted_by()}): wrote the best plan so far to {out_path}", err=True)
    for f in failures:
        click.echo(f"error: {f}; wrote the search's own valid best plan instead; please report this with the graph "
                   "file", err=True)
    if failures:
        sys.exit(1)


def _save_laid_out(graph, plan, out_path: Path, arena_s: float | None, others=(),  # noqa: ANN001, ANN202
                   result=None, population=(), recompute: bool = True, stop=None):  # noqa: ANN001
    """Write `plan`; with `arena_s`, with exact arena offsets (or its fallback, hybrid.arena.layout), checked by
    the validator. `population`: the search's last population, whose next best byte-budget individuals are
    re-planned too. Returns the Layout written."""
    from hybrid.arena.layout import Layout, Replan, lay_out, replan_schedule
    from hybrid.errors import InfeasibleError

    if arena_s is None:
        plan.save(out_path)
        return Layout(plan, "", 0, plan.makespan_s, 0.0)
    replans = []
    if result is not None:
        replans.append(Replan("search genes", _genes_replan(graph, plan, result, result.best)))
        seen = {round(result.best.makespan, 12)}
        for ind in sorted((i for i in population if i.by_bytes and np.isfinite(i.makespan)),
                          key=lambda i: i.makespan):
            if len(replans) > 3:
                break
            if round(ind.makespan, 12) not in seen:
                seen.add(round(ind.makespan, 12))
                replans.append(Replan(f"population {len(replans) + 1}", _genes_replan(graph, plan, result, ind)))
    replans.append(Replan("belady", lambda budget: replan_schedule(graph, plan, budget, recompute=recompute)))
    classes = []              # the search's fastest size-class plan: a fallback that needs no offsets
    if result is not None:
        from hybrid.swap.planner import SwapPlanner
        from hybrid.swap.to_plan import to_plan

        space = result.space
        for ind in sorted((i for i in population if not i.by_bytes and np.isfinite(i.makespan)),
                          key=lambda i: i.makespan)[:1]:
            aug = SwapPlanner(graph, space.device).plan(ind.schedule, space.pool(ind), space.options_for(ind))
            classes.append(dataclasses.replace(to_plan(aug, result.planner_info()), device=plan.device))
    try:
        layout = lay_out(graph, plan, arena_s, others=[o for o in others if o is not plan] + classes,
                         replans=replans, recompute=recompute, stop=stop)  # stop: Ctrl-C/SIGTERM, write now
    except InfeasibleError as e:
        if stop is not None and stop():  # Ctrl-C or SIGTERM cut the layout short: the plan as searched, now
            click.echo("note: interrupted before an arena layout fitting the memory was found: wrote the byte "
                       "budget as searched (as --no-arena; the executor compacts at run time if it must)", err=True)
            plan.save(out_path)
            return Layout(plan, "", 0, plan.makespan_s, 0.0)
        raise InfeasibleError(f"{e}, or --no-arena to write the byte budget as searched (the executor then "
                              "compacts at run time)") from None
    problem = _problem(graph, layout.plan)
    if problem:
        raise HybridError(f"the laid-out plan failed validation ({problem}); please report this with the graph file")
    layout.plan.save(out_path)
    return layout


def _genes_replan(graph, plan, result, ind):  # noqa: ANN001, ANN202 - -> (budget bytes -> Plan)
    """Plan an individual of the search again (its schedule, policy and recompute genes) for a smaller byte
    budget: the arena fallback that keeps what the search found."""
    from hybrid.arena.layout import replan_schedule

    space = result.space
    return lambda budget: replan_schedule(graph, plan, budget, order=ind.schedule,
                                          options=space.options_for(ind), info=result.planner_info())


def _finish(graph, device, result, plan, ga_plan, refined: str, out_path: Path, log_path: Path | None,  # noqa: ANN001
            plot_path: Path | None, as_json: bool, compare_baselines: bool, wall_s: float, interrupted: bool,
            layout=None, searched=None) -> None:  # noqa: ANN001
    """Write the log and plot, then the summary (text, or one JSON object with --json). `searched`: the plan
    before it was laid out (a byte budget), shown beside the baselines, which are byte budgets too."""
    from hybrid.plan.bounds import plan_graph_bound
    from hybrid.plan.metrics import persistent_bound_of

    if log_path is not None:
        result.log.to_csv(log_path)
    m = plan.metrics
    if plot_path is not None:
        result.log.plot(plot_path, title=f"{graph.name} on {device.name}", ideal_s=m.get("ideal_s"),
                        lower_bound_s=plan_graph_bound(graph, plan))
    ideal = float(m["ideal_s"])
    h2d, d2h = int(m.get("bytes_h2d", 0)), int(m.get("bytes_d2h", 0))
    kind = plan.allocation.kind
    pool_text = (f"{len(plan.allocation.classes)} size classes" if kind == "size_classes"
                 else f"arena of {format_bytes(plan.allocation.arena_bytes)}" if kind == "arena" else "byte budget")
    if layout is not None and (layout.fallback or kind == "arena"):
        pool_text += f" ({layout.describe()})"
    stop = result.stop_reason
    if as_json:
        summary = {**json_summary(graph, device, plan, out_path), "wall_s": wall_s,
                   "generations": result.generations, "evaluations": result.evaluations,
                   "search_s": result.search_time_s, "stop_reason": stop, "interrupted": interrupted,
                   "evaluator": result.evaluator, "workers": result.workers,
                   "search_makespan_s": ga_plan.makespan_s, "refinement": refined.lstrip("; "),
                   "arena": None if layout is None or (kind != "arena" and not layout.fallback)
                   else layout.to_json(),
                   "log": str(log_path) if log_path else None, "plot": str(plot_path) if plot_path else None}
        if compare_baselines:
            summary["baselines"] = _baseline_rows(graph, device, ga_plan, plan, searched)[0]
        click.echo(json.dumps(summary, indent=1))
        return
    why = "reached the lower bound (no plan can be faster)" if stop == "lower bound" else stop
    click.echo(f"{graph.name} on {device.name}: {result.generations} generations, {result.evaluations} evaluations "
               f"in {format_seconds(result.search_time_s)} ({result.evaluator}, {result.workers} worker"
               f"{'s' if result.workers != 1 else ''}); stopped: {why}{refined}")
    click.echo(f"  makespan     {format_seconds(plan.makespan_s)}  ({plan.makespan_s / ideal:.3f} x ideal, "
               f"{100 * ideal / plan.makespan_s:.1f}% of ideal throughput)")
    click.echo(f"  ideal        {format_seconds(ideal)}   lower bounds: graph {format_seconds(plan_graph_bound(graph, plan))} "
               f"(any schedule), persistent tensors only {format_seconds(persistent_bound_of(m))}")
    click.echo(f"  bytes moved  {format_bytes(h2d + d2h)} ({format_bytes(h2d)} in, {format_bytes(d2h)} out); "
               f"pool: {pool_text}")
    click.echo(f"wrote {out_path}" + (f", {log_path}" if log_path else "") + (f", {plot_path}" if plot_path else ""))
    if compare_baselines:
        click.echo(_baseline_table(graph, device, ga_plan, plan, searched))


def _baseline_rows(graph, device, ga_plan, plan, searched=None) -> tuple[list[dict], list[str]]:  # noqa: ANN001
    """The optimized plan next to the obvious alternatives (each validated): summary rows and notes. The
    baselines are byte budgets (memory never fragments), so where the written plan was laid out with exact
    offsets, the search's byte-budget plan is shown too: that pair compares like with like."""
    from hybrid.swap.baselines import run_baseline
    from hybrid.errors import InfeasibleError
    from hybrid.report.summary import plan_row
    from hybrid.validator import check

    rows, notes = [], []
    for kind in ("naive", "odswap", "odswap-paper", "vdnn", "tflms", "belady", "recompute-only"):
        try:
            p = run_baseline(graph, device, kind, recompute=True)
        except InfeasibleError as e:
            notes.append(f"{kind}: cannot run: {e}")
            continue
        check(graph, p)
        rows.append(plan_row(kind, p, graph))
    laid_out = searched is not None and searched is not plan and plan.allocation.kind == "arena"
    best = searched if laid_out else plan
    if ga_plan is not best:
        rows.append(plan_row("optimize (GA)", ga_plan, graph))
    rows.append(plan_row("optimize" + (" (GA+CP-SAT)" if ga_plan is not best else ""), best, graph))
    if laid_out:
        rows.append(plan_row("optimize, written (exact offsets)", plan, graph))
        notes.append("The baselines and the optimize rows above the last are byte budgets (memory never fragments); "
                     "the written plan gives every tensor an arena offset (--no-arena: write the byte budget).")
    return rows, notes


def _baseline_table(graph, device, ga_plan, plan, searched=None) -> str:  # noqa: ANN001
    """The optimized plan next to the obvious alternatives (each validated), as one table."""
    from hybrid.report.summary import table

    rows, notes = _baseline_rows(graph, device, ga_plan, plan, searched)
    return "\n" + table(rows) + "".join(f"\n{n}" for n in notes)


def _start_refiner(graph, device, options, deadline: float, seed: int, elites: int, patience: float,  # noqa: ANN001, ANN202
                   total: float):
    from hybrid.refine.beside import BesideRefiner

    return BesideRefiner(graph, device, options, deadline=deadline, seed=seed, elites=elites, patience_s=patience,
                         plan_info={"time_limit_s": total})


def _beside_outcome(report, ga_plan):  # noqa: ANN001, ANN202 - (BesideReport, Plan) -> (Plan, note)
    """The faster of the search's best and the refiner's best, and what the summary line says about it."""
    r = report
    note = (f"; CP-SAT beside the search refined {r.refined} plan{'s' if r.refined != 1 else ''} ({r.elites} "
            f"elite{'s' if r.elites != 1 else ''} after its best), {r.windows} windows, {r.accepted} accepted")
    if r.error:
        note += f" ({r.error})"
    plan = r.pick(ga_plan)
    if plan is not ga_plan:
        return plan, (note + f": {format_seconds(r.plan.makespan_s)} from a search plan of "
                        f"{format_seconds(r.from_makespan_s)}, {100 * (1 - r.plan.makespan_s / ga_plan.makespan_s):.2g}%"
                        f" below the search's best")
    return ga_plan, note + ": nothing faster than the search's best"


def _problem(graph, plan) -> str:  # noqa: ANN001
    """The plan's first broken rule as text, or '' when it validates."""
    from hybrid.validator import validate

    report = validate(graph, plan)
    if report.valid:
        return ""
    v = report.violations[0]
    return f"rule {v.rule}: {v.message}"


def _valid_or(graph, plan, fallback, what: str, failures: list[str]):  # noqa: ANN001, ANN202
    """`plan` if it validates, else `fallback` (already validated), noting the failure for the final message."""
    if plan is fallback:
        return plan
    problem = _problem(graph, plan)
    if problem:
        failures.append(f"{what} failed validation ({problem})")
        return fallback
    return plan


def _refine(graph, device, plan, split_ckpt, deadline: float, seed: int, patience: float | None,  # noqa: ANN001
            quiet: bool, plan_info: dict, **resume_kw):  # noqa: ANN003, ANN202
    """CP-SAT on the GA's best plan; when it stalls, the GA resumes with the time left (`hybrid.refine.handoff`).

    Returns (the fastest plan, a note for the summary line, the resumed search's result or None, whether
    Ctrl-C or SIGTERM stopped it).
    """
    from ga.progress import ProgressLine
    from hybrid.refine.handoff import refine_then_resume

    seconds = deadline - time.monotonic()
    if seconds <= 0.5:
        return plan, "; no time left to refine", None, False
    last = [0.0]

    def progress(p) -> None:  # noqa: ANN001 - hybrid.refine.RefineProgress
        if time.monotonic() - last[0] >= 5.0:
            last[0] = time.monotonic()
            click.echo(f"refine {format_seconds(p.elapsed_s)}: makespan {format_seconds(p.makespan)} "
                       f"(from {format_seconds(p.initial_makespan)}), {p.windows} windows, {p.accepted} accepted",
                       err=True)

    line = None if quiet else ProgressLine(time_left=lambda: max(0.0, deadline - time.monotonic()))
    try:
        hand = refine_then_resume(graph, device, plan, split_ckpt, deadline=deadline, seed=seed,
                                  patience=patience, refine_progress=None if quiet else progress,
                                  plan_info=plan_info, on_generation=line, handle_sigint=True,
                                  **resume_kw)
    except KeyboardInterrupt:
        return plan, "; refinement interrupted (the GA's plan is kept)", None, True
    finally:
        if line is not None:
            line.close()
    ref = hand.refine
    note = (f"; CP-SAT refined {format_seconds(plan.makespan_s)} -> {format_seconds(ref.plan.makespan_s)} "
            f"({100 * (1 - ref.plan.makespan_s / plan.makespan_s):.2g}% faster)"
            if ref.improved else "; CP-SAT found no faster timing")
    note += f" in {format_seconds(hand.refine_s)} ({ref.stop})"
    if hand.resumed is not None:
        note += (f", then the GA resumed for {format_seconds(hand.resume_s)}"
                 + (f" and found {format_seconds(hand.plan.makespan_s)}" if hand.source == "ga" else ""))
    stopped = ref.stop == "interrupted" or (hand.resumed is not None and hand.resumed.stop_reason == "interrupted")
    return hand.plan, note, hand.resumed, stopped
