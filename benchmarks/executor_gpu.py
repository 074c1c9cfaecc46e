"""The executor on a GPU: simulator accuracy, throughput, the usual alternatives, a stream-race check.

What it measures (results/executor_gpu.md, and .csv next to it):
1. The host link: pinned host<->device bandwidth and per-copy latency, which
   become the plans' device (memory = a fraction of each model's unswapped peak).
2. Per model: op times measured on this GPU (hybrid.capture.profile) are fed
   back into the graph, with what the executor does outside its pool on this device (executor.ops.with_copy_costs:
   the copy fallback's results as workspaces, its copies in the ops' times); plans are made on that graph, every
   one laid out at exact offsets as the executor runs it (Belady, vDNN and naive through `lay_out_baseline`, the
   swap planner with a merged size-class pool, and with `--ga-seconds` > 0 `hybrid optimize`'s written plan) at
   each memory (plus the pool's reserve: what cuBLAS keeps for the executor's stream), executed for `--iters`
   iterations, and their measured makespan
   compared with the simulated one (ratio; the paper saw -12%..+4%, the goal is +-5%), including whether the
   simulator ranks the plans as the GPU does (Kendall tau over the plans of one model and memory).
   The Belady plan made from roofline op times is run too: the gain of
   profile-based times.
3. Throughput: each plan against the ideal plan (no memory limit, executed by
   the same runtime), against eager PyTorch (no executor), against eager with
   `torch.autograd.graph.save_on_cpu(pin_memory=True)` and with activation
   checkpointing of every block (their time and peak memory, set beside the
   plan's memory).
4. Correctness on CUDA: one run per model trained against eager PyTorch from
   the same seed (max abs difference over losses, parameters, optimizer state).
5. TORCH_CUDA_SANITIZER=1: a child process runs a swapping plan under PyTorch's
   CUDA stream sanitizer; any race it sees fails the child.

    python -m benchmarks.executor_gpu                  # on a CUDA machine; about 11 min on one H100
    python -m benchmarks.executor_gpu --quick          # smaller models, 2 memories, ~4 min
    python -m benchmarks.executor_gpu --device cpu --quick --out /tmp/x.md   # smoke test of the script itself

Where one command may run 10 minutes at most, run it in parts; `--append` keeps
the other models' rows (kept in results/executor_gpu.json). results/executor_gpu.md
was made so, on an H100 (5.5 + 0.4 + 1.3 + 3.3 min):

    python -m benchmarks.executor_gpu --models resnet-50 rnn-4-2k vgg16 --no-sanitizer
    python -m benchmarks.executor_gpu --sanitizer-only --append
    python -m benchmarks.executor_gpu --models unet --no-sanitizer --append
    python -m benchmarks.executor_gpu --models inception-v4-1 --no-sanitizer --append --fractions 0.5

Plans run as CUDA graphs where they can (two iterations issued node by node,
then replays; `issued_s` keeps the node-by-node time), since issuing every node
from Python is slower than a fast GPU runs them.
"""
from __future__ import annotations

import argparse
import copy
import gc
import hashlib
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from executor.api import Executor  # noqa: E402
from executor.check import against_unlimited, exact_kernels, torch_optimizer  # noqa: E402
from executor.ops import cuda_conv_slots_on, with_copy_costs  # noqa: E402
from executor.streams import kernel_state_bytes  # noqa: E402
from hybrid.swap.quick_plans import size_class_plan  # noqa: E402
from hybrid.swap.baselines import run_baseline
from hybrid.capture.api import capture_model  # noqa: E402
from hybrid.capture.profile import apply_profile  # noqa: E402
from hybrid.capture.trace import portable_kernels  # noqa: E402
from hybrid.device import Device  # noqa: E402
from hybrid.errors import HybridError  # noqa: E402
from hybrid.graph.rerun import updates_generator_only  # noqa: E402
from hybrid.graph import Graph  # noqa: E402
from hybrid.graph.info import unswapped_peak
from hybrid.plan import Plan  # noqa: E402
from hybrid.validator import validate  # noqa: E402
from hybrid.zoo import get_model  # noqa: E402

MiB = 2**20
# (model, batch, overrides, optimizer, options)
FULL = [
    ("resnet-50", 64, {}, "sgd", {"momentum": 0.9}),
    ("vgg16", 32, {}, "adam", {}),
    ("unet", 8, {}, "adam", {}),
    ("rnn-4-2k", 64, {"seq_len": 20}, "adam", {}),
    ("inception-v4-1", 32, {}, "sgd", {"momentum": 0.9}),
]
QUICK = [
    ("resnet-18", 32, {"image_size": 112}, "sgd", {"momentum": 0.9}),
    ("vgg11", 16, {"image_size": 64}, "adam", {}),
    ("unet", 4, {"image_size": 128}, "adam", {}),
    ("rnn-2-1k", 32, {"seq_len": 10}, "adam", {}),
]
TINY = [  # --device cpu smoke test
    ("resnet-18", 2, {"image_size": 32, "num_classes": 10}, "sgd", {"momentum": 0.9}),
    ("rnn-2-1k", 3, {"hidden": 16, "embed": 12, "seq_len": 5, "vocab": 40}, "adam", {}),
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def short(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:160] if text else ''}"


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# ---- 1. the host link --------------------------------------------------------------------

