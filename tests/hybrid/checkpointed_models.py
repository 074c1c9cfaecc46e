"""Users' modules that checkpoint their blocks (torch.utils.checkpoint), for the capture tests.

Each builder returns (module, args, target, loss_fn) with weights from torch's global generator, so a
seeded call builds the same module. `how` picks the checkpointing: "none", "nonreentrant", "reentrant",
or "selective" (non-reentrant with a policy that saves matrix products and recomputes the rest).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

HOWS = ("nonreentrant", "reentrant", "selective")


def _save_matmuls(ctx: Any, op: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
    keep = op in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
                  torch.ops.aten.convolution.default)
    return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE


def run_block(block: nn.Module, x: torch.Tensor, how: str) -> torch.Tensor:
    """`block(x)`, checkpointed as `how` says."""
    if how == "none":
        return block(x)
    if how == "reentrant":
        return checkpoint(block, x, use_reentrant=True)
    if how == "nonreentrant":
        return checkpoint(block, x, use_reentrant=False)
    if how == "selective":
        return checkpoint(block, x, use_reentrant=False,
                          context_fn=functools.partial(create_selective_checkpoint_contexts, _save_matmuls))
    raise ValueError(how)


class Checkpointed(nn.Module):
    """A stem, checkpointed blocks, a head: the shape of most users' scripts."""

    def __init__(self, stem: nn.Module, blocks: list[nn.Module], head: nn.Module, how: str) -> None:
        super().__init__()
        self.stem, self.blocks, self.head, self.how = stem, nn.ModuleList(blocks), head, how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for b in self.blocks:
            x = run_block(b, x, self.how)
        return self.head(x)


class MLPBlock(nn.Module):
    def __init__(self, d: int, p: float = 0.2) -> None:
        super().__init__()
        self.fc1, self.fc2, self.drop = nn.Linear(d, 3 * d), nn.Linear(3 * d, d), nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.fc2(self.drop(F.gelu(self.fc1(x)))))


class TransformerBlock(nn.Module):
    """Pre-norm attention and MLP, dropout on the attention weights and both residual branches."""

    def __init__(self, d: int, heads: int = 2, p: float = 0.1) -> None:
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        att = att.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
        y = self.drop(att.softmax(-1)) @ v
        x = x + self.drop(self.proj(y.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.mlp(self.ln2(x)))


class ConvBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1)
        self.drop = nn.Dropout2d(0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.conv2(self.drop(F.relu(self.bn1(self.conv1(x))))))


def mlp(how: str) -> tuple[nn.Module, tuple, torch.Tensor, Callable]:
    d = 16
    m = Checkpointed(nn.Linear(12, d), [MLPBlock(d) for _ in range(3)], nn.Linear(d, 5), how)
    gen = torch.Generator().manual_seed(1)
    return m, (torch.randn(8, 12, generator=gen),), torch.randint(5, (8,), generator=gen), F.cross_entropy


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def transformer(how: str) -> tuple[nn.Module, tuple, torch.Tensor, Callable]:
    d, vocab = 16, 23
    m = Checkpointed(nn.Embedding(vocab, d), [TransformerBlock(d) for _ in range(2)], nn.Linear(d, vocab), how)
    gen = torch.Generator().manual_seed(2)
    tokens = torch.randint(vocab, (3, 7), generator=gen)
    return m, (tokens[:, :-1].clone(),), tokens[:, 1:].clone(), lm_loss


def conv(how: str) -> tuple[nn.Module, tuple, torch.Tensor, Callable]:
    c = 6
    stem = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.ReLU())
    head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 4))
    m = Checkpointed(stem, [ConvBlock(c) for _ in range(2)], head, how)
    gen = torch.Generator().manual_seed(3)
    return m, (torch.randn(2, 3, 8, 8, generator=gen),), torch.randint(4, (2,), generator=gen), F.cross_entropy


BUILDERS = {"mlp": mlp, "transformer": transformer, "conv": conv}
