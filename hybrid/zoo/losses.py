"""Scalar training losses for zoo models (module-level functions, so specs pickle)."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def classification(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Softmax cross-entropy on (N, classes) logits, mean over the batch."""
    return F.cross_entropy(logits, target)


def sequence(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-step softmax cross-entropy on (N, T, vocab) logits, mean over all N*T steps."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def pixelwise_binary(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Per-pixel sigmoid binary cross-entropy on (N, K, H, W) logits, mean over all pixels."""
    return F.binary_cross_entropy_with_logits(logits, target)
