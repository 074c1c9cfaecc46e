"""What a second core buys the genetic search: the same search with 1 and 2 evaluation processes.

`hybrid optimize --refine-mode beside` gives one core to the CP-SAT refiner (`hybrid.refine.beside`) and the
rest to the search, while `--refine none` gives the search all of them;
`results/refine_compare_beside_quick.md` compares the two that way (GA-only with 2 evaluation processes,
GA+CP-SAT with 1 plus the refiner; its full table comes from `python -m benchmarks.regenerate --only
refine_compare_beside`, about 110 minutes). This table shows what the second process buys the search alone: each graph's search
(`ga.optimize`, default settings, seed 1) runs with `workers=1` (serial, in this process) and `workers=2` (a
process pool), one after the other. The search is the same for both (evaluation is deterministic), so the
difference is how fast each runs its generations:
- with --generations N (a work budget) both run N generations: `makespan_*` and `same_result` (the two
  searches reached the same makespan, as they must) are fixed by the seed; `wall_*_s`, `gens_per_s_*` and
  `gen_ratio` = gens_per_s_2w / gens_per_s_1w are timings of this machine;
- with --time-limit S (the default; equal wall time) both run S seconds: every column but `ops` is a timing
  of this machine, the makespans included (they depend on how many generations each got).
`gen_ratio` is above 1 on graphs whose evaluations take milliseconds, below 1 on small graphs, where sending
candidates to the pool costs more than it saves.

Writes results/ga_second_core.{md,csv}. The full run (about 5 minutes: 45 s x 2 runs x 3 graphs):
    python -m benchmarks.ga_second_core --time-limit 45 --only inception-v4-4,segnet_32_416_608_3_train,rnn-8-8k
The quick run (about 10 s; 10 generations of about 50 evaluations each on rnn-8-8k):
    python -m benchmarks.ga_second_core --generations 10 --only rnn-8-8k
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from benchmarks.common import ROOT, write_table
from benchmarks.refine_compare import graphs

SAFETY_S = 600.0  # with --generations: the wall-clock limit that only a stuck run would reach


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-limit", type=float, default=45.0, help="seconds per run (without --generations)")
    ap.add_argument("--generations", type=int, default=None,
                    help="a work budget instead: generations per run (the makespans are then fixed by the seed)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--graph-dir", type=Path, default=ROOT / "out" / "graphs")
    ap.add_argument("--only", default="inception-v4-4,segnet_32_416_608_3_train,rnn-8-8k",
                    help="comma-separated graph names (as benchmarks.refine_compare's --only)")
    args = ap.parse_args()
    if args.generations is not None and args.generations < 1:
        raise SystemExit(f"ga_second_core: --generations must be at least 1, got {args.generations}")
    from ga import GAConfig, optimize
    from hybrid.swap.planner import compile_kernels

    compile_kernels()
    work = args.generations is not None
    budget = {"time_limit_s": SAFETY_S, "generations": args.generations} if work else {"time_limit_s": args.time_limit}
    rows = []
    for label, g, dev in graphs(args.graph_dir, set(args.only.split(","))):
        row: dict = {"graph": label, "ops": len(g.ops)}
        row.update({"generations": args.generations} if work else {"time_limit_s": args.time_limit})
        for workers in (1, 2):
            t0 = time.monotonic()
            r = optimize(g, dev, GAConfig(seed=args.seed), workers=workers, **budget)
            wall = time.monotonic() - t0
            if work and r.stop_reason != "generations":
                raise SystemExit(f"ga_second_core: {label} with {workers} workers stopped by {r.stop_reason!r} "
                                 f"before {args.generations} generations")
            row[f"gens_{workers}w"] = r.generations
            row[f"evals_{workers}w"] = r.evaluations
            row[f"makespan_{workers}w_s"] = r.makespan_s
            row[f"wall_{workers}w_s"] = wall
            row[f"gens_per_s_{workers}w"] = r.generations / wall
            print(label, workers, r.generations, r.makespan_s, f"{wall:.1f} s", flush=True)
        row["gen_ratio"] = row["gens_per_s_2w"] / row["gens_per_s_1w"] if row["gens_per_s_1w"] else float("nan")
        if work:
            row["same_result"] = row["makespan_1w_s"] == row["makespan_2w_s"]
        rows.append(row)
    df = pd.DataFrame(rows)
    from benchmarks.refine_compare import graph_files

    if work:
        head = (f"Work budget: {args.generations} generations per run. Figures depend on timing: `wall_*_s`, "
                "`gens_per_s_*` and `gen_ratio` are measured on this (shared, 2-core) machine; the other columns "
                "are fixed by the seed.")
        title = "The GA with one and two evaluation processes, same generations"
    else:
        head = (f"Time budget: {args.time_limit:g} s per run. Figures depend on timing: every column but `ops` "
                "and `time_limit_s` (the makespans too, through the generations each run got).")
        title = "The GA with one and two evaluation processes, same wall time"
    write_table(df, "ga_second_core", title, head + "\n\n" + __doc__,
                graphs=graph_files(args.graph_dir, set(df["graph"])))
    print(df.to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
