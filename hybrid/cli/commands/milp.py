"""`hybrid milp --graph G [--memory M] [--no-offload] [--no-impl-choice] --time-limit 10m --out plan.json`."""
from __future__ import annotations

from pathlib import Path

import click

from hybrid.cli import clock
from hybrid.cli.options import (FiniteFloat, device_from, device_options, graph_option, json_summary, load_graph,
                                load_plan, prepare_output)
from hybrid.errors import HybridError, InfeasibleError
from hybrid.units import format_bytes_exact, format_change, format_seconds, parse_duration
from hybrid.validator import write_plan
from hybrid.jsonio import report_json

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
@click.option("--start", "start_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="A plan of this graph to start from (its schedule becomes the stage order); default: Belady's "
                   "plan on the program order (`hybrid simulate`'s planner; none with --no-offload). The plan written is the faster of "
                   "the MILP's and the start's: never slower than the start. Without --memory (or --device) it "
                   "plans for the memory the start was made for; with --no-offload a start with copies is refused.")
@click.option("--no-start", is_flag=True, help="No start plan: the MILP's own plan only (none if it finds none).")
@click.option("--activations-only", is_flag=True,
              help="The paper's setting: parameters, optimizer state and inputs stay on the device all iteration "
                   "(default: they may be offloaded and prefetched like activations).")
@click.option("--link", type=click.Choice(["bandwidth", "paper"]), default="bandwidth", show_default=True,
              help="Copies per stage: as many as the link's bandwidth carries in their windows, or the paper's "
                   "one in flight per direction.")
@click.option("--no-stalls", is_flag=True,
              help="No blocking prefetches: no stage waits for a copy (the paper's windows only).")
