"""Inception-V4-X: Szegedy et al.'s Inception-V4 with every convolution's channels times X.

Source: SwapAdvisor (ASPLOS'20) §6.1: "we enlarge the model by adding a width
scale parameter similar to WResNet; Inception-X denotes Inception-V4 with width
scale X"; Table 1 lists Inception-4 (X = 4) at batch 64 (71 GB, 64 distinct
tensor sizes). The paper does not say which layers the scale applies to; we
scale the output channels of every convolution, as for WResNet.

The architecture is Inception-V4 from "Inception-v4, Inception-ResNet and the
Impact of Residual Connections on Learning" (AAAI'17), Figures 3-9: stem,
4 x Inception-A, Reduction-A, 7 x Inception-B, Reduction-B, 3 x Inception-C,
global average pooling, dropout (keep 0.8) and a 1000-way classifier, on
299x299 images. Every convolution is conv (no bias) -> batch norm -> ReLU. At
X = 1 it has 42.7 M parameters (42,679,816). Inception-V4-4's graph captured
with `hybrid capture` (SGD with momentum), run in program order with tensors
freed after their last use, peaks at ~49 GB at batch 64 (Table 1: 71 GB).
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from hybrid.zoo import losses
from hybrid.zoo.inputs import ImageBatch
from hybrid.zoo.layers import ConvBNReLU, global_avg_pool, scaled
from hybrid.zoo.registry import Family, ModelSpec

PAPER = "SwapAdvisor (ASPLOS'20) §6.1, Table 1"


class _Scaled:
    """Makes width-scaled ConvBNReLU units (the scale applies to output channels)."""

    def __init__(self, width: float) -> None:
        self.width = width

    def c(self, n: int) -> int:
        return scaled(n, self.width)

    def __call__(self, cin: int, cout: int, kernel: int | tuple[int, int], stride: int = 1,
                 padding: int | tuple[int, int] = 0) -> ConvBNReLU:
        return ConvBNReLU(cin, self.c(cout), kernel, stride, padding, eps=1e-3)


def _avg3(x: torch.Tensor) -> torch.Tensor:
    return F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)


class Stem(nn.Module):
    def __init__(self, u: _Scaled) -> None:
        super().__init__()
        c = u.c
        self.conv = nn.Sequential(u(3, 32, 3, 2), u(c(32), 32, 3), u(c(32), 64, 3, padding=1))
        self.mixed_3a = u(c(64), 96, 3, 2)
        self.mixed_4a_1 = nn.Sequential(u(c(64) + c(96), 64, 1), u(c(64), 96, 3))
        self.mixed_4a_2 = nn.Sequential(u(c(64) + c(96), 64, 1), u(c(64), 64, (1, 7), padding=(0, 3)),
                                        u(c(64), 64, (7, 1), padding=(3, 0)), u(c(64), 96, 3))
        self.mixed_5a = u(2 * c(96), 192, 3, 2)
        self.out_channels = c(192) + 2 * c(96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        x = torch.cat([F.max_pool2d(x, 3, 2), self.mixed_3a(x)], dim=1)
        x = torch.cat([self.mixed_4a_1(x), self.mixed_4a_2(x)], dim=1)
        return torch.cat([self.mixed_5a(x), F.max_pool2d(x, 3, 2)], dim=1)


class InceptionA(nn.Module):
    def __init__(self, u: _Scaled, cin: int) -> None:
        super().__init__()
        c = u.c
        self.b0 = u(cin, 96, 1)
        self.b1 = nn.Sequential(u(cin, 64, 1), u(c(64), 96, 3, padding=1))
        self.b2 = nn.Sequential(u(cin, 64, 1), u(c(64), 96, 3, padding=1), u(c(96), 96, 3, padding=1))
        self.b3 = u(cin, 96, 1)
        self.out_channels = 4 * c(96)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b0(x), self.b1(x), self.b2(x), self.b3(_avg3(x))], dim=1)


class ReductionA(nn.Module):
    def __init__(self, u: _Scaled, cin: int) -> None:
        super().__init__()
        c = u.c
        self.b0 = u(cin, 384, 3, 2)
        self.b1 = nn.Sequential(u(cin, 192, 1), u(c(192), 224, 3, padding=1), u(c(224), 256, 3, 2))
        self.out_channels = c(384) + c(256) + cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b0(x), self.b1(x), F.max_pool2d(x, 3, 2)], dim=1)


class InceptionB(nn.Module):
    def __init__(self, u: _Scaled, cin: int) -> None:
        super().__init__()
        c = u.c
        self.b0 = u(cin, 384, 1)
        self.b1 = nn.Sequential(u(cin, 192, 1), u(c(192), 224, (1, 7), padding=(0, 3)),
                                u(c(224), 256, (7, 1), padding=(3, 0)))
        self.b2 = nn.Sequential(u(cin, 192, 1), u(c(192), 192, (7, 1), padding=(3, 0)),
                                u(c(192), 224, (1, 7), padding=(0, 3)), u(c(224), 224, (7, 1), padding=(3, 0)),
                                u(c(224), 256, (1, 7), padding=(0, 3)))
        self.b3 = u(cin, 128, 1)
        self.out_channels = c(384) + 2 * c(256) + c(128)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b0(x), self.b1(x), self.b2(x), self.b3(_avg3(x))], dim=1)


class ReductionB(nn.Module):
    def __init__(self, u: _Scaled, cin: int) -> None:
        super().__init__()
        c = u.c
        self.b0 = nn.Sequential(u(cin, 192, 1), u(c(192), 192, 3, 2))
        self.b1 = nn.Sequential(u(cin, 256, 1), u(c(256), 256, (1, 7), padding=(0, 3)),
                                u(c(256), 320, (7, 1), padding=(3, 0)), u(c(320), 320, 3, 2))
        self.out_channels = c(192) + c(320) + cin

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b0(x), self.b1(x), F.max_pool2d(x, 3, 2)], dim=1)


class InceptionC(nn.Module):
    def __init__(self, u: _Scaled, cin: int) -> None:
        super().__init__()
        c = u.c
        self.b0 = u(cin, 256, 1)
        self.b1 = u(cin, 384, 1)
        self.b1_a = u(c(384), 256, (1, 3), padding=(0, 1))
        self.b1_b = u(c(384), 256, (3, 1), padding=(1, 0))
        self.b2 = nn.Sequential(u(cin, 384, 1), u(c(384), 448, (3, 1), padding=(1, 0)),
                                u(c(448), 512, (1, 3), padding=(0, 1)))
        self.b2_a = u(c(512), 256, (1, 3), padding=(0, 1))
        self.b2_b = u(c(512), 256, (3, 1), padding=(1, 0))
        self.b3 = u(cin, 256, 1)
        self.out_channels = 6 * c(256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y1 = self.b1(x)
        y2 = self.b2(x)
        return torch.cat([self.b0(x), self.b1_a(y1), self.b1_b(y1), self.b2_a(y2), self.b2_b(y2),
                          self.b3(_avg3(x))], dim=1)


class InceptionV4(nn.Module):
    """Inception-V4 with width scale `width` (1 = the original); input (N, 3, 299, 299)."""

    def __init__(self, width: float = 1.0, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        u = _Scaled(width)
        blocks: list[nn.Module] = [Stem(u)]
        for kind, n in ((InceptionA, 4), (ReductionA, 1), (InceptionB, 7), (ReductionB, 1), (InceptionC, 3)):
            for _ in range(n):
                blocks.append(kind(u, blocks[-1].out_channels))
        self.features = nn.Sequential(*blocks)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(blocks[-1].out_channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(global_avg_pool(self.features(x))))


def _make(name: str, *, width: int, image_size: int = 299, num_classes: int = 1000) -> ModelSpec:
    return ModelSpec(
        name=f"inception-v4-{width}", family="inception-v4", paper=PAPER,
        description=f"Inception-V4, all conv channels x{width}, {image_size}x{image_size} images",
        default_batch=64, build=partial(InceptionV4, float(width), num_classes),
        make_inputs=ImageBatch(image_size, num_classes), loss=losses.classification,
        config={"width": width, "image_size": image_size, "num_classes": num_classes},
    )


FAMILIES = [
    Family("inception-v4", r"inception-(?:v4-)?(?P<width>[1-9]\d*)", "inception-v4-{X}", ("inception-v4-4",),
           _make, {"image_size": "input height and width (default 299; at least 75)",
                   "num_classes": "classifier outputs (default 1000)"}, at_least={"image_size": 75}),
]
