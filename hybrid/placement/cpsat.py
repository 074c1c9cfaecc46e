"""Exact placement of a part graph with OR-Tools CP-SAT: devices and the two link directions as resources.

Latency model (one input, host to host), times in integer nanoseconds:
- part p runs on the GPU (g_p) or the CPU, as one interval of that device's time; the CPU, the GPU, the h2d
  and the d2h direction each run one thing at a time (NoOverlap);
- a part starts after every part it reads from ends; a tensor that crosses devices is copied once per
  direction, after the part that makes it ends, and its readers on the other side start after the copy;
- a device-to-host copy also starts after each GPU reader of the tensor has read it (in the plan format a
  swap_out releases the device copy), at that reader's start plus its ops up to the last one reading it;
- graph inputs start in host memory; an output made on the GPU is copied back; latency >= every part's
  end and every output copy's end. Minimise the latency.
This is the model `hybrid.placement.timing` simulates, so a solution's simulated latency is at most its
objective (plus rounding to nanoseconds). Throughput model: minimise the busiest resource's load per input.
Where the GPU's memory binds, both take `memory.Cut`: resident bytes of the GPU parts plus one part's
activation floor within a cap (`_memory`), a relaxation the schedulers tighten until the placement fits.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hybrid.errors import HybridError
from hybrid.placement.chain import CPU, GPU, Link
from hybrid.placement.memory import Cut
from hybrid.placement.partition import HOST, PartGraph
from hybrid.signals import cp_sat_solver

NS = 1e9


@dataclass(frozen=True)
class Solved:
    devices: tuple[str, ...]
    starts: tuple[float, ...]     # per part, seconds (the solver's schedule; used as issue order)
    objective_s: float
    bound_s: float
    status: str                   # "optimal" or "feasible"
    copy_starts: tuple[tuple[int, str, float], ...] = ()   # (tensor, "h2d" | "d2h", start s) of each copy


def _ns(x: float) -> int:
    return int(round(x * NS))


def _status(solver, st) -> str:  # noqa: ANN001
    from ortools.sat.python import cp_model

    if st == cp_model.OPTIMAL:
        return "optimal"
    if st == cp_model.FEASIBLE:
        return "feasible"
    return solver.StatusName(st).lower()


def _solve(m, time_limit_s: float, workers: int, seed: int, deadline: float | None = None):  # noqa: ANN001, ANN202
    """(solver, status). The limit is CP-SAT's deterministic time (its work counter, about a second each on a
    desktop core), with one worker by default: the same seed and budget give the same placement whatever the
    machine's load. Wall-clock time is capped too, generously, so a slow machine still returns, and at
    `deadline` (time.monotonic(); a command's --time-limit), which then decides the placement."""
    import time

    s = cp_sat_solver()
    s.parameters.max_deterministic_time = float(time_limit_s)
    wall = 4.0 * float(time_limit_s) + 10.0
    if deadline is not None:
        wall = min(wall, max(0.5, deadline - time.monotonic()))
    from hybrid.signals import received, stoppable

    if received():   # stopped before this solve began: its hint, or what half a second finds
        wall = min(wall, 0.5)
    s.parameters.max_time_in_seconds = wall
    s.parameters.num_workers = int(workers)
    s.parameters.random_seed = int(seed)
    status = _status(s, stoppable(lambda: s.Solve(m), s.StopSearch))  # Ctrl-C/SIGTERM: its best so far
    if status not in ("optimal", "feasible"):
        raise HybridError(f"CP-SAT found no placement ({status}) within {time_limit_s:g} s; give a longer --time-limit")
    return s, status


def _memory(m, g: list, cut: Cut) -> None:  # noqa: ANN001 - a CpModel
    """Resident tensors once each (r_t >= g_p for every part p reading t) plus A >= act[p] g_p within the cap."""
    terms = []
    for t, nbytes, parts in cut.params:
        r = m.NewBoolVar(f"r{t}")
        for p in parts:
            m.AddImplication(g[p], r)
        terms.append(nbytes * r)
    act = m.NewIntVar(0, max(max(cut.act, default=0), 0), "activations")
    for p, floor_ in enumerate(cut.act):
        if floor_:
            m.Add(act >= floor_ * g[p])
    m.Add(sum(terms) + act <= cut.cap)
    for devices in cut.exclude:   # placements already found not to fit
        m.AddBoolOr([g[p].Not() if d == GPU else g[p] for p, d in enumerate(devices)])


def part_ns(pg: PartGraph, p: int, gpu: bool) -> int | None:
    """A part's time in whole nanoseconds, op by op as the simulator on the nanosecond grid adds it."""
    ops = pg.graph.ops
    if gpu:
        return sum(_ns(float(pg.graph.arrays.op_time[o])) for o in pg.ops[p])
    if any(ops[o].cpu_time_s is None for o in pg.ops[p]):
        return None
    return sum(_ns(float(ops[o].cpu_time_s)) for o in pg.ops[p])


def _read_offset_ns(pg: PartGraph, q: int, t: int) -> int:
    """Nanoseconds from part q's start to the end of its last op that reads tensor t (on the GPU)."""
    a = pg.graph.arrays
    acc, last = 0, 0
    for o in pg.ops[q]:
        acc += _ns(float(a.op_time[o]))
        if t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]:
            last = acc
    return last


