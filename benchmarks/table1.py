"""SwapAdvisor Table 1 side by side: memory, operator count and distinct tensor sizes of the suite models.

Captures each model (SGD with momentum 0.9, fp32, v100-16gb costs) and writes results/table1.{md,csv}.
Captured graphs are kept under --graph-dir for the other benchmarks (they are large; not in git).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from benchmarks.common import write_table
from hybrid.graph.liveness import distinct_sizes
from hybrid.graph import Graph
from hybrid.graph.info import unswapped_peak

# model, batch, the paper's memory (GB), operators, distinct tensor sizes (Table 1)
PAPER = [
    ("wresnet-152-10", 64, 180, 882, 26),
    ("inception-v4-4", 64, 71, 830, 64),
    ("nasnet-25", 64, 193, 5533, 65),
    ("rnn-8-8k", 256, 118, 8594, 7),
    ("brnn-4-8k", 128, 99, 9034, 9),
]

WHY = {
    "wresnet-152-10": "Operators: ours are ATen ops (convolution, batch-norm, relu, add and their backward ops, plus "
                      "one SGD op per parameter); MXNet's 882 are coarser layer operators, so we have ~1.9x. Sizes: "
                      "gradients, momentum buffers and batch-norm statistics add a few sizes. Memory (160 vs 180 GB): "
                      "we widen every convolution by 10 as the paper words it; the paper does not say what its "
                      "figure counts (allocator pooling, workspace, or a different widening would all raise it).",
    "inception-v4-4": "Operators and sizes: as for WResNet (ATen granularity, optimizer ops). Memory (49 vs 71 GB): "
                      "our peak frees each tensor right after its last reader; the paper's figure is not defined "
                      "precisely, and MXNet keeps concat inputs and branch outputs alive longer than needed.",
    "nasnet-25": "Operators (2.5x): our separable convolutions are depthwise + pointwise ATen ops, each with its own "
                 "batch-norm, relu and backward ops. Memory (175 vs 193 GB) and sizes (73 vs 65) are close. We use "
                 "NASNet-A Large's filters (168) and image size (331); the paper names only R=25.",
    "rnn-8-8k": "Memory (59 vs 118 GB): activations scale with the sequence length, which the paper does not give; "
                "we use 40 steps, the length that best matches its operator count (11.5k vs 8.6k ops: ATen splits "
                "each LSTM step into matmuls and pointwise ops). At 80 steps the peak is ~79 GB. Sizes (10 vs 7): "
                "the embedding/softmax (vocabulary 10k, our choice) and optimizer tensors add sizes.",
    "brnn-4-8k": "As RNN-8-8K: 40 steps assumed (memory 68 vs 99 GB; ops 11.8k vs 9.0k); two directions per layer "
                 "with their own parameters, concatenated, add a few sizes (14 vs 9).",
}


def capture_to(name: str, batch: int, path: Path) -> tuple[Graph, float]:
    from hybrid.capture.api import capture_model

    t0 = time.time()
    g = capture_model(name, batch=batch, optimizer="sgd", optimizer_options={"momentum": 0.9}, device="v100-16gb")
    g.save(path)
    return Graph.load(path), time.time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--graph-dir", type=Path, default=Path("/tmp/hybrid-graphs"))
    ap.add_argument("--reuse", action="store_true", help="Reuse graph files already in --graph-dir.")
    args = ap.parse_args()
    args.graph_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, batch, p_mem, p_ops, p_sizes in PAPER:
        path = args.graph_dir / f"{name}-b{batch}.json"
        if args.reuse and path.exists():
            g, secs = Graph.load(path), float("nan")
        else:
            g, secs = capture_to(name, batch, path)
        peak = unswapped_peak(g)
        by_kind: dict[str, int] = {}
        for t in g.tensors:
            by_kind[t.kind] = by_kind.get(t.kind, 0) + t.bytes
        rows.append({
            "model": name, "batch": batch,
            "paper_memory_GB": p_mem, "ours_peak_GB": peak / 1e9,
            "paper_ops": p_ops, "ours_ops": len(g.ops),
            "paper_sizes": p_sizes, "ours_sizes": len(distinct_sizes(g)),
            "ours_params_GB": by_kind.get("param", 0) / 1e9,
            "ours_optimizer_state_GB": by_kind.get("optimizer_state", 0) / 1e9,
            "why_different": WHY[name],
        })
        print({k: v for k, v in rows[-1].items() if k != "why_different"}, f"captured in {secs:.0f} s", flush=True)
    notes = """Paper: SwapAdvisor (ASPLOS'20) Table 1 (memory usage, number of operators, distinct tensor sizes), batch
64 for the CNNs, 256 for RNN-8-8K, 128 for BRNN-4-8K. Ours: `hybrid capture` of the zoo model (SGD with momentum 0.9,
fp32); memory is the unswapped peak of the program order (every tensor freed right after its last reader,
parameters and optimizer state resident), in 10^9 bytes as the paper's GB; operators are ATen-level ops including
one optimizer op per parameter; distinct sizes count every tensor (parameters, gradients, momentum, activations)."""
    write_table(pd.DataFrame(rows), "table1", "SwapAdvisor Table 1, side by side", notes, paper="SwapAdvisor Table 1",
                graphs=[args.graph_dir / f"{name}-b{batch}.json" for name, batch, *_ in PAPER])


if __name__ == "__main__":
    main()
