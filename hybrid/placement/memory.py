"""The GPU's memory as a placement constraint.

Parameters are uploaded once, so they cost no time per inference, but a GPU part's parameters stay resident for
the whole run (`timing.to_plan`): GPU memory is the one place they count. A placement needs, on the GPU, its GPU
parts' persistent tensors (each once, however many parts read it) plus the activation copies live at once, read
off its simulated timeline exactly as the validator reads rule 5 (`timing.gpu_need`, `Placement.gpu_bytes`).

- `Budget`: the usable bytes and the alignment the validator counts with;
- `floor`: the placement needing least (every part that can run on the CPU there); when it does not fit, no
  scheduler can place the graph (`DoesNotFit`);
- `repair`: move GPU parts to the CPU, the least time lost per byte freed first, until the placement fits (the
  greedy scheduler's start and HEFT's result, when memory binds);
- `Cut`: the linear relaxation CP-SAT adds (`cpsat`): the resident bytes of the GPU parts plus the largest
  activation floor of one GPU part must fit. Every placement that fits satisfies it, so an optimum of the
  relaxed model that fits is optimal; one that does not is excluded and the cap lowered (`schedulers.exact`).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from hybrid.device import Device
from hybrid.errors import InfeasibleError
from hybrid.placement.chain import CPU, GPU, Link
from hybrid.placement.partition import PartGraph
from hybrid.placement.timing import Placement, evaluate
from hybrid.signals import received
from hybrid.units import format_bytes_apart, round_up

LATENCY = "latency"


class DoesNotFit(InfeasibleError):
    """A scheduler found no placement within the GPU's usable memory; `need` is the least it found."""

    def __init__(self, need: int, usable: int, why: str = "", head: str = "does not fit") -> None:
        self.need, self.usable = int(need), int(usable)
        need_t, usable_t = format_bytes_apart(self.need, self.usable)
        super().__init__(f"{head}: needs {need_t} of {usable_t} usable"
                         + (f" ({why})" if why else ""))


@dataclass(frozen=True)
class Budget:
    """What a placement's GPU copies may fill: `device.usable_bytes`, each copy rounded up to the alignment."""

    usable_bytes: int
    alignment_bytes: int

    @classmethod
    def of(cls, device: Device) -> "Budget":
        return cls(int(device.usable_bytes), int(device.alignment_bytes))

    def fits(self, p: Placement) -> bool:
        return p.gpu_bytes <= self.usable_bytes


def score(p: Placement, objective: str) -> float:
    """What a placement is judged by: its latency, or its pipelined period for throughput."""
    return p.latency_s if objective == LATENCY else p.period_s


def movable(pg: PartGraph) -> list[bool]:
    """Per part: whether it can run on the CPU (every op has a cpu_time_s)."""
    return [bool(np.isfinite(pg.cpu_s[p])) for p in range(pg.n)]


def floor(pg: PartGraph, link: Link) -> Placement:
    """The placement needing the least GPU memory: on the GPU only the parts that cannot run on the CPU."""
    return evaluate(pg, tuple(CPU if m else GPU for m in movable(pg)), link, "floor")


def out_of_time(deadline: float | None) -> bool:
    """Whether the time limit (`deadline`, time.monotonic()) has passed or a Ctrl-C/SIGTERM came: the placement
    searches' one stop check."""
    return received() or (deadline is not None and time.monotonic() >= deadline)


