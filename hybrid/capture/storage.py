"""Storages, not tensors, are what occupy memory: map traced values to the graph tensor owning their storage.

A view (`t`, `view`, `expand`, `select`, `_unsafe_view`...) shares its base's
storage, so it is not a graph tensor and not an op: its consumers read the
owner's storage through a recorded chain of view ops. The owner is the first
traced value with that storage (a placeholder or the output of a real op), and
a graph tensor's `bytes` is its storage's size, so aliases never count twice.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from hybrid.capture.encoding import dtype_name
from hybrid.errors import HybridError


def storage_key(t: torch.Tensor) -> StorageWeakRef:
    if t.layout != torch.strided:   # a sparse tensor has no storage to place (e.g. a sparse gradient)
        raise HybridError(f"the step uses a {str(t.layout).removeprefix('torch.')} tensor (an input, or a gradient "
                          "such as nn.Embedding(sparse=True)'s); hybrid captures dense (strided) tensors only")
    return StorageWeakRef(t.untyped_storage())


def storage_bytes(t: torch.Tensor) -> int:
    return int(t.untyped_storage().nbytes())


def view_bytes(t: torch.Tensor) -> int:
    """Bytes an op reads through a view: its elements, but no more than its storage holds (expand)."""
    return min(t.numel() * t.element_size(), storage_bytes(t))


def tensor_meta(t: torch.Tensor) -> dict:
    """The owner's geometry, stored on the graph tensor so an executor can allocate it."""
    return {"dtype": dtype_name(t.dtype), "shape": list(t.shape), "stride": list(t.stride()),
            "storage_offset": int(t.storage_offset())}


@dataclass
class StorageTable:
    """Storage identity -> owning graph tensor id."""

    owners: dict[StorageWeakRef, str] = field(default_factory=dict)
    # Keep the fake tensors alive: a StorageWeakRef's identity is only stable while its storage lives.
    _alive: list[torch.Tensor] = field(default_factory=list)

    def owner(self, t: torch.Tensor) -> str | None:
        return self.owners.get(storage_key(t))

    def add(self, t: torch.Tensor, tid: str) -> None:
        self.owners[storage_key(t)] = tid
        self._alive.append(t)
