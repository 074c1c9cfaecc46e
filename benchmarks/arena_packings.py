"""The exact arena search on perfect packings (issue 34): hybrid against MiniMalloc on random tilings.

Each instance is `hybrid.arena.packings.perfect_packing(n, seed, kind)`: n buffers that tile a 1 MiB x 4n strip
exactly (guillotine cuts, or cuts and pinwheels: "mixed"), so the optimum is the capacity, 1,048,576. The
question is MiniMalloc's benchmark question: any assignment within the capacity (`hybrid arena --csv F
--capacity 1048576`, run in-process as that command runs it: heuristics, the repair, then the exact search,
all within the limit). MiniMalloc (its binary, built from its source: `--minimalloc PATH`; the column is left
out with a note without it) runs on the same CSV right after, with the same limit; its own "Elapsed time"
is its time (the process start and CSV parse are not counted, nor hybrid's). Every assignment either returns
is checked by `hybrid.arena.validate`. Writes results/arena_packings.{md,csv} (`--quick`: 5 instances per size,
20 s each, results/arena_packings_quick.*).

The full run (100 instances, up to 60 s per instance and solver) takes about 45 minutes; to run it in parts (one
size, or a range of instances, per call), give `--instances A:B` (instances A..B-1 of each size in --sizes):
each part writes its rows and its own command and commit to results/arena_packings_parts/, and `--merge`
writes the table from the parts once they cover every instance (the same rows a single run writes).

    python -m benchmarks.arena_packings --sizes 200 --instances 0:10     # one part
    python -m benchmarks.arena_packings --merge                          # the table from all parts
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import re
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import RESULTS, command_line, commit, quick_stem, write_table
from hybrid.arena import exact
from hybrid.arena.heuristics import LOWEST_FILL_MAX, best_heuristic
from hybrid.arena.packings import KINDS, perfect_packing
from hybrid.arena.problem import read_csv, write_csv
from hybrid.arena.validate import check_offsets

REPAIR_MOVES = 400        # as `hybrid arena --csv` runs it (hybrid/cli/commands/arena.py)
SIZES = (100, 150, 200, 250, 300)
MM_NOTE = ("MiniMalloc: its binary built from github.com/google/minimalloc (commit 9f5cf81, against Debian's abseil "
           "20220623, -O3), run right after hybrid on the same CSV; `mm s` is its own elapsed time, `mm backtracks` "
           "its backtrack count (hybrid's `nodes` counts placements tried, a different unit).")


def _setting() -> str:
    """Where this process ran, as the table states it: a pinned core (the timed slot) or shared cores."""
    cores, nice = sorted(os.sched_getaffinity(0)), os.nice(0)
    if len(cores) == 1:
        return (f"Both solvers ran one after the other pinned to one core (core {cores[0]}, nice {nice}: the "
                "project's timed slot, a core of its own), so their times on an instance compare")
    return (f"Run on {len(cores)} shared cores at nice {nice}, one solver at a time; the machine may have been "
            "loaded, so compare the solvers only on the same instance (the ratio column)")


def _parts_dir() -> Path:
    return RESULTS / quick_stem("arena_packings_parts")


def _instances(spec: str, per_size: int) -> range:
    """`A:B` -> instances A..B-1 (of `per_size`); empty -> all of them."""
    if not spec:
        return range(per_size)
    a, sep, b = spec.partition(":")
    try:
        lo, hi = int(a), int(b)
    except ValueError:
        raise SystemExit(f"error: --instances {spec!r}: give A:B (instances A..B-1 of each size)") from None
    if not sep or not 0 <= lo < hi <= per_size:
        raise SystemExit(f"error: --instances {spec!r}: need 0 <= A < B <= --per-size ({per_size})")
    return range(lo, hi)


def _minimalloc(binary: str, csv: Path, capacity: int, limit: float, out: Path) -> dict:
    """One MiniMalloc run: solved (and its output valid), its own elapsed seconds, its backtracks."""
    r = subprocess.run([binary, f"--capacity={capacity}", f"--input={csv}", f"--output={out}",
                        f"--timeout={limit}s"], capture_output=True, text=True, timeout=limit + 60)
    el = re.search(r"Elapsed time ([0-9.]+)s", r.stderr)
    bt = re.search(r"Backtracks (\d+)", r.stderr)
    solved = r.returncode == 0 and out.exists()
    if solved:
        p, off = read_csv(out)
        chk = check_offsets(p, off, capacity=capacity)
        assert chk.valid, (csv, chk.problems[:1])
    return {"mm solved": solved, "mm s": float(el.group(1)) if el else float("nan"),
            "mm backtracks": int(bt.group(1)) if bt else -1}


def _summary(df: pd.DataFrame, limit: float, with_mm: bool) -> str:
    """Per size: solved counts and median seconds (an unsolved instance counts the full limit)."""
    rows = []
    for n, g in df.groupby("buffers"):
        hs = np.where(g["solved"], g["seconds"], limit)
        r = {"buffers": n, "instances": len(g), "hybrid solved": int(g["solved"].sum()),
             "hybrid median s": float(np.median(hs))}
        if with_mm:
            ms = np.where(g["mm solved"], g["mm s"], limit)
            r.update({"MiniMalloc solved": int(g["mm solved"].sum()), "MiniMalloc median s": float(np.median(ms)),
                      "median of hybrid / MiniMalloc (per instance)": float(np.median(hs / np.maximum(ms, 1e-3)))})
        r["best heuristic / optimum (median)"] = float(g["heuristic /opt"].median())
        rows.append(r)
    return pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3g")


def _notes(df: pd.DataFrame, limit: float, seed: int, per_size: int, with_mm: bool, warm: str, setting: str,
           parts: str = "") -> str:
    seeds = f"{seed}..{seed + per_size - 1}"
    mm_note = MM_NOTE if with_mm else "MiniMalloc's column left out: no binary given (--minimalloc PATH)."
    return (f"Instances: `hybrid.arena.packings.perfect_packing(n, seed, kind)`, seeds {seeds} per size, kinds "
            f"{' and '.join(KINDS)} taking turns; capacity 1,048,576 = the optimum (each tiles 1 MiB x 4n "
            f"exactly). Limit {limit:.0f} s per instance and solver; hybrid's time is `exact.solve(F, limit, "
            "capacity=C, first_fit=True, repair_moves=400)` in-process (as `hybrid arena --csv F --capacity C` "
            f"runs it) after loading its cached kernels once ({warm}, not counted). {mm_note} Solved = an "
            f"assignment within the capacity, checked by hybrid.arena.validate. {setting}. Unsolved instances "
            f"count the full limit in the medians.{parts}\n\nPer size:\n\n" + _summary(df, limit, with_mm))


def _merge(args: argparse.Namespace) -> None:
    """The table from results/arena_packings_parts/: every part must have the same limit, seed and per-size
    count, and together they must cover each size's instances exactly once."""
    metas = sorted(_parts_dir().glob("*.json"))
    if not metas:
        raise SystemExit(f"error: --merge: no parts in {_parts_dir()}; run parts with --instances A:B first")
    parts = [(json.loads(m.read_text()), pd.read_csv(m.with_suffix(".csv"))) for m in metas]
    keys = {(m["limit"], m["seed"], m["per_size"], m["with_mm"]) for m, _ in parts}
    if len(keys) != 1:
        raise SystemExit(f"error: --merge: parts disagree on (limit, seed, per-size, MiniMalloc): {sorted(keys)}; "
                         f"remove the stale ones from {_parts_dir()}")
    limit, seed, per_size, with_mm = keys.pop()
    df = pd.concat([d for _, d in parts], ignore_index=True).sort_values(["buffers", "seed"], kind="stable")
    for n, g in df.groupby("buffers"):
        want = list(range(seed, seed + per_size))
        if sorted(g["seed"]) != want:
            raise SystemExit(f"error: --merge: size {n} has seeds {sorted(g['seed'])}, expected {seed}.."
                             f"{seed + per_size - 1} once each; run the missing parts")
    settings = {m["setting"] for m, _ in parts}
    pinned = [re.search(r"pinned to one core \(core (\d+), nice (-?\d+)", s) for s in settings]
    if len(settings) == 1:
        setting = settings.pop()
    elif all(pinned):                   # parts on different cores of the timed slot
        cores = ", ".join(sorted({m.group(1) for m in pinned}))
        nices = ", ".join(sorted({m.group(2) for m in pinned}))
        setting = (f"Both solvers ran one after the other pinned to one core (each part on one of cores {cores}, "
                   f"nice {nices}: the project's timed slot), so their times on an instance compare")
    else:
        setting = "; ".join(sorted(settings))
    warm = ", ".join(sorted({f"{m['warm_s']:.1f} s" for m, _ in parts}))
    lines = "".join(f"\n- `{m['command']}` (code {m['commit']}, {m['date']}, {m['wall_s'] / 60:.1f} min)"
                    for m, _ in parts)
    notes = _notes(df.reset_index(drop=True), limit, seed, per_size, with_mm, warm, setting,
                   f"\n\nRun in {len(parts)} parts (each part's command, its code and its wall time):{lines}")
    print(write_table(df.reset_index(drop=True), "arena_packings", "Perfect packings: the exact search against "
                      "MiniMalloc", notes, paper="MiniMalloc (ASPLOS'23); issue 34"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="Comma-separated buffer counts.")
    ap.add_argument("--per-size", type=int, default=20, help="Instances per size (kinds take turns).")
    ap.add_argument("--limit", type=float, default=60.0, help="Seconds per instance and solver.")
    ap.add_argument("--seed", type=int, default=0, help="Instance k of size n has seed SEED + k.")
    ap.add_argument("--minimalloc", default=os.environ.get("HYBRID_MINIMALLOC", ""),
                    help="MiniMalloc's binary, built from github.com/google/minimalloc outside the repository "
                         "[default: $HYBRID_MINIMALLOC, as regenerate passes it].")
    ap.add_argument("--instances", default="", metavar="A:B",
                    help="Run only instances A..B-1 of each size: a part, written to results/arena_packings_parts/ "
                         "instead of the table (see --merge).")
    ap.add_argument("--merge", action="store_true",
                    help="Run nothing: write the table from the parts in results/arena_packings_parts/.")
    ap.add_argument("--quick", action="store_true", help="5 instances per size, 20 s each; writes *_quick.*")
    args = ap.parse_args()
    if args.quick:
        args.per_size, args.limit = 5, 20.0
    if args.merge:
        _merge(args)
        return
    ks = _instances(args.instances, args.per_size)
    sizes = [int(x) for x in args.sizes.split(",") if x]
    with_mm = bool(args.minimalloc) and Path(args.minimalloc).is_file()
    # the binary lies outside the repository: tables and parts name it by the variable that gives it
    sys.argv[:] = ["$HYBRID_MINIMALLOC" if a == args.minimalloc and a else a for a in sys.argv]
    t0 = time.perf_counter()
    exact.warm_up()                   # loads the cached kernels (compiles them on a first run)
    warm = perfect_packing(20, 0)
    exact.solve(warm.problem, 10.0, capacity=warm.capacity, first_fit=True, repair_moves=REPAIR_MOVES)
    best_heuristic(warm.problem, LOWEST_FILL_MAX)
    warm_s = time.perf_counter() - t0
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            for k in ks:
                seed, kind = args.seed + k, KINDS[k % len(KINDS)]
                pk = perfect_packing(n, seed, kind)
                p, cap = pk.problem, pk.capacity
                assert check_offsets(p, pk.offsets, capacity=cap).valid and p.peak_live() == cap
                f = Path(tmp) / f"{n}_{seed}_{kind}.csv"
                write_csv(f, p)
                t1 = time.perf_counter()
                s = exact.solve(p, args.limit, capacity=cap, first_fit=True, repair_moves=REPAIR_MOVES)
                secs = time.perf_counter() - t1
                heur = best_heuristic(p, LOWEST_FILL_MAX)      # as exact.solve computes it
                assert check_offsets(p, s.offsets).valid
                row = {"buffers": n, "seed": seed, "kind": kind, "heuristic /opt": heur.arena_bytes / cap,
                       "solved": bool(s.arena_bytes <= cap), "seconds": round(secs, 3), "by": s.solver,
                       "nodes": s.nodes}
                if with_mm:
                    row.update(_minimalloc(args.minimalloc, f, cap, args.limit, Path(tmp) / "out.csv"))
                    (Path(tmp) / "out.csv").unlink(missing_ok=True)
                rows.append(row)
                print(" ".join(f"{k_}={v}" for k_, v in row.items()), flush=True)
    df = pd.DataFrame(rows)
    if args.instances:
        d = _parts_dir()
        d.mkdir(parents=True, exist_ok=True)
        name = f"n{'-'.join(map(str, sizes))}_k{ks.start}-{ks.stop - 1}"
        df.to_csv(d / f"{name}.csv", index=False)
        meta = {"command": command_line(), "commit": commit(), "date": time.strftime("%Y-%m-%d %H:%M UTC",
                time.gmtime()), "limit": args.limit, "seed": args.seed, "per_size": args.per_size,
                "with_mm": with_mm, "warm_s": round(warm_s, 2), "setting": _setting(),
                "wall_s": round(time.perf_counter() - t0, 1)}
        (d / f"{name}.json").write_text(json.dumps(meta, indent=1) + "\n")
        print(d / f"{name}.csv")
        return
    notes = _notes(df, args.limit, args.seed, args.per_size, with_mm, f"{warm_s:.1f} s", _setting())
    stem = "arena_packings_quick" if args.quick else "arena_packings"
    print(write_table(df, stem, "Perfect packings: the exact search against MiniMalloc", notes,
                      paper="MiniMalloc (ASPLOS'23); issue 34"))


if __name__ == "__main__":
    main()
