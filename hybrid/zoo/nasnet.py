"""NasNet-R: NASNet-A (Zoph et al., CVPR'18) for ImageNet with R normal cells per stack.

Source: SwapAdvisor (ASPLOS'20) §6.1: a NasNet is a chain of Reduction and
Normal cells with residual links between consecutive cells; "the normal cell
repeats 3R times; the largest R in the original design is 7; we train
NasNet-25" (batch 64 in Table 1: 193 GB, 5533 ops, 65 distinct tensor sizes).

Structure (the reference TF-slim `nasnet.py`/`nasnet_utils.py`): a 3x3/2 stem
convolution, two stem reduction cells, then R normal cells, a reduction cell,
R normal cells, a reduction cell, R normal cells (3R normal cells in all),
ReLU, global average pooling, dropout (keep 0.5) and the classifier. Cells
take the two previous cell outputs; NASNet-A's normal and reduction cells are
written out below with their operations and wiring.

Choices where the paper is silent:
- Width: NASNet-A Large's configuration (168 filters in the first stack,
  stem multiplier 3, 331x331 images, normal cells after a reduction read the
  output from before it). Its graph captured with `hybrid capture` (SGD with
  momentum), run in program order with tensors freed after their last use,
  peaks at ~175 GB at batch 64 against Table 1's 193 GB; NASNet-A Mobile's
  width (44 filters, 224x224) peaks at ~20 GB. `filters=44,
  stem_multiplier=1, image_size=224, skip_reduction_input=false` selects the
  Mobile layout. Parameter counts equal Keras' trainable counts for both
  published models (nasnet-6 Large: 88,753,150; nasnet-4 Mobile: 5,289,978).
- The auxiliary classifier and drop-path (a stochastic regulariser) are left
  out, so the graph is the same every iteration.
- Padding is symmetric (k // 2), which gives TF's "SAME" output sizes.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

from hybrid.zoo import losses
from hybrid.zoo.inputs import ImageBatch
from hybrid.zoo.layers import global_avg_pool
from hybrid.zoo.registry import Family, ModelSpec

PAPER = "SwapAdvisor (ASPLOS'20) §6.1, Table 1"

# (operation, input state) pairs, five combinations per cell: state 0 is the
# cell's own (1x1-projected) input, state 1 the previous cell's output, and
# state 2+i the sum made by combination i. The cell's output concatenates the
# states in the second tuple (TF-slim's states not marked in `used_hiddenstates`).
NORMAL = ((("sep5", 0), ("sep3", 1), ("sep5", 1), ("sep3", 1), ("avg", 0), ("id", 1),
           ("avg", 1), ("avg", 1), ("sep3", 0), ("id", 0)), (1, 2, 3, 4, 5, 6))
REDUCTION = ((("sep5", 0), ("sep7", 1), ("max", 0), ("sep7", 1), ("avg", 0), ("sep5", 1),
              ("id", 3), ("avg", 2), ("sep3", 2), ("max", 0)), (3, 4, 5, 6))
Wiring = tuple[tuple[tuple[str, int], ...], tuple[int, ...]]


@dataclass(frozen=True)
class State:
    """Channels and resolution level (number of stride-2 steps since the stem) of a cell state."""

    channels: int
    level: int


def _conv_bn(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout, eps=1e-3))


class SeparableStack(nn.Module):
    """NASNet's "separable_KxK_2": twice ReLU -> depthwise KxK -> pointwise 1x1 -> BN; stride on the first."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for i, c in enumerate((cin, cout)):
            layers += [nn.ReLU(),
                       nn.Conv2d(c, c, kernel, stride=stride if i == 0 else 1, padding=kernel // 2, groups=c,
                                 bias=False),
                       nn.Conv2d(c, cout, 1, bias=False), nn.BatchNorm2d(cout, eps=1e-3)]
        self.body = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class FactorizedReduction(nn.Module):
    """Halve the resolution without dropping pixels: two 1x1/2 paths offset by one pixel, concatenated."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.path1 = nn.Conv2d(cin, cout // 2, 1, bias=False)
        self.path2 = nn.Conv2d(cin, cout - cout // 2, 1, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p1 = self.path1(F.avg_pool2d(x, 1, stride=2))
        shifted = F.pad(x, (0, 1, 0, 1))[:, :, 1:, 1:]
        p2 = self.path2(F.avg_pool2d(shifted, 1, stride=2))
        return self.bn(torch.cat([p1, p2], dim=1))


class Pool(nn.Module):
    """3x3 pooling ("SAME" padding), then a 1x1 projection when the channels differ."""

    def __init__(self, kind: str, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.kind, self.stride = kind, stride
        self.project = _conv_bn(cin, cout) if cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "avg":
            x = F.avg_pool2d(x, 3, stride=self.stride, padding=1, count_include_pad=False)
        else:
            x = F.max_pool2d(x, 3, stride=self.stride, padding=1)
        return x if self.project is None else self.project(x)


def _operation(op: str, cin: int, cout: int, stride: int) -> nn.Module:
    if op.startswith("sep"):
        return SeparableStack(cin, cout, int(op[3:]), stride)
    if op in ("avg", "max"):
        return Pool(op, cin, cout, stride)
    if stride > 1 or cin != cout:  # "none" that must change shape: ReLU -> 1x1 -> BN
        return nn.Sequential(nn.ReLU(), _conv_bn(cin, cout, stride))
    return nn.Identity()


class Cell(nn.Module):
    """One NASNet-A cell; `reduction` cells apply stride 2 to operations on the two input states."""

    def __init__(self, wiring: Wiring, filters: int, cur: State, prev: State | None, reduction: bool) -> None:
        super().__init__()
        combos, concat = wiring
        stride = 2 if reduction else 1
        if prev is None:  # first cell: the "previous" output is the input itself, unprojected
            self.prev_proj: nn.Module = nn.Identity()
            prev = cur
        elif prev.level != cur.level:
            self.prev_proj = nn.Sequential(nn.ReLU(), FactorizedReduction(prev.channels, filters))
            prev = State(filters, cur.level)
        elif prev.channels != filters:
            self.prev_proj = nn.Sequential(nn.ReLU(), _conv_bn(prev.channels, filters))
            prev = State(filters, cur.level)
        else:
            self.prev_proj = nn.Identity()
        self.base = nn.Sequential(nn.ReLU(), _conv_bn(cur.channels, filters))
        states = [State(filters, cur.level), prev]
        out_level = cur.level + (1 if reduction else 0)
        self.ops = nn.ModuleList()
        self.inputs = [idx for _, idx in combos]
        for op, idx in combos:
            s = stride if idx < 2 else 1
            self.ops.append(_operation(op, states[idx].channels, filters, s))
            if len(self.ops) % 2 == 0:
                states.append(State(filters, out_level))
        self.outputs = list(concat)
        self.fix = nn.ModuleDict()
        for i in self.outputs:  # TF-slim reduces unused states that do not match the last one
            s = states[i]
            if s.level != out_level:
                self.fix[str(i)] = FactorizedReduction(s.channels, filters)
            elif s.channels != filters:
                self.fix[str(i)] = _conv_bn(s.channels, filters)
        self.out = State(filters * len(self.outputs), out_level)

    def forward(self, x: torch.Tensor, prev: torch.Tensor | None) -> torch.Tensor:
        states = [self.base(x), self.prev_proj(x if prev is None else prev)]
        for k in range(0, len(self.ops), 2):
            left = self.ops[k](states[self.inputs[k]])
            right = self.ops[k + 1](states[self.inputs[k + 1]])
            states.append(left + right)
        outs = [self.fix[str(i)](states[i]) if str(i) in self.fix else states[i] for i in self.outputs]
        return torch.cat(outs, dim=1)


class NASNetA(nn.Module):
    """NASNet-A for ImageNet: stem, two stem reduction cells, 3 stacks of `repeats` normal cells."""

    def __init__(self, repeats: int, filters: int = 168, stem_multiplier: float = 3.0,
                 skip_reduction_input: bool = True, num_classes: int = 1000, dropout: float = 0.5) -> None:
        super().__init__()
        stem = int(32 * stem_multiplier)
        self.stem = nn.Sequential(nn.Conv2d(3, stem, 3, stride=2, bias=False), nn.BatchNorm2d(stem, eps=1e-3))
        outputs: list[State | None] = [None, State(stem, 0)]
        cells: list[Cell] = []
        self.prev_index: list[int] = []  # which earlier output (index into the running list) each cell reads

        def add(wiring: Wiring, scale: float, reduction: bool, prev_pos: int) -> None:
            cell = Cell(wiring, int(filters * scale), outputs[-1], outputs[prev_pos], reduction)  # type: ignore
            cells.append(cell)
            self.prev_index.append(prev_pos % len(outputs) if outputs[prev_pos] is not None else -1)
            outputs.append(cell.out)

        scale = 1.0 / 4
        for _ in range(2):
            add(REDUCTION, scale, True, -2)
            scale *= 2
        num_cells = 3 * repeats
        reduction_at = [int((float(k) / 3) * num_cells) for k in (1, 2)]  # TF-slim calc_reduction_layers
        scale = 1.0
        for i in range(num_cells):
            prev_pos = len(outputs) - 2  # the output before the current input, fixed before any reduction
            if i in reduction_at:
                scale *= 2
                add(REDUCTION, scale, True, -2)
                if not skip_reduction_input:
                    prev_pos = len(outputs) - 2
            add(NORMAL, scale, False, prev_pos)
        self.cells = nn.ModuleList(cells)
        self.dropout = nn.Dropout(dropout)
        last = outputs[-1]
        assert last is not None
        self.fc = nn.Linear(last.channels, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs: list[torch.Tensor | None] = [None, self.stem(x)]
        for cell, prev in zip(self.cells, self.prev_index):
            outputs.append(cell(outputs[-1], None if prev < 0 else outputs[prev]))
        y = F.relu(outputs[-1])
        return self.fc(self.dropout(global_avg_pool(y)))


def _make(name: str, *, repeats: int, filters: int = 168, stem_multiplier: int = 3, image_size: int = 331,
          num_classes: int = 1000, skip_reduction_input: bool = True) -> ModelSpec:
    return ModelSpec(
        name=name, family="nasnet", paper=PAPER,
        description=f"NASNet-A, {3 * repeats} normal + 4 reduction cells, {filters} filters, "
                    f"{image_size}x{image_size} images",
        default_batch=64,
        build=partial(NASNetA, repeats, filters, float(stem_multiplier), skip_reduction_input, num_classes),
        make_inputs=ImageBatch(image_size, num_classes), loss=losses.classification,
        config={"repeats": repeats, "filters": filters, "stem_multiplier": stem_multiplier,
                "image_size": image_size, "num_classes": num_classes,
                "skip_reduction_input": skip_reduction_input},
    )


FAMILIES = [
    Family("nasnet", r"nasnet-(?P<repeats>[1-9]\d*)", "nasnet-{R}", ("nasnet-25",), _make,
           {"filters": "filters of the first stack's cells (default 168 as NASNet-A Large; Mobile: 44)",
            "stem_multiplier": "stem convolution width / 32 (default 3; Mobile: 1)",
            "image_size": "input height and width (default 331; Mobile: 224)",
            "num_classes": "classifier outputs (default 1000)",
            "skip_reduction_input": "normal cells after a reduction read the output from before it "
                                    "(default true; Mobile: false)"}),
]
