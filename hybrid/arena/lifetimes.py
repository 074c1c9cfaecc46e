"""Buffers from a plan's events, and the plan with exact `arena` offsets (FORMATS rule 5).

Lifetimes are read exactly as the validator reads them (`hybrid.validator.lifetimes.build_copies`): a
device copy lives from its allocation (its producing compute, recomputes included, or its swap-in) to its
release (its swap-out's end or its free). FORMATS gives one offset per tensor, so a tensor with several
copies is one buffer with one segment per copy (as `executor/offsets.py` lays it out). Times are floats;
they become integers in the order rule 5's sweep puts them, or stricter (`sweep_ranks`): a release at its end
less the tolerance, before allocations at that key; a copy no longer than the tolerance after them all.
The validator also replays the events in the order they run (`hybrid.validator.sequence`), where a copy is held
until its release has run and its time is reached; where events or copies are shorter than the tolerance that
holds some copies past the events the sweep releases them at (a 0.7 ns swap_in read by a zero-time op a moment
later; an input of a zero-time op freed after it), so each copy lives to the later of the two readings
(`held_in_run_order`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from hybrid.arena import exact
from hybrid.arena.heuristics import Solution
from hybrid.arena.problem import Buffer, Problem
from hybrid.errors import HybridError, InfeasibleError
from hybrid.graph import Graph
from hybrid.plan import ArenaAllocation, Plan
from hybrid.units import format_bytes, round_up


@dataclass(frozen=True)
class PlanBuffers:
    """The plan's device copies as a problem (one buffer per tensor with a copy) and each buffer's tensor."""

    problem: Problem
    tensors: list[str]


def plan_buffers(graph: Graph, plan: Plan) -> PlanBuffers:
    """Buffers of the plan's device copies; capacity = usable memory less the largest workspace (rule 5)."""
    from hybrid.plan.events import COMPUTE
    from hybrid.validator.context import build_context
    from hybrid.validator.lifetimes import build_copies, read_at_release
    from hybrid.validator.sequence import held_until

    ctx, found = build_context(graph, plan)
    if ctx is None or not ctx.times_finite:
        why = found[0].violation.message if found else "event times are not finite"
        raise HybridError(f"cannot read the plan's lifetimes: {why} (run hybrid validate)")
    c, bad = build_copies(ctx)
    if bad:
        raise HybridError(f"cannot read the plan's lifetimes: rule 2: {bad[0].violation.message} (run hybrid validate)")
    align = plan.device.alignment_bytes
    a_rank, r_rank = sweep_ranks(np.asarray(c.alloc, np.float64), np.asarray(c.release, np.float64), ctx.eps,
                                 np.asarray(read_at_release(ctx, c), dtype=np.float64))
    r_rank = held_in_run_order(a_rank, r_rank, c.maker, *held_until(ctx, c))
    bufs: list[Buffer] = []
    names: list[str] = []
    for t, ids in enumerate(c.by_tensor):
        if not ids:
            continue
        segs = sorted((int(a_rank[i]), int(r_rank[i])) for i in ids)
        lo, hi = segs[0][0], max(e for _, e in segs)
        gaps: list[tuple[int, int]] = []
        reach = segs[0][1]
        for s, e in segs[1:]:
            if s > reach:
                gaps.append((reach, s))
            reach = max(reach, e)
        name = graph.tensors[t].id
        bufs.append(Buffer(name, lo, hi, int(round_up(int(ctx.t_bytes[t]), align)), align, tuple(gaps)))
        names.append(name)
    max_ws = max((ctx.impl_ws[i] for i in range(ctx.n) if ctx.kind[i] == COMPUTE), default=0)
    cap = (ctx.memory - int(max_ws)) // align * align
    return PlanBuffers(Problem(bufs, cap), names)


