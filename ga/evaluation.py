"""Fitness evaluation behind one small interface: serial, worker processes, or a Dask cluster.

An evaluator takes a batch of candidates (schedule, CLS, CNT, by_bytes, planner gene) and returns
their makespans, in order. Fitness is deterministic (the planner and the
simulator have no randomness) and all randomness of the search stays in the
main process, so every backend gives the same search for the same seed and
generation count; they differ only in speed.

Workers receive the graph once (its JSON text, rebuilt and cached per process
by a key naming the graph, device and planner options) and then only the
candidates' arrays.
"""
from __future__ import annotations

import json
import os
import signal
import time
from abc import ABC, abstractmethod
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from ga.encoding import N_PLANNER_GENES, planner_options
from hybrid.swap.pools import byte_pool, class_pool
from hybrid.graph.liveness import distinct_sizes
from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.planner import SwapPlanner, compile_kernels

Candidate = tuple[np.ndarray, np.ndarray, np.ndarray, bool, int]  # schedule, cls, cnt, by_bytes, planner gene
StopFn = Callable[[], bool]


@dataclass(frozen=True)
class Payload:
    """What a worker needs to evaluate candidates: the graph (JSON text), the device, the planner options."""

    key: str
    graph_json: str
    device: dict[str, Any]
    options: dict[str, Any]

    @staticmethod
    def of(graph: Graph, device: Device, options: PlannerOptions) -> "Payload":
        key = f"{graph.sha256}:{json.dumps(device.to_json(), sort_keys=True)}:{json.dumps(options.describe(), sort_keys=True)}"
        return Payload(key, graph.dumps(), device.to_json(), options.describe())


class Fitness:
    """The fitness function in one process: a planner for the graph, reused for every candidate."""

    def __init__(self, graph: Graph, device: Device, options: PlannerOptions) -> None:
        self.graph = graph
        self.planner = SwapPlanner(graph, device)
        self.options = [planner_options(options, k) for k in range(N_PLANNER_GENES)]
        self.ts = distinct_sizes(graph)
        self.bytes = byte_pool(graph, device)
        self.align = device.alignment_bytes

    def __call__(self, items: Sequence[Candidate]) -> list[float]:
        return [self.planner.makespan(s, self.bytes if by_bytes else class_pool(self.graph, cls, cnt, self.ts, align=self.align),
                                      self.options[gene])
                for s, cls, cnt, by_bytes, gene in items]


_FITNESS: dict[str, Fitness] = {}


def _fitness_for(payload: Payload) -> Fitness:
    f = _FITNESS.get(payload.key)
    if f is None:
        graph = Graph.from_json(json.loads(payload.graph_json))
        f = Fitness(graph, Device.from_json(payload.device), PlannerOptions(**payload.options))
        _FITNESS.clear()  # one search at a time per worker; drop other graphs' buffers
        _FITNESS[payload.key] = f
    return f


def _init_worker(payload: Payload) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    _fitness_for(payload)


def _evaluate_in_worker(key: str, items: Sequence[Candidate]) -> list[float]:
    return _FITNESS[key](items)


def _evaluate_on_dask(payload: Payload, items: Sequence[Candidate]) -> list[float]:
    return _fitness_for(payload)(items)


class Evaluator(ABC):
    """Evaluate batches of candidates; `stop()` returning True abandons the rest of a batch (NaN)."""

    name: str = "?"
    workers: int = 1

    @abstractmethod
    def evaluate(self, items: Sequence[Candidate], stop: StopFn | None = None) -> np.ndarray: ...

    def close(self) -> None:
        return None

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SerialEvaluator(Evaluator):
    """In this process, one candidate after another."""

    name = "serial"

    def __init__(self, graph: Graph, device: Device, options: PlannerOptions) -> None:
        self.fitness = Fitness(graph, device, options)
        self.workers = 1

    def evaluate(self, items: Sequence[Candidate], stop: StopFn | None = None) -> np.ndarray:
        out = np.full(len(items), np.nan)
        for i, item in enumerate(items):
            if stop is not None and stop():
                break
            out[i] = self.fitness([item])[0]
        return out


