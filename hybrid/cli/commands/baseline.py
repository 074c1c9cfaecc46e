"""`hybrid baseline --kind naive|odswap|odswap-paper|vdnn|tflms|belady|recompute-only|ideal --graph G --out P`."""
from __future__ import annotations

from pathlib import Path

import click

from hybrid.swap.baselines import BASELINES, run_baseline
from hybrid.errors import HybridError, InfeasibleError
from hybrid.cli.options import (device_from, device_options, graph_option, json_summary, load_graph,
                                prepare_output, recompute_option)
from hybrid.report.summary import any_order_bound, plan_row, table
from hybrid.validator import write_plan
from hybrid.jsonio import report_json
from hybrid.files import write_whole


@click.command("baseline")
@click.option("--kind", "kinds", multiple=True, type=click.Choice(BASELINES), default=("belady",), show_default=True,
              help="Which baseline (repeat for several; with several, --out is a folder).")
@graph_option
@device_options
@click.option("--out", "out_path", type=click.Path(path_type=Path), default=None,
              help="Write the plan here (hybrid-plan/1); with several --kind, a folder (made if missing) that gets "
                   "KIND.json for each.")
@recompute_option
@click.option("--no-arena", "no_arena", is_flag=True,
              help="Write each baseline's byte budget as planned, without offsets (the executor places it, "
                   "compacting at run time if it must). By default each (but ideal) is laid out in one arena as "
                   "`hybrid optimize --compare-baselines` lays its rows out: re-planned by its own rules with less "
                   "memory where its byte budget does not lay out, a note saying what that cost (and where no "
                   "layout fits, the byte budget written, said).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed of odswap-paper's random topological order (the other kinds are deterministic; "
                   "`optimize --compare-baselines` and the benchmarks use 0): the same seed gives the same plan.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as JSON on stdout: {\"plans\": [one object per kind: kind, makespan_s, ideal_s, "
                   "ideal/makespan, plan, ...], \"failed\": [...]}.")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the table as CSV, one row per kind, in seconds and bytes (pandas.read_csv).")
def command(kinds: tuple[str, ...], graph_path: Path, out_path: Path | None, recompute: bool, no_arena: bool,
            seed: int, as_json: bool, csv_path: Path | None, **kw) -> None:
    """Plan with an obvious alternative, to compare optimized plans against.

    \b
    naive   schedule order, copies on demand, LRU eviction, nothing overlapped
    odswap  LRU on demand, then replayed with prefetch (its 2nd iteration),
            on the program order, memory re-bound in time order
    odswap-paper
            ODSwap as SwapAdvisor's paper ran it: a random topological order
            (MXNet's default), plain LRU, no re-binding
    vdnn    persistent tensors stay resident; activations swap (Belady), prefetch
    tflms   TensorFlow LMS's rewrite: forward activations the backward pass
            reads go out after their last forward use and come back one op
            before their first backward use; nothing else moves
    belady  this project's swap planner on the program order; with --recompute
            (the default) it may also drop and recompute, where that is faster
    recompute-only
            Checkmate-style: activations are recomputed or kept, never swapped
    ideal   unlimited memory: compute time only

    --recompute applies to belady only; the others model systems that swap only. Each plan written but
    ideal's has an arena offset for every tensor (as every row of `optimize --compare-baselines`), so the
    executor runs it as planned, without compaction; where no layout fits, the byte budget is written and a
    note says so; --no-arena writes byte budgets. The layout is optimize's for its baseline rows (heuristics,
    re-plans bisected coarsely; the file's planner.fallback names the byte budget re-planned with): `hybrid
    arena --plan` on a --no-arena plan searches longer and may give up less memory. With several --kind, one
    that cannot run at this memory is skipped with a warning naming it and why (the others' plans are written,
    exit 0); with one, or when none can run, it is an error (exit 2).
    """
    prepare_output(out_path, "--out", folder=len(kinds) > 1)  # a bad folder fails before any planning
    prepare_output(csv_path, "--csv")
    g = load_graph(graph_path)
    dev = device_from(g, kw)
    from hybrid.pipeline.kernels import compile_if_first_run

    compile_if_first_run(lambda line: click.echo(line, err=True), arena=not no_arena)
    rows = []
    summaries = []
    failed: list[str] = []
    notes: list[str] = []
    skipped: list[tuple[str, str]] = []   # with several kinds, one that cannot run here is skipped: warned, exit 0
    for kind in kinds:
        try:
            plan = run_baseline(g, dev, kind, recompute=recompute, seed=seed)
            if not no_arena and kind != "ideal":
                plan = _laid_out(g, dev, kind, plan, recompute, notes)
        except InfeasibleError as e:
            if len(kinds) == 1:
                raise
            failed.append(f"{kind}: cannot run: {e}")
            skipped.append((kind, str(e)))
            continue
        # every row divides by the bounds of the memory given (a re-planned row's own device is that one too);
        # ideal plans with unlimited memory, which no bound of this memory holds for
        rows.append(plan_row(kind, plan, g, {} if kind == "ideal" else
                             {rc: any_order_bound(g, dev, rc) for rc in (True, False)}))
        said = [n for n in notes if n.startswith(f"{kind}: ")]
        target = None
        if out_path is not None:
            target = out_path / f"{kind}.json" if len(kinds) > 1 else out_path
            write_plan(g, plan, target, f"the {kind} plan")
        summaries.append({"kind": kind, **json_summary(g, dev, plan, target),
                          "notes": [n.split(": ", 1)[1] for n in said]})
    if csv_path is not None and rows:
        import pandas as pd

        write_whole(csv_path, pd.DataFrame(rows).to_csv(index=False))
    if as_json:
        click.echo(report_json({"plans": summaries, "failed": failed}, indent=1))
    elif rows:
        click.echo(table(rows))
        for line in notes:
            click.echo(f"note: {line}")
    for kind, why in skipped:
        written = f" ({kind}.json)" if out_path is not None else ""
        click.echo(f"warning: --kind {kind} skipped, no plan written{written}: {why}"
                   + ("; the other kinds ran" if rows else ""), err=True)
    if not rows:
        raise HybridError("no baseline could run at this memory; give more --memory")


def _laid_out(graph, device, kind: str, plan, recompute: bool, notes: list[str]):  # noqa: ANN001, ANN202
    """`plan` with arena offsets (`hybrid.pipeline.baselines.lay_out_baseline`, as optimize's baseline rows): where
    its byte budget does not lay out, the same baseline re-planned with less memory, and a note says at what
    cost; where nothing lays out, the byte budget, and a note says it is written without offsets."""
    from hybrid.pipeline.baselines import lay_out_baseline
    from hybrid.units import format_seconds

    if plan.allocation.kind != "unconstrained":
        return plan
    try:
        lay = lay_out_baseline(graph, device, kind, plan, recompute=recompute)
    except InfeasibleError as e:   # as optimize writes its own plan then: the byte budget, and says so
        notes.append(f"{kind}: written without offsets, the executor compacts at run time if it must ({e})")
        return plan
    if lay.fallback or lay.capped:   # Layout.describe: the fallback, its cost, and a time cap that bound
        notes.append(f"{kind}: {lay.describe()}, from its byte budget's {format_seconds(lay.makespan_before_s)}; "
                     "--no-arena writes the byte budget")
    return lay.plan
