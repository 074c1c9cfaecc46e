"""UNet (Ronneberger et al., MICCAI'15) for MO-SOS's segmentation workload.

MO-SOS (§3.1) trains UNet on Data Science Bowl (2018 nucleus
segmentation) images at 256x256 with batch 120. It does not give the variant;
we use the original architecture: four down steps of two 3x3 conv + ReLU and a
2x2 max-pool (64, 128, 256, 512 channels), a 1024-channel bottom, four up steps
of a 2x2 transposed convolution halving the channels, concatenation with the
skip connection and two 3x3 conv + ReLU, then a 1x1 convolution. Differences
from the paper, for 256x256 masks: convolutions are padded (output size equals
input size, no cropping); RGB input (3 channels); one output channel scored
with per-pixel sigmoid cross-entropy (nucleus vs background). Dropout (0.5)
sits at the end of the contracting path as in the paper. ~31 M parameters.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn

from hybrid.errors import HybridError
from hybrid.zoo import losses
from hybrid.zoo.inputs import SegmentationBatch
from hybrid.zoo.registry import Family, ModelSpec


def _double_conv(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())


class UNet(nn.Module):
    def __init__(self, in_channels: int = 3, out_channels: int = 1, base: int = 64, depth: int = 4,
                 dropout: float = 0.5) -> None:
        super().__init__()
        widths = [base * 2 ** i for i in range(depth + 1)]
        self.down = nn.ModuleList()
        cin = in_channels
        for w in widths[:-1]:
            self.down.append(_double_conv(cin, w))
            cin = w
        self.pool = nn.MaxPool2d(2)
        self.bottom = _double_conv(widths[-2], widths[-1])
        self.dropout = nn.Dropout(dropout)
        self.up = nn.ModuleList()
        self.merge = nn.ModuleList()
        for w_low, w in zip(widths[:0:-1], widths[-2::-1]):
            self.up.append(nn.ConvTranspose2d(w_low, w, 2, stride=2))
            self.merge.append(_double_conv(2 * w, w))
        self.head = nn.Conv2d(widths[0], out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for block in self.down:
            x = block(x)
            skips.append(x)
            x = self.pool(x)
        x = self.dropout(self.bottom(x))
        for up, merge, skip in zip(self.up, self.merge, reversed(skips)):
            x = merge(torch.cat([skip, up(x)], dim=1))
        return self.head(x)


def _make(name: str, *, image_size: int = 256, in_channels: int = 3, out_channels: int = 1, base: int = 64,
          depth: int = 4) -> ModelSpec:
    if image_size % (2 ** depth):
        raise HybridError(f"model 'unet': image_size={image_size} must be a multiple of 2**depth = {2 ** depth}")
    return ModelSpec(
        name="unet", family="unet", paper="MO-SOS §3.1",
        description=f"UNet, {base}-{base * 2 ** depth} channels, {image_size}x{image_size} images, per-pixel loss",
        default_batch=120,
        build=partial(UNet, in_channels, out_channels, base, depth),
        make_inputs=SegmentationBatch(image_size, in_channels, out_channels), loss=losses.pixelwise_binary,
        config={"image_size": image_size, "in_channels": in_channels, "out_channels": out_channels,
                "base": base, "depth": depth},
    )


FAMILIES = [
    Family("unet", r"u-?net", "unet", ("unet",), _make,
           {"image_size": "input height and width, a multiple of 2**depth (default 256)",
            "in_channels": "image channels (default 3)", "out_channels": "mask channels (default 1)",
            "base": "channels of the first level (default 64)", "depth": "down/up steps (default 4)"}),
]
