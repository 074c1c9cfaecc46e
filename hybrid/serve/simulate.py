"""Serving several models on one GPU (SwapAdvisor §6.3, Figure 8), as a discrete-event simulation.

Requests arrive as a Poisson process at `rate` per second. As in the paper ("batches of clients are assigned to
models at random"), every `batch` consecutive arrivals form a batch, released when its last request arrives and
given to one model drawn uniformly at random. One GPU serves batches first come, first served, one at a time;
a request's latency is its batch's completion time less its own arrival. The arrival times and model draws come
from one seeded generator and are the same for every policy (common random numbers), so policies differ only in
service times:

- `not-shared`: every model's parameters stay resident (each model as if alone on the GPU, or memory for all):
  a batch takes the model's compute time (`ModelCosts.ideal_s`). The paper's "not_shared".
- `time-shared`: GPU memory holds whole models. Parameters of the models served last stay resident (least
  recently used first out) while they fit beside the largest model's activations (and, with `resident`, at most
  that many: the paper's baseline holds one); a batch for a model that is not resident first copies all its
  parameters in (`param_bytes / h2d`, not overlapped with compute), then computes.
- `swapping`: each model runs the swap plan made for its share of memory (`ModelCosts.swap_s`): SwapAdvisor.

Service times are compute only, as in the paper: a request's input upload and its output download are not
counted (`ModelCosts.input_bytes` and `output_bytes` say how many bytes a batch would move).

The simulation is a pure function of its inputs (no I/O, no clocks): `simulate_serving`.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from hybrid.errors import HybridError
from hybrid.units import format_bytes

POLICIES: tuple[str, ...] = ("not-shared", "time-shared", "swapping")
# The most requests one rate may be expected to bring (rate x duration): each is a few float64 arrays'
# entries and a step of the service loop, so 10 million is about a gigabyte and a minute; beyond it a run
# would be killed for memory rather than answer.
MAX_REQUESTS = 10_000_000


def check_arrivals(rates: Sequence[float], duration_s: float) -> None:
    """Refuse rates that are not finite and positive, a window that is not, and a rate x duration beyond
    MAX_REQUESTS, before anything is allocated (an infinite rate has no Poisson gaps to draw)."""
    for r in rates:
        if isinstance(r, bool) or not isinstance(r, numbers.Real) or not (math.isfinite(r) and r > 0):
            raise HybridError(f"--rate {r!r}: must be a finite positive number of requests per second, "
                              "e.g. --rate 100")
    if not (math.isfinite(duration_s) and duration_s > 0):
        raise HybridError(f"--duration must be positive and finite, got {duration_s!r} s; e.g. --duration 60s")
    for r in rates:
        expected = r * duration_s
        if expected > MAX_REQUESTS:
            raise HybridError(f"--rate {r:g} x --duration {duration_s:g}s is {expected:.3g} expected requests, more "
                              f"than the {MAX_REQUESTS:,} one simulation can hold; lower --rate or --duration")


@dataclass(frozen=True)
class ModelCosts:
    """What serving one model costs on the GPU, per batch (seconds) and in bytes."""

    name: str
    ideal_s: float          # compute only: all tensors resident
    swap_s: float | None    # the makespan of its swap plan at its share of memory; None: no plan was made
    param_bytes: int        # what time-sharing copies in when the model is not resident
    workspace_bytes: int    # device bytes it needs beyond its parameters while it runs (activations, inputs)
    input_bytes: int = 0    # a batch's inputs, uploaded from the host: not counted in any service time
    output_bytes: int = 0   # a batch's outputs, downloaded to the host: not counted in any service time

    def __post_init__(self) -> None:
        if not (self.ideal_s > 0 and (self.swap_s is None or self.swap_s > 0)):
            raise HybridError(f"model {self.name!r}: ideal_s and swap_s must be positive")
        if self.swap_s is not None and self.swap_s < self.ideal_s * (1 - 1e-9):
            raise HybridError(f"model {self.name!r}: swap_s {self.swap_s} is below its ideal {self.ideal_s}")


@dataclass(frozen=True)
class ServeConfig:
    """One serving experiment: arrival rates (requests/s), requests per batch, simulated seconds, seed, the GPU's
    memory for models and its host-to-device bandwidth, and the policies to compare."""

    rates: tuple[float, ...]
    batch: int = 1
    duration_s: float = 60.0
    seed: int = 1
    memory_bytes: int = 16 << 30
    h2d_bytes_per_s: float = 12e9
    policies: tuple[str, ...] = POLICIES
    resident: int | None = None   # time-shared: at most this many models resident (the paper's baseline: 1)

    def __post_init__(self) -> None:
        if not self.rates or any(not (r > 0) for r in self.rates):
            raise HybridError(f"--rate must be positive requests per second, got {list(self.rates)}")
        if self.batch < 1:
            raise HybridError(f"--batch must be at least 1, got {self.batch}")
        if not self.duration_s > 0:
            raise HybridError(f"--duration must be positive, got {self.duration_s}")
        check_arrivals(self.rates, self.duration_s)
        if self.memory_bytes <= 0:
            raise HybridError(f"--memory must be positive, got {self.memory_bytes}")
        if not self.h2d_bytes_per_s > 0:
            raise HybridError(f"--h2d must be positive, got {self.h2d_bytes_per_s}")
        if self.resident is not None and self.resident < 1:
            raise HybridError(f"--resident must be at least 1, got {self.resident}")
        bad = [p for p in self.policies if p not in POLICIES]
        if bad or not self.policies:
            raise HybridError(f"--policy {bad[0] if bad else '(none)'!r}: choose from {', '.join(POLICIES)}")


@dataclass(frozen=True)
class Workload:
    """The batches one rate produces: release times, model of each, and each request's arrival and batch."""

    arrivals: np.ndarray       # float [R], request arrival times
    batch_of: np.ndarray       # int [R], the batch each request belongs to
    release: np.ndarray        # float [B], when each batch is complete (its last arrival)
    model: np.ndarray          # int [B], which model serves it


