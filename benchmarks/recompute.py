"""Swap-only, recompute-only and swap+recompute plans side by side at equal memory (issue: recompute).

Graphs: the SwapAdvisor suite captured fresh at the paper's batch sizes on v100-16gb (`hybrid capture --model
NAME --device v100-16gb`, the capture's defaults; memory: the preset's 15 GiB usable), the Checkmate training
graphs at 25% and 50% of their unswapped peak (balanced time scale, as `benchmarks.checkmate_baselines`), and a
2-layer TransformerEncoder LM (d=256, batch 8x128, AdamW; memory 12% of its tensors' bytes). Per graph and
memory:
- Belady on the program order: swap only, recompute only (Checkmate-style: activations are rerun or kept,
  never swapped), swap+recompute (the planner's default: `faster_options` keeps swap-only where that is faster);
- the GA for `--time-limit` each, swap only (`--no-recompute`) and swap+recompute, seed 1, one worker, no
  CP-SAT: best makespan, its best generation-0 individual, and the search's gain over it.
Every plan is validated. Writes results/recompute.{csv,md}.
"""
from __future__ import annotations

import argparse
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import ROOT, balanced_checkmate, checkmate_train_files, write_table
from hybrid.device import preset
from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.graph.info import ideal_time, unswapped_peak
from hybrid.graph.order import program_order
from hybrid.bounds import activation_bound, graph_bound
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.baselines import RECOMPUTE_RATIO, run_baseline
from hybrid.validator import validate

SUITE = ("rnn-8-8k", "brnn-4-8k", "wresnet-152-10", "inception-v4-4", "nasnet-25")


def suite_graph(name: str, folder: Path) -> Graph:
    path = folder / f"{name}.json"
    if not path.exists():
        print(f"capturing {name} -> {path}", flush=True)
        subprocess.run([str(ROOT / ".venv/bin/hybrid") if (ROOT / ".venv/bin/hybrid").exists() else "hybrid",
                        "capture", "--model", name, "--device", "v100-16gb", "--out", str(path)], check=True)
    return Graph.load(path)


def transformer_graph() -> Graph:
    import torch

    from examples.transformer_lm import make
    from hybrid.capture.api import capture

    torch.manual_seed(0)
    module, args, target, loss = make()
    return capture(module, args, loss, target, optimizer="adamw", lr=1e-3, name="transformer-lm-2x256")


def ga(g: Graph, dev, recompute: bool, seconds: float,  # noqa: ANN001
       generations: int | None = None) -> tuple[object, float, float]:
    """The GA for `seconds`, or for `generations` when given (a deterministic budget)."""
    from ga import GAConfig, optimize

    opt = PlannerOptions(recompute_ratio=RECOMPUTE_RATIO if recompute else 0.0)
    limit = None if generations else seconds
    res = optimize(g, dev, GAConfig(seed=1), time_limit_s=limit, generations=generations, options=opt, workers=1)
    plan = res.to_plan(time_limit_s=limit)
    log = res.log_frame()
    gen0 = float(log.loc[log["generation"] == 0, "best_s"].min())
    return plan, gen0, float(res.generations)


