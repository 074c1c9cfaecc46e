"""`hybrid timeline`: draw plans as three stream lanes and device memory over time (PNG), or write them as a
Chrome trace (Perfetto JSON)."""
from __future__ import annotations

from pathlib import Path

import click

from hybrid.errors import HybridError, InvalidPlanError

from hybrid.cli.options import graph_option, load_graph, load_plan, prepare_output


@click.command("timeline")
@graph_option
@click.option("--plan", "plan_paths", required=True, multiple=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Plan file (hybrid-plan/1); repeat to stack several plans on one time axis "
                   "(e.g. before and after `hybrid refine`).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="File to write: a figure, its format from the suffix (.png, .svg, .pdf, .jpg, ...), or with "
                   "--format chrome a trace JSON (.json).")
@click.option("--format", "fmt", type=click.Choice(["png", "chrome"]), default=None,
              help="png (a figure, in the format --out's suffix names: .png, .svg, .pdf, ...) or chrome (Trace "
                   "Event Format JSON for chrome://tracing or ui.perfetto.dev, one "
                   "process per plan, a thread per stream, device memory as a counter). Default: chrome when --out "
                   "ends in .json, else png.")
@click.option("--title", default=None, help="Figure title (default: the graph's name).")
def command(graph_path: Path, plan_paths: tuple[Path, ...], out_path: Path, fmt: str | None, title: str | None) -> None:
    """Show where a plan stalls: compute, host-to-device and device-to-host lanes, stalls shaded, reruns
    (recompute) in their own colour, and the device bytes in use against the memory limit and the memory the
    plan's allocation reserves (its arena, or its size classes' pool).

    \b
    Examples:
      hybrid timeline --graph g.json --plan belady.json --plan refined.json --out t.png
      hybrid timeline --graph g.json --plan plan.json --format chrome --out plan.trace.json
    A measured run: `hybrid execute ... --trace run.trace.json`.
    """
    from hybrid.report.timeline import memory_profile, plan_trace_rows, plot_timeline, write_chrome_trace
    from hybrid.validator import validate

    fmt = fmt or ("chrome" if out_path.suffix.lower() == ".json" else "png")
    if fmt == "chrome" and out_path.suffix.lower() in _figure_suffixes():
        # a trace in a .png would open as a broken image (as --format png --out x.json is refused)
        raise HybridError(f"--out {out_path}: --format chrome writes a trace JSON, not a {out_path.suffix} figure; "
                          f"end the name in .json (e.g. --out {out_path.with_suffix('.trace.json')}), or leave out "
                          "--format chrome to draw the figure")
    prepare_output(out_path, "--out", figure=fmt == "png")

    graph = load_graph(graph_path)
    items = []
    for path in plan_paths:
        plan = load_plan(path)
        report = validate(graph, plan)
        if not report.valid:
            raise InvalidPlanError(f"{path}: not a valid plan for {graph_path} "
                                   f"(rule {report.violations[0].rule}: {report.violations[0].message}); "
                                   f"run `hybrid validate --graph {graph_path} --plan {path} --all`")
        items.append((path.stem, plan))
    if fmt == "chrome":
        write_chrome_trace(out_path, [(f"{name} (plan, simulated)", plan_trace_rows(graph, plan),
                                       memory_profile(graph, plan)) for name, plan in items])
    else:
        plot_timeline(graph, items, out_path, title=title or graph.name)
    click.echo(f"wrote {out_path}")


def _figure_suffixes() -> set[str]:
    """The suffixes a figure is written as (hybrid.files.FIGURE_FORMATS: .png, .svg, .pdf, .jpg, ...)."""
    from hybrid.files import FIGURE_FORMATS

    return {f".{f}" for f in FIGURE_FORMATS}
