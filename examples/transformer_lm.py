"""A small language model for `hybrid capture --module examples.transformer_lm:make` (from the repository root).

A 2-layer `nn.TransformerEncoder` (d=256, 4 heads, feed-forward 512, dropout 0.1) over a 500-token vocabulary,
a batch of 8 sequences of 128 tokens, next-token cross-entropy. The executor's tests run every planner's plan on
it, and `benchmarks.recompute` compares swap-only against swap+recompute on it.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class TransformerLM(nn.Module):
    def __init__(self, vocab: int = 500, d: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        layer = nn.TransformerEncoderLayer(d, nhead=4, dim_feedforward=2 * d, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)))


def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def make(batch: int = 8, seq: int = 128, vocab: int = 500):
    """(module, inputs, target, loss_fn): the tokens come from their own generator."""
    tokens = torch.randint(vocab, (batch, seq + 1), generator=torch.Generator().manual_seed(1))
    return TransformerLM(vocab), (tokens[:, :-1].clone(),), tokens[:, 1:].clone(), lm_loss
