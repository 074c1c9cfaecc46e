"""`hybrid milp --graph G [--memory M] [--no-offload] [--no-impl-choice] --time-limit 10m --out plan.json`."""
from __future__ import annotations

import json
from pathlib import Path

import click

from hybrid.cli import clock
from hybrid.cli.options import (FiniteFloat, device_from, device_options, graph_option, json_summary, load_graph,
                                prepare_output)
from hybrid.errors import HybridError
from hybrid.units import format_seconds, parse_duration
from hybrid.validator import write_plan

DECODE_S = 1.0   # kept back from --time-limit for decoding, simulating, validating and writing the plan


@click.command("milp")
@graph_option
@device_options
@click.option("--no-offload", is_flag=True, help="Recompute only, no copies (Checkmate's model).")
@click.option("--no-impl-choice", is_flag=True,
              help="The model runs every op's least-workspace impl; afterwards each op takes the fastest impl "
                   "whose workspace fits the memory left (the paper's '-Auto' baselines).")
@click.option("--stages", type=int, default=None,
              help="Coarsen to this many stages (segments of consecutive ops); default: one stage per op.")
@click.option("--solver", type=click.Choice(["highs", "cbc"]), default="highs", show_default=True)
@click.option("--time-limit", default="10m", show_default=True,
              help="Budget of the whole command (loading, building the model and writing the plan included), "
                   "e.g. 30s, 10m. With HiGHS, Ctrl-C or SIGTERM stops the search and keeps the "
                   "best plan found so far.")
@click.option("--gap", type=FiniteFloat(0.0, 1.0), default=0.01, show_default=True,
              help="Relative MIP gap at which the solver stops.")
@click.option("--threads", type=int, default=1, show_default=True, help="Solver threads.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the plan here (hybrid-plan/1).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
def command(graph_path: Path, no_offload: bool, no_impl_choice: bool, stages: int | None, solver: str,
            time_limit: str, gap: float, threads: int, out_path: Path | None, as_json: bool, **kw) -> None:
    """Offload, recompute and implementation choice as one integer program (MO-SOS, docs/milp.md).

    Prints the model's size (variables, constraints), the solver's status,
    solve time and gap, the ILP objective (compute + recompute time, a lower
    bound on the makespan) and the makespan the simulator gives the decoded
    plan, which the validator has checked.

    \b
    Examples:
      hybrid milp --graph g.json --memory 6GiB --time-limit 10m --out mosos.json
      hybrid milp --graph g.json --memory 6GiB --no-impl-choice --out str-auto.json
      hybrid milp --graph g.json --memory 6GiB --no-offload --no-impl-choice --out checkmate-auto.json
    """
    from milp.api import plan_milp
    from milp.decode import impl_names
    from milp.model import ModelOptions
    from milp.solve import SolveOptions

    limit = parse_duration(time_limit, "--time-limit")
    if limit <= 0:
        raise HybridError(f"--time-limit must be positive, got {time_limit!r}")
    if stages is not None and stages < 1:
        raise HybridError(f"--stages must be at least 1, got {stages}")
    if threads < 1:
        raise HybridError(f"--threads must be at least 1, got {threads}")
    prepare_output(out_path, "--out")
    g = load_graph(graph_path)
    dev = device_from(g, kw)
    opts = ModelOptions(offload=not no_offload, impl_choice=not no_impl_choice)
    kind = {(True, True): "mosos", (True, False): "str-auto", (False, False): "checkmate-auto",
            (False, True): "checkmate"}[(opts.offload, opts.impl_choice)]
    # --time-limit bounds the whole command: the solver stops in time for decoding, validating and writing
    deadline = clock.deadline(limit) - DECODE_S
    try:
        run = plan_milp(g, dev, kind, stages, SolveOptions(solver, limit, gap, threads, deadline=deadline), opts)
    except HybridError:
        from hybrid.signals import received

        if received():  # Ctrl-C or SIGTERM before the solver had a plan: nothing to write, exit 130/143
            raise KeyboardInterrupt from None
        raise
    r = run.result
    assert run.plan is not None
    if out_path is not None:
        write_plan(g, run.plan, out_path, "the milp plan")
    if as_json:
        click.echo(json.dumps({**json_summary(g, dev, run.plan, out_path), **run.row()}, indent=1))
        return
    m = run.plan.metrics
    lines = [
        f"planner      {kind}  ({run.stages} stages, {run.variables} variables of which {run.binaries} binary, "
        f"{run.constraints} constraints; built in {format_seconds(run.build_s)})",
        f"solver       {solver}: {r.status} ({r.solver_status}), {format_seconds(r.solve_s)}, gap "
        + (f"{100 * r.gap:.2f}%" if r.gap is not None else "unknown")
        + (" — interrupted, best plan so far" if r.interrupted else ""),
        f"ILP objective {format_seconds(r.objective_s or 0.0)} (compute + recompute)"
        + (f", bound {format_seconds(r.bound_s)}" if r.bound_s is not None else ""),
        f"makespan     {format_seconds(run.plan.makespan_s)} simulated (ideal {format_seconds(m['ideal_s'])}, "
        f"stall {format_seconds(m['stall_s'])}); {m['recomputes']} recomputes, {m['swaps_out']} offloads, "
        f"{m['swaps_in']} prefetches; peak {m['peak_bytes']} B of {dev.usable_bytes} B",
    ]
    chosen = impl_names(run.plan)
    counts: dict[str, int] = {}
    for op_id, name in chosen.items():
        if g.op(op_id).impls and name != g.op(op_id).impls[g.op(op_id).default_impl].name:
            counts[name] = counts.get(name, 0) + 1
    if counts:
        lines.append("impls        " + ", ".join(f"{n} on {k} op{'s' if k != 1 else ''}"
                                            for n, k in sorted(counts.items())) + " (the rest: their default)")
    if out_path is not None:
        lines.append(f"plan         {out_path} (validated)")
    click.echo("\n".join(lines))
