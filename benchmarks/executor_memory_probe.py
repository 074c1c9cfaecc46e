"""Where the executor's device memory goes beyond the plan's, on CUDA: a diagnosis, not a table.

On an H200 (results/vs_torch_measured.md) torch's peak while a written plan ran was 1.10-2.1x the plan's memory
on 2026-11-28, and within it on 11 of 14 runs on 2026-11-30 (vgg16's three at 1.09-1.17x), with no compaction.
This records the caching allocator's history (`torch.cuda.memory._record_memory_history`) while one model's plan
runs (`hybrid optimize`'s written plan at that memory, as benchmarks.vs_torch_measured runs it; `--plan belady`: a
laid-out Belady plan), issued node by node and then recorded as a CUDA graph, and prints, at the moment the most
bytes were allocated, the live blocks grouped by the Python line that allocated them: the pool, the copy
fallback's results, kernels' scratch (no Python line of ours), or something else.

    python -m benchmarks.executor_memory_probe --model vgg16 --memory-mib 3039 --profile

The plan is made as the GPU benchmarks make theirs: on `executor.ops.with_copy_costs(graph, "cuda")` (the copy
fallback's results stated as workspaces; with `--profile`, the kernels' scratch and the copies' time measured on
this GPU too, reusing the op signatures in $HYBRID_PROFILE_CACHE) with cuBLAS's kept bytes as the device's reserve
(`executor.streams.kernel_state_bytes`); `--as-captured` plans the graph as captured, as before those (how the
H200 run of 2026-11-28 found 1.03-1.54x the plan's memory; on 2026-11-30, vgg16 at 3,355 MiB with a Belady plan:
a 3,159 MiB pool and 1,178 MiB beside it, `convolution_backward_11`'s result and cuDNN's scratch).
"""
from __future__ import annotations

import argparse
import collections
import time
from typing import Any

import torch

from benchmarks.common import measured_profile
from benchmarks.executor_gpu import cost_preset, run_plan
from benchmarks.vs_torch import graphs, models
from benchmarks.vs_torch_measured import materialize, plan_all
from executor.ops import with_copy_costs
from executor.streams import kernel_state_bytes
from hybrid.arena.layout import lay_out
from hybrid.capture.profile import apply_profile
from hybrid.device import Device
from hybrid.swap.baselines import run_baseline
from hybrid.validator import validate

MiB = 2 ** 20
OURS = ("/executor/", "/hybrid/", "/benchmarks/")


def where(frames: list[dict]) -> str:
    """The innermost frame in this repository (and its caller), else the innermost frame at all."""
    ours = [f for f in frames if any(k in f.get("filename", "") for k in OURS)]
    pick = ours[:2] or frames[:1]
    return " <- ".join(f"{f['filename'].rsplit('/', 1)[-1]}:{f.get('line')} {f.get('name')}" for f in pick) \
        or "(no Python frame)"


def live_at_peak(trace: list[dict], start: int) -> tuple[int, int, dict[int, dict]]:
    """Replay alloc/free events from `start`: (peak bytes, event index, blocks live then)."""
    live: dict[int, dict] = {}
    total = best = 0
    best_i = start
    best_live: dict[int, dict] = {}
    for i in range(start, len(trace)):
        e = trace[i]
        a = e.get("action")
        if a == "alloc":
            live[e["addr"]] = e
            total += e["size"]
            if total > best:
                best, best_i = total, i
                best_live = dict(live)
        elif a == "free_completed" and e["addr"] in live:
            total -= live.pop(e["addr"])["size"]
    return best, best_i, best_live


