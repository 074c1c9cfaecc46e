"""SqueezeNet 1.0 (Iandola et al., 2016) as torchvision's `squeezenet1_0`.

The CPU/GPU partitioning paper (Table 4, Fig. 11) uses PyTorch's pretrained
SqueezeNet without saying which version; 1.0 is the architecture of the
SqueezeNet paper (1.1 is a cheaper revision), 1,248,424 parameters. Fire
modules squeeze with a 1x1 convolution and expand with parallel 1x1 and 3x3
convolutions whose outputs are concatenated; the classifier is dropout, a 1x1
convolution to the classes, ReLU and global average pooling.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn

from hybrid.zoo import losses
from hybrid.zoo.inputs import ImageBatch
from hybrid.zoo.layers import global_avg_pool
from hybrid.zoo.registry import Family, ModelSpec


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, expand1: int, expand3: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.expand1 = nn.Conv2d(squeeze, expand1, 1)
        self.expand3 = nn.Conv2d(squeeze, expand3, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.relu(self.squeeze(x))
        return torch.cat([self.relu(self.expand1(s)), self.relu(self.expand3(s))], dim=1)


class SqueezeNet(nn.Module):
    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 96, 7, stride=2), nn.ReLU(), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(96, 16, 64, 64), Fire(128, 16, 64, 64), Fire(128, 32, 128, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(256, 32, 128, 128), Fire(256, 48, 192, 192), Fire(384, 48, 192, 192), Fire(384, 64, 256, 256),
            nn.MaxPool2d(3, 2, ceil_mode=True), Fire(512, 64, 256, 256))
        final = nn.Conv2d(512, num_classes, 1)
        self.classifier = nn.Sequential(nn.Dropout(dropout), final, nn.ReLU())
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                if m is final:
                    nn.init.normal_(m.weight, 0.0, 0.01)
                else:
                    nn.init.kaiming_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return global_avg_pool(self.classifier(self.features(x)))


def _make(name: str, *, image_size: int = 224, num_classes: int = 1000) -> ModelSpec:
    return ModelSpec(
        name="squeezenet", family="squeezenet", paper="CPU/GPU partitioning paper, Table 4, Fig. 11",
        description=f"SqueezeNet 1.0 (torchvision), {image_size}x{image_size} images",
        default_batch=1, build=partial(SqueezeNet, num_classes),
        make_inputs=ImageBatch(image_size, num_classes), loss=losses.classification,
        config={"image_size": image_size, "num_classes": num_classes},
    )


FAMILIES = [
    Family("squeezenet", r"squeezenet(?:-?1[._]?0)?", "squeezenet", ("squeezenet",), _make,
           {"image_size": "input height and width (default 224; at least 21)",
            "num_classes": "classifier outputs (default 1000)"}, at_least={"image_size": 21}),
]
