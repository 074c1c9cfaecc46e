"""`hybrid info --graph G`."""
from __future__ import annotations

from pathlib import Path

import click
from tabulate import tabulate

from hybrid.cli.options import device_from, device_options, graph_option, load_graph
from hybrid.bounds import with_bounds
from hybrid.graph.info import graph_info


@click.command("info")
@graph_option
@device_options
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def command(graph_path: Path, as_json: bool, **kw) -> None:
    """What a graph holds: ops, tensors, distinct sizes, bytes by kind, the unswapped peak, and lower bounds on
    any plan's makespan at the given device memory: persistent tensors only, any schedule with activations
    counted (swap only, and with recompute), and the program order's."""
    g = load_graph(graph_path)
    dev = device_from(g, kw)
    info = with_bounds(graph_info(g, dev), g, dev)
    if as_json:
        import dataclasses
        import json

        click.echo(json.dumps(dataclasses.asdict(info), indent=1))
    else:
        click.echo(tabulate(info.rows(), tablefmt="plain"))
