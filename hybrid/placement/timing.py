"""Time a placement with the project's simulator and write it as a plan (a `cpu` stream beside the GPU's).

Every op of a part runs on its part's device: on the GPU's `compute` stream or on the host's `cpu` stream,
one op after another, each stream first-in first-out in issue order; a part starts only when everything it
reads from outside has arrived. A tensor that crosses devices is
copied once per direction (`h2d` / `d2h`, latency + bytes / bandwidth), when the whole part that makes it
has ended (the part model the schedulers optimise). A device-to-host copy also waits for the device ops
that read the tensor, because in the plan format a `swap_out` releases the device copy; the part graph
guarantees those readers never wait for a host reader. Graph inputs start in host memory, outputs end there;
parameters read on the GPU are uploaded once (`resident_at_start`), and every device copy is freed after
its last device reader. One input's latency is the simulated makespan, and the GPU memory a placement needs
(`Placement.gpu_bytes`) is the peak of exactly those device copies as rule 5 counts them (`gpu_need`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hybrid.device import DEFAULT_ALIGNMENT, Device
from hybrid.errors import HybridError
from hybrid.graph.order import program_order
from hybrid.placement.chain import CPU, GPU, Link
from hybrid.placement.partition import HOST, PartGraph
from hybrid.plan import Event, Plan, UnconstrainedAllocation
from hybrid.plan.events import COMPUTE, SWAP_IN, SWAP_OUT
from hybrid.plan.metrics import peak_from_intervals
from hybrid.simulator import CPU as CPU_LANE
from hybrid.simulator import simulate
from hybrid.units import round_up

COMPUTE_LANE, H2D_LANE, D2H_LANE = COMPUTE, SWAP_IN, SWAP_OUT   # the simulator's lanes are the event codes


@dataclass(frozen=True)
class Placement:
    """The one placement type every scheduler returns: a device per part, and how fast it is."""

    devices: tuple[str, ...]       # per part: "cpu" or "gpu"
    scheduler: str
    latency_s: float               # one input, host memory to host memory (simulated)
    period_s: float                # a stream of inputs pipelined across the parts (`period`)
    priority: tuple[float, ...] | None = None   # per part: issue order on its device (None: program order)
    copy_priority: tuple[tuple[int, str, float], ...] | None = None   # (tensor, "h2d"/"d2h", key): copy order
    status: str = ""               # exact schedulers: "optimal"; "feasible" when the time limit stopped them;
    #                                with a memory cap, why it is not proven optimal (`schedulers._exact_within`)
    model_s: float = math.nan      # the solver's own objective, where a solver ran
    gpu_bytes: int = 0             # GPU memory its plan needs at its peak (`gpu_need`), aligned as rule 5 counts
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def code(self) -> str:
        """`CCGG…`: the device of each part."""
        return "".join("G" if d == GPU else "C" for d in self.devices)


@dataclass
class Timed:
    """The simulated timeline of one inference under a placement: nodes are ops and copies."""

    kind: np.ndarray        # simulator lane: 0 GPU compute, 1 h2d, 2 d2h, 4 CPU compute
    ref: np.ndarray         # op index, or tensor index for copies
    start: np.ndarray
    end: np.ndarray

    @property
    def makespan(self) -> float:
        return float(self.end.max()) if len(self.end) else 0.0


def link_of(device: Device) -> Link:
    return Link(device.h2d_bytes_per_s, device.d2h_bytes_per_s, device.transfer_latency_s)


def period(pg: PartGraph, devices: tuple[str, ...] | list[str], link: Link) -> float:
    """Steady-state time between outputs when inputs are pipelined across the parts: every resource (CPU,
    GPU, each direction of the link) serves one input at a time, so the busiest sets the pace."""
    load = {CPU: 0.0, GPU: 0.0, "h2d": 0.0, "d2h": 0.0}
    for p, d in enumerate(devices):
        load[d] += float(pg.cpu_s[p] if d == CPU else pg.gpu_s[p])
    for e in pg.edges:
        src = CPU if e.src == HOST else devices[e.src]
        if src == CPU and any(devices[q] == GPU for q in e.dst):
            load["h2d"] += link.copy_s(e.bytes, GPU)
        if src == GPU and (e.out or any(devices[q] == CPU for q in e.dst)):
            load["d2h"] += link.copy_s(e.bytes, CPU)
    return max(load.values())


def _check_cpu_times(pg: PartGraph, devices: tuple[str, ...] | list[str]) -> None:
    for p, d in enumerate(devices):
        if d == CPU and not np.isfinite(pg.cpu_s[p]):
            op = next(o for o in pg.ops[p] if pg.graph.ops[o].cpu_time_s is None)
            raise HybridError(f"op {pg.graph.ops[op].id!r} has no cpu_time_s, so its part cannot run on the CPU: "
                              "capture with --device p2200 (or another preset with a host), give --cpu, or run "
                              "`hybrid profile --backend cpu`")


def simulate_placement(pg: PartGraph, devices: tuple[str, ...] | list[str], link: Link,
                       priority: tuple[float, ...] | list[float] | None = None, ns_grid: bool = False,
                       copy_priority: tuple[tuple[int, str, float], ...] | None = None) -> Timed:
    """Build the op-and-copy nodes of one inference and time them (`hybrid.simulator.simulate`).

    `priority` (per part, e.g. a solver's start times) orders the parts on each device and the copies on
    each link direction, or `copy_priority` the copies (a solver's copy starts); ties and the default follow
    program order."""
    _check_cpu_times(pg, devices)
    g = pg.graph
    a = g.arrays
    n_parts = pg.n
    prio = list(range(n_parts)) if priority is None else [float(x) for x in priority]
    part_rank = {p: k for k, p in enumerate(sorted(range(n_parts), key=lambda p: (prio[p], p)))}
    part_of = pg.part_of
    cpu_t = np.array([op.cpu_time_s if op.cpu_time_s is not None else np.nan for op in g.ops])

    kind: list[int] = []
    ref: list[int] = []
    dur: list[float] = []
    deps: list[list[int]] = []
    key: list[tuple] = []
    node_of_op = np.full(a.n_ops, -1, np.int64)
    for p, ops in enumerate(pg.ops):
        on_gpu = devices[p] == GPU
        for k, o in enumerate(ops):
            node_of_op[o] = len(kind)
            kind.append(COMPUTE_LANE if on_gpu else CPU_LANE)
            ref.append(o)
            dur.append(float(a.op_time[o] if on_gpu else cpu_t[o]))
            deps.append([])
            key.append((part_rank[p], 0, k))
    # copies: (tensor, lane) -> node
    copy_node: dict[tuple[int, int], int] = {}

    cprio = {(t, H2D_LANE if lane == "h2d" else D2H_LANE): float(x) for t, lane, x in copy_priority or ()}

    def add_copy(t: int, lane: int, after: list[int], rank: float) -> int:
        if copy_priority is not None:
            rank = cprio.get((t, lane), math.inf)
        copy_node[(t, lane)] = len(kind)
        kind.append(lane)
        ref.append(t)
        dur.append(link.copy_s(int(a.t_bytes[t]), GPU if lane == H2D_LANE else CPU))
        deps.append(after)
        key.append((rank, 1, t))
        return copy_node[(t, lane)]

    for e in pg.edges:
        src_dev = CPU if e.src == HOST else devices[e.src]
        last = [] if e.src == HOST else [int(node_of_op[pg.ops[e.src][-1]])]
        rank = -1.0 if e.src == HOST else part_rank[e.src]
        gpu_dst = [q for q in e.dst if devices[q] == GPU]
        cpu_dst = [q for q in e.dst if devices[q] == CPU]
        if src_dev == CPU and gpu_dst:
            r = min(part_rank[q] for q in gpu_dst) - 0.5 if e.src == HOST else rank
            add_copy(e.tensor, H2D_LANE, last, r)
        if src_dev == GPU and (cpu_dst or e.out):
            readers = [int(node_of_op[o]) for q in gpu_dst + [e.src] for o in pg.ops[q]
                       if e.tensor in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]]
            add_copy(e.tensor, D2H_LANE, last + readers, rank)
    # data dependencies of every op
    for o in range(a.n_ops):
        v = int(node_of_op[o])
        here = devices[part_of[o]]
        for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]:
            t = int(t)
            q = int(a.t_producer[t])
            if q < 0:
                if here == GPU and (t, H2D_LANE) in copy_node:
                    deps[v].append(copy_node[(t, H2D_LANE)])
                continue
            there = devices[part_of[q]]
            if there == here:
                deps[v].append(int(node_of_op[q]))
            else:
                lane = H2D_LANE if here == GPU else D2H_LANE
                if (t, lane) not in copy_node:   # a tensor the part graph does not carry (it should)
                    raise HybridError(f"placement: tensor {g.tensors[t].id!r} crosses devices but is no edge "
                                      "of the part graph")
                deps[v].append(copy_node[(t, lane)])
    # a part starts whole: its first op waits for everything any of its ops needs from outside the part
    for p, ops in enumerate(pg.ops):
        mine = {int(node_of_op[o]) for o in ops}
        outside = {d for o in ops for d in deps[int(node_of_op[o])] if d not in mine}
        first = int(node_of_op[ops[0]])
        deps[first] = sorted(set(deps[first]) | outside)
    n = len(kind)
    dep_ptr = np.zeros(n + 1, np.int64)
    dep_ptr[1:] = np.cumsum([len(d) for d in deps])
    dep_idx = np.array([x for d in deps for x in d], np.int64)
    order = np.array(sorted(range(n), key=lambda v: key[v]), np.int64)
    d = np.array(dur)
    if ns_grid:   # every duration in whole nanoseconds, as the CP-SAT model counts them (`cpsat`)
        d = np.round(d * 1e9)
    start, end = simulate(np.array(kind, np.int8), d, dep_ptr, dep_idx, order)
    if ns_grid:
        start, end = start / 1e9, end / 1e9
    return Timed(np.array(kind, np.int8), np.array(ref, np.int64), start, end)


@dataclass(frozen=True)
class GpuCopies:
    """The GPU's device copies under a placement, as `to_plan` writes them: the persistent tensors GPU ops read
    (`resident`, uploaded once: live the whole run, each counted once however many parts read it), and every
    other copy from its making (a GPU op's start, a swap_in's start) to its release (`free` after the last GPU
    reader, or a swap_out's end). One source for the plan's events and for the memory the schedulers count."""

    resident: list[int]
    tensor: list[int]
    alloc: list[float]
    release: list[float]
    freed: list[bool]        # released by a `free` (else by a swap_out)


def gpu_copies(pg: PartGraph, devices: tuple[str, ...] | list[str], tm: Timed) -> GpuCopies:
    g = pg.graph
    a = g.arrays
    on_gpu = np.array([devices[p] == GPU for p in pg.part_of], bool)
    made: dict[int, tuple[float, float]] = {}   # tensor -> (start, end) of its device copy's maker
    saved: dict[int, float] = {}                # tensor -> end of the swap_out that releases its device copy
    last_read: dict[int, float] = {}
    for k, r, s, e in zip(tm.kind.tolist(), tm.ref.tolist(), tm.start.tolist(), tm.end.tolist()):
        if k == COMPUTE_LANE:
            for t in a.out_idx[a.out_ptr[r]:a.out_ptr[r + 1]]:
                made[int(t)] = (s, e)
            for t in a.in_idx[a.in_ptr[r]:a.in_ptr[r + 1]]:
                last_read[int(t)] = max(last_read.get(int(t), 0.0), e)
        elif k == H2D_LANE:
            made[r] = (s, e)
        elif k == D2H_LANE:
            saved[r] = e
    resident = sorted({int(t) for o in np.nonzero(on_gpu)[0] for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]
                       if a.t_persistent[t] and g.tensors[int(t)].kind != "input"})
    out = GpuCopies(resident, [], [], [], [])
    for t, (start, done) in made.items():
        out.tensor.append(t)
        out.alloc.append(start)
        out.freed.append(t not in saved)
        out.release.append(saved[t] if t in saved else max(done, last_read.get(t, 0.0)))
    return out


def gpu_need(pg: PartGraph, tm: Timed, copies: GpuCopies, alignment_bytes: int) -> int:
    """The GPU memory a placement's plan needs: the peak of its device copies (each rounded up to the alignment)
    plus the running GPU op's workspace, swept as the validator sweeps rule 5 (`peak_from_intervals`, releases
    before allocations at one instant, within the validator's tolerance; exactly its count where no GPU op takes
    less than the tolerance, and the written plan is validated in any case)."""
    a = pg.graph.arrays
    sizes = round_up(np.asarray(a.t_bytes, dtype=np.int64), int(alignment_bytes))
    gpu_ops = np.nonzero(tm.kind == COMPUTE_LANE)[0]
    ws = a.op_ws[tm.ref[gpu_ops]] if len(gpu_ops) else np.zeros(0, np.int64)
    busy = float(np.sum(tm.end - tm.start))
    eps = 1e-9 * max(1.0, min(tm.makespan, busy))
    res = np.asarray(copies.resident, dtype=np.int64)
    ct = np.asarray(copies.tensor, dtype=np.int64)
    starts = np.concatenate([np.zeros(len(res)), np.asarray(copies.alloc, dtype=np.float64),
                             tm.start[gpu_ops][ws > 0]])
    ends = np.concatenate([np.full(len(res), np.inf), np.asarray(copies.release, dtype=np.float64),
                           tm.end[gpu_ops][ws > 0]])
    nbytes = np.concatenate([sizes[res], sizes[ct], ws[ws > 0]]).astype(np.int64)
    return peak_from_intervals(starts, ends, nbytes, eps)


def _alignment(pg: PartGraph) -> int:
    return pg.graph.device.alignment_bytes if pg.graph.device is not None else DEFAULT_ALIGNMENT


def latency(pg: PartGraph, devices: tuple[str, ...] | list[str], link: Link,
            priority: tuple[float, ...] | list[float] | None = None,
            copy_priority: tuple[tuple[int, str, float], ...] | None = None) -> float:
    return simulate_placement(pg, devices, link, priority, copy_priority=copy_priority).makespan


def evaluate(pg: PartGraph, devices: tuple[str, ...] | list[str], link: Link, scheduler: str,
             priority: tuple[float, ...] | list[float] | None = None,
             copy_priority: tuple[tuple[int, str, float], ...] | None = None, **kw) -> Placement:
    devices = tuple(devices)
    tm = simulate_placement(pg, devices, link, priority, copy_priority=copy_priority)
    need = gpu_need(pg, tm, gpu_copies(pg, devices, tm), _alignment(pg))
    return Placement(devices, scheduler, tm.makespan,
                     period(pg, devices, link), None if priority is None else tuple(float(x) for x in priority),
                     copy_priority, gpu_bytes=need, **kw)


def to_plan(pg: PartGraph, placement: Placement, device: Device, link: Link | None = None) -> Plan:
    """The placement as a `hybrid-plan/1` plan: compute events on `compute` or `cpu`, copies on h2d/d2h; the
    GPU's device copies laid out in an arena (`hybrid.arena.layout.laid_out`)."""
    g = pg.graph
    a = g.arrays
    link = link_of(device) if link is None else link
    tm = simulate_placement(pg, placement.devices, link, placement.priority,
                            copy_priority=placement.copy_priority)
    on_gpu = np.array([placement.devices[p] == GPU for p in pg.part_of])
    events: list[Event] = []
    op_start = np.zeros(a.n_ops)
    for v in range(len(tm.kind)):
        k, r, s, e = int(tm.kind[v]), int(tm.ref[v]), float(tm.start[v]), float(tm.end[v])
        if k in (COMPUTE_LANE, CPU_LANE):
            op_start[r] = s
            events.append(Event("compute", s, e, op=g.ops[r].id, on_cpu=k == CPU_LANE))
        elif k == H2D_LANE:
            events.append(Event("swap_in", s, e, tensor=g.tensors[r].id))
        else:
            events.append(Event("swap_out", s, e, tensor=g.tensors[r].id))
    copies = gpu_copies(pg, placement.devices, tm)
    resident = copies.resident
    for t, at, freed in zip(copies.tensor, copies.release, copies.freed):
        if freed:
            events.append(Event("free", at, at, tensor=g.tensors[t].id))
    topo = {int(o): k for k, o in enumerate(program_order(g))}
    schedule = sorted(range(a.n_ops), key=lambda o: (op_start[o], topo[o]))
    events.sort(key=lambda ev: (ev.start_s, ev.kind == "free", ev.end_s))
    makespan = max((ev.end_s for ev in events), default=0.0)
    ideal = math.fsum(ev.end_s - ev.start_s for ev in events if ev.kind == "compute")
    plan = Plan(
        graph=g.name, graph_sha256=g.sha256, device=device,
        planner={"name": f"place-{placement.scheduler}", "devices": placement.code,
                 "parts": pg.describe(), "status": placement.status},
        schedule=[g.ops[o].id for o in schedule], allocation=UnconstrainedAllocation(),
        resident_at_start=[g.tensors[t].id for t in resident], events=events, makespan_s=makespan,
        metrics={"ideal_s": ideal, "latency_s": makespan, "period_s": placement.period_s,
                 "gpu_ops": int(on_gpu.sum()), "cpu_ops": int((~on_gpu).sum()),
                 "bytes_h2d": int(sum(a.t_bytes[int(tm.ref[v])] for v in np.nonzero(tm.kind == H2D_LANE)[0])),
                 "bytes_d2h": int(sum(a.t_bytes[int(tm.ref[v])] for v in np.nonzero(tm.kind == D2H_LANE)[0]))})
    from hybrid.arena.layout import laid_out

    return laid_out(g, plan)    # the GPU's copies at offsets, where they fit its memory

