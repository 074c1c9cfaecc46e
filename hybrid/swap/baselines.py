"""The obvious alternatives every optimized plan is measured against; each returns the one plan type.

- naive: the schedule as given, copies on demand, LRU eviction, nothing overlapped (one stream).
- odswap: SwapAdvisor's online baseline — LRU on demand in the first iteration; later iterations replay
  those decisions with prefetching. We report the second iteration (its start state is the first's end).
  Ours: on the schedule given (default: the program order), memory re-bound in time order after the walk.
- odswap-paper: ODSwap as the paper ran it (§6.1): the same LRU-on-demand rule with prefetch, but on a random
  topological order (MXNet's default scheduler; `seed`, default 0) unless a schedule is given, plain LRU
  (no skipping of recently used victims), and no re-binding: each tensor keeps the memory the on-demand walk
  gave it. Not modelled: MXNet's pooled allocator (we use the byte budget) and the first iteration's cost.
- vdnn: our vDNN stand-in — persistent tensors (parameters, optimizer state, inputs) stay resident and only
  activations and gradients are swapped, evicting the one needed farthest ahead, with prefetch.
- belady: this project's swap planner (Belady eviction, prefetch, periodic two-pass) on the program order;
  with `recompute=True` a victim without a host copy may instead be dropped and recomputed
  (hybrid.swap.recompute) where that costs less than its copies; the swap-only plan is kept when faster.
- recompute-only: Checkmate-style, no activation ever crosses the link: Belady order among the
  activations and gradients that can be regenerated from what is still on the device or host (chains of up
  to three single-output ops); the others stay resident. Persistent tensors (parameters, optimizer state)
  still start on the host and move as in belady: the heuristic decides activations only.
- tflms: TensorFlow Large Model Support's graph rewriting (hybrid.swap.baselines.tflms_plan): every
  forward activation a backward op reads is swapped out after its last forward reader and swapped in `lb`
  ops before its first backward reader; parameters and optimizer state stay on the device; no memory-aware
  eviction (a plan that does not fit is infeasible, as TFLMS runs out of memory).
- ideal: unlimited memory, no copies at all: the compute time alone.
All but ideal use a byte budget (an allocator without size classes), as frameworks do; with `addresses` (what
`hybrid optimize --compare-baselines` asks) that budget is an arena planned with offsets by the same walk as the
search's plans (hybrid.swap.addresses); tflms's fixed rewrite (it has no eviction to adapt), and a plan the walk
found no offsets for, come back as byte budgets for the caller to lay out (`hybrid.pipeline.baselines`: where no
layout fits, the baseline cannot run, as TFLMS runs out of memory with a fragmenting allocator).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from hybrid.swap.pools import byte_pool
from hybrid.graph.liveness import peak_live_counts
from hybrid.device import Device
from hybrid.errors import HybridError, InfeasibleError
from hybrid.graph import Graph
from hybrid.graph.arrays import KIND_CODES
from hybrid.plan import Plan
from hybrid.swap.to_plan import to_plan
from hybrid.graph.order import program_order, random_order
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.planner import SwapPlanner

BASELINE_OPTIONS: dict[str, PlannerOptions] = {
    "naive": PlannerOptions(victim="lru", overlap=False, passes=1),
    "odswap": PlannerOptions(victim="lru", passes=2, keep="last", write_back=False),  # on demand only
    "odswap-paper": PlannerOptions(victim="lru", recency=0, passes=2, keep="last", write_back=False, rebind=False),
    "vdnn": PlannerOptions(keep_persistent=True),
    "tflms": PlannerOptions(keep_persistent=True, overlap=True, passes=1),  # described only: tflms_plan builds it
    "belady": PlannerOptions(),
    "recompute-only": PlannerOptions(recompute_only=True, recompute_depth=3),
    "ideal": PlannerOptions(keep_persistent=True),
}
BASELINES = tuple(BASELINE_OPTIONS)


RECOMPUTE_RATIO = 1.0  # `hybrid optimize`'s and the belady baseline's default: rerun when cheaper than the copies


def run_baseline(graph: Graph, device: Device, kind: str, schedule: np.ndarray | None = None,
                 recompute: bool = False, seed: int = 0, addresses: bool = False) -> Plan:
    """Plan `graph` on `device` the way baseline `kind` would; raises InfeasibleError if it cannot run.
    `recompute` lets belady drop and recompute too (the other kinds model systems that only swap); `seed`
    draws odswap-paper's random topological order when no `schedule` is given; `addresses`: an arena plan with
    offsets where the walk finds them (module docstring), else the byte budget."""
    if kind not in BASELINE_OPTIONS:
        raise HybridError(f"unknown baseline {kind!r}: choose one of {', '.join(BASELINES)}")
    if kind == "odswap-paper" and schedule is None:
        plan = run_baseline(graph, device, kind, random_order(graph, np.random.default_rng(seed)),
                            addresses=addresses)
        plan.planner["schedule"] = f"random topological order (seed {seed})"
        return plan
    order = program_order(graph) if schedule is None else np.asarray(schedule, dtype=np.int32)
    if kind == "tflms":
        return tflms_plan(graph, device, order, given=schedule is not None)   # fixed copies: laid out by the caller
    opt = replace(BASELINE_OPTIONS[kind], addresses=addresses and kind != "ideal")
    if kind == "ideal":
        _, peak = peak_live_counts(graph, order)
        room = peak + device.alignment_bytes * graph.arrays.n_tensors + device.reserve_bytes  # aligned copies fit
        device = replace(device, name=f"{device.name}-unlimited", memory_bytes=max(device.memory_bytes, room))
    planner = SwapPlanner(graph, device)
    pool = byte_pool(graph, device)
    if recompute and kind == "belady":
        opt = planner.faster_options(order, pool, replace(opt, recompute_ratio=RECOMPUTE_RATIO))
    try:
        aug = planner.plan(order, pool, opt)
    except InfeasibleError:
        if not opt.addresses:
            raise
        # the walk found no offsets (a home it cannot return to): the byte budget's plan, for the caller to lay out
        plan = run_baseline(graph, device, kind, schedule, recompute, seed, addresses=False)
        plan.planner["arena"] = {"laid_out": "after planning (the address-aware walk found no offsets)"}
        return plan
    info = {"name": kind, "planner_options": opt.describe()}
    if schedule is not None:
        info["schedule"] = "given"
    return to_plan(aug, info)


TFLMS_LB = 1  # TFLMS's `lb` (its default): a swap-in is triggered this many ops before the tensor's consumer


def backward_ops(graph: Graph) -> np.ndarray:
    """Per op: is it in the backward pass (or the optimizer)? From the capture's `phase` where every op has
    one; otherwise the ops touching a gradient tensor and everything after them in the dependency graph
    (TFLMS finds the same set from the optimizer's scope)."""
    phases = [o.extra.get("phase") for o in graph.ops]
    if all(p is not None for p in phases):
        return np.array([p != "forward" for p in phases], np.bool_)
    a = graph.arrays
    grad = a.t_kind == KIND_CODES["gradient"]
    bwd = np.zeros(a.n_ops, np.bool_)
    for o in program_order(graph):
        ts = np.concatenate([a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]], a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]]])
        preds = a.pred_idx[a.pred_ptr[o]:a.pred_ptr[o + 1]]
        bwd[o] = bool(grad[ts].any() or bwd[preds].any())
    return bwd


