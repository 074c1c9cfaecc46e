"""The runtime: replays a compiled plan, node by node, on three streams ordered by events.

Per iteration it walks the program (executor.program) in node order, which is
a topological order every stream follows:
1. hand back the memory whose release time has come (frees and finished
   swap-outs), remembering what must finish before it is reused;
2. allocate the node's new device copies from the pool (executor.device_pool);
3. make the node's stream wait for the events of every other stream's node it
   depends on (its augmented-graph edges, plus the previous users of the memory
   it now writes), skipping waits that an earlier wait already implies
   (per-stream vector clocks);
4. issue the node: an op writing into its slots (executor.ops), a host-to-device
   copy of the tensor's bytes, or a device-to-host copy; record its event.
A `free` issues nothing: its memory goes back to the pool with the frontier
of its dependencies. The iteration ends with a device synchronize, so every
iteration is timed alone, as the plan's makespan is.

Issuing thousands of nodes from Python takes longer than a fast GPU takes to
run them, so on CUDA an iteration can be recorded once as a CUDA graph and
replayed (`run_iteration(graph=True)`): the same walk, recorded instead of
run, valid from the pool layout it was recorded at.
"""
from __future__ import annotations

import contextlib
import copy
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from hybrid.plan import events as E
from hybrid.capture.conv_impls import is_default
from hybrid.capture.encoding import DecodeContext, decode_value
from hybrid.capture.trace import portable_kernels
from hybrid.device import EXECUTOR_MIN_ALIGNMENT
from hybrid.errors import HybridError, InfeasibleError
from hybrid.graph import Graph
from hybrid.plan import ArenaAllocation, Plan, SizeClassAllocation, UnconstrainedAllocation
from hybrid.units import format_bytes

from executor.device_pool import ArenaPool, CompactingPool, DevicePool, Fragmented, SizeClassPool
from executor.host_pool import HostPool
from executor.ops import COPY, OpRunner, OpStats
from executor.offsets import interval_offsets
from executor.outside import AllocatorCounter, DispatchCounter, OutsideStats
from executor.races import HOST_BASE, RaceChecker
from executor.program import NO_FRONTIER, Frontier, Program, Release, compile_program, merge
from executor.streams import COMPUTE, D2H, H2D, Backend, CpuBackend


def node_impls(program: Program) -> dict[int, str]:
    """Compute node -> the non-default implementation its plan event names (hybrid.capture.conv_impls runs it)."""
    aug = program.aug
    out: dict[int, str] = {}
    if aug.impl is None:
        return out
    g = program.graph
    for i in range(aug.n_nodes):
        v = int(aug.impl[i])
        if v < 0 or int(aug.kind[i]) != E.COMPUTE:
            continue
        op = g.ops[int(aug.ref[i])]
        if not is_default(op, op.implementations[v].name):
            out[i] = op.impls[v].name
    return out


def _no_counting() -> Any:
    """Inside: no TorchDispatchMode sees the calls (the executor's own buffers, allocated mid-iteration)."""
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()


def op_runs(program: Program) -> dict[int, int]:
    """Op index -> how many times it runs in one iteration (its first run and its reruns)."""
    aug = program.aug
    out: dict[int, int] = {}
    for i in range(aug.n_nodes):
        if int(aug.kind[i]) == E.COMPUTE:
            o = int(aug.ref[i])
            out[o] = out.get(o, 0) + 1
    return out


def node_workspaces(program: Program) -> dict[int, int]:
    """Compute node -> the workspace its op states for the implementation it runs (the plan counts it while the
    node runs)."""
    aug, g = program.aug, program.graph
    out: dict[int, int] = {}
    for i in range(aug.n_nodes):
        if int(aug.kind[i]) != E.COMPUTE:
            continue
        op = g.ops[int(aug.ref[i])]
        v = int(aug.impl[i]) if aug.impl is not None else -1
        out[i] = int(op.implementations[v].workspace_bytes) if v >= 0 else int(op.workspace_bytes)
    return out