def sweep_ranks(alloc: np.ndarray, release: np.ndarray, eps: float, held: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Integer times for copies [alloc, release) that order as rule 5's sweep orders them, or stricter.

    The validator (`hybrid.plan.metrics.sweep_points`) sorts points by key: an allocation at its start; a
    release at its end less eps, before the allocations there, or, for a copy no longer than eps (and a
    `held` one: not NaN, read at its release by a compute shorter than eps,
    `hybrid.validator.lifetimes.read_at_release`), at its start, among the allocations there in the order the
    events run. Here such a release comes after every allocation at its key (rank 2): a layout from these
    times is one the validator accepts, whatever the order within the instant (it may leave bytes the run
    order would free unused). A copy live at the end is never released. Each distinct (key, rank) becomes one
    integer time, so a half-open [alloc, release) overlap is a clash the validator would see or a stricter
    one. (Clustering times within eps, as before, chained near-ties into one instant: a release and an
    allocation more than eps apart could land on one rank and share bytes that the validator saw live
    together.)"""
    n = len(alloc)
    finite = np.isfinite(release)
    short = finite & (release - alloc <= eps)
    rel_key = np.where(short, alloc, release - eps)          # the validator's arithmetic, bit for bit
    rel_cls = np.where(short, 2, 0)
    if held is not None:
        late = finite & ~np.isnan(held) & ~short
        rel_key = np.where(late, held, rel_key)
        rel_cls = np.where(late, 2, rel_cls)
    keys = np.concatenate([alloc, rel_key[finite]])
    cls = np.concatenate([np.ones(n, np.int64), rel_cls[finite]])
    order = np.lexsort((cls, keys))
    k_s, c_s = keys[order], cls[order]
    new = np.ones(len(order), bool)
    new[1:] = (k_s[1:] != k_s[:-1]) | (c_s[1:] != c_s[:-1])
    rank = np.empty(len(order), np.int64)
    rank[order] = np.cumsum(new) - 1
    a_rank = rank[:n]
    end = int(rank.max()) + 2 if len(rank) else 1
    r_rank = np.full(n, end, np.int64)
    r_rank[finite] = rank[n:]
    # a long copy whose release key rounds to its start sorts before its allocation: kept live to the end
    # (the validator counts it as a copy no longer than eps: stricter here)
    r_rank[r_rank <= a_rank] = end
    return a_rank, r_rank


def held_in_run_order(a_rank: np.ndarray, r_rank: np.ndarray, maker: list[int], steps: list[int],
                      until: list[int]) -> np.ndarray:
    """`r_rank` (from `sweep_ranks`), each copy's release put after the allocations of every event that runs while
    the run-order replay still holds it (`hybrid.validator.sequence.held_until`: the allocating events `steps`
    in the order they run, per copy the last of them that it is held at, -1 none), so that the layout keeps
    apart the copies live together in either of the validator's readings. `maker`: each copy's allocating
    event. Where the readings agree (no event shorter than the tolerance), `r_rank` unchanged."""
    out = np.asarray(r_rank, np.int64).copy()
    if not len(steps) or not len(out):
        return out
    step_of = {e: k for k, e in enumerate(steps)}
    step_rank = np.full(len(steps), -1, np.int64)
    for cid, e in enumerate(maker):
        k = step_of.get(e)
        if k is not None:
            step_rank[k] = max(step_rank[k], int(a_rank[cid]))
    reach = np.maximum.accumulate(step_rank)       # the latest allocation rank up to each step
    u = np.asarray(until, np.int64)
    held = u >= 0
    out[held] = np.maximum(out[held], reach[u[held]] + 1)
    return out


def with_arena(graph: Graph, plan: Plan, time_limit_s: float = 10.0, first_fit: bool = False) -> tuple[Plan, Solution]:
    """The plan with `allocation.kind = "arena"`: the smallest arena the exact search finds in the time
    limit (the best heuristic at worst), or with `first_fit` the first layout within the memory.
    InfeasibleError when even that exceeds the memory."""
    pb = plan_buffers(graph, plan)
    sol = exact.solve(pb.problem, time_limit_s, first_fit=first_fit)
    return arena_plan(plan, pb, sol), sol


def arena_plan(plan: Plan, pb: PlanBuffers, sol: Solution) -> Plan:
    """`plan` with the offsets of `sol` (a solution of `pb.problem`) as its arena allocation; InfeasibleError
    when the arena exceeds the capacity left beside the largest workspace."""
    p = pb.problem
    cap = p.capacity if p.capacity is not None else 0
    if sol.arena_bytes > cap:
        raise InfeasibleError(
            f"the plan's device copies need an arena of {format_bytes(sol.arena_bytes)} once laid out (live bytes "
            f"peak at {format_bytes(p.peak_live())}), more than the {format_bytes(cap)} left beside the largest "
            "workspace; re-plan with a little less memory or a size_classes pool")
    offsets = {name: int(o) for name, o in zip(pb.tensors, sol.offsets.tolist())}
    alloc = ArenaAllocation(int(sol.arena_bytes), offsets)
    planner = dict(plan.planner) if isinstance(plan.planner, dict) else {}
    planner["arena"] = {"solver": sol.solver, "proven_optimal": bool(sol.proven_optimal),
                        "peak_live_bytes": int(p.peak_live())}
    return dataclasses.replace(plan, allocation=alloc, planner=planner)


# Elementwise kinds (aten names, as captured) whose output may take an input's memory: each output element
# depends only on the same element of the inputs, so writing it over an input read at the same index is
# safe. Conservative: reductions, convolutions, matmuls, pooling, copies with a layout change, and ops
# that already update a tensor in place (add_, copy_, bernoulli_, optimizers) are left out.
OVERWRITE_KINDS = frozenset({
    "relu", "threshold_backward", "add", "sub", "mul", "div", "neg", "sigmoid", "sigmoid_backward", "tanh",
    "tanh_backward", "gelu", "gelu_backward", "silu", "silu_backward", "hardtanh", "hardtanh_backward",
    "leaky_relu", "leaky_relu_backward", "exp", "log", "sqrt", "rsqrt", "pow", "clamp", "native_dropout",
    "native_dropout_backward", "clone"})
_IDENTITY_VIEWS = frozenset({"aten.detach.default", "aten.alias.default"})


@dataclass(frozen=True)
class StaticBuffers:
    """A graph's static plan (no swapping) as an allocation problem.

    Time is the program order doubled: op p reads its inputs at 2p and writes its outputs from 2p + 1, so a
    tensor made at p and last read at q lives [2p, 2q + 2). `tensors` (the validator's view) has one buffer
    per tensor; an input overwritten in place by op p ends at 2p + 1 and its overwriter starts there, so the
    two never overlap in time and may share bytes. `problem` is what the solvers see: each overwrite chain
    (an input, its overwriter, that one's overwriter...) merged into one buffer, so they share one offset.
    Views need nothing: captured graphs fold view ops into their consumers' arguments (`hybrid.capture`),
    so a view is never a tensor of its own and always reads its base's memory (MegEngine's forwarding)."""

    problem: Problem                  # one buffer per chain (per tensor without overwrite)
    tensors: Problem                  # one buffer per tensor, in the graph's tensor order
    chain_of: np.ndarray              # per tensor, its buffer in `problem`
    overwrites: tuple[tuple[str, str, str], ...]    # (op, input taken over, output written into it)

    def tensor_offsets(self, chain_offsets: np.ndarray) -> np.ndarray:
        """Per-tensor offsets from the solvers' per-chain offsets."""
        return np.asarray(chain_offsets, np.int64)[self.chain_of]


def _read_directly(op, tensor: str) -> bool:  # noqa: ANN001 - hybrid.graph.Op
    """Whether `op` reads `tensor` element by element in its own layout (no transpose, expand or slice)."""
    aten = op.extra.get("aten") if isinstance(op.extra, dict) else None
    if not isinstance(aten, dict):
        return True
    for arg in list(aten.get("args", [])) + list(dict(aten.get("kwargs", {})).values()):
        if isinstance(arg, dict) and arg.get("t") == tensor:
            if any(v.get("op") not in _IDENTITY_VIEWS for v in arg.get("view", []) if isinstance(v, dict)):
                return False
    return True


def schedule_buffers(graph: Graph, align: int | None = None, overwrite: bool = False) -> StaticBuffers:
    """Static planning of a graph run without swapping (MegEngine's setting), in program order.

    One buffer per tensor, live from its producer to its last reader (persistent tensors throughout), sizes
    rounded up to `align` (default the graph device's alignment, else 512). With `overwrite`, MegEngine's
    in-place overwrite: an op of an elementwise kind (`OVERWRITE_KINDS`) that updates nothing writes an
    output into an input's memory when that input is not persistent, is read directly (no view), this op
    is its last reader, and the output is no larger; an input takes at most one overwriter (the largest),
    an output overwrites at most one input (the largest)."""
    from hybrid.graph.liveness import unswapped_lifetimes
    from hybrid.graph.order import program_order

    al = align if align is not None else (graph.device.alignment_bytes if graph.device is not None else 512)
    order = program_order(graph)
    first, last = unswapped_lifetimes(graph, order)
    tix = {t.id: k for k, t in enumerate(graph.tensors)}
    lo = 2 * first
    hi = 2 * last + 2
    n_t = len(graph.tensors)
    parent = np.arange(n_t)                 # an overwriter's input (itself when none)
    pairs: list[tuple[str, str, str]] = []
    if overwrite:
        taken: set[int] = set()
        for p, o in enumerate(order.tolist()):
            op = graph.ops[o]
            if op.kind not in OVERWRITE_KINDS or op.updates:
                continue
            ins = [tix[t] for t in dict.fromkeys(op.inputs)
                   if not graph.tensors[tix[t]].persistent and int(last[tix[t]]) == p and tix[t] not in taken
                   and _read_directly(op, t)]
            outs = sorted((tix[t] for t in op.outputs), key=lambda k: (-graph.tensors[k].bytes, k))
            for out in outs:                # the largest output takes the largest input it fits in
                fits = [i for i in ins if graph.tensors[out].bytes <= graph.tensors[i].bytes and i not in taken]
                if not fits:
                    continue
                i = max(fits, key=lambda k: (graph.tensors[k].bytes, -k))
                taken.add(i)
                parent[out] = i
                hi[i] = 2 * p + 1
                lo[out] = 2 * p + 1
                pairs.append((op.id, graph.tensors[i].id, graph.tensors[out].id))
    root = parent.copy()
    for k in range(n_t):                    # chains point backwards in time: follow to the first input
        r = k
        while root[r] != r:
            r = root[r]
        root[k] = r
    size = np.array([int(round_up(t.bytes, al)) for t in graph.tensors], np.int64)
    roots, chain_of = np.unique(root, return_inverse=True)
    c_lo = np.full(len(roots), np.iinfo(np.int64).max, np.int64)
    c_hi = np.zeros(len(roots), np.int64)
    c_size = np.zeros(len(roots), np.int64)
    np.minimum.at(c_lo, chain_of, lo)
    np.maximum.at(c_hi, chain_of, hi)
    np.maximum.at(c_size, chain_of, size)
    tensors = Problem([Buffer(t.id, int(lo[k]), int(hi[k]), int(size[k]), al) for k, t in enumerate(graph.tensors)])
    chains = Problem([Buffer(graph.tensors[int(r)].id, int(c_lo[c]), int(c_hi[c]), int(c_size[c]), al)
                      for c, r in enumerate(roots.tolist())])
    return StaticBuffers(chains, tensors, chain_of.astype(np.int64), tuple(pairs))
