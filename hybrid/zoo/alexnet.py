"""AlexNet as in torchvision (the CPU/GPU partitioning paper's PyTorch model, Tables 4-5).

The paper splits it into 32 basic operators at 224x224, batch 1. Five
convolutions with ReLU and three max-pools, adaptive average pooling to 6x6,
and a classifier with the original two dropout layers; 61,100,840 parameters.
"""
from __future__ import annotations

from functools import partial

import torch
import torch.nn as nn

from hybrid.zoo import losses
from hybrid.zoo.inputs import ImageBatch
from hybrid.zoo.registry import Family, ModelSpec


class AlexNet(nn.Module):
    def __init__(self, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 11, stride=4, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(64, 192, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2),
            nn.Conv2d(192, 384, 3, padding=1), nn.ReLU(),
            nn.Conv2d(384, 256, 3, padding=1), nn.ReLU(),
            nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2))
        self.pool = nn.AdaptiveAvgPool2d(6)
        self.classifier = nn.Sequential(
            nn.Dropout(dropout), nn.Linear(256 * 6 * 6, 4096), nn.ReLU(),
            nn.Dropout(dropout), nn.Linear(4096, 4096), nn.ReLU(),
            nn.Linear(4096, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


def _make(name: str, *, image_size: int = 224, num_classes: int = 1000) -> ModelSpec:
    return ModelSpec(
        name="alexnet", family="alexnet", paper="CPU/GPU partitioning paper, Tables 4-5",
        description=f"AlexNet (torchvision), dropout classifier, {image_size}x{image_size} images",
        default_batch=1, build=partial(AlexNet, num_classes),
        make_inputs=ImageBatch(image_size, num_classes), loss=losses.classification,
        config={"image_size": image_size, "num_classes": num_classes},
    )


FAMILIES = [
    Family("alexnet", r"alexnet", "alexnet", ("alexnet",), _make,
           {"image_size": "input height and width (default 224; at least 63)",
            "num_classes": "classifier outputs (default 1000)"}, at_least={"image_size": 63}),
]
