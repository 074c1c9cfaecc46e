"""A user module of drawn shape, for the property tests that train plans of it against eager (torch needed)."""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F


class RandomNet(nn.Module):
    """Linear layers of drawn widths, each with an activation (relu, gelu, tanh by index), an optional residual
    and dropout; a 5-way head. `tricks` (one per layer, default none) puts what users' code does to a layer's
    output before its activation: in-place arithmetic, in-place shape changes, writes through a strided slice,
    `fill_diagonal_` (an as_strided view): constructs whose capture went wrong only once a plan moved them."""

    TRICKS = ("none", "in-place", "unsqueeze_/squeeze_", "t_ twice", "strided slice", "fill_diagonal_")

    def __init__(self, widths: Sequence[int], acts: Sequence[int], residual: Sequence[bool], drop: float,
                 tricks: Sequence[int] = ()) -> None:
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths, widths[1:]))
        self.acts, self.residual = acts, residual
        self.tricks = tuple(tricks) or (0,) * len(acts)
        self.drop = nn.Dropout(drop)
        self.head = nn.Linear(widths[-1], 5)

    @staticmethod
    def _trick(u: torch.Tensor, k: int) -> torch.Tensor:
        """`u`, a linear layer's output no op keeps for the backward (so eager may change it in place)."""
        if k == 1:
            u.mul_(0.5).add_(0.25)
        elif k == 2:
            u.unsqueeze_(1)
            v = u * 2.0
            u.squeeze_(1)
            u = u + v.squeeze(1)
        elif k == 3:
            u.t_()
            w = u * 1.5
            u.t_()
            u = u - w.t()
        elif k == 4:
            u[:, ::2].mul_(2.0)
        elif k == 5:
            u.fill_diagonal_(0.5)
        return u

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for lin, act, res, k in zip(self.lins, self.acts, self.residual, self.tricks):
            y = (F.relu, F.gelu, torch.tanh)[act](self._trick(lin(h), k))
            h = self.drop(y + h if res and y.shape == h.shape else y)
        return self.head(h)
