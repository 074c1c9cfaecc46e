"""ResNet-{18,34,50,101,152} and SwapAdvisor's wide WResNet-{depth}-X.

ResNet follows torchvision's ImageNet models (v1.5: the stride sits in the 3x3
convolution of a bottleneck), which is what the CPU/GPU partitioning paper
loads from PyTorch; parameter counts equal torchvision's (ResNet-152:
60,192,808). SwapAdvisor uses ResNet-152 for its inference study (Table 2,
batches 1/16/64).

WResNet-152-X (SwapAdvisor §6.1): "the channel sizes of the convolution
operators are multiplied by a width scale", trained on ImageNet-sized 224x224
images, batch 64 in Table 1. We scale every convolution's channels (stem,
inner and outer bottleneck convolutions), not only the inner 3x3 as
torchvision's `wide_resnet50_2` does. That reading is the literal one and
matches Table 1's 180 GB for WResNet-152-10: it has 5.8 G parameters, and its
graph captured with `hybrid capture` (SGD with momentum), run in program
order with tensors freed after their last use, peaks at ~161 GB at batch 64.
Scaling only the inner convolutions would give 3.2 G parameters and well
under half the activation memory.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn

from hybrid.errors import HybridError
from hybrid.zoo import losses
from hybrid.zoo.inputs import ImageBatch
from hybrid.zoo.layers import global_avg_pool, scaled
from hybrid.zoo.registry import Family, ModelSpec

SWAPADVISOR = "SwapAdvisor (ASPLOS'20) §6.1, Table 1"
LAYERS = {18: ("basic", (2, 2, 2, 2)), 34: ("basic", (3, 4, 6, 3)), 50: ("bottleneck", (3, 4, 6, 3)),
          101: ("bottleneck", (3, 4, 23, 3)), 152: ("bottleneck", (3, 8, 36, 3))}


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False),
                         nn.BatchNorm2d(cout))


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        cout = planes * self.expansion
        self.conv1 = _conv_bn(cin, planes, 3, stride)
        self.conv2 = _conv_bn(planes, cout, 3)
        self.relu = nn.ReLU()
        self.shortcut = _conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv2(self.relu(self.conv1(x)))
        return self.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        cout = planes * self.expansion
        self.conv1 = _conv_bn(cin, planes, 1)
        self.conv2 = _conv_bn(planes, planes, 3, stride)
        self.conv3 = _conv_bn(planes, cout, 1)
        self.relu = nn.ReLU()
        self.shortcut = _conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv3(self.relu(self.conv2(self.relu(self.conv1(x)))))
        return self.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class ResNet(nn.Module):
    """ImageNet ResNet with every channel count multiplied by `width` (1 = the standard model)."""

    def __init__(self, depth: int, width: float = 1.0, num_classes: int = 1000) -> None:
        super().__init__()
        kind, counts = LAYERS[depth]
        block = Bottleneck if kind == "bottleneck" else BasicBlock
        stem = scaled(64, width)
        self.stem = nn.Sequential(nn.Conv2d(3, stem, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(stem),
                                  nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1))
        cin = stem
        stages = []
        for i, (n, planes) in enumerate(zip(counts, (64, 128, 256, 512))):
            blocks = []
            for j in range(n):
                blocks.append(block(cin, scaled(planes, width), 2 if (j == 0 and i > 0) else 1))
                cin = scaled(planes, width) * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(global_avg_pool(self.stages(self.stem(x))))


def _check_depth(name: str, depth: int) -> None:
    if depth not in LAYERS:
        raise HybridError(f"model {name!r}: depth {depth} is not one of {sorted(LAYERS)}")


def _resnet(name: str, *, depth: int, image_size: int = 224, num_classes: int = 1000) -> ModelSpec:
    _check_depth(name, depth)
    if depth == 152:
        paper, batch = "SwapAdvisor (ASPLOS'20) Table 2; CPU/GPU partitioning paper, Fig. 9", 64
    else:
        paper, batch = "CPU/GPU partitioning paper, Fig. 9, 11", 1
    return ModelSpec(
        name=f"resnet-{depth}", family="resnet", paper=paper,
        description=f"ResNet-{depth} (torchvision v1.5), {image_size}x{image_size} images, {num_classes} classes",
        default_batch=batch, build=partial(ResNet, depth, 1.0, num_classes),
        make_inputs=ImageBatch(image_size, num_classes), loss=losses.classification,
        config={"depth": depth, "width": 1, "image_size": image_size, "num_classes": num_classes},
    )


def _wresnet(name: str, *, depth: int, width: int, image_size: int = 224, num_classes: int = 1000) -> ModelSpec:
    _check_depth(name, depth)
    return ModelSpec(
        name=name, family="wresnet", paper=SWAPADVISOR,
        description=f"wide ResNet-{depth}, all conv channels x{width}, {image_size}x{image_size} images",
        default_batch=64, build=partial(ResNet, depth, float(width), num_classes),
        make_inputs=ImageBatch(image_size, num_classes), loss=losses.classification,
        config={"depth": depth, "width": width, "image_size": image_size, "num_classes": num_classes},
    )


_OVERRIDES = {"image_size": "input height and width (default 224)",
              "num_classes": "classifier outputs (default 1000)"}

FAMILIES = [
    Family("wresnet", r"wresnet-(?P<depth>\d+)-(?P<width>[1-9]\d*)", "wresnet-{depth}-{X}", ("wresnet-152-10",),
           _wresnet, _OVERRIDES),
    Family("resnet", r"resnet-?(?P<depth>\d+)", "resnet-{depth}",
           ("resnet-152", "resnet-18", "resnet-34", "resnet-50", "resnet-101"), _resnet, _OVERRIDES),
]
