"""hybrid: plan and run training iterations whose tensors do not fit in GPU memory.

The public types are re-exported here; none of them imports torch, so `import hybrid` works without it
(capture, the zoo and the executor load torch themselves).
"""
from __future__ import annotations

__version__ = "0.1.0"

from hybrid._numba_cache import use_writable_cache  # noqa: E402

use_writable_cache()  # before any module defines a cached kernel: a read-only install with a read-only HOME

from hybrid.device import Device, PRESETS  # noqa: E402
from hybrid.errors import FormatError, HybridError, InfeasibleError  # noqa: E402
from hybrid.graph import Graph, Impl, Op, Tensor  # noqa: E402
from hybrid.plan import Event, Plan  # noqa: E402

__all__ = ["Device", "PRESETS", "FormatError", "HybridError", "InfeasibleError", "Graph", "Impl", "Op", "Tensor",
           "Event", "Plan", "__version__"]