def report(label: str, snap: dict[str, Any], start: int, before: int) -> int:
    trace = snap["device_traces"][0] if snap.get("device_traces") else []
    peak, at, blocks = live_at_peak(trace, start)
    groups: dict[str, list[int]] = collections.defaultdict(list)
    for e in blocks.values():
        groups[where(e.get("frames", []))].append(e["size"])
    print(f"== {label}: {len(trace) - start} allocator events; at the peak (event {at - start}) {peak / MiB:.1f} MiB "
          f"allocated in this phase, {before / MiB:.1f} MiB allocated before it", flush=True)
    for w, sizes in sorted(groups.items(), key=lambda kv: -sum(kv[1]))[:14]:
        print(f"   {sum(sizes) / MiB:9.1f} MiB  {len(sizes):5d} blocks (largest {max(sizes) / MiB:.1f})  {w}",
              flush=True)
    return len(trace)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet-50", help="a model of benchmarks.vs_torch (resnet-50, gpt2, ...)")
    ap.add_argument("--memory-mib", type=float, default=1304.0, help="the plan's device memory (MiB)")
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--profile", action="store_true", help="measure op times, peaks and copies on this GPU first")
    ap.add_argument("--as-captured", action="store_true", help="plan the graph as captured, no reserve")
    ap.add_argument("--plan", choices=("optimize", "belady"), default="optimize",
                    help="the written plan of `hybrid optimize` (as benchmarks.vs_torch_measured runs it), or a "
                         "laid-out Belady plan (fails where Belady's plan cannot be laid out in the memory)")
    ap.add_argument("--seconds", type=float, default=12.0, help="hybrid optimize's time limit (--plan optimize)")
    a = ap.parse_args()
    dev = torch.device("cuda")
    model = next(m for m in models(False) if m.name == a.model)
    t0 = time.monotonic()
    plain, _ = graphs(model)
    reserve = 0
    if not a.as_captured:
        if a.profile:
            # $HYBRID_PROFILE_CACHE: the op signatures a session's GPU stages measured are reused
            plain = apply_profile(plain, measured_profile(plain, "cuda", repeat=5, warmup=2)[0])
        plain = with_copy_costs(plain, "cuda")
        reserve = kernel_state_bytes(dev)
    device = Device(f"{cost_preset(dev)}-probe", int(a.memory_mib * MiB), 50e9, 50e9, 2e-5, reserve_bytes=reserve)
    if a.plan == "belady":
        plan = lay_out(plain, run_baseline(plain, device, "belady"), time_limit_s=30.0).plan
    else:   # the plan benchmarks.vs_torch_measured runs at a peak: `hybrid optimize`'s written one
        plan, _skipped, error = plan_all(plain, [device], a.seconds, None)[0]
        if plan is None:
            raise SystemExit(f"error: hybrid optimize at {a.memory_mib:.0f} MiB: {error}")
    assert validate(plain, plan).valid, "the laid-out plan does not validate"
    print(f"{a.model}: {len(plain.ops)} ops, plan {plan.allocation.kind} at {a.memory_mib:.0f} MiB, "
          f"simulated {plan.makespan_s * 1e3:.2f} ms ({time.monotonic() - t0:.0f} s to plan)", flush=True)
    ws = sorted(((op.workspace_bytes, op.id) for op in plain.ops), reverse=True)[:3]
    print("largest stated workspaces: " + ", ".join(f"{i} {b / MiB:.1f} MiB" for b, i in ws), flush=True)
    base, args, target, _ = materialize(model)
    torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=400000, stacks="python")
    start = len(torch.cuda.memory._snapshot()["device_traces"][0])
    before = torch.cuda.memory_allocated(dev)
    for graphed in (False, True):
        torch.cuda.reset_peak_memory_stats(dev)
        r = run_plan(plain, plan, base, args, target, dev, a.iters, seed=0, cuda_graph=graphed)
        print(f"-- {'graphed' if graphed else 'issued'}: measured {r['measured_s'] * 1e3:.2f} ms, "
              f"the run's own peak {r['cuda_peak_MiB']:.1f} MiB = {r['cuda_peak/memory']:.3f} of the plan's "
              f"{a.memory_mib:.0f} (reserve {reserve / MiB:.0f}), "
              f"cuda_max_allocated {r['cuda_max_allocated_MiB']:.1f} MiB, copy fallback "
              f"{r['copy_fallback_MiB']:.0f} MiB/iter, graphed {r['graphed']}, after the run "
              f"{torch.cuda.memory_allocated(dev) / MiB:.1f} MiB still allocated", flush=True)
        snap = torch.cuda.memory._snapshot()
        start = report("graphed run" if graphed else "issued run", snap, start, before)
        before = torch.cuda.memory_allocated(dev)
    torch.cuda.memory._record_memory_history(enabled=None)


if __name__ == "__main__":
    main()
