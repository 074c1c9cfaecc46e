"""The swap planner: given a schedule and a pool, decide evictions and copy timing (SwapAdvisor §4.2).

Produces the augmented graph — the original ops plus swap_in / swap_out /
free nodes and the control edges that order them (the paper's Figure 3) —
timed on three streams. `hybrid.swap.to_plan.to_plan` turns it into a plan.

The persistent tensors resident at the iteration's start are found with the
paper's two-pass scan: pass 1 starts with nothing resident; the persistent
tensors resident at its end become pass 2's initial residents; in pass 2 an
initial resident that would be evicted before its first use is instead
dropped from the initial set. A third pass drops initial residents that pass 2
evicted after use (so the plan stays periodic without copies at the end);
if that still evicts some, they are swapped back in at the iteration's end.
From pass 2 on, a persistent tensor that is not resident at the start leaves
right after its last use (`PlannerOptions.write_back`): it has to be on the
host by the end anyway, and left resident its copy would queue behind the
last evictions after the last op (measured on captured Adam graphs: RNN-8-8K's
Belady plan 21.37 -> 20.46 s, WResNet-152-10 33.65 -> 31.07 s; NASNet-25 1%
longer, so the GA's planner gene may switch it off).
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hybrid.swap import addresses as A
from hybrid.swap import eviction as E
from hybrid.swap import kernel as K
from hybrid.swap import recompute as R
from hybrid.swap.augmented import AugmentedGraph, PlannerOptions
from hybrid.swap.pools import PoolArrays, arena_capacity
from hybrid.device import Device
from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.units import format_bytes, format_bytes_apart, format_bytes_up



@dataclass
class _Outcome:
    """One planning run: status, node count, error details, makespan, the buffers holding the walk's nodes,
    and the re-bound timeline when re-binding made it faster."""

    status: int
    n: int
    err_op: int
    err_need: int
    makespan: float
    buf: tuple
    timeline: tuple | None = None


class SwapPlanner:
    """Holds one graph's arrays and a device; plans any (schedule, pool) pair for it.

    `makespan` is the GA's fitness function: no plan object is built and the
    node buffers are reused between calls.
    """

    def __init__(self, graph: Graph, device: Device, impl_choice: np.ndarray | None = None) -> None:
        self.graph = graph
        self.device = device
        a = graph.arrays
        self.impl_choice = None if impl_choice is None else np.asarray(impl_choice, dtype=np.int32)
        self.op_time, self.op_ws = a.impl_arrays(self.impl_choice)
        n_in = int(a.in_ptr[-1])
        n_out = int(a.out_ptr[-1])
        self.node_cap = a.n_ops + 2 * n_in + n_out + 3 * a.n_tensors + 8
        self.dep_cap = 6 * self.node_cap + 16
        self._bufs = (self._buffers(), self._buffers())
        self.op_rc = R.recomputable_ops(graph)
        self.op_own = R.own_updates_exempt_ops(graph)
        fan = int(max(np.diff(a.in_ptr).max(initial=0), np.diff(a.out_ptr).max(initial=0)))
        self._rc_scr = R.scratch(a.n_tensors, 16 * (fan + 1))
        self._ar_scr = A.scratch(a.n_tensors, n_in)
        self._arenas: dict[int, tuple[PoolArrays, PoolArrays]] = {}
        self._n_uses = n_in
        self._seq_scr: tuple | None = None
        self._scratch_classes = 0
        self._ensure_scratch(max(1, len(np.unique(a.t_bytes))))

    def _ensure_scratch(self, n_classes: int) -> None:
        """Scratch arrays for the kernel, kept between calls (fresh pages each call cost more than the walk)."""
        if n_classes <= self._scratch_classes:
            return
        a = self.graph.arrays
        n_t = a.n_tensors
        self._scr = K.scratch(n_t, n_classes, 2 * n_t + self._n_uses + 2 * n_classes + 8, self.node_cap)
        self._cand = E.scratch(n_classes, a.n_ops, n_t, 3 * n_t + 2 * self._n_uses)
        self._scratch_classes = n_classes

    def _buffers(self) -> tuple[np.ndarray, ...]:
        n_t = self.graph.arrays.n_tensors
        return (np.empty(self.node_cap, np.int8), np.empty(self.node_cap, np.int32),
                np.empty(self.node_cap, np.float64), np.empty(self.node_cap, np.float64),
                np.empty(self.node_cap + 1, np.int64), np.empty(self.dep_cap, np.int32),
                np.zeros(n_t, np.bool_), np.zeros(n_t, np.bool_), np.zeros(n_t, np.bool_), np.zeros(8, np.float64),
                np.zeros(self.node_cap, np.bool_), np.full(n_t, -1, np.int64))

    def _grow(self) -> None:
        """Reruns can emit more nodes than a swap-only walk's bound: double the buffers (the kernel asks)."""
        self.node_cap *= 2
        self.dep_cap = 6 * self.node_cap + 16
        self._bufs = (self._buffers(), self._buffers())
        a = self.graph.arrays
        self._scr = K.scratch(a.n_tensors, self._scratch_classes, 2 * a.n_tensors + self._n_uses
                              + 2 * self._scratch_classes + 8, self.node_cap)
        self._rc_scr = R.scratch(a.n_tensors, 2 * len(self._rc_scr[3]))

    def _walk(self, sched, uses, pool: PoolArrays, opt: PlannerOptions, initial: np.ndarray, allow_drop: bool, buf):
        a = self.graph.arrays
        d = self.device
        return K.walk(
            a.t_bytes, a.t_persistent, a.in_ptr, a.in_idx, a.out_ptr, a.out_idx, a.upd_ptr, a.upd_idx,
            self.op_time, self.op_ws, sched, uses[0], uses[1],
            pool.by_bytes, pool.t_class, pool.class_count, np.int64(self._capacity(pool)), pool.t_mem, pool.arena,
            float(d.h2d_bytes_per_s), float(d.d2h_bytes_per_s), float(d.transfer_latency_s),
            opt.victim == "lru", int(opt.recency), not opt.overlap, opt.keep_persistent, allow_drop,
            allow_drop and opt.write_back, initial,
            max(1, int(opt.lookahead)), a.t_producer, self.op_rc, self.op_own, float(opt.recompute_ratio),
            int(opt.recompute_depth) if opt.recomputes else 0, bool(opt.recompute_only and opt.recomputes),
            bool(opt.long_chains),
            *buf, self._scr, self._cand, self._rc_scr, self._ar_scr,
        )

    def _capacity(self, pool: PoolArrays) -> int:
        """The pool's bytes; an arena's also leave room beside this planner's largest workspace (rule 5)."""
        if not pool.arena:
            return pool.capacity
        return min(pool.capacity, arena_capacity(self.device, int(self.op_ws.max(initial=0))))

    def _run(self, schedule: np.ndarray, pool: PoolArrays, opt: PlannerOptions, bufs,
             want_timeline: bool = False) -> "_Outcome":
        """Walk the passes into two alternating buffer sets, keep the fastest pass, then re-bind it."""
        a = self.graph.arrays
        if not pool.by_bytes and pool.capacity + int(self.op_ws.max(initial=0)) > self.device.usable_bytes:
            return _Outcome(K.INFEASIBLE, 0, -2, pool.capacity, np.inf, bufs[0])
        self._ensure_scratch(len(pool.class_count))
        sched = np.ascontiguousarray(schedule, dtype=np.int32)
        uses = K.schedule_uses(sched, a.in_ptr, a.in_idx, a.n_tensors)

        def run(initial: np.ndarray, allow_drop: bool, buf) -> _Outcome:
            st, n, eo, en = self._walk(sched, uses, pool, opt, initial, allow_drop, buf)
            return _Outcome(st, n, eo, en, float(buf[9][K.ST_MAKESPAN]) if st == K.OK else np.inf, buf)

        if opt.keep_persistent:
            best = run(a.t_persistent.copy(), False, bufs[0])
        else:
            best = out = run(np.zeros(a.n_tensors, np.bool_), False, bufs[0])
            for i in range(1, opt.passes):
                if out.status != K.OK:
                    break
                init_out, evicted, res_end = out.buf[6], out.buf[7], out.buf[8]
                if i == 1:
                    initial = self._carry_over(sched, pool, res_end, uses)
                    if not initial.any():
                        break
                else:
                    if not evicted.any():
                        break
                    initial = init_out & ~evicted
                spare = bufs[1] if best.buf is bufs[0] else bufs[0]
                out = run(initial, True, spare)
                if out.status == K.CHAIN_OVERFLOW:
                    return out
                if out.makespan < best.makespan or opt.keep == "last":
                    best = out
        if (best.status == K.OK and opt.rebind and opt.overlap and not pool.arena
                and (opt.rebind_reruns or best.buf[9][K.ST_NRC] == 0)):
            self._rebind(sched, pool, opt, best, want_timeline)
        return best

    def _run_grown(self, schedule: np.ndarray, pool: PoolArrays, opt: PlannerOptions, fresh: bool,
                   want_timeline: bool = False) -> "_Outcome":
        """`_run`, growing the node buffers while reruns overflow them."""
        while True:
            bufs = (self._buffers(), self._buffers()) if fresh else self._bufs
            out = self._run(schedule, pool, opt, bufs, want_timeline)
            if out.status == K.INFEASIBLE and opt.recomputes and not opt.recompute_only:
                # Rerun chains pin their inputs; where that leaves no victim, the swap-only plan stands.
                return self._run_grown(schedule, pool, replace(opt, recompute_ratio=0.0), fresh, want_timeline)
            if out.status != K.CHAIN_OVERFLOW:
                return out
            if self.node_cap > 64 * (self.graph.arrays.n_ops + 8 * self.graph.arrays.n_tensors + 64):
                raise RuntimeError("recompute chains overflowed the planner's buffers")  # never seen
            self._grow()

    def _rebind_nothing(self, schedule: np.ndarray, pool: PoolArrays, opt: PlannerOptions) -> None:
        """The re-walk on an empty walk's buffers: compiles its kernel with a real call's argument types without
        running the walk's (`compile_kernels(walk=False)`)."""
        self._ensure_scratch(len(pool.class_count))
        empty = _Outcome(K.OK, 0, -1, 0, np.inf, self._bufs[0])
        self._rebind(np.ascontiguousarray(schedule, dtype=np.int32), pool, opt, empty, False)

    def _carry_over(self, sched: np.ndarray, pool: PoolArrays, res_end: np.ndarray, uses) -> np.ndarray:
        """Pass 2's initial residents: what pass 1 left resident, plus the first op's persistent inputs.

        Without them every iteration opens with a stall (every later op waits on the first); resident at the
        start, they are reloaded at the end of the iteration, where the h2d stream is usually idle, so the
        plan stays periodic (rule 6). To make room, carried tensors first used latest are left on the host
        (pass 2 would drop them before their first use anyway)."""
        a = self.graph.arrays
        initial = res_end.copy()
        if len(sched) == 0:
            return initial
        o = sched[0]
        ins = a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]
        extra = ins[a.t_persistent[ins] & ~initial[ins]]
        if len(extra) == 0:
            return initial
        trial = initial.copy()
        trial[extra] = True
        if pool.by_bytes:
            over = np.array([int(pool.t_mem[trial].sum()) + (0 if pool.arena else int(self.op_ws[o])) - self._capacity(pool)])
        else:
            over = np.bincount(pool.t_class[trial], minlength=len(pool.class_count)) - pool.class_count
        if (over <= 0).all():
            return trial
        # Over budget: one byte budget (slot 0, tensors weigh their bytes) or objects per class (weigh 1).
        cls = np.zeros(a.n_tensors, np.int64) if pool.by_bytes else pool.t_class
        size = pool.t_mem if pool.by_bytes else np.ones(a.n_tensors, np.int64)
        use_ptr, use_pos = uses
        cands = np.flatnonzero(initial)
        has_use = use_ptr[cands + 1] > use_ptr[cands]
        at = np.minimum(use_ptr[cands], max(len(use_pos) - 1, 0))
        first_use = np.where(has_use, use_pos[at] if len(use_pos) else 0, len(sched))
        for t in cands[np.argsort(-first_use, kind="stable")]:
            if over[cls[t]] > 0:
                trial[t] = False
                over[cls[t]] -= size[t]
        return trial if (over <= 0).all() else initial

    def _rebind(self, sched: np.ndarray, pool: PoolArrays, opt: PlannerOptions, out: "_Outcome",
                want_timeline: bool) -> None:
        """Re-walk the plan's nodes in time order (hybrid.swap.rewalk): each allocation then takes the memory
        released latest before it could start, whichever op's eviction released it. The walk emits
        allocations in need order and binds them then; in time order a later eviction may free memory
        sooner. One re-walk reaches a fixed point in practice; it never starts a node later, and it is kept
        only when faster."""
        from hybrid.swap import rewalk as S

        a = self.graph.arrays
        n = out.n
        # Stable by start: ties keep emission order, which is topological (a zero-length release before
        # the allocation it serves, a compute before the free of its dead input).
        order = np.argsort(out.buf[2][:n], kind="stable")
        kind = out.buf[0][:n][order]
        ref = out.buf[1][:n][order].astype(np.int64)
        n_c = len(pool.class_count)
        dep_cap = S.dep_capacity(a, kind, ref, self.node_cap)
        if (self._seq_scr is None or len(self._seq_scr[14]) < n_c or len(self._seq_scr[0]) < self.node_cap
                or len(self._seq_scr[3]) < dep_cap):
            self._seq_scr = S.walk_scratch(self.node_cap, a.n_tensors, max(n_c, self._scratch_classes), dep_cap)
        scr = self._seq_scr
        d = self.device
        status, _err, nd, _nch = S.walk_into(
            kind, ref, n, a.t_bytes, a.t_persistent, a.in_ptr, a.in_idx, a.out_ptr, a.out_idx, a.upd_ptr,
            a.upd_idx, self.op_time, self.op_ws, pool.by_bytes, pool.t_class,
            pool.class_count, np.int64(pool.capacity), pool.t_mem, float(d.h2d_bytes_per_s),
            float(d.d2h_bytes_per_s), float(d.transfer_latency_s), out.buf[6], -1, *scr)
        if status != S.OK:  # never seen; the walk's own timing stands
            return
        makespan = float(scr[1][:n].max()) if n else 0.0
        if makespan >= out.makespan:
            return
        out.makespan = makespan
        if want_timeline:
            start, end, dep_ptr, dep_idx, dep_own, stats = scr[:6]
            tl = S.Timeline(kind.copy(), ref.astype(np.int32), start[:n].copy(), end[:n].copy(),
                            dep_ptr[:n + 1].copy(), dep_idx[:nd].astype(np.int32), dep_own[:nd].copy(),
                            {"bytes_h2d": int(stats[S.S_H2D]), "bytes_d2h": int(stats[S.S_D2H]),
                             "swap_ins": int(stats[S.S_NIN]), "swap_outs": int(stats[S.S_NOUT]),
                             "frees": int(stats[S.S_NFREE])})
            prob = S.Problem(self.graph, self.device, pool, sched, self.op_time, self.op_ws, self.impl_choice,
                             out.buf[6].copy(), opt)
            out.timeline = (prob, tl)

    def pool_for(self, pool: PoolArrays, options: PlannerOptions) -> PoolArrays:
        """The pool the walk plans: with `options.addresses` a byte budget becomes an arena of the same memory
        (less the largest workspace), built once per pool."""
        if not (options.addresses and pool.by_bytes and not pool.arena):
            return pool
        cached = self._arenas.get(id(pool))
        if cached is None or cached[0] is not pool:
            cap = min(int(pool.capacity), arena_capacity(self.device, int(self.op_ws.max(initial=0))))
            cached = (pool, replace(pool, arena=True, capacity=cap, class_bytes=np.array([cap], np.int64)))
            self._arenas[id(pool)] = cached
        return cached[1]

    def makespan(self, schedule: np.ndarray, pool: PoolArrays, options: PlannerOptions = PlannerOptions()) -> float:
        """Fitness: the simulated iteration time, or inf when the pool cannot run some op."""
        return float(self._run_grown(schedule, self.pool_for(pool, options), options, False).makespan)

    def faster_options(self, schedule: np.ndarray, pool: PoolArrays, options: PlannerOptions) -> PlannerOptions:
        """`options`, or the same without recompute where swapping only gives the faster plan (both walks are
        re-bound in time order, and either can win). One-shot planners use this; the search has the
        recompute ratio in its genes instead."""
        if not options.recomputes or options.recompute_only:
            return options
        swap_only = replace(options, recompute_ratio=0.0)
        faster = self.makespan(schedule, pool, swap_only) <= self.makespan(schedule, pool, options)
        return swap_only if faster else options

    def plan(self, schedule: np.ndarray, pool: PoolArrays, options: PlannerOptions = PlannerOptions()) -> AugmentedGraph:
        pool = self.pool_for(pool, options)
        out = self._run_grown(schedule, pool, options, True, want_timeline=True)
        if out.status != K.OK:
            raise self._infeasible(pool, out.err_op, out.err_need, options)
        if out.timeline is not None:
            from hybrid.swap.rewalk import to_augmented

            prob, tl = out.timeline
            aug = to_augmented(prob, tl)
            aug.options = options
            return aug
        n = out.n
        kind, ref, start, end, dep_ptr, dep_idx, init_out, _ev, _re, stats, node_rc, home = out.buf
        m = int(dep_ptr[n])
        rc = node_rc[:n].copy()
        return AugmentedGraph(
            self.graph, self.device, pool, np.asarray(schedule, dtype=np.int32), self.op_time, self.op_ws,
            self.impl_choice, options, kind[:n].copy(), ref[:n].copy(), start[:n].copy(), end[:n].copy(),
            dep_ptr[:n + 1].copy(), dep_idx[:m].copy(), init_out.copy(),
            {"bytes_h2d": int(stats[K.ST_H2D]), "bytes_d2h": int(stats[K.ST_D2H]), "swap_ins": int(stats[K.ST_NIN]),
             "swap_outs": int(stats[K.ST_NOUT]), "frees": int(stats[K.ST_NFREE]),
             "recomputes": int(stats[K.ST_NRC]), "recompute_s": float(stats[K.ST_RCTIME])},
            recompute=rc if rc.any() else None, offsets=home.copy() if pool.arena else None,
        )

    def _infeasible(self, pool: PoolArrays, err_op: int, err_need: int, opt: PlannerOptions) -> InfeasibleError:
        """Why the walk stopped, with the least usable memory a plan needs where the largest op decides it."""
        why = self._explain(pool, err_op, err_need, opt)
        return why if isinstance(why, InfeasibleError) else InfeasibleError(why)

    def _explain(self, pool: PoolArrays, err_op: int, err_need: int, opt: PlannerOptions) -> str | InfeasibleError:
        """The message; the error itself where it also carries the least memory to give."""
        g = self.graph
        a = g.arrays
        if err_op == -2:
            ws = int(self.op_ws.max(initial=0))
            return (f"the pool ({format_bytes(pool.capacity)}) plus the largest workspace ({format_bytes(ws)}) exceeds "
                    f"the device's usable memory ({format_bytes(self.device.usable_bytes)}); lower the class counts")
        if err_op < 0 and not pool.by_bytes and opt.keep_persistent:
            # a pool of size classes fails on objects, not bytes: the persistent tensors' bytes may be well under it
            held = np.bincount(pool.t_class[a.t_persistent], minlength=len(pool.class_count))
            short = [c for c in range(len(pool.class_count)) if held[c] > pool.class_count[c]]
            if short:
                c = short[0]
                more = f" (and {len(short) - 1} more classes short)" if len(short) > 1 else ""
                return (f"the persistent tensors, which this planner keeps resident, need {int(held[c])} objects of "
                        f"size class {c} ({format_bytes(int(pool.class_bytes[c]))} each), but the pool has "
                        f"{int(pool.class_count[c])}{more}; raise that class's count, or plan on a byte budget")
        if err_op < 0:
            what = "the tensors resident at the iteration's start"
            if opt.keep_persistent:
                what = (f"the persistent tensors ({format_bytes(int(pool.t_mem[a.t_persistent].sum()))}), which this "
                        "planner keeps resident,")
            raw = int(a.t_bytes[a.t_persistent].sum()) if opt.keep_persistent else 0
            hint = self.device.default_alignment_hint(opt.keep_persistent and raw <= pool.capacity, flag=True)
            advice = f"unrounded they take {format_bytes(raw)}: {hint}" if hint else "give more --memory"
            return f"{what} do not fit in the device memory ({format_bytes(pool.capacity)}); {advice}"
        op = g.ops[err_op]
        if opt.recompute_only:
            return (f"recompute only: op {op.id!r} finds no room ({format_bytes(pool.capacity)} in all): every resident "
                    "tensor is one it or a rerun before it needs, or an activation that can neither be rerun nor, "
                    "in this mode, swapped; give more --memory, or allow swapping (the belady baseline)")
        ts_ = list(dict.fromkeys(op.inputs)) + list(op.outputs)
        need = sum(int(pool.t_mem[g.tensor_index[t]]) for t in ts_) + int(self.op_ws[err_op])
        if pool.arena and err_need < -1:
            m, v = divmod(-2 - err_need, a.n_tensors)
            return (f"op {op.id!r} needs {g.tensors[m].id!r} back at its offset, where {g.tensors[v].id!r} lies, which "
                    "the op needs too (one offset per tensor); give more --memory or another schedule")
        if pool.arena:
            return (f"op {op.id!r} finds no contiguous range of {format_bytes(err_need)} in the arena "
                    f"({format_bytes(self._capacity(pool))} beside the largest workspace) that it can take: the tensors "
                    "there are ones it needs too, or the range is some input's own offset; give more --memory")
        if pool.by_bytes:
            pinned = ""
            if opt.keep_persistent:
                pinned = (f" on top of {format_bytes(int(pool.t_mem[a.t_persistent].sum()))} of persistent tensors "
                          "kept resident")
            from hybrid.graph.info import largest_op

            big, big_need = largest_op(g, pool.align, self.op_ws)   # with the implementations this plan runs
            least = "" if big_need <= need else (f"; no plan runs with less than {format_bytes_up(big_need)}: op "
                                                 f"{g.ops[big].id!r} needs that at once (`hybrid info`)")
            need_t, cap_t = format_bytes_apart(need, pool.capacity)
            raw = sum(int(a.t_bytes[g.tensor_index[t]]) for t in ts_) + int(self.op_ws[err_op])
            if opt.keep_persistent:   # the persistent tensors kept resident beside it, unrounded too
                mine = np.zeros(a.n_tensors, dtype=bool)
                mine[[g.tensor_index[t] for t in ts_]] = True
                raw += int(a.t_bytes[a.t_persistent & ~mine].sum())
            hint = self.device.default_alignment_hint(raw <= pool.capacity, flag=True)
            if big_need > pool.capacity and not hint and not opt.keep_persistent:
                # no schedule can help: the op that binds is the largest, not the one this walk stopped at
                reserve = self.device.reserve_bytes
                give = format_bytes_up(big_need + reserve) + (
                    f" ({format_bytes_up(big_need)} usable beside the {format_bytes(reserve)} reserve)" if reserve
                    else "")
                op_big = g.ops[big]
                lean = min(op_big.implementations, key=lambda im: im.workspace_bytes, default=None)
                other = ""
                if lean is not None and lean.workspace_bytes < int(self.op_ws[big]):
                    lean_need = big_need - int(self.op_ws[big]) + lean.workspace_bytes
                    other = (f"; its implementation {lean.name!r} needs {format_bytes_up(lean_need)} (`hybrid milp` "
                             "chooses implementations)")
                head = "no plan runs" if not other else "no plan with the implementations this planner runs fits"
                advice = f"--memory of at least {give}"
                return InfeasibleError(
                    f"{head} in {format_bytes(pool.capacity)}: op {op_big.id!r} needs {format_bytes_up(big_need)} at "
                    f"once (inputs, outputs and workspace, each aligned to {pool.align} bytes); give {advice}{other} "
                    "(`hybrid info` lists the largest ops)", least_usable_bytes=big_need, advice=advice)
            advice = (f"unrounded it needs {format_bytes(raw)}, which fits: {hint}; otherwise give more --memory"
                      f"{least}" if hint else f"give more --memory{least}")
            return (f"op {op.id!r} needs {need_t} at once (inputs, outputs and workspace, each aligned "
                    f"to {pool.align} bytes){pinned}, but the device has {cap_t}; {advice}")
        c = -1 - err_need
        here = sum(1 for t in ts_ if pool.t_class[g.tensor_index[t]] == c)
        kept = ""
        if opt.keep_persistent:
            held = int(np.count_nonzero(a.t_persistent & (pool.t_class == c)))
            kept = f" of which {held} hold persistent tensors this planner keeps resident"
        return (f"op {op.id!r} needs {here} objects of size class {c} ({int(pool.class_bytes[c])} bytes) at once, "
                f"but the pool has {int(pool.class_count[c])}{kept}; raise that class's count")