@dataclass(frozen=True)
class Hint:
    """A known schedule to start from (a heuristic's simulated timeline): devices, part starts and copy
    starts keyed by (tensor, "h2d" | "d2h"), in seconds. CP-SAT begins from it, so the optimum it returns is
    never worse than the hint."""

    devices: tuple[str, ...]
    part_start: tuple[float, ...]
    copy_start: dict[tuple[int, str], float]
    latency_s: float


def solve_latency(pg: PartGraph, link: Link, time_limit_s: float = 60.0, hint: Hint | None = None,
                  workers: int = 1, seed: int = 0, deadline: float | None = None, cut: Cut | None = None) -> Solved:
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    n = pg.n
    dg = [part_ns(pg, p, True) for p in range(n)]
    dc = [part_ns(pg, p, False) for p in range(n)]
    copies_ns = sum(_ns(link.copy_s(e.bytes, GPU)) + _ns(link.copy_s(e.bytes, CPU)) for e in pg.edges)
    horizon = sum(max(dg[p], dc[p] or 0) for p in range(n)) + copies_ns + 1
    g = [m.NewBoolVar(f"g{p}") for p in range(n)]
    s = [m.NewIntVar(0, horizon, f"s{p}") for p in range(n)]
    end = [s[p] + dg[p] * g[p] + (dc[p] or 0) * (1 - g[p]) for p in range(n)]
    gpu_iv, cpu_iv, h2d_iv, d2h_iv = [], [], [], []
    for p in range(n):
        gpu_iv.append(m.NewOptionalFixedSizeIntervalVar(s[p], dg[p], g[p], f"G{p}"))
        if dc[p] is None:
            m.Add(g[p] == 1)
        else:
            cpu_iv.append(m.NewOptionalFixedSizeIntervalVar(s[p], dc[p], g[p].Not(), f"C{p}"))
    lat = m.NewIntVar(0, horizon, "latency")
    hints: list[tuple] = []   # (var, value) pairs from the hint
    copy_vars: list[tuple] = []

    def copy(on, after, dur: int, ivs: list, t: int, lane: str):  # noqa: ANN001, ANN202
        """An optional copy of tensor t on one link direction, present iff `on`, not before `after`."""
        start = m.NewIntVar(0, horizon, f"{lane}{t}")
        m.Add(start >= after).OnlyEnforceIf(on)
        ivs.append(m.NewOptionalFixedSizeIntervalVar(start, dur, on, f"{lane}-iv{t}"))
        copy_vars.append((on, start, t, lane))
        if hint is not None:
            at = hint.copy_start.get((t, lane))
            hints.append((on, int(at is not None)))
            hints.append((start, _ns(at) if at is not None else 0))
        return start
    for p in range(n):
        m.Add(lat >= end[p])
    for k, e in enumerate(pg.edges):
        ch, cd = _ns(link.copy_s(e.bytes, GPU)), _ns(link.copy_s(e.bytes, CPU))
        if e.src == HOST:
            h = m.NewBoolVar(f"h{k}")
            m.AddMaxEquality(h, [g[q] for q in e.dst])
            hs = copy(h, 0, ch, h2d_iv, e.tensor, "h2d")
            for q in e.dst:
                m.Add(s[q] >= hs + ch).OnlyEnforceIf(g[q])
            continue
        p = e.src
        for q in e.dst:
            m.Add(s[q] >= end[p])
        if e.dst:   # host to device: p on the CPU, some reader on the GPU
            h = m.NewBoolVar(f"h{k}")
            for q in e.dst:
                m.AddBoolOr([h, g[p], g[q].Not()])
            m.AddImplication(h, g[p].Not())
            m.AddBoolOr([h.Not()] + [g[q] for q in e.dst])
            hs = copy(h, end[p], ch, h2d_iv, e.tensor, "h2d")
            for q in e.dst:
                m.Add(s[q] >= hs + ch).OnlyEnforceIf([g[q], g[p].Not()])
        d = m.NewBoolVar(f"d{k}")   # device to host: p on the GPU, and an output or some reader on the CPU
        m.AddImplication(d, g[p])
        if e.out:
            m.AddImplication(g[p], d)
        else:
            for q in e.dst:
                m.AddBoolOr([d, g[p].Not(), g[q]])
            m.AddBoolOr([d.Not()] + [g[q].Not() for q in e.dst])
        ds = copy(d, end[p], cd, d2h_iv, e.tensor, "d2h")
        for q in e.dst:
            m.Add(s[q] >= ds + cd).OnlyEnforceIf([g[p], g[q].Not()])
            m.Add(ds >= s[q] + _read_offset_ns(pg, q, e.tensor)).OnlyEnforceIf([d, g[q]])
        if e.out:
            m.Add(lat >= ds + cd).OnlyEnforceIf(d)
    for ivs in (gpu_iv, cpu_iv, h2d_iv, d2h_iv):
        if ivs:
            m.AddNoOverlap(ivs)
    if cut is not None:
        _memory(m, g, cut)
    m.Minimize(lat)
    if hint is not None:
        for p in range(n):
            m.AddHint(g[p], hint.devices[p] == GPU)
            m.AddHint(s[p], _ns(hint.part_start[p]))
        for var, val in hints:
            m.AddHint(var, val)
        m.AddHint(lat, _ns(hint.latency_s))
    solver, status = _solve(m, time_limit_s, workers, seed, deadline)
    devices = tuple(GPU if solver.Value(g[p]) else CPU for p in range(n))
    starts = tuple(solver.Value(s[p]) / NS for p in range(n))
    copies = tuple((t, lane, solver.Value(st_) / NS) for on, st_, t, lane in copy_vars if solver.Value(on))
    return Solved(devices, starts, solver.ObjectiveValue() / NS, solver.BestObjectiveBound() / NS, status, copies)


