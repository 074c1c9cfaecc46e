"""Placing a chain of parts on the CPU and the GPU for one input's latency.

The input starts in host memory and the output must end there. Parts run one after another; where two
consecutive parts sit on different devices, the tensor crossing their cut is copied (latency + bytes /
bandwidth, host-to-device or device-to-host), and so is the input before a first part on the GPU and the
output after a last part on the GPU. Parameters are uploaded once, before any inference, and cost nothing.

Schedulers for latency, one `ChainPlacement` out of each (and `best_period` for the throughput of a stream of
inputs pipelined across the parts):
- `all_on`: every part on one device;
- `greedy`: the paper's rule for a chain (its critical path is the chain itself): each part on the device
  that runs it faster, then a correction loop that tries single flips in part order and keeps each that
  lowers the latency, until `rounds` passes in a row (default 3; the paper's x is not given) gain nothing;
- `exact`: dynamic programming over (part, device) — the optimum, in O(parts).
"""
from __future__ import annotations

from dataclasses import dataclass

CPU, GPU = "cpu", "gpu"


@dataclass(frozen=True)
class Link:
    h2d_bytes_per_s: float
    d2h_bytes_per_s: float
    latency_s: float = 0.0

    def copy_s(self, nbytes: int, to: str) -> float:
        return self.latency_s + nbytes / (self.h2d_bytes_per_s if to == GPU else self.d2h_bytes_per_s)


@dataclass(frozen=True)
class ChainCosts:
    """Per part: CPU and GPU time and the bytes crossing its cut (the last: the output); the input's bytes."""

    cpu_s: tuple[float, ...]
    gpu_s: tuple[float, ...]
    cut_bytes: tuple[int, ...]
    input_bytes: int

    @property
    def n(self) -> int:
        return len(self.cpu_s)

    def time(self, i: int, dev: str) -> float:
        return self.cpu_s[i] if dev == CPU else self.gpu_s[i]


@dataclass(frozen=True)
class ChainPlacement:
    devices: tuple[str, ...]
    latency_s: float                 # one input, host to host
    scheduler: str
    period_s: float = float("nan")   # pipelined stream of inputs: time between outputs (`period`), where computed


def latency(c: ChainCosts, devices: tuple[str, ...] | list[str], link: Link) -> float:
    total = link.copy_s(c.input_bytes, GPU) if devices[0] == GPU else 0.0
    for i, dev in enumerate(devices):
        total += c.time(i, dev)
        nxt = devices[i + 1] if i + 1 < c.n else CPU  # the output goes back to the host
        if nxt != dev:
            total += link.copy_s(c.cut_bytes[i], nxt)
    return total


def all_on(c: ChainCosts, link: Link, dev: str) -> ChainPlacement:
    d = (dev,) * c.n
    return ChainPlacement(d, latency(c, d, link), f"all-{dev}")


def greedy(c: ChainCosts, link: Link, rounds: int = 3) -> ChainPlacement:
    devs = [CPU if c.cpu_s[i] <= c.gpu_s[i] else GPU for i in range(c.n)]
    best = latency(c, devs, link)
    idle = 0
    while idle < rounds:
        gained = False
        for i in range(c.n):
            devs[i] = GPU if devs[i] == CPU else CPU
            t = latency(c, devs, link)
            if t < best - 1e-15:
                best, gained = t, True
            else:
                devs[i] = GPU if devs[i] == CPU else CPU
        idle = 0 if gained else idle + 1
    return ChainPlacement(tuple(devs), best, "greedy")


def exact(c: ChainCosts, link: Link) -> ChainPlacement:
    """Least latency over all 2^n placements by dynamic programming on the device of each part."""
    devs = (CPU, GPU)
    # cost[d]: least time to finish parts 0..i with part i on d (its output still there)
    cost = {d: (link.copy_s(c.input_bytes, GPU) if d == GPU else 0.0) + c.time(0, d) for d in devs}
    back: list[dict[str, str]] = []
    for i in range(1, c.n):
        new, arg = {}, {}
        for d in devs:
            cands = [(cost[p] + (link.copy_s(c.cut_bytes[i - 1], d) if p != d else 0.0), p) for p in devs]
            v, p = min(cands)
            new[d], arg[d] = v + c.time(i, d), p
        cost = new
        back.append(arg)
    end = {d: cost[d] + (link.copy_s(c.cut_bytes[-1], CPU) if d == GPU else 0.0) for d in devs}
    d = min(devs, key=lambda x: (end[x], x))
    out = [d]
    for arg in reversed(back):
        d = arg[d]
        out.append(d)
    placed = tuple(reversed(out))
    return ChainPlacement(placed, latency(c, placed, link), "exact")


def heft_chain(c: ChainCosts, link: Link) -> ChainPlacement:
    """HEFT (`hybrid.placement.heft`) on the chain, with the input and the output as zero-time tasks pinned to
    the host (a cost on the GPU no schedule pays) so that it pays the round trip as `latency` does."""
    import numpy as np

    from hybrid.placement.heft import TaskGraph, heft

    never = 1e9
    cost = np.array([[0.0, never]] + [[c.cpu_s[i], c.gpu_s[i]] for i in range(c.n)] + [[0.0, never]])
    sizes = [c.input_bytes] + list(c.cut_bytes)
    # one cost per edge: the link is symmetric in every preset, so h2d and d2h times agree
    comm = {(i, i + 1): link.copy_s(sizes[i], GPU) for i in range(c.n + 1)}
    s = heft(TaskGraph(cost, comm))
    devices = tuple(GPU if p == 1 else CPU for p in s.proc[1:-1])
    return ChainPlacement(devices, latency(c, devices, link), "heft")


def period(c: ChainCosts, devices: tuple[str, ...] | list[str], link: Link) -> float:
    """Steady-state time between outputs when a stream of inputs is pipelined across the parts: each resource
    (CPU, GPU, the host-to-device and the device-to-host direction of the link) serves one input at a time, so
    the busiest one sets the pace (the throughput objective: inputs per second = 1 / period)."""
    load = {CPU: 0.0, GPU: 0.0, "h2d": 0.0, "d2h": 0.0}
    if devices[0] == GPU:
        load["h2d"] += link.copy_s(c.input_bytes, GPU)
    for i, dev in enumerate(devices):
        load[dev] += c.time(i, dev)
        nxt = devices[i + 1] if i + 1 < c.n else CPU
        if nxt != dev:
            load["h2d" if nxt == GPU else "d2h"] += link.copy_s(c.cut_bytes[i], nxt)
    return max(load.values())


MAX_EXACT_PERIOD_PARTS = 20


def best_period(c: ChainCosts, link: Link) -> ChainPlacement:
    """The placement with the shortest pipeline period, by exhaustive search (a min-max over four additive loads
    has no chain dynamic programme as simple as latency's); at most MAX_EXACT_PERIOD_PARTS parts."""
    if c.n > MAX_EXACT_PERIOD_PARTS:
        raise ValueError(f"{c.n} parts: the exhaustive period search takes at most {MAX_EXACT_PERIOD_PARTS}; "
                         "use the key-operator cuts")
    best: tuple[float, tuple[str, ...]] | None = None
    for mask in range(1 << c.n):
        devs = tuple(GPU if mask >> i & 1 else CPU for i in range(c.n))
        p = period(c, devs, link)
        if best is None or p < best[0] - 1e-15:
            best = (p, devs)
    assert best is not None
    return ChainPlacement(best[1], latency(c, best[1], link), "exact-period", best[0])
