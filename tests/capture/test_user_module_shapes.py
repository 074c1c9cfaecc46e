"""Constructs users' training scripts commonly have, beyond checkpointing (tests/capture/test_checkpoint_user_shapes.py).

Attention (nn.MultiheadAttention with padding and attention masks, kdim/vdim and bias_kv; scaled_dot_product_attention
causal with dropout and with a boolean mask; a TransformerEncoder with a causal mask and key padding), embeddings
(padding_idx, max_norm's in-place renorm of the weight, tied input/output weights, EmbeddingBag, scale_grad_by_freq,
int32 indices), recurrent layers (bidirectional 2-layer LSTM with dropout, GRU, LSTM with projections and initial
states), in-place ops on activations and on the input, custom autograd Functions, module hooks, parametrizations
(weight_norm, spectral_norm's power iteration, orthogonal, a custom one under `cached()`), frozen and eval-mode
submodules, losses (class weights, label smoothing, ignore_index, reduction="sum", soft labels, BCE with pos_weight,
KL, a module that returns its loss, a dict target), integer-index ops (where, gather, scatter_add, index_put), dropout
variants and other random ops (RReLU, gumbel_softmax, rand masking, randperm, multinomial, distributions' rsample),
buffers updated in the forward, shape-only control flow, tuple and dict outputs, SGD/Adam/AdamW options and torch
optimizers with param groups, float64, channels_last, interpolation, einsum, convolutions 1-d/3-d/transposed/grouped,
FFT with a complex parameter, grid_sample, fold, a gradient penalty (double backward). Each trains bitwise like eager
for 3 iterations on the CPU; what capture cannot represent (or eager itself refuses) is refused in one line naming it.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.nn.utils.parametrize as parametrize  # noqa: E402

from executor.api import execute  # noqa: E402
from executor.ops import with_copy_workspaces  # noqa: E402
from hybrid.capture import capture  # noqa: E402
from hybrid.errors import HybridError  # noqa: E402
from hybrid.swap.quick_plans import quick_plan  # noqa: E402
from hybrid.validator import validate  # noqa: E402

pytestmark = [pytest.mark.torch,
              # PyTorch's own warnings about the user's choices (a bool padding mask with a float causal mask)
              pytest.mark.filterwarnings("ignore:Support for mismatched src_key_padding_mask"),
              pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN"),
              # torch's own, importing dynamo for the torch.compile refusal
              pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")]


def _gen(seed: int = 1) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _xy(n: int = 6, d: int = 8, c: int = 4) -> tuple[tuple, torch.Tensor]:
    g = _gen()
    return (torch.randn(n, d, generator=g),), torch.randint(c, (n,), generator=g)


def _seq_loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.flatten(0, 1), y.flatten())


def _mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.LayerNorm(16), nn.Linear(16, 4))


# -- attention ---------------------------------------------------------------------------------------------------

class MHA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.head = nn.Linear(8, 16), nn.Linear(16, 4)
        self.mha = nn.MultiheadAttention(16, 4, dropout=0.1, batch_first=True)

    def forward(self, x, pad, am):  # noqa: ANN001, ANN201
        h = self.emb(x)
        a, w = self.mha(h, h, h, key_padding_mask=pad, attn_mask=am)
        return self.head(a + h) + w.mean()


def _mha():  # noqa: ANN202
    g = _gen()
    x, pad = torch.randn(3, 5, 8, generator=g), torch.zeros(3, 5, dtype=torch.bool)
    pad[1, 3:], pad[2, 4] = True, True
    return MHA(), (x, pad, torch.triu(torch.ones(5, 5, dtype=torch.bool), 1)), torch.randint(4, (3, 5), generator=g), \
        _seq_loss


class MHACross(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mha, self.head = nn.MultiheadAttention(8, 2, kdim=6, vdim=6, add_bias_kv=True), nn.Linear(8, 4)

    def forward(self, q, kv, am):  # noqa: ANN001, ANN201
        return self.head(self.mha(q, kv, kv, attn_mask=am, need_weights=False)[0]).transpose(0, 1)


def _mha_cross():  # noqa: ANN202
    g = _gen()
    args = (torch.randn(5, 3, 8, generator=g), torch.randn(7, 3, 6, generator=g), torch.randn(5, 7, generator=g))
    return MHACross(), args, torch.randint(4, (3, 5), generator=g), _seq_loss


class SDPA(nn.Module):
    def __init__(self, causal: bool) -> None:
        super().__init__()
        self.causal, self.qkv, self.o = causal, nn.Linear(8, 24), nn.Linear(8, 4)

    def forward(self, x, mask=None):  # noqa: ANN001, ANN201
        n, t = x.shape[:2]
        q, k, v = self.qkv(x).view(n, t, 3, 2, 4).permute(2, 0, 3, 1, 4)
        if self.causal:
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1)
        else:
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.3)
        return self.o(a.transpose(1, 2).reshape(n, t, 8))


def _sdpa(causal: bool):  # noqa: ANN202
    def make():  # noqa: ANN202
        g = _gen()
        x = torch.randn(3, 5, 8, generator=g)
        mask = torch.rand(3, 1, 5, 5, generator=g) > 0.3
        mask[..., 0] = True
        return SDPA(causal), (x,) if causal else (x, mask), torch.randint(4, (3, 5), generator=g), _seq_loss
    return make


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.1, batch_first=True, norm_first=True, activation="gelu")
        self.emb, self.head = nn.Embedding(11, 16), nn.Linear(16, 11)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, ids, pad):  # noqa: ANN001, ANN201
        causal = nn.Transformer.generate_square_subsequent_mask(ids.shape[1])
        return self.head(self.enc(self.emb(ids), mask=causal, src_key_padding_mask=pad, is_causal=True))


def _encoder():  # noqa: ANN202
    g = _gen()
    ids, pad = torch.randint(11, (3, 5), generator=g), torch.zeros(3, 5, dtype=torch.bool)
    pad[1, 4] = True
    return Encoder(), (ids, pad), torch.randint(11, (3, 5), generator=g), _seq_loss


# -- embeddings ----------------------------------------------------------------------------------------------------

class Emb(nn.Module):
    def __init__(self, **kw) -> None:  # noqa: ANN003
        super().__init__()
        self.emb, self.head = nn.Embedding(12, 8, **kw), nn.Linear(8, 12)

    def forward(self, ids):  # noqa: ANN001, ANN201
        return self.head(torch.tanh(self.emb(ids)))


def _emb(**kw):  # noqa: ANN003, ANN202
    def make():  # noqa: ANN202
        g = _gen()
        ids = torch.randint(12, (3, 5), generator=g)
        ids[0, :2] = 0
        return Emb(**kw), (ids,), torch.randint(12, (3, 5), generator=g), _seq_loss
    return make


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb, self.ln, self.bias = nn.Embedding(12, 8), nn.LayerNorm(8), nn.Parameter(torch.zeros(12))

    def forward(self, ids):  # noqa: ANN001, ANN201
        return F.linear(self.ln(self.emb(ids) * 8 ** 0.5), self.emb.weight, self.bias)


def _tied():  # noqa: ANN202
    g = _gen()
    return TiedLM(), (torch.randint(12, (3, 5), generator=g),), torch.randint(12, (3, 5), generator=g), _seq_loss


class Bag(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag, self.head = nn.EmbeddingBag(12, 8, mode="mean"), nn.Linear(8, 4)
        self.emb = nn.Embedding(12, 8, scale_grad_by_freq=True)

    def forward(self, ids):  # noqa: ANN001, ANN201
        return self.head(self.bag(ids) + self.emb(ids).sum(1))


def _bag(dtype: torch.dtype):  # noqa: ANN202
    def make():  # noqa: ANN202
        g = _gen()
        ids = torch.randint(12, (6, 5), generator=g)
        ids[:, 0] = 3
        return Bag(), (ids.to(dtype),), torch.randint(4, (6,), generator=g), F.cross_entropy
    return make


# -- recurrent -----------------------------------------------------------------------------------------------------

class RNN(nn.Module):
    def __init__(self, cell, **kw) -> None:  # noqa: ANN001, ANN003
        super().__init__()
        self.rnn, self.head = cell(8, 6, batch_first=True, **kw), nn.Linear(12 if kw.get("bidirectional") else 6, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.head(self.rnn(x)[0])


def _rnn(cell, **kw):  # noqa: ANN001, ANN003, ANN202
    def make():  # noqa: ANN202
        g = _gen()
        return RNN(cell, **kw), (torch.randn(3, 5, 8, generator=g),), torch.randint(4, (3, 5), generator=g), _seq_loss
    return make


class LSTMInit(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn, self.head = nn.LSTM(8, 6, num_layers=2, proj_size=3), nn.Linear(3, 4)
        self.h0 = nn.Parameter(torch.zeros(2, 1, 3))

    def forward(self, x, c0):  # noqa: ANN001, ANN201
        out, _ = self.rnn(x, (self.h0.expand(-1, x.shape[1], -1).contiguous(), c0))
        return self.head(out).transpose(0, 1)


def _lstm_init():  # noqa: ANN202
    g = _gen()
    return LSTMInit(), (torch.randn(5, 3, 8, generator=g), torch.randn(2, 3, 6, generator=g)), \
        torch.randint(4, (3, 5), generator=g), _seq_loss


# -- in-place ops, custom Functions, hooks, parametrizations -------------------------------------------------------

class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.act, self.head = nn.Linear(8, 8), nn.Linear(8, 8), nn.ReLU(inplace=True), nn.Linear(8, 4)

    def forward(self, x, mask):  # noqa: ANN001, ANN201
        h = self.act(self.a(x))
        y = self.b(h)
        y += h
        y.masked_fill_(mask, 0.0)
        y.mul_(2).clamp_(max=3.0)
        F.leaky_relu(y, 0.1, inplace=True)
        return self.head(y)


def _inplace():  # noqa: ANN202
    g = _gen()
    return InPlace(), (torch.randn(6, 8, generator=g), torch.rand(6, 8, generator=g) > 0.5), \
        torch.randint(4, (6,), generator=g), F.cross_entropy


class InputInPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        x.mul_(1.5)             # the caller's batch changes: eager feeds the changed one next iteration
        return self.fc(x)


class TanhHalfGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):  # noqa: ANN001, ANN205
        ctx.save_for_backward(x, w)
        return torch.tanh(x @ w)

    @staticmethod
    def backward(ctx, go):  # noqa: ANN001, ANN205
        x, w = ctx.saved_tensors
        t = torch.tanh(x @ w)
        gy = go * (1 - t * t) * 0.5           # not the true gradient: the graph must run this backward
        return gy @ w.t(), x.t() @ gy


class ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, alpha: float, mode: str):  # noqa: ANN001, ANN205
        ctx.alpha, ctx.mode = alpha, mode
        ctx.save_for_backward(w)
        y = x * w
        idx = y.argmax(-1)
        ctx.mark_non_differentiable(idx)
        return y, idx

    @staticmethod
    def backward(ctx, gy, gidx):  # noqa: ANN001, ANN205
        (w,) = ctx.saved_tensors
        gx = gy * w * ctx.alpha if ctx.needs_input_grad[0] else None
        return gx, (gy * 2).sum(0) if ctx.mode == "double" else gy.sum(0), None, None


class CustomFunctions(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w, self.v = nn.Parameter(torch.randn(8, 8) * 0.3), nn.Parameter(torch.randn(8))
        self.head = nn.Linear(8, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        y, idx = ScaleGrad.apply(TanhHalfGrad.apply(x, self.w), self.v, -0.5, "double")
        return self.head(y) + idx.float()[:, None] * 0.01


class Hooks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.head = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 4)
        self.a.register_forward_pre_hook(lambda mod, inp: (inp[0] * 2,))
        self.a.register_forward_hook(lambda mod, inp, out: out + 1.0)
        self.b.register_full_backward_hook(lambda mod, gi, go: (gi[0].clamp(-0.01, 0.01),))

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.head(F.gelu(self.b(F.gelu(self.a(x)))))


class Symmetric(nn.Module):
    def forward(self, X):  # noqa: ANN001, ANN201, N803
        return X.triu() + X.triu(1).transpose(-1, -2)

    def right_inverse(self, A):  # noqa: ANN001, ANN201, N803
        return A.triu()


class Parametrized(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        p = nn.utils.parametrizations
        self.a, self.b = p.weight_norm(nn.Linear(8, 8)), p.spectral_norm(nn.Linear(8, 8))
        self.c, self.d = p.orthogonal(nn.Linear(8, 8)), nn.Linear(8, 8)
        parametrize.register_parametrization(self.d, "weight", Symmetric())
        self.head = nn.Linear(8, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = F.relu(self.b(F.relu(self.a(x))))
        with parametrize.cached():
            h = torch.tanh(self.d(self.c(h))) + self.d(h) * 0.1
        return self.head(h)


class WeightClip(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.head = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        with torch.no_grad():
            self.fc.weight.clamp_(-0.2, 0.2)          # WGAN-style clipping of a parameter in the forward
        return self.head(F.relu(self.fc(x)))


# -- frozen / eval submodules, buffers, control flow, outputs -----------------------------------------------------

class Frozen(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8)).requires_grad_(False)
        self.adapter, self.head = nn.Linear(8, 8), nn.Linear(8, 4)
        self.head.bias.requires_grad_(False)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.backbone(x)
        return self.head(h + self.adapter(h))


class HalfEval(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.3))
        self.b = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.3))
        self.head = nn.Linear(8, 4)
        self.a.eval()

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.head(self.b(self.a(x)))


class BufferWrites(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.head = nn.Linear(8, 8), nn.Linear(8, 4)
        self.register_buffer("ema", torch.zeros(8))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("scratch", torch.zeros(8), persistent=False)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.fc(x)
        self.ema.mul_(0.9).add_(h.detach().mean(0) * 0.1)      # in place, without no_grad
        self.steps += 1
        self.scratch.copy_(h.detach().pow(2).mean(0))
        return self.head(h - self.ema)


class ShapeFlow(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.head = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        n, d = x.shape
        h = self.a(x)
        if n > 4:
            h = h + self.b(h)
        for i in range(x.size(-1) // 4):
            h = torch.tanh(h) * (i + 1)
        if x.dim() == 2 and x.dtype == torch.float32:
            h = h.reshape(n, 2, d // 2).flip(1).reshape(n, d)
        return self.head(h[: n // 2].repeat(2, 1) if n % 2 == 0 else h)


class DictOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body, self.cls, self.reg = nn.Linear(8, 8), nn.Linear(8, 4), nn.Linear(8, 2)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = F.relu(self.body(x))
        return {"logits": self.cls(h), "box": self.reg(h), "aux": (h.pow(2).mean(), [h.sum()]), "n": 3}


def _dict_loss(out: dict, tgt: dict) -> torch.Tensor:
    return (F.cross_entropy(out["logits"], tgt["cls"]) + F.smooth_l1_loss(out["box"], tgt["box"])
            + 0.1 * out["aux"][0] + 0 * out["aux"][1][0])


def _dict_out():  # noqa: ANN202
    (x,), y = _xy()
    return DictOut(), (x,), {"cls": y, "box": torch.randn(6, 2, generator=_gen(3))}, _dict_loss


class TupleOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 4), nn.Linear(8, 4)

    def forward(self, x, *, scale=1.0):  # noqa: ANN001, ANN201
        return self.a(x) * scale, self.b(x)


def _tuple_loss(out: tuple, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out[0], y) + F.mse_loss(out[1], torch.zeros_like(out[1]))


class LossInside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))

    def forward(self, x, y):  # noqa: ANN001, ANN201
        logits = self.net(x)
        return F.cross_entropy(logits, y) + 0.01 * logits.logsumexp(-1).pow(2).mean()


# -- losses ----------------------------------------------------------------------------------------------------------

_W4 = torch.tensor([1.0, 2.0, 0.5, 1.5])


def _ce_fancy(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y, weight=_W4, label_smoothing=0.1, ignore_index=2)


def _ce_sum(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out, y, reduction="sum", label_smoothing=0.2)


def _soft_losses(out: torch.Tensor, t: tuple) -> torch.Tensor:
    probs, multi, pos_weight = t
    return (F.cross_entropy(out, probs) + F.binary_cross_entropy_with_logits(out, multi, pos_weight=pos_weight)
            + F.kl_div(out.log_softmax(-1), probs, reduction="batchmean") + F.nll_loss(out.log_softmax(-1), probs.argmax(-1)))


def _loss_case(loss, ignored: int | None = None, soft: bool = False):  # noqa: ANN001, ANN202
    def make():  # noqa: ANN202
        (x,), y = _xy()
        if ignored is not None:
            y[0] = ignored
        if soft:
            g = _gen(3)
            y = (torch.rand(6, 4, generator=g).softmax(-1), (torch.rand(6, 4, generator=g) > 0.5).float(),
                 torch.tensor([1.0, 2.0, 3.0, 0.5]))
        return nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 4)), (x,), y, loss
    return make


# -- indices, random ops -----------------------------------------------------------------------------------------

class Index(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.head, self.table = nn.Linear(8, 8), nn.Linear(8, 4), nn.Parameter(torch.randn(10, 8) * 0.1)

    def forward(self, x, idx, seg, cond):  # noqa: ANN001, ANN201
        h = torch.where(cond, self.fc(x), -self.fc(x))
        g = h.gather(1, idx)
        pooled = torch.zeros(3, 8).scatter_add(0, seg[:, None].expand(-1, 8), h)
        tab = self.table.index_put((seg,), h * 0.1, accumulate=True)
        tab2 = self.table.clone()
        tab2[seg + 3] = h
        v, i = h.topk(3, -1)
        top = (v + h.sort(-1, descending=True)[0][:, :3] + h.cumsum(-1)[:, -3:] + h.gather(1, i)).sum(1, keepdim=True)
        return self.head(h + pooled[seg] + g.sum(1, keepdim=True) + tab[seg] + tab2[seg + 3] + self.table[idx[:, 0]] + top)


def _index():  # noqa: ANN202
    g = _gen()
    x, idx = torch.randn(6, 8, generator=g), torch.randint(8, (6, 3), generator=g)
    args = (x, idx, torch.tensor([0, 0, 1, 2, 2, 1]), torch.rand(6, 8, generator=g) > 0.5)
    return Index(), args, torch.randint(4, (6,), generator=g), F.cross_entropy


class Drops(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.d2, self.fc = nn.Conv2d(3, 4, 3, padding=1), nn.Dropout2d(0.3), nn.Linear(16, 16)
        self.d1, self.ad, self.fad = nn.Dropout1d(0.3), nn.AlphaDropout(0.2), nn.FeatureAlphaDropout(0.2)
        self.rrelu, self.head = nn.RReLU(), nn.Linear(16, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.d2(F.selu(self.conv(x)))                       # (N, 4, 4, 4)
        h = self.fad(self.d1(self.fc(h.flatten(2))))           # (N, 4, 16)
        h = F.dropout(h.mean(1), 0.25, training=self.training) + F.dropout(h.mean(1), 0.5, training=True)
        out = self.head(self.ad(self.rrelu(h)))
        return out + F.gumbel_softmax(out, tau=0.5, hard=True)


def _drops():  # noqa: ANN202
    g = _gen()
    return Drops(), (torch.randn(5, 3, 4, 4, generator=g),), torch.randint(4, (5,), generator=g), F.cross_entropy


class Masking(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.e, self.head = nn.Embedding(12, 8), nn.Linear(8, 12)

    def forward(self, ids):  # noqa: ANN001, ANN201
        ids = ids.masked_fill(torch.rand(ids.shape) < 0.15, 11)
        noise = torch.randint(0, 12, ids.shape)
        ids = torch.where(torch.rand(ids.shape) < 0.05, noise, ids)[torch.randperm(ids.shape[0])]
        return self.head(self.e(ids))


def _masking():  # noqa: ANN202
    g = _gen()
    return Masking(), (torch.randint(11, (4, 5), generator=g),), torch.randint(12, (4, 5), generator=g), _seq_loss


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec, self.pol = nn.Linear(8, 8), nn.Linear(4, 8), nn.Linear(8, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        d = torch.distributions
        mu, logv = self.enc(x).chunk(2, -1)
        q = d.Normal(mu, (0.5 * logv).exp(), validate_args=False)
        prior = d.Normal(torch.zeros_like(mu), torch.ones_like(mu), validate_args=False)
        logits = self.pol(x)
        a = torch.multinomial(logits.softmax(-1).detach(), 1).squeeze(1)
        reinforce = d.Categorical(logits=logits, validate_args=False).log_prob(a).mean()
        return self.dec(q.rsample()), d.kl_divergence(q, prior).sum(-1).mean() + reinforce


def _vae_loss(o: tuple, x: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(o[0], x) + o[1]


# -- layers, dtypes, layouts ---------------------------------------------------------------------------------------

class Convs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.c2, self.dw = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=2), nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.head(self.dw(self.c2(F.relu(self.bn(self.c1(x))))).mean((2, 3)))


def _convs(channels_last: bool):  # noqa: ANN202
    def make():  # noqa: ANN202
        g = _gen()
        x, m = torch.randn(4, 3, 8, 8, generator=g), Convs()
        if channels_last:
            x, m = x.to(memory_format=torch.channels_last), m.to(memory_format=torch.channels_last)
        return m, (x,), torch.randint(4, (4,), generator=g), F.cross_entropy
    return make


class OtherConvs(nn.Module):
    """Conv3d, ConvTranspose2d, grouped and dilated Conv1d, instance / group / 1-d batch norms."""

    def __init__(self) -> None:
        super().__init__()
        self.c3, self.t = nn.Conv3d(2, 4, 3, padding=1), nn.ConvTranspose2d(4, 4, 4, stride=2, padding=1)
        self.inorm, self.gn = nn.InstanceNorm2d(4, affine=True, track_running_stats=True), nn.GroupNorm(2, 4)
        self.g1, self.d1 = nn.Conv1d(4, 4, 3, padding=1, groups=2), nn.Conv1d(4, 4, 3, stride=2, dilation=2)
        self.bn1, self.head = nn.BatchNorm1d(4), nn.Linear(4, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.gn(F.relu(self.inorm(self.t(F.relu(self.c3(x)).mean(2)))))   # (N, 4, 12, 12)
        h = self.d1(self.g1(h.flatten(2)))
        return self.head(self.bn1(h).mean(2))


def _other_convs():  # noqa: ANN202
    g = _gen()
    return OtherConvs(), (torch.randn(3, 2, 4, 6, 6, generator=g),), torch.randint(4, (3,), generator=g), F.cross_entropy


class Resample(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c, self.up, self.head = nn.Conv2d(3, 4, 3, padding=1), nn.Upsample(scale_factor=2), nn.Linear(8, 4)
        self.loc = nn.Linear(48, 6)

    def forward(self, x):  # noqa: ANN001, ANN201
        grid = F.affine_grid(self.loc(x.flatten(1)).view(-1, 2, 3) * 0.1 + torch.tensor([[1.0, 0, 0], [0, 1, 0]]),
                             x.shape, align_corners=False)
        h = self.up(self.c(F.grid_sample(x, grid, align_corners=False)))          # (N, 4, 8, 8)
        h = h + F.interpolate(h, size=(16, 16), mode="bilinear", align_corners=True)[..., ::2, ::2]
        h = F.interpolate(h, scale_factor=0.5, mode="bicubic") + F.interpolate(h, size=(4, 4), mode="area")
        u = F.unfold(F.pixel_shuffle(h, 2), 2, stride=2)                          # (N, 4, 16)
        f = F.fold(u, (8, 8), 2, stride=2)
        return self.head(torch.cat([u.mean(2), f.mean((2, 3)).expand(-1, 4)], 1))


def _resample():  # noqa: ANN202
    g = _gen()
    return Resample(), (torch.randn(3, 3, 4, 4, generator=g),), torch.randint(4, (3,), generator=g), F.cross_entropy


class Spectral(nn.Module):
    """einsum attention and an FFT filter with a complex parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.w, self.u = nn.Parameter(torch.randn(4, 8, 6) * 0.2), nn.Parameter(torch.randn(6, 4) * 0.2)
        self.filt = nn.Parameter(torch.randn(5, 5, dtype=torch.cfloat) * 0.3)

    def forward(self, x):  # noqa: ANN001, ANN201
        x = torch.fft.irfft(torch.fft.rfft(x, dim=-1) * self.filt, n=8, dim=-1)
        h = torch.einsum("bnd,hde->bhne", x, self.w)
        a = torch.einsum("bhne,bhme->bhnm", h, h).softmax(-1)
        return torch.einsum("bhnm,bhme,ec->bnc", a, h, self.u)


