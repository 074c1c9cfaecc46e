"""A stream-race checker for the runtime's own ordering (what TORCH_CUDA_SANITIZER checks on a GPU).

The CPU backend runs streams one after the other, so a missing wait can never
corrupt a value there, and the exactness tests alone would not notice it.
This checker makes CI notice: for every node the runtime issues it records
which bytes the node reads and writes (device slots and host ranges) and
asks whether every earlier conflicting access (a write before a read, or
any access before a write) is ordered before it, either by being on the same
stream (FIFO) or through the waits issued so far (per-stream vector clocks).
It checks the waits, not the hardware, so it runs on either backend.
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Callable

from hybrid.errors import HybridError

from hybrid.plan.events import STREAMS

HOST_BASE = 1 << 56   # host byte ranges live in their own address space


class RaceError(HybridError):
    """Two accesses to the same bytes that no wait orders: the executor would race on a GPU."""


@dataclass
class _Seg:
    writer: tuple[int, int] | None = None                # (node, stream)
    readers: list[tuple[int, int]] = field(default_factory=list)


class RaceChecker:
    def __init__(self, label: Callable[[int], str]) -> None:
        self.label = label      # node -> readable name
        self.total = 0          # nodes checked over every iteration (`checked` restarts at each reset)
        self.reset()

    def reset(self) -> None:
        """Everything issued so far has finished (a synchronize or a full fence)."""
        self.lo: list[int] = [0]
        self.seg: list[_Seg] = [_Seg()]
        self.checked = 0

    def _split(self, x: int) -> int:
        i = bisect.bisect_right(self.lo, x) - 1
        if self.lo[i] != x:
            old = self.seg[i]
            self.lo.insert(i + 1, x)
            self.seg.insert(i + 1, _Seg(old.writer, list(old.readers)))
            i += 1
        return i

    @staticmethod
    def _before(prev: tuple[int, int], stream: int, clock: list[int]) -> bool:
        node, s = prev
        return s == stream or clock[s] >= node

    def _fail(self, prev: tuple[int, int], node: int, stream: int, what: str, lo: int, hi: int) -> None:
        space = "host" if lo >= HOST_BASE else "device"
        base = HOST_BASE if lo >= HOST_BASE else 0
        raise RaceError(f"executor race: {self.label(node)} on {STREAMS[stream]} {what} {space} bytes "
                        f"[{lo - base}, {hi - base}) that {self.label(prev[0])} on {STREAMS[prev[1]]} also "
                        "uses, with no wait between them; please report it")

    def access(self, node: int, stream: int, clock: list[int], reads: list[tuple[int, int]],
               writes: list[tuple[int, int]]) -> None:
        """`clock`: the node's stream clock after its waits; ranges are (lo, hi) byte ranges."""
        me = (node, stream)
        for lo, hi in reads:
            if hi <= lo:
                continue
            a, b = self._split(lo), self._split(hi)
            for k in range(a, b):
                sg = self.seg[k]
                if sg.writer is not None and not self._before(sg.writer, stream, clock):
                    self._fail(sg.writer, node, stream, "reads", lo, hi)
                sg.readers.append(me)
        for lo, hi in writes:
            if hi <= lo:
                continue
            a, b = self._split(lo), self._split(hi)
            for k in range(a, b):
                sg = self.seg[k]
                if sg.writer is not None and not self._before(sg.writer, stream, clock):
                    self._fail(sg.writer, node, stream, "writes", lo, hi)
                for r in sg.readers:
                    if r != me and not self._before(r, stream, clock):
                        self._fail(r, node, stream, "writes", lo, hi)
            self.lo[a:b] = [lo]
            self.seg[a:b] = [_Seg(me, [])]
        self.checked += 1
        self.total += 1
