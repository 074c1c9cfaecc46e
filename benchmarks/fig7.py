"""SwapAdvisor's Figure 7: WResNet-152-4 training at batch 16, 32 and 64 on a 16 GB V100 — TFLMS against ODSwap
(the paper's and ours) and `hybrid optimize` (SwapAdvisor's search), as throughput and as a multiple of TFLMS.

The paper (§6.2, "Comparison with TFLMS"): for all three batch sizes SwapAdvisor is at least 3x TFLMS and
ODSwap at least 2x TFLMS, because TFLMS never swaps parameters (large in WResNet-152-4), which leaves less
memory for activations and so swaps more of them. Figure 7's bars are not legible in our copy: only these
ratios are stated.

Graphs: `hybrid capture --model wresnet-152-4 --batch B --optimizer sgd --momentum 0.9 --device v100-16gb`
(captured into --graphs when missing; SGD with momentum, as MXNet and TensorFlow trained it then: Adam's two
state tensors per parameter would leave TFLMS, which keeps them all on the device, no room at all).
Plans: the baselines tflms, odswap-paper (random topological order, seed --seed), odswap (ours), belady, and
`hybrid optimize` (subprocess, --generations, `--refine none`: deterministic). Every plan is validated, and
`graph_bound` (swap only / with recompute) is checked to lie below every makespan.

Time on this 2-core machine (measured 2026-11-25): --quick (5 generations of 16) 0.4 min with the three captures;
the full run (200 generations of 48, twice per batch) 1.5 min. Writes results/fig7.{md,csv}.
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import ROOT, write_table
from hybrid.device import preset
from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.bounds import graph_bound
from hybrid.swap.baselines import run_baseline
from hybrid.validator import validate

MODEL = "wresnet-152-4"
BATCHES = (16, 32, 64)
KINDS = ("tflms", "odswap-paper", "odswap", "belady")
PAPER = {"swapadvisor_vs_tflms": ">= 3x", "odswap_vs_tflms": ">= 2x"}


def capture(path: Path, batch: int) -> None:
    """The graph for one batch size, as a user captures it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "hybrid.cli.main", "capture", "--model", MODEL, "--batch", str(batch),
           "--optimizer", "sgd", "--momentum", "0.9", "--device", "v100-16gb", "--out", str(path)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"capture failed: {' '.join(cmd)}\n{proc.stderr}")


def checked(g: Graph, plan: Plan, what: str) -> Plan:
    report = validate(g, plan)
    if not report.valid:
        raise SystemExit(f"invalid {what} plan on {g.name}: {report.violations[0].message}")
    return plan


def optimize(path: Path, out: Path, args: argparse.Namespace, recompute: bool) -> tuple[str, Plan]:
    cmd = ["hybrid", "optimize", "--graph", str(path), "--device", "v100-16gb", "--generations", str(args.generations),
           "--population", str(args.population), "--time-limit", "2h", "--seed", str(args.seed), "--refine", "none",
           "--workers", "1", "--recompute" if recompute else "--no-recompute", "--out", str(out), "--quiet"]
    proc = subprocess.run([sys.executable, "-m", "hybrid.cli.main", *cmd[1:]], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}")
    return " ".join(shlex.quote(c) for c in cmd), Plan.load(out)