def pool_capacity(program: Program) -> int:
    """Device memory left to the pool: the plan's usable memory (less its reserve) minus the largest op
    workspace (kernel-internal)."""
    ws = int(program.aug.op_ws.max()) if len(program.aug.op_ws) else 0
    return int(program.plan.device.usable_bytes) - ws


def make_pool(program: Program, backend: Backend) -> DevicePool:
    g, plan = program.graph, program.plan
    cap = pool_capacity(program)
    align = plan.device.alignment_bytes
    if align < EXECUTOR_MIN_ALIGNMENT:
        raise HybridError(f"the plan's device has alignment_bytes={align}; the executor places tensors at "
                          f"{EXECUTOR_MIN_ALIGNMENT} bytes or more (PyTorch kernels need it to match eager): plan "
                          f"again with --alignment {EXECUTOR_MIN_ALIGNMENT} or more")
    alloc = plan.allocation
    if isinstance(alloc, SizeClassAllocation):
        return SizeClassPool(g, alloc, cap, backend, align)
    if isinstance(alloc, ArenaAllocation):
        offsets = alloc.offsets
        tensors = g.tensors

        def plan_offset(t: int, _interval: int) -> int:
            try:
                return offsets[tensors[t].id]
            except KeyError:
                raise HybridError(f"plan arena has no offset for tensor {tensors[t].id!r}; validate the plan") from None

        return ArenaPool(g, "arena", alloc.arena_bytes, cap, plan_offset, backend, align=align)
    assert isinstance(alloc, UnconstrainedAllocation)
    note = ""
    try:
        layout = interval_offsets(program, cap, align)
    except InfeasibleError:
        # The plan counts an op's workspace only while that op runs (a MO-SOS plan's Winograd next to few
        # tensors); a pool that keeps the largest workspace free all the time may then not hold the plan's
        # tensors elsewhere. The tensors take the whole memory instead, and the workspace that PyTorch
        # allocates outside the pool goes beyond the plan's memory by at most that much (said in the stats).
        full = int(plan.device.usable_bytes)
        try:
            layout = interval_offsets(program, full, align) if cap < full else None
        except InfeasibleError:
            layout = None
        if layout is None:
            # Compacting online within the whole memory: the same bound on what the workspace may add.
            pool_c = CompactingPool(g, full, backend, align)
            if cap < full:
                pool_c.stats.offsets += (f"; the largest workspace ({format_bytes(full - cap)}, outside the pool) "
                                         f"may exceed the plan's memory by up to that much")
            return pool_c
        ws = full - cap
        beyond = max(0, layout.arena_bytes + ws - full)
        cap = full
        note = (f"; the largest workspace ({format_bytes(ws)}, outside the pool) may exceed the plan's memory by "
                f"{format_bytes(beyond)}")
    pool = ArenaPool(g, "unconstrained", layout.arena_bytes, cap, lambda _t, k: layout.offsets[k], backend,
                     align=align)
    pool.stats.offsets = "offline" + note
    return pool


@dataclass
class IterationRecord:
    """One iteration's measurements (times in seconds from the iteration's first event)."""

    iteration: int
    wall_s: float                       # host time from the first issue to the end of the final synchronize
    makespan_s: float                   # first to last event on the device (CUDA events; host clock on CPU)
    start: np.ndarray | None            # per node (NaN for frees)
    end: np.ndarray | None
    ops: OpStats = field(default_factory=OpStats)
    loss: float | None = None
    issue_s: float = float("nan")       # host time to issue the iteration's work (before the final synchronize)
    graphed: bool = False               # replayed as one CUDA graph (no per-node times)
    first_replay: bool = False          # that graph's first launch (it uploads the graph: slower)


MAX_GRAPHS = 4   # iterations recorded as CUDA graphs, one per layout of the pool between iterations
_POOL_SHARED = {"graph", "buffer", "stats", "offset_of"}   # pool attributes a saved state shares, not copies


@dataclass
class _Recorded:
    graph: Any                       # torch.cuda.CUDAGraph
    stats: OpStats
    pool_after: dict[str, Any]       # the pool's host state after the iteration
    snapshots: dict[str, torch.Tensor]   # watched values (the loss): tensors each replay rewrites; another
                                         # graph's replay may reuse their memory, so read them at once
    replays: int = 0