@dataclass
class PolicyRun:
    """One policy at one rate: per-request latencies and the GPU's busy time."""

    policy: str
    rate: float
    latencies: np.ndarray
    finish_s: float
    busy_s: float
    loads: int = 0
    extra: dict = field(default_factory=dict)


def workload(rate: float, batch: int, duration_s: float, n_models: int, seed: int) -> Workload:
    """Poisson arrivals over `duration_s`, grouped into batches of `batch` consecutive requests (a trailing
    partial batch is dropped), each batch given a uniformly random model; deterministic for `seed`."""
    check_arrivals((rate,), duration_s)
    rng = np.random.default_rng([seed, int(round(rate * 1000)), batch, n_models])
    expected = rate * duration_s
    n = int(expected + 10 * np.sqrt(expected) + 10)
    gaps = rng.exponential(1.0 / rate, size=n)
    t = np.cumsum(gaps)
    while t[-1] < duration_s:  # rare: draw more
        t = np.concatenate([t, t[-1] + np.cumsum(rng.exponential(1.0 / rate, size=n))])
    arrivals = t[t < duration_s]
    n_batches = len(arrivals) // batch
    arrivals = arrivals[: n_batches * batch]
    batch_of = np.repeat(np.arange(n_batches), batch)
    release = arrivals[batch - 1::batch] if n_batches else np.zeros(0)
    model = rng.integers(0, n_models, size=n_batches)
    return Workload(arrivals, batch_of, release, model)


def resident_bytes(models: Sequence[ModelCosts]) -> int:
    """Device bytes every model's parameters need resident at once beside the largest model's workspace (one
    batch runs at a time): what not-shared would need to be more than the ideal of each model alone."""
    return sum(m.param_bytes for m in models) + max((m.workspace_bytes for m in models), default=0)


