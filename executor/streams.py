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


class CudaBackend(Backend):
    """Three CUDA streams; host memory is pinned so copies run asynchronously on their streams."""

    def __init__(self, device: str | torch.device = "cuda") -> None:
        if not torch.cuda.is_available():
            raise HybridError("--device cuda was asked for, but this torch sees no CUDA device; use --device cpu")
        self.device = torch.device(device)
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.name = "cuda"
        self.streams = [torch.cuda.Stream(self.device) for _ in STREAMS]

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
    raise HybridError(f"--device must be cpu or cuda (or cuda:N), got {device!r}")
