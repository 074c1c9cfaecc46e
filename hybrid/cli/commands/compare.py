"""`hybrid compare --graph g.json --time-limit 10m --seeds 1,2,3`: GA-only against GA + CP-SAT refinement
(and, with --with-milp, the MO-SOS MILP)."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click

from hybrid.cli.options import (FINITE, device_from, device_options, load_graph, patience_option, prepare_output,
                                recompute_option)
from hybrid.errors import HybridError
from hybrid.units import format_seconds, parse_duration


def _seeds(text: str) -> tuple[int, ...]:
    try:
        seeds = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise HybridError(f"--seeds must be comma-separated integers, e.g. 1,2,3, got {text!r}") from None
    if not seeds:
        raise HybridError("--seeds needs at least one seed, e.g. 1,2,3")
    from hybrid.report.compare import check_seeds

    check_seeds(seeds)   # here, before any graph is read or run
    return seeds


def _fraction_fits(g, dev, fraction: float) -> None:  # noqa: ANN001 - Graph, Device
    """HybridError naming --memory-fraction where it leaves less than the graph's largest op needs at once (no
    plan runs there; a fraction rounding to 0 bytes failed as an unnamed device error)."""
    import math

    from hybrid.graph.info import fraction_of_peak, largest_op, unswapped_peak
    from hybrid.units import format_bytes

    have = fraction_of_peak(g, fraction)
    i, need = largest_op(g, dev.alignment_bytes)
    if have >= max(need, 1):
        return
    least = max(need, 1) / max(1, unswapped_peak(g))
    step = 10.0 ** (math.floor(math.log10(least)) - 2)
    least = math.ceil(least / step) * step   # rounded up to 3 digits: the fraction printed is enough
    raise HybridError(f"--memory-fraction {fraction:g} leaves {format_bytes(have)} for {g.name!r}, less than its "
                      f"largest op {g.ops[i].id!r} needs at once ({format_bytes(need)}); give --memory-fraction "
                      f"{least:.3g} or more")


@click.command("compare")
@click.option("--graph", "graph_paths", required=True, multiple=True,
              type=click.Path(dir_okay=False, path_type=Path), help="Graph file (repeat for several graphs).")
@click.option("--time-limit", default="10m", show_default=True,
              help="Wall time per arm and seed, e.g. 2m, 10m; a bare number is seconds. Both arms get this budget; "
                   "the table's wall_s column says what each used. With --generations, a safety net per phase.")
@click.option("--seeds", default="1,2,3", show_default=True, help="Seeds, comma-separated; medians over them.")
@click.option("--refine-mode", type=click.Choice(["auto", "beside", "after"]), default="auto", show_default=True,
              help="How the GA+CP-SAT arm refines, as in `hybrid optimize`: beside the search in a second process, "
                   "or after it (auto: per graph, as `hybrid optimize --refine-mode auto` decides).")
@click.option("--refine-share", type=FINITE, default=0.2, show_default=True,
              help="after: part of the budget the GA+CP-SAT arm gives to refinement (the GA-only arm keeps "
                   "searching); beside: sets the patience's scale.")
@patience_option
@click.option("--refine-elites", type=click.IntRange(1), default=4, show_default=True,
              help="beside: the search's best distinct individuals offered to the refiner per generation.")
@click.option("--workers", type=click.IntRange(1), default=None,
              help="GA evaluation processes in both arms (CP-SAT uses one thread); beside, GA-only gets one more, "
                   "the core the refiner uses in the other arm. Default: as `hybrid optimize` picks per graph "
                   "(1 where one evaluation takes under 1 ms, else every core but the refiner's).")
@click.option("--population", type=click.IntRange(min=2), default=None, help="GA population (default: the GA's, 48).")
@click.option("--generations", type=click.IntRange(1), default=None,
              help="Budget both arms in counted work instead of wall time, with --windows (both or neither): the "
                   "GA runs (1 - --refine-share) of N generations to the split, GA-only resumes it to N, GA+CP-SAT "
                   "refines with at most --windows CP-SAT windows and hands unused ones back as generations. "
                   "Makes the run reproducible: a seed fixes every figure but the seconds, whatever the load. "
                   "Runs --refine-mode after; --time-limit is then a safety net per phase.")
@click.option("--windows", type=click.IntRange(1), default=None,
              help="With --generations: the CP-SAT windows the GA+CP-SAT arm may solve after the split.")
@recompute_option
@click.option("--with-milp", "with_milp", default=None, metavar="TIME",
              help="Add the MO-SOS MILP (hybrid milp, HiGHS) as a third arm with this time limit, e.g. 2m: one "
                   "row per graph (no seed), gain_vs_ga against the median GA-only plan.")
@click.option("--milp-stages", type=click.IntRange(1), default=None,
              help="--with-milp: coarsen to this many stages (default: one per op up to 60 ops, else 60).")
@click.option("--memory-fraction", type=FINITE, default=None,
              help="Device memory as a fraction of each graph's unswapped peak (overrides --memory), e.g. 0.25: "
                   "what a plan may fill, as with --memory (a --reserve given is kept aside on top).")
@device_options
@click.option("--out-dir", "--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=Path("compare"),
              show_default=True, help="Folder for both arms' plans and the table (compare.csv/.parquet/.md); --out, "
                                      "as the other commands spell it, is the same.")
def command(graph_paths: tuple[Path, ...], time_limit: str, seeds: str, refine_mode: str, refine_share: float,
            refine_patience: float, refine_elites: int, workers: int | None,
            population: int | None, generations: int | None, windows: int | None, recompute: bool,
            with_milp: str | None, milp_stages: int | None, memory_fraction: float | None, out_dir: Path, **kw) -> None:
    """Does CP-SAT refinement beat spending the same time on more genetic search?

    For each graph and seed, with --refine-mode beside, the same search
    (same seed) runs twice for the whole budget: alone, with one more
    evaluation process, and with a CP-SAT refiner process beside it (its
    best plan and elites), keeping the faster plan; both use the same cores. With --refine-mode after, the GA runs for (1 -
    --refine-share) of the budget; then one arm refines its best plan with
    CP-SAT for the rest (and resumes the search if refinement stalls, as
    `hybrid optimize` does) and the other resumes the same search for the
    same time. Both plans are
    validated and written to --out-dir, with a table (CSV, Parquet, Markdown)
    of makespan, ratio to the ideal and to the lower bound, stall, bytes moved
    and search and wall time per seed, plus medians. From Python: hybrid.report.compare.compare
    returns the same table as a pandas DataFrame.

    Both arms search from the planner options `hybrid optimize` uses, and
    their plans are byte budgets without offsets (as `hybrid optimize
    --no-arena`): this compares the search against search + refinement, not
    written plans; `hybrid optimize` lays its plan out, which can cost some
    makespan (its summary says how much). With
    --generations and --windows the arms are budgeted in counted work
    (after mode), so the same seeds give the same plans on any machine.

    Ctrl-C or SIGTERM stops it: the runs completed so far are written (table
    and plans) and the exit status is 130 or 143, since the comparison is
    incomplete.

    \b
    Examples:
      hybrid compare --graph g.json --time-limit 10m --seeds 1,2,3
      hybrid compare --graph a.json --graph b.json --time-limit 2m --memory-fraction 0.25 --out-dir cmp
      hybrid compare --graph g.json --time-limit 1m --seeds 1 --with-milp 2m --memory-fraction 0.5
      hybrid compare --graph g.json --generations 200 --windows 20 --time-limit 30m --seeds 1,2,3
    """
    import pandas as pd

    from ga import GAConfig
    from hybrid.report.compare import compare, planner_options, printable, summary, write_tables
    from hybrid.graph.info import fraction_of_peak

    import sys

    from hybrid.signals import deferred_interrupts, exit_status, interrupted_by, start_forkserver

    total = parse_duration(time_limit, "--time-limit")
    if total <= 0:
        raise HybridError(f"--time-limit must be positive, got {time_limit!r}")
    seed_list = _seeds(seeds)
    milp_s = parse_duration(with_milp, "--with-milp") if with_milp is not None else None
    if milp_s is not None and milp_s <= 0:
        raise HybridError(f"--with-milp must be positive, got {with_milp!r}")
    if milp_stages is not None and milp_s is None:
        raise HybridError("--milp-stages needs --with-milp TIME")
    if memory_fraction is not None and not 0 < memory_fraction:
        raise HybridError(f"--memory-fraction must be positive, got {memory_fraction}")
    if (generations is None) != (windows is None):
        raise HybridError("give --generations and --windows together (a work budget for both arms), or neither")
    if generations is not None and refine_mode == "beside":
        raise HybridError("--generations and --windows run the after protocol (beside, the refiner races the "
                          "search on wall time); give --refine-mode after or auto, or drop the work budget")
    work = {} if generations is None else {"generations": generations, "windows": windows}
    prepare_output(out_dir, "--out-dir", folder=True)  # a bad folder fails now, not after the runs
    cfg = GAConfig() if population is None else GAConfig(population=population, children=population)
    graphs = []
    for path in graph_paths:  # every file and flag checked before the first run
        g = load_graph(path)
        dev = device_from(g, dict(kw))
        if memory_fraction is not None:   # what a plan may fill, as --memory says it: no reserve unless --reserve
            reserve = dev.reserve_bytes if kw.get("reserve") is not None else 0
            _fraction_fits(g, dev, memory_fraction)
            dev = replace(dev, memory_bytes=fraction_of_peak(g, memory_fraction) + reserve, reserve_bytes=reserve)
        graphs.append((g, dev))
    start_forkserver()  # worker processes then leave SIGTERM and Ctrl-C to this process
    tables = []
    interrupted = False
    try:
        for g, dev in graphs:
            from hybrid.pipeline import split_cores

            # as `hybrid optimize` places the search and the refiner (the GA-only arm gets one more process beside)
            beside, graph_workers, _ = split_cores(g, dev, True, "after" if work else refine_mode, workers)
            mode = "beside" if beside else "after"
            t = compare(g, dev, time_limit_s=total, seeds=seed_list, refine_share=refine_share,
                        workers=int(graph_workers or 1), out_dir=out_dir, ga_config=cfg, patience=refine_patience,
                        mode=mode, elites=refine_elites, progress=lambda msg: click.echo(msg, err=True),
                        options=planner_options(recompute),   # as `hybrid optimize` searches
                        milp_time_s=milp_s, milp_stages=milp_stages, **work)
            tables.append(t)
            if t.attrs.get("interrupted"):
                interrupted = True
                break
    except KeyboardInterrupt:
        if not tables:   # a seed's rows are its two arms: an arm alone is not a comparison
            click.echo("no seed completed both arms before the interrupt: no table written", err=True)
            raise
        interrupted = True
    with deferred_interrupts():
        df = pd.concat(tables, ignore_index=True)
        budget = (f"Budget {format_seconds(total)} per arm and seed (each arm's wall_s says what it used); "
                  if not work else
                  f"Budget {generations} generations and {windows} CP-SAT windows per arm and seed, "
                  f"{format_seconds(total)} per phase as a safety net (the budget column says if it cut one); ")
        paths = write_tables(df, out_dir / "compare", "GA-only vs GA + CP-SAT at equal "
                             + ("wall time" if not work else "work"), budget
                             + f"refinement {refine_mode} (see the mode column), share "
                             f"{refine_share}, patience {refine_patience}"
                             + (f", {refine_elites} elites offered" if refine_mode == "beside" else "")
                             + "; workers: see the workers column. Plans: byte budgets without offsets "
                             "(as `hybrid optimize --no-arena`), not laid out."
                             + (f" Arm milp: the MO-SOS MILP, HiGHS {format_seconds(milp_s)}, one run per graph "
                                "(search_s = solve time)." if milp_s is not None else "")
                             + ("\n\nIncomplete: interrupted before every graph and seed had run." if interrupted
                                else ""))
        s = summary(df)
        click.echo(printable(s).to_markdown(index=False, floatfmt=".4g"))
        click.echo("plans: byte budgets without offsets (as hybrid optimize --no-arena), not laid out; hybrid "
                   "optimize's written plan is laid out and may be slower")
        click.echo("wrote " + ", ".join(str(p) for p in paths))
    if interrupted:
        runs = int(((df["row"] == "seed") & (df["arm"] == "ga")).sum())
        click.echo(f"interrupted ({interrupted_by()}): wrote the {runs} completed run{'s' if runs != 1 else ''} "
                   f"(graph and seed, both arms) to {out_dir}", err=True)
        sys.exit(exit_status())
