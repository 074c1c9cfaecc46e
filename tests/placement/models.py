"""Small inference models with the structures placement cares about: a chain, branches, a residual block."""
from __future__ import annotations

import torch
import torch.nn as nn


class Chain(nn.Module):
    """VGG-like: conv blocks ending in max-pools, then a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.flatten(self.features(x), 1))


class Inception(nn.Module):
    """Four branches joined by a concatenation (GoogLeNet's module), twice."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.mods = nn.ModuleList()
        for _ in range(2):
            self.mods.append(nn.ModuleList([
                nn.Conv2d(c, c, 1),
                nn.Sequential(nn.Conv2d(c, c, 1), nn.ReLU(), nn.Conv2d(c, c, 3, padding=1)),
                nn.Sequential(nn.Conv2d(c, c // 2, 1), nn.ReLU(), nn.Conv2d(c // 2, c, 5, padding=2)),
                nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(c, c, 1))]))
        self.reduce = nn.ModuleList([nn.Conv2d(4 * c, c, 1) for _ in range(2)])
        self.head = nn.Linear(c, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for branches, red in zip(self.mods, self.reduce):
            x = torch.relu(red(torch.cat([b(x) for b in branches], 1)))
        return self.head(x.mean((2, 3)))


class Residual(nn.Module):
    """A ResNet stage: a downsample block (two branches) and an identity block."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.a = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                               nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16))
        self.down = nn.Sequential(nn.Conv2d(8, 16, 1, stride=2), nn.BatchNorm2d(16))
        self.b = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                               nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16))
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.stem(x))
        x = torch.relu(self.a(x) + self.down(x))
        x = torch.relu(self.b(x) + x)
        return self.head(x.mean((2, 3)))


MODELS = {"chain": Chain, "inception": Inception, "residual": Residual}


def make(name: str, seed: int = 0) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(seed)
    m = MODELS[name]().eval()
    for mod in m.modules():   # non-trivial running statistics, so batch norm's eval path is exercised
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.1, 0.1)
            mod.running_var.uniform_(0.5, 1.5)
    return m, torch.randn(2, 3, 16, 16)
