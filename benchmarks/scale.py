"""Commands at scale (issue 30): wall time and peak memory of `info`, `simulate`, `validate`, `baseline`,
`arena` and `optimize` on transformer training graphs of 10k, 30k and 100k ops.

The graphs come from `hybrid.graph.synthetic.transformer_of_size` (layers x sequence-parallel pieces,
per-tensor Adam steps; deterministic given --seed), written under out/scale/ (kept out of git) and named in the
table with their sha256. Each command runs in its own process (`python -m hybrid.cli.main ...`); its wall time
and peak resident set come from the operating system (os.wait4's rusage of that child). `simulate` writes the
plan that `validate` checks and `arena` lays out. Writes results/scale.{md,csv}; `--quick` (1k, 3k and 10k ops,
shorter time limits) writes results/scale_quick.{md,csv} instead, never the full table.

    python -m benchmarks.scale --quick
    python -m benchmarks.scale                        # 10k / 30k / 100k ops (tens of minutes on 2 cores)
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from benchmarks.common import ROOT, write_table
from hybrid.graph.synthetic import transformer_of_size

SIZES = (10_000, 30_000, 100_000)
QUICK_SIZES = (1_000, 3_000, 10_000)


def commands(graph: str, work: str, arena_limit: str, optimize_limit: str) -> list[tuple[str, list[str]]]:
    plan = f"{work}/simulate.json"
    return [
        ("info", ["info", "--graph", graph]),
        ("simulate", ["simulate", "--graph", graph, "--out", plan]),
        ("validate", ["validate", "--graph", graph, "--plan", plan]),
        ("baseline", ["baseline", "--graph", graph, "--kind", "belady", "--out", f"{work}/belady.json"]),
        ("arena", ["arena", "--graph", graph, "--plan", plan, "--time-limit", arena_limit,
                   "--out", f"{work}/arena.json"]),
        ("optimize", ["optimize", "--graph", graph, "--time-limit", optimize_limit, "--quiet",
                      "--out", f"{work}/optimize.json"]),
    ]


def measure(argv: list[str], timeout_s: float) -> dict:
    """Run `argv` in a child process of its own group: exit status, wall seconds, CPU seconds, peak RSS (MiB).
    A child still running after `timeout_s` is killed (status 'killed after timeout')."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, start_new_session=True)
    deadline = t0 + timeout_s
    status = None
    while status is None:
        pid, st, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status = os.waitstatus_to_exitcode(st)
            break
        if time.perf_counter() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            pid, st, usage = os.wait4(proc.pid, 0)
            status = "killed after timeout"
            break
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode(errors="replace").strip().splitlines() if proc.stderr else []
    return {"exit": status, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
            "peak_rss_MiB": usage.ru_maxrss / 1024, "stderr": err[-1][:160] if err and status != 0 else ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="1k, 3k, 10k ops and shorter limits; results/scale_quick.*")
    ap.add_argument("--sizes", default=None, help="Comma-separated op counts (default 10000,30000,100000).")
    ap.add_argument("--pieces", type=int, default=4, help="Sequence-parallel pieces per layer.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None, help="Comma-separated commands to run (default: all six).")
    ap.add_argument("--timeout", type=float, default=900.0, help="Seconds before a command is killed.")
    ap.add_argument("--out-dir", default="out/scale", help="Where graphs and plans go (repository-relative).")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(QUICK_SIZES if args.quick else SIZES)
    arena_limit, optimize_limit = ("2s", "10s") if args.quick else ("5s", "20s")
    only = set(args.only.split(",")) if args.only else None
    # numba compiles (or loads from its cache) each kernel on first use in a process: one unmeasured round of
    # every command on a small graph first, so the table measures the commands, not compilation
    warm = Path(args.out_dir) / "warm-up"
    (ROOT / warm).mkdir(parents=True, exist_ok=True)
    transformer_of_size(300, pieces=args.pieces, seed=args.seed).save(ROOT / warm / "graph.json")
    for name, cli in commands(str(warm / "graph.json"), str(warm), "1s", "2s"):
        if not only or name in only:
            measure([sys.executable, "-m", "hybrid.cli.main", *cli], args.timeout)
    rows, graphs = [], []
    for n in sizes:
        g = transformer_of_size(n, pieces=args.pieces, seed=args.seed)
        work = Path(args.out_dir) / f"transformer-{n}"
        (ROOT / work).mkdir(parents=True, exist_ok=True)
        gpath = work / "graph.json"
        g.save(ROOT / gpath)
        graphs.append(ROOT / gpath)
        for name, cli in commands(str(gpath), str(work), arena_limit, optimize_limit):
            if only and name not in only:
                continue
            r = measure([sys.executable, "-m", "hybrid.cli.main", *cli], args.timeout)
            rows.append({"ops": len(g.ops), "tensors": len(g.tensors), "command": name, **r,
                         "command line": "hybrid " + " ".join(cli)})
            print(f"{len(g.ops):>7} ops  {name:<9} exit {r['exit']}  {r['wall_s']:8.1f} s  "
                  f"{r['peak_rss_MiB']:8.0f} MiB  {r['stderr']}", flush=True)
    df = pd.DataFrame(rows)
    load = os.getloadavg()
    notes = (f"Graphs: `transformer_of_size(N, pieces={args.pieces}, seed={args.seed})` "
             "(hybrid.graph.synthetic; device memory half the program order's unswapped peak). "
             "wall_s: wall time of the whole command (start-up, loading, writing); cpu_s: user + system time of its "
             "process; peak_rss_MiB: its peak resident set (ru_maxrss). Every command ran once on a 300-op graph "
             "before (unmeasured), so numba's kernels were compiled or cached. "
             "`baseline` writes a laid-out plan, as `hybrid baseline` does by default (the Belady plan given "
             "offsets in one arena, re-planned with less memory where its byte budget does not lay out), so its "
             "time includes the layout; `arena` lays out the simulate plan alone. "
             f"Time limits: arena --time-limit {arena_limit}, optimize --time-limit {optimize_limit}. "
             "Measured on a machine shared with other jobs (2 cores, up to 9 sessions at once; load average "
             f"{load[0]:.1f} at the end of this run): wall times are inflated by the load, CPU times less so.")
    write_table(df, "scale_quick" if args.quick else "scale", "Commands at scale: wall time and peak memory",
                notes, graphs=graphs)


if __name__ == "__main__":
    main()