class Runtime:
    """Holds the pools and the tensors' homes across iterations; `run_iteration` replays the plan once."""

    def __init__(self, graph: Graph, plan: Plan, backend: Backend, program: Program | None = None,
                 timing: bool = True, check_races: bool = False, random: str = "replay") -> None:
        """`random`: where random ops' numbers come from (executor.random_state): "replay" (eager's numbers;
        no CUDA graph can record it) or "op_seeds" (graph-safe)."""
        self.graph = graph
        self.plan = plan
        self.backend = backend
        self.program = program if program is not None else compile_program(graph, plan)
        self.pool = make_pool(self.program, backend)
        self.host = HostPool(graph, self.program.host_tensors, backend)
        self.ops = OpRunner(graph, backend.device, random, op_runs(self.program))
        # An optimizer step overwrites its gradient only if no host copy of it is made (a copy in flight would
        # read the overwritten bytes)
        copied = {graph.tensors[int(st.ref)].id for st in self.program.steps if st.kind == E.SWAP_OUT}
        self.ops.consume_grad = {o: t for o, t in self.ops.consume_grad.items() if t not in copied}
        self.timing = timing
        n = self.program.n_nodes
        self.node_impl = node_impls(self.program)
        self.events: list[Any] = [None] * n
        self.start_events: list[Any] = [None] * n
        self.copy_events: dict[int, Any] = {}
        for st in self.program.steps:
            if st.stream >= 0:
                self.events[st.node] = backend.event(timing)
                if timing:
                    self.start_events[st.node] = backend.event(True)
                    if st.kind == E.COMPUTE and (self.ops.calls[st.ref].mode == COPY or st.node in self.node_impl):
                        self.copy_events[st.node] = backend.event(True)
        self.t0 = backend.event(True)
        self.t_end = backend.event(True)
        self.fence = backend.event(False)
        self.bounce: torch.Tensor | None = None
        self.node_clock: list[tuple[int, int, int]] = [NO_FRONTIER] * n
        self.env: dict[str, torch.Tensor] = {}
        self.loaded = False
        self.step = 1
        self.iteration = 0
        self.observe: dict[int, list[tuple[str, Any]]] = {}     # op index -> (name, encoded ref) to snapshot
        self.snapshots: dict[str, torch.Tensor] = {}
        self._watch_buffers: dict[str, torch.Tensor] = {}   # small watched values' buffers, reused per iteration
        self._recording = False
        self._poison = isinstance(backend, CpuBackend) and backend.poison
        self.races = RaceChecker(self.program.aug.label) if check_races else None
        self.graphs: dict[tuple[tuple[int, int], ...], _Recorded] = {}   # layout between iterations -> graph
        self._graph_pool: Any = None
        self.graph_note = ""                      # why replay stopped or never started ("" while all is well)
        # bytes allocated outside the pool (executor.outside): every aten call's results on the CPU, the caching
        # allocator's counters on CUDA; each compute node may use its implementation's stated workspace
        self.node_ws = node_workspaces(self.program)
        self._counter: DispatchCounter | None = None
        self.count_outside = True
        self.allocator = (AllocatorCounter(backend.device, max(self.node_ws.values(), default=0))
                          if backend.name == "cuda" else None)

    # ---- state ----------------------------------------------------------------------
    def load(self, values: dict[str, torch.Tensor], step: int = 1) -> None:
        """Initial values of every persistent tensor: resident ones go to the device, the rest to host memory."""
        g = self.graph
        a = g.arrays
        missing = [t.id for t in g.tensors if t.persistent and t.id not in values]
        if missing:
            raise HybridError(f"executor needs a value for persistent tensor {missing[0]!r} ({len(missing)} missing)")
        for t in self.program.resident:
            if t not in self.pool.where:
                self.pool.alloc(t, self.program.resident_interval[t])
                self.env[g.tensors[t].id] = self._view_dev(t)
        for t in np.nonzero(a.t_persistent)[0]:
            self.set_value(g.tensors[int(t)].id, values[g.tensors[int(t)].id])
        self.backend.synchronize()
        self.step = int(step)
        self.loaded = True
        # Recordings assume the optimizer's step count and the pool as they were: record afresh after a load, in a
        # fresh private pool (the old one, released by its graphs but still holding their snapshots' clones, can
        # not be captured into again) without those snapshots
        if self.graphs:
            self.snapshots.clear()
        self.graphs.clear()
        self._graph_pool = None
        self.graph_note = ""

    def _view_dev(self, t: int) -> torch.Tensor:
        tt = self.graph.tensors[t]
        if tt.bytes == 0 and "dtype" not in tt.extra:
            return self.pool.buffer.data[:0]
        return self.pool.view(t)

    def _view_host(self, t: int) -> torch.Tensor:
        tt = self.graph.tensors[t]
        if tt.bytes == 0 and "dtype" not in tt.extra:
            return self.host.buffer.data[:0]
        return self.host.view(t)

    def set_value(self, tid: str, value: torch.Tensor) -> None:
        """Overwrite a persistent tensor (e.g. the next batch) where it lives now; call between iterations."""
        t = self.graph.tensor_index[tid]
        dst = self._view_dev(t) if t in self.pool.where else self._view_host(t)
        if dst.numel() == 0:
            return
        if list(value.shape) != list(dst.shape):
            raise HybridError(f"value for {tid!r} has shape {list(value.shape)}, the graph records {list(dst.shape)}")
        self.backend.synchronize()
        dst.copy_(value.detach())

    def value(self, tid: str) -> torch.Tensor:
        """A CPU copy of a persistent tensor's current value (on the device if resident, else its host copy)."""
        t = self.graph.tensor_index[tid]
        self.backend.synchronize()
        src = self._view_dev(t) if t in self.pool.where else self._view_host(t)
        return src.detach().to("cpu", copy=True)

    def watch(self, name: str, ref: dict[str, Any]) -> None:
        """Snapshot an encoded tensor reference (the loss, a gradient) right after the op that produces it."""
        if self.graphs:
            raise HybridError(f"cannot watch {name}: iterations are already replayed as CUDA graphs, which would "
                              "not snapshot it; watch before the first run")
        tid = ref["t"]
        t = self.graph.tensor(tid)
        if t.persistent:
            raise HybridError(f"cannot watch {name}: {tid!r} is persistent; read it with value()")
        producer = next(i for i, op in enumerate(self.graph.ops) if tid in op.outputs)
        self.observe.setdefault(producer, []).append((name, ref))

    # ---- one iteration ------------------------------------------------------------------
    def _release(self, r: Release) -> None:
        off = self.pool.release(r.tensor, r.frontier)
        del self.env[self.graph.tensors[r.tensor].id]
        if self._poison:
            # Every 16th byte is enough: a stale read of any element of 16 bytes or more comes back changed.
            self.pool.buffer.raw(off, self.graph.tensors[r.tensor].bytes)[::16].fill_(255)

    def _wait(self, s: int, fr: Frontier, clock: list[list[int]]) -> None:
        c = clock[s]
        for y in (COMPUTE, H2D, D2H):
            if y == s:
                continue
            p = fr[y]
            if p > c[y]:
                self.backend.wait(s, self.events[p])
                nc = self.node_clock[p]
                c[0], c[1], c[2] = max(c[0], nc[0]), max(c[1], nc[1]), max(c[2], nc[2])

    def _compact(self, clock: list[list[int]]) -> None:
        """Fence all streams, slide live copies together on the compute stream, fence again.

        Everything issued so far finishes before a byte moves (compute waits on
        the last copy of each copy stream), and the copy streams wait for the
        moves before their next node; afterwards every stream has seen all
        earlier work, so the clocks and the pool's release frontiers start afresh.
        """
        b = self.backend
        pool = self.pool
        assert isinstance(pool, CompactingPool)
        last = [clock[s][s] for s in (COMPUTE, H2D, D2H)]
        for s in (H2D, D2H):
            if last[s] >= 0:
                b.wait(COMPUTE, self.events[last[s]])
        moves = pool.compact()
        with b.on(COMPUTE):
            for t, old, new, n in moves:
                self._move(old, new, n)
                self.env[self.graph.tensors[t].id] = self._view_dev(t)
            b.record(self.fence, COMPUTE)
        b.wait(H2D, self.fence)
        b.wait(D2H, self.fence)
        if self.races is not None:
            self.races.reset()
        known = [max(clock[s][y] for s in (COMPUTE, H2D, D2H)) for y in (COMPUTE, H2D, D2H)]
        for s in (COMPUTE, H2D, D2H):
            clock[s][:] = known

    def _move(self, old: int, new: int, n: int) -> None:
        """Copy n bytes down from `old` to `new` in the pool buffer; overlapping moves go in chunks or via the host."""
        buf = self.pool.buffer.data
        shift = old - new
        if shift >= n:
            buf[new:new + n].copy_(buf[old:old + n])
        elif n <= 64 * shift:
            for k in range(0, n, shift):
                m = min(shift, n - k)
                buf[new + k:new + k + m].copy_(buf[old + k:old + k + m])
        else:
            if self.bounce is None or self.bounce.numel() < n:
                # host memory (pinned on CUDA), the executor's own: not counted as allocated outside the pool
                with _no_counting():
                    self.bounce = self.backend.empty_bytes(max(t.bytes for t in self.graph.tensors), pinned_host=True)
                if self._counter is not None:
                    self._counter.known.add(self.bounce.untyped_storage().data_ptr())
            tmp = self.bounce[:n]
            tmp.copy_(buf[old:old + n], non_blocking=True)
            buf[new:new + n].copy_(tmp, non_blocking=True)

    def run_iteration(self, seed: int | None = None, graph: bool = False) -> IterationRecord:
        """Replay the plan once. `graph`: record this iteration as a CUDA graph the first time (it must be
        a steady one: the optimizer past its first step, the pool back where it started) and replay that
        graph from then on, so the host issues one launch instead of every node."""
        if not self.loaded:
            raise HybridError("executor: load() the initial values before running")
        if graph and not self.graph_note:
            return self._run_graphed(seed)
        b = self.backend
        b.synchronize()
        b.begin_iteration(self.iteration)
        if seed is not None:
            torch.manual_seed(seed)
        self.ops.random.begin_iteration(seed)
        if self.allocator is not None and self.count_outside:
            self.allocator.begin()
        wall0 = time.perf_counter()
        b.record(self.t0, COMPUTE)
        stats, copy_host_s = self._issue(self.t0)
        issue = time.perf_counter() - wall0
        b.record(self.t_end, COMPUTE)
        b.synchronize()
        wall = time.perf_counter() - wall0
        if self.allocator is not None and self.count_outside:
            stats.outside = self.allocator.finish()
        rec = IterationRecord(self.iteration, wall, b.elapsed_s(self.t0, self.t_end), None, None, stats,
                              issue_s=issue)
        if self.timing:
            rec.start, rec.end = self._node_times()
            if b.name == "cuda":
                stats.copy_s = sum(b.elapsed_s(ev, self.events[i]) for i, ev in self.copy_events.items())
            else:
                stats.copy_s = copy_host_s
        else:
            stats.copy_s = copy_host_s if b.name == "cpu" else float("nan")
        self.iteration += 1
        self.step += 1
        return rec

    def graph_blocker(self) -> str:
        """Why this plan cannot be replayed as a CUDA graph ("" when it can)."""
        if self.backend.name != "cuda":
            return "CUDA graphs need --device cuda"
        if self.races is not None:
            return "the race checker inspects every node on the host"
        if self.ops.random_ops:
            op = self.graph.ops[min(self.ops.random_ops)]
            if not self.ops.random.graph_safe:
                return (f"op {op.id!r} draws random numbers from the global generator, whose state the host keeps "
                        "for its reruns (random='op_seeds' makes them graph-safe; --cuda-graph does)")
            from executor.random_state import graph_safe_available

            why = graph_safe_available()
            if why:
                return f"op {op.id!r} draws random numbers and {why}"
        if any(name != "loss" for v in self.observe.values() for name, _ in v):
            return "watched values other than the loss are copied to the host mid-iteration"
        if self.step < 2:
            return "the optimizer's first step differs from the later ones: run one iteration first"
        return ""

    def _boundary(self) -> tuple[tuple[int, int], ...]:
        """Where the device copies alive between iterations sit: what a recorded iteration assumes."""
        return tuple(sorted(self.pool.where.items()))

    def _pool_state(self) -> dict[str, Any]:
        return {k: copy.deepcopy(v) for k, v in vars(self.pool).items() if k not in _POOL_SHARED}

    def _set_pool_state(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self.pool, k, copy.deepcopy(v))
        self.env = {self.graph.tensors[t].id: self._view_dev(t) for t in self.pool.where}

    def _run_graphed(self, seed: int | None) -> IterationRecord:
        b = self.backend
        rec_graph = self.graphs.get(self._boundary())
        if rec_graph is None:
            if not self.graphs:
                why = self.graph_blocker()
                if why:
                    raise HybridError(f"cannot replay this plan as a CUDA graph: {why}; run it without --cuda-graph")
            if len(self.graphs) >= MAX_GRAPHS:
                # The host's pool is where the last replay left it (its whole state restored): issue from here.
                self.graph_note = (f"the pool's layout between iterations did not repeat within {MAX_GRAPHS} "
                                   "recorded iterations; issuing node by node from then on")
                return self.run_iteration(seed)
            rec_graph = self._record_graph()
        b.synchronize()
        self.ops.random.begin_iteration(seed)    # the random ops' states reseeded for this step (host work)
        if self.allocator is not None and self.count_outside:
            self.allocator.begin()
        wall0 = time.perf_counter()
        with b.on(COMPUTE):
            b.record(self.t0, COMPUTE)
            rec_graph.graph.replay()
            b.record(self.t_end, COMPUTE)
        issue = time.perf_counter() - wall0
        b.synchronize()
        self._set_pool_state(rec_graph.pool_after)    # host work of this iteration too: inside its wall time
        self.snapshots.update(rec_graph.snapshots)
        wall = time.perf_counter() - wall0
        stats = copy.copy(rec_graph.stats)
        stats.outside = self.allocator.finish() if self.allocator is not None and self.count_outside else \
            OutsideStats()
        rec = IterationRecord(self.iteration, wall, b.elapsed_s(self.t0, self.t_end), None, None,
                              stats, issue_s=issue, graphed=True, first_replay=rec_graph.replays == 0)
        rec_graph.replays += 1
        self.iteration += 1
        self.step += 1
        return rec

    def _record_graph(self) -> _Recorded:
        """Record one iteration's issue as a CUDA graph (recording runs nothing; the caller replays it).

        A replay redoes the same work at the same addresses, so it is valid
        from the layout it was recorded at; the pool's host state after it is
        kept with it, and where a layout comes back (a cycle of at most
        MAX_GRAPHS iterations) its graph is replayed. The optimizer's step
        count lives in device counters that each replay advances (Adam's bias
        correction). Events in a graph only order streams, so node times are
        not kept.
        """
        b = self.backend
        key = self._boundary()
        before = self._pool_state()
        stream = torch.cuda.current_stream(b.device)
        saved = self.events, self.timing
        self.events = [None if e is None else b.event(False) for e in self.events]
        self.timing = False
        fork = b.event(False)
        g = torch.cuda.CUDAGraph()
        b.synchronize()
        self.ops.device_steps(self.step)
        if self.ops.random_ops and self.ops.random.graph_safe:
            self.ops.random.register(g)     # each replay reads the seeds begin_iteration gives the states
        self._recording = True
        try:
            with torch.cuda.graph(g, pool=self._graph_pool, stream=b.streams[COMPUTE]):
                b.record(fork, COMPUTE)
                stats, _ = self._issue(fork, join_all=True)
        except Exception as e:  # noqa: BLE001 - whatever the capture refused: back to the state before it
            self._set_pool_state(before)
            self.graph_note = f"recording failed ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
            raise HybridError(f"cannot replay this plan as a CUDA graph: {self.graph_note}; run it without "
                              "--cuda-graph") from e
        finally:
            torch.cuda.set_stream(stream)   # a capture that failed to end leaves its stream current
            self.events, self.timing = saved
            self.ops.device_steps(None)
            self._recording = False
        if self._graph_pool is None:
            self._graph_pool = g.pool()     # later recordings share the first one's memory (replayed in turn)
        rec = _Recorded(g, stats, self._pool_state(), dict(self.snapshots))
        self.graphs[key] = rec
        return rec

    def _issue(self, start: Any, join_all: bool = False) -> tuple[OpStats, float]:
        """Issue every node of one iteration on its stream (the copy streams first wait for `start`)."""
        b = self.backend
        g = self.graph
        env = self.env
        pool, host, ops = self.pool, self.host, self.ops
        reruns = self.program.aug.recompute  # per node: a recompute event (hybrid.graph.rerun says how it reruns)
        timing = self.timing
        pool.begin_iteration()
        ops.random.start()
        stats = OpStats()
        clock = [[-1, -1, -1] for _ in range(3)]
        if self.races is not None:
            self.races.reset()
        b.wait(H2D, start)
        b.wait(D2H, start)
        copy_host_s = 0.0
        # the pool's level (as the plan counts it) while each node runs: with what the node allocates outside
        counter = (DispatchCounter(self._own_storages(), level=lambda: pool.stats.live_occupied_bytes)
                   if b.name == "cpu" and self.count_outside else None)
        self._counter = counter
        node_ws = self.node_ws
        with torch.no_grad(), portable_kernels(), (counter if counter is not None else contextlib.nullcontext()):
            for st in self.program.steps:
                for r in st.releases:
                    self._release(r)
                fr = st.frontier
                for al in st.allocs:
                    try:
                        _, mfr = pool.alloc(al.tensor, al.interval)
                    except Fragmented:
                        self._compact(clock)
                        try:
                            _, mfr = pool.alloc(al.tensor, al.interval)
                        except Fragmented:
                            t = g.tensors[al.tensor]
                            raise HybridError(
                                f"no room for {t.id!r} ({t.bytes} bytes) even after compacting the pool: the plan "
                                f"does not count copies at the device's {pool.align}-byte alignment (rule 5); run "
                                "hybrid validate on it, or plan it again with this version") from None
                    fr = merge(fr, mfr)
                    env[g.tensors[al.tensor].id] = self._view_dev(al.tensor)
                s = st.stream
                if s < 0:
                    continue
                i = st.node
                self._wait(s, fr, clock)
                if self.races is not None:
                    self._check_races(st.kind, st.ref, i, s, clock[s])
                if counter is not None:
                    label = ops.calls[st.ref].op.extra["aten"]["target"] if st.kind == E.COMPUTE else "runtime"
                    counter.node(label, node_ws.get(i, 0))
                with b.on(s):
                    if timing:
                        b.record(self.start_events[i], s)
                    if st.kind == E.COMPUTE:
                        o = st.ref
                        call = ops.calls[o]
                        stats.ops_by_mode[call.mode] = stats.ops_by_mode.get(call.mode, 0) + 1
                        for new_v, old_v in call.versions:
                            tn, to = g.tensor_index[new_v], g.tensor_index[old_v]
                            pool.raw(tn).copy_(pool.raw(to))
                            stats.version_bytes += g.tensors[tn].bytes
                        rerun = reruns is not None and bool(reruns[i])
                        impl = self.node_impl.get(i)
                        if call.mode == COPY or impl is not None:
                            res = ops.compute(o, env, rerun, impl)
                            if timing:
                                b.record(self.copy_events[i], s)
                            h0 = time.perf_counter()
                            ops.store(o, env, res)
                            copy_host_s += time.perf_counter() - h0
                            del res
                            stats.copy_bytes += call.copy_bytes
                            stats.transient_peak_bytes = max(stats.transient_peak_bytes, call.copy_bytes)
                            stats.copy_targets.setdefault(str(call.fn), call.reason)
                        else:
                            ops.run_direct(o, env, self.step, rerun)
                        if o in self.observe:
                            self._snapshot(o)
                    elif st.kind == E.SWAP_IN:
                        pool.raw(st.ref).copy_(host.raw(st.ref), non_blocking=True)
                    else:
                        host.raw(st.ref).copy_(pool.raw(st.ref), non_blocking=True)
                    b.record(self.events[i], s)
                c = clock[s]
                c[s] = i
                self.node_clock[i] = (c[0], c[1], c[2])
            if counter is not None:
                counter.node("runtime", 0)
            for r in self.program.final_releases:
                self._release(r)
        if counter is not None:
            stats.outside = counter.finish()
        if join_all:
            # A recorded graph must join every stream it forked, also one that issued nothing.
            for s in (H2D, D2H):
                ev = b.event(False)
                b.record(ev, s)
                b.wait(COMPUTE, ev)
        else:
            for p in (clock[H2D][H2D], clock[D2H][D2H]):
                if p >= 0:
                    b.wait(COMPUTE, self.events[p])
        return stats, copy_host_s

    def _own_storages(self) -> set[int]:
        """Data pointers of the executor's own buffers: a tensor in one of them is not allocated outside the pool."""
        own = {self.pool.buffer.data.untyped_storage().data_ptr(), self.host.buffer.data.untyped_storage().data_ptr()}
        for t in [self.bounce, *self._watch_buffers.values()]:
            if t is not None:
                own.add(t.untyped_storage().data_ptr())
        return own

    def _dev(self, t: int) -> tuple[int, int]:
        off = self.pool.where[t]
        return off, off + self.graph.tensors[t].bytes

    def _host(self, t: int) -> tuple[int, int]:
        off = HOST_BASE + self.host.offset[t]
        return off, off + self.graph.tensors[t].bytes

    def _check_races(self, kind: int, ref: int, node: int, stream: int, clock: list[int]) -> None:
        assert self.races is not None
        if kind == E.COMPUTE:
            a = self.graph.arrays
            reads = [self._dev(int(t)) for t in a.in_idx[a.in_ptr[ref]:a.in_ptr[ref + 1]]]
            writes = [self._dev(int(t)) for t in a.out_idx[a.out_ptr[ref]:a.out_ptr[ref + 1]]]
            writes += [self._dev(int(t)) for t in a.upd_idx[a.upd_ptr[ref]:a.upd_ptr[ref + 1]]]
        elif kind == E.SWAP_IN:
            reads, writes = [self._host(ref)], [self._dev(ref)]
        else:
            reads, writes = [self._dev(ref)], [self._host(ref)]
        self.races.access(node, stream, clock, reads, writes)

    def _node_times(self) -> tuple[np.ndarray, np.ndarray]:
        n = self.program.n_nodes
        start = np.full(n, np.nan)
        end = np.full(n, np.nan)
        b = self.backend
        for st in self.program.steps:
            if st.stream >= 0:
                start[st.node] = b.elapsed_s(self.t0, self.start_events[st.node])
                end[st.node] = b.elapsed_s(self.t0, self.events[st.node])
        return start, end

    def _snapshot(self, o: int) -> None:
        ctx = DecodeContext(self.env, self.backend.device)
        for name, ref in self.observe[o]:
            v = decode_value(ref, ctx)
            if self._recording:   # a CUDA graph's own copy, from its memory pool (each graph keeps its own)
                self.snapshots[name] = v.detach().clone()    # (a copy to the host cannot be recorded)
                continue
            if v.numel() > 16:   # larger ones (gradients for checks, an inference's outputs) go to the host now
                with _no_counting():     # the executor's own copy, not the op's allocation outside the pool
                    self.snapshots[name] = v.detach().to("cpu", copy=True)
                continue
            # Small values (the loss) stay on the device until the iteration ends, in a buffer of the executor's
            # own kept from one iteration to the next (not counted as allocated outside the pool)
            buf = self._watch_buffers.get(name)
            if buf is None or buf.shape != v.shape or buf.dtype != v.dtype:
                with _no_counting():
                    buf = self._watch_buffers[name] = torch.empty_like(v, memory_format=torch.contiguous_format)
                if self._counter is not None:
                    self._counter.known.add(buf.untyped_storage().data_ptr())
            buf.copy_(v.detach())
            self.snapshots[name] = buf
