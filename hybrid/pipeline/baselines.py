"""The optimized plan next to the obvious alternatives (`hybrid optimize --compare-baselines`)."""
from __future__ import annotations

import dataclasses
import time

from hybrid.device import Device
from hybrid.graph import Graph
from hybrid.pipeline.result import Baselines, OptimizeResult
from hybrid.plan import Plan
from hybrid.units import format_seconds

BASELINES = ("naive", "odswap", "odswap-paper", "vdnn", "tflms", "belady", "recompute-only")
# the order they run in: the strongest first, so that a time limit that leaves some out leaves out those the
# optimized plan is least likely to have to beat (the table keeps BASELINES' order)
RUN_ORDER = ("belady", "recompute-only", "odswap", "vdnn", "tflms", "naive", "odswap-paper")
assert sorted(RUN_ORDER) == sorted(BASELINES), "RUN_ORDER runs every baseline once"


def with_faster_baseline(result: OptimizeResult, recompute: bool = True) -> None:
    """Write the fastest baseline instead of the search's plan where one laid out the same way is faster (the
    search's plan can lose to one when no layout of it fits and its re-plan with less memory gives up more than the
    baseline's: a checkpointed MLP at 10 MiB wrote 1.482 ms beside Belady's 1.304 ms). Issue 31: the written
    plan is never slower than a laid-out baseline. `recompute` False (a swap-only search): only baselines that
    rerun no op may be written. The rows keep the search's plan, relabelled; a note says why."""
    b = result.baselines
    allowed = {k: p for k, p in (b.plans if b is not None else {}).items() if recompute or not p.recomputes}
    if not allowed:
        return
    kind, fast = min(allowed.items(), key=lambda kv: kv[1].makespan_s)
    if not fast.makespan_s < result.plan.makespan_s * (1.0 - 1e-9):
        return
    old = result.plan
    info = dict(fast.planner) if isinstance(fast.planner, dict) else {}
    info["written_instead_of"] = {"name": old.planner.get("name", "?") if isinstance(old.planner, dict) else "?",
                                  "makespan_s": old.makespan_s}
    result.plan, result.searched_plan, result.baseline_written = dataclasses.replace(fast, planner=info), old, kind
    if 0 <= b.written_row < len(b.rows):
        row = b.rows[b.written_row]
        row["plan"] = (row["plan"].replace(", written (exact offsets)", ", laid out (not written)")
                       if ", written (exact offsets)" in row["plan"] else f"{row['plan']} (not written)")
        b.written_row = next((i for i, r in enumerate(b.rows) if r["plan"] == kind), -1)   # the baseline's row now
    b.notes.append(f"{kind}'s plan, laid out as the search's is, is faster than the search's laid out "
                   f"({format_seconds(fast.makespan_s)} < {format_seconds(old.makespan_s)}): it is written")


def lay_out_baseline(graph: Graph, device: Device, kind: str, plan: Plan,  # noqa: ANN201
                     time_limit_s: float | None = 10.0, recompute: bool = True):
    """Baseline `kind`'s byte-budget `plan` with arena offsets, through the layout the written plan goes through
    (`hybrid.arena.layout.lay_out`, heuristics only): where it does not fit, the same baseline planned again, on
    its own schedule and rules, with less memory (bisected to the largest budget that lays out). Never another
    planner's plan (no per-size-class fallback): like with like. `recompute`: as `run_baseline`'s, for the
    re-plans (the plan's own setting). `time_limit_s`: the layout's safety cap; None, none: the work budget alone
    decides, the same layout on any machine (benchmark tables). Returns `hybrid.arena.layout.Layout`;
    InfeasibleError where nothing lays out."""
    from hybrid.arena.layout import QUICK_BUDGET, Replan, lay_out
    from hybrid.graph.order import from_ids
    from hybrid.swap.baselines import run_baseline
    from hybrid.swap.to_plan import on_device

    given = from_ids(graph, plan.schedule) if kind == "odswap-paper" else None   # its random order is the baseline's

    def make(usable: int) -> Plan:
        smaller = dataclasses.replace(device, memory_bytes=usable + device.reserve_bytes)
        again = run_baseline(graph, smaller, kind, schedule=given, recompute=recompute)
        # the file says it was re-planned, and with what, as a written plan's re-plan does (replan_schedule)
        info = {**again.planner, "fallback": f"byte budget {usable}"} if isinstance(again.planner, dict) else None
        return on_device(graph, again, device, **({"planner": info} if info is not None else {}))

    budget = dataclasses.replace(QUICK_BUDGET, exact_tries=0)
    return lay_out(graph, plan, time_limit_s, replans=[Replan(kind, make)], budget=budget, classes=False)


