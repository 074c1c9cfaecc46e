"""Ablations like the paper's Figure 10: search the schedule only, the allocation only, or both; and the selection
temperature (the paper's eq. 1, tau = 1, against this project's default).

Each run is `hybrid optimize --refine none` with the same budget and seed, so the GA alone is compared.
Throughput is normalized to the ideal (ideal / makespan) and to the full search (`both`).
Writes results/ga_ablation.{md,csv} and convergence logs under results/ga_ablation/.
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd

from benchmarks.common import RESULTS, ROOT, write_table
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.validator import validate

RUNS = {  # label -> extra flags
    "both": [],
    "schedule only": ["--search", "schedule"],
    "allocation only": ["--search", "allocation"],
    "both, tau=1 (eq. 1)": ["--temperature", "1"],
    "both, size classes only": ["--pool", "classes"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo-dir", type=Path, default=Path("/work/graphs"))
    ap.add_argument("--work", type=Path, default=Path("/work/graphs/ga_runs"))
    ap.add_argument("--models", nargs="*", default=["rnn-8-8k", "inception-v4-4"])
    ap.add_argument("--time-limit", default="90s")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ga_ablation").mkdir(parents=True, exist_ok=True)
    rows = []
    for model in args.models:
        path = args.zoo_dir / f"{model}.json"
        g = Graph.load(path)
        ideal = float(g.arrays.op_time.sum())
        for label, extra in RUNS.items():
            stem = f"{model}-{label.split(',')[0].replace(' ', '_')}" + ("-tau1" if "tau" in label else "") + \
                ("-classes" if "classes" in label else "")
            out = args.work / f"ablation-{stem}.plan.json"
            cmd = ["hybrid", "optimize", "--graph", str(path), "--device", "v100-16gb", "--time-limit", args.time_limit,
                   "--seed", str(args.seed), "--refine", "none", "--quiet", "--out", str(out),
                   "--log", f"results/ga_ablation/{stem}.csv", *extra]
            proc = subprocess.run([sys.executable, "-c", "from hybrid.cli.main import main; main()", *cmd[1:]],
                                  cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
            plan = Plan.load(out)
            if not validate(g, plan).valid:
                raise SystemExit(f"invalid plan: {' '.join(cmd)}")
            rows.append({"graph": model, "run": label, "ideal/makespan": ideal / plan.makespan_s,
                         "makespan_s": plan.makespan_s, "pool": plan.allocation.kind,
                         "generations": plan.planner.get("generations"), "evaluations": plan.planner.get("evaluations"),
                         "command": " ".join(shlex.quote(c) for c in cmd)})
            print(model, label, round(ideal / plan.makespan_s, 4), flush=True)
    df = pd.DataFrame(rows)
    df["vs_both"] = df["ideal/makespan"] / df.groupby("graph")["ideal/makespan"].transform(
        lambda s: s[df.loc[s.index, "run"] == "both"].iloc[0])
    summary = "; ".join(
        f"{g}: " + ", ".join(f"{r.run} {100 * r.vs_both:.1f}%" for r in part.itertuples() if r.run != "both")
        for g, part in df.groupby("graph", sort=False))
    notes = f"""Run it as `python -m benchmarks.ga_ablation ...` from the repository root (the script imports
the `benchmarks` package). `hybrid optimize --refine none --time-limit {args.time_limit} --seed {args.seed}` on the captured zoo graphs
(v100-16gb), one run per setting on this shared 2-core machine, so differences of a percent or two are within run-to-run
noise. `vs_both` = throughput relative to the full search: {summary}.

The paper (§6.4, Figures 9-10) reports that without searching the schedule the RNN reaches 7% of the full search
(under MXNet's random order) and Inception-V4 93%. Here the fixed schedule is the capture's program order, which is
already RNN-friendly (layer by layer), and the swap planner re-binds memory in time order, so even a fixed schedule
or a fixed allocation comes within a few percent of the full search: the ablations differ by about as much as two
runs of the same setting do, so this table does not separate them; several seeds per setting would."""
    md = write_table(df.drop(columns=["command"]), "ga_ablation", "GA ablations (Figure 10)", notes)
    lines = ["", "Commands (from the repository root):", ""] + [f"- `{c}`" for c in df["command"]]
    md.write_text(md.read_text() + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
