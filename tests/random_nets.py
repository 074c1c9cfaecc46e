"""A user module of drawn shape, for the property tests that train plans of it against eager (torch needed)."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F


class RandomNet(nn.Module):
    """Linear layers of drawn widths, each with an activation (relu, gelu, tanh by index), an optional residual
    and dropout; a 5-way head."""

    def __init__(self, widths: Sequence[int], acts: Sequence[int], residual: Sequence[bool], drop: float) -> None:
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
        self.acts, self.residual = acts, residual
        self.drop = nn.Dropout(drop)
        self.head = nn.Linear(widths[-1], 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for lin, act, res in zip(self.lins, self.acts, self.residual):
            y = (F.relu, F.gelu, torch.tanh)[act](lin(h))
            h = self.drop(y + h if res and y.shape == h.shape else y)
        return self.head(h)
