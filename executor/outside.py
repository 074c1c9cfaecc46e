"""Bytes allocated outside the pool while an iteration runs: what the plan's memory does not count.

The plan counts its device copies (the pool) and, while an op runs, that op's stated workspace. Everything
else a step allocates makes the real peak exceed the plan's: the copy fallback's functional results
(executor.ops), constants decoded per call, kernels' own scratch. Counted on every backend:

- CPU: a TorchDispatchMode (torch.utils._python_dispatch) sees every aten call the runtime makes and each
  tensor it returns; a returned tensor whose storage is not one of the executor's buffers (the device pool,
  the host pool, the compaction bounce buffer) was allocated outside the pool, and its storage's bytes are
  counted once per node. What a kernel allocates inside itself and frees before returning (its scratch) is
  not visible at this level: that is the op's workspace.
- CUDA: the caching allocator's statistics (`torch.cuda.memory_stats`): bytes allocated during the iteration
  (nothing is allocated from the pool's buffers, which exist before it) and the peak above what was allocated
  at its start, kernels' scratch included; per node only in total.

Per node (a compute event), bytes beyond the op's stated workspace (its implementation's `workspace_bytes`)
are what the plan did not allow for: `beyond_workspace_bytes`, 0 when executor memory equals plan memory.
Capture states the copy fallback's results as the op's workspace (executor.ops.copy_workspaces), so on the
CPU the zoo test models read 0 here (benchmarks/executor_outside.py). Kernel scratch stays unseen by the
dispatch mode and unstated in the graph: on those models, torch's profiler (profile_memory) finds
`_slow_conv2d_forward`/`_backward`'s column buffers (up to 0.3 MB per call at the tests' sizes) and batch
norm's per-channel statistics.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


@dataclass
class OutsideStats:
    """One iteration's allocations outside the pool."""

    counted_by: str = ""                 # "dispatch" (CPU), "allocator" (CUDA), "" (not counted)
    bytes: int = 0                       # allocated during the iteration outside the pool
    peak_bytes: int = 0                  # CPU: the most one node allocated; CUDA: peak above the iteration's start
    beyond_workspace_bytes: int = 0      # per node, beyond its stated workspace, summed (CUDA: peak - largest ws)
    by_target: dict[str, int] = field(default_factory=dict)   # aten target (or "runtime") -> bytes
    # CPU: per node, the pool's level as the plan counts it (each copy aligned) plus what the node allocated
    # outside the pool, at most: the run's device peak with its allocations outside the pool (0: not counted)
    with_pool_peak_bytes: int = 0
    # CPU: of that peak, what its node allocated beyond its op's stated workspace (0: within it, or the pool's
    # level alone): the share of the peak that stating the workspaces would have planned for
    with_pool_peak_beyond_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"counted_by": self.counted_by, "bytes": self.bytes, "peak_bytes": self.peak_bytes,
                "beyond_workspace_bytes": self.beyond_workspace_bytes, "by_target": dict(self.by_target),
                "with_pool_peak_bytes": self.with_pool_peak_bytes,
                "with_pool_peak_beyond_bytes": self.with_pool_peak_beyond_bytes}


def storage_key(t: torch.Tensor) -> tuple[int, int] | None:
    """(data pointer, bytes) of a tensor's storage; None for tensors without one (sparse, nested, meta)."""
    try:
        st = t.untyped_storage()
        return st.data_ptr(), st.nbytes()
    except (RuntimeError, NotImplementedError):
        return None


class DispatchCounter(TorchDispatchMode):
    """Counts the storage bytes aten calls return outside `known` storages (by data pointer), per node.

    The runtime calls `node(label, workspace)` before each node it issues and `finish()` at the end; a storage
    is counted once per node however many views of it are returned. `level()`, when given, is the pool's level
    while a node runs (read when it starts: the pool allocates nothing during a node), so that the stats hold
    the largest pool level plus a node's bytes outside the pool (`with_pool_peak_bytes`)."""

    def __init__(self, known: set[int], level: Callable[[], int] | None = None) -> None:
        super().__init__()
        self.known = known
        self.stats = OutsideStats("dispatch")
        self._label = "runtime"
        self._ws = 0
        self._seen: set[int] = set()
        self._node_bytes = 0
        self._level_of = level
        self._level = 0

    def node(self, label: str, workspace: int) -> None:
        self._close()
        self._label, self._ws = label, int(workspace)
        self._level = int(self._level_of()) if self._level_of is not None else 0

    def _close(self) -> None:
        s = self.stats
        s.peak_bytes = max(s.peak_bytes, self._node_bytes)
        beyond = max(0, self._node_bytes - self._ws)
        if self._level_of is not None:
            held = self._level + self._node_bytes
            if (held, -beyond) > (s.with_pool_peak_bytes, -s.with_pool_peak_beyond_bytes):
                s.with_pool_peak_bytes, s.with_pool_peak_beyond_bytes = held, beyond
        s.beyond_workspace_bytes += beyond
        self._seen.clear()
        self._node_bytes = 0

    def finish(self) -> OutsideStats:
        self._close()
        self._label, self._ws = "runtime", 0
        return self.stats

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 - torch's API
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            key = storage_key(t)
            if key is None or key[1] == 0 or key[0] in self.known or key[0] in self._seen:
                continue
            self._seen.add(key[0])
            self._node_bytes += key[1]
            self.stats.bytes += key[1]
            self.stats.by_target[self._label] = self.stats.by_target.get(self._label, 0) + key[1]
        return out


class AllocatorCounter:
    """CUDA: the caching allocator's counters around one iteration (`begin`, `finish`). The peak counter is
    reset at `begin`; `max_allocated` keeps the run's own maximum, which that reset would otherwise lose."""

    def __init__(self, device: torch.device, largest_workspace: int) -> None:
        self.device = device
        self.largest_workspace = int(largest_workspace)
        self.max_allocated = 0
        self._base = 0
        self._total = 0

    def _allocated_total(self) -> int:
        return int(torch.cuda.memory_stats(self.device).get("allocated_bytes.all.allocated", 0))

    def begin(self) -> None:
        self.max_allocated = max(self.max_allocated, int(torch.cuda.max_memory_allocated(self.device)))
        torch.cuda.reset_peak_memory_stats(self.device)
        self._base = int(torch.cuda.memory_allocated(self.device))
        self._total = self._allocated_total()

    def finish(self) -> OutsideStats:
        peak = int(torch.cuda.max_memory_allocated(self.device))
        self.max_allocated = max(self.max_allocated, peak)
        above = max(0, peak - self._base)
        return OutsideStats("allocator", self._allocated_total() - self._total, above,
                            max(0, above - self.largest_workspace))
