"""Backends: where tensors live and how the three streams (compute, h2d, d2h) are ordered.

The runtime issues every node on its stream and orders streams only through
events, exactly as the augmented graph's edges say. `CudaBackend` maps that
onto real `torch.cuda.Stream`s and `torch.cuda.Event`s. `CpuBackend` runs the
same calls on the CPU: work executes at issue (the streams are sequential),
and an event "completes" when it is recorded. Its `wait` refuses an event that
was not recorded in the current iteration, so a missing or misordered edge in
the runtime fails on CPU in CI instead of becoming a race on a GPU.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch

from hybrid.errors import HybridError
from hybrid.plan.events import STREAMS

COMPUTE, H2D, D2H = 0, 1, 2   # indices into STREAMS


class OrderingError(HybridError):
    """The runtime waited on work it had not issued yet: a bug in the executor, not in the plan."""


@dataclass
class CpuEvent:
    """Recorded = done (the CPU backend runs work at issue); `stamp` is the host time of the record."""

    iteration: int = -1
    stamp: float = 0.0


class Backend:
    """What the runtime needs from a device: memory, streams, events, copies and clocks."""

    name: str
    device: torch.device

    def empty_bytes(self, nbytes: int, pinned_host: bool = False) -> torch.Tensor: ...
    def event(self, timing: bool) -> Any: ...
    def record(self, event: Any, stream: int) -> None: ...
    def wait(self, stream: int, event: Any) -> None: ...
    def on(self, stream: int) -> contextlib.AbstractContextManager: ...
    def begin_iteration(self, iteration: int) -> None: ...
    def synchronize(self) -> None: ...
    def elapsed_s(self, start: Any, end: Any) -> float: ...
    def now(self) -> float:
        return time.perf_counter()


@dataclass
class CpuBackend(Backend):
    """Sequential streams on the host; device and host memory are separate CPU buffers.

    `poison`: overwrite a device copy's bytes (every 16th) with 0xFF when it is
    released, so a stale read of freed memory changes values and fails the
    exactness check instead of passing by luck.
    """

    poison: bool = False
    name: str = "cpu"
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    iteration: int = -1

    def empty_bytes(self, nbytes: int, pinned_host: bool = False) -> torch.Tensor:
        return torch.empty(int(nbytes), dtype=torch.uint8)

    def event(self, timing: bool) -> CpuEvent:
        return CpuEvent()

    def record(self, event: CpuEvent, stream: int) -> None:
        event.iteration = self.iteration
        event.stamp = time.perf_counter()

    def wait(self, stream: int, event: CpuEvent) -> None:
        if event.iteration != self.iteration:
            raise OrderingError(f"executor bug: the {STREAMS[stream]} stream waits on an event that was not "
                                f"recorded in iteration {self.iteration}; please report it")

    def on(self, stream: int) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def begin_iteration(self, iteration: int) -> None:
        self.iteration = iteration

    def synchronize(self) -> None:
        return None

    def elapsed_s(self, start: CpuEvent, end: CpuEvent) -> float:
        return end.stamp - start.stamp


_CUDA_STREAMS: dict[torch.device, list[Any]] = {}
_KERNEL_STATE: dict[torch.device, int] = {}


def _indexed(device: torch.device) -> torch.device:
    """`cuda` as `cuda:N` (the current device): one key per device."""
    device = torch.device(device)
    return device if device.index is not None else torch.device("cuda", torch.cuda.current_device())


def _process_streams(device: torch.device) -> list[Any]:
    """The process's three executor streams on `device`, made once. A stream's first matrix product makes cuBLAS
    keep a workspace for that stream (33 MiB on an H200 with torch 2.11) that is never given back: fresh
    streams per executor added that much to the device's memory with every executor made."""
    device = _indexed(device)
    got = _CUDA_STREAMS.get(device)
    if got is None:
        got = _CUDA_STREAMS[device] = [torch.cuda.Stream(device) for _ in STREAMS]
    return got


def kernel_state_bytes(device: torch.device) -> int:
    """Device bytes the libraries keep for the executor's compute stream once it has run a matrix product
    (cuBLAS's and cuBLASLt's workspaces): outside any plan's pool, for good. Measured on first call, by
    running a small product with and without a bias on that stream; 0 where they were kept already."""
    device = _indexed(device)
    if device not in _KERNEL_STATE:
        stream = _process_streams(device)[COMPUTE]
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        with torch.cuda.stream(stream):
            x = torch.ones(64, 64, device=device)
            y = torch.nn.functional.linear(x, x, x[0]) + torch.mm(x, x)
            del x, y
        torch.cuda.synchronize(device)
        _KERNEL_STATE[device] = max(0, int(torch.cuda.memory_allocated(device)) - int(before))
    return _KERNEL_STATE[device]


class CudaBackend(Backend):
    """Three CUDA streams (the process's, `_process_streams`); host memory is pinned so copies run
    asynchronously on their streams."""

    def __init__(self, device: str | torch.device = "cuda") -> None:
        if not torch.cuda.is_available():
            raise HybridError(f"device {str(device)!r} was asked for, but this torch sees no CUDA device; run on the "
                              "cpu (--device cpu; device=\"cpu\" from Python)")
        self.device = torch.device(device)
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.name = "cuda"
        self.streams = _process_streams(self.device)
        self.kernel_state_bytes = kernel_state_bytes(self.device)   # kept before any pool is allocated

    def empty_bytes(self, nbytes: int, pinned_host: bool = False) -> torch.Tensor:
        if pinned_host:
            return torch.empty(int(nbytes), dtype=torch.uint8, pin_memory=True)
        return torch.empty(int(nbytes), dtype=torch.uint8, device=self.device)

    def event(self, timing: bool) -> torch.cuda.Event:
        return torch.cuda.Event(enable_timing=timing)

    def record(self, event: torch.cuda.Event, stream: int) -> None:
        event.record(self.streams[stream])

    def wait(self, stream: int, event: torch.cuda.Event) -> None:
        self.streams[stream].wait_event(event)

    @contextlib.contextmanager
    def on(self, stream: int) -> Iterator[None]:
        with torch.cuda.stream(self.streams[stream]):
            yield

    def begin_iteration(self, iteration: int) -> None:
        # Work issued before (initial loads on the default stream) is finished by the caller's synchronize.
        return None

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def elapsed_s(self, start: torch.cuda.Event, end: torch.cuda.Event) -> float:
        return start.elapsed_time(end) / 1000.0


def make_backend(device: str, poison: bool = False) -> Backend:
    """`cpu` or `cuda[:N]`."""
    text = str(device).strip().lower()
    if text == "cpu":
        return CpuBackend(poison=poison)
    if text == "cuda" or text.startswith("cuda:"):
        return CudaBackend(text)
    raise HybridError(f"--device (device) must be cpu or cuda (or cuda:N), got {device!r}")