def rows_for(label: str, g: Graph, dev, memory_note: str, seconds: float,  # noqa: ANN001
             generations: int | None = None) -> list[dict]:
    ideal = ideal_time(g)
    order = program_order(g)
    base = {"graph": label, "ops": len(g.ops), "sha256": g.sha256[:12], "memory": memory_note,
            "memory_GiB": round(dev.usable_bytes / 2**30, 3), "ideal_s": ideal,
            "bound_swap_s": activation_bound(g, dev, order, recompute=False),
            "bound_rc_s": activation_bound(g, dev, order, recompute=True),
            "graph_bound_swap_s": graph_bound(g, dev, recompute=False), "graph_bound_rc_s": graph_bound(g, dev)}
    out = []
    plans = {}
    for name, fn in (("belady swap-only", lambda: run_baseline(g, dev, "belady")),
                     ("belady recompute-only", lambda: run_baseline(g, dev, "recompute-only")),
                     ("belady swap+recompute", lambda: run_baseline(g, dev, "belady", recompute=True)),
                     ("GA swap-only", lambda: ga(g, dev, False, seconds, generations)),
                     ("GA swap+recompute", lambda: ga(g, dev, True, seconds, generations))):
        t0 = time.monotonic()
        try:
            got = fn()
        except InfeasibleError as e:
            out.append({**base, "planner": name, "note": f"cannot run: {str(e)[:80]}"})
            continue
        plan, gen0, gens = got if isinstance(got, tuple) else (got, np.nan, np.nan)
        rep = validate(g, plan)
        plans[name] = plan
        n_rc = sum(1 for e in plan.events if e.kind == "compute" and e.recompute)
        out.append({**base, "planner": name, "makespan_s": plan.makespan_s, "ideal/makespan": ideal / plan.makespan_s,
                    "valid": rep.valid, "recomputes": n_rc,
                    "GB_h2d": plan.metrics.get("bytes_h2d", 0) / 1e9, "GB_d2h": plan.metrics.get("bytes_d2h", 0) / 1e9,
                    "gen0_best_s": gen0, "search_gain": (1 - plan.makespan_s / gen0) if gens == gens else np.nan,
                    "generations": gens, "wall_s": time.monotonic() - t0, "note": ""})
        print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in out[-1].items()}, flush=True)
    for planner in ("belady", "GA"):
        s, b = plans.get(f"{planner} swap-only"), plans.get(f"{planner} swap+recompute")
        if s is not None and b is not None:
            for r in out:
                if r["planner"] == f"{planner} swap+recompute":
                    r["vs_swap_only"] = s.makespan_s / b.makespan_s
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-limit", type=float, default=60.0, help="GA seconds per run on the suite graphs")
    ap.add_argument("--checkmate-time-limit", type=float, default=20.0, help="GA seconds per run on Checkmate graphs")
    ap.add_argument("--generations", type=int, default=None,
                    help="GA generations per run instead of the time limits (deterministic: the same table twice)")
    ap.add_argument("--graphs", type=Path, default=Path("/tmp/hybrid-graphs"),
                    help="folder of captured suite graphs (captured there when missing)")
    ap.add_argument("--only", choices=["suite", "checkmate", "transformer"], default=None)
    args = ap.parse_args()
    args.graphs.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    v100 = preset("v100-16gb")
    if args.only in (None, "transformer"):
        g = transformer_graph()
        dev = replace(g.device or v100, memory_bytes=int(0.12 * sum(t.bytes for t in g.tensors)), reserve_bytes=0)
        rows += rows_for(g.name, g, dev, "12% of tensor bytes", args.checkmate_time_limit, args.generations)
    if args.only in (None, "suite"):
        for name in SUITE:
            g = suite_graph(name, args.graphs)
            rows += rows_for(name, g, v100, "v100-16gb", args.time_limit, args.generations)
    if args.only in (None, "checkmate"):
        for path in checkmate_train_files():
            g = balanced_checkmate(path)
            peak = unswapped_peak(g)
            for frac in (0.5, 0.25):
                dev = replace(v100, memory_bytes=int(peak * frac), reserve_bytes=0)
                rows += rows_for(g.name, g, dev, f"{frac:.0%} of peak", args.checkmate_time_limit, args.generations)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip()
    df = pd.DataFrame(rows)
    notes = f"""Commit {commit}. Makespans are the simulator's (v100-16gb link, 12 GB/s each way). `bound_swap_s` /
`bound_rc_s`: lower bounds on any plan in the program order, swap only / with recompute, activations only
(`hybrid.bounds.activation_bound`; valid whatever stays resident; other schedules may do better).
`graph_bound_swap_s` / `graph_bound_rc_s`: the graph bound (`hybrid.bounds.graph_bound`), valid for any
schedule, swap only / with recompute.
`vs_swap_only`: the swap-only plan's makespan over swap+recompute's for the same planner (>= 1: recompute not
slower). For Belady it is guaranteed (`SwapPlanner.faster_options` keeps the faster of the two); for the GA only
generation 0 is (it holds every seed swap-only too): two searches of equal budget then take different paths, and
may end within search noise of each other either way. `search_gain`: 1 - best / best of generation 0.
`sha256`: the graph's (first 12 hex digits); suite graphs are captured into `--graphs` when missing."""
    files = ([args.graphs / f"{n}.json" for n in SUITE] if args.only in (None, "suite") else []) + (
        list(checkmate_train_files()) if args.only in (None, "checkmate") else [])
    write_table(df, "recompute" if args.only is None else f"recompute_{args.only}",
                "Swap-only, recompute-only and swap+recompute at equal memory", notes, graphs=files)


if __name__ == "__main__":
    main()
