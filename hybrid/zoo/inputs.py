"""Synthetic batches for zoo models: deterministic on real devices, free on the meta device.

Real tensors are drawn on the CPU from a generator with a fixed seed and then
moved, so a batch is the same on every device and every run; on "meta" only
shapes are made, so capturing a 64-image WResNet batch allocates nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

SEED = 0


def _device(device: torch.device | str) -> torch.device:
    return device if isinstance(device, torch.device) else torch.device(device)


def randn(shape: tuple[int, ...], device: torch.device | str, dtype: torch.dtype, seed: int = SEED) -> torch.Tensor:
    device = _device(device)
    if device.type == "meta":
        return torch.empty(shape, device=device, dtype=dtype)
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen).to(device=device, dtype=dtype)


def randint(high: int, shape: tuple[int, ...], device: torch.device | str, seed: int = SEED) -> torch.Tensor:
    device = _device(device)
    if device.type == "meta":
        return torch.empty(shape, device=device, dtype=torch.long)
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(high, shape, generator=gen).to(device=device)


def binary_mask(shape: tuple[int, ...], device: torch.device | str, dtype: torch.dtype,
                seed: int = SEED) -> torch.Tensor:
    device = _device(device)
    if device.type == "meta":
        return torch.empty(shape, device=device, dtype=dtype)
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=gen) < 0.5).to(device=device, dtype=dtype)


@dataclass(frozen=True)
class ImageBatch:
    """`make_inputs` for image classifiers: (N, C, S, S) images and N class labels."""

    image_size: int
    num_classes: int
    channels: int = 3

    def __call__(self, batch: int, device: torch.device | str, dtype: torch.dtype) -> tuple[tuple, torch.Tensor]:
        x = randn((batch, self.channels, self.image_size, self.image_size), device, dtype, SEED)
        y = randint(self.num_classes, (batch,), device, SEED + 1)
        return (x,), y


@dataclass(frozen=True)
class SegmentationBatch:
    """`make_inputs` for UNet: (N, C, S, S) images and an (N, K, S, S) binary mask."""

    image_size: int
    in_channels: int
    out_channels: int

    def __call__(self, batch: int, device: torch.device | str, dtype: torch.dtype) -> tuple[tuple, torch.Tensor]:
        s = self.image_size
        x = randn((batch, self.in_channels, s, s), device, dtype, SEED)
        y = binary_mask((batch, self.out_channels, s, s), device, dtype, SEED + 1)
        return (x,), y


@dataclass(frozen=True)
class TokenBatch:
    """`make_inputs` for language models: tokens[:, :T] in, tokens[:, 1:T+1] as next-token targets.

    The two are separate tensors (not views of one), so a captured graph sees
    two independent inputs. `dtype` does not apply: token ids are int64.
    """

    seq_len: int
    vocab: int

    def __call__(self, batch: int, device: torch.device | str, dtype: torch.dtype) -> tuple[tuple, torch.Tensor]:
        tokens = randint(self.vocab, (batch, self.seq_len + 1), device, SEED)
        return (tokens[:, :-1].clone(),), tokens[:, 1:].clone()
