"""One-screen summaries of plans (the tables commands print)."""
from __future__ import annotations

from typing import Iterable

from tabulate import tabulate

from hybrid.graph import Graph
from hybrid.plan.metrics import event_counts
from hybrid.pipeline.rows import any_order_bound, plan_row  # noqa: F401 - re-exported for the commands
from hybrid.units import counted, format_bytes, format_seconds

def _bound_of(rows: list[dict], key: str) -> float | None:
    """The one bound the rows divide by under `key`; None where there is none, several, or 0 (a graph whose ops
    take no time: no ratio to show)."""
    values = {r.get(key) for r in rows if r.get(key) == r.get(key) and r.get(key) is not None}
    return values.pop() if len(values) == 1 and next(iter(values)) > 0 else None


def table(rows: Iterable[dict]) -> str:
    """The rows as one Markdown table. Each ratio column divides by one bound, named in its header: makespan
    over the any-order bound for swap-only plans ("-" on a row that recomputes: that bound does not hold for
    it) and over the bound with recompute (every row); without a graph, over the persistent-tensor bound.
    Where a row reruns ops, a `reruns` column gives their compute time: makespan = ideal + stall + reruns."""
    rows = list(rows)
    sb, rb = _bound_of(rows, "swap_bound_s"), _bound_of(rows, "recompute_bound_s")
    reruns = any(r.get("recompute_s", 0.0) > 0 for r in rows)   # then makespan = ideal + stall + reruns
    shown = []
    for r in rows:
        row = {"plan": r["plan"], "makespan": format_seconds(r["makespan_s"]), "ideal": format_seconds(r["ideal_s"]),
               "ideal/makespan": f"{r['ideal/makespan']:.3f}"}
        if sb is not None:
            v = r.get("makespan/swap_bound", float("nan"))
            row[f"vs {format_seconds(sb)} (any order, swap only)"] = f"{v:.3f}x" if v == v else "-"
        if rb is not None:
            v = r.get("makespan/recompute_bound", float("nan"))
            row[f"vs {format_seconds(rb)} (any order, with recompute)"] = f"{v:.3f}x" if v == v else "-"
        if sb is None and rb is None:
            v = r["makespan/persistent_bound"]
            row["vs persistent-tensor bound"] = f"{v:.3f}x" if v == v else "-"
        row["stall"] = format_seconds(r["stall_s"])
        if reruns:
            row["reruns"] = format_seconds(r.get("recompute_s", 0.0))
        row.update({"h2d": format_bytes(r["bytes_h2d"]),
                    "d2h": format_bytes(r["bytes_d2h"]), "peak": format_bytes(r["peak_bytes"])})
        shown.append(row)
    text = tabulate(shown, headers="keys", tablefmt="github", disable_numparse=True)
    if sb is not None and any(r.get("makespan/swap_bound", 0.0) != r.get("makespan/swap_bound", 0.0)
                              and r.get("recomputes") for r in rows):
        text += "\n(-: the plan reruns ops, and the swap-only bound holds only for plans that do not)"
    if rb is not None and any(r["plan"] == "ideal" for r in rows):
        text += "\n(- in both bound columns: planned with unlimited memory (ideal), which no bound of this memory holds for)"
    return text


def optimize_json(res, wall_s: float) -> dict:  # noqa: ANN001 - hybrid.pipeline.OptimizeResult
    """`hybrid optimize --json`'s figures beyond the plan's own (`hybrid.cli.options.json_summary`)."""
    result, layout, kind = res.search, res.layout, res.plan.allocation.kind
    out = {"wall_s": wall_s, "generations": result.generations, "evaluations": result.evaluations,
           "search_s": result.search_time_s, "stop_reason": result.stop_reason, "interrupted": res.interrupted,
           "evaluator": result.evaluator, "workers": result.workers,
           "search_makespan_s": res.search_plan.makespan_s, "refinement": res.refinement.note.lstrip("; "),
           "arena": None if layout is None or (kind != "arena" and not layout.fallback) else layout.to_json(),
           "difference": res.difference(), "skipped": list(res.skipped), "time_limit_s": res.budget.total_s,
           "reserve_s": res.budget.reserve_s, "timings": dict(vars(res.timings))}
    if res.baselines is not None:
        out["baselines"] = res.baselines.written_rows()   # `written`: the written plan's row
        out["baseline_notes"] = res.baselines.notes
    return out