def _spectral():  # noqa: ANN202
    g = _gen()
    return Spectral(), (torch.randn(3, 5, 8, generator=g),), torch.randint(4, (3, 5), generator=g), _seq_loss


class GradientPenalty(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 4))

    def forward(self, x):  # noqa: ANN001, ANN201
        x = x.detach().requires_grad_(True)
        out = self.net(x)
        (g,) = torch.autograd.grad(out.sum(), x, create_graph=True)
        return out, (g.norm(2, dim=1) - 1).pow(2).mean()


def _gp_loss(o: tuple, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(o[0], y) + 10 * o[1]


class Literals(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.pe = torch.randn(64, 4)            # a plain tensor attribute, not a buffer

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.fc(x)
        h.retain_grad()
        return h * torch.tensor([0.5, 2.0, 1.0, -1.0]) + x.new_tensor(3.0) + self.pe[: x.shape[0]]


def _plain(m, loss=F.cross_entropy, **opt):  # noqa: ANN001, ANN003, ANN202
    def make():  # noqa: ANN202
        (x,), y = _xy()
        return (m(), (x,), y, loss, opt) if opt else (m(), (x,), y, loss)
    return make


def _param_groups(m: nn.Module) -> torch.optim.Optimizer:
    decay = [p for p in m.parameters() if p.dim() > 1]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                              {"params": [p for p in m.parameters() if p.dim() <= 1], "weight_decay": 0.0, "lr": 0.003}],
                             lr=0.01)