def solve_period(pg: PartGraph, link: Link, time_limit_s: float = 60.0, workers: int = 1, seed: int = 0,
                 deadline: float | None = None, cut: Cut | None = None) -> Solved:
    """Least pipeline period: the busiest of CPU, GPU, h2d and d2h, summed per input (`timing.period`)."""
    from ortools.sat.python import cp_model

    m = cp_model.CpModel()
    n = pg.n
    g = [m.NewBoolVar(f"g{p}") for p in range(n)]
    for p in range(n):
        if not np.isfinite(pg.cpu_s[p]):
            m.Add(g[p] == 1)
    load = {r: [] for r in ("cpu", "gpu", "h2d", "d2h")}
    for p in range(n):
        load["gpu"].append(_ns(pg.gpu_s[p]) * g[p])
        if np.isfinite(pg.cpu_s[p]):
            load["cpu"].append(_ns(pg.cpu_s[p]) * (1 - g[p]))
    for k, e in enumerate(pg.edges):
        if e.dst:
            h = m.NewBoolVar(f"h{k}")
            if e.src == HOST:
                m.AddMaxEquality(h, [g[q] for q in e.dst])
            else:
                for q in e.dst:
                    m.AddBoolOr([h, g[e.src], g[q].Not()])
            load["h2d"].append(_ns(link.copy_s(e.bytes, GPU)) * h)
        if e.src != HOST:
            d = m.NewBoolVar(f"d{k}")
            if e.out:
                m.Add(d >= g[e.src])
            for q in e.dst:
                m.AddBoolOr([d, g[e.src].Not(), g[q]])
            load["d2h"].append(_ns(link.copy_s(e.bytes, CPU)) * d)
    total = sum(_ns(x) for x in pg.gpu_s) + sum(_ns(x) for x in pg.cpu_s if np.isfinite(x)) + \
        sum(_ns(link.copy_s(e.bytes, GPU)) + _ns(link.copy_s(e.bytes, CPU)) for e in pg.edges) + 1
    per = m.NewIntVar(0, total, "period")
    for terms in load.values():
        if terms:
            m.Add(per >= sum(terms))
    if cut is not None:
        _memory(m, g, cut)
    m.Minimize(per)
    solver, status = _solve(m, time_limit_s, workers, seed, deadline)
    devices = tuple(GPU if solver.Value(g[p]) else CPU for p in range(n))
    return Solved(devices, tuple(math.nan for _ in range(n)), solver.ObjectiveValue() / NS,
                  solver.BestObjectiveBound() / NS, status)