def baseline_rows(graph: Graph, device: Device, search_plan: Plan, plan: Plan, refined: Plan | None = None,
                  deadline: float | None = None, bounds: dict[bool, float] | None = None,
                  relaxation: Plan | None = None, addresses: bool | None = None) -> Baselines:
    """Each baseline planned and validated, then the optimize rows: summary rows (`plan_row`) and notes.

    Like with like: where the search planned with addresses (`addresses`, `--addresses`; default: whether its plan
    is an arena), the baselines are arenas too, planned by the same address-aware walk (`run_baseline(addresses=
    True)`, laid out afterwards where the walk gives none). Where the written plan is a byte budget laid out
    afterwards (the default), each baseline is laid out the same way (`lay_out_baseline`: re-planned by its own
    rules with less memory where it does not fit), and the byte-budget plans the written one came from (`search_plan`,
    `refined`) are shown as such. With `--no-arena` (the written plan has no offsets) the baselines are byte budgets
    too. `relaxation`: the search's best re-planned on the byte budget of the full memory (memory that never
    fragments), shown as a bound row. `deadline` (monotonic): baselines not started by then are left out, with a
    note saying so. `bounds`: the any-order bounds to divide by (keyed by recompute; `hybrid.pipeline.rows.plan_row`),
    default both, computed."""
    from hybrid.errors import InfeasibleError
    from hybrid.pipeline.rows import plan_row
    from hybrid.arena.layout import laid_out
    from hybrid.swap.baselines import run_baseline
    from hybrid.validator import check

    out = Baselines()
    skipped = []
    if addresses is None:
        addresses = search_plan.allocation.kind == "arena"
    lay_baselines = not addresses and plan.allocation.kind == "arena"
    rows: dict[str, dict] = {}
    for kind in RUN_ORDER:
        if deadline is not None and time.monotonic() >= deadline:
            skipped.append(kind)
            continue
        try:
            p = run_baseline(graph, device, kind, recompute=True, addresses=addresses)
        except InfeasibleError as e:
            why = str(e).removeprefix(f"{kind} cannot run").lstrip(": ")   # the planner's own words name it too
            out.notes.append(f"{kind}: cannot run: {why}")
            continue
        left = 10.0 if deadline is None else max(0.5, min(10.0, deadline - time.monotonic()))   # layout's cap
        if addresses and p.allocation.kind != "arena":   # tflms, or no offsets from the walk: laid out after
            p = laid_out(graph, p, time_limit_s=left)
            if p.allocation.kind != "arena":
                out.notes.append(f"{kind}: cannot run: {p.planner['arena']['why']}")
                continue
        elif lay_baselines:
            try:
                layout = lay_out_baseline(graph, device, kind, p, left)
            except InfeasibleError as e:
                out.notes.append(f"{kind}: cannot run laid out: {e}")
                continue
            p = layout.plan
            if layout.fallback:
                out.notes.append(f"{kind}: {layout.describe()}")
        check(graph, p)
        rows[kind] = plan_row(kind, p, graph, bounds)
        if addresses or lay_baselines:   # like the written plan (offsets): one it could be instead
            out.plans[kind] = p
    out.rows.extend(rows[k] for k in BASELINES if k in rows)
    out.notes.sort(key=lambda n: BASELINES.index(n.split(":", 1)[0]) if n.split(":", 1)[0] in BASELINES
                   else len(BASELINES))   # stable: each baseline's notes in table order, the rest after
    if skipped:
        skipped = [k for k in BASELINES if k in skipped]
        out.notes.append(f"not run, the time limit was spent: {', '.join(skipped)} (give a longer --time-limit)")
    written_laid_out = (not addresses and refined is not None and refined is not plan
                        and plan.allocation.kind == "arena")
    best = refined if written_laid_out else plan
    if search_plan is not best:
        out.rows.append(plan_row("optimize (GA)", search_plan, graph, bounds))
    out.rows.append(plan_row("optimize" + (" (GA+CP-SAT)" if search_plan is not best else ""), best, graph, bounds))
    out.written_row = len(out.rows) - 1
    if written_laid_out:
        out.rows.append(plan_row("optimize, written (exact offsets)", plan, graph, bounds))
        out.written_row = len(out.rows) - 1
        out.notes.append("The baselines and the written plan give every tensor an arena offset (a baseline that "
                         "does not lay out is re-planned by its own rules with less memory); the optimize rows "
                         "above the written one are the byte budgets it was laid out from (--no-arena: write the "
                         "byte budget).")
    if not addresses and plan.allocation.kind == "unconstrained":
        out.notes.append("Every row is a byte budget without offsets, as the written plan is (no arena layout of "
                         "it fit, or --no-arena): the executor places their tensors at run time, compacting if "
                         "it must.")
    if relaxation is not None:
        out.rows.append(plan_row("byte budget, fragmentation-free (relaxation)", relaxation, graph, bounds))
    if addresses:
        out.notes.append("The baselines are arena plans, offsets given as planned (the address-aware walk; tflms, "
                         "and a baseline the walk cannot fit, laid out afterwards by hybrid.arena.layout.laid_out), as the search's "
                         "(an arena, or size classes where those won); the relaxation is the search's best "
                         "schedule and genes on a byte budget that never fragments (--byte-budget searches that "
                         "way).")
    return out
