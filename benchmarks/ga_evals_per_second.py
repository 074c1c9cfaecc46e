"""GA throughput: fitness evaluations per second per core, and what the GA's own operators cost next to them.

For each graph, one GA generation is made the way `hybrid optimize` makes it (initial population of seeded and
random individuals, then crossover + mutation + repair children), and timed in CPU seconds of this thread
(`time.thread_time`, so other load on the machine matters less):
- `eval_ms`: planner + simulator per child (the fitness function, all passes), median over children;
- `evals_per_s_per_core` = 1000 / mean eval_ms;
- `operators_ms`: crossover + mutation + repair per child; `operators_share` = operators / (operators + eval).
A process pool adds pickling and scheduling on top; `pool_evals_per_s` is the wall-clock rate of one
generation's children through `ProcessPoolEvaluator` with `--workers` processes (machine load included).

Writes results/ga_evals_per_second.{md,csv}.
"""
from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import balanced_checkmate, checkmate_train_files, write_table
from ga.algorithm import GAConfig, GeneticSearch
from ga.encoding import SearchSpace
from ga.evaluation import Fitness, ProcessPoolEvaluator, SerialEvaluator
from hybrid.device import Device, preset
from hybrid.graph import Graph
from hybrid.graph.info import fraction_of_peak
from hybrid.swap.augmented import PlannerOptions
from hybrid.graph.synthetic import training_graph

ZOO = ("rnn-8-8k", "brnn-4-8k", "wresnet-152-10", "inception-v4-4", "nasnet-25")


def graphs(zoo_dir: Path) -> list[tuple[Graph, Device]]:
    out = []
    for name in ZOO:
        path = zoo_dir / f"{name}.json"
        if path.exists():
            out.append((Graph.load(path), preset("v100-16gb")))
        else:
            print(f"skip {name}: {path} missing (hybrid capture --model {name} --device v100-16gb --out {path})")
    for path in checkmate_train_files()[:2]:
        g = balanced_checkmate(path)
        out.append((g, replace(preset("v100-16gb"), memory_bytes=fraction_of_peak(g, 0.25))))
    g = training_graph(3300, seed=0)
    out.append((g, replace(preset("v100-16gb"), memory_bytes=fraction_of_peak(g, 0.25))))
    return out


def measure(g: Graph, dev: Device, children: int, workers: int) -> dict:
    space = SearchSpace.build(g, dev)
    cfg = GAConfig(population=16, children=children, seed=1)
    search = GeneticSearch(space, cfg, SerialEvaluator(g, dev, PlannerOptions()))
    search.initialize()
    fitness = Fitness(g, dev, PlannerOptions())
    t0 = time.thread_time()
    kids = search._children()
    ops_ms = (time.thread_time() - t0) * 1e3 / len(kids)
    fitness([(k.schedule, k.cls, k.cnt, k.by_bytes, k.planner) for k in kids[:1]])  # warm
    per = []
    for k in kids:
        t0 = time.thread_time()
        fitness([(k.schedule, k.cls, k.cnt, k.by_bytes, k.planner)])
        per.append((time.thread_time() - t0) * 1e3)
    row = {"graph": g.name, "ops": len(g.ops), "tensors": len(g.tensors), "sizes": space.n_sizes,
           "memory_GiB": dev.memory_bytes / 2**30, "children": len(kids),
           "eval_ms": statistics.median(per), "eval_ms_mean": statistics.fmean(per),
           "evals_per_s_per_core": 1e3 / statistics.fmean(per), "operators_ms": ops_ms,
           "operators_share": ops_ms / (ops_ms + statistics.fmean(per))}
    if workers > 1:
        with ProcessPoolEvaluator(g, dev, PlannerOptions(), workers) as ev:
            items = [(k.schedule, k.cls, k.cnt, k.by_bytes, k.planner) for k in kids]
            ev.evaluate(items[:workers])  # start the workers
            t0 = time.monotonic()
            ev.evaluate(items)
            row["pool_evals_per_s"] = len(items) / (time.monotonic() - t0)
            row["pool_workers"] = workers
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zoo-dir", type=Path, default=Path("/work/graphs"),
                    help="where `hybrid capture` wrote <model>.json for the five zoo models")
    ap.add_argument("--children", type=int, default=24)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    rows = []
    for g, dev in graphs(args.zoo_dir):
        row = measure(g, dev, args.children, args.workers)
        rows.append(row)
        print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}, flush=True)
    df = pd.DataFrame(rows)
    notes = f"""Run it as `python -m benchmarks.ga_evals_per_second ...` from the repository root (the script imports
the `benchmarks` package). One GA generation per graph ({args.children} children of a 16-individual population, seed 1):
`eval_ms` is the fitness function (swap planner + simulator, up to 3 passes) per child, CPU time of one thread;
`evals_per_s_per_core` its inverse (mean); `operators_ms` is crossover + mutation + repair per child (same clock);
`pool_evals_per_s` the wall-clock rate through a {args.workers}-process pool on this 2-core machine, which other jobs
shared while it ran. Zoo graphs on v100-16gb at the paper's batch sizes; Checkmate graphs (balanced time scale) and a
synthetic 3300-layer training graph at 25% of their unswapped peak."""
    files = [args.zoo_dir / f"{n}.json" for n in ZOO if (args.zoo_dir / f"{n}.json").exists()]
    write_table(df, "ga_evals_per_second", "GA evaluations per second per core", notes,
                graphs=files + checkmate_train_files()[:2])


if __name__ == "__main__":
    main()