@click.option("--compute-windows", is_flag=True,
              help="Time transfer windows on each stage's fastest compute only (the paper's), not on the start "
                   "plan's stage times, which include its stalls.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the plan here (hybrid-plan/1); without it the plan is only reported.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
def command(graph_path: Path, no_offload: bool, no_impl_choice: bool, stages: int | None, solver: str,
            time_limit: str, gap: float, threads: int, start_path: Path | None, no_start: bool,
            activations_only: bool, link: str, no_stalls: bool, compute_windows: bool, out_path: Path | None, as_json: bool, **kw) -> None:
    """Offload, recompute and implementation choice as one integer program (MO-SOS, docs/milp.md).

    Prints the model's size (variables, constraints), the solver's status,
    solve time and gap, the ILP objective (the incumbent's compute + recompute
    + waits) beside the solver's bound on it (a lower bound on the makespan as
    the model counts it), and the makespan the simulator gives the decoded
    plan, which the validator has checked. It starts from Belady's plan (or
    --start) and writes the faster of the two as planned, never slower than
    the start; where the plan's copies do not lay out in the arena it is
    re-planned with less memory first (the report's layout line, and --json's
    "layout", say by how much). The report says which it wrote and its gap to
    the ILP bound.

    \b
    Examples:
      hybrid milp --graph g.json --memory 6GiB --time-limit 10m --out mosos.json
      hybrid milp --graph g.json --memory 6GiB --start belady.json --out mosos.json
      hybrid milp --graph g.json --memory 6GiB --activations-only --link paper --no-stalls --no-start --out paper.json
      hybrid milp --graph g.json --memory 6GiB --no-impl-choice --out str-auto.json
      hybrid milp --graph g.json --memory 6GiB --no-offload --no-impl-choice --out checkmate-auto.json
    """
    from milp.api import belady_start, plan_milp
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
    if start_path is not None and no_start:
        raise HybridError("--start and --no-start exclude each other; give one")
    g = load_graph(graph_path)
    given_plan = load_plan(start_path) if start_path is not None else None
    if given_plan is not None and no_offload:
        copies = sum(1 for e in given_plan.events if e.kind in ("swap_out", "swap_in"))
        if copies:   # the faster of the two is written: a start with copies would break --no-offload
            raise HybridError(f"--start: the plan has {copies} copies (swap_out/swap_in events) and --no-offload "
                              "plans recompute only; give a plan without copies, or drop --no-offload")
    from_start = given_plan is not None and kw.get("memory") is None and kw.get("device_name") is None
    # without --memory (or --device), a start plans for the memory it was made for, as `simulate --from` does
    dev = device_from(g, kw, base=given_plan.device if from_start else None)
    if from_start and (g.device is None or dev.memory_bytes != g.device.memory_bytes):
        had = ("names no device" if g.device is None else
               f"has {format_bytes_exact(g.device.memory_bytes)}")
        click.echo(f"note: --start without --memory: planning for the start plan's memory, "
                   f"{format_bytes_exact(dev.memory_bytes)} (the graph's device {had}); give --memory to plan "
                   "for another", err=True)
    opts = ModelOptions(offload=not no_offload, impl_choice=not no_impl_choice, link=link,
                        persistent=not activations_only, stalls=not no_stalls, start_windows=not compute_windows)
    kind = {(True, True): "mosos", (True, False): "str-auto", (False, False): "checkmate-auto",
            (False, True): "checkmate"}[(opts.offload, opts.impl_choice)]
    start = start_name = None
    if given_plan is not None:
        start, start_name = given_plan, str(start_path)
    elif not no_start and not no_offload:  # Belady copies: no start for the recompute-only kinds
        start, start_name = belady_start(g, dev), "belady"
    from milp.stages import memory_refusal

    refusal = memory_refusal(g, dev, opts)
    if refusal is not None and start is None:
        raise InfeasibleError(refusal)
    if refusal is not None:  # no model plan can fit: the start (with Auto) is the answer, no solve
        _write_start(g, dev, kind, stages, start, start_name, refusal, out_path, as_json, opts.offload, limit)
        _not_written(out_path, as_json)
        return
    # --time-limit bounds the whole command (loading and Belady's start included): plan_milp returns by the
    # deadline, its solver given what is left less the time kept back to decode, lay out, validate and write
    # the plan (measured on the start); where the model's build runs past it, the start is written
    try:
        run = plan_milp(g, dev, kind, stages, SolveOptions(solver, limit, gap, threads,
                                                           deadline=clock.deadline(limit)), opts,
                        start_plan=start, start_name=start_name or "start")
    except HybridError:
        from hybrid.signals import received

        if received():  # Ctrl-C or SIGTERM before the solver had a plan: nothing to write, exit 130/143
            raise KeyboardInterrupt from None
        raise
    assert run.plan is not None
    if run.not_solved is not None:   # no time to build the model, or a Ctrl-C before the solve: the start is
        #                              still a plan, no worse than itself
        if out_path is not None:
            write_plan(g, run.plan, out_path, "the start plan")
        _say_start(g, dev, run, out_path, as_json)
        _not_written(out_path, as_json)
        return
    if out_path is not None:
        write_plan(g, run.plan, out_path, "the milp plan")
    if as_json:
        _echo_json(g, dev, run, out_path)
        _not_written(out_path, as_json)
        return
    m = run.plan.metrics
    lines = _report(g, run, kind, solver, dev, m)
    chosen = impl_names(run.plan)
    counts: dict[str, int] = {}
    for op_id, name in chosen.items():
        if g.op(op_id).impls and name != g.op(op_id).impls[g.op(op_id).default_impl].name:
            counts[name] = counts.get(name, 0) + 1
    if counts:
        lines.append("impls        " + ", ".join(f"{n} on {k} op{'s' if k != 1 else ''}"
                                            for n, k in sorted(counts.items())) + " (the rest: their default)")
    lines.append(_layout_line(run.plan))
    if out_path is not None:
        lines.append(f"plan         {out_path} (validated)")
    click.echo("\n".join(lines))
    _not_written(out_path, as_json)


def _not_written(out_path: Path | None, as_json: bool) -> None:
    """Without --out the plan is only reported: one line on stderr says so (after the report, so that an error
    stays the only line of a failed run; with --json, its `"plan": null` says it)."""
    if out_path is None and not as_json:
        click.echo("note: no --out given: the plan was reported, not written (give --out PLAN.json to keep it)",
                   err=True)


def _echo_json(g, dev, run, out_path: Path | None) -> None:  # noqa: ANN001 - Graph, Device, MilpRun
    """`--json`: the plan's figures (`json_summary`, from its events) and the run's (`MilpRun.row`): the same
    keys whether the model was solved or not."""
    js = json_summary(g, dev, run.plan, out_path)
    d = {**js, **run.row()}
    d.update({k: js[k] for k in ("stall_s", "bytes_h2d", "bytes_d2h", "peak_bytes")})   # from the events
    click.echo(report_json(d, indent=1))


def _replanned(plan) -> bool:  # noqa: ANN001 - Plan
    """Whether the start written was planned again to lay out (`milp.api.laid_out_start`)."""
    return isinstance(plan.planner, dict) and "layout" in plan.planner


def _layout_line(plan) -> str:  # noqa: ANN001 - Plan
    """Whether the plan written has arena offsets; where not, how far its best layout went over and what the
    executor then does."""
    if plan.allocation.kind == "arena":
        how = plan.planner.get("layout") if isinstance(plan.planner, dict) else None
        return f"layout       laid out in the arena (offsets in the plan){': ' + how if how else ''}"
    arena = plan.planner.get("arena", {}) if isinstance(plan.planner, dict) else {}
    over = (f" (best layout {format_change(float(arena['overflow']), noise=0) or '+0%'} over the memory)"
            if "overflow" in arena else "")   # digits enough: an overflow of a few KiB is not '+0.0%'
    return (f"layout       not laid out{over}: a byte-budget plan ({plan.allocation.kind}); the executor places its "
            "copies at run time (best fit, compacting)")


def _write_start(g, dev, kind: str, stages: int | None, start, start_name: str | None, why: str,  # noqa: ANN001
                 out_path: Path | None, as_json: bool, offload: bool, limit: float) -> None:
    """No model to solve (refused, or its build ran past the time limit): write the start with Auto's impls,
    laid out as `plan_milp` lays it out (`milp.api.laid_out_start`: re-planned with less memory where `offload`
    allows copies, within what is left of the time limit)."""
    from milp.api import START_LAYOUT_S, prepare_start, stage_count, start_run

    prepared = prepare_start(g, dev, start, replan=offload,
                             layout_s=max(1.0, min(START_LAYOUT_S, 0.8 * clock.left(limit))))
    plan = prepared.written
    if out_path is not None:
        write_plan(g, plan, out_path, "the start plan")
    _say_start(g, dev, start_run(kind, plan, start_name, why, stage_count(g, stages), prepared.auto.makespan_s),
               out_path, as_json)


def _say_start(g, dev, run, out_path: Path | None, as_json: bool) -> None:  # noqa: ANN001 - Graph, Device, MilpRun
    """The report of a run that wrote the start (Auto's impls) without solving a model."""
    if as_json:
        _echo_json(g, dev, run, out_path)
        return
    why = run.not_solved
    click.echo(f"model        not solved: {why.removeprefix('error: ').removeprefix('milp: ')}\n"
               f"written      the start ({run.start_name}, "
               f"{'re-planned to lay out, default impls' if _replanned(run.plan) else 'Auto impls'}): "
               f"{format_seconds(run.plan.makespan_s)} simulated\n" + _layout_line(run.plan)
               + (f"\nplan         {out_path} (validated)" if out_path is not None else ""))


def _solve_parts(r, solver: str) -> str:  # noqa: ANN001 - milp.solve.SolveResult
    """Where a solve's seconds went (HiGHS): the model's hand-off, the search (against the limit it was given:
    the `time` line's), reading the solution back; '' where the solver did not say (CBC)."""
    from milp.solve import MIN_SOLVE_S

    if r.search_s is None:
        return ""
    search = f"{format_seconds(r.search_s)} searching"
    if r.limit_s is not None and r.search_s > r.limit_s + MIN_SOLVE_S:
        search += f", past the {format_seconds(r.limit_s)} it was given"
    parts = [f"{format_seconds(r.handoff_s)} handing the model to {solver}", search]
    rest = r.solve_s - r.handoff_s - r.search_s
    if rest >= 0.01:
        parts.append(f"{format_seconds(rest)} reading the solution back")
    return f" ({'; '.join(parts)})"


def _objective_line(r) -> str:  # noqa: ANN001 - milp.solve.SolveResult
    """The incumbent's objective next to the bound, both as the solver counts them (with the copies' tie-break,
    the basis of its bound and gap), and compute + recompute + waits without the tie-break (`ilp_objective_s`)."""
    if r.objective_s is None:
        return "ILP objective none (no incumbent)" + (f", bound {format_seconds(r.bound_s)} (with the copies' "
                                                      "tie-break)" if r.bound_s is not None else ", no bound")
    line = f"ILP objective {format_seconds(r.objective_s)} (compute + recompute + waits)"
    if r.model_objective_s is None:
        return line + (f", bound {format_seconds(r.bound_s)}" if r.bound_s is not None else ", no bound")
    return line + f"; with the copies' tie-break {format_seconds(r.model_objective_s)}, bound " + \
        (f"{format_seconds(r.bound_s)}" if r.bound_s is not None else "none") + " (both with it)"


def _report(graph, run, kind: str, solver: str, dev, m: dict) -> list[str]:  # noqa: ANN001 - Graph, MilpRun, Device
    from hybrid.validator import event_figures

    r = run.result
    lines = [
        f"planner      {kind}  ({run.stages} stages, {run.variables} variables of which {run.binaries} binary, "
        f"{run.constraints} constraints; built in {format_seconds(run.build_s)})",
        f"solver       {solver}: {r.status} ({r.solver_status}), {format_seconds(r.solve_s)}{_solve_parts(r, solver)}"
        + ", gap "
        + (f"{100 * r.gap:.2f}%" if r.gap is not None else "unknown")
        + (" — interrupted, best plan so far" if r.interrupted else ""),
        _objective_line(r),
    ]
    if run.start_name is not None:
        mapped, unmapped = run.start_mapped or (0, 0)
        milp_s = format_seconds(run.milp_makespan_s) if run.milp_makespan_s is not None else \
            "refused" if run.refused else "none"
        if run.resolve_makespan_s is not None:
            milp_s += f" (did not lay out; re-solved with less memory: {format_seconds(run.resolve_makespan_s)})"
        whose = ((f"the start's, re-planned to lay out ({format_seconds(run.plan.makespan_s)})"
                  if _replanned(run.plan) else "the start's") if run.written == "start" else
                 "the MILP's re-solve" if run.resolve_makespan_s is not None else "the MILP's")
        lines.append(f"start        {run.start_name}: {format_seconds(run.start_makespan_s)} simulated; MILP's own "
                     f"plan {milp_s}; written: {whose} "
                     f"({mapped} of its events given as a MIP start, {unmapped} outside the model's variables)")
    if run.refused:   # the model's accounting missed something the validator counts: the start is written
        lines.append(f"refused      {run.refused}; the start is written")
    if run.start_breaks:
        what = ", ".join(f"{k} {v}" for k, v in sorted(run.start_breaks.items(), key=lambda kv: -kv[1]))
        lines.append(f"start breaks {sum(run.start_breaks.values())} of the model's constraints ({what}): the solver "
                     "drops it and searches without it")
    elif run.start_breaks is not None:
        lines.append("start breaks none of the model's constraints: the solver's first incumbent")
    if run.solver_limit_s is not None:
        lines.append(f"time         solver given {format_seconds(run.solver_limit_s)} of the time limit when it "
                     "started (before: loading, the start, the model's build"
                     + (f", its hand-off to the solver ({format_seconds(r.handoff_s)})" if r.handoff_s else "")
                     + f"; {format_seconds(run.kept_back_s or 0.0)} kept back to decode, lay out, validate and write)")
    if run.resolve is not None:
        lines.append(f"re-solve     {run.resolve}")
    if run.bound_gap is not None:
        lines.append(f"bound gap    {100 * run.bound_gap:.2f}% ((written plan's makespan - the ILP bound) / that makespan; "
                     "the bound holds for this model's stages, not for every plan)")
    ev = run.plan.events
    n_re = sum(1 for e in ev if e.kind == "compute" and e.recompute)
    n_out = sum(1 for e in ev if e.kind == "swap_out")
    n_in = sum(1 for e in ev if e.kind == "swap_in")
    fig = event_figures(graph, run.plan)   # as every summary: from the events
    stall, peak = fig["stall_s"], fig["peak_bytes"]
    lines.append(
        f"makespan     {format_seconds(run.plan.makespan_s)} simulated (ideal {format_seconds(m.get('ideal_s', 0.0))}, "
        f"stall {format_seconds(stall)}); {n_re} recomputes, {n_out} offloads, {n_in} prefetches"
        + f"; peak {format_bytes_exact(peak)} of {format_bytes_exact(dev.usable_bytes)} usable")
    return lines
