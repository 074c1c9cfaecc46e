"""`hybrid simulate --graph G [--from PLAN] --out P`: the swap planner on one schedule and pool."""
from __future__ import annotations

from pathlib import Path

import click

from hybrid.swap.pools import byte_pool, per_size_pool, pool_from_allocation
from hybrid.cli.options import (device_from, device_options, graph_option, json_summary, load_graph, load_plan,
                                out_option, prepare_output, recompute_option)
from hybrid.swap.to_plan import to_plan
from hybrid.graph.order import depth_first_order, from_ids, program_order
from hybrid.report.summary import plan_row, table
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.baselines import RECOMPUTE_RATIO
from hybrid.swap.planner import SwapPlanner


@click.command("simulate")
@graph_option
@click.option("--from", "from_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Keep this plan's schedule and allocation; re-plan its swaps.")
@click.option("--schedule", type=click.Choice(["program", "dfs"]), default="program", show_default=True,
              help="Operator order when not --from: the graph's own (program) order or depth-first.")
@click.option("--allocation", type=click.Choice(["bytes", "size-classes"]), default="bytes", show_default=True,
              help="Pool when not --from: a byte budget, or one size class per tensor size sized from the unswapped peak.")
@click.option("--victim", type=click.Choice(["belady", "lru"]), default="belady", show_default=True,
              help="Which tensor to evict when memory is full.")
@click.option("--recency", type=int, default=2, show_default=True,
              help="Do not evict tensors used within this many ops (unless nothing else can go).")
@recompute_option
@device_options
@out_option
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as one JSON object on stdout (makespan_s, ideal_s, ratio, plan, ...).")
def command(graph_path: Path, from_path: Path | None, schedule: str, allocation: str, victim: str, recency: int,
            recompute: bool, out_path: Path | None, as_json: bool, **kw) -> None:
    """Plan swaps (and, with --recompute, drops and reruns) for one schedule and pool with the swap planner
    and simulate the three streams."""
    prepare_output(out_path, "--out")
    g = load_graph(graph_path)
    dev = device_from(g, kw)
    if from_path is not None:
        src = load_plan(from_path)
        order = from_ids(g, src.schedule, f"{from_path}: schedule")
        pool = pool_from_allocation(g, src.allocation, dev)
    else:
        order = program_order(g) if schedule == "program" else depth_first_order(g)
        pool = byte_pool(g, dev) if allocation == "bytes" else per_size_pool(g, order, dev)
    opt = PlannerOptions(victim=victim, recency=recency, recompute_ratio=RECOMPUTE_RATIO if recompute else 0.0)
    planner = SwapPlanner(g, dev)
    opt = planner.faster_options(order, pool, opt)
    aug = planner.plan(order, pool, opt)
    plan = to_plan(aug, {"name": "simulate", "options": opt.describe()})
    if out_path is not None:
        plan.save(out_path)
    if as_json:
        import json

        click.echo(json.dumps(json_summary(g, dev, plan, out_path), indent=1))
    else:
        click.echo(table([plan_row("simulate", plan, g)]))
