"""Issue 4's acceptance: `hybrid optimize` with a fixed budget against the baselines, next to the paper's Figure 6.

Graphs: the five SwapAdvisor models captured at the paper's batch sizes on v100-16gb (`hybrid capture --model NAME
--device v100-16gb --out DIR/NAME.json`), and the Checkmate training graphs at 25% of their unswapped peak
(balanced time scale, as in results/checkmate_baselines.md). For each graph:
- baselines naive, odswap, vdnn, belady (Belady on the program order) from `hybrid.swap.baselines.run_baseline`;
- on the RNNs also odswap on a random topological order (the paper's MXNet default);
- `hybrid optimize` run as a user would (subprocess, default settings, `--time-limit`), with its convergence log
  and plot saved under results/ga_acceptance/.
Every plan is validated. Normalized throughput = ideal / makespan (1 = as fast as unlimited memory).
A graph's row is cached under --work (plans there too, they are large) so an interrupted run can continue;
--force recomputes. Writes results/ga_acceptance.{md,csv}.
"""
from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import RESULTS, ROOT, balanced_checkmate, checkmate_train_files, write_table
from hybrid.swap.baselines import run_baseline
from hybrid.device import Device, preset
from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.graph.info import fraction_of_peak, largest_op
from hybrid.graph.info import lower_bound
from hybrid.plan import Plan
from hybrid.graph.order import random_order
from hybrid.validator import validate

ZOO = ("rnn-8-8k", "brnn-4-8k", "wresnet-152-10", "inception-v4-4", "nasnet-25")
KINDS = ("naive", "odswap", "vdnn", "belady")
# Figure 6's bars are unreadable in our copy of the paper; these are the values its §6.2 text states for the
# largest batch (the one used here). SwapAdvisor / ODSwap, as a share of ideal throughput.
PAPER_FIG6 = {
    "rnn-8-8k": ("70-80%", "<1%"),
    "brnn-4-8k": ("70-80%", "<1%"),
    "wresnet-152-10": ("95%", "80%"),
    "inception-v4-4": ("<=65%", "SwapAdvisor 1.2-2.5x above ODSwap"),
    "nasnet-25": ("53%", "SwapAdvisor 1.2-2.5x above ODSwap"),
}


def normalized(ideal: float, makespan: float) -> float:
    return ideal / makespan if np.isfinite(makespan) and makespan > 0 else float("nan")


def baseline_makespan(g: Graph, dev: Device, kind: str, schedule: np.ndarray | None = None) -> float:
    try:
        plan = run_baseline(g, dev, kind, schedule)
    except InfeasibleError:
        return float("nan")
    report = validate(g, plan)
    if not report.valid:
        raise SystemExit(f"invalid {kind} plan on {g.name}: {report.violations[0].message}")
    return plan.makespan_s


def thin_log(path: Path, max_rows: int = 1000) -> None:
    """Keep at most `max_rows` evenly spaced rows (and the last) of a convergence log, so results/ stays small."""
    df = pd.read_csv(path)
    if len(df) > max_rows:
        keep = sorted(set(np.linspace(0, len(df) - 1, max_rows).astype(int)))
        df.iloc[keep].to_csv(path, index=False)