def _frozen_first(m: nn.Module) -> torch.optim.Optimizer:
    m[0].requires_grad_(False)
    return torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.05, momentum=0.9)


def _float64():  # noqa: ANN202
    (x,), y = _xy()
    m = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.SiLU(), nn.Dropout(0.2), nn.Linear(16, 4)).double()
    return m, (x.double(),), y, F.cross_entropy, {"optimizer": "adamw"}


CASES = {
    "mha-key_padding_mask-attn_mask": _mha,
    "mha-cross-kdim-vdim-bias_kv-float-mask": _mha_cross,
    "sdpa-is_causal-dropout": _sdpa(True),
    "sdpa-bool-mask-scale": _sdpa(False),
    "transformer-encoder-causal-padding": _encoder,
    "embedding-padding_idx": _emb(padding_idx=0),
    "embedding-max_norm": _emb(max_norm=1.0, padding_idx=1),
    "tied-embedding-F.linear": _tied,
    "embeddingbag-scale_grad_by_freq": _bag(torch.long),
    "embedding-int32-indices": _bag(torch.int32),
    "lstm-bidirectional-2-layers-dropout": _rnn(nn.LSTM, num_layers=2, bidirectional=True, dropout=0.2),
    "gru-bidirectional-2-layers": _rnn(nn.GRU, num_layers=2, bidirectional=True),
    "lstm-proj_size-initial-states": _lstm_init,
    "inplace-relu-iadd-masked_fill_": _inplace,
    "input-mutated-in-place": _plain(InputInPlace),
    "custom-autograd-functions": _plain(CustomFunctions),
    "module-pre-forward-full-backward-hooks": _plain(Hooks),
    "parametrizations-weight_norm-spectral-orthogonal-custom": _plain(Parametrized),
    "parameter-clipped-in-forward": _plain(WeightClip),
    "frozen-submodules": _plain(Frozen),
    "eval-submodule-in-training": _plain(HalfEval),
    "buffers-written-in-forward": _plain(BufferWrites),
    "shape-only-control-flow": _plain(ShapeFlow),
    "dict-output-dict-target": _dict_out,
    "tuple-output-keyword-input": lambda: (TupleOut(), *_xy(), _tuple_loss, {"kwargs": {"scale": 0.5}}),
    "module-returns-its-loss": lambda: (LossInside(), (*_xy()[0], _xy()[1]), None, None),
    "ce-weight-label_smoothing-ignore_index": _loss_case(_ce_fancy, ignored=2),
    "ce-reduction-sum": _loss_case(_ce_sum),
    "CrossEntropyLoss-module": _loss_case(nn.CrossEntropyLoss(weight=_W4, ignore_index=3, label_smoothing=0.05), 3),
    "soft-labels-bce-pos_weight-kl-nll": _loss_case(_soft_losses, soft=True),
    "where-gather-scatter_add-index_put-topk-sort": _index,
    "dropout-variants-rrelu-gumbel": _drops,
    "rand-masking-randint-randperm": _masking,
    "distributions-rsample-kl-multinomial": lambda: (VAE(), *_xy()[0:1], _xy()[0][0].clone(), _vae_loss),
    "sgd-momentum-nesterov-weight_decay": _plain(_mlp, optimizer="sgd",
                                                 optimizer_options={"momentum": 0.9, "nesterov": True, "weight_decay": 1e-3}),
    "sgd-dampening-maximize": _plain(_mlp, optimizer="sgd",
                                     optimizer_options={"momentum": 0.9, "dampening": 0.1, "maximize": True}),
    "adamw-betas-eps-weight_decay": _plain(_mlp, optimizer="adamw",
                                           optimizer_options={"betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.1}),
    "torch-adamw-param-groups": _plain(_mlp, optimizer=_param_groups),
    "torch-sgd-over-trainable-only": _plain(_mlp, optimizer=_frozen_first),
    "torch-sgd-over-the-head-only": _plain(_mlp, optimizer=lambda m: torch.optim.SGD(m[3].parameters(), lr=0.1, momentum=0.9)),
    "float64-adamw": _float64,
    "channels_last-conv-bn-grouped-depthwise": _convs(True),
    "conv3d-convtranspose-conv1d-grouped-dilated-norms": _other_convs,
    "grid_sample-upsample-interpolate-pixel_shuffle-fold": _resample,
    "einsum-fft-complex-parameter": _spectral,
    "gradient-penalty-double-backward": _plain(GradientPenalty, _gp_loss),
    "tensor-literals-plain-attribute-retain_grad": _plain(Literals),
}


def _trains_like_eager(m: nn.Module, args: tuple, target, loss, kwargs=None, optimizer="adam",  # noqa: ANN001
                       optimizer_options=None) -> None:  # noqa: ANN001
    if callable(optimizer):
        g = capture(m, args, loss, target, kwargs=kwargs, optimizer=optimizer(m))
    else:
        g = capture(m, args, loss, target, kwargs=kwargs, optimizer=optimizer, lr=0.01,
                    optimizer_options=optimizer_options)
    g = with_copy_workspaces(g)
    plan = quick_plan(g, 1.0, "unconstrained")
    assert validate(g, plan).valid
    r = execute(g, plan, m, args, target, loss_fn=loss, kwargs=kwargs, iters=3, device="cpu", check=True, seed=7)
    assert r.comparison is not None and r.comparison.bitwise, (r.comparison.mismatched[:3], r.comparison.max_abs_diff)


@pytest.mark.parametrize("name", sorted(CASES))
def test_user_module_trains_bitwise_like_eager(name: str) -> None:
    torch.manual_seed(0)
    m, args, target, loss, *rest = CASES[name]()
    _trains_like_eager(m, args, target, loss, **(rest[0] if rest else {}))


# -- refused in one line, naming the construct -------------------------------------------------------------------

def _one_line(m: nn.Module, args: tuple, target, loss=F.cross_entropy, **kw) -> str:  # noqa: ANN001, ANN003
    with pytest.raises(HybridError) as info:
        capture(m, args, loss, target, **kw)
    assert "\n" not in str(info.value)
    return str(info.value)


class Packed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn, self.head = nn.GRU(8, 6, batch_first=True), nn.Linear(6, 4)

    def forward(self, x, lengths):  # noqa: ANN001, ANN201
        p = nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, h = self.rnn(p)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=x.shape[1])
        return self.head(out).mean(1) + self.head(h[-1])


class BoolIndex(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x, keep):  # noqa: ANN001, ANN201
        return self.fc(x[keep])


def test_shapes_that_depend_on_values_are_refused_in_one_line_naming_the_kernel() -> None:
    g = _gen()
    x, y = torch.randn(3, 5, 8, generator=g), torch.randint(4, (3,), generator=g)
    args = (x, torch.tensor([5, 2, 4]))
    F.cross_entropy(Packed()(*args), y).backward()                      # eager trains it
    assert "pack_padded_sequence" in _one_line(Packed(), args, y)
    keep = torch.tensor([1, 0, 1, 1, 0, 1], dtype=torch.bool)
    (x,), _ = _xy()
    msg = _one_line(BoolIndex(), (x, keep), y[:1].repeat(4))
    assert "nonzero" in msg and "depends on tensor values" in msg, msg


class ValidatedNormal(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):  # noqa: ANN001, ANN201
        mu, logv = self.fc(x).chunk(2, -1)
        return torch.distributions.Normal(mu, logv.exp(), validate_args=True).rsample()


def test_a_distributions_argument_check_reads_values_and_is_refused_in_one_line() -> None:
    (x,), _ = _xy()
    msg = _one_line(ValidatedNormal(), (x,), None, lambda o: o.pow(2).mean())
    assert "depends on tensor values" in msg, msg


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):  # noqa: ANN001, ANN201
        h = self.fc(x)
        if h.sum() > 0:   # BRANCH: a Python branch on a tensor's value
            h = h * 2
        return h


