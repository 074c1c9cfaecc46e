"""`hybrid validate`: check a plan file against its graph (docs/formats.md rules 1–7)."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from hybrid.cli.options import graph_option, load_graph, load_plan
from hybrid.units import format_bytes, format_seconds
from hybrid.validator.context import finite_number
from hybrid.jsonio import report_json


@click.command("validate")
@graph_option
@click.option("--plan", "plan_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Plan file (hybrid-plan/1) to check.")
@click.option("--all", "show_all", is_flag=True,
              help="List every violation (up to 100), not only the first broken rule.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the verdict as JSON on stdout (valid, makespan_s, peak_bytes, usable_bytes, violations "
                   "with rule, message and event_index, found, notes); the exit status is the same.")
def command(graph_path: Path, plan_path: Path, show_all: bool, as_json: bool) -> None:
    """Check that a plan obeys every rule of docs/formats.md for its graph.

    Prints `valid: ...` with the makespan and the peak device memory (workspace
    included) and exits 0, or prints `invalid: rule N: ...` naming the first
    broken rule and the event that breaks it (every violation with --all) and
    exits 1. Unreadable or malformed files exit 2. Rule 0 means the plan was
    made for another graph (name, graph_sha256, unknown ids or impls). A
    `note:` line follows for each figure the plan's metrics state that its
    events do not give (stall, bytes moved, peak; a pool size its allocation
    does not have, a layout record's live peak): the rules do not bind
    metrics, but hybrid's summaries print the events' figures.
    """
    from hybrid.validator import validate

    graph = load_graph(graph_path)
    plan = load_plan(plan_path)
    report = validate(graph, plan, all=show_all)
    if as_json:
        click.echo(report_json({
            "valid": report.valid, "makespan_s": plan.makespan_s, "peak_bytes": report.peak_bytes,
            "usable_bytes": plan.device.usable_bytes,
            "violations": [{"rule": v.rule, "message": v.message, "event_index": v.event_index}
                           for v in report.violations],
            "found": max(report.found, len(report.violations)),
            "notes": [ln.removeprefix("note: ") for ln in _stated_differ(graph, plan)] if report.valid else []},
            indent=1))
        if not report.valid:
            sys.exit(1)
        return
    if report.valid:
        dev = plan.device
        mem = dev.usable_bytes    # what the plan may fill: rule 5's limit (a 1 GiB reserve is not the plan's)
        # not "usable: 1 GiB less a 1 GiB reserve" (a frontier's device: its usable bytes plus the reserve)
        of = (f"{format_bytes(mem)} usable, beside a {format_bytes(dev.reserve_bytes)} reserve" if dev.reserve_bytes
              else format_bytes(mem))
        click.echo(f"valid: {len(plan.events)} events, makespan {format_seconds(plan.makespan_s)}, "
                   f"peak {format_bytes(report.peak_bytes)} ({100.0 * report.peak_bytes / max(mem, 1):.1f}% of {of})")
        for line in _stated_differ(graph, plan):
            click.echo(line)
        return
    for v in report.violations:
        click.echo(f"invalid: rule {v.rule}: {v.message}")
    if report.found > len(report.violations) and report.violations[0].rule > 0:   # rule 0: another graph's plan
        # the first is the lowest rule's, which can be a consequence of an edit that breaks a higher rule earlier
        click.echo(f"  and {report.found - len(report.violations)} more: `hybrid validate --all` lists every "
                   "violation (the cause of this one may be among them, at an earlier time)")
    sys.exit(1)


def _stated_differ(graph, plan) -> list[str]:  # noqa: ANN001 - Graph, Plan
    """A note per metric the file states that its events (or, for the persistent-tensor bound, the graph on the
    plan's device) do not give (an edited file, another tool's reading)."""
    from hybrid.validator import event_figures
    from hybrid.validator.context import fmt_t

    got = event_figures(graph, plan)
    out = []
    for key, fmt in (("peak_bytes", format_bytes), ("bytes_h2d", format_bytes), ("bytes_d2h", format_bytes),
                     ("stall_s", format_seconds), ("swap_ins", str), ("swap_outs", str), ("frees", str),
                     ("recomputes", str), ("persistent_bound_s", fmt_t)):   # its 12 digits: a note fires above 1e-9
        stated = plan.metrics.get(key)
        if stated is None:
            continue
        if not finite_number(stated):   # the loader checks the metrics it reads back; these counts are for people
            why = "out of range" if isinstance(stated, int) and not isinstance(stated, bool) else "not a number"
            out.append(f"note: metrics.{key} is {_shown(stated)}, {why}: ignored")
            continue
        slack = (plan.tolerance_s if key == "stall_s" else 1e-9 * abs(got[key]) if key == "persistent_bound_s"
                 else 0)
        if abs(float(stated) - got[key]) > slack:
            source = ("the graph gives on the plan's device", "the graph's") if key == "persistent_bound_s" \
                else ("the events give", "the events'")
            out.append(f"note: metrics.{key} states {fmt(stated)}; {source[0]} {fmt(got[key])} "
                       f"(summaries print {source[1]} figure)")
    return out + _records_differ(graph, plan)


def _shown(x: object) -> str:
    """A metric's value as the file states it (JSON), cut short."""
    text = json.dumps(x, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _records_differ(graph, plan) -> list[str]:  # noqa: ANN001 - Graph, Plan
    """A note for a pool size the allocation does not have, or a layout record whose live peak (of the copies
    the arena holds: workspace lies outside it) is not the events' (a plan re-timed after its layout, an edited
    file)."""
    from hybrid.arena.lifetimes import plan_buffers
    from hybrid.plan import ArenaAllocation, SizeClassAllocation

    out = []
    stated, alloc = plan.metrics.get("pool_bytes"), plan.allocation
    if stated is not None:
        if isinstance(alloc, SizeClassAllocation):
            have = alloc.pool_bytes(plan.device.alignment_bytes)
            if int(stated) != have:
                out.append(f"note: metrics.pool_bytes states {format_bytes(stated)}; the size classes hold "
                           f"{format_bytes(have)}")
        else:
            what = (f"an arena of {format_bytes(alloc.arena_bytes)}" if isinstance(alloc, ArenaAllocation)
                    else "no pool (a byte budget)")
            out.append(f"note: metrics.pool_bytes states {format_bytes(stated)}, but the allocation is {what}")
    rec = plan.planner.get("arena") if isinstance(plan.planner, dict) else None
    if isinstance(rec, dict) and finite_number(rec.get("peak_live_bytes")) and \
            rec["peak_live_bytes"] != (peak := int(plan_buffers(graph, plan).problem.peak_live())):
        out.append(f"note: planner.arena.peak_live_bytes states {format_bytes(rec['peak_live_bytes'])}; the events "
                   f"give {format_bytes(peak)}")
    return out
