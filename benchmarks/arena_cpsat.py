"""CP-SAT no-overlap-2D against the MiniMalloc search on challenging instances at capacity 1,048,576.

Both answer the decision question (any assignment within the capacity), each with --limit seconds, CP-SAT
on one worker (this machine's two cores are shared). Writes results/arena_cpsat.{md,csv}.
"""
from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=float, default=30.0)
    ap.add_argument("--only", default="B,F,G,K")
    args = ap.parse_args()
    _warm_up()
    rows = []
    for name in args.only.split(","):
        p, _ = read_csv(MEMPLAN / "minimalloc-challenging" / f"{name}.{CAPACITY}.csv")
        row = {"instance": name, "buffers": len(p)}
        for solver, fn in (("minimalloc search", lambda: exact.decide(p, CAPACITY, time.perf_counter() + args.limit)),
                           ("cp-sat", lambda: decide_cpsat(p, CAPACITY, args.limit))):
            t0 = time.perf_counter()
            out = fn()
            secs = time.perf_counter() - t0
            if out.offsets is not None:
                assert check_offsets(p, out.offsets, CAPACITY).valid
            row[f"{solver}"] = STATUS.get(out.status, "timeout")
            row[f"{solver} s"] = round(secs, 2)
        print(row, flush=True)
        rows.append(row)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    print(write_table(pd.DataFrame(rows), "arena_cpsat", "CP-SAT no-overlap-2D against the MiniMalloc search",
                      f"Commit {commit}. Decision at capacity 1,048,576, {args.limit:.0f} s each; CP-SAT 1 worker."))


if __name__ == "__main__":
    main()