def compile_kernels(walk: bool = True, rewalk: bool = True) -> None:
    """Compile (or load from numba's on-disk cache) every kernel a fitness evaluation runs, on a tiny graph.

    Called before a search's clock starts and before worker processes are made: on a fresh install the
    first compile takes seconds, and without this each worker would pay it inside the time budget.
    `walk` / `rewalk`: the walk's kernels and the re-walk's (`_rebind`), which a first run compiles in two
    processes at once (hybrid.pipeline.kernels); the re-walk alone runs on an empty walk (same argument types).
    """
    from dataclasses import replace

    from hybrid.graph.info import unswapped_peak
    from hybrid.signals import interrupts_after
    from hybrid.swap.pools import byte_pool, per_size_pool
    from hybrid.graph.order import program_order
    from hybrid.graph.synthetic import training_graph

    g = training_graph(3, seed=0)
    order = program_order(g)
    peak = unswapped_peak(g)
    # Kernels compile on their first call whatever path they take; a swapping byte budget and a roomy
    # size-class pool cover both pool kinds. Numba loads and saves them through ctypes callbacks, where a
    # KeyboardInterrupt would be dropped: a Ctrl-C or SIGTERM is acted on afterwards.
    with interrupts_after():
        for mem, make in ((int(peak * 0.8), lambda d: byte_pool(g, d)),
                          (2 * peak, lambda d: per_size_pool(g, order, d))):
            dev = replace(g.device, memory_bytes=mem, reserve_bytes=0)
            if walk:
                SwapPlanner(g, dev).makespan(order, make(dev), PlannerOptions(rebind=rewalk))
            elif rewalk:
                SwapPlanner(g, dev)._rebind_nothing(order, make(dev), PlannerOptions())
