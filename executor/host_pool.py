"""Host memory: one (pinned, on CUDA) buffer allocated up front, a fixed byte range per tensor.

Every tensor that ever has a host copy (persistent tensors that start on the
host, and everything the plan swaps) gets its range once; swaps copy raw bytes
between that range and the tensor's device slot, so no host memory is
allocated per tensor per iteration and no layout conversion happens on the way.
"""
from __future__ import annotations

from typing import Iterable

import torch

from hybrid.graph import Graph

from executor.device_pool import ByteBuffer
from hybrid.units import round_up
from executor.streams import Backend

ALIGN = 64


class HostPool:
    def __init__(self, graph: Graph, tensors: Iterable[int], backend: Backend) -> None:
        self.graph = graph
        self.offset: dict[int, int] = {}
        top = 0
        for t in tensors:
            self.offset[int(t)] = top
            top += round_up(graph.tensors[int(t)].bytes, ALIGN)
        self.nbytes = top
        self.pinned = backend.name == "cuda"
        self.buffer = ByteBuffer(backend.empty_bytes(max(top, ALIGN), pinned_host=True))

    def __contains__(self, t: int) -> bool:
        return t in self.offset

    def raw(self, t: int) -> torch.Tensor:
        """The tensor's host bytes as a uint8 tensor (what swaps copy)."""
        return self.buffer.raw(self.offset[t], self.graph.tensors[t].bytes)

    def view(self, t: int) -> torch.Tensor:
        """The tensor's host copy with its recorded dtype, shape and strides."""
        return self.buffer.view(self.offset[t], self.graph.tensors[t])
