"""VGG-11/16/19 (Simonyan & Zisserman, configurations A, D, E) as in torchvision.

VGG19 is MO-SOS's first model (§3.1: ImageNet at 227x227, batch 144,
Tesla P40); VGG11 and VGG16 are the CPU/GPU partitioning paper's (Table 4,
Fig. 2: the fully connected layers hold 89.4% of VGG16's parameters), loaded
from PyTorch at 224x224, batch 1. The classifier keeps the original two
dropout layers. MO-SOS's Figure 1 shows batch norm in its generic CNN but does
not say that its VGG19 has it, so the default is the original (no BN);
`batch_norm=true` gives torchvision's `vgg*_bn`. Parameter counts equal
torchvision's (VGG19: 143,667,240).
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn

from hybrid.zoo import losses
from hybrid.zoo.inputs import ImageBatch
from hybrid.zoo.registry import Family, ModelSpec

CONFIGS: dict[int, tuple[int | str, ...]] = {
    11: (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    13: (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
    19: (64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"),
}


class VGG(nn.Module):
    def __init__(self, depth: int, num_classes: int = 1000, batch_norm: bool = False, dropout: float = 0.5) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 3
        for v in CONFIGS[depth]:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
                continue
            assert isinstance(v, int)
            layers.append(nn.Conv2d(cin, v, 3, padding=1))
            if batch_norm:
                layers.append(nn.BatchNorm2d(v))
            layers.append(nn.ReLU())
            cin = v
        self.features = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(7)
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(4096, 4096), nn.ReLU(), nn.Dropout(dropout),
            nn.Linear(4096, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0, 0.01)
                nn.init.zeros_(m.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def _make(name: str, *, depth: int, image_size: int | None = None, num_classes: int = 1000,
          batch_norm: bool = False) -> ModelSpec:
    mosos = depth == 19
    size = image_size if image_size is not None else (227 if mosos else 224)
    paper = "MO-SOS §3.1" if mosos else "CPU/GPU partitioning paper, Table 4, Fig. 2"
    return ModelSpec(
        name=f"vgg{depth}", family="vgg", paper=paper,
        description=f"VGG-{depth}{' with BN' if batch_norm else ''}, dropout classifier, {size}x{size} images",
        default_batch=144 if mosos else 1,
        build=partial(VGG, depth, num_classes, batch_norm),
        make_inputs=ImageBatch(size, num_classes), loss=losses.classification,
        config={"depth": depth, "image_size": size, "num_classes": num_classes, "batch_norm": batch_norm},
    )


FAMILIES = [
    Family("vgg", r"vgg-?(?P<depth>11|13|16|19)", "vgg{11,13,16,19}", ("vgg19", "vgg11", "vgg16"), _make,
           {"image_size": "input height and width (default 227 for vgg19 as in MO-SOS, else 224; at least 32)",
            "num_classes": "classifier outputs (default 1000)",
            "batch_norm": "batch norm after every convolution (default false)"}, at_least={"image_size": 32}),
]
