"""Is a mismatch between the executor and eager training the executor's or eager's? Hash both, process by process.

Each run is a fresh process that trains one executor_cpu case eagerly and with the executor (CPU backend,
swap planner at a memory fraction) for --iters iterations, then hashes the parameters, buffers and optimizer
state of each. A side whose hash changes between processes is not reproducible; the other one is. Writes
results/eager_reproducibility.md.

Example (what produced the committed table):
    python -m benchmarks.eager_reproducibility --model resnet-50 --runs 24
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import json
import subprocess
import sys
from collections import Counter

import pandas as pd

from benchmarks.common import write_table


def _digest(*groups) -> str:  # noqa: ANN002 - dicts of tensors
    h = hashlib.sha256()
    for g in groups:
        for k in sorted(g, key=str):
            v = g[k]
            if isinstance(v, dict):
                h.update(_digest(v).encode())
            else:
                h.update(v.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()[:12]


def one(model: str, fraction: float, iters: int) -> dict:
    """This process's hashes of eager's and the executor's state after `iters` iterations."""
    import torch

    from benchmarks.executor_cpu import CASES, _case
    from executor.api import Executor
    from executor.check import compare, train_eager
    from hybrid.swap.quick_plans import quick_plan

    case = next(c for c in CASES if c[0] == model)
    graph, base, args, target, loss_fn = _case(*case)
    ref = train_eager(graph, copy.deepcopy(base), args, target, loss_fn, iters, 0)
    ex = Executor(graph, quick_plan(graph, fraction, "unconstrained"), "cpu", sanitize=False)
    ex.load(copy.deepcopy(base), args, target)
    ex.run(iters, seed=0)
    st = ex.state()
    e = ref.final
    return {"eager": _digest(e.params, e.buffers, e.state),
            "executor": _digest(st.params, st.buffers, st.state),
            "equal": compare(ex.losses, st, ref).bitwise, "threads": torch.get_num_threads()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet-50")
    ap.add_argument("--fraction", type=float, default=0.5)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one(a.model, a.fraction, a.iters)))
        return
    rows = []
    for i in range(a.runs):
        out = subprocess.run([sys.executable, "-m", "benchmarks.eager_reproducibility", "--child", "--model", a.model,
                              "--fraction", str(a.fraction), "--iters", str(a.iters)],
                             capture_output=True, text=True, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(i, r, flush=True)
        rows.append(r)
    df = pd.DataFrame(rows)
    summary = pd.DataFrame([{"side": side, "distinct hashes": df[side].nunique(),
                             "runs per hash": ", ".join(str(n) for n in Counter(df[side]).values())}
                            for side in ("eager", "executor")])
    notes = (f"{a.model}, {a.iters} iterations, memory {a.fraction:.0%} of the unswapped peak (Belady, byte budget), "
             f"{a.runs} processes, torch intra-op threads {int(df['threads'].iloc[0])}; executor equal to eager in "
             f"{int(df['equal'].sum())} of {a.runs}. One hash for a side means it is reproducible process to process.")
    path = write_table(summary, "eager_reproducibility", "Executor vs eager: which side is reproducible", notes)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
