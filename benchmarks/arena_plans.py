"""Exact arena offsets for byte-budget plans: does one offset per tensor fit the plan's memory, and what the
fallback (`hybrid.arena.layout.lay_out`, as `hybrid optimize` runs it by default) costs in makespan.

Plans: the Belady baseline (a byte budget, no fragmentation modelled), or the GA's best plan (`--planner
ga`: `--generations` generations, seed 1, one worker, so deterministic; a size-class winner already has its
layout and is listed as such). Graphs: the Checkmate training graphs at 50% and 25% of each graph's
unswapped peak, or with `--graphs DIR` every graph file there (e.g. the SwapAdvisor suite) at its own
device's memory. For each plan: the peak of live copy bytes, the best first layout over the capacity
(`arena / cap`, capacity = memory less the largest workspace, FORMATS rule 5), whether the fallback fired,
which (re-plan source and the memory it gave up), and the makespan cost against the fragmentation-free plan.
Writes results/arena_plans[_ga][_suite].{md,csv}. The layout's work is counted (`LayoutBudget`), so the
figures do not depend on the machine's load (only `layout s` does). `--quick` (5 generations, the quick budget) on
2 cores: the suite with `--planner ga` 41 s wall (41 s CPU; NasNet-25's layout 8 s; up to 62 s under load), the Checkmate graphs
about 11 s (Belady) and 10 s (GA). Full runs (30 generations, the default budget) were not timed on this
branch; expect several minutes for the suite (NasNet-25's candidates take about 5 s each to lay out).
"""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pandas as pd

from benchmarks.common import balanced_checkmate, checkmate_train_files, short_name, write_table
from ga import GAConfig, optimize
from hybrid.arena.layout import DEFAULT_BUDGET, QUICK_BUDGET, Replan, lay_out, replan_schedule
from hybrid.arena.lifetimes import plan_buffers
from hybrid.device import Device, preset
from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.graph.info import unswapped_peak
from hybrid.swap.baselines import run_baseline
from hybrid.validator import validate


def _cases(args: argparse.Namespace) -> list[tuple[str, Path, Graph, Device, float | str]]:
    out = []
    if args.graphs is not None:
        for path in sorted(Path(args.graphs).glob("*.json")):
            g = Graph.load(path)
            dev = g.device or preset("v100-16gb")
            out.append((path.stem, path, g, dev, "device"))
        return out
    for path in checkmate_train_files():
        g = balanced_checkmate(path)
        for frac in (0.5, 0.25):
            dev = replace(g.device or preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * frac), reserve_bytes=0)
            out.append((short_name(path), path, g, dev, frac))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=float, default=120.0,
                    help="Safety cap in seconds on each plan's layout (lay_out's work budget decides; the table "
                         "says when the cap fired, which makes that row depend on the machine's load).")
    ap.add_argument("--planner", choices=("belady", "ga"), default="belady")
    ap.add_argument("--generations", type=int, default=30, help="GA generations per plan (--planner ga).")
    ap.add_argument("--graphs", default=None, help="Folder of graph files (at their own device's memory) "
                                                   "instead of the Checkmate graphs.")
    ap.add_argument("--quick", action="store_true", help="5 generations, lay_out's quick work budget.")
    args = ap.parse_args()
    gens = 5 if args.quick else args.generations
    limit, budget = args.limit, (QUICK_BUDGET if args.quick else DEFAULT_BUDGET)
    rows: list[dict] = []
    paths: list[Path] = []
    for name, path, g, dev, memory in _cases(args):
        res = None
        try:
            if args.planner == "belady":
                plan = run_baseline(g, dev, "belady")
            else:
                res = optimize(g, dev, GAConfig(seed=1), generations=gens, workers=1)
                plan = res.to_plan()
        except InfeasibleError:
            continue
        paths.append(path)
        row: dict = {"graph": name, "memory": memory, "pool": plan.allocation.kind,
                     "makespan ms (byte budget)": plan.makespan_s * 1e3}
        if plan.allocation.kind != "unconstrained":
            rows.append(row)
            print(row, flush=True)
            continue
        pb = plan_buffers(g, plan)
        replans = [Replan("belady", lambda b, g=g, plan=plan: replan_schedule(g, plan, b))]
        if res is not None:
            best, space = res.best, res.space
            replans.insert(0, Replan("search genes", lambda b, g=g, plan=plan, best=best, space=space: replan_schedule(
                g, plan, b, order=best.schedule, options=space.options_for(best))))
        row.update({"tensors on device": len(pb.problem), "peak live / cap": pb.problem.peak_live() /
                    max(pb.problem.capacity or 1, 1)})
        try:
            out = lay_out(g, plan, limit, replans=replans, budget=budget)
        except InfeasibleError as e:
            row.update({"fallback": "failed", "why": str(e)[:80]})
            rows.append(row)
            print(row, flush=True)
            continue
        row.update({"first arena / cap": out.overflow + 1.0 if out.fallback else out.trials[0][3],
                    "fallback": out.fallback or "none", "source": out.source,
                    "memory given up": out.memory_given_up, "laid out by": out.solver,
                    "makespan ms (laid out)": out.plan.makespan_s * 1e3, "makespan cost": out.cost,
                    "layout s": out.solve_s, "capped": out.capped, "validates": validate(g, out.plan).valid})
        rows.append(row)
        print(row, flush=True)
    df = pd.DataFrame(rows)
    laid = df[df["pool"] == "unconstrained"] if len(df) else df
    fired = int((laid["fallback"] != "none").sum()) if len(laid) else 0
    costs = laid["makespan cost"].dropna() if "makespan cost" in laid else pd.Series(dtype=float)
    notes = (f"Planner: {args.planner}" + (f" ({gens} generations, seed 1, 1 worker)" if args.planner == "ga" else "")
             + f"; layout work budget {'quick' if args.quick else 'default'} ({budget}), safety cap {limit:g} s per "
             "plan (`capped` says where it fired). `first arena / cap`: the plan's best first layout (heuristics, "
             "then the exact search when within 6%) over the capacity (memory less the largest workspace); under 1 "
             f"fits. The fallback fired on {fired} of {len(laid)} byte-budget plans; makespan cost (laid out over "
             f"fragmentation-free, less 1): median {costs.median() if len(costs) else float('nan'):.4g}, "
             f"max {costs.max() if len(costs) else float('nan'):.4g}. `memory given up`: the share of the usable "
             "memory the written re-plan gave up (bisected to the largest budget that lays out).")
    stem = "arena_plans" + ("_ga" if args.planner == "ga" else "") + ("_suite" if args.graphs else "")
    print(write_table(df, stem, "Exact arena offsets for byte-budget plans, and the fallback's cost", notes,
                      graphs=sorted(set(paths)), paper="issue 19 (SwapAdvisor suite and Checkmate graphs)"))


if __name__ == "__main__":
    main()
