"""Capture a PyTorch training step as a `hybrid-graph/1`, cost it, profile it, and replay it.

- `capture(module, args, loss_fn, ...)` / `capture_model(name, ...)`: trace one
  iteration (forward, backward, optimizer) on fake tensors into a Graph whose
  ops carry what is needed to replay them (docs/capture.md).
- `hybrid.capture.costs`: FLOPs, bytes and roofline times per device preset (peak rates: `hybrid.device`).
- `hybrid.capture.profile`: measured op times, cached in a profile file.
- `hybrid.capture.interpreter`: replays a captured graph on real tensors.

Submodules import torch; this package does not, so `import hybrid` and the core
CLI work without it. The names below load their module on first use.
"""
from __future__ import annotations

from typing import Any

_LAZY = {
    "capture": "hybrid.capture.api",
    "capture_model": "hybrid.capture.api",
    "portable_kernels": "hybrid.capture.trace",
    "replay_step": "hybrid.capture.interpreter",
    "eager_step": "hybrid.capture.interpreter",
    "mismatches": "hybrid.capture.interpreter",
    "run_op": "hybrid.capture.interpreter",
    "run_graph": "hybrid.capture.interpreter",
    "measure_profile": "hybrid.capture.profile",
    "apply_profile": "hybrid.capture.profile",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        from hybrid.capture._torch import require_torch

        require_torch()
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'hybrid.capture' has no attribute {name!r}")
