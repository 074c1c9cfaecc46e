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
@click.option("--json", "as_json", is_flag=True,
              help="Print the figures as JSON (a bound no plan of its set can meet, infinite, is null): the "
                   "bounds are graph_bound_s and graph_swap_bound_s (plans in any order, with recompute / swap "
                   "only), program_order_recompute_bound_s and program_order_swap_bound_s (this order).")
def command(graph_path: Path, as_json: bool, **kw) -> None:
    """What a graph holds: ops, tensors, distinct sizes, bytes by kind, the unswapped peak, and lower bounds on
    the makespan at the given device memory, each named by the plans it bounds: every plan counting persistent
    tensors only; then, counting activations, plans in any order or in this (program) order, with recompute
    or swap only (a narrower set's figure includes the wider one's, so it is never below it)."""
    g = load_graph(graph_path)
    dev = device_from(g, kw)
    info = with_bounds(graph_info(g, dev), g, dev)
    if as_json:
        import dataclasses
        import json

        import math

        # strict JSON: an infinite bound (no plan of that set fits the memory) is null
        d = {k: None if isinstance(v, float) and not math.isfinite(v) else v
             for k, v in dataclasses.asdict(info).items()}
        click.echo(json.dumps(d, indent=1, allow_nan=False))
    else:
        click.echo(tabulate(info.rows(), tablefmt="plain"))
