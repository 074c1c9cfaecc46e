"""MobileNet v1 (Howard et al., 2017), and v2 (Sandler et al., CVPR'18) as torchvision has it.

The CPU/GPU partitioning paper (Table 4, Fig. 11) evaluates "MobileNet" from
PyTorch's pretrained models at 224x224, batch 1. torchvision only ships v2 and
v3, so that model was most likely MobileNetV2; the project's issue asks for v1.
Both are here: `mobilenet` is v1 (1.0 width, 224: a 3x3/2 stem, 13 depthwise
separable blocks, 4.2 M parameters) and `mobilenet-v2` is torchvision's
`mobilenet_v2` (3,504,872 parameters). Every convolution is followed by batch
norm and ReLU (ReLU6 in v2); v2 keeps torchvision's dropout (0.2) before the
classifier.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn

from hybrid.zoo import losses
from hybrid.zoo.inputs import ImageBatch
from hybrid.zoo.layers import ConvBNReLU, global_avg_pool
from hybrid.zoo.registry import Family, ModelSpec

PAPER = "CPU/GPU partitioning paper, Table 4, Fig. 11"
# (output channels, stride) of v1's depthwise-separable blocks.
V1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1), (512, 1), (512, 1),
             (512, 1), (512, 1), (1024, 2), (1024, 1))
# (expansion t, channels c, repeats n, stride s) of v2's inverted residual stages.
V2_STAGES = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
             (6, 320, 1, 1))


class MobileNetV1(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        layers: list[nn.Module] = [ConvBNReLU(3, 32, 3, 2, 1)]
        cin = 32
        for cout, stride in V1_BLOCKS:
            layers += [ConvBNReLU(cin, cin, 3, stride, 1, groups=cin), ConvBNReLU(cin, cout, 1)]
            cin = cout
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(global_avg_pool(self.features(x)))


def _conv_bn_relu6(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6())


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = [] if expand == 1 else [_conv_bn_relu6(cin, hidden, 1)]
        layers += [_conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
                   nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.body(x)
        return x + y if self.residual else y


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000, dropout: float = 0.2) -> None:
        super().__init__()
        layers: list[nn.Module] = [_conv_bn_relu6(3, 32, 3, 2)]
        cin = 32
        for t, c, n, s in V2_STAGES:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_conv_bn_relu6(cin, 1280, 1))
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(dropout)
        self.fc = nn.Linear(1280, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.dropout(global_avg_pool(self.features(x))))


def _make(name: str, *, version: int, image_size: int = 224, num_classes: int = 1000) -> ModelSpec:
    cls = MobileNetV1 if version == 1 else MobileNetV2
    return ModelSpec(
        name="mobilenet" if version == 1 else "mobilenet-v2", family="mobilenet", paper=PAPER,
        description=f"MobileNet v{version}{' (torchvision)' if version == 2 else ''}, "
                    f"{image_size}x{image_size} images",
        default_batch=1, build=partial(cls, num_classes),
        make_inputs=ImageBatch(image_size, num_classes), loss=losses.classification,
        config={"version": version, "image_size": image_size, "num_classes": num_classes},
    )


_OVERRIDES = {"image_size": "input height and width (default 224)", "num_classes": "classifier outputs (default 1000)"}

FAMILIES = [
    Family("mobilenet", r"mobilenet(?:-?v1)?", "mobilenet", ("mobilenet",), partial(_make, version=1), _OVERRIDES),
    Family("mobilenet-v2", r"mobilenet-?v2", "mobilenet-v2", ("mobilenet-v2",), partial(_make, version=2),
           _OVERRIDES),
]
