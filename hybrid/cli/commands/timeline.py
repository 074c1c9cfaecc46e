"""`hybrid timeline`: draw plans as three stream lanes and device memory over time (PNG)."""
from __future__ import annotations

from pathlib import Path

import click

from hybrid.cli.options import graph_option, load_graph, load_plan


@click.command("timeline")
@graph_option
@click.option("--plan", "plan_paths", required=True, multiple=True,
              type=click.Path(dir_okay=False, path_type=Path),
              help="Plan file (hybrid-plan/1); repeat to stack several plans on one time axis "
                   "(e.g. before and after `hybrid refine`).")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="PNG file to write.")
@click.option("--title", default=None, help="Figure title (default: the graph's name).")
def command(graph_path: Path, plan_paths: tuple[Path, ...], out_path: Path, title: str | None) -> None:
    """Show where a plan stalls: compute, host-to-device and device-to-host lanes, stalls shaded, and the
    device bytes in use against the memory limit.

    \b
    Example:
      hybrid timeline --graph g.json --plan belady.json --plan refined.json --out t.png
    """
    from hybrid.timeline import plot_timeline
    from hybrid.validator import validate

    graph = load_graph(graph_path)
    items = []
    for path in plan_paths:
        plan = load_plan(path)
        report = validate(graph, plan)
        if not report.valid:
            raise click.ClickException(f"{path}: not a valid plan for {graph_path} "
                                       f"(rule {report.violations[0].rule}: {report.violations[0].message}); "
                                       f"run `hybrid validate --graph {graph_path} --plan {path} --all`")
        items.append((path.stem, plan))
    plot_timeline(graph, items, out_path, title=title or graph.name)
    click.echo(f"wrote {out_path}")
