"""What a second core buys the genetic search: the same search with 1 and 2 evaluation processes, same wall time.

`hybrid optimize --refine-mode beside` gives one core to the CP-SAT refiner (`hybrid.refine.beside`) and the
rest to the search, while `--refine none` gives the search all of them;
`results/refine_compare_beside.md` compares the two that way (GA-only with 2 evaluation processes, GA+CP-SAT
with 1 plus the refiner). This table shows what the second process buys the search alone: each graph's search
(`ga.optimize`, default settings, seed 1) runs for the same budget with `workers=1` (serial, in this process)
and `workers=2` (a process pool), one after the other; the search is the same for both (evaluation is
deterministic), so the difference is how many generations each got and the best makespan they reached.
`gen_ratio` = generations(2 workers) / generations(1 worker): above 1 on graphs whose evaluations take
milliseconds, below 1 on small graphs, where sending candidates to the pool costs more than it saves.

Writes results/ga_second_core.{md,csv}. What produced the committed table:
    python -m benchmarks.ga_second_core --time-limit 45 --only inception-v4-4,segnet_32_416_608_3_train,rnn-8-8k
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from benchmarks.common import ROOT, write_table
from benchmarks.refine_compare import graphs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-limit", type=float, default=45.0, help="seconds per run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--graph-dir", type=Path, default=ROOT / "out" / "graphs")
    ap.add_argument("--only", default="inception-v4-4,segnet_32_416_608_3_train,rnn-8-8k",
                    help="comma-separated graph names (as benchmarks.refine_compare's --only)")
    args = ap.parse_args()
    from ga import GAConfig, optimize
    from hybrid.swap.planner import compile_kernels

    compile_kernels()
    rows = []
    for label, g, dev in graphs(args.graph_dir, set(args.only.split(","))):
        row = {"graph": label, "ops": len(g.ops), "time_limit_s": args.time_limit}
        for workers in (1, 2):
            t0 = time.monotonic()
            r = optimize(g, dev, GAConfig(seed=args.seed), time_limit_s=args.time_limit, workers=workers)
            row[f"gens_{workers}w"] = r.generations
            row[f"evals_{workers}w"] = r.evaluations
            row[f"makespan_{workers}w_s"] = r.makespan_s
            row[f"wall_{workers}w_s"] = time.monotonic() - t0
            print(label, workers, r.generations, r.makespan_s, flush=True)
        row["gen_ratio"] = row["gens_2w"] / max(1, row["gens_1w"])
        rows.append(row)
    df = pd.DataFrame(rows)
    from benchmarks.refine_compare import graph_files

    write_table(df, "ga_second_core", "The GA with one and two evaluation processes, same wall time", __doc__,
                graphs=graph_files(args.graph_dir, set(df["graph"])))
    print(df.to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