def _service_times(policy: str, models: Sequence[ModelCosts], wl: Workload, cfg: ServeConfig) -> tuple[np.ndarray, int]:
    """Seconds each batch occupies the GPU under `policy`, and how many whole-model loads time-sharing did."""
    ideal = np.array([m.ideal_s for m in models])
    if policy == "not-shared":
        return ideal[wl.model], 0
    if policy == "swapping":
        unplanned = [m.name for m in models if m.swap_s is None]
        if unplanned:
            raise HybridError(f"model {unplanned[0]!r} has no swap plan (its costs were made without swapping); "
                              "make them with model_costs(..., swapping=True) to serve the swapping policy")
        return np.array([m.swap_s for m in models])[wl.model], 0
    # time-shared: an LRU cache of whole models' parameters beside the largest model's workspace
    room = cfg.memory_bytes - max(m.workspace_bytes for m in models)
    too_big = [m.name for m in models if m.param_bytes > room]
    if too_big:
        raise HybridError(f"--memory {format_bytes(cfg.memory_bytes)} cannot hold model {too_big[0]!r} whole "
                          "(parameters and activations), which time-sharing needs; give more --memory or drop "
                          "time-shared")
    load = np.array([m.param_bytes / cfg.h2d_bytes_per_s for m in models])
    resident: list[int] = []  # most recently used last
    used = 0
    out = np.empty(len(wl.model))
    loads = 0
    for k, m in enumerate(wl.model):
        m = int(m)
        if m in resident:
            resident.remove(m)
            resident.append(m)
            out[k] = ideal[m]
            continue
        while resident and (used + models[m].param_bytes > room or len(resident) >= (cfg.resident or len(models))):
            used -= models[resident.pop(0)].param_bytes
        resident.append(m)
        used += models[m].param_bytes
        out[k] = load[m] + ideal[m]
        loads += 1
    return out, loads


def run_policy(policy: str, models: Sequence[ModelCosts], wl: Workload, cfg: ServeConfig, rate: float) -> PolicyRun:
    """First-come-first-served on one GPU: each batch starts when it is released and the GPU is free."""
    service, loads = _service_times(policy, models, wl, cfg)
    done = np.empty(len(wl.release))
    free = 0.0
    for k, (r, s) in enumerate(zip(wl.release, service)):
        free = max(free, r) + s
        done[k] = free
    lat = done[wl.batch_of] - wl.arrivals if len(done) else np.zeros(0)
    return PolicyRun(policy, rate, lat, float(done[-1]) if len(done) else 0.0, float(service.sum()), loads)


def simulate_serving(models: Sequence[ModelCosts], cfg: ServeConfig) -> pd.DataFrame:
    """One row per (policy, rate): requests served, throughput (requests completed per second of the run, until
    the last completes), p50/p99/mean latency in seconds, GPU utilization, whole-model loads (time-shared)."""
    if not models:
        raise HybridError("no models to serve: give --graph (and --models N for copies of one graph)")
    rows = []
    for rate in cfg.rates:
        wl = workload(rate, cfg.batch, cfg.duration_s, len(models), cfg.seed)
        if len(wl.release) == 0:
            raise HybridError(f"--rate {rate} over --duration {cfg.duration_s}s gives no full batch of "
                              f"{cfg.batch}; raise --duration or --rate")
        for policy in cfg.policies:
            run = run_policy(policy, models, wl, cfg, rate)
            span = max(run.finish_s, cfg.duration_s)
            rows.append({"policy": policy, "models": len(models), "rate": rate, "batch": cfg.batch,
                         "requests": len(run.latencies), "throughput": len(run.latencies) / span,
                         "p50_s": float(np.percentile(run.latencies, 50)),
                         "p99_s": float(np.percentile(run.latencies, 99)),
                         "mean_s": float(run.latencies.mean()), "utilization": run.busy_s / span,
                         "model_loads": run.loads})
    return pd.DataFrame(rows)
