"""SwapAdvisor's Figure 8: p99 latency against throughput when 4 or 16 ResNet-152 models share one V100.

`hybrid serve` (hybrid.serve) on an inference capture of ResNet-152: Poisson arrivals, every `batch` consecutive
requests one batch for a random model, one GPU first come first served. Policies: not-shared (parameters always
resident: the ideal), time-shared (the paper's baseline: one model resident, the next one's parameters copied in
after the current batch; also a variant keeping as many as fit), swapping (each model's GA plan in its equal
share of memory). Two setups: batch 16 with 192 MiB per model (the paper's 400 requests/s knee is the capacity of
batch 16 at its 0.040 s per batch; 192 MiB is Table 2's smallest memory where our batch-16 graph runs), and batch 1
with 64 MiB per model (Table 2's smallest), where swapping costs more than compute.

Full run (120 s of arrivals per rate, 30 GA generations): 7 s measured once the graphs are captured (about 5 s
more the first time); `--quick` (30 s, 10 generations): a few seconds. Writes results/fig8.{md,csv,png}.
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pandas as pd

from benchmarks.common import RESULTS, quick_name, write_table
from benchmarks.table2 import ensure_capture
from hybrid.device import preset
from hybrid.graph import Graph
from hybrid.serve import ServeConfig, model_costs, simulate_serving

SETUPS = (  # (batch, MiB per model, rates in requests/s)
    (16, 192, (50, 100, 150, 200, 250, 300, 350, 400, 450)),
    (1, 64, (10, 25, 50, 75, 100, 150, 200)),
)
MODEL_COUNTS = (4, 16)


def run_setup(graph: Graph, batch: int, share_mib: int, n: int, rates: tuple[int, ...], duration_s: float,
              generations: int, seed: int) -> pd.DataFrame:
    dev = preset("v100-16gb")
    costs = model_costs(graph, dev, share_mib << 20, "ga", generations, seed)
    models = [dataclasses.replace(costs, name=f"{costs.name}#{i}") for i in range(n)]
    base = ServeConfig(rates=tuple(float(r) for r in rates), batch=batch, duration_s=duration_s, seed=seed,
                       memory_bytes=n * (share_mib << 20), h2d_bytes_per_s=dev.h2d_bytes_per_s, resident=1)
    paper = simulate_serving(models, base)
    fill = simulate_serving(models, dataclasses.replace(base, resident=None, policies=("time-shared",)))
    fill["policy"] = "time-shared (fill memory)"
    df = pd.concat([paper, fill], ignore_index=True)
    df.insert(3, "MiB_per_model", share_mib)
    df["compute_ms"] = costs.ideal_s * 1e3
    df["swap_plan_ms"] = costs.swap_s * 1e3
    return df


def claims(df: pd.DataFrame) -> str:
    """The paper's two claims, measured on the batch-16 setup."""
    out = []
    b16 = df[df.batch == 16]
    for n in MODEL_COUNTS:
        part = b16[b16.models == n].set_index(["policy", "rate"])
        low = [r for r in sorted(b16.rate.unique()) if r < 400]
        worst = max(part.loc[("swapping", r), "p99_s"] / part.loc[("not-shared", r), "p99_s"] for r in low)
        out.append(f"{n} models: swapping's p99 is at most {worst:.2f}x not-shared's below 400 requests/s "
                   f"(paper: at most 2x)")
    part = b16[b16.models == 16].set_index(["policy", "rate"])
    ts = part.loc[("time-shared", 300.0), "p99_s"] / part.loc[("not-shared", 300.0), "p99_s"]
    fill = part.loc[("time-shared (fill memory)", 300.0), "p99_s"] / part.loc[("not-shared", 300.0), "p99_s"]
    out.append(f"16 models at 300 requests/s: time-shared's p99 is {ts:.1f}x not-shared's (paper: 8x); keeping as "
               f"many models as fit, {fill:.1f}x")
    return "\n".join(f"- {line}" for line in out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/hybrid-bench"), help="where graphs are captured")
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of arrivals per rate")
    ap.add_argument("--generations", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="30 s of arrivals, 10 generations")
    args = ap.parse_args()
    duration, gens = (30.0, 10) if args.quick else (args.duration, args.generations)
    frames, graphs = [], []
    for batch, share, rates in SETUPS:
        path = ensure_capture("resnet-152", batch, args.work)
        graphs.append(path)
        g = Graph.load(path)
        for n in MODEL_COUNTS:
            frames.append(run_setup(g, batch, share, n, rates, duration, gens, args.seed))
            print(batch, n, flush=True)
    df = pd.concat(frames, ignore_index=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, ((batch, share, _), n) in zip(axes.flat, [(s, n) for s in SETUPS for n in MODEL_COUNTS]):
        part = df[(df.batch == batch) & (df.models == n)]
        for policy, p in part.groupby("policy", sort=False):
            p = p.sort_values("throughput")
            ax.plot(p.throughput, p.p99_s * 1e3, marker="o", label=policy)
        ax.set_yscale("log")
        ax.set_title(f"{n} x ResNet-152, batch {batch}, {share} MiB each")
        ax.set_xlabel("throughput (requests/s)")
        ax.set_ylabel("p99 latency (ms)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    RESULTS.mkdir(exist_ok=True)
    fig.savefig(RESULTS / quick_name("fig8.png"), dpi=110)
    plt.close(fig)
    c16 = df[(df.batch == 16)].iloc[0]
    g16 = Graph.load(graphs[0])
    load_ms = float(g16.arrays.t_bytes[g16.arrays.t_persistent].sum()) / preset("v100-16gb").h2d_bytes_per_s * 1e3
    cap16 = 16 / ((c16.compute_ms + load_ms * 15 / 16) / 1e3)
    c1 = df[(df.batch == 1)].iloc[0]
    p300 = df[(df.batch == 16) & (df.models == 16) & (df.rate == 300.0)].set_index("policy")["p99_s"]
    ts300 = p300["time-shared"] / p300["not-shared"]
    notes = f"""`hybrid serve --graph resnet-152-bB-infer.json --models N --memory (N x share) --rate ...
--duration {duration:g}s --planner ga --generations {gens} --seed {args.seed} --resident 1` for each setup (and
without `--resident 1` for `time-shared (fill memory)`), run in-process. Figure: results/fig8.png.

The paper's claims, measured (batch 16):

{claims(df)}

Service times per batch (simulated, roofline op times): batch 16 compute {c16.compute_ms:.1f} ms, its swap plan in
192 MiB {c16.swap_plan_ms:.1f} ms; batch 1 compute {c1.compute_ms:.2f} ms, in 64 MiB {c1.swap_plan_ms:.2f} ms. A
time-shared miss adds the parameters' copy, {load_ms:.1f} ms at 12 GB/s.

Time-shared with one resident model serves 16 models at batch 16 at about {cap16:.0f} requests/s (an estimate: a
miss on 15 of 16 batches adds {load_ms:.1f} ms to {c16.compute_ms:.1f} ms of compute; a random model repeats now
and then, so the run serves a little more), so at 300 requests/s it is at saturation and its p99 keeps growing
with the length of the run ({duration:g} s here, {ts300:.1f}x not-shared's; a shorter run gives less): the paper's
8x is the same knee, measured at an unstated duration.

Why ours differ from the paper:
- **The batch and the memory are not stated** in the paper; batch 16 is read from its 400 requests/s knee (batch 16
  takes 0.040 s on its V100, so one GPU serves at most 400 requests/s), and each model's share is the smallest of
  Table 2's memories where our batch-16 graph runs (our residual `add` is out of place: results/table2.md).
- **Swapping costs nothing at batch 16 here.** With roofline times a batch-16 ResNet-152 computes for {c16.compute_ms:.0f} ms, which
  hides the {load_ms:.0f} ms of parameter copies entirely (Table 2: 0.035 s at every memory where it runs), so swapping equals
  not-shared; the paper measured 0.044 s at 192 MB, so its swapping is a little slower than not-shared. The batch-1
  setup shows the other regime: the copies (about {load_ms:.0f} ms) exceed compute ({c1.compute_ms:.1f} ms), swapping's capacity falls to
  1 / {c1.swap_plan_ms / 1e3:.4f} s, and its p99 rises far above not-shared's well before not-shared saturates.
- **One GPU serves one batch at a time.** The paper's MXNet could overlap one model's copies with another's
  compute; our service time is the plan's whole makespan, so near saturation ours queues more.
- **Latency includes forming the batch**: a request waits for the 15 others of its batch (150 ms at 100 requests/s),
  so at low rates every policy's p99 is dominated by batching, as in the paper's curves, which fall with rate."""
    write_table(df, "fig8", "Figure 8: serving 4 and 16 ResNet-152 models on one GPU (p99 latency vs throughput)",
                notes, graphs=graphs, paper="SwapAdvisor (ASPLOS'20) Figure 8, §6.3")


if __name__ == "__main__":
    main()
