"""A model of your own for `hybrid capture --module examples.mlp:make` (run from the repository root).

The factory contract (docs/capture.md): a function of no arguments returning (module, inputs, target, loss_fn).
The weights come from torch's global generator, which `hybrid execute` seeds with --seed before calling the
factory again; the batch comes from its own generator, so the model executed is the model captured.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def make(batch: int = 512, features: int = 256, hidden: int = 512, classes: int = 10):
    """A two-layer MLP with dropout, a batch of random inputs and class labels, and cross-entropy."""
    model = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Dropout(0.1), nn.Linear(hidden, classes))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, features, generator=gen)
    y = torch.randint(classes, (batch,), generator=gen)
    return model, x, y, F.cross_entropy