def optimize_text(graph: Graph, device, res, wrote: list | tuple = (), wall_s: float | None = None) -> str:  # noqa: ANN001
    """`hybrid optimize`'s summary of `res` (a `run_optimize` result; from Python: `optimize_text(graph, None,
    res)`): the written plan first (and why it is not the search's best, at what cost), its bound, bytes moved,
    reruns and stall, the search, what the time limit left out, where the time went, the baselines. `wrote`: the files written
    (none: "plan (not written)"); `device`: default the plan's; `wall_s`: default the run's own."""
    device = res.plan.device if device is None else device
    wall_s = res.timings.wall_s if wall_s is None else wall_s
    from hybrid.graph.info import persistent_bound

    result, plan, layout, t = res.search, res.plan, res.layout, res.timings
    m = plan.metrics
    ideal = float(m["ideal_s"])
    h2d, d2h = int(m.get("bytes_h2d", 0)), int(m.get("bytes_d2h", 0))
    kind = plan.allocation.kind
    pool = (f"{len(plan.allocation.classes)} size classes" if kind == "size_classes"
            else f"arena of {format_bytes(plan.allocation.arena_bytes)}" if kind == "arena" else "byte budget")
    head = f"wrote {', '.join(map(str, wrote))}" if wrote else "plan (not written)"
    # a graph whose ops take no time has an ideal (and a makespan, without copies) of 0: as fast as ideal
    times_ideal = plan.makespan_s / ideal if ideal > 0 else 1.0 if plan.makespan_s == 0 else float("inf")
    share = ideal / plan.makespan_s if plan.makespan_s > 0 else 1.0
    lines = [f"{head}: makespan {format_seconds(plan.makespan_s)} "
             f"({times_ideal:.3f} x ideal, {100 * share:.1f}% of ideal throughput); pool: {pool}"]
    if res.difference():
        lines.append("  " + res.difference())
    elif layout is not None and layout.describe():
        lines.append(f"  {layout.describe()}")
    bound = res.bound()
    lb = f"lower bound {format_seconds(bound[0])} ({bound[1]})" if bound else "lower bound not computed in time"
    lines.append(f"  ideal        {format_seconds(ideal)}   {lb}, persistent tensors only "
                 f"{format_seconds(persistent_bound(graph, plan.device))}")
    lines.append(f"  bytes moved  {format_bytes(h2d + d2h)} ({format_bytes(h2d)} in, {format_bytes(d2h)} out)")
    # where the makespan over the ideal goes: reruns and waits (a plan that only reruns moved few bytes)
    ran = event_counts(plan)
    stall = m.get("stall_s")
    lines.append("  reruns       " + (f"{counted(ran['recomputes'], 'rerun')} ({format_seconds(ran['recompute_s'])} "
                                      "of compute)" if ran["recomputes"] else "none")
                 + (f"; stall {format_seconds(float(stall))}" if stall is not None else ""))
    stop = result.stop_reason
    why = "reached the lower bound (no plan can be faster)" if stop == "lower bound" else stop
    unused = res.budget.total_s - wall_s   # the reserve sized for a layout (and baselines) that took less
    early = stop == "time limit" and not res.interrupted and unused > max(1.0, 0.1 * res.budget.total_s)
    if early:
        why = "its share of the time limit (the rest was kept for the layout: see time)"
    lines.append(f"  search       {graph.name} on {device.name} ({format_bytes(device.usable_bytes)} usable): "
                 f"{counted(result.generations, 'generation')}, "
                 f"{counted(result.evaluations, 'evaluation')} in {format_seconds(result.search_time_s)} ({result.evaluator}, "
                 f"{result.workers} worker{'s' if result.workers != 1 else ''}); stopped: {why}{res.refinement.note}")
    lines += [f"  left out     {s}" for s in res.skipped]
    lines.append(f"  time         {format_seconds(wall_s)} of {format_seconds(res.budget.total_s)}: setup "
                 f"{format_seconds(t.setup_s)}" + (f" (compiling the planner's kernels: {format_seconds(t.compile_s)})"
                                                   if t.compile_s > 2.0 else "")
                 + f", search {format_seconds(t.search_s)}"
                 + (f", layout {format_seconds(t.layout_s)}" if res.layout is not None else "")
                 + (f" (compiling its exact search: {format_seconds(t.exact_compile_s)})" if t.exact_compile_s > 2.0
                    else "")
                 + (f", re-timing the laid-out plan {format_seconds(t.polish_s)}" if t.polish_s > 0 else "")
                 + (f", baselines {format_seconds(t.baselines_s)}" if res.baselines is not None else "")
                 + f" (reserve {format_seconds(res.budget.reserve_s)})"
                 + (f"; {format_seconds(unused)} left unused: the reserve, sized before the search for the "
                    "layout's exact search and the baselines, was not all needed" if early else ""))
    if res.baselines is not None:
        lines.append("\n" + table(res.baselines.rows) + "".join(f"\n{n}" for n in res.baselines.notes))
    return "\n".join(lines)
