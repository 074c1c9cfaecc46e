"""`hybrid refine --graph G --plan P --time-limit 2m --out P2`: CP-SAT refinement of any plan's swaps."""
from __future__ import annotations

import time
from pathlib import Path

import click

from hybrid.cli import clock
from hybrid.cli.options import graph_option, json_summary, load_graph, load_plan, prepare_output, seed_option
from hybrid.errors import HybridError
from hybrid.units import counted, format_seconds, parse_duration
from hybrid.jsonio import report_json

WRITE_S = 1.0      # kept back from --time-limit for writing the plan and the summary
TIMELINE_S = 3.0   # ... and for drawing --timeline (matplotlib's import and two timelines)
MIN_SEARCH_S = 0.5  # the search's least budget, when loading took the whole limit


def _window_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise HybridError(f"--window-ops must be comma-separated integers, e.g. 6,12,4, got {text!r}") from None
    if not sizes or min(sizes) < 1:
        raise HybridError(f"--window-ops needs positive sizes, got {text!r}")
    return sizes


@click.command("refine")
@graph_option
@click.option("--plan", "plan_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Plan to refine (hybrid-plan/1), from any planner: optimize, baseline, simulate, a file. An arena "
                   "plan keeps every offset.")
@click.option("--time-limit", default="2m", show_default=True,
              help="Budget of the whole command (loading and writing included), e.g. 30s, 2m, 1h; a bare number "
                   "is seconds. Ctrl-C or SIGTERM stops early and writes the best plan so far.")
@seed_option
@click.option("--workers", type=click.IntRange(1), default=1, show_default=True, help="CP-SAT worker threads per window.")
@click.option("--window-ops", default="6,12,4,20", show_default=True,
              help="Ops per window, one size per round of windows (comma-separated).")
@click.option("--window-time", default="0.5s", show_default=True,
              help="CP-SAT budget per window (deterministic time, about seconds).")
@click.option("--candidates", type=int, default=4, show_default=True,
              help="Alternative evictions offered to CP-SAT per window (0: timing and order only).")
@click.option("--max-windows", type=click.IntRange(min=1), default=None,
              help="Stop after this many windows; the same --seed then gives the same plan (CP-SAT runs on "
                   "deterministic time) unless --time-limit ends the search first.")
@click.option("--patience", default=None,
              help="Stop after this long without a faster plan, e.g. 20s (default: run until --time-limit or "
                   "until no window is left to try).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Write the refined plan here (the input plan, unchanged, if nothing faster is found).")
@click.option("--timeline", "timeline_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also draw the plan before and after as a timeline (PNG): streams, stalls, device memory.")
@click.option("--quiet", is_flag=True, help="No progress lines; only the final summary.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as one JSON object on stdout (makespan_s, input_makespan_s, gain, windows, "
                   "stop, plan, ...) instead of the table.")
