"""Executor memory = plan memory on the CPU: bytes allocated outside the pool per iteration, and the counter's cost.

For each model (by default the zoo test models of tests/executor/cases.py and its user module; `--wide` the
larger set of benchmarks/executor_cpu.py), a byte-budget plan at half the unswapped peak runs a few iterations
with the dispatch-mode counter (executor.outside) and is compared with eager training bitwise. The table gives,
per iteration, the bytes allocated outside the pool, the part the ops' stated workspaces allow for (the copy
fallback's results, which capture states: executor.ops.copy_workspaces) and what goes beyond them (0 when the
executor's memory is the plan's), by aten target; then seconds per iteration with the counter off and on,
alternating, median of `--reps` runs of `--iters` iterations each, one thread (run it in the timed slot).

    python -m benchmarks.executor_outside            # writes results/executor_outside.md
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.common import write_table  # noqa: E402
from executor.api import Executor  # noqa: E402
from executor.check import compare, train_eager  # noqa: E402
from executor.ops import COPY, OUT, SLOT  # noqa: E402
from hybrid.swap.quick_plans import quick_plan  # noqa: E402
from hybrid.validator import validate  # noqa: E402

SEED = 7
FRACTION = 0.5


def _test_models() -> list[tuple[str, Any]]:
    from tests.executor.cases import ZOO, case

    def make(name: str) -> Any:
        c = case(name)
        return c.graph, c.build(), c.args, c.target, c.loss_fn

    return [(name, (lambda n=name: make(n))) for name in [*ZOO, "tinylm"]]


def _wide_models() -> list[tuple[str, Any]]:
    from benchmarks.executor_cpu import CASES, _case

    return [(c[0], (lambda c=c: _case(*c, executor_workspaces=True))) for c in CASES]


def _per_iter(ex: Executor, iters: int) -> float:
    t0 = time.perf_counter()
    ex.run(iters, seed=SEED)
    return (time.perf_counter() - t0) / iters


def run(name: str, make: Any, iters: int, reps: int) -> dict[str, Any]:
    graph, base, args, target, loss_fn = make()
    plan = quick_plan(graph, FRACTION, "unconstrained")
    assert validate(graph, plan).valid
    ex = Executor(graph, plan, "cpu")
    ex.load(copy.deepcopy(base), args, target)
    recs = ex.run(3, seed=SEED)
    ref = train_eager(graph, copy.deepcopy(base), args, target, loss_fn, 3, SEED)
    cmp = compare(ex.losses, ex.state(), ref)
    out = [r.ops.outside for r in recs]
    modes = recs[-1].ops.ops_by_mode
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(reps):
        for count in (False, True):
            e = Executor(graph, plan, "cpu", count_outside=count)
            e.load(copy.deepcopy(base), args, target)
            e.run(2, seed=SEED)
            times[count].append(_per_iter(e, iters))
    off, on = statistics.median(times[False]), statistics.median(times[True])
    row = {
        "model": name, "ops": len(graph.ops),
        "outside B/iter": out[-1].bytes,
        "in stated workspaces B/iter": out[-1].bytes - out[-1].beyond_workspace_bytes,
        "beyond workspaces B/iter (max over iters)": max(o.beyond_workspace_bytes for o in out),
        "first iteration B": out[0].bytes,
        "by target": ", ".join(f"{t} {b}" for t, b in sorted(out[-1].by_target.items())) or "-",
        "out / slot / copy ops": f"{modes.get(OUT, 0)}/{modes.get(SLOT, 0)}/{modes.get(COPY, 0)}",
        "result": "bitwise equal" if cmp.bitwise else f"{len(cmp.mismatched)} differ" + (f", {len(cmp.one_sided)} on one side only" if cmp.one_sided else ""),
        "ms/iter counter off": off * 1e3, "ms/iter counter on": on * 1e3, "counter slowdown": on / off,
    }
    print(row, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wide", action="store_true", help="benchmarks/executor_cpu.py's models instead of the tests'")
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2 iterations, 1 rep (writes the _quick table)")
    a = ap.parse_args()
    if a.quick:
        a.iters, a.reps = 2, 1
    torch.set_num_threads(1)
    models = _wide_models() if a.wide else _test_models()
    rows = [run(name, make, a.iters, a.reps) for name, make in models if not a.models or name in a.models]
    notes = (f"torch {torch.__version__}, CPU backend, one thread; a byte-budget (Belady) plan at "
             f"{FRACTION:.0%} of the unswapped peak; 3 counted iterations compared with eager (losses, parameters, "
             "buffers, optimizer state); times: median of "
             f"{a.reps} runs of {a.iters} iterations after 2 warm-up ones. *outside*: storage returned by aten calls "
             "outside the executor's buffers (a kernel's own scratch, freed before it returns, is not seen). "
             "*in stated workspaces*: the copy fallback's results (batch norm's backward, layer norm), which "
             "capture states as the op's workspace so the plan counts them.")
    stem = "executor_outside_wide" if a.wide else "executor_outside"
    path = write_table(pd.DataFrame(rows), stem, "Bytes allocated outside the pool on the CPU executor", notes)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