def run_optimize(path: Path, dev_flags: list[str], stem: str, work: Path, time_limit: str, seed: int,
                 extra: list[str]) -> tuple[list[str], str, Plan]:
    (RESULTS / "ga_acceptance").mkdir(parents=True, exist_ok=True)
    plan_path = work / f"{stem}.plan.json"
    cmd = ["hybrid", "optimize", "--graph", str(path), *dev_flags, "--time-limit", time_limit, "--seed", str(seed),
           "--out", str(plan_path), "--log", f"results/ga_acceptance/{stem}.csv",
           "--plot", f"results/ga_acceptance/{stem}.png", *extra]
    exe = [sys.executable, "-c", "from hybrid.cli.main import main; main()"]
    proc = subprocess.run(exe + cmd[1:], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    thin_log(ROOT / "results" / "ga_acceptance" / f"{stem}.csv")
    return cmd, proc.stdout, Plan.load(plan_path)


def evaluate_graph(name: str, g: Graph, path: Path, dev: Device, dev_flags: list[str], args: argparse.Namespace,
                   paper: tuple[str, str] | None) -> dict:
    ideal = float(g.arrays.op_time.sum())
    row: dict = {"graph": name, "ops": len(g.ops), "memory_GiB": dev.memory_bytes / 2**30, "ideal_s": ideal,
                 "lower_bound_s": lower_bound(g, dev)}
    need = largest_op(g)[1]
    if need > dev.memory_bytes:
        row["note"] = f"infeasible for every planner: one op needs {need / 2**30:.2f} GiB at once"
        return row
    t0 = time.monotonic()
    base = {k: baseline_makespan(g, dev, k) for k in KINDS}
    for k in KINDS:
        row[k] = normalized(ideal, base[k])
    best_kind = min((k for k in KINDS if np.isfinite(base[k])), key=lambda k: base[k])
    row["best_baseline"] = f"{best_kind} {row[best_kind]:.4f}"
    if g.name.startswith(("rnn", "brnn")):
        order = random_order(g, np.random.default_rng(args.seed))
        row["odswap_random_order"] = normalized(ideal, baseline_makespan(g, dev, "odswap", order))
    print(f"{name}: baselines in {time.monotonic() - t0:.0f} s: "
          f"{ {k: round(row[k], 4) for k in KINDS} }", flush=True)
    cmd, out, plan = run_optimize(path, dev_flags, name, args.work, args.time_limit, args.seed, args.extra)
    report = validate(g, plan)
    if not report.valid:
        raise SystemExit(f"invalid optimize plan on {name}: {report.violations[0].message}")
    info = plan.planner
    refine = info.get("refine") or {}
    # beside the search, the refined plan may come from an elite; its metadata then names the search's own best
    ga_only = float(info.get("search_best_makespan_s", refine.get("from_makespan_s", plan.makespan_s)))
    row.update({
        "ga": normalized(ideal, ga_only),
        "ga+refine": normalized(ideal, plan.makespan_s),
        "speedup_vs_best_baseline": base[best_kind] / plan.makespan_s,
        "beats_best_baseline": bool(plan.makespan_s < base[best_kind] * (1 - 1e-9)),
        "pool": plan.allocation.kind, "generations": info.get("generations"), "evaluations": info.get("evaluations"),
        "paper_swapadvisor": paper[0] if paper else "", "paper_odswap": paper[1] if paper else "",
        "command": " ".join(shlex.quote(c) for c in cmd),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
    })
    print(out, flush=True)
    return row


def targets(args: argparse.Namespace) -> list[tuple[str, Path, Device, list[str], tuple[str, str] | None]]:
    out = []
    for name in args.models:
        path = args.zoo_dir / f"{name}.json"
        if not path.exists():
            print(f"skip {name}: capture it first: hybrid capture --model {name} --device v100-16gb --out {path}")
            continue
        out.append((name, path, preset("v100-16gb"), ["--device", "v100-16gb"], PAPER_FIG6.get(name)))
    if args.checkmate:
        args.work.mkdir(parents=True, exist_ok=True)
        for src in checkmate_train_files():
            g = balanced_checkmate(src)
            path = args.work / f"{g.name}.json"
            if not path.exists():
                g.save(path)
            mem = fraction_of_peak(g, args.fraction)
            dev = replace(preset("v100-16gb"), memory_bytes=mem)
            out.append((g.name, path, dev, ["--device", "v100-16gb", "--memory", str(mem)], None))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo-dir", type=Path, default=Path("/work/graphs"))
    ap.add_argument("--work", type=Path, default=Path("/work/graphs/ga_runs"), help="plans and cached rows")
    ap.add_argument("--models", nargs="*", default=list(ZOO))
    ap.add_argument("--checkmate", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--fraction", type=float, default=0.25, help="Checkmate memory as a fraction of the peak")
    ap.add_argument("--time-limit", default="5m")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--force", action="store_true", help="recompute cached rows")
    ap.add_argument("--only", nargs="*", default=None, help="run just these graphs (others from the cache)")
    ap.add_argument("extra", nargs="*", help="more `hybrid optimize` flags, after --")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, path, dev, flags, paper in targets(args):
        cache = args.work / f"{name}.row.json"
        if cache.exists() and not args.force and (args.only is None or name not in args.only):
            rows.append(json.loads(cache.read_text()))
            continue
        if args.only is not None and name not in args.only:
            continue
        g = Graph.load(path)
        row = evaluate_graph(name, g, path, dev, flags, args, paper)
        cache.write_text(json.dumps(row))
        rows.append(row)
    df = pd.DataFrame(rows)
    if "ga" in df.columns:
        best = df[list(KINDS)].max(axis=1)
        df["ga_vs_best_baseline"] = df["ga"] / best
        df["speedup_vs_best_baseline"] = df["ga+refine"] / best
        df["beats_best_baseline"] = [("yes" if v > 1 + 1e-9 else "NO") if v == v else "" for v in df["ga_vs_best_baseline"]]
        # A tie is only excusable where the best baseline has (almost) nothing left to gain.
        bound = df["ideal_s"] / df["lower_bound_s"]  # throughput of a plan at the lower bound
        for i in df.index[df["beats_best_baseline"] == "NO"]:
            gap = bound[i] / best[i] - 1
            df.loc[i, "note"] = (f"tie: the best baseline is already within {100 * gap:.2f}% of the lower bound "
                                 "(makespan / lower bound); see the notes")
    cols = [c for c in ["graph", "ops", "memory_GiB", "ideal_s", *KINDS, "best_baseline",
                        "odswap_random_order", "ga", "ga+refine", "ga_vs_best_baseline", "speedup_vs_best_baseline",
                        "beats_best_baseline", "pool", "generations", "evaluations", "paper_swapadvisor",
                        "paper_odswap", "commit", "note"]
            if c in df.columns]
    notes = f"""Run it as `python -m benchmarks.ga_acceptance ...` from the repository root (the script imports
the `benchmarks` package). Normalized throughput (ideal / makespan; 1 = unlimited memory) of the baselines and of `hybrid optimize`
with a {args.time_limit} budget (seed {args.seed}, default settings: population 48, `--pool both`, all policies and planner knobs, `--refine` its
default: CP-SAT, `--refine-mode auto`, i.e. beside the search where one evaluation takes under 1 ms, else after it
with 20% of the budget), on this 2-core machine shared with other jobs.
`ga` is the search's own best, `ga+refine` the written plan; `ga_vs_best_baseline` and
`speedup_vs_best_baseline` = best baseline makespan / GA (resp. final) makespan; `beats_best_baseline` judges the GA
alone. The lower bound equals the ideal on all these graphs. `odswap_random_order` is ODSwap on a random topological order (seed {args.seed}).
Paper columns: the SwapAdvisor and ODSwap figures stated in the paper's §6.2 text for the largest batch (Figure 6's
bars are not legible in our copy). Zoo graphs were captured with `hybrid capture --model NAME --device v100-16gb`
(default optimizer Adam, fp32, roofline op times); Checkmate graphs use the balanced time scale with memory at
{args.fraction:.0%} of their unswapped peak (most cannot run at 25%: one op alone needs more). Convergence logs and
plots (like Figure 9): results/ga_acceptance/<graph>.csv/.png (logs thinned to at most 1000 generations). Every plan passes the validator. The exact command of
each optimize run is listed below.

Where the GA only ties the best baseline, the `note` column gives that baseline's distance to the lower bound: on
brnn-4-8k ODSwap and Belady on the capture's layer-by-layer order reach it (the planner re-binds memory in time
order and carries the first op's weights across the iteration boundary), so no plan can be faster.
`commit` is the code a row was produced with (rows are cached). The SwapAdvisor rows were re-run after the planner's
write-back (34921eb: a persistent tensor not resident at the start leaves right after its last use, and the GA's
planner gene can switch that off). The Checkmate rows predate it: those graphs have no optimizer state, the
planner's plans for them are unchanged (same Belady makespans), and only the GA's random stream would differ."""
    md = write_table(df[cols], "ga_acceptance", f"`hybrid optimize` ({args.time_limit}) against the baselines", notes)
    if "command" in df.columns:
        lines = ["", "Commands (from the repository root):", ""]
        lines += [f"- {r.graph}: `{r.command}`" for r in df.itertuples() if isinstance(r.command, str)]
        md.write_text(md.read_text() + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
