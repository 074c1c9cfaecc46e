"""SwapAdvisor's Table 2: ResNet-152 inference at 64/128/192/512/640 MB of device memory x batch 1/16/64.

Each cell is `hybrid optimize --refine none --generations G --seed 1`'s search (the GA alone, a deterministic budget,
with the planner's default options) on an
inference graph (`hybrid capture --model resnet-152 --optimizer none --batch B --device v100-16gb`: forward only, no
gradients or optimizer state) with `--memory M` (MiB: what the plan may fill, no reserve), in simulated seconds per
batch beside the paper's. NA where no plan fits, with the reason (the largest op alone needs more than M).

Full run (`--generations 60`) and `--quick` (10 generations): about a minute each on the shared 2-core machine
(one search per feasible cell, a second or two each, plus the captures). Writes results/table2.{md,csv}.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import ROOT, write_table
from hybrid.device import preset
from hybrid.graph import Graph
from hybrid.graph.info import graph_alignment, ideal_time, largest_op, unswapped_peak
from hybrid.bounds import graph_bound
from hybrid.units import format_bytes

MEMORIES_MIB = (64, 128, 192, 512, 640)
BATCHES = (1, 16, 64)
# Table 2 of the paper (seconds per inference batch on a V100; None = N/A: it could not run at that memory).
PAPER: dict[int, tuple[float | None, ...]] = {
    1: (0.024, 0.022, 0.018, 0.017, 0.017),
    16: (None, 0.077, 0.044, 0.040, 0.040),
    64: (None, None, None, 0.238, 0.123),
}
# The paper's ideal: "italic: within 1% of the run time with the whole 16 GB", i.e. its 640 MB column.
PAPER_IDEAL = {1: 0.017, 16: 0.040, 64: 0.123}


def ensure_capture(model: str, batch: int, work: Path, optimizer: str = "none", device: str = "v100-16gb") -> Path:
    """The graph file for `model` at `batch` under `work`, captured with today's `hybrid capture` if absent."""
    kind = "infer" if optimizer == "none" else optimizer
    out = work / f"{model}-b{batch}-{kind}.json"
    if not out.exists():
        work.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-c", "from hybrid.cli.main import main; main()", "capture", "--model", model,
               "--batch", str(batch), "--optimizer", optimizer, "--device", device, "--out", str(out)]
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"capture of {model} batch {batch} failed:\n{proc.stderr}")
    return out


@dataclass(frozen=True)
class Cell:
    makespan_s: float | None
    why_na: str
    bound_s: float


