"""A plan's timeline as a picture: the three streams as lanes (a fourth, `cpu`, for a placement plan's host
ops; reruns of ops, recompute, in their own colour) and device memory over time against the usable memory and
the memory the plan's allocation reserves (its arena, or its size classes' pool) (PNG).

Stalls — stretches where the compute stream waits — are shaded, so a reader
sees at a glance where copies hold the computation back; plotting a plan
before and after refinement on a shared time axis shows what changed.
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.plan.events import CPU_STREAM, STREAM_OF_KIND, STREAMS
from hybrid.plan.metrics import compute_stalls

COLORS = {"compute": "#4c72b0", "h2d": "#55a868", "d2h": "#c44e52", CPU_STREAM: "#8172b2"}
RECOMPUTE_COLOR = "#dd8452"   # a compute event that reruns an op (recompute) instead of reading a kept output
RESERVED_COLOR = "#8172b2"    # the memory the plan's allocation reserves: its arena, or its size classes' pool
OFF_SCALE_SHARE = 0.05        # a plan holding less than this share of its usable memory is drawn on its own scale


def reserved_bytes(plan: Plan) -> tuple[int, str] | None:
    """The device bytes the plan's allocation reserves and its name ("arena", "size-class pool"), or None for a
    byte budget (no allocation of its own: the live bytes are what it takes)."""
    alloc = plan.allocation
    if alloc.kind == "arena":
        return int(alloc.arena_bytes), "arena"
    if alloc.kind == "size_classes":
        return int(alloc.pool_bytes(plan.device.alignment_bytes)), "size-class pool"
    return None


def lanes_of(plan: Plan) -> tuple[str, ...]:
    """The GPU's three streams, and the host's `cpu` stream when the plan runs ops there (placement plans)."""
    return STREAMS + ((CPU_STREAM,) if any(e.on_cpu for e in plan.events) else ())


def memory_profile(graph: Graph, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """(times, bytes) step function of device bytes in use (tensor copies at the device's alignment plus the
    running ops' workspace), read as the validator reads rule 5 (`hybrid.validator.memory_over_time`): its
    highest point is `hybrid validate`'s peak. HybridError for a plan of another graph."""
    from hybrid.validator import memory_over_time

    check_plan_of(graph, plan, "memory_profile")
    return memory_over_time(graph, plan)


def check_plan_of(graph: object, plan: object, where: str, what: str = "plan") -> None:
    """HybridError unless `graph` is a Graph and `plan` a Plan made for it, checked as the validator's rule 0
    (`hybrid.validator.require_plan_of`: the graph's name, and its file's sha256 where the plan states one):
    a plan of another graph would otherwise draw a wrong picture silently, or fail on its first unknown id."""
    from hybrid.errors import HybridError
    from hybrid.validator import require_plan_of as validator_check

    if not isinstance(graph, Graph):
        hint = f"; load it with Graph.load({str(graph)!r})" if isinstance(graph, (str, Path)) else ""
        raise HybridError(f"{where}: graph must be a hybrid.graph.Graph, got {type(graph).__name__}{hint}")
    if not isinstance(plan, Plan):
        hint = f"; load it with Plan.load({str(plan)!r})" if isinstance(plan, (str, Path)) else ""
        raise HybridError(f"{where}: {what} must be a hybrid.plan.Plan, got {type(plan).__name__}{hint}")
    validator_check(graph, plan, f"{where}: {what}", f"graph {graph.name!r}")
    ops, tensors = graph.op_index, graph.tensor_index
    for i, e in enumerate(plan.events):   # same name, edited file: an unknown id, said once rather than KeyError
        if (e.op is not None and e.op not in ops) or (e.tensor is not None and e.tensor not in tensors):
            bad = f"op {e.op!r}" if e.op is not None and e.op not in ops else f"tensor {e.tensor!r}"
            raise HybridError(f"{where}: {what}'s events[{i}] names {bad}, which graph {graph.name!r} does not "
                              "have; run hybrid.validator.validate(graph, plan) to see why")


def _plot_items(graph: object, plans: object) -> list[tuple[str, Plan]]:
    """`plans` as (label, plan) pairs, each checked against `graph`; HybridError naming the bad argument."""
    from hybrid.errors import HybridError

    usage = "pass one Plan, or (label, Plan) pairs such as [('before', p1), ('after', p2)]"
    if isinstance(plans, Plan):
        items = [("plan", plans)]
    elif isinstance(plans, (str, bytes, Path, Graph)) or not isinstance(plans, Iterable):
        raise HybridError(f"plot_timeline: plans must be a Plan or a list of (label, Plan) pairs, got "
                          f"{type(plans).__name__}; {usage}")
    else:
        items = list(plans)
        if not items:
            raise HybridError(f"plot_timeline: plans is empty; {usage}")
        for k, item in enumerate(items):
            if not (isinstance(item, tuple | list) and len(item) == 2 and isinstance(item[1], Plan)):
                raise HybridError(f"plot_timeline: plans[{k}] must be a (label, Plan) pair, got "
                                  f"{type(item).__name__}; {usage}")
        items = [(str(label), plan) for label, plan in items]
    for k, (label, plan) in enumerate(items):
        what = "plans (one Plan)" if isinstance(plans, Plan) else f"plans[{k}] ({label!r})"
        check_plan_of(graph, plan, "plot_timeline", what)
    return items


def _draw(ax_lanes, ax_mem, graph: Graph, plan: Plan, label: str, unit: float, unit_name: str) -> None:
    from hybrid.units import format_bytes, format_seconds

    lanes = lanes_of(plan)
    n = len(lanes)
    reruns = False
    for i, lane in enumerate(lanes):
        for rerun in (False, True):
            bars = [(e.start_s / unit, (e.end_s - e.start_s) / unit) for e in plan.events
                    if e.stream == lane and bool(e.kind == "compute" and e.recompute) == rerun]
            if bars:
                ax_lanes.broken_barh(bars, (n - 1 - i - 0.4, 0.8), edgecolor="none",
                                     facecolors=RECOMPUTE_COLOR if rerun else COLORS[lane])
                reruns = reruns or rerun
    if reruns:
        from matplotlib.patches import Patch

        ax_lanes.legend(handles=[Patch(color=COLORS["compute"], label="compute"),
                                 Patch(color=RECOMPUTE_COLOR, label="recompute (an op run again)")],
                        loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=2, fontsize=7, frameon=False,
                        borderaxespad=0.1)   # above the lanes, right of the title: no bar hidden
    for s, e in compute_stalls(plan):   # the compute lane is the top one: [n - 1.4, n - 0.6] of [-0.6, n - 0.4]
        ax_lanes.axvspan(s / unit, e / unit, ymin=(n - 1) / n + 0.02, ymax=0.98, color="#f0b400", alpha=0.35, lw=0)
    ax_lanes.set_yticks(range(n), list(reversed(lanes)))
    ax_lanes.set_ylim(-0.6, n - 0.4)
    ideal = plan.metrics.get("ideal_s")
    extra = f", ideal/makespan {ideal / plan.makespan_s:.3f}" if ideal and plan.makespan_s > 0 else ""
    ax_lanes.set_title(f"{label}: makespan {format_seconds(plan.makespan_s)}{extra} (shaded: compute stalls)",
                       fontsize=9, loc="left")
    t, b = memory_profile(graph, plan)
    t = np.r_[t, plan.makespan_s]
    b = np.r_[b, b[-1]]
    mem = plan.device.usable_bytes   # rule 5's limit: what a plan may fill (a reserve is not the plan's)
    reserved = reserved_bytes(plan)
    held = max(int(b.max()), reserved[0] if reserved else 0)
    # a plan far below its memory (a placement plan's 13 MiB on a 15 GiB card) is drawn on its own scale: on the
    # memory's it was a flat line at 0; the usable line is then off the axis, and its label says so
    off_scale = 0 < held < OFF_SCALE_SHARE * mem
    top = held if off_scale else max(mem, held)
    scale, sname = next(((s, n) for s, n in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")) if top >= 2 * s),
                        (1, "bytes"))
    ax_mem.step(t / unit, b / scale, where="post", color="#333333", lw=0.8)
    if not off_scale:
        ax_mem.axhline(mem / scale, color="#c44e52", ls="--", lw=0.8)
    if reserved is not None:   # what the allocation holds whatever is live: the live bytes fit inside it
        ax_mem.axhline(reserved[0] / scale, color=RESERVED_COLOR, ls="-.", lw=0.9)
        ax_mem.text(0.0, 1.02, f"-.- {reserved[1]} {format_bytes(reserved[0])} (reserved by the allocation)",
                    transform=ax_mem.transAxes, ha="left", va="bottom", fontsize=7, color=RESERVED_COLOR)
    ax_mem.set_ylabel(f"device {sname}", fontsize=8)
    ax_mem.set_ylim(0, top / scale * 1.08)
    # not "(memory less a reserve)": a frontier's device is its usable bytes plus a 1 GiB reserve, which read
    # "usable 3.67 MiB (1 GiB less a 1 GiB reserve)"
    usable = (f"usable {format_bytes(mem)}" + (f", beside a {format_bytes(plan.device.reserve_bytes)} reserve"
                                               if plan.device.reserve_bytes else "")
              + (f" (above this scale: the plan holds at most {format_bytes(held)})" if off_scale else ""))
    # above the axes where the axis ends at the plan's own peak (drawn over the curve inside them)
    ax_mem.text(0.995, 1.02 if off_scale else 0.9, usable, transform=ax_mem.transAxes,
                ha="right", va="bottom" if off_scale else "top", fontsize=7, color="#c44e52")


def plot_timeline(graph: Graph, plans: Plan | Sequence[tuple[str, Plan]], path: str | Path | None = None,
                  title: str | None = None, width: float = 12.0):
    """Draw one plan, or several (label, plan) pairs stacked on one time axis; save a PNG when `path` is given.

    Returns the matplotlib figure (a `matplotlib.figure.Figure` built without pyplot, so the caller's backend,
    e.g. Jupyter's inline one, is left as it was; a notebook shows it when it is a cell's value). HybridError for
    a graph that is not a Graph, plans that are neither a Plan nor (label, Plan) pairs, or a plan of another graph.
    """
    from matplotlib.figure import Figure

    items = _plot_items(graph, plans)
    span = max(p.makespan_s for _, p in items) or 1.0
    unit, unit_name = (1.0, "s") if span >= 1 else ((1e-3, "ms") if span >= 1e-3 else (1e-6, "us"))
    ratios = []
    for _ in items:
        ratios += [1.6, 1.0]
    fig = Figure(figsize=(width, 2.6 * len(items) + 0.6))
    axes = fig.subplots(2 * len(items), 1, sharex=True, gridspec_kw={"height_ratios": ratios})
    axes = np.atleast_1d(axes)
    for k, (label, plan) in enumerate(items):
        _draw(axes[2 * k], axes[2 * k + 1], graph, plan, label, unit, unit_name)
    axes[-1].set_xlabel(f"time ({unit_name})")
    axes[-1].set_xlim(0, span / unit * 1.01)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        from hybrid.files import save_figure

        save_figure(fig, path)
    return fig


# ---- Chrome trace / Perfetto ---------------------------------------------------------------------------------

TRACE_THREADS = {lane: i + 1 for i, lane in enumerate(STREAMS + (CPU_STREAM,))}   # thread ids 1-4


def chrome_trace(rows: Sequence[tuple[str, str, str, float, float, dict]], process: str, pid: int = 1,
                 memory: tuple[np.ndarray, np.ndarray] | None = None) -> list[dict]:
    """Trace Event Format events for one run: rows are (name, category, stream, start_s, end_s, args).

    One thread per stream (compute, h2d, d2h, and cpu for a placement plan's host ops) named by metadata events, complete ("X") events in
    microseconds, and device bytes in use as a counter, so the file opens in chrome://tracing or Perfetto
    beside a torch.profiler trace.
    """
    ev: list[dict] = [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": process}}]
    used = {r[2] for r in rows}
    for lane, tid in TRACE_THREADS.items():
        if lane == CPU_STREAM and lane not in used:
            continue   # the host's thread only for a placement plan
        ev.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": lane}})
        ev.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    for name, cat, lane, s, e, args in rows:
        ev.append({"name": name, "cat": cat, "ph": "X", "pid": pid, "tid": TRACE_THREADS[lane],
                   "ts": s * 1e6, "dur": max(0.0, e - s) * 1e6, "args": args})
    if memory is not None:
        for t, b in zip(*memory):
            ev.append({"name": "device memory", "ph": "C", "pid": pid, "ts": float(t) * 1e6,
                       "args": {"bytes": int(b)}})
    return ev


def compute_trace_row(op_id: str, op_kind: str, recompute: bool, lane: str, start: float, end: float,
                      **args: object) -> tuple[str, str, str, float, float, dict]:
    """A compute event as a trace row: named by its op ("(recompute)" on a rerun), category compute or
    recompute. The plan's rows and the measured run's (`executor.measure.measured_trace_rows`) are made here, so
    the two processes of one trace match event by event."""
    return (f"{op_id} (recompute)" if recompute else op_id, "recompute" if recompute else "compute", lane, start,
            end, {"op": op_id, "kind": op_kind, **args})


def copy_trace_row(kind: str, tensor_id: str, nbytes: int, lane: str, start: float, end: float,
                   **args: object) -> tuple[str, str, str, float, float, dict]:
    """A swap_in or swap_out as a trace row, named by its kind and tensor (as `compute_trace_row`)."""
    return (f"{kind} {tensor_id}", kind, lane, start, end, {"tensor": tensor_id, "bytes": nbytes, **args})


def plan_trace_rows(graph: Graph, plan: Plan) -> list[tuple[str, str, str, float, float, dict]]:
    """A plan's stream events as trace rows (frees have no stream: they appear in the memory counter).
    HybridError for a plan of another graph."""
    check_plan_of(graph, plan, "plan_trace_rows")
    rows = []
    size = {t.id: t.bytes for t in graph.tensors}
    for e in plan.events:
        if e.kind == "compute":
            rows.append(compute_trace_row(e.op, graph.op(e.op).kind, e.recompute, e.stream, e.start_s, e.end_s,
                                          **({"impl": e.impl} if e.impl else {})))
        elif e.kind in ("swap_in", "swap_out"):
            rows.append(copy_trace_row(e.kind, e.tensor, size[e.tensor], STREAM_OF_KIND[e.kind], e.start_s,
                                       e.end_s))
    return rows


def write_chrome_trace(path: Path, runs: Sequence[tuple[str, list[tuple[str, str, str, float, float, dict]],
                                                       tuple[np.ndarray, np.ndarray] | None]]) -> None:
    """Write one trace file with a process per run (e.g. several plans, or a plan and its measured run)."""
    import json

    events: list[dict] = []
    for pid, (name, rows, memory) in enumerate(runs, start=1):
        events += chrome_trace(rows, name, pid, memory)
    from hybrid.files import write_whole

    write_whole(path, json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}))
