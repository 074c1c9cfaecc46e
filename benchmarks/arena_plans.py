"""Exact arena offsets for byte-budget plans: does one offset per tensor fit the plan's memory, and what the
fallback (re-plan with less memory until the layout fits) costs in makespan.

Plans: the Belady baseline (a byte budget, no fragmentation modelled), or the GA's best plan (`--planner
ga`, `--ga-seconds` each; a size-class winner already has its layout and is listed as such), on the
Checkmate training graphs at 50% and 25% of each graph's unswapped peak. For each: the peak of live copy
bytes, the arena `with_arena` finds (--limit seconds), whether it fits beside the largest workspace
(FORMATS rule 5: arena plus the running op's workspace within the memory); if not, the budget handed to the
planner shrinks by the overflow (at most --rounds times) and the makespan of the first plan that fits is
set against the original one. Writes results/arena_plans.{md,csv} (arena_plans_ga with --planner ga).
"""
from __future__ import annotations

import argparse
import subprocess
from dataclasses import replace

import pandas as pd

from benchmarks.common import ROOT, balanced_checkmate, checkmate_train_files, short_name, write_table
from hybrid.arena.lifetimes import plan_buffers, with_arena
from ga import GAConfig, optimize
from hybrid.device import Device, preset
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.errors import InfeasibleError
from hybrid.graph.info import unswapped_peak
from hybrid.swap.baselines import run_baseline
from hybrid.validator import validate


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=float, default=5.0, help="Seconds of exact search per plan.")
    ap.add_argument("--rounds", type=int, default=6, help="Re-plans at most, per plan that does not fit.")
    ap.add_argument("--planner", choices=("belady", "ga"), default="belady")
    ap.add_argument("--ga-seconds", type=float, default=20.0, help="GA search time per plan (--planner ga).")
    args = ap.parse_args()
    rows: list[dict] = []

    def make(g: Graph, dev: Device) -> Plan:
        if args.planner == "belady":
            return run_baseline(g, dev, "belady")
        return optimize(g, dev, GAConfig(seed=1), time_limit_s=args.ga_seconds, workers=1).to_plan()

    for path in checkmate_train_files():
        g = balanced_checkmate(path)
        for frac in (0.5, 0.25):
            mem = int(unswapped_peak(g) * frac)
            dev = replace(g.device or preset("v100-16gb"), memory_bytes=mem, reserve_bytes=0)
            try:
                plan = make(g, dev)
            except InfeasibleError:
                continue
            if plan.allocation.kind != "unconstrained":
                rows.append({"graph": short_name(path), "memory / peak": frac, "pool": plan.allocation.kind})
                print(rows[-1], flush=True)
                continue
            peak = plan_buffers(g, plan).problem.peak_live()
            row = {"graph": short_name(path), "memory / peak": frac, "pool": "unconstrained", "tensors on device": 0,
                   "peak live": peak}
            budget, rounds, laid = mem, 0, None
            first_arena = None
            while rounds <= args.rounds:
                try:
                    cand = plan if rounds == 0 else make(g, replace(dev, memory_bytes=budget))
                except InfeasibleError:       # the smaller budget cannot hold some op: no fallback plan
                    break
                cand = replace(cand, device=dev)          # valid at the smaller budget, so at the plan's memory
                pb = plan_buffers(g, cand)
                row["tensors on device"] = row["tensors on device"] or len(pb.problem)
                try:
                    laid, sol = with_arena(g, cand, args.limit)
                    first_arena = first_arena or sol.arena_bytes
                    break
                except InfeasibleError:
                    from hybrid.arena import exact
                    s = exact.solve(pb.problem, args.limit)
                    first_arena = first_arena or s.arena_bytes
                    cap = pb.problem.capacity or 1
                    budget = int(budget * cap / s.arena_bytes * 0.995)
                    rounds += 1
            row.update({"arena (first plan)": first_arena, "arena / peak live": first_arena / peak,
                        "fits without fallback": rounds == 0, "re-plans": rounds if laid is not None else "failed",
                        "makespan cost": (laid.makespan_s / plan.makespan_s - 1.0) if laid is not None else "",
                        "validates": bool(laid is not None and validate(g, laid).valid)})
            print(row, flush=True)
            rows.append(row)
    df = pd.DataFrame(rows)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    laid_rows = df[df["pool"] == "unconstrained"] if len(df) else df
    fired = int((laid_rows["fits without fallback"] == False).sum()) if len(laid_rows) else 0  # noqa: E712
    notes = (f"Commit {commit}. Planner: {args.planner}. `arena / peak live` for the plan as planned (one offset "
             f"per tensor, all its copies at it). The fallback fired on {fired} of {len(laid_rows)} byte-budget "
             "plans; `makespan cost` is the laid-out plan's makespan over the fragmentation-free plan's, less 1.")
    stem = "arena_plans" if args.planner == "belady" else "arena_plans_ga"
    print(write_table(df, stem, "Exact arena offsets for byte-budget plans, and the fallback's cost", notes))


if __name__ == "__main__":
    main()