class _ChunkedEvaluator(Evaluator):
    """Split a batch into a few chunks per worker so that a slow candidate does not idle the others."""

    chunks_per_worker = 3

    @abstractmethod
    def _submit(self, chunk: list[Candidate]) -> Any: ...

    lost: str | None = None   # why the workers were lost (a worker killed, the cluster gone): nothing more runs

    def evaluate(self, items: Sequence[Candidate], stop: StopFn | None = None) -> np.ndarray:
        """As a stop does, a lost pool or cluster leaves the rest NaN (`lost` says why): the search ends with its
        best so far instead of a traceback and no plan."""
        out = np.full(len(items), np.nan)
        if not items or self.lost is not None:
            return out
        n_chunks = min(len(items), self.workers * self.chunks_per_worker)
        bounds = np.linspace(0, len(items), n_chunks + 1).astype(int)
        pending: dict = {}
        try:
            pending = {self._submit(list(items[a:b])): (a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a}
            while pending:
                done = self._wait(list(pending), 0.2)
                for f in done:
                    a, b = pending.pop(f)
                    out[a:b] = f.result()
                if pending and stop is not None and stop():
                    for f in pending:
                        f.cancel()
                    break
        except Exception as e:  # noqa: BLE001 - classified below; anything else is raised
            why = self._lost(e)
            if why is None:
                raise
            self.lost = why
            for f in pending:
                try:
                    f.cancel()
                except Exception:  # noqa: BLE001 - the pool or cluster is gone
                    pass
        return out

    def _lost(self, e: Exception) -> str | None:
        """Why `e` means the workers are gone, or None where it is another error (a planner's: raised)."""
        return None

    @abstractmethod
    def _wait(self, futures: list[Any], timeout: float) -> list[Any]: ...


class ProcessPoolEvaluator(_ChunkedEvaluator):
    """Worker processes on this machine (default: one per core)."""

    name = "processes"

    def __init__(self, graph: Graph, device: Device, options: PlannerOptions, workers: int | None = None) -> None:
        import multiprocessing as mp

        self.workers = max(1, workers or available_cores())
        self.payload = Payload.of(graph, device, options)
        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        self._pool = ProcessPoolExecutor(self.workers, mp_context=mp.get_context(method),
                                         initializer=_init_worker, initargs=(self.payload,))

    def _submit(self, chunk: list[Candidate]) -> Future:
        return self._pool.submit(_evaluate_in_worker, self.payload.key, chunk)

    def _wait(self, futures: list[Future], timeout: float) -> list[Future]:
        return list(wait(futures, timeout=timeout, return_when=FIRST_COMPLETED).done)

    def _lost(self, e: Exception) -> str | None:
        from concurrent.futures.process import BrokenProcessPool

        if isinstance(e, BrokenProcessPool):
            return f"an evaluation process died (killed, or out of memory): {e}"
        return None

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


CONNECT_S = 20.0      # the longest wait for a Dask scheduler, and then for its first worker
CONNECT_MIN_S = 1.0   # the shortest (a limit nearly spent still gets a chance on a scheduler that answers at once)


class DaskEvaluator(_ChunkedEvaluator):
    """A Dask cluster (`--scheduler tcp://host:8786`), or a `distributed.Client` given directly (tests)."""

    name = "dask"

    def __init__(self, graph: Graph, device: Device, options: PlannerOptions, scheduler: str | None = None,
                 client: Any = None, connect_s: float = CONNECT_S) -> None:
        """`connect_s`: how long to wait for the scheduler and then its first worker, in all, within [CONNECT_MIN_S,
        CONNECT_S] (a caller with a time limit passes what is left of it: Dask's own 20 s outlasted a 10 s
        --time-limit)."""
        try:
            from distributed import Client, wait as dask_wait
        except ImportError:
            raise HybridError("--scheduler needs Dask: pip install 'hybrid-offload[dask]'") from None
        self._dask_wait = dask_wait
        self._own_client = client is None
        if client is None:
            if not scheduler or not str(scheduler).strip():
                raise HybridError("--scheduler: no address given; give the Dask scheduler's, e.g. "
                                  "tcp://host:8786, or leave --scheduler out to evaluate on this machine")
            connect_s = min(CONNECT_S, max(CONNECT_MIN_S, connect_s))
            t_connect = time.monotonic()
            try:
                client = Client(scheduler, timeout=f"{connect_s:.3f}s")
            except (OSError, TimeoutError) as e:
                raise HybridError(f"--scheduler {scheduler}: cannot reach the Dask scheduler within "
                                  f"{connect_s:.3g} s ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
                                  "start one with `dask scheduler` and workers with `dask worker ADDRESS`") from None
            except (ValueError, TypeError) as e:   # not an address: "foo", "http://…", tls:// without its keys
                raise HybridError(f"--scheduler {scheduler}: not a Dask scheduler address ({e}); give one such as "
                                  "tcp://host:8786") from None
        self.client = client
        start = time.monotonic()
        if self._own_client:   # what the connect left of the one wait (at least CONNECT_MIN_S)
            connect_s = max(CONNECT_MIN_S, connect_s - (start - t_connect))
        while not client.nthreads() and time.monotonic() - start < connect_s:
            time.sleep(0.2)
        if not client.nthreads():
            self.close()
            raise HybridError(f"--scheduler {scheduler}: the Dask scheduler has no workers (waited "
                              f"{connect_s:.3g} s); start some with `dask worker {scheduler}`, each with "
                              "hybrid-offload installed")
        self.workers = max(1, sum(client.nthreads().values()))
        payload = Payload.of(graph, device, options)
        try:
            self._payload = client.scatter(payload, broadcast=True)
        except Exception as e:  # noqa: BLE001 - a worker's error comes back as a plain Exception wrapping it
            self.close()
            if "ModuleNotFoundError" in repr(e) or isinstance(e, ImportError):
                raise HybridError(f"--scheduler {scheduler}: a Dask worker cannot import hybrid's code "
                                  f"({str(e).splitlines()[0]}); install hybrid-offload, the same version, where "
                                  "every worker runs") from None
            why = self._lost(e)
            if why is None:
                raise
            raise HybridError(f"--scheduler {scheduler}: {why}") from None

    def _submit(self, chunk: list[Candidate]) -> Any:
        return self.client.submit(_evaluate_on_dask, self._payload, chunk, pure=False)

    def _wait(self, futures: list[Any], timeout: float) -> list[Any]:
        try:
            return list(self._dask_wait(futures, timeout=timeout, return_when="FIRST_COMPLETED").done)
        except TimeoutError:
            return []

    def _lost(self, e: Exception) -> str | None:
        from distributed.client import FuturesCancelledError
        from distributed.comm.core import CommClosedError

        if isinstance(e, (FuturesCancelledError, CommClosedError, OSError, TimeoutError)):
            return f"the Dask cluster stopped answering (its workers or scheduler gone): {str(e).splitlines()[0]}"
        return None

    def close(self) -> None:
        if self._own_client:
            try:
                self.client.close()
            except Exception:  # noqa: BLE001 - a cluster already gone
                pass


# Below this much planner time per candidate, a process pool evaluates no faster than this process: with two
# processes on two cores, SegNet (77 ops, about 0.1 ms per evaluation) ran 0.84x the serial search's generations
# in the same time, Inception-v4 and RNN (2-7 ms) 1.5x (results/ga_second_core.md).
POOL_MIN_EVAL_S = 1e-3


def evaluation_seconds(graph: Graph, device: Device, options: PlannerOptions = PlannerOptions(),
                       repeats: int = 3) -> float:
    """Planner + simulator time for one candidate (the program order on the byte budget; the fastest of a few)."""
    from hybrid.graph.order import program_order

    planner = SwapPlanner(graph, device)
    order = program_order(graph)
    pool = byte_pool(graph, device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        planner.makespan(order, pool, options)
        best = min(best, time.perf_counter() - t0)
    return best


def available_cores() -> int:
    """Cores this process may run on (the affinity mask, which containers limit), not the host's count."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def make_evaluator(graph: Graph, device: Device, options: PlannerOptions, workers: int | None = None,
                   scheduler: str | None = None, connect_s: float = CONNECT_S) -> Evaluator:
    """`scheduler` → Dask (waited for at most `connect_s`, the time left, up to CONNECT_S); `workers` == 1 →
    serial; otherwise worker processes (default: all cores)."""
    if scheduler:
        return DaskEvaluator(graph, device, options, scheduler=scheduler, connect_s=connect_s)
    n = workers if workers is not None else available_cores()
    compile_kernels()  # here, once: workers then load the compiled kernels from numba's cache
    if n <= 1:
        return SerialEvaluator(graph, device, options)
    return ProcessPoolEvaluator(graph, device, options, n)
