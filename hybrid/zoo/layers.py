"""Small building blocks shared by the CNN families (plain conv/BN/ReLU only)."""
from __future__ import annotations

import torch
import torch.nn as nn


class ConvBNReLU(nn.Sequential):
    """conv (no bias) -> batch norm -> ReLU, the unit of Inception, GoogLeNet and MobileNet."""

    def __init__(self, cin: int, cout: int, kernel: int | tuple[int, int], stride: int = 1,
                 padding: int | tuple[int, int] = 0, groups: int = 1, eps: float = 1e-5) -> None:
        super().__init__(
            nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, groups=groups, bias=False),
            nn.BatchNorm2d(cout, eps=eps),
            nn.ReLU(inplace=False),
        )


def scaled(channels: int, width: float) -> int:
    """Channel count times a width scale, at least 1."""
    return max(1, int(round(channels * width)))


def global_avg_pool(x: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) -> (N, C): mean over the spatial dimensions."""
    return x.mean(dim=(2, 3))
