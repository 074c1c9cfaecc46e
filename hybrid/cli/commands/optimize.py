"""`hybrid optimize`: parses the flags, runs `hybrid.pipeline.run_optimize` (the genetic search of SwapAdvisor §5,
CP-SAT refinement, arena layout, baselines), prints its summary and writes the plan, log and plot."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from hybrid.cli import clock
from hybrid.cli.options import (FINITE, device_from, device_options, graph_option, json_summary, load_graph,
                                patience_option, prepare_output, recompute_option, seed_option)
from hybrid.errors import HybridError
from hybrid.pipeline.optimize import ARENA_AUTO_S, refine_available
from hybrid.report.summary import optimize_json, optimize_text
from hybrid.units import counted, format_seconds, parse_duration
from hybrid.jsonio import report_json

DEFAULT_REFINE = "cpsat" if refine_available() else "none"
EXIT_S = 1.5   # kept at the end of --time-limit for the summary and the interpreter's exit (about 1 s, unloaded)


@click.command("optimize")
@graph_option
@click.option("--time-limit", default="30m", show_default=True,
              help="Wall time of the whole command, e.g. 90s, 5m, 1h; a bare number is seconds. It covers loading "
                   "the graph, setup (a first run after an install compiles the planner's kernels: announced, and "
                   "counted), the search, refinement, the arena layout and --compare-baselines. A reserve at its end "
                   "(5-50%, estimated from one evaluation's time) is kept for validation, layout and baselines; "
                   "the search gets the rest (hybrid.pipeline.optimize explains the split). The search also stops "
                   "when its best plan reaches the lower bound. Ctrl-C or SIGTERM stops early and writes the best "
                   "plan so far.")
@click.option("--generations", type=click.IntRange(0), default=None,
              help="Stop after this many generations (counting those before --resume), if the time limit allows.")
@seed_option
@click.option("--population", type=click.IntRange(min=2), default=48, show_default=True,
              help="Individuals alive after each generation (N_p).")
@click.option("--children", type=click.IntRange(min=1), default=None,
              help="New individuals per generation, four per crossover [default: --population].")
@click.option("--workers", type=click.IntRange(1), default=None,
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
@click.option("--mutation-rate", type=FINITE, default=0.1, show_default=True,
              help="P: chance that a CLS/CNT element mutates, and the highest chance of a random pick per schedule step.")
@click.option("--temperature", type=FINITE, default=0.05, show_default=True,
              help="Selection softmax temperature over t_norm (1 = the paper's eq. 1; smaller selects harder).")
@click.option("--refine", type=click.Choice(["cpsat", "none"]), default=DEFAULT_REFINE, show_default=True,
              help="Re-time the search's plans' copies (and evictions) with CP-SAT (hybrid.refine).")
@click.option("--refine-mode", type=click.Choice(["auto", "beside", "after"]), default="auto", show_default=True,
              help="beside: a second process refines the search's best plan and its elites while the search runs "
                   "(the search gets the other cores); after: the search stops at 1 - --refine-share of the budget "
                   "and its best plan is refined. auto: beside where the core it takes would not speed up the search "
                   "(one evaluation under 1 ms, fewer --workers than cores, or --scheduler), else after.")
@click.option("--refine-share", type=FINITE, default=0.2, show_default=True,
              help="after: fraction of --time-limit kept for refinement (beside: sets the patience's scale).")
@patience_option
@click.option("--refine-elites", type=click.IntRange(1), default=4, show_default=True,
              help="beside: how many of the search's best distinct individuals are offered to the refiner after "
                   "each generation (1: its best only).")
@click.option("--checkpoint", "checkpoint_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Save the search here every --checkpoint-every generations and at the end.")
@click.option("--checkpoint-every", type=click.IntRange(min=1), default=10, show_default=True,
              help="Generations between checkpoints.")
@click.option("--resume", "resume_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Continue a checkpoint (its population, random state and search settings) with a new budget; "
                   "a search flag given with a value other than the checkpoint's (--seed, --population, --policy, "
                   "...) is refused.")
@device_options
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Write the best plan here (hybrid-plan/1).")
@click.option("--log", "log_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the convergence log (time, generation, best/mean/worst makespan, the memory they are "
                   "scored on: a headroom search's is less than --memory) as CSV.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Plot best/mean/worst makespan against search time (PNG), like the paper's Figure 9.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the summary table as CSV in seconds and bytes (pandas.read_csv): the written plan's "
                   "row, with --compare-baselines every row; `written` marks the written plan's.")
@click.option("--quiet", is_flag=True, help="No progress line; only the final summary.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as one JSON object on stdout (makespan_s, ideal_s, ideal/makespan, plan, "
                   "memory_bytes, planner, generations, search_s, wall_s, stop_reason, ...) instead of the text.")
@click.option("--arena", "arena_time", default="auto", show_default=True, metavar="auto|TIME|0",
              help="With --byte-budget (or when no plan with offsets fits): a byte-budget plan is written with exact arena offsets (hybrid.arena), so the executor never "
                   "compacts. Where it does not lay out within the memory, its other candidates and re-plans with "
                   "less memory (the search's genes, its population's next best, the Belady planner; bisected to "
                   "the largest budget that lays out) are laid out, then per-size classes; the fastest that fits is "
                   "written and the summary says which fallback fired and its makespan cost. The work is counted "
                   "(re-plans, exact-search nodes), so one seed gives one plan; TIME (e.g. 60s) is only a safety "
                   "cap on it (auto: 60s), within --time-limit: where one layout would not fit in the time left, "
                   "the byte budget is written without offsets and the summary says so, as it is where neither the plan, "
                   "its candidates, the re-plans nor per-size classes lay out. 0, as --no-arena: no "
                   "offsets.")
@click.option("--no-arena", "no_arena", is_flag=True,
              help="Write the byte budget as searched, without offsets (the executor places it, compacting at run "
                   "time if it must): the search's own makespan, no layout fallback. Same as --arena 0.")
@click.option("--addresses/--byte-budget", "addresses", default=False, show_default=True,
              help="--addresses: the planner gives every tensor its arena offset as it plans, so the plan scored is "
                   "the plan written (hybrid/swap/addresses.py); today it loses to the default on most graphs "
                   "measured (docs/arena.md). --byte-budget (the default): the search scores byte budgets (memory "
                   "that never fragments) and the winner is laid out afterwards (--arena), re-planned with less "
                   "memory where it does not fit (the summary says so, with its cost).")
@click.option("--headroom/--no-headroom", "headroom", default=None,
              help="--headroom (the default with --byte-budget, where the plan is laid out): measure up front how much "
                   "memory the seed plans need given up to lay out (hybrid/arena/headroom.py), search byte budgets "
                   "with that much less, lay the winner out within the full memory and re-plan it with what the "
                   "layout leaves. --no-headroom: search with the full memory and lay the winner out afterwards, "
                   "re-planned with less memory where it does not fit (the flow before it). Not with --addresses or "
                   "--no-arena.")
@click.option("--workspaces-aside", "workspaces_aside", is_flag=True,
              help="Plan as the executor runs: the largest op workspace (kernels' scratch, results computed beside "
                   "the pool: `hybrid capture --executor-workspaces`) held aside the whole iteration and the "
                   "tensors planned in the rest, no op adding its own; the largest of the default implementations, "
                   "and an implementation with a larger one is not chosen (where no default states one, the usual "
                   "search). A byte budget counts a workspace only while "
                   "its op runs, so where one is large its plans lay out only with much memory given up; with this "
                   "they need none for it (resnet-50 at 928 MiB with an H200's scratch: 39 ms against 96-107 ms).")
@click.option("--compare-baselines", is_flag=True,
              help="At the end, also plan the baselines of `hybrid baseline` (naive, odswap, odswap-paper, vdnn, "
                   "tflms, belady, recompute-only; strongest first, within the time limit: one not started by then "
                   "is named as left out), laid out as the written plan is, and print one table with them and the "
                   "optimized plan, each ratio column over one named lower bound. A baseline faster than the "
                   "search's laid-out plan is written instead, and said.")
def command(graph_path: Path, time_limit: str, generations: int | None, seed: int, population: int,
            children: int | None, workers: int | None, scheduler: str | None, search: str, pool: str,
            class_mapping: str, start_order: str, policies: tuple[str, ...], recompute: bool, planner_knobs: bool,
            mutation_rate: float, temperature: float, refine: str, refine_mode: str, refine_share: float,
            refine_patience: float, refine_elites: int, checkpoint_path: Path | None, checkpoint_every: int,
            resume_path: Path | None, out_path: Path, log_path: Path | None, plot_path: Path | None,
            csv_path: Path | None, quiet: bool,
            as_json: bool, compare_baselines: bool, arena_time: str, no_arena: bool, addresses: bool,
            headroom: bool | None, workspaces_aside: bool, **kw: object) -> None:
    """Search operator orders and memory pools for the fastest swapping plan.

    A genetic algorithm (SwapAdvisor §5) evolves individuals made of a schedule (a topological order), a pool
    (size classes CLS/CNT, or the plain byte budget) and the planner's eviction policy; the swap planner and
    simulator score each one. The first generation includes the program order with every policy and a
    depth-first order. The search plans with the memory its plans need to lay out given up (--headroom) and the
    winner is given exact arena offsets afterwards, re-planned with what the layout leaves (--no-arena: not);
    where it does not lay out within the memory, the fallback written may be slower (the summary says which
    fallback fired and its makespan cost). With
    --addresses the planner gives every tensor its offset as it plans instead (the plan scored is the plan
    written, baselines laid out the same way, the byte budget shown as the relaxation row). With --refine
    cpsat, CP-SAT re-times the copies of the search's plans: in a second process while the search runs (its
    best plan, and in turn its next-best ones when that stalls) where the search could not use that core (see
    --refine-mode), else after the search, whose best plan is refined until that stops finding anything faster
    (--refine-patience) and the search then resumes with the time left. The fastest plan is kept. Prints a line
    per generation (best, population mean and worst makespan, evaluations per second, time left), and at the
    end the written plan first (makespan, its ratio to the ideal, why it differs from the search's best), the
    lower bound, bytes moved, the search and where the time went (--json: as JSON).

    The whole command ends within --time-limit, its search at --generations, when its best plan reaches the
    lower bound (no plan can be faster), or on Ctrl-C or SIGTERM (as sent by timeout, Slurm, Kubernetes): then
    the best plan so far is written and the exit status is 0, laid out by the layout's heuristics where they take
    under 3 s here, else without offsets (during the setup, before the search has a plan, nothing is written and
    the exit status is 130, or 143 for SIGTERM). Output paths are checked (their folders created)
    before any work starts. Exit status 2: a user error (a bad flag or file, no plan fits), nothing written; 1:
    a refined plan failed validation, the search's own valid best plan was written instead.

    The same --seed and --generations give the same search, whatever --workers or --scheduler (evaluation is
    deterministic; only speed differs). How far CP-SAT gets within the time limit, and (beside) which of the
    search's plans it reaches, depends on timing; for a plan fixed by the seed use --refine none, with a time
    limit that leaves room for every step (a step it cannot fit, such as the headroom's calibration, is left
    out and named under "left out", and the plan written then differs).
    From Python: hybrid.pipeline.run_optimize.

    \b
    Examples:
      hybrid optimize --graph g.json --time-limit 30m --out plan.json
      hybrid optimize --graph g.json --time-limit 5m --memory 8GiB --log conv.csv --plot conv.png --out plan.json
      hybrid optimize --graph g.json --time-limit 2h --scheduler tcp://head:8786 --checkpoint ga.ckpt --out plan.json
      hybrid optimize --graph g.json --time-limit 1h --resume ga.ckpt --checkpoint ga.ckpt --out plan.json
    """
    from ga import GAConfig
    from ga.progress import ProgressLine
    from hybrid.pipeline import OptimizeOptions, Progress, run_optimize
    from hybrid.signals import deferred_interrupts, exit_status, interrupted_by

    # the limit counts from the process's start (interpreter, imports, loading): hybrid.cli.clock
    started = clock.started()
    total = parse_duration(time_limit, "--time-limit")
    if total <= 0:
        raise HybridError(f"--time-limit must be positive, got {time_limit!r}")
    arena_s: float | None = (None if no_arena else ARENA_AUTO_S if arena_time.strip().lower() == "auto"
                             else parse_duration(arena_time, "--arena"))
    if addresses and not arena_s:
        raise HybridError("--addresses plans every offset as it walks (its plans are arenas): --no-arena (--arena 0) "
                          "cannot write them without offsets; give one or the other")
    if arena_s is not None and arena_s < 0:
        raise HybridError(f"--arena must be auto, a duration such as 60s, or 0 to write no offsets; got {arena_time!r}")
    config = GAConfig(population=population, children=children or population, mutation_rate=mutation_rate,
                      schedule_mutation_rate=mutation_rate, temperature=temperature, search=search,  # type: ignore[arg-type]
                      pool=pool, seed=seed, planner_knobs=planner_knobs, class_mapping=class_mapping, start=start_order,
                      **({"policies": policies} if policies else {}))  # type: ignore[arg-type]
    opts = OptimizeOptions(config=config, generations=generations, workers=workers, scheduler=scheduler,
                           recompute=recompute, refine=refine, refine_mode=refine_mode, refine_share=refine_share,
                           refine_patience=refine_patience, refine_elites=refine_elites, checkpoint=checkpoint_path,
                           checkpoint_every=checkpoint_every, resume=resume_path, arena_s=arena_s or None,
                           baselines=compare_baselines, addresses=addresses, headroom=headroom,
                           workspaces_aside=workspaces_aside)
    opts.check()
    for path, flag in ((out_path, "--out"), (log_path, "--log"), (plot_path, "--plot"), (csv_path, "--csv"),
                       (checkpoint_path, "--checkpoint")):
        prepare_output(path, flag, figure=flag == "--plot")  # a bad folder fails now, not after the search
    if resume_path is not None:
        _resume_keeps_its_settings(resume_path, config)
    graph = load_graph(graph_path)
    device = device_from(graph, kw)
    line = None if quiet else ProgressLine()
    last = [0.0]

    def refine_line(p) -> None:  # noqa: ANN001 - hybrid.refine.RefineProgress
        if time.monotonic() - last[0] >= 5.0:
            last[0] = time.monotonic()
            click.echo(f"refine {format_seconds(p.elapsed_s)}: makespan {format_seconds(p.makespan)} (from "
                       f"{format_seconds(p.initial_makespan)}), {counted(p.windows, 'window')}, {p.accepted} accepted", err=True)

    def on_generation(stats, left: float) -> None:  # noqa: ANN001 - ga.progress.GenerationStats
        line.time_left = lambda: left
        line(stats)

    progress = Progress(on_generation=None if quiet else on_generation, on_refine=None if quiet else refine_line,
                        on_note=None if quiet else (lambda text: click.echo(text, err=True)),
                        on_phase_end=None if quiet else line.close,
                        on_plan=lambda plan: (plan.save(out_path), saved.append(True)))
    saved: list[bool] = []   # a plan was written (the interrupt line says so)
    try:
        res = run_optimize(graph, device, total, opts, progress, started_at=started, after_s=EXIT_S)
    except KeyboardInterrupt:
        # during the setup (kernels, headroom, the bound) the search has no plan yet: said, not a bare "interrupted"
        what = (f": the plan written last is in {out_path}" if saved else
                f" during the setup, before the search's first plan: nothing written to {out_path} (a stop once "
                "the search has started writes its best plan)")
        click.echo(f"interrupted ({interrupted_by()}){what}", err=True)
        sys.exit(exit_status())
    with deferred_interrupts():
        if log_path is not None:
            res.search.log.to_csv(log_path)
        if csv_path is not None:
            from hybrid.files import write_whole

            write_whole(csv_path, res.frame(graph).to_csv(index=False))
        if plot_path is not None:
            bound = res.bound()
            res.search.log.plot(plot_path, title=f"{graph.name} on {device.name}", ideal_s=res.plan.metrics.get(
                "ideal_s"), lower_bound_s=bound[0] if bound else None)
        wrote = [p for p in (out_path, log_path, plot_path, csv_path) if p is not None]
        if as_json:
            summary = {**json_summary(graph, device, res.plan, out_path),
                       **optimize_json(res, time.monotonic() - started),
                       "log": str(log_path) if log_path else None, "plot": str(plot_path) if plot_path else None}
            click.echo(report_json(summary, indent=1))
        else:
            click.echo(optimize_text(graph, device, res, wrote, time.monotonic() - started))
    if res.interrupted:
        click.echo(f"interrupted ({interrupted_by()}): wrote the best plan so far to {out_path}", err=True)
    for f in res.failures:
        click.echo(f"error: {f}; wrote the search's own valid best plan instead; please report this with the graph "
                   "file", err=True)
    if res.failures:
        sys.exit(1)


# the flags that set the search's settings (ga.GAConfig): a resume keeps its checkpoint's
_SEARCH_FLAGS = {"population": "population", "children": "children", "mutation_rate": "mutation_rate",
                 "temperature": "temperature", "search": "search", "pool": "pool", "seed": "seed",
                 "planner_knobs": "planner_knobs", "class_mapping": "class_mapping", "start_order": "start",
                 "policies": "policies"}


def _resume_keeps_its_settings(resume_path: Path, config: object) -> None:
    """A search flag given with --resume and another value than the checkpoint's: refused (it was ignored
    silently: `--seed 3 --resume ck` ran the checkpoint's seed 1)."""
    from click.core import ParameterSource

    from ga.checkpoint import checkpoint_config

    ctx = click.get_current_context()
    given = [p for p in ctx.command.params if p.name in _SEARCH_FLAGS
             and ctx.get_parameter_source(p.name) not in (ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP, None)]
    theirs = checkpoint_config(resume_path) if given else None
    for param in given:
        field = _SEARCH_FLAGS[param.name]
        mine, ck = getattr(config, field), getattr(theirs, field)
        if mine == ck or (field == "pool" and mine == "both" and ck == "bytes"):
            continue   # --pool both falls back to bytes where no size-class pool fits (ga.optimize), and is saved so
        flag = max(param.opts, key=len)
        if isinstance(mine, bool):   # --planner-knobs / --no-planner-knobs
            on, off = param.opts[0], param.secondary_opts[0]
            said, there = (on, off) if mine else (off, on)
        else:
            shown = (lambda v: ",".join(v)) if field == "policies" else str
            said, there = f"{flag} {shown(mine)}", f"{flag} {shown(ck)}"
        raise HybridError(f"{said} with --resume {resume_path}: a resumed search keeps its checkpoint's settings "
                          f"({there} there); leave {said.split()[0]} out, or start a new search without --resume")