def test_a_value_read_names_the_users_line() -> None:
    import inspect

    (x,), _ = _xy()
    msg = _one_line(Branchy(), (x,), None, lambda o: o.pow(2).mean())
    src, first = inspect.getsourcelines(Branchy.forward)
    line = first + next(i for i, text in enumerate(src) if "BRANCH" in text)
    assert "depends on tensor values" in msg and f"test_user_module_shapes.py:{line}" in msg, msg


class CausalEncoder(nn.Module):
    def __init__(self, is_causal: bool | None) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
        self.enc, self.is_causal = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False), is_causal

    def forward(self, x):  # noqa: ANN001, ANN201
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        if self.is_causal is None:
            return self.enc(x, mask=mask)
        return self.enc(x, mask=mask, is_causal=self.is_causal)


def test_a_transformer_mask_without_is_causal_says_to_pass_it() -> None:
    """TransformerEncoder compares mask= with a causal mask (`_detect_is_causal_mask`) unless told is_causal: the
    refusal says to tell it, and with it given the module captures and trains like eager."""
    x = torch.randn(2, 5, 8, generator=_gen())
    msg = _one_line(CausalEncoder(None), (x,), None, lambda o: o.pow(2).mean())
    assert "pass is_causal=True" in msg and "test_user_module_shapes.py:" in msg, msg
    for causal in (True, False):
        torch.manual_seed(0)
        _trains_like_eager(CausalEncoder(causal), (x,), None, lambda o: o.pow(2).mean())