def host_timed_s(dev: torch.device, fn: Any, repeat: int) -> float:
    """Host wall seconds of `fn` with a synchronize before and after, median of `repeat` after a first run."""
    out = []
    for _ in range(repeat + 1):
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        out.append(time.perf_counter() - t0)
    return statistics.median(out[1:])


def fit_link(small: int, t_small: float, large: int, t_large: float) -> tuple[float, float]:
    """(bytes per second, seconds per copy) of a link whose copy of n bytes takes latency + n / bandwidth, from
    one copy's time at two sizes; the latency is never below 0 (a noisy small copy), the bandwidth is the large
    copy's alone where the two times do not rise with size."""
    slope = t_large - t_small
    if slope <= 0:
        return large / t_large, 0.0
    bw = (large - small) / slope
    return bw, max(0.0, t_small - small / bw)


Copies = list[tuple[torch.Tensor, torch.Tensor]]   # (destination, source) views, copied in turn on one stream


def _graphed_copies_s(dev: torch.device, lanes: list[Copies], repeat: int) -> float:
    """Seconds one replay of a CUDA graph takes whose lanes run at once, each on a stream of its own, median:
    copies as the executor's recorded iterations issue them (no host launch or synchronize per copy)."""
    cap = torch.cuda.Stream(dev)
    streams = [torch.cuda.Stream(dev) for _ in lanes]

    def issue() -> None:
        fork = torch.cuda.Event()
        fork.record(cap)
        for s, lane in zip(streams, lanes):
            s.wait_event(fork)
            with torch.cuda.stream(s):
                for dst, src in lane:
                    dst.copy_(src, non_blocking=True)
            join = torch.cuda.Event()
            join.record(s)
            cap.wait_event(join)

    before = torch.cuda.current_stream(dev)
    cap.wait_stream(before)
    with torch.cuda.stream(cap):
        issue()                            # once outside the capture: first-use costs out of the timing
    torch.cuda.synchronize(dev)
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g, stream=cap):
            issue()
    finally:
        torch.cuda.set_stream(before)      # a capture that failed to end leaves its stream current
    out = []
    with torch.cuda.stream(cap):
        for _ in range(repeat + 1):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(cap)
            g.replay()
            b.record(cap)
            b.synchronize()
            out.append(a.elapsed_time(b) / 1e3)
    del g
    return statistics.median(out[1:])


def _link_graphed(dev: torch.device, host: torch.Tensor, d: torch.Tensor, small: int, repeat: int,
                  copies: int) -> dict[str, float | str]:
    n = host.numel()
    half = n // 2
    out: dict[str, float | str] = {}
    fixed_s: list[float] = []
    for name in ("h2d", "d2h"):
        def lane(k: int) -> Copies:
            pairs = [(d[i * small:(i + 1) * small], host[i * small:(i + 1) * small]) for i in range(k)]
            return pairs if name == "h2d" else [(h, dv) for dv, h in pairs]
        # k and 2k small copies: their difference is k copies without the replay's own launch (a fixed cost)
        t_k, t_2k = _graphed_copies_s(dev, [lane(copies)], repeat), _graphed_copies_s(dev, [lane(2 * copies)], repeat)
        fixed = max(0.0, 2 * t_k - t_2k)
        one = [(d, host)] if name == "h2d" else [(host, d)]
        bw, lat = fit_link(small, (t_2k - t_k) / copies, n, _graphed_copies_s(dev, [one], repeat) - fixed)
        out[f"{name}_alone_bytes_per_s"], out[f"latency_{name}_s"] = bw, lat
        fixed_s.append(fixed)
    out["latency_s"] = (out["latency_h2d_s"] + out["latency_d2h_s"]) / 2
    # both directions at once, on halves of the buffers (no copy reads what the other writes); the replay ends
    # with the slower lane, whose rate both directions are given
    both = _graphed_copies_s(dev, [[(d[:half], host[:half])], [(host[half:], d[half:])]], repeat)
    rate = half / max(both - statistics.mean(fixed_s) - out["latency_s"], 1e-9)
    out["h2d_bytes_per_s"] = min(rate, out["h2d_alone_bytes_per_s"])
    out["d2h_bytes_per_s"] = min(rate, out["d2h_alone_bytes_per_s"])
    out["method"] = (f"CUDA graph replays: {copies} and {2 * copies} copies of {small} B and one of {n // MiB} MiB "
                     f"per direction (latency, one-way rates), {half // MiB} MiB each way at once (the plans' "
                     "rates: the slower direction's)")
    return out


