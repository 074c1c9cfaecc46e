"""Why refinement gains little on a plan: how close it is to the schedule bound, and what decides its makespan.

For each graph of benchmarks.refine_compare and each seed, reads the GA-only and GA+CP-SAT plans that a
comparison saved (out/<stem>/<label>/, --stem) and reports:
- the schedule bound (`hybrid.bounds.schedule_bound`): no plan with the GA's schedule, memory and resident
  tensors, which refinement keeps, can be faster; `room` = 1 - bound / makespan is the most refinement
  could gain;
- the critical path (`hybrid.swap.critical_path`): seconds of the makespan decided by compute, by swap_outs
  (d2h) and by swap_ins (h2d) running back to back, and the longest such copy stretch. Time on a
  saturated copy stream can only shrink by moving fewer bytes then.

No search here: its figures are as deterministic as the plans it reads (every figure of a work-budget
refine_compare run; see that module). A few seconds for the quick run's two graphs, about a minute for the
full run's plans.

Writes results/refine_gap.{md,csv}. What produced the committed table (after
`python -m benchmarks.refine_compare --mode after ...` saved its plans):
    python -m benchmarks.refine_gap --stem refine_compare
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from benchmarks.common import ROOT, quick_stem, write_table
from benchmarks.refine_compare import graphs


def _describe(graph, plan) -> dict:  # noqa: ANN001
    from hybrid.bounds import schedule_bound
    from hybrid.swap.critical_path import critical_path, path_shares

    path = critical_path(graph, plan)
    shares = path_shares(path, plan.makespan_s)
    copies = path[path["kind"] != "compute"]
    row = {"makespan_s": plan.makespan_s, "bound_s": schedule_bound(graph, plan)}
    row["room"] = 1.0 - row["bound_s"] / plan.makespan_s
    row.update({k: v for k, v in shares.items()})
    if len(copies):
        c = copies.loc[copies["busy_s"].idxmax()]
        row["longest_copy"] = f"{c['kind']} {c['start_s']:.3g}-{c['end_s']:.3g} s ({c['bytes'] / 1e9:.3g} GB)"
    else:
        row["longest_copy"] = ""
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stem", default="refine_compare", help="plans under out/<stem>/<label>/")
    ap.add_argument("--graph-dir", type=Path, default=ROOT / "out" / "graphs")
    ap.add_argument("--only", default=None, help="comma-separated graph names")
    args = ap.parse_args()
    from hybrid.plan import Plan

    only = set(args.only.split(",")) if args.only else None
    rows = []
    for label, g, _dev in graphs(args.graph_dir, only):
        folder = ROOT / "out" / quick_stem(args.stem) / label.replace("@", "_")   # a quick run reads the quick plans
        for ga_path in sorted(folder.glob("*-ga.json")):
            seed = int(ga_path.name.rsplit("-seed", 1)[1].split("-")[0])
            for arm, path in (("ga", ga_path), ("ga+cpsat", ga_path.with_name(ga_path.name[:-8] + "-ga+cpsat.json"))):
                if path.exists():
                    rows.append({"graph": label, "seed": seed, "arm": arm, **_describe(g, Plan.load(path))})
                    print(rows[-1], flush=True)
    df = pd.DataFrame(rows)
    ga = df[df["arm"] == "ga"].groupby("graph", sort=False)[["room", "copy_share"]].median()
    closed = ", ".join(f"{lab} {100 * r:.1f}%" for lab, r in zip(ga.index, ga["room"]) if r < 0.05)
    open_ = ", ".join(f"{lab} {100 * r:.1f}% (copies decide {100 * c:.0f}% of its makespan)"
                      for lab, r, c in zip(ga.index, ga["room"], ga["copy_share"]) if r >= 0.05)
    verdict = (f"GA-only plans with less than 5% room (median over seeds): {closed or 'none'}. "
               f"With 5% or more: {open_ or 'none'}.")
    from benchmarks.refine_compare import graph_files

    write_table(df, "refine_gap", "Room left for refinement, and what decides each plan's makespan",
                __doc__ + "\n" + verdict, graphs=graph_files(args.graph_dir, set(df["graph"])))
    print(df.to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
