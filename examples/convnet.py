"""A small convolutional network for `hybrid capture --module examples.convnet:make` (run from the repository root).

Wide enough (256 channels) that the roofline prefers Winograd (hybrid.capture.conv_impls) for its 3x3
convolutions on a GPU preset, small enough (16x16 images, batch 16) that a training step takes well under a
second on the CPU: the MO-SOS plan of tests/milp/test_impls_execute.py runs non-default implementations on it.
Same factory contract as examples/mlp.py (docs/capture.md).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


def make(batch: int = 16, image: int = 16, width: int = 256, classes: int = 10):
    """conv 3x3 (3 -> width) - relu - conv 3x3 (width -> width) - relu - conv 1x1 - relu - pool - linear."""
    model = nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1), nn.ReLU(),
        nn.Conv2d(width, width, 1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, classes))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, image, image, generator=gen)
    y = torch.randint(classes, (batch,), generator=gen)
    return model, x, y, F.cross_entropy