def measure_link(dev: torch.device, nbytes: int = 256 * MiB, small: int = 4096, repeat: int = 5,
                 copies: int = 256) -> dict[str, float | str]:
    """Pinned host<->device bandwidth and per-copy latency, as the plans' device states them (a copy of n bytes
    takes latency + n / bandwidth, each direction on its stream).

    On CUDA, timed as the executor's replayed iterations run their copies, recorded as CUDA graphs and timed by
    CUDA events around their replays (medians of `repeat`): the latency from `copies` copies of `small` bytes
    back to back against one of `nbytes`; the rates with both directions copying at once (`*_alone_*`: each by
    itself), as the copy streams of a plan that overlaps its copies run where both are busy. This times chains
    of copies alone, without the compute and the waits between streams a plan's replay has. Until 2026-11-30 one
    copy was timed from the host with a synchronize around it: 29.5 us per copy on the H200 (the host's launch
    and synchronize), where the naive plans' replays (every copy on the critical path, one stream) imply 1.3 us
    (the latency at which their simulated time equals the measured one); re-timed with it, the plans that
    overlap copies ran 3-8% slower than simulated, and with 0.92x the one-way rate within 2.5%
    (results/link_retime.md; docs/arena.md, "The host link the plans are timed with"). Elsewhere (the CPU smoke
    test), or where the capture fails, host wall time around synchronized copies, said in `method`."""
    pin = dev.type == "cuda"
    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
    d = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    copies = max(1, min(copies, nbytes // small // 2))
    if dev.type == "cuda":
        try:
            return _link_graphed(dev, host, d, small, repeat, copies)
        except Exception as e:  # noqa: BLE001 - a capture this torch refuses: the host's timing, said so
            torch.cuda.synchronize(dev)
            log(f"host link: CUDA graph timing failed ({short(e)}); timing copies from the host instead")

    h2d = host_timed_s(dev, lambda: d.copy_(host, non_blocking=True), repeat)
    d2h = host_timed_s(dev, lambda: host.copy_(d, non_blocking=True), repeat)
    lat = host_timed_s(dev, lambda: d[:small].copy_(host[:small], non_blocking=True), repeat)
    return {"h2d_bytes_per_s": nbytes / h2d, "d2h_bytes_per_s": nbytes / d2h, "latency_s": lat,
            "method": "host wall time around synchronized copies"}


def cost_preset(dev: torch.device) -> str:
    if dev.type != "cuda":
        return "v100-16gb"
    name = torch.cuda.get_device_name(dev).lower()
    if "h100" in name or "h200" in name or "gh200" in name:
        return "h100-80gb"
    if "a100" in name:
        return "a100-80gb"
    return "v100-16gb"


# ---- 3. eager alternatives ------------------------------------------------------------------

def _blocks_checkpointed(model: torch.nn.Module) -> int:
    """Wrap the outermost blocks held in Sequential / ModuleList containers in activation checkpointing."""
    from torch.utils.checkpoint import checkpoint

    class Ckpt(torch.nn.Module):
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *a: Any, **kw: Any) -> Any:
            return checkpoint(self.inner, *a, use_reentrant=False, **kw)

    def visit(mod: torch.nn.Module) -> int:
        n = 0
        container = isinstance(mod, (torch.nn.Sequential, torch.nn.ModuleList))
        for k, child in list(mod._modules.items()):
            if child is None:
                continue
            if container and not isinstance(child, (torch.nn.Sequential, torch.nn.ModuleList)) and \
                    any(True for _ in child.parameters()):
                mod._modules[k] = Ckpt(child)
                n += 1
            else:
                n += visit(child)
        return n

    return visit(model)


def eager_time(graph: Graph, base: torch.nn.Module, args: Any, target: Any, loss_fn: Any, dev: torch.device,
               iters: int, mode: str) -> dict[str, Any]:
    """Time per iteration and peak device memory of eager training: plain, save_on_cpu or checkpointed."""
    model = copy.deepcopy(base).to(dev)
    # The optimizer first: wrapping renames the parameters ("....inner.weight"), which it finds by name.
    opt = torch_optimizer(graph, model)
    if mode == "checkpoint" and _blocks_checkpointed(model) == 0:
        return {"note": "no Sequential/ModuleList blocks to checkpoint"}
    a = tuple(x.to(dev) for x in args)
    t = target.to(dev)
    times = []
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(dev)
    for k in range(iters):
        sync(dev)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with portable_kernels():
            if mode == "save_on_cpu":
                with torch.autograd.graph.save_on_cpu(pin_memory=dev.type == "cuda"):
                    loss = loss_fn(model(*a), t)
            else:
                loss = loss_fn(model(*a), t)
            loss.backward()
        opt.step()
        sync(dev)
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(dev) if dev.type == "cuda" else None
    del model, opt
    return {"s_per_iter": statistics.median(times[1:] or times), "peak_bytes": peak}


# ---- 2. plans and their execution -----------------------------------------------------------------

def kendall_tau(a: list[float], b: list[float]) -> float:
    n = len(a)
    conc = disc = 0
    for i in range(n):
        for j in range(i + 1, n):
            s = (a[i] - a[j]) * (b[i] - b[j])
            conc += s > 0
            disc += s < 0
    pairs = n * (n - 1) / 2
    return (conc - disc) / pairs if pairs else float("nan")


HOST_BOUND = 0.9   # a row replayed as no CUDA graph whose host took this share of its makespan to issue it


def acceptance(runs: pd.DataFrame, rank: pd.DataFrame) -> str:
    """Issue 31's GPU items over this table: zero compactions, measured within 5% of simulated on every row not
    host-bound (`host_bound`: not replayed as a CUDA graph and the host's issue time >= HOST_BOUND of the
    makespan), the simulator's ranking kept (`ranking_kept`)."""
    if not len(runs):
        return "Issue 31's GPU items: no runs."
    # a failed plan's row holds model, memory, plan and error only: it counts as failed, not as a run
    done = runs[_column(runs, "measured_s").notna()]
    failed = f" ({len(runs) - len(done)} failed: see their error)" if len(done) < len(runs) else ""
    if not len(done):
        return f"Issue 31's GPU items: no run finished{failed}."
    host_bound = _column(done, "host_bound").fillna(False).astype(bool)
    timed = done[~host_bound & (done["plan"] != "belady (roofline times)")]
    within = ((timed["measured/simulated"] - 1.0).abs() <= 0.05).sum()
    kept = int(rank["ranking_kept"].sum()) if "ranking_kept" in rank else 0
    return (f"Issue 31's GPU items: zero compactions on {(done['compactions'] == 0).sum()} of {len(done)} rows "
            f"that ran{failed}; "
            f"measured within 5% of simulated on {within} of {len(timed)} rows that are not host-bound (the "
            f"roofline-times plan left out: its simulation uses other op times); the simulator's ranking kept on "
            f"{kept} of {len(rank)} model/memory rows.")


def _column(df: pd.DataFrame, name: str) -> pd.Series:
    """`df[name]`, or NaN on every row where no row has it (a table of failed plans only)."""
    return df[name] if name in df else pd.Series(float("nan"), index=df.index, dtype=float)


def ranking_kept(names: list[str], tau: float) -> bool:
    """Issue 31's reading: Kendall tau >= 0.8 where a model and memory ran 3 plans or more; with 1 or 2, the same
    order (tau 1); a row with no plans does not count as kept."""
    return bool(names) and (tau >= 0.8 if len(names) >= 3 else len(names) == 1 or tau == 1.0)


def make_plans(graph: Graph, roofline: Graph, device: Device, ga_seconds: float) -> dict[str, Plan]:
    """Every plan laid out at exact offsets, as the executor runs it (issue 31: no compaction on any row): the
    baselines' byte budgets through `lay_out_baseline` (re-planned by their own rules with less memory where they
    do not fit, as `hybrid optimize --compare-baselines` lays them out), the size-class pool as it is."""
    from hybrid.pipeline.baselines import lay_out_baseline

    def laid(g: Graph, kind: str, name: str) -> None:
        try:
            bb = run_baseline(g, device, kind)
            lay = lay_out_baseline(g, device, kind, bb, time_limit_s=None)
            plans[name] = lay.plan
            if lay.fallback:
                log(f"  {name}: {lay.fallback}, {lay.plan.makespan_s * 1e3:.2f} ms simulated (byte budget "
                    f"{bb.makespan_s * 1e3:.2f} ms)")
        except Exception as e:  # noqa: BLE001 - a benchmark reports every failure
            log(f"  {name}: no plan ({type(e).__name__}: {e})")

    plans: dict[str, Plan] = {}
    for kind in ("belady", "vdnn", "naive"):
        laid(graph, kind, kind)
    try:
        plans["size-classes"] = size_class_plan(graph, device)
    except Exception as e:  # noqa: BLE001
        log(f"  size-classes: no plan ({type(e).__name__}: {e})")
    if ga_seconds > 0:
        # `hybrid optimize`'s written plan (run_optimize: GA + CP-SAT, laid out at exact offsets within the
        # memory), the plan a user runs: issue 31 asks it to run with zero compactions and as simulated
        try:
            from ga import GAConfig
            from hybrid.pipeline import OptimizeOptions, run_optimize

            res = run_optimize(graph, device, ga_seconds, OptimizeOptions(config=GAConfig(seed=1), workers=None))
            plans["optimize (written)"] = res.plan
            if res.layout is not None and res.layout.fallback:
                log(f"  optimize (written): {res.layout.describe()}")
            for why in res.skipped:    # e.g. a limit too short for the layout: the row's pool says so
                log(f"  optimize (written): {why}")
        except Exception as e:  # noqa: BLE001
            log(f"  optimize (written): no plan ({type(e).__name__}: {e})")
    laid(roofline, "belady", "belady (roofline times)")
    for name, p in list(plans.items()):
        g = roofline if "roofline" in name else graph
        rep = validate(g, p)
        if not rep.valid:
            log(f"  {name}: invalid plan dropped ({rep.violations[0]})")
            del plans[name]
    return plans


def run_plan(graph: Graph, plan: Plan, base: torch.nn.Module, args: Any, target: Any, dev: torch.device,
             iters: int, seed: int, cuda_graph: bool = True) -> dict[str, Any]:
    """Two iterations issued node by node (per-node times), then, on CUDA, the rest replayed as one recorded
    CUDA graph; where a plan cannot be recorded, every iteration is issued and `graph_note` says why."""
    def run(graphed: bool) -> Executor:
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        ex = Executor(graph, plan, str(dev), validate=False, timing=True, cuda_graph=graphed)
        ex.load(base, args, target)
        ex.run(iters, seed=seed)
        return ex

    note = ""
    graphed = cuda_graph and dev.type == "cuda" and iters > 2
    ex = None
    try:
        ex = run(graphed)
    except HybridError as e:
        if not graphed or "CUDA graph" not in str(e):
            raise
        note = str(e)
    if ex is None:
        # retried outside the handler: its traceback would keep the failed executor's pools (the plan's device
        # memory, pinned host memory) alive beside the second one's, and a plan near the card's memory would
        # then fail for want of memory instead of running node by node (`run` empties the cache once they are
        # collected)
        gc.collect()
        ex = run(False)
    s = ex.summary()
    note = note or ex.runtime.graph_note
    pool = s.memory["pool"]
    own_peak = s.memory.get("cuda_own_peak_bytes", 0)   # above what was allocated before it, with cuBLAS's kept bytes
    out = {
        "measured_s": s.makespan_s, "wall_s": s.wall_s, "simulated_s": s.simulated_s,
        "measured/simulated": s.ratio, "resimulated_s": s.resimulated_s,
        "graphed": s.graphed, "issued_s": s.issued_makespan_s, "host_issue_s": s.issue_s,
        "compute_stall_s": s.stall_s.get("compute"), "compute_busy_s": s.busy_s.get("compute"),
        "pool_peak/memory": pool["peak_live_bytes"] / plan.device.memory_bytes,
        "cuda_max_allocated_MiB": s.memory.get("cuda_max_allocated_bytes", 0) / MiB,
        # the executor's own: its peak above what was allocated before it, plus what cuBLAS keeps for its stream
        "cuda_peak_MiB": own_peak / MiB,
        "cuda_peak/memory": own_peak / plan.device.memory_bytes if dev.type == "cuda" else None,
        "copy_fallback_MiB": s.copy_bytes / MiB, "outside_pool_MiB": s.outside_bytes / MiB,
        "compactions": pool["compactions_per_iteration"],
        "loss_last": ex.losses[-1].item() if ex.losses else None,
        "graph_note": note,
    }
    del ex
    release_pinned()
    return out


def release_pinned() -> None:
    """Hand the pinned host memory of executors that are gone back to the system. Torch's pinned allocator keeps
    freed blocks cached, each rounded up to a power of two: one host pool per plan, of another size each, would
    pile up pinned memory over a benchmark's plans (a 33 GiB pool pins 64 GiB)."""
    gc.collect()
    empty = getattr(torch._C, "_host_emptyCache", None)   # CUDA builds only
    if torch.cuda.is_available() and empty is not None:
        torch.cuda.synchronize()
        empty()


# ---- 5. sanitizer child ---------------------------------------------------------------------------

def sanitizer_child() -> None:
    """Run under TORCH_CUDA_SANITIZER=1 by the parent: a swapping plan for a few iterations."""
    from hybrid.swap.quick_plans import quick_plan

    name, batch, ov, opt, options = ("resnet-18", 8, {"image_size": 64, "num_classes": 10}, "sgd", {"momentum": 0.9})
    graph = capture_model(name, batch, optimizer=opt, lr=0.01, optimizer_options=options, overrides=ov)
    spec = get_model(name, **ov)
    torch.manual_seed(0)
    module = spec.build()
    args, target = spec.make_inputs(batch, torch.device("cpu"), torch.float32)
    for kind in ("size_classes", "unconstrained"):
        plan = quick_plan(graph, 0.4, kind)
        ex = Executor(graph, plan, "cuda", timing=True)
        ex.load(module, args, target)
        ex.run(3)
        print(f"sanitizer child: {kind} plan, 3 iterations, no race reported", flush=True)


def run_sanitizer() -> dict[str, Any]:
    env = dict(os.environ, TORCH_CUDA_SANITIZER="1")
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, __file__, "--sanitizer-child"], env=env, capture_output=True, text=True,
                       timeout=1800)
    tail = (p.stdout + p.stderr).strip().splitlines()[-6:]
    return {"exit_code": p.returncode, "seconds": time.perf_counter() - t0, "tail": tail}