def test_what_eager_refuses_is_refused_with_eagers_reason() -> None:
    m, (q, kv, _), y, loss = _mha_cross()
    bad = torch.zeros(5, 8)                                   # add_bias_kv pads the mask itself: eager wants (5, 7)
    with pytest.raises(RuntimeError, match="attn_mask"):
        m(q, kv, bad)
    msg = _one_line(m, (q, kv, bad), y, loss)
    assert "2D attn_mask" in msg and "should be (5, 7)" in msg, msg


def test_optimizers_capture_cannot_replay_and_torch_compile_are_refused_naming_them() -> None:
    (x,), y = _xy()
    m = _mlp()
    assert "RMSprop" in _one_line(m, (x,), y, optimizer=torch.optim.RMSprop(m.parameters()))
    compiled = nn.Sequential(torch.compile(nn.Linear(8, 8)), nn.ReLU(), nn.Linear(8, 4))
    assert _one_line(compiled, (x,), y).startswith("submodule '0' is torch.compile'd")


# -- what the probe found wrong, and mended ------------------------------------------------------------------------

def test_a_plain_conv1d_runs_in_its_slots_bitwise_like_eager() -> None:
    # the executor's Slow2d slot writer called the 2-d kernel with a 1-d convolution's tensors ("2D kernel_size
    # expected"); it now views them as ATen does, and nothing is allocated outside the pool
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv1d(4, 6, 3, padding=1), nn.ReLU(), nn.Conv1d(6, 4, 5, stride=2, bias=False),
                      nn.Flatten(), nn.Linear(24, 4))
    x, y = torch.randn(5, 4, 16, generator=_gen()), torch.randint(4, (5,), generator=_gen())
    g = capture(m, (x,), F.cross_entropy, y, optimizer="adam", lr=0.01)
    r = execute(g, quick_plan(g, 1.0, "unconstrained"), m, (x,), y, loss_fn=F.cross_entropy, iters=3, device="cpu",
                check=True, seed=7)
    assert r.comparison is not None and r.comparison.bitwise and r.summary.outside_bytes == 0