def repair(pg: PartGraph, start: Placement, link: Link, budget: Budget, objective: str = LATENCY,
           deadline: float | None = None) -> Placement:
    """`start` moved into the memory: while it does not fit, move to the CPU the GPU part that loses the least
    time (latency or period) per byte of GPU memory it frees (a move that gains time first); where no single
    move frees anything, the `floor` placement. The scheduler's name and part priority stay.

    Each move weighs every GPU part afresh (an evaluation each: Inception-v4-4 at --parts fine and 25% of its
    peak, 98 parts, took 3,100 evaluations, 12 s, past a 5 s limit). Past `deadline` (time.monotonic()) the
    parts go in the order of the last weighing instead, one evaluation a move, as after a Ctrl-C / SIGTERM."""
    cur = start
    can = movable(pg)
    while not budget.fits(cur):
        ranked: list[tuple[float, int, Placement]] = []
        for p in range(pg.n):
            if cur.devices[p] != GPU or not can[p]:
                continue
            devs = list(cur.devices)
            devs[p] = CPU
            cand = evaluate(pg, devs, link, cur.scheduler, cur.priority)
            freed = cur.gpu_bytes - cand.gpu_bytes
            if freed <= 0:
                continue
            ranked.append(((score(cand, objective) - score(cur, objective)) / freed, p, cand))
        if not ranked:
            low = floor(pg, link)
            if not budget.fits(low):
                raise not_even_floor(pg, low, budget)
            return evaluate(pg, low.devices, link, cur.scheduler, cur.priority)
        ranked.sort(key=lambda r: (r[0], r[1]))   # least time lost per byte freed; ties: the first part
        cur = ranked[0][2]
        if out_of_time(deadline) and not budget.fits(cur):
            devs = list(cur.devices)
            for _, p, _ in ranked[1:]:
                devs[p] = CPU
                cur = evaluate(pg, devs, link, cur.scheduler, cur.priority)
                if budget.fits(cur):
                    break
    return cur


def not_even_floor(pg: PartGraph, low: Placement, budget: Budget) -> DoesNotFit:
    """The one error when no placement fits: what the least-memory placement needs, why, and what to do."""
    g = pg.graph
    pinned = [p for p, m in enumerate(movable(pg)) if not m]
    if pinned:
        op = next(g.ops[o].id for p in pinned for o in pg.ops[p] if g.ops[o].cpu_time_s is None)
        why = (f"with every part on the CPU but part{'s' if len(pinned) > 1 else ''} "
               f"{', '.join(str(p) for p in pinned)}, whose ops lack cpu_time_s (op {op!r} first); give the GPU "
               "more memory, or those ops CPU times: --cpu PRESET, `hybrid profile --backend cpu`")
    else:
        why = "with every part on the CPU; give the GPU more memory"
    return DoesNotFit(low.gpu_bytes, budget.usable_bytes, why, head="no placement fits the GPU's memory")


@dataclass(frozen=True)
class Cut:
    """CP-SAT's linear memory constraint: sum over resident tensors t of bytes_t * [a GPU part reads t] + A <=
    `cap`, with A >= `act[p]` for each GPU part p. `act[p]` is a floor on the activation bytes live at once while
    p runs on the GPU (its largest op's non-resident inputs and outputs, plus workspace), so every placement
    that fits the memory satisfies the constraint at cap = usable; `cap` is lowered, and the solver's placement
    excluded (`exclude`), when that placement still does not fit."""

    cap: int
    params: tuple[tuple[int, int, tuple[int, ...]], ...]   # (tensor, aligned bytes, parts reading it)
    act: tuple[int, ...]
    exclude: tuple[tuple[str, ...], ...] = ()   # device vectors whose placement was found not to fit


def cut(pg: PartGraph, budget: Budget, cap: int | None = None) -> Cut:
    g = pg.graph
    a = g.arrays
    size = round_up(np.asarray(a.t_bytes, dtype=np.int64), budget.alignment_bytes)
    readers: dict[int, set[int]] = {}
    act = []
    for p, ops in enumerate(pg.ops):
        worst = 0
        for o in ops:
            ins = {int(t) for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]}
            for t in ins:
                if a.t_persistent[t] and g.tensors[t].kind != "input":
                    readers.setdefault(t, set()).add(p)
            live_in = sum(int(size[t]) for t in ins if not (a.t_persistent[t] and g.tensors[t].kind != "input"))
            outs = {int(t) for t in a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]]} - ins
            made = sum(int(size[t]) for t in outs) + int(a.op_ws[o])
            # an op that takes no time frees its inputs at its start (releases before allocations at one instant)
            worst = max(worst, live_in + made if float(a.op_time[o]) > 1e-6 else max(live_in, made))
        act.append(worst)
    params = tuple((t, int(size[t]), tuple(sorted(ps))) for t, ps in sorted(readers.items()))
    return Cut(budget.usable_bytes if cap is None else int(cap), params, tuple(act))
