"""`hybrid simulate --graph G [--from PLAN] --out P`: the swap planner on one schedule and pool."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.plan import ArenaAllocation, Plan, SizeClassAllocation
from hybrid.swap.pools import PoolArrays, byte_pool, per_size_pool, pool_from_allocation
from hybrid.cli.options import (device_from, device_options, graph_option, json_summary, load_graph, load_plan,
                                DEVICE_KEYS, given_flags, out_option, prepare_output, recompute_option)
from hybrid.swap.to_plan import to_plan
from hybrid.graph.order import depth_first_order, from_ids, program_order
from hybrid.report.summary import plan_row, table
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.baselines import RECOMPUTE_RATIO
from hybrid.swap.planner import SwapPlanner
from hybrid.units import format_bytes, format_seconds
from hybrid.validator import require_valid, write_plan
from hybrid.jsonio import report_json

# what --from takes from the plan instead of these flags
FROM_OVERRIDES = ("schedule", "allocation")
# the planner flags; with --from, none given: the plan's own planner options where it records them
PLANNER_FLAGS = ("victim", "recency", "recompute")
MIB = 1 << 20


@click.command("simulate")
@graph_option
@click.option("--from", "from_path", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="Keep this plan's schedule, allocation and device; re-plan its swaps with the planner options it "
                   "records (--policy, --recency, --recompute, if given, replace their part; device flags, if given, "
                   "change the plan's device). A size-class or unconstrained plan keeps its pool; an arena plan "
                   "(what `hybrid optimize` and `hybrid arena` write) is re-planned with a byte budget and its "
                   "offsets dropped: lay the result out again with `hybrid arena`. Not with --schedule or "
                   "--pool.")
@click.option("--schedule", type=click.Choice(["program", "dfs"]), default="program", show_default=True,
              help="Operator order when not --from: the graph's own (program) order or depth-first.")
@click.option("--pool", "--allocation", "allocation", type=click.Choice(["bytes", "classes", "size-classes"]),
              default="bytes", show_default=True,
              help="Pool when not --from, as `hybrid optimize --pool` names them: a byte budget (bytes), or one size "
                   "class per tensor size sized from the unswapped peak (classes; --allocation size-classes, the "
                   "older spelling, is the same).")
@click.option("--policy", "--victim", "victim", type=click.Choice(["belady", "lru"]), default="belady",
              show_default=True,
              help="Which tensor to evict when memory is full, as `hybrid optimize --policy` names it (--victim, "
                   "the older spelling, is the same).")
@click.option("--recency", type=click.IntRange(min=0, max=2**31 - 1), default=2, show_default=True,
              help="Do not evict tensors used within this many ops (unless nothing else can go); 0: no such rule.")
@recompute_option
@device_options
@out_option
@click.option("--json", "as_json", is_flag=True,
              help="Print the summary as one JSON object on stdout (makespan_s, ideal_s, plan, ...; `notes`: what the output differs from --from in).")
def command(graph_path: Path, from_path: Path | None, schedule: str, allocation: str, victim: str, recency: int,
            recompute: bool, out_path: Path | None, as_json: bool, **kw) -> None:
    """Plan swaps (and, unless --no-recompute, drops and reruns) for one schedule and pool with the swap planner
    and simulate the three streams."""
    prepare_output(out_path, "--out")
    ctx = click.get_current_context()
    device_flags = given_flags(ctx, DEVICE_KEYS)
    overridden = given_flags(ctx, FROM_OVERRIDES) if from_path is not None else []
    if overridden:
        raise HybridError(f"{overridden[0]} with --from: the plan's {overridden[0].lstrip('-')} is kept; drop "
                          f"{overridden[0]}, or drop --from to plan the graph with it")
    g = load_graph(graph_path)
    notes: list[str] = []
    src: Plan | None = None
    if from_path is not None:
        src = load_plan(from_path)
        require_valid(g, src, f"--from {from_path}")   # another graph, or a broken plan: exit 1, as validate
        host = next((e for e in src.events if e.kind == "compute" and e.on_cpu), None)
        if host is not None:   # the swap planner puts every op on the device: its placement would be dropped
            raise HybridError(f"--from {from_path}: op {host.op!r} runs on the host (a placement plan from `hybrid "
                              "place`); simulate re-plans every op on the device, which would drop that placement: "
                              "use this plan as it is (`hybrid timeline` shows it)")
        order = from_ids(g, src.schedule, f"{from_path}: schedule")   # valid: a topological order of g's ops
        dev = _device_for_plan(g, src, kw, device_flags, notes)
        if isinstance(src.allocation, ArenaAllocation):
            pool = byte_pool(g, dev)
            again = (f"`hybrid arena --graph {graph_path} --plan {out_path} --out ...`" if out_path is not None
                     else "`hybrid arena` (write it with --out first)")
            notes.append(f"{from_path} is an arena plan: its offsets are dropped and its schedule re-planned with a "
                         f"byte budget of {format_bytes(dev.usable_bytes)}; lay the result out again with {again}")
        else:
            pool = pool_from_allocation(g, src.allocation, dev)
    else:
        dev = device_from(g, kw)
        order = program_order(g) if schedule == "program" else depth_first_order(g)
        pool = byte_pool(g, dev) if allocation == "bytes" else per_size_pool(g, order, dev)
    opt = PlannerOptions(victim=victim, recency=recency, recompute_ratio=RECOMPUTE_RATIO if recompute else 0.0)
    if src is not None:
        opt = _options_for_plan(src, opt, given_flags(ctx, PLANNER_FLAGS), notes)
    planner = SwapPlanner(g, dev)
    if src is not None and from_path is not None and isinstance(src.allocation, SizeClassAllocation):
        _check_classes_fit(pool, planner, dev, device_flags, from_path)
    opt = planner.faster_options(order, pool, opt)
    aug = planner.plan(order, pool, opt)
    plan = to_plan(aug, {"name": "simulate", "planner_options": opt.describe()})
    if src is not None and "refine" in (src.planner if isinstance(src.planner, dict) else {}):
        # the copies' timing CP-SAT chose is the planner's to choose again: say so where it moves the makespan
        if abs(plan.makespan_s - src.makespan_s) > src.tolerance_s:
            notes.append(f"{from_path} was re-timed by CP-SAT refinement ({format_seconds(src.makespan_s)}); that "
                         "timing is not kept: simulate re-plans its schedule and pool with the swap planner "
                         f"({format_seconds(plan.makespan_s)}); `hybrid validate` and `hybrid timeline` read a "
                         "plan as it is")
    if out_path is not None:
        write_plan(g, plan, out_path, "the simulated plan")   # the one way a command writes a plan: validated
    if as_json:
        click.echo(report_json({**json_summary(g, dev, plan, out_path), "notes": notes}, indent=1))
    else:
        click.echo(table([plan_row("simulate", plan, g)]))
        for note in notes:
            click.echo(f"note: {note}")
        if out_path is not None:
            click.echo(f"wrote {out_path}")


def _options_for_plan(src: Plan, flags_opt: PlannerOptions, planner_flags: list[str],
                      notes: list[str]) -> PlannerOptions:
    """The planner options a --from plan is re-planned with: its own (`planner.planner_options`, which the swap
    planner's plans record), each planner flag given replacing its own field, so that re-simulating a plan
    re-plans it as it was made and a difference has a cause the notes name. Never as an arena: simulate plans
    a byte budget (an arena plan's offsets are dropped)."""
    from dataclasses import replace

    own = PlannerOptions.of_plan(src)
    if own is None:
        return flags_opt
    own = replace(own, addresses=False)
    if not planner_flags:
        notes.append(f"re-planned with the plan's own planner options ({_options_text(own)}); --policy, --recency "
                     "or --recompute replace their part")
        return own
    changed = {}
    if "--policy" in planner_flags:
        changed["victim"] = flags_opt.victim
    if "--recency" in planner_flags:
        changed["recency"] = flags_opt.recency
    if any(f in planner_flags for f in ("--recompute", "--no-recompute")):
        changed["recompute_ratio"] = flags_opt.recompute_ratio
        if flags_opt.recompute_ratio == 0.0:
            changed["recompute_only"] = False
    opt = replace(own, **changed)
    notes.append(f"re-planned with the plan's own planner options but {', '.join(planner_flags)} as given "
                 f"({_options_text(opt)})")
    return opt


def _options_text(opt: PlannerOptions) -> str:
    rc = (f"recompute only (depth {opt.recompute_depth})" if opt.recompute_only else
          f"recompute ratio {opt.recompute_ratio:g}, depth {opt.recompute_depth}" if opt.recomputes else "swap only")
    extra = (["one stream (no overlap)"] if not opt.overlap else []) + (
        ["persistent tensors kept resident"] if opt.keep_persistent else [])
    return ", ".join([f"{opt.victim}, recency {opt.recency}, lookahead {opt.lookahead}, {opt.passes} passes", rc]
                     + extra)


def _device_for_plan(g: Graph, src: Plan, kw: dict[str, Any], device_flags: list[str], notes: list[str]) -> Device:
    """The plan's own device ("keep this plan's ... allocation" is meaningless on another memory), changed only
    by the device flags given; where they change it, a note says how, since the result is then not the plan's."""
    dev = device_from(None, kw, base=src.device, peak_of=g)
    changes = _device_changes(src.device, dev)
    if changes:
        notes.append(f"the device ({', '.join(device_flags)}) differs from the plan's: {'; '.join(changes)}")
    return dev


def _device_changes(old: Device, new: Device) -> list[str]:
    """`field old -> new` for each device field that differs, in units a reader checks against the flags."""
    def rate(x: float) -> str:
        return f"{x / 1e9:.4g} GB/s"

    fields = (("name", "device", str), ("memory_bytes", "memory", format_bytes),
              ("reserve_bytes", "reserve", format_bytes), ("h2d_bytes_per_s", "h2d", rate),
              ("d2h_bytes_per_s", "d2h", rate), ("transfer_latency_s", "latency", format_seconds),
              ("alignment_bytes", "alignment", lambda b: f"{b} B"))
    return [f"{label} {fmt(getattr(old, key))} -> {fmt(getattr(new, key))}"
            for key, label, fmt in fields if getattr(old, key) != getattr(new, key)]


def _check_classes_fit(pool: PoolArrays, planner: SwapPlanner, dev: Device, device_flags: list[str],
                       plan_path: Path) -> None:
    """A size-class pool is the plan's to keep: where it and the largest workspace exceed the device's usable
    memory, no flag of this command can shrink the classes, so say how much --memory runs it (the planner's own
    message, `lower the class counts`, names nothing the user can do here)."""
    ws = int(planner.op_ws.max(initial=0))
    need = int(pool.capacity) + ws
    if need <= dev.usable_bytes:
        return
    # --memory sets the reserve to 0 unless --reserve is given (hybrid.device.resolve_device)
    reserve = dev.reserve_bytes if "--reserve" in device_flags else 0
    memory_mib = math.ceil((need + reserve) / MIB)
    flags = ", ".join(device_flags)
    keep = f", or drop {flags} to keep the plan's device" if device_flags else ""
    wsp = f" and the largest workspace {format_bytes(ws)} more" if ws else ""
    raise HybridError(f"{flags or f'--from {plan_path}'}: the plan's size classes (class bytes x count) take "
                      f"{format_bytes(pool.capacity)}{wsp}, {need} bytes in all, over the device's usable "
                      f"{dev.usable_bytes} bytes; give --memory {memory_mib}MiB or more{keep}, or plan this memory "
                      "anew with `hybrid optimize --memory ...`")