# ---- driver ------------------------------------------------------------------------------------

def bench_model(case: tuple, dev: torch.device, link: dict[str, float], fractions: list[float], iters: int,
                ga_seconds: float, seed: int, profile_cache: str | None = None) -> tuple[list[dict], list[dict], dict]:
    from benchmarks.common import measured_profile

    name, batch, ov, opt, options = case
    preset = cost_preset(dev)
    log(f"{name}: capture (batch {batch}, {ov or 'defaults'})")
    roofline = capture_model(name, batch, optimizer=opt, lr=0.01, optimizer_options=options or None, overrides=ov,
                             device=preset)
    log(f"{name}: {len(roofline.ops)} ops; measuring op times on {dev}")
    prof, rep, reuse = measured_profile(roofline, dev.type, profile_cache, repeat=5, warmup=2)
    log(f"{name}: profile: {reuse}")
    graph = apply_profile(roofline, prof)
    if dev.type != "cuda":    # a cpu profile sets cpu_time_s: keep the roofline time_s (smoke test only)
        graph = roofline
    # the file `hybrid capture` writes (roofline times), before the executor's costs below are stated in it
    captured_sha256 = hashlib.sha256(roofline.dumps().encode()).hexdigest()[:12]
    # What the executor allocates outside its pool on this device (the copy fallback's results, kernels' scratch
    # measured by the profile) stated as the ops' workspaces, so that the plans count it (issue 32: torch's peak
    # within the plan's memory), and the copy fallback's copies in the ops' times (measured by the profile: the
    # simulator times what runs); the roofline graph states the copy fallback's results.
    graph = with_copy_costs(graph, dev.type)
    roofline = with_copy_costs(roofline, dev.type)
    spec = get_model(name, **ov)
    torch.manual_seed(seed)
    base = spec.build()
    args, target = spec.make_inputs(batch, torch.device("cpu"), torch.float32)
    peak = unswapped_peak(graph)
    info = {"model": name, "batch": batch, "config": ", ".join(f"{k}={v}" for k, v in ov.items()),
            "ops": len(graph.ops), "unswapped_peak_MiB": peak / MiB, "profiled_ops": rep.measured,
            "profile_reused": rep.reused,
            # forward convolutions written into their slots through cuDNN (executor.ops), or copied in: off where
            # gpu_session.sh's preflight found the writer not eager's on this GPU
            "conv_slots": cuda_conv_slots_on(),
            # the graphs read, by sha256 of the file `hybrid capture` would write (first 12 hex digits)
            "capture": f"hybrid capture --model {name} --batch {batch} --optimizer {opt} --device {preset}",
            "graph_sha256": captured_sha256,
            "profiled_sha256": hashlib.sha256(graph.dumps().encode()).hexdigest()[:12]}
    # the reserve: what cuBLAS keeps for the executor's compute stream, outside any pool (executor.streams)
    base_dev = Device(f"{preset}-measured", peak, link["h2d_bytes_per_s"], link["d2h_bytes_per_s"], link["latency_s"],
                      reserve_bytes=kernel_state_bytes(dev) if dev.type == "cuda" else 0)

    rows: list[dict] = []
    # No memory limit: the unswapped peak plus slack, so its copies place offline without fragmentation.
    ideal_plan = run_baseline(graph, replace(base_dev, memory_bytes=int(peak * 1.05)), "ideal")
    ideal = run_plan(graph, ideal_plan, base, args, target, dev, iters, seed)
    info["ideal_measured_s"] = ideal["measured_s"]
    info["ideal_simulated_s"] = ideal["simulated_s"]
    for mode in ("plain", "save_on_cpu", "checkpoint"):
        try:
            r = eager_time(graph, base, args, target, spec.loss, dev, iters, mode)
        except Exception as e:  # noqa: BLE001
            r = {"note": short(e)}
        info[f"eager_{mode}_s"] = r.get("s_per_iter")
        info[f"eager_{mode}_peak_MiB"] = (r.get("peak_bytes") or 0) / MiB if r.get("peak_bytes") else None
        if "note" in r:
            info[f"eager_{mode}_note"] = r["note"]
    rank_rows: list[dict] = []
    for frac in fractions:
        device = replace(base_dev, memory_bytes=int(peak * frac))
        log(f"{name}: memory {frac:.0%} of the peak ({device.memory_bytes / MiB:.0f} MiB): planning")
        plans = make_plans(graph, roofline, device, ga_seconds)
        sims, meas, names = [], [], []
        for pname, plan in plans.items():
            g = roofline if "roofline" in pname else graph
            try:
                r = run_plan(g, plan, base, args, target, dev, iters, seed)
            except Exception as e:  # noqa: BLE001
                log(f"  {pname}: failed: {type(e).__name__}: {e}")
                traceback.print_exc()
                rows.append({"model": name, "memory": f"{frac:.0%}", "plan": pname,
                             "error": short(e)})
                continue
            r.update({"model": name, "memory": f"{frac:.0%}", "memory_MiB": device.memory_bytes / MiB,
                      "plan": pname, "pool": plan.allocation.kind,
                      "vs_ideal": ideal["measured_s"] / r["measured_s"] if r["measured_s"] else None,
                      "vs_eager": (info["eager_plain_s"] / r["measured_s"]) if info.get("eager_plain_s") else None})
            rows.append(r)
            log(f"  {pname}: measured {r['measured_s'] * 1e3:.2f} ms, simulated {r['simulated_s'] * 1e3:.2f} ms "
                f"(ratio {r['measured/simulated']:.3f})")
            if "roofline" not in pname:
                names.append(pname)
                sims.append(r["simulated_s"])
                meas.append(r["measured_s"])
        order_sim = [n for _, n in sorted(zip(sims, names))]
        order_meas = [n for _, n in sorted(zip(meas, names))]
        tau = kendall_tau(sims, meas)
        rank_rows.append({"model": name, "memory": f"{frac:.0%}", "plans": len(names), "kendall_tau": tau,
                          "ranking_preserved": order_sim == order_meas, "ranking_kept": ranking_kept(names, tau),
                          "simulated order": " < ".join(order_sim), "measured order": " < ".join(order_meas)})
    # 4. correctness on the device: the smallest memory's Belady plan against eager training.
    try:
        device = replace(base_dev, memory_bytes=int(peak * min(fractions)))
        plan = run_baseline(graph, device, "belady")
        # The reference: the same graph with no memory limit, run by the executor on this GPU with the same
        # deterministic float32 kernels (eager PyTorch's module kernels differ: cuDNN against native batch norm).
        # 5 iterations, of which the last 3 are CUDA graph replays where the plan records.
        graphed = dev.type == "cuda" and not any(updates_generator_only(graph, op) for op in graph.ops)
        with exact_kernels():
            c = against_unlimited(graph, plan, base, args, target, 5, str(dev), seed, cuda_graph=graphed)
        info.update({"check_values": c.values, "check_max_abs_diff": c.max_abs_diff, "check_worst": c.worst,
                     "check_bitwise": c.bitwise, "check_ok": c.ok, "check_graphed": graphed,
                     "check_note": "; ".join(c.notes)})
    except Exception as e:  # noqa: BLE001
        info["check_error"] = short(e)
    return rows, rank_rows, info


