"""`hybrid frontier --graph G --out DIR`: step time against memory over a sweep of memories (hybrid.report.frontier)."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from hybrid.cli.options import device_from, device_options, graph_option, load_graph, prepare_output, seed_option
from hybrid.errors import HybridError
from hybrid.pipeline.optimize import refine_available
from hybrid.units import format_bytes, format_bytes_up, format_seconds, parse_duration


@click.command("frontier")
@graph_option
@click.option("--memories", "memories", multiple=True, metavar="SIZES",
              help="Memories to plan at, comma-separated or repeated: sizes (64MiB) or percentages of the unswapped "
                   "peak (40%). Each is what a plan may fill; the device's --reserve is kept aside. [default: "
                   "--steps memories evenly spaced from the largest single op's bytes, below which no plan runs, "
                   "to the unswapped peak, where nothing need be swapped]")
@click.option("--steps", type=click.IntRange(2, 100), default=10, show_default=True,
              help="Memories in the default sweep, both ends included.")
@click.option("--time-limit-per-point", "per_point", default="20s", show_default=True,
              help="Wall time of `hybrid optimize` at each memory (its --time-limit), e.g. 20s, 2m.")
@click.option("--generations", type=click.IntRange(1), default=None,
              help="Stop each point's search after this many generations (with --refine none: one plan per seed, "
                   "whatever the machine's speed), if its time limit allows every step: a point that leaves a step out "
                   "says so in its note.")
@click.option("--refine", type=click.Choice(["cpsat", "none"]), default="cpsat" if refine_available() else "none",
              show_default=True, help="CP-SAT refinement at each point, as `hybrid optimize --refine`.")
@click.option("--recompute/--no-recompute", default=True, show_default=True,
              help="Let the plans rerun ops instead of swapping (as `hybrid optimize`).")
@click.option("--no-arena", "no_arena", is_flag=True,
              help="Write each point's byte budget as searched, without arena offsets (as `hybrid optimize "
                   "--no-arena`); by default each plan is laid out as `hybrid optimize` does.")
@click.option("--workers", type=click.IntRange(1), default=None,
              help="Evaluation processes per point [default: as `hybrid optimize` decides].")
@click.option("--points", "point_paths", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Another graph or plan file to show as one point (repeatable): a graph at its own unswapped peak "
                   "and compute time (e.g. the same step captured with torch.utils.checkpoint), a plan of --graph "
                   "(validated against it) at the peak bytes and makespan of its events.")
@seed_option
@device_options(memory=False)   # the sweep sets the memory (--memories)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder for frontier.csv, frontier.parquet, frontier.png and each point's plan (plans/, named "
                   "by memory in MiB). The plans a previous frontier.csv there lists are replaced.")
def command(graph_path: Path, memories: tuple[str, ...], steps: int, per_point: str, generations: int | None,
            refine: str, recompute: bool, no_arena: bool, workers: int | None, point_paths: tuple[Path, ...], seed: int,
            out_dir: Path, **kw: object) -> None:
    """Step time against device memory: the plan `hybrid optimize` writes at each memory of a sweep, the lower
    bounds no plan can beat, and other graphs' plans as points.

    \b
    The table (frontier.csv and .parquet) has a row per point, by kind:
      plan   `hybrid optimize` at that memory within --time-limit-per-point (makespan_s), and best_s, the
             fastest plan of the sweep that fits that memory (a plan for less memory fits more): best_s never
             rises with memory; a row whose own plan is slower says so in its note, as does a memory no plan fits;
             laid_out is false for a plan written without arena offsets (hollow in the plot; its note says why)
      bound  the any-order lower bounds (with recompute, and swap only) at each memory (`hybrid info`), in
             bound_s; a plan row's bound_s is the one that holds for it (swap only with --no-recompute)
      point  each --points file: a graph at its unswapped peak and compute time, a plan of --graph at its peak
             and makespan
    usable_bytes is the memory a row's plan may fill (--reserve kept aside: unlike compare's memory_bytes,
    the device's). Each row also records the sweep's seed, time_limit_per_point_s, recompute, refine, generations and device.
    frontier.png draws them. Progress goes to stderr, a line per memory. Ctrl-C or SIGTERM stops the point
    being searched with its best plan so far and writes the points done (exit 130 or 143). Where no plan fits
    at any memory of the sweep, the table is written and the command exits 1.

    \b
    Examples:
      hybrid frontier --graph resnet18.json --time-limit-per-point 30s --out frontier/
      hybrid frontier --graph g.json --memories 25%,50%,75%,100% --points g-checkpointed.json --out f/
    """
    from hybrid.pipeline import OptimizeOptions
    from hybrid.report import frontier as fr
    from hybrid.signals import deferred_interrupts, exit_status, interrupted_by, start_forkserver
    import pandas as pd
    from ga import GAConfig

    if kw.get("memory") is not None:   # the sweep sets each point's memory: a --memory would be ignored
        raise HybridError("--memory: frontier sweeps memories; give --memories (sizes, e.g. 64MiB, or percentages "
                          "of the unswapped peak, e.g. 50%)")
    per_point_s = parse_duration(per_point, "--time-limit-per-point")
    if per_point_s <= 0:
        raise HybridError(f"--time-limit-per-point must be positive, got {per_point!r}")
    prepare_output(out_dir, "--out", folder=True)
    for p in point_paths:
        if not p.is_file():
            raise HybridError(f"--points {p}: no such file")
    graph = load_graph(graph_path)
    device = device_from(graph, kw)
    lo, peak = fr.memory_range(graph, device)
    mems = fr.parse_memories(memories, peak) if memories else fr.default_memories(graph, device, steps)
    if not mems:
        raise HybridError("--memories: no memory given; e.g. --memories 64MiB,128MiB or --memories 50%")
    if mems[-1] < lo:   # below the largest op no plan runs: nothing to search
        raise HybridError(f"--memories: every memory is below {format_bytes_up(lo)}, the largest single op's bytes, "
                          f"with less than which no plan runs; give memories from {format_bytes_up(lo)} to "
                          f"{format_bytes(peak)} (the unswapped peak), e.g. --memories 50%,100%")
    points = [fr.point_row(p, graph, device) for p in point_paths]   # read now: a bad file fails before the sweep
    opts = OptimizeOptions(config=GAConfig(seed=seed), generations=generations, workers=workers, recompute=recompute,
                           refine=refine, **({"arena_s": None} if no_arena else {}))
    opts.check()
    plan_dir = out_dir / "plans"   # made with the first plan saved
    written = {(plan_dir / n).resolve() for n in fr.plan_names(mems).values()}
    clash = next((q for q in point_paths if q.resolve() in written), None)
    if clash is not None:   # the sweep would write its own plan over the point it shows
        raise HybridError(f"--points {clash}: this sweep writes its plan at that memory to that file; copy the point "
                          "elsewhere first, or give another --out")
    given_points = {q.resolve() for q in point_paths}   # a previous plan given as a point stays
    stale = [q for q in fr.previous_plans(out_dir) if q.resolve() not in given_points]   # removed when this
    #                                                            sweep writes its own (fr.sweep)
    say = (lambda msg: click.echo(msg, err=True))
    say(f"frontier of {graph.name}: {len(mems)} memories from {format_bytes(mems[0])} to {format_bytes(mems[-1])} "
        f"(largest op {format_bytes(lo)}, unswapped peak {format_bytes(peak)}), "
        f"{format_seconds(per_point_s)} each, seed {seed}")
    start_forkserver()   # worker processes then leave SIGTERM and Ctrl-C to this process
    done = fr.sweep(graph, device, mems, per_point_s, opts, say, plan_dir, stale)
    with deferred_interrupts():
        if not done.plans:   # the sweep saved none, so removed none: the new table lists none of them
            fr.remove_plans(stale)
        df = fr.frame(done.rows + points + fr.bound_rows(graph, device, mems), graph, recompute)   # best_s: monotone
        df["seed"] = seed
        df["time_limit_per_point_s"] = per_point_s
        df["recompute"] = recompute
        df["refine"] = refine
        df["generations"] = pd.array([generations] * len(df), dtype="Int64")   # empty where not given
        df["device"] = device.name
        paths = write(df, out_dir, f"{graph.name}: step time against memory ({format_seconds(per_point_s)} a point)")
    plans = df[df["kind"].isin(["plan", "point"])]   # the sweep's plans, then the --points (as in the CSV)
    shown = plans.assign(memory=plans["usable_bytes"].map(format_bytes), makespan_ms=plans["makespan_s"] * 1e3,
                         best_ms=plans["best_s"] * 1e3, bound_ms=plans["bound_s"] * 1e3)
    # the notes under the table, a line each: as a column they were right-aligned and padded to the longest
    # (hundreds of characters), and the table wrapped on every row
    click.echo(shown[["memory", "makespan_ms", "best_ms", "bound_ms", "makespan/ideal"]]
               .to_string(index=False, na_rep="-", float_format=lambda v: f"{v:.4g}"))
    for mem, note in zip(shown["memory"], shown["note"].fillna("").astype(str)):
        if note:
            click.echo(f"  {mem}: {note}")
    click.echo("wrote " + ", ".join(str(p) for p in paths))
    if done.interrupted:
        n = len(done.rows)
        click.echo(f"interrupted ({interrupted_by()}): wrote the {n} point{'s' if n != 1 else ''} done of "
                   f"{len(mems)}", err=True)
        sys.exit(exit_status())
    if not plans["makespan_s"].notna().any():
        click.echo(f"error: no plan fits at any memory of the sweep ({format_bytes(mems[0])} to "
                   f"{format_bytes(mems[-1])}; the unswapped peak is {format_bytes(peak)}): the table says why at "
                   "each; give larger --memories", err=True)
        sys.exit(1)


def write(df, out_dir: Path, title: str) -> list[Path]:  # noqa: ANN001 - a pandas DataFrame
    """frontier.csv, frontier.parquet and frontier.png in `out_dir`, each whole or not at all (hybrid.files)."""
    from hybrid.files import atomic_open
    from hybrid.serve.plot import plot_frontier

    paths = [out_dir / "frontier.csv", out_dir / "frontier.parquet", out_dir / "frontier.png"]
    with atomic_open(paths[0], "w", newline="") as f:
        df.to_csv(f, index=False)
    with atomic_open(paths[1], "wb") as f:
        df.to_parquet(f, index=False)
    plot_frontier(df, paths[2], title)
    return paths