def optimize_cell(g: Graph, memory_bytes: int, generations: int, seed: int) -> Cell:
    """The GA's best plan for `g` with `memory_bytes` (validated), or NA with the reason."""
    import dataclasses

    from ga import GAConfig, optimize
    from hybrid.validator import validate

    dev = dataclasses.replace(preset("v100-16gb"), memory_bytes=memory_bytes, reserve_bytes=0)
    lb = graph_bound(g, dev)  # with recompute: the search may rerun ops
    _, big = largest_op(g, graph_alignment(g))
    if big > memory_bytes:
        return Cell(None, f"largest op alone needs {format_bytes(big)}", lb)
    res = optimize(g, dev, GAConfig(seed=seed), generations=generations, workers=1)
    plan = res.to_plan()
    report = validate(g, plan)
    if not report.valid:
        raise SystemExit(f"invalid plan for {g.name} at {format_bytes(memory_bytes)}: {report}")
    return Cell(plan.makespan_s, "", lb)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=Path("/tmp/hybrid-bench"), help="where graphs are captured")
    ap.add_argument("--generations", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="10 generations")
    args = ap.parse_args()
    gens = 10 if args.quick else args.generations
    rows, graphs = [], []
    for b in BATCHES:
        path = ensure_capture("resnet-152", b, args.work)
        graphs.append(path)
        g = Graph.load(path)
        ideal = ideal_time(g)
        for m, paper in zip(MEMORIES_MIB, PAPER[b]):
            cell = optimize_cell(g, m << 20, gens, args.seed)
            rows.append({"batch": b, "memory_MiB": m,
                         "ours_s": cell.makespan_s if cell.makespan_s is not None else np.nan,
                         "paper_s": paper if paper is not None else np.nan,
                         "ours/ideal": cell.makespan_s / ideal if cell.makespan_s is not None else np.nan,
                         "paper/paper_ideal": paper / PAPER_IDEAL[b] if paper is not None else np.nan,
                         "ideal_s": ideal, "bound_s": cell.bound_s,
                         "NA because": cell.why_na})
            print(b, m, rows[-1]["ours_s"], paper, cell.why_na, flush=True)
    df = pd.DataFrame(rows)
    peaks = {b: format_bytes(unswapped_peak(Graph.load(p))) for b, p in zip(BATCHES, graphs)}
    bigs = {b: format_bytes(largest_op(Graph.load(p), graph_alignment(Graph.load(p)))[1]) for b, p in
            zip(BATCHES, graphs)}
    g1 = Graph.load(graphs[0])
    param_bytes = float(g1.arrays.t_bytes[g1.arrays.t_persistent].sum())
    param_mib, link_ms = param_bytes / 2**20, param_bytes / preset("v100-16gb").h2d_bytes_per_s * 1e3
    c64 = df[(df.batch == 1) & (df.memory_MiB == 64)].iloc[0]
    cell64_ms, bound64_ms, ideal1_ms = c64.ours_s * 1e3, c64.bound_s * 1e3, c64.ideal_s * 1e3
    notes = f"""Each cell: `hybrid optimize --graph resnet-152-bB-infer.json --memory M --reserve 0 --refine none
--generations {gens} --seed {args.seed} --workers 1`'s search, run in-process through `ga.optimize` with the planner's
default options (without the long rerun chains and re-binding of reruns `hybrid optimize` adds), the plan validated.
`ours_s` is the simulated seconds per inference batch; `paper_s` Table 2 (V100, MXNet, measured). `ideal_s` is
compute only (infinite memory), `bound_s` the graph bound at that memory (`hybrid.bounds.graph_bound` with recompute, as the search may rerun ops: any schedule).
Memory is read as MiB. Unswapped program-order peaks: {peaks}; largest single op: {bigs}.

Why ours differ:
- **Compute times.** Our op times are roofline estimates for a V100 (peak FLOP/s, memory bandwidth, a launch
  overhead); the paper's are measured MXNet times. At batch 1 the roofline gives {ideal_time(Graph.load(graphs[0]))*1e3:.1f} ms
  where the paper's full-memory run takes 17 ms (cuDNN at batch 1 is far from peak and 516 kernel launches cost
  more than the roofline's overhead), so our swap overhead at batch 1 is a much larger fraction: with 64 MiB most of
  the {param_mib:.0f} MiB of parameters cross the 12 GB/s link each batch ({link_ms:.1f} ms for all of them; the cell
  takes {cell64_ms:.1f} ms, its bound {bound64_ms:.1f} ms), which the paper's 17 ms of compute hides and our
  {ideal1_ms:.1f} ms cannot (`ours/ideal` against `paper/paper_ideal`).
- **NA cells.** Our capture records PyTorch's out-of-place residual `add` (two inputs and an output live at once),
  so the largest op needs 3 activations; MXNet adds in place (and runs ReLU in place), so its largest op needs
  about two. That is why batch 16 at 128 MiB and batch 64 at 512 MiB fit in the paper and not here. Where our
  largest op fits, a plan always exists (the swap planner can evict everything else).
- **Where ours reaches the ideal.** The search's schedule (and its freeing of dead activations) brings the peak
  under the program order's, so at batch 64 and 640 MiB (below the program order's peak) the plan needs no copies;
  the paper's cells at 512/640 MiB for batch 1 and 16 are likewise its full-memory times."""
    write_table(df, "table2", "Table 2: ResNet-152 inference time by device memory and batch", notes, graphs=graphs,
                paper="SwapAdvisor (ASPLOS'20) Table 2, §6.3")


if __name__ == "__main__":
    main()