def device_label(dev: torch.device) -> str:
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU (smoke test, not GPU figures)"


def load_previous(out: Path, dev: torch.device) -> dict[str, Any]:
    """The previous run's rows to keep (`--append`), where they were measured on this device: rows of another
    card in one table would read as this one's (its name from the JSON, or else from the table's Device line)."""
    path = out.with_suffix(".json")
    if not path.exists():
        return {}
    prev = json.loads(path.read_text())
    was = prev.get("device")
    if was is None and out.exists():
        line = next((x for x in out.read_text().splitlines() if x.startswith("Device: ")), "")
        was = line.removeprefix("Device: ").split(";")[0].strip() or None
    if was != device_label(dev):
        log(f"--append: {path} holds rows measured on {was or 'an unnamed device'}, not {device_label(dev)}: "
            "not kept (write this device's table elsewhere with --out to keep both)")
        return {}
    return prev


def merge(old: list[dict], new: list[dict]) -> list[dict]:
    """Rows of `old` for models not in `new`, then `new`."""
    models = {r.get("model") for r in new}
    return [r for r in old if r.get("model") not in models] + new


def write(out: Path, dev: torch.device, link: dict, rows: list[dict], ranks: list[dict], infos: list[dict],
          sanitizer: dict | None, args: argparse.Namespace) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"link": link, "rows": rows, "ranks": ranks, "infos": infos,
                                                    "sanitizer": sanitizer, "commands": getattr(args, "commands", []),
                                                    "device": device_label(dev)},
                                                   indent=1, default=str))
    from benchmarks.common import command_line, repo_relative

    cmd = repo_relative("; ".join(getattr(args, "commands", []))) or command_line()
    gpu = device_label(dev)
    runs = pd.DataFrame(rows)
    first = ["model", "memory", "memory_MiB", "plan", "pool", "measured_s", "simulated_s", "measured/simulated",
             "resimulated_s", "issued_s", "graphed", "vs_ideal", "vs_eager"]
    if len(runs):
        runs = runs[[c for c in first if c in runs] + [c for c in runs if c not in first]]
        issued_only = _column(runs, "graphed").fillna(0) == 0
        runs["host_bound"] = issued_only & (_column(runs, "host_issue_s") >= HOST_BOUND * _column(runs, "measured_s"))
    rank = pd.DataFrame(ranks)
    models = pd.DataFrame(infos)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs.to_csv(out.with_suffix(".csv"), index=False)
    md = [
        "# Executor on a GPU: simulator accuracy, throughput, alternatives, stream races", "",
        f"Regenerate: `{cmd}` (from the repository root; {time.strftime('%Y-%m-%d')}; code {args.commit}).", "",
        f"Device: {gpu}; torch {torch.__version__}. Measured host link: h2d "
        f"{link['h2d_bytes_per_s'] / 1e9:.1f} GB/s, d2h {link['d2h_bytes_per_s'] / 1e9:.1f} GB/s, latency "
        f"{link['latency_s'] * 1e6:.1f} us per copy (pinned, medians; {link.get('method', 'host wall time around synchronized copies')}); "
        "the plans' device uses these. Op times: "
        "measured on this device with hybrid.capture.profile and fed back into each graph, except for "
        "*belady (roofline times)*, planned from the capture's roofline estimates. Memory: a fraction of the "
        f"model's unswapped peak. {args.iters} iterations per run; medians after the first.", "",
        "*measured_s*: device makespan of one iteration (CUDA events around it), median over the iterations "
        "replayed as one recorded CUDA graph (`graphed` of them; the first two are issued node by node: warm-up "
        "and the optimizer's first step); *issued_s*: the same plan issued node by node from Python, the second "
        "iteration (its *host_issue_s* is the host's time to issue it: where it is close to issued_s the "
        "executor was host-bound); *simulated_s*: the plan's "
        "makespan; *resimulated_s*: the plan's augmented graph re-timed with the measured node durations (separates "
        "op-time errors from stream-model errors); *compute_stall_s*: gaps on the compute stream; *vs_ideal*: ideal "
        "plan's measured time / this plan's (throughput relative to no memory limit); *vs_eager*: eager PyTorch's "
        "time / this plan's; *pool_peak/memory*: the pool's largest bytes held / the plan's memory (<= 1).", "",
        "## Runs", "", acceptance(runs, rank), "",
        runs.to_markdown(index=False, floatfmt=".4g") if len(runs) else "(none)", "",
        "## Does the simulator rank plans as the GPU does?", "",
        "*ranking_preserved*: the same order exactly; *ranking_kept*: issue 31's reading, Kendall tau >= 0.8 where "
        "3 plans or more ran (the roofline-times plan left out), the same order with 1 or 2, and never with none.",
        "",
        rank.to_markdown(index=False, floatfmt=".3g") if len(rank) else "(none)", "",
        "## Per model: ideal, eager alternatives, correctness on the device", "",
        "*capture*: how each graph was made (with *config* as --set overrides); *graph_sha256*: the captured graph "
        "(roofline times), *profiled_sha256*: the same with this device's measured op times and the executor's "
        "workspaces and copy times stated (`--executor-workspaces`), which the plans used (first 12 hex digits of "
        "each file's sha256).", "",
        "*eager_save_on_cpu*: `torch.autograd.graph.save_on_cpu(pin_memory=True)` around forward and loss "
        "(parameters and optimizer state stay on the device); *eager_checkpoint*: the outermost blocks held in the "
        "model's Sequential / ModuleList containers under `torch.utils.checkpoint` (use_reentrant=False). Their "
        "peaks are "
        "torch.cuda.max_memory_allocated; compare them with the plans' memory. *check_*: the smallest memory's "
        "Belady plan trained 5 iterations (the last 3 replayed as a CUDA graph: *check_graphed*) against the same "
        "graph trained with no memory limit (the ideal plan), both by the executor on this GPU from the same "
        "seed, in float32 (TF32 off) with deterministic cuDNN kernels (ok: within atol 1e-5, rtol 1e-4; "
        "*check_bitwise*: equal). Eager PyTorch is not the reference here: its module kernels differ from the "
        "graph's recorded aten ops (cuDNN against native batch norm), and batch norm over few elements "
        "amplifies that; on the CPU the executor equals eager bitwise (tests/executor).", "",
        models.to_markdown(index=False, floatfmt=".4g") if len(models) else "(none)", "",
        "## TORCH_CUDA_SANITIZER", "",
    ]
    if sanitizer is None:
        md.append("not run (--no-sanitizer or no CUDA device)")
    else:
        verdict = "no race reported" if sanitizer["exit_code"] == 0 else f"FAILED (exit {sanitizer['exit_code']})"
        md += [f"resnet-18 (batch 8, 64x64) under a size-class and a byte-budget plan at 40% of its peak, 3 "
               f"iterations each, with TORCH_CUDA_SANITIZER=1: {verdict} ({sanitizer['seconds']:.0f} s).", "",
               "```", *sanitizer["tail"], "```"]
    out.write_text("\n".join(md) + "\n")
    log(f"wrote {out} and {out.with_suffix('.csv')}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (a smoke test of this script)")
    ap.add_argument("--models", nargs="*", default=None, help="only these model names")
    ap.add_argument("--quick", action="store_true", help="smaller models and batches")
    ap.add_argument("--fractions", nargs="*", type=float, default=[0.6, 0.35])
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--ga-seconds", type=float, default=0.0,
                    help="also run `hybrid optimize` (GA + CP-SAT, laid out) for this long and execute its written "
                         "plan (0: not)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-sanitizer", action="store_true")
    ap.add_argument("--sanitizer-only", action="store_true", help="only the TORCH_CUDA_SANITIZER run")
    ap.add_argument("--append", action="store_true",
                    help="keep the rows of models not run now from the previous results (results/executor_gpu.json)")
    ap.add_argument("--sanitizer-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=None,
                    help="the table (default results/executor_gpu.md; results/executor_gpu_quick.md with --quick)")
    ap.add_argument("--previous", type=Path, default=None,
                    help="with --append: the table whose rows to keep (its .json beside it; default --out), so that "
                         "--out holds only what this run writes")
    ap.add_argument("--commit", default=None,
                    help="the code's commit for the table (default: git here; a GPU machine sent a copy of the "
                         "working tree may have no git: pass the commit of that copy)")
    ap.add_argument("--profile-cache", default=None, metavar="DIR",
                    help="reuse and extend the op times measured on this GPU and torch in DIR (one file per "
                         "device: benchmarks.common.measured_profile; default $HYBRID_PROFILE_CACHE, else measure "
                         "every op)")
    a = ap.parse_args()
    from benchmarks.common import commit, quick_name

    if a.out is None:
        a.out = ROOT / "results" / quick_name("executor_gpu.md")   # a quick run never replaces the full table
    if a.commit is None:
        a.commit = commit()
    if a.sanitizer_child:
        sanitizer_child()
        return
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device: this benchmark needs a GPU (use --device cpu --quick --out /tmp/x.md for a smoke "
                 "test)")
    cases = TINY if dev.type == "cpu" else (QUICK if a.quick else FULL)
    if a.models:
        pool: dict[str, tuple] = {}
        for c in cases + FULL + QUICK + TINY:
            pool.setdefault(c[0], c)
        unknown = [m for m in a.models if m not in pool]
        if unknown:
            sys.exit(f"--models: no configuration for {unknown[0]!r}; known: {', '.join(pool)}")
        cases = [pool[m] for m in a.models]
    prev = load_previous(a.previous or a.out, dev) if a.append else {}
    this = "python " + " ".join(shlex.quote(x) for x in [os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]])
    a.commands = [c for c in prev.get("commands", []) if c != this] + [this]
    if a.sanitizer_only:
        cases = []
    if prev.get("link") and a.sanitizer_only:
        link = prev["link"]
    else:
        log(f"device {dev}; measuring the host link")
        link = measure_link(dev, 64 * MiB if dev.type == "cpu" else 256 * MiB)
    rows: list[dict] = []
    ranks: list[dict] = []
    infos: list[dict] = []
    sanitizer = prev.get("sanitizer")
    for case in cases:
        try:
            r, k, info = bench_model(case, dev, link, a.fractions, a.iters, a.ga_seconds, a.seed, a.profile_cache)
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            r, k, info = [], [], {"model": case[0], "error": short(e)}
        rows += r
        ranks += k
        infos.append(info)
        # Keep what is done if a later model fails.
        write(a.out, dev, link, merge(prev.get("rows", []), rows), merge(prev.get("ranks", []), ranks),
              merge(prev.get("infos", []), infos), sanitizer, a)
    if dev.type == "cuda" and not a.no_sanitizer:
        log("TORCH_CUDA_SANITIZER run")
        sanitizer = run_sanitizer()
    write(a.out, dev, link, merge(prev.get("rows", []), rows), merge(prev.get("ranks", []), ranks),
          merge(prev.get("infos", []), infos), sanitizer, a)


if __name__ == "__main__":
    main()
