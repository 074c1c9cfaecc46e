"""Baselines and the Belady planner on the Checkmate training graphs at 50% and 25% of their unswapped peak.

Writes results/checkmate_baselines.{md,csv}. Every plan is checked by the validator.
"""
from __future__ import annotations

import argparse
from dataclasses import replace

import pandas as pd

from benchmarks.common import balanced_checkmate, checkmate_train_files, write_table
from hybrid.swap.baselines import run_baseline
from hybrid.device import preset
from hybrid.errors import InfeasibleError
from hybrid.graph.info import largest_op, unswapped_peak
from hybrid.graph.info import persistent_bound
from hybrid.bounds import graph_bound
from hybrid.validator import validate

KINDS = ("naive", "odswap", "vdnn", "belady")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fractions", default="0.5,0.25")
    args = ap.parse_args()
    rows = []
    for path in checkmate_train_files():
        g = balanced_checkmate(path)
        peak = unswapped_peak(g)
        ideal = sum(o.time_s for o in g.ops)
        need = largest_op(g)[1]
        for frac in (float(x) for x in args.fractions.split(",")):
            dev = replace(preset("v100-16gb"), name=f"v100-{int(frac * 100)}%peak", memory_bytes=int(peak * frac))
            row = {"graph": g.name, "ops": len(g.ops), "peak_GiB": peak / 2**30, "memory_frac": frac,
                   "ideal_s": ideal, "persistent_bound_s": persistent_bound(g, dev),
                   "graph_bound_swap_s": graph_bound(g, dev, recompute=False)}
            for kind in KINDS:
                try:
                    plan = run_baseline(g, dev, kind)
                except InfeasibleError:
                    row[f"{kind}_s"] = float("nan")
                    row[f"{kind}_ideal/makespan"] = float("nan")
                    continue
                report = validate(g, plan)
                if not report.valid:
                    raise SystemExit(f"invalid {kind} plan on {g.name}: {report.violations[0].message}")
                row[f"{kind}_s"] = plan.makespan_s
                row[f"{kind}_ideal/makespan"] = ideal / plan.makespan_s
            row["note"] = "" if need <= dev.memory_bytes else \
                f"infeasible: one op needs {need / peak:.0%} of the peak at once"
            rows.append(row)
            print(row["graph"], frac, {k: round(row.get(f'{k}_ideal/makespan', float('nan')), 3) for k in KINDS}, flush=True)
    df = pd.DataFrame(rows)
    notes = """Checkmate/Moccasin training graphs (../shared/benchmarks/checkmate-graphs), device v100-16gb's link
(12 GB/s each way) with memory set to the given fraction of the graph's unswapped peak (program order, each tensor
freed after its last use). Time scale: the files' cost units are unstated and differ between graphs, so each is
rescaled so that the iteration's compute equals moving all its tensor bytes once over the link ("balanced").
Columns `<kind>_ideal/makespan` are normalized throughput (1 = as fast as unlimited memory). `persistent_bound_s`
equals the ideal here (these graphs have no persistent tensors); `graph_bound_swap_s` counts activations too
(`hybrid.bounds.graph_bound`, swap only: any schedule; these baselines never rerun ops). NaN = the planner cannot run: some op's inputs and
outputs alone exceed the memory (whole tensors are the unit of swapping). All plans pass `hybrid validate`."""
    write_table(df, "checkmate_baselines", "Baselines on the Checkmate training graphs", notes,
                graphs=checkmate_train_files())


if __name__ == "__main__":
    main()
