"""The one gate to PyTorch: capture needs it, `import hybrid` does not."""
from __future__ import annotations

from types import ModuleType

from hybrid.errors import HybridError

INSTALL_HINT = "pip install 'hybrid-offload[torch]'"


def require_torch() -> ModuleType:
    """Import torch or say how to install it, in one line."""
    try:
        import torch
    except ImportError:
        raise HybridError(f"this needs PyTorch, which is not installed: {INSTALL_HINT}") from None
    return torch
