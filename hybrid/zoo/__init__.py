"""The papers' models in plain PyTorch, by name: `get_model("rnn-8-8k")`, `list_models()`.

Needs torch (the `hybrid-offload[torch]` extra). Every model builds on the meta device,
so listing and capture never allocate real weights. See `hybrid models`.
"""
from __future__ import annotations

from hybrid.zoo.registry import ModelSpec, get_model, list_models, parameter_count

__all__ = ["ModelSpec", "get_model", "list_models", "parameter_count"]
