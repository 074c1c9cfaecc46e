"""Small models, swapping plans and eager references shared by the executor tests."""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from hybrid.capture.api import capture, capture_model
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.validator import validate
from hybrid.zoo import get_model

from executor.check import EagerRun, train_eager
from executor.ops import with_copy_workspaces
from hybrid.swap.quick_plans import quick_plan

ITERS = 3
SEED = 7


class TinyLM(nn.Module):
    """A user's own module: embedding tied to the decoder, layer norm, GELU, dropout."""

    def __init__(self, vocab: int = 37, width: int = 24) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.norm = nn.LayerNorm(width)
        self.hidden = nn.Linear(width, 2 * width)
        self.out = nn.Linear(2 * width, width)
        self.drop = nn.Dropout(0.25)
        self.decoder = nn.Linear(width, vocab, bias=False)
        self.decoder.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.embed(tokens))
        h = h + self.out(self.drop(F.gelu(self.hidden(h))))
        return self.decoder(h)


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


@dataclass
class Case:
    name: str
    graph: Graph
    build: Callable[[], nn.Module]       # deterministic: the same weights every call
    args: Any
    target: Any
    loss_fn: Any
    eager: EagerRun | None = None

    def module(self) -> nn.Module:
        return self.build()

    def reference(self) -> EagerRun:
        if self.eager is None:
            self.eager = train_eager(self.graph, self.build(), self.args, self.target, self.loss_fn, ITERS, SEED)
        return self.eager


ZOO = {
    "resnet-18": (2, {"image_size": 32, "num_classes": 10}, "sgd", {"momentum": 0.9}),
    "rnn-2-1k": (3, {"hidden": 16, "embed": 12, "seq_len": 5, "vocab": 40}, "adam", {"weight_decay": 0.01}),
    "squeezenet": (2, {"image_size": 40, "num_classes": 10}, "sgd", {"momentum": 0.9}),
}


def zoo_case(name: str) -> Case:
    batch, ov, opt, options = ZOO[name]
    # the executor's tests run graphs that state its copy-in workspaces (`hybrid capture --executor-workspaces`)
    graph = with_copy_workspaces(capture_model(name, batch, optimizer=opt, lr=0.02, optimizer_options=options,
                                               overrides=ov))
    spec = get_model(name, **ov)
    torch.manual_seed(0)
    base = spec.build()
    args, target = spec.make_inputs(batch, torch.device("cpu"), torch.float32)
    return Case(name, graph, lambda: copy.deepcopy(base), args, target, spec.loss)


def user_case() -> Case:
    torch.manual_seed(0)
    base = TinyLM()
    gen = torch.Generator().manual_seed(1)
    tokens = torch.randint(37, (4, 9), generator=gen)
    args, target = (tokens[:, :-1].clone(),), tokens[:, 1:].clone()
    graph = with_copy_workspaces(capture(base, args, lm_loss, target, optimizer="adam", lr=0.01, name="tinylm"))
    return Case("tinylm", graph, lambda: copy.deepcopy(base), args, target, lm_loss)


_CASES: dict[str, Case] = {}


def case(name: str) -> Case:
    """A zoo case or the user module ("tinylm"), built once per test session."""
    if name not in _CASES:
        _CASES[name] = user_case() if name == "tinylm" else zoo_case(name)
    return _CASES[name]


def swap_plan(graph: Graph, kind: str, fraction: float = 0.5) -> Plan:
    """A plan at `fraction` of the unswapped peak: merged size classes, or a byte budget (Belady)."""
    plan = quick_plan(graph, fraction, kind)
    report = validate(graph, plan)
    assert report.valid, report.violations[:3]
    return plan
