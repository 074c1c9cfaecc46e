"""Static planning of whole graphs (MegEngine's setting, no swapping): arena / peak live with and without
in-place overwrite, for inference and training graphs.

Graphs: the bundled ResNet-18 (training, batch 32) and ResNet-50 captured here at batch 8 for inference
(`--optimizer none`) and training (SGD with momentum), plus any `--graphs` files. For each, with and without
overwrite (`hybrid.arena.lifetimes.schedule_buffers`): buffers, overwrites, the peak of live bytes, MegEngine's
best-fit simulation and the exact search's arena (`--limit` seconds), each checked per tensor by the validator.
Full run about 2 minutes on a 2-core machine (one-off numba compile included); `--quick` (2 s of exact search)
under a minute. Writes results/arena_static.{md,csv}.
"""
from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import pandas as pd

from benchmarks.common import ROOT, write_table
from hybrid.arena import exact
from hybrid.arena.heuristics import megengine
from hybrid.arena.lifetimes import schedule_buffers
from hybrid.arena.validate import check_offsets
from hybrid.graph import Graph


def _captures(folder: Path) -> list[Path]:
    """ResNet-50 at batch 8, inference and training, captured into `folder` (about a second each)."""
    from hybrid.capture.api import capture_model

    out = []
    for name, opt in (("resnet50-b8-inference", "none"), ("resnet50-b8-training", "sgd")):
        path = folder / f"{name}.json"
        g = capture_model("resnet-50", 8, optimizer=opt, optimizer_options={"momentum": 0.9} if opt == "sgd" else None)
        g.save(path)
        out.append(path)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=float, default=20.0, help="Seconds of exact search per graph and setting.")
    ap.add_argument("--graphs", nargs="*", type=Path, default=[], help="More graph files.")
    ap.add_argument("--quick", action="store_true", help="2 s of exact search each.")
    args = ap.parse_args()
    limit = 2.0 if args.quick else args.limit
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = [ROOT / "examples" / "resnet18-b32.json", *_captures(Path(tmp)), *args.graphs]
        for path in paths:
            g = Graph.load(path)
            kind = "training" if any(op.updates for op in g.ops) else "inference"
            for overwrite in (False, True):
                sb = schedule_buffers(g, overwrite=overwrite)
                peak = sb.problem.peak_live()
                meg = megengine(sb.problem)
                sol = exact.solve(sb.problem, limit)
                for s in (meg, sol):
                    chk = check_offsets(sb.tensors, sb.tensor_offsets(s.offsets))
                    assert chk.valid, chk.problems[:1]
                rows.append({"graph": path.stem, "kind": kind, "overwrite": overwrite, "tensors": len(sb.tensors),
                             "buffers": len(sb.problem), "overwrites": len(sb.overwrites),
                             "peak live MiB": peak / 2**20, "megengine MiB": meg.arena_bytes / 2**20,
                             "megengine / peak": meg.arena_bytes / peak, "exact MiB": sol.arena_bytes / 2**20,
                             "exact / peak": sol.arena_bytes / peak, "proven optimal": sol.proven_optimal,
                             "solver": sol.solver})
                print(rows[-1], flush=True)
        df = pd.DataFrame(rows)
        base = df[~df["overwrite"]].set_index("graph")["exact MiB"]
        df["exact vs no overwrite"] = [r["exact MiB"] / base[r["graph"]] - 1.0 for _, r in df.iterrows()]
        notes = (f"Exact search {limit:g} s per row. Program order, no swapping; sizes rounded up to 512 bytes. Time is "
                 "the program order doubled (op p reads at 2p, writes from 2p + 1): an overwritten input ends where "
                 "its overwriter starts, so they share bytes by design; every assignment is checked per tensor "
                 "(`check_offsets` on `StaticBuffers.tensors`). Views need nothing: captured graphs fold view ops "
                 "into their readers' arguments, so a view is never a tensor of its own. Overwrite kinds: "
                 "`hybrid.arena.lifetimes.OVERWRITE_KINDS` (elementwise; the input read without a view, not "
                 "persistent, last read by this op; the output no larger; one overwriter per input).")
        print(write_table(df, "arena_static", "Static arena planning with and without in-place overwrite", notes,
                          graphs=paths, paper="MegEngine's static memory planner"))


if __name__ == "__main__":
    main()