def row_for(batch: int, path: Path, args: argparse.Namespace) -> dict:
    g = Graph.load(path)
    dev = preset("v100-16gb", reserve=True)  # what `--device v100-16gb` gives optimize: 1 GiB reserved
    ideal = float(g.arrays.op_time.sum())
    t0 = time.monotonic()
    row: dict = {"batch": batch, "ops": len(g.ops), "ideal_s": ideal}
    span: dict[str, float] = {}
    for k in KINDS:
        try:
            span[k] = checked(g, run_baseline(g, dev, k, seed=args.seed), k).makespan_s
        except InfeasibleError:
            span[k] = float("nan")
    cmd_sw, plan_sw = optimize(path, args.work / f"{g.name}.swap.plan.json", args, recompute=False)
    span["optimize-swap"] = checked(g, plan_sw, "optimize --no-recompute").makespan_s
    cmd, plan = optimize(path, args.work / f"{g.name}.plan.json", args, recompute=True)
    span["optimize"] = checked(g, plan, "optimize").makespan_s
    b_swap, b_rc = graph_bound(g, dev, recompute=False), graph_bound(g, dev, recompute=True)
    swap_only = [span[k] for k in (*KINDS, "optimize-swap") if np.isfinite(span[k])]
    if not (all(b_swap <= m * (1 + 1e-9) for m in swap_only) and all(b_rc <= m * (1 + 1e-9) for m in span.values()
                                                                     if np.isfinite(m))):
        raise SystemExit(f"batch {batch}: a graph bound lies above a makespan")
    for k, m in span.items():
        row[k] = ideal / m if np.isfinite(m) else float("nan")        # normalized throughput
    for k, m in span.items():
        row[f"{k}_samples_s"] = batch / m if np.isfinite(m) else float("nan")
    tfl = span["tflms"]
    for k in ("optimize-swap", "optimize", "odswap-paper", "odswap", "belady"):
        row[f"{k}_vs_tflms"] = tfl / span[k] if np.isfinite(tfl) else float("nan")
    row["bound_graph_swap"], row["bound_graph"] = ideal / b_swap, ideal / b_rc
    row["optimize_uses_recompute"] = plan.recomputes
    row["paper_swapadvisor_vs_tflms"], row["paper_odswap_vs_tflms"] = PAPER["swapadvisor_vs_tflms"], PAPER["odswap_vs_tflms"]
    row["commands"] = f"{cmd_sw}; {cmd}"
    print(f"batch {batch}: {time.monotonic() - t0:.0f} s: "
          f"{ {k: round(v, 4) for k, v in row.items() if isinstance(v, float)} }", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", type=Path, default=Path("/tmp/hybrid-fig7"),
                    help="where the WResNet-152-4 captures are (captured there when missing)")
    ap.add_argument("--work", type=Path, default=Path("/tmp/hybrid-fig7/plans"))
    ap.add_argument("--batches", type=int, nargs="*", default=list(BATCHES))
    ap.add_argument("--generations", type=int, default=200)
    ap.add_argument("--population", type=int, default=48)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="5 generations of 16: a few minutes")
    args = ap.parse_args()
    started = time.monotonic()
    if args.quick:
        args.generations, args.population = 5, 16
    args.work.mkdir(parents=True, exist_ok=True)
    rows, paths = [], []
    for b in args.batches:
        path = args.graphs / f"{MODEL}-b{b}.json"
        if not path.exists():
            capture(path, b)
        paths.append(path)
        rows.append(row_for(b, path, args))
    df = pd.DataFrame(rows)

    def lo(col: str) -> str:
        return f"{df[col].min():.2f}-{df[col].max():.2f}"

    bad = [int(r.batch) for r in df.itertuples()
           if not df.at[r.Index, "optimize-swap"] > df.at[r.Index, "odswap-paper"] > df.at[r.Index, "tflms"]]
    ordering = ("The paper's ordering carries over at every batch (SwapAdvisor's search > the paper's ODSwap > TFLMS); "
                "the factors do not" if not bad else
                f"The paper's ordering (SwapAdvisor's search > ODSwap > TFLMS) fails at batch {bad}")
    notes = f"""Normalized throughput (ideal / makespan, 1 = unlimited memory) of each planner, samples per second
(`*_samples_s`, batch / makespan under the roofline op times), and each planner as a multiple of TFLMS
(`*_vs_tflms`, TFLMS makespan / its makespan), on v100-16gb (16 GiB, 1 GiB reserved, 12 GB/s each way).
`hybrid optimize` writes its plans with exact arena offsets by default (one offset per tensor; where the byte-budget winner does not lay out, it re-plans with less memory: docs/arena.md), so its written plan is one the executor places without compaction, while the baselines are byte budgets that assume memory never fragments (optimistic for them).
`optimize-swap` = `hybrid optimize --no-recompute` (SwapAdvisor's setting: swapping only) and `optimize` = with
recompute (our default; `optimize_uses_recompute` says whether its plan reruns ops), each {args.generations} generations
of {args.population} (seed {args.seed}, `--refine none`: deterministic).
`odswap-paper` = ODSwap as the paper ran it (random topological order, seed {args.seed}, plain LRU, no re-binding),
`odswap` = ours (program order, re-bound), `tflms` = TensorFlow LMS's rules (hybrid.swap.baselines.tflms_plan).
`bound_graph_swap` / `bound_graph` = ideal / `graph_bound` (swap only / with recompute): no plan can be faster.

Paper (§6.2): SwapAdvisor >= 3x TFLMS and ODSwap >= 2x TFLMS at every batch size (bars not legible: ratios only).
Measured here: SwapAdvisor's setting (`optimize-swap`) {lo('optimize-swap_vs_tflms')}x TFLMS, with recompute
{lo('optimize_vs_tflms')}x, the paper's ODSwap {lo('odswap-paper_vs_tflms')}x and ours {lo('odswap_vs_tflms')}x.
{ordering}. Why the factors are smaller:
- TFLMS's handicap is modelled: it keeps the parameters and momentum (7.0 GiB of WResNet-152-4's persistent state)
  and the gradients on the device, leaving about 8 GiB for activations, and swaps every forward activation the
  backward pass reads whatever the memory, each brought back one op before its use. But our TFLMS runs in our
  simulator: three ideal streams, copies at the full 12 GB/s, no allocator. Its swap-outs overlap compute, and a
  swap-in starts as soon as memory is free rather than when its trigger op finishes (see tflms_plan's
  docstring); both can only make it faster than TensorFlow's. TensorFlow 1.x added executor and BFC-allocator
  overheads we do not model, and the paper measured them.
- Op times are roofline estimates for the captured PyTorch graph (1,657 ops), not MXNet's or TensorFlow's measured
  kernels on a V100, so the balance of compute against the link (which sets how much swapping can hide) differs
  from the paper's.
- The paper's ODSwap ran in MXNet's executor with its pooled allocator; ours is a simulation of its rule (LRU on
  demand, then prefetch) on a byte budget: fragmentation, which hurts it on real allocators, is absent.
"""
    md = write_table(df, "fig7", "Figure 7: WResNet-152-4, TFLMS vs ODSwap vs hybrid optimize", notes, graphs=paths,
                     paper="SwapAdvisor Fig. 7 (WResNet-152-4 throughput, TFLMS comparison)")
    md.write_text(md.read_text() + f"\nRun time: {(time.monotonic() - started) / 60:.1f} min on this 2-core machine "
                  f"(captures included when they were missing).\n")


if __name__ == "__main__":
    main()
