"""CP-SAT no-overlap-2D against the MiniMalloc search on challenging instances at capacity 1,048,576.

Both answer the decision question (any assignment within the capacity), each with --limit seconds, CP-SAT
on one worker (this machine's two cores are shared). Writes results/arena_cpsat.{md,csv}.

The full run (`--only A,B,E,F,G,K`, 30 s each) takes up to 6 minutes. `--quick` (about 15 s with
`--only B`) gives both solvers a work budget instead of seconds: `--nodes` for the MiniMalloc search,
`--dtime` of CP-SAT's deterministic time (one worker, its default seed 1, as in the full run), so the
table is the same on every run but for its seconds columns.
"""
from __future__ import annotations

import argparse
import math
import subprocess
import time

import pandas as pd

from benchmarks.arena import CAPACITY, MEMPLAN, _warm_up
from benchmarks.common import ROOT, write_table
from hybrid.arena import exact
from hybrid.arena.cpsat import decide_cpsat
from hybrid.arena.problem import read_csv
from hybrid.arena.validate import check_offsets

STATUS = {exact.FOUND: "found", exact.INFEASIBLE: "infeasible", exact.TIMEOUT: "timeout"}
QUICK_NODES = 3_000_000      # B needs 1.6 M nodes (results/arena.csv); a node costs ~1-5 us here
QUICK_DTIME = 5.0            # CP-SAT's deterministic time units (B: found in well under one)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=float, default=30.0)
    ap.add_argument("--only", default="B,F,G,K")
    ap.add_argument("--quick", action="store_true", help="Work budgets instead of seconds (deterministic).")
    ap.add_argument("--nodes", type=int, default=QUICK_NODES, help="--quick: MiniMalloc search nodes.")
    ap.add_argument("--dtime", type=float, default=QUICK_DTIME, help="--quick: CP-SAT deterministic time.")
    args = ap.parse_args()
    _warm_up()
    rows = []
    read = []      # the instance files, named in the table with their sha256
    for name in args.only.split(","):
        path = MEMPLAN / "minimalloc-challenging" / f"{name}.{CAPACITY}.csv"
        p, _ = read_csv(path)
        read.append(path)
        row = {"instance": name, "buffers": len(p)}
        if args.quick:
            runs = (("minimalloc search", lambda: exact.decide(p, CAPACITY, math.inf, node_budget=args.nodes)),
                    ("cp-sat", lambda: decide_cpsat(p, CAPACITY, None, deterministic_time=args.dtime)))
        else:
            runs = (("minimalloc search", lambda: exact.decide(p, CAPACITY, time.perf_counter() + args.limit)),
                    ("cp-sat", lambda: decide_cpsat(p, CAPACITY, args.limit)))
        for solver, fn in runs:
            t0 = time.perf_counter()
            out = fn()
            secs = time.perf_counter() - t0
            if out.offsets is not None:
                assert check_offsets(p, out.offsets, CAPACITY).valid
            row[f"{solver}"] = STATUS.get(out.status, "timeout")
            row[f"{solver} work"] = out.nodes      # search nodes; CP-SAT: branches
            row[f"{solver} s"] = round(secs, 2)
        print(row, flush=True)
        rows.append(row)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    budget = (f"--quick: {args.nodes:,} search nodes and {args.dtime:g} units of CP-SAT deterministic time each "
              "(1 worker, CP-SAT's default seed): every figure but the seconds is the same on every run" if args.quick
              else f"{args.limit:.0f} s each; CP-SAT 1 worker")
    print(write_table(pd.DataFrame(rows), "arena_cpsat", "CP-SAT no-overlap-2D against the MiniMalloc search",
                      f"Commit {commit}. Decision at capacity 1,048,576, {budget}.", data=read))


if __name__ == "__main__":
    main()