class ReassignedBuffers(nn.Module):
    """Buffers rebound in the forward, not updated in place: eager's next step reads the new values."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("ema", torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.steps = self.steps + 1
        self.ema = 0.9 * self.ema + 0.1 * x.mean(0)
        return self.fc(x - self.ema)


def test_a_buffer_rebound_in_the_forward_is_updated_by_the_graph() -> None:
    torch.manual_seed(0)
    (x,), y = _xy()
    _trains_like_eager(ReassignedBuffers(), (x,), y, F.cross_entropy)


class ReshapedBuffer(ReassignedBuffers):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.ema = torch.zeros(3)
        return self.fc(x)


def test_a_buffer_rebound_to_another_shape_is_refused_naming_it() -> None:
    (x,), y = _xy()
    msg = _one_line(ReshapedBuffer(), (x,), y)
    assert "buffer 'ema'" in msg and "[3]" in msg and "[8]" in msg, msg


class StoresOnItself(nn.Module):
    """A lazily built table, the last activation and a hook's list: state the forward keeps on the module."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.table, self.seen = nn.Linear(8, 4), None, []
        self.fc.register_forward_hook(lambda mod, inp, out: self.seen.append(out.detach()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.table is None:
            self.table = torch.arange(8.0)
        self.last = x.detach()
        return self.fc(x * self.table)


def test_capture_leaves_the_users_module_as_it_was() -> None:
    # the fake tensors the forward stored on the module broke its next eager step (and execute's check)
    torch.manual_seed(0)
    m = StoresOnItself()
    (x,), y = _xy()
    capture(m, (x,), F.cross_entropy, y, optimizer="adam", lr=0.01)
    assert m.table is None and m.seen == [] and not hasattr(m, "last")
    F.cross_entropy(m(x), y).backward()                     # eager still runs it
    assert isinstance(m.table, torch.Tensor) and len(m.seen) == 1
    torch.manual_seed(0)
    _trains_like_eager(StoresOnItself(), (x,), y, F.cross_entropy)


class HostRandom(nn.Module):
    def __init__(self, numpy: bool) -> None:
        super().__init__()
        self.fc, self.numpy = nn.Linear(8, 4), numpy

    def forward(self, x: torch.Tensor) -> torch.Tensor:   # mixup's coefficient, drawn outside torch
        import random

        import numpy as np

        lam = float(np.random.rand()) if self.numpy else random.random()
        return self.fc(lam * x + (1 - lam) * x.flip(0))


@pytest.mark.parametrize("numpy", [False, True])
def test_numbers_drawn_outside_torch_are_refused_naming_the_generator(numpy: bool) -> None:
    (x,), y = _xy()
    msg = _one_line(HostRandom(numpy), (x,), y)
    assert ("NumPy" if numpy else "Python's random") in msg and "torch.rand" in msg, msg


class PyCounter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.calls, self.scale = nn.Linear(8, 4), 0, 1.0

    def forward(self, x):  # noqa: ANN001, ANN201
        self.calls += 1
        return self.fc(x) * (1.0 / self.calls) * self.scale


def test_a_python_number_the_step_changes_is_warned_naming_it() -> None:
    """`self.calls += 1` read in the arithmetic: the trace holds 1 as a constant, so replay differs from eager
    from the second step (only `execute --check` showed it); capture names the attribute and the way out. A number
    the step does not change (`scale`) is not named, and the module keeps its count."""
    from hybrid.capture.api import CaptureWarning

    (x,), y = _xy()
    m = PyCounter()
    with pytest.warns(CaptureWarning, match=r"changes the module's attribute calls \(0 -> 1\), a Python number") as w:
        capture(m, (x,), F.cross_entropy, y, optimizer="sgd", lr=0.01)
    assert "scale" not in str(w[0].message) and m.calls == 0
    assert "register_buffer('calls'" in str(w[0].message)


class PySteps(PyCounter):
    def forward(self, x):  # noqa: ANN001, ANN201
        self.steps = getattr(self, "steps", 0) + 1
        return self.fc(x) * (1.0 / self.steps)


def test_the_counter_warning_names_the_attributes_own_buffer() -> None:
    """It suggested register_buffer('calls', ...) whatever the attribute (helper-129: `self.t += 1`)."""
    from hybrid.capture.api import CaptureWarning

    (x,), y = _xy()
    m = PySteps()
    m.steps = 0
    with pytest.warns(CaptureWarning, match=r"attribute steps \(0 -> 1\).*register_buffer\('steps', "):
        capture(m, (x,), F.cross_entropy, y, optimizer="sgd", lr=0.01)


class WeightNormed(nn.Module):
    """torch.nn.utils.weight_norm (the old one), spectral_norm and prune keep `weight` a plain attribute that a
    forward pre-hook rebinds from parameters each step: the graph computes it, never reading the old value."""

    def __init__(self, how: str) -> None:
        super().__init__()
        fc = nn.Linear(8, 4)
        if how == "weight_norm":
            fc = torch.nn.utils.weight_norm(fc)
        elif how == "spectral_norm":
            fc = torch.nn.utils.spectral_norm(fc)
        else:
            from torch.nn.utils import prune

            prune.l1_unstructured(fc, "weight", 0.3)
        self.fc = fc

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.fc(x)


@pytest.mark.parametrize("how", ["weight_norm", "spectral_norm", "prune"])
def test_a_weight_a_hook_rebinds_from_parameters_is_not_warned(how) -> None:  # noqa: ANN001
    import warnings

    from hybrid.capture.api import CaptureWarning

    (x,), y = _xy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)        # torch's own deprecation of the old weight_norm
        warnings.simplefilter("error", CaptureWarning)
        capture(WeightNormed(how), (x,), F.cross_entropy, y, optimizer="sgd", lr=0.01)


class DataRebinds(nn.Module):
    """Weight normalisation in older code (`w.data = w / w.norm()`) and an EMA through `.data`: the trace records
    the ops computing the new values, not the rebinding, and the graphs kept the old ones (helper-129)."""

    def __init__(self, what: str) -> None:
        super().__init__()
        self.fc, self.what = nn.Linear(8, 4), what
        self.register_buffer("center", torch.zeros(4))

    def forward(self, x):  # noqa: ANN001, ANN201
        out = self.fc(x)
        if self.what == "parameter":
            with torch.no_grad():
                self.fc.weight.data = self.fc.weight / self.fc.weight.norm()
        else:
            self.center.data = 0.9 * self.center.data + 0.1 * out.detach().mean(0)
        return out - self.center


@pytest.mark.parametrize("what, name", [("parameter", "fc.weight"), ("buffer", "center")])
def test_a_parameter_or_buffer_rebound_through_data_is_refused_naming_it(what, name) -> None:  # noqa: ANN001
    (x,), y = _xy()
    msg = _one_line(DataRebinds(what), (x,), y)
    assert msg.startswith(f"the step replaces the data of {what} {name!r} (self.{name}.data = ...") and \
        f"self.{name}.copy_(" in msg, msg


class TensorAttribute(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.scale, self.mask = nn.Linear(8, 4), torch.ones(4), torch.ones(4)

    def forward(self, x):  # noqa: ANN001, ANN201
        out = self.fc(x) * self.scale * self.mask
        self.scale = self.scale * 0.5     # decays each step: a plain attribute, not a registered buffer
        return out


def test_a_tensor_attribute_the_step_rebinds_is_warned_naming_it() -> None:
    """The graph holds the tensor read while traced as a constant; eager's next step reads the new one. Warned
    as a Python number is (it was silent); `mask`, never rebound, is not named; the module keeps its value."""
    from hybrid.capture.api import CaptureWarning

    (x,), y = _xy()
    m = TensorAttribute()
    with pytest.warns(CaptureWarning, match=r"rebinds the module's tensor attribute scale, not a registered buffer"
                                            r".*register_buffer\('scale', tensor\)") as w:
        capture(m, (x,), F.cross_entropy, y, optimizer="sgd", lr=0.01)
    assert "mask" not in str(w[0].message) and torch.equal(m.scale, torch.ones(4))


class CompiledInner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = torch.compile(nn.Sequential(nn.Linear(8, 8), nn.GELU()))
        self.head = nn.Linear(8, 4)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.head(self.inner(x))


def test_a_compiled_submodule_is_refused_naming_it() -> None:
    """FX's own words were all a user got ("Detected that you are using FX to symbolically trace a dynamo-optimized
    function"), naming neither the submodule nor the way out (helper-129)."""
    (x,), y = _xy()
    msg = _one_line(CompiledInner(), (x,), y)
    assert msg.startswith("submodule 'inner' is torch.compile'd") and "inner._orig_mod" in msg, msg
    msg = _one_line(torch.compile(nn.Linear(8, 4)), (x,), y)
    assert msg.startswith("the module is torch.compile'd") and "module._orig_mod" in msg, msg


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, a, b):  # noqa: ANN001, ANN201
        return self.fc(a + b)


def test_a_list_meant_as_positional_inputs_is_told_to_be_a_tuple() -> None:
    """A list is one input (as eager's module(xs)); a forward taking several gets a line saying how to spread it."""
    (x,), y = _xy()
    msg = _one_line(TwoInputs(), [x, x], y)
    assert "inputs are one list of 2, passed whole: give them as a tuple" in msg, msg