def command(graph_path: Path, plan_path: Path, time_limit: str, seed: int, workers: int, window_ops: str,
            window_time: str, candidates: int, max_windows: int | None, patience: str | None, out_path: Path,
            timeline_path: Path | None, quiet: bool, as_json: bool) -> None:
    """Re-time a plan's copies (and swap some evictions) with CP-SAT on windows of the schedule.

    The schedule, the memory pool and the tensors resident at the start stay
    as they are. Windows of consecutive ops where the compute stream waits are
    solved exactly with OR-Tools CP-SAT — the order and start of every swap_in
    and swap_out, which object each allocation reuses, and whether to evict a
    different tensor — with the rest of the plan frozen; a window's solution is
    kept only when re-simulating the whole plan gives a lower makespan, so the
    result is never slower than the input. Every refined plan is validated.

    Before any window the plan is re-walked: its nodes in their issue order,
    with edges, release kinds and object ownership derived again (each
    allocation takes the free object or bytes released last before it could
    start); that alone often removes waits the original planner introduced.

    \b
    Examples:
      hybrid refine --graph g.json --plan ga.json --time-limit 2m --out refined.json
      hybrid baseline --kind belady --graph g.json --out b.json
      hybrid refine --graph g.json --plan b.json --time-limit 5m --timeline b-refined.png --out b2.json
    """
    from hybrid.signals import deferred_interrupts, interrupted_by
    from hybrid.refine import RefineOptions, refine
    from hybrid.report.summary import plan_row, table
    from hybrid.validator import require_valid, write_plan

    t_start = time.monotonic()

    total = parse_duration(time_limit, "--time-limit")
    if total <= 0:
        raise HybridError(f"--time-limit must be positive, got {time_limit!r}")
    wt = parse_duration(window_time, "--window-time")
    if wt <= 0:
        raise HybridError(f"--window-time must be positive, got {window_time!r}")
    if candidates < 0:
        raise HybridError(f"--candidates must not be negative, got {candidates}")
    wait = parse_duration(patience, "--patience") if patience is not None else None
    if wait is not None and wait <= 0:
        raise HybridError(f"--patience must be positive, got {patience!r}")
    prepare_output(out_path, "--out")  # a bad folder fails now, not after the search
    prepare_output(timeline_path, "--timeline", figure=True)   # a suffix matplotlib cannot write fails now too
    graph = load_graph(graph_path)
    plan = load_plan(plan_path)
    require_valid(graph, plan, f"--plan {plan_path}")   # refining a broken plan would write a broken plan
    opts = RefineOptions(window_ops=_window_sizes(window_ops), window_time_s=wt, candidates=candidates,
                         max_windows=max_windows, patience_s=wait)
    # A line every 2 s from 2 s on, saying it is a count so far: one printed at once on a short run stood beside
    # the summary's final counts as a contradiction (1 window there, 7 in the summary; its gain before the later
    # windows and the layout); the gain is over the input plan, as the summary's
    last = [time.monotonic()]

    def progress(p) -> None:  # noqa: ANN001 - RefineProgress
        if time.monotonic() - last[0] >= 2.0:
            last[0] = time.monotonic()
            gain = 100 * (1 - p.makespan / plan.makespan_s) if plan.makespan_s > 0 else 0.0
            click.echo(f"refine {format_seconds(p.elapsed_s)}, so far: makespan {format_seconds(p.makespan)} "
                       f"({gain:.2f}% faster than the input), {counted(p.windows, 'window')} solved, "
                       f"{p.accepted} accepted", err=True)

    # --time-limit bounds the whole command (loading before, writing after): the search gets what is left
    budget = clock.left(total) - WRITE_S - (TIMELINE_S if timeline_path is not None else 0.0)
    res = refine(graph, plan, time_limit_s=max(MIN_SEARCH_S, budget), seed=seed, workers=workers,
                 progress=None if quiet else progress,
                 options=opts)  # Ctrl-C or SIGTERM ends it with the best plan so far (stop "interrupted")
    with deferred_interrupts():  # the plan is written whole, even if a signal comes now
        write_plan(graph, res.plan, out_path, "the refined plan")
        gain = 100 * (1 - res.plan.makespan_s / plan.makespan_s) if plan.makespan_s > 0 else 0.0
        if as_json:
            click.echo(report_json({**json_summary(graph, res.plan.device, res.plan, out_path),
                                   "input_plan": str(plan_path), "input_makespan_s": plan.makespan_s,
                                   "gain": gain / 100, "improved": res.improved,
                                   "rebind_makespan_s": res.rebind_makespan, "reorder_makespan_s": res.reorder_makespan,
                                   "windows": res.windows, "accepted": res.accepted, "infeasible": res.infeasible,
                                   "rejected": res.rejected,
                                   "stop": res.stop, "search_s": res.search_s, "wall_s": time.monotonic() - t_start,
                                   "timeline": str(timeline_path) if timeline_path else None}, indent=1))
        else:
            click.echo(table([plan_row("input", plan, graph), plan_row("refined", res.plan, graph)]))
            what = (f"{gain:.2f}% faster" if res.improved else "no faster timing found; wrote the input plan unchanged")
            click.echo(f"{what}: re-walked {format_seconds(res.rebind_makespan)}, copy streams re-ordered "
                       f"{format_seconds(res.reorder_makespan)}, then {counted(res.windows, 'window')} solved, "
                       f"{res.accepted} accepted, {res.infeasible} without a solution in time, {res.rejected} refused "
                       f"or not faster once re-walked, in {format_seconds(res.search_s)} (stopped: {res.stop}"
                       + (f"; {format_seconds(TIMELINE_S)} of the limit kept for drawing --timeline"
                          if timeline_path is not None and res.stop == "time limit" else "") + ")")
        for note in res.notes:
            click.echo(f"note: {note}", err=True)
        if res.stop == "interrupted":
            click.echo(f"interrupted ({interrupted_by()}): wrote the best plan so far to {out_path}", err=True)
            return
    if timeline_path is not None:
        from hybrid.report.timeline import plot_timeline

        plot_timeline(graph, [("input", plan), ("refined", res.plan)], timeline_path,
                      title=f"{graph.name}: before and after CP-SAT refinement")
    if not as_json:
        click.echo(f"wrote {out_path}" + (f", {timeline_path}" if timeline_path else ""))