def tflms_plan(graph: Graph, device: Device, schedule: np.ndarray, lb: int = TFLMS_LB, given: bool = True) -> Plan:
    """TFLMS (Le et al. 2018, TensorFlow Large Model Support) as it rewrites a training graph, timed on our
    three streams. What it does: every activation a forward op produces and a backward op reads gets a
    swap-out after its producer and a swap-in ahead of its first backward reader, triggered `lb` ops earlier
    in the schedule; the device copy is freed after its last forward reader; everything else (parameters,
    optimizer state, gradients, activations only the forward pass reads) stays on the device from its
    creation to its last use, persistent tensors from the start to the end. There is no memory-aware
    eviction: a graph whose rewritten form does not fit raises InfeasibleError (TFLMS runs out of memory).
    What it does not model: the swap-out starts after the last forward reader rather than right after the
    producer (the device copy is freed at the same point, the copy is just not overlapped with those
    readers); a swap-in may start before its trigger op finishes when the memory it takes is already free
    (TFLMS waits for the trigger: both only favour TFLMS); `lb` counts schedule positions, not graph hops;
    TensorFlow's BFC allocator (we use the byte budget) and its `ub` / `n_tensors` (all tensors swapped)."""
    from hybrid.plan.events import COMPUTE, FREE, SWAP_IN
    from hybrid.swap.rewalk import ERROR_TEXT, Problem, SequenceError, rebuild, to_augmented
    from hybrid.errors import InfeasibleError

    if lb < 1:
        raise HybridError(f"tflms: lb must be at least 1, got {lb}")
    a = graph.arrays
    order = np.asarray(schedule, dtype=np.int32)
    n = len(order)
    pos = np.empty(a.n_ops, np.int64)
    pos[order] = np.arange(n)
    bwd = backward_ops(graph)
    rd_t = np.concatenate([a.in_idx, a.upd_idx])
    rd_op = np.concatenate([np.repeat(np.arange(a.n_ops), np.diff(a.in_ptr)), np.repeat(np.arange(a.n_ops), np.diff(a.upd_ptr))])
    rd_pos = pos[rd_op]
    last = np.full(a.n_tensors, -1, np.int64)
    np.maximum.at(last, rd_t, rd_pos)
    fwd_last = np.full(a.n_tensors, -1, np.int64)
    np.maximum.at(fwd_last, rd_t[~bwd[rd_op]], rd_pos[~bwd[rd_op]])
    bwd_first = np.full(a.n_tensors, n, np.int64)
    np.minimum.at(bwd_first, rd_t[bwd[rd_op]], rd_pos[bwd[rd_op]])
    prod = a.t_producer
    made = np.full(a.n_tensors, -1, np.int64)
    made[prod >= 0] = pos[prod[prod >= 0]]
    per = a.t_persistent
    swapped = (~per) & (prod >= 0) & (bwd_first < n)
    swapped[swapped] = ~bwd[prod[swapped]]
    out_at = np.maximum(fwd_last, made)          # the swap-out (a release with no host copy yet)
    in_at = np.maximum(bwd_first - lb + 1, out_at + 1)  # before this position's compute
    releases: list[list[int]] = [[] for _ in range(n)]
    ins: list[list[int]] = [[] for _ in range(n)]
    for t in np.nonzero(swapped)[0]:
        releases[out_at[t]].append(int(t))
        ins[in_at[t]].append(int(t))
    for t in np.nonzero(~per & (prod >= 0))[0]:
        releases[max(last[t], made[t])].append(int(t))  # freed after its last use (dead)
    kind, ref = [], []
    for p in range(n):
        for t in ins[p]:
            kind.append(SWAP_IN)
            ref.append(t)
        kind.append(COMPUTE)
        ref.append(int(order[p]))
        for t in releases[p]:
            kind.append(FREE)
            ref.append(t)
    used = np.zeros(a.n_tensors, np.bool_)
    used[rd_t] = True
    opts = BASELINE_OPTIONS["tflms"]
    prob = Problem(graph, device, byte_pool(graph, device), order, a.op_time, a.op_ws, None, per & used, opts)
    try:
        tl = rebuild(prob, np.array(kind), np.array(ref))
    except SequenceError as e:
        from hybrid.graph.liveness import occupied_bytes
        from hybrid.swap.rewalk import ERR_INITIAL
        from hybrid.units import format_bytes, format_bytes_apart

        kept = int(occupied_bytes(graph, device.alignment_bytes)[per & used].sum())
        if e.code == ERR_INITIAL:   # what it keeps against the memory, as vdnn says it
            need, have = format_bytes_apart(kept, device.usable_bytes)
            raise InfeasibleError(f"tflms cannot run: the persistent tensors ({need}), which it keeps resident "
                                  f"throughout, do not fit in the device memory ({have} usable); give more "
                                  "--memory") from None
        raise InfeasibleError(f"tflms cannot run {graph.name} in {format_bytes(device.usable_bytes)} usable: "
                              f"{ERROR_TEXT.get(e.code, e)} (it keeps the persistent tensors, "
                              f"{format_bytes(kept)}, resident and moves only the forward activations the "
                              "backward pass reads); give more --memory") from None
    # its own rule, not the swap planner's walk: no planner_options (a re-plan with them would be another plan)
    info = {"name": "tflms", "tflms": {"lb": lb, "swapped_tensors": int(swapped.sum()),
                                       "rule": "forward activations read by the backward pass"}}
    if given:
        info["schedule"] = "given"
    return to_plan(to_augmented(prob, tl), info)
