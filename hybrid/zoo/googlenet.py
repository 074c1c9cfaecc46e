"""GoogLeNet (Szegedy et al., CVPR'15) as torchvision's `googlenet`, without auxiliary heads.

The CPU/GPU partitioning paper (Table 4, Fig. 11) runs PyTorch's pretrained
GoogLeNet, batch 1 at 224x224. torchvision's version adds batch norm to every
convolution and, in the third branch of each Inception module, uses a 3x3
convolution where the paper has 5x5; we follow torchvision, since that is the
model the paper measured (6,624,904 parameters). The two auxiliary classifiers
are left out: the pretrained model drops them too.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from hybrid.zoo import losses
from hybrid.zoo.inputs import ImageBatch
from hybrid.zoo.layers import ConvBNReLU, global_avg_pool
from hybrid.zoo.registry import Family, ModelSpec

# in, 1x1, 3x3 reduce, 3x3, "5x5" reduce, "5x5", pool projection
INCEPTION = {
    "3a": (192, 64, 96, 128, 16, 32, 32), "3b": (256, 128, 128, 192, 32, 96, 64),
    "4a": (480, 192, 96, 208, 16, 48, 64), "4b": (512, 160, 112, 224, 24, 64, 64),
    "4c": (512, 128, 128, 256, 24, 64, 64), "4d": (512, 112, 144, 288, 32, 64, 64),
    "4e": (528, 256, 160, 320, 32, 128, 128), "5a": (832, 256, 160, 320, 32, 128, 128),
    "5b": (832, 384, 192, 384, 48, 128, 128),
}


def _unit(cin: int, cout: int, kernel: int, stride: int = 1, padding: int = 0) -> ConvBNReLU:
    return ConvBNReLU(cin, cout, kernel, stride, padding, eps=1e-3)


class Inception(nn.Module):
    def __init__(self, cin: int, c1: int, r3: int, c3: int, r5: int, c5: int, pool: int) -> None:
        super().__init__()
        self.b1 = _unit(cin, c1, 1)
        self.b2 = nn.Sequential(_unit(cin, r3, 1), _unit(r3, c3, 3, padding=1))
        self.b3 = nn.Sequential(_unit(cin, r5, 1), _unit(r5, c5, 3, padding=1))
        self.b4 = _unit(cin, pool, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = F.max_pool2d(x, 3, stride=1, padding=1, ceil_mode=True)
        return torch.cat([self.b1(x), self.b2(x), self.b3(x), self.b4(p)], dim=1)


class GoogLeNet(nn.Module):
    def __init__(self, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        pool = partial(nn.MaxPool2d, 3, 2, ceil_mode=True)
        self.features = nn.Sequential(
            _unit(3, 64, 7, 2, 3), pool(), _unit(64, 64, 1), _unit(64, 192, 3, padding=1), pool(),
            Inception(*INCEPTION["3a"]), Inception(*INCEPTION["3b"]), pool(),
            *(Inception(*INCEPTION[k]) for k in ("4a", "4b", "4c", "4d", "4e")),
            nn.MaxPool2d(2, 2, ceil_mode=True),
            Inception(*INCEPTION["5a"]), Inception(*INCEPTION["5b"]))
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(1024, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(global_avg_pool(self.features(x))))


def _make(name: str, *, image_size: int = 224, num_classes: int = 1000) -> ModelSpec:
    return ModelSpec(
        name="googlenet", family="googlenet", paper="CPU/GPU partitioning paper, Table 4, Fig. 11",
        description=f"GoogLeNet (torchvision, no aux heads), {image_size}x{image_size} images",
        default_batch=1, build=partial(GoogLeNet, num_classes),
        make_inputs=ImageBatch(image_size, num_classes), loss=losses.classification,
        config={"image_size": image_size, "num_classes": num_classes},
    )


FAMILIES = [
    Family("googlenet", r"googlenet", "googlenet", ("googlenet",), _make,
           {"image_size": "input height and width (default 224)",
            "num_classes": "classifier outputs (default 1000)"}),
]
