"""Checkpointing as users' scripts write it, beyond tests/hybrid/test_capture_checkpoint.py's blocks.

checkpoint_sequential, functions taking keyword and non-tensor arguments (ints, None, strings, a tuple of
tensors), blocks returning tuples and dicts, nested checkpoints (reentrant inside non-reentrant too), one block
checkpointed twice per step, reentrant preserve_rng_state=False, determinism_check="none" and debug=True,
selective checkpointing with a list of ops, a stateful policy and a checkpoint nested in a selective one, batch
norm / layer norm / dropout and a buffer mutated inside the region, a non-reentrant checkpoint on the raw input,
other random ops (randn_like, rand), autocast around the checkpoint, the Hugging Face `partial(checkpoint)`
idiom with a mask keyword, eval-mode and inference captures. Each trains bitwise like eager for 3 iterations on
the CPU; what eager itself refuses, or capture cannot represent, is refused in one line naming it.
"""
from __future__ import annotations

import contextlib
import functools

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import (  # noqa: E402
    CheckpointPolicy, checkpoint, checkpoint_sequential, create_selective_checkpoint_contexts)

from executor.api import execute  # noqa: E402
from executor.ops import with_copy_workspaces  # noqa: E402
from hybrid.capture import capture  # noqa: E402
from hybrid.errors import HybridError  # noqa: E402
from hybrid.swap.quick_plans import quick_plan  # noqa: E402
from hybrid.validator import validate  # noqa: E402

# eager's own warning, from a reentrant checkpoint run under no_grad (inference, or inside a reentrant recomputation)
pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")]


def _data(seed: int = 1) -> tuple[tuple, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(6, 8, generator=gen),), torch.randint(4, (6,), generator=gen)


class MLP(nn.Module):
    def __init__(self, d: int = 8, p: float = 0.25, norm: bool = False) -> None:
        super().__init__()
        self.fc1, self.fc2, self.drop = nn.Linear(d, 2 * d), nn.Linear(2 * d, d), nn.Dropout(p)
        self.ln = nn.LayerNorm(d) if norm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.fc2(self.drop(F.gelu(self.fc1(self.ln(x))))))


class Wrap(nn.Module):
    """stem -> `body(self, h)` -> head; `body` holds the checkpointing under test."""

    def __init__(self, body, **blocks: nn.Module) -> None:  # noqa: ANN001
        super().__init__()
        self.stem, self.head, self.blocks, self.body = nn.Linear(8, 8), nn.Linear(8, 4), nn.ModuleDict(blocks), body

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self, self.stem(x)))


def _block_fn(x, scale, bias=None, *, pair=(None, None), repeat=1, mode="gelu"):  # noqa: ANN001, ANN201
    a, b = pair
    for _ in range(repeat):
        x = x * scale
        if bias is not None:
            x = x + bias
        x = F.gelu(x) if mode == "gelu" else torch.tanh(x)
        if a is not None:
            x = x @ a + b
    return F.dropout(x, 0.2, training=True)


def _extra(m: nn.Module) -> nn.Module:
    m.a, m.b = nn.Parameter(torch.randn(8, 8) * 0.3), nn.Parameter(torch.randn(8) * 0.1)
    m.pre = nn.Linear(8, 8)
    return m


def _seq(r):  # noqa: ANN001, ANN202
    return Wrap(lambda m, h: checkpoint_sequential(m.blocks["seq"], 2, h, use_reentrant=r),
                seq=nn.Sequential(*[MLP(norm=True) for _ in range(4)]))


def _kwargs(m, h):  # noqa: ANN001, ANN202
    h = checkpoint(_block_fn, h, 0.5, None, pair=(m.pre(m.a), m.b), repeat=2, mode="tanh", use_reentrant=False)
    return checkpoint(_block_fn, h, 2, m.b, use_reentrant=False)


def _positional(m, h):  # noqa: ANN001, ANN202  # reentrant takes no keywords: ints, None, a parameter
    h = checkpoint(_block_fn, m.pre(h), 3, None, use_reentrant=True)
    return checkpoint(_block_fn, h, 0.5, m.b, use_reentrant=True) @ m.a


def _tuple_arg(r):  # noqa: ANN001, ANN202  # a tuple holding a tensor with history and a parameter
    def fn(x, pair, k):  # noqa: ANN001, ANN202
        return F.dropout(torch.tanh(x @ pair[0] + pair[1]), 0.2) * k
    return lambda m, h: checkpoint(fn, h, (m.pre(m.a), m.b), 3, use_reentrant=r)


class TwoOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.gate, self.drop = nn.Linear(8, 8), nn.Linear(8, 8), nn.Dropout(0.3)

    def forward(self, x: torch.Tensor, memory: torch.Tensor):  # noqa: ANN201
        h = self.drop(F.relu(self.fc(x)))
        return h + memory, torch.sigmoid(self.gate(h)), h.argmax(-1), None


class DictOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.drop = nn.Linear(8, 8), nn.Dropout(0.3)

    def forward(self, x: torch.Tensor) -> dict:
        h = self.drop(self.fc(x))
        return {"hidden": h, "aux": h.pow(2).mean(), "count": 3}


def _tuple_out(r):  # noqa: ANN001, ANN202
    def body(m, h):  # noqa: ANN001, ANN202
        a, g, idx, _ = checkpoint(m.blocks["two"], h, h.tanh(), use_reentrant=r)
        return a * g + idx.float()[:, None] * 0.01
    return Wrap(body, two=TwoOut())


def _dict_out(m, h):  # noqa: ANN001, ANN202
    d = checkpoint(m.blocks["dict"], h, use_reentrant=False)
    return d["hidden"] * d["count"] + d["aux"]


def _nested(inner, outer):  # noqa: ANN001, ANN202
    def body(m, h):  # noqa: ANN001, ANN202
        def region(x):  # noqa: ANN001, ANN202
            x = checkpoint(m.blocks["b"], m.blocks["a"](x), use_reentrant=inner)
            return F.dropout(m.blocks["c"](x), 0.1)
        return checkpoint(region, h, use_reentrant=outer)
    return Wrap(body, a=MLP(norm=True), b=MLP(norm=True), c=nn.Linear(8, 8))


def _twice(r):  # noqa: ANN001, ANN202  # one block, checkpointed twice and run once more outside
    def body(m, h):  # noqa: ANN001, ANN202
        for _ in range(2):
            h = checkpoint(m.blocks["b"], h, use_reentrant=r)
        return m.blocks["b"](h)
    return Wrap(body, b=MLP(norm=True))


def _flags(**kw):  # noqa: ANN003, ANN202
    return Wrap(lambda m, h: checkpoint(m.blocks["b"], h, **kw), b=MLP(norm=True))


def _every_other_matmul():  # noqa: ANN202  # a stateful policy, counting the forward and the recomputation apart
    seen = {False: 0, True: 0}

    def policy(ctx, op, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if op is torch.ops.aten.addmm.default:
            seen[ctx.is_recompute] += 1
            return CheckpointPolicy.MUST_SAVE if seen[ctx.is_recompute] % 2 else CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.PREFER_RECOMPUTE
    return policy


def _selective(policy):  # noqa: ANN001, ANN202
    def body(m, h):  # noqa: ANN001, ANN202
        for k in ("a", "b"):
            h = checkpoint(m.blocks[k], h, use_reentrant=False,
                           context_fn=functools.partial(create_selective_checkpoint_contexts, policy))
        return h
    return Wrap(body, a=MLP(norm=True), b=MLP(norm=True))


def _checkpoint_in_selective(m, h):  # noqa: ANN001, ANN202
    ctx = functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.addmm.default])
    return checkpoint(lambda x: checkpoint(m.blocks["b"], m.blocks["a"](x), use_reentrant=False), h,
                      use_reentrant=False, context_fn=ctx)


class NormBlock(nn.Module):
    """Batch norm (its running statistics update again in the recomputation, as in eager), layer norm, dropout,
    and buffers the region itself mutates."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.bn, self.ln, self.drop = nn.Linear(8, 8), nn.BatchNorm1d(8), nn.LayerNorm(8), nn.Dropout(0.2)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))
        self.register_buffer("ema", torch.zeros(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        h = self.ln(x + self.drop(F.relu(self.bn(self.fc(x)))))
        with torch.no_grad():
            self.ema.mul_(0.9).add_(h.mean(0), alpha=0.1)
        return h


def _norms(r, eval_mode=False):  # noqa: ANN001, ANN202
    m = Wrap(lambda m, h: checkpoint(m.blocks["n"], h, use_reentrant=r), n=NormBlock())
    return m.eval() if eval_mode else m


class RawInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block, self.head = MLP(norm=True), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(checkpoint(self.block, x, use_reentrant=False))


def _noise(r):  # noqa: ANN001, ANN202
    def region(m, x):  # noqa: ANN001, ANN202
        h = m.blocks["fc"](x)
        return h + 0.1 * torch.randn_like(h) + 0.05 * torch.rand(h.shape) + F.dropout(h, 0.3)
    return Wrap(lambda m, h: checkpoint(functools.partial(region, m), h, use_reentrant=r), fc=nn.Linear(8, 8))


def _autocast(r):  # noqa: ANN001, ANN202  # the recomputation runs in the backward, under the forward's autocast
    def body(m, h):  # noqa: ANN001, ANN202
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = checkpoint(m.blocks["b"], h, use_reentrant=r)
        return h.float()
    return Wrap(body, b=MLP())


def _no_early_stop(m, h):  # noqa: ANN001, ANN202
    with torch.utils.checkpoint.set_checkpoint_early_stop(False):
        return checkpoint(m.blocks["b"], h, use_reentrant=False,
                          context_fn=lambda: (contextlib.nullcontext(), contextlib.nullcontext()))


class Attn(nn.Module):
    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.qkv, self.o, self.drop = nn.Linear(d, 3 * d), nn.Linear(d, d), nn.Dropout(0.1)

    def forward(self, x, attention_mask=None, output_attentions=False):  # noqa: ANN001, ANN201
        q, k, v = self.qkv(x).chunk(3, -1)
        a = q @ k.transpose(-1, -2) / 8 ** 0.5
        if attention_mask is not None:
            a = a + attention_mask
        p = self.drop(a.softmax(-1))
        out = self.o(p @ v)
        return (out, p) if output_attentions else (out,)


class HFStyle(nn.Module):
    """`self._gradient_checkpointing_func = partial(checkpoint, use_reentrant=False)` called on
    `layer.__call__` with a mask that is None or a tensor and a bool, a keyword input to the forward."""

    def __init__(self) -> None:
        super().__init__()
        self.emb, self.layers, self.head = nn.Embedding(11, 8), nn.ModuleList([Attn(), Attn()]), nn.Linear(8, 11)
        self._gradient_checkpointing_func = functools.partial(checkpoint, use_reentrant=False)

    def forward(self, ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.emb(ids)
        mask = None if attention_mask is None else (1.0 - attention_mask[:, None, :].float()) * -1e4
        for i, layer in enumerate(self.layers):
            x = x + self._gradient_checkpointing_func(layer.__call__, x, mask if i else None, i == 0)[0]
        return self.head(x)


def _lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), target.flatten())


def _hf():  # noqa: ANN202
    gen = torch.Generator().manual_seed(4)
    ids, mask = torch.randint(11, (2, 5), generator=gen), torch.ones(2, 5, dtype=torch.long)
    mask[1, 3:] = 0
    return HFStyle(), (ids,), torch.randint(11, (2, 5), generator=gen), _lm_loss, {"attention_mask": mask}


CASES = {
    "checkpoint_sequential-nonreentrant": lambda: _seq(False),
    "checkpoint_sequential-reentrant": lambda: _seq(True),
    "keyword-and-non-tensor-args": lambda: _extra(Wrap(_kwargs)),
    "positional-non-tensor-args-reentrant": lambda: _extra(Wrap(_positional)),
    "tuple-of-tensors-arg-nonreentrant": lambda: _extra(Wrap(_tuple_arg(False))),
    "tuple-of-tensors-arg-reentrant": lambda: _extra(Wrap(_tuple_arg(True))),
    "tuple-output-nonreentrant": lambda: _tuple_out(False),
    "tuple-output-reentrant": lambda: _tuple_out(True),
    "dict-output": lambda: Wrap(_dict_out, dict=DictOut()),
    "nested-nonreentrant": lambda: _nested(False, False),
    "nested-reentrant": lambda: _nested(True, True),
    "reentrant-inside-nonreentrant": lambda: _nested(True, False),
    "same-block-twice-nonreentrant": lambda: _twice(False),
    "same-block-twice-reentrant": lambda: _twice(True),
    "preserve_rng_state-false-reentrant": lambda: _flags(use_reentrant=True, preserve_rng_state=False),
    "determinism_check-none": lambda: _flags(use_reentrant=False, determinism_check="none"),
    "debug": lambda: _flags(use_reentrant=False, debug=True),
    "selective-list-of-ops": lambda: _selective([torch.ops.aten.addmm.default, torch.ops.aten.gelu.default]),
    "selective-stateful-policy": lambda: _selective(_every_other_matmul()),
    "checkpoint-inside-selective": lambda: Wrap(_checkpoint_in_selective, a=MLP(norm=True), b=MLP(norm=True)),
    "norms-buffers-nonreentrant": lambda: _norms(False),
    "norms-buffers-reentrant": lambda: _norms(True),
    "eval-mode-nonreentrant": lambda: _norms(False, eval_mode=True),
    "eval-mode-reentrant": lambda: _norms(True, eval_mode=True),
    "raw-input-nonreentrant": RawInput,
    "randn_like-rand-nonreentrant": lambda: _noise(False),
    "randn_like-rand-reentrant": lambda: _noise(True),
    "autocast-nonreentrant": lambda: _autocast(False),
    "autocast-reentrant": lambda: _autocast(True),
    "no-early-stop-custom-context_fn": lambda: Wrap(_no_early_stop, b=MLP(norm=True)),
}


def _trains_like_eager(m: nn.Module, args: tuple, target, loss, kwargs=None, optimizer: str = "adam"):  # noqa: ANN001
    # the executor's copy fallbacks (the generator state a restore sets) stated as workspaces: no PlanMemoryWarning
    g = with_copy_workspaces(capture(m, args, loss, target, kwargs=kwargs, optimizer=optimizer, lr=0.01))
    assert not [t.id for t in g.tensors if t.id.startswith("const:")]    # the recomputation reads the parameters
    plan = quick_plan(g, 1.0, "unconstrained")
    assert validate(g, plan).valid
    r = execute(g, plan, m, args, target, loss_fn=loss, kwargs=kwargs, iters=3, device="cpu", check=True, seed=7)
    assert r.comparison is not None and r.comparison.bitwise, (r.comparison.mismatched[:3], r.comparison.max_abs_diff)
    return g


@pytest.mark.parametrize("name", sorted(CASES))
def test_user_checkpointing_trains_bitwise_like_eager(name: str) -> None:
    torch.manual_seed(0)
    m = CASES[name]()
    args, target = _data()
    g = _trains_like_eager(m, args, target, F.cross_entropy)
    kinds = [o.kind for o in g.ops]
    draws = m.training and not name.startswith("preserve_rng_state-false")
    assert (kinds.count("restore_state") > 0) == draws, kinds.count("restore_state")


def test_hugging_face_partial_checkpoint_with_a_mask_keyword() -> None:
    torch.manual_seed(0)
    m, args, target, loss, kwargs = _hf()
    _trains_like_eager(m, args, target, loss, kwargs)


@pytest.mark.parametrize("name", ["norms-buffers-reentrant", "checkpoint_sequential-nonreentrant", "nested-reentrant"])
def test_inference_capture_of_checkpointed_modules(name: str) -> None:
    torch.manual_seed(0)
    m = CASES[name]()
    args, _ = _data()
    g = with_copy_workspaces(capture(m, args, optimizer=None))
    assert not [o for o in g.ops if o.kind in ("save_state", "restore_state")]   # nothing is recomputed
    r = execute(g, quick_plan(g, 1.0, "unconstrained"), m, args, iters=3, device="cpu", check=True, seed=7)
    assert r.comparison is not None and r.comparison.bitwise, r.comparison.mismatched[:3]


def _one_line(m: nn.Module) -> str:
    args, target = _data()
    with pytest.raises(HybridError) as info:
        capture(m, args, F.cross_entropy, target, optimizer="sgd")
    assert "\n" not in str(info.value)
    return str(info.value)


class PrivateGenerator(nn.Module):
    """checkpoint restores the global generator only: eager's recomputation draws a new mask from this one."""

    def __init__(self, r: bool) -> None:
        super().__init__()
        self.r, self.gen = r, torch.Generator().manual_seed(123)
        self.stem, self.fc, self.head = nn.Linear(8, 8), nn.Linear(8, 8), nn.Linear(8, 4)

    def block(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.fc(x * (torch.rand(x.shape, generator=self.gen) > 0.3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(checkpoint(self.block, self.stem(x), use_reentrant=self.r))


@pytest.mark.parametrize("r", [False, True])
def test_a_private_generator_in_a_checkpoint_is_refused(r: bool) -> None:
    msg = _one_line(PrivateGenerator(r))
    assert "its own torch.Generator" in msg and "generator=" in msg, msg


def test_what_eager_refuses_is_refused_in_one_line_with_its_reason() -> None:
    kw = _one_line(Wrap(lambda m, h: checkpoint(_block_fn, h, 2, repeat=2, use_reentrant=True)))
    assert "Unexpected keyword arguments: repeat" in kw, kw
    sel = _one_line(Wrap(lambda m, h: checkpoint(
        m.blocks["b"], h, use_reentrant=True,
        context_fn=functools.partial(create_selective_checkpoint_contexts, [torch.ops.aten.addmm.default])),
        b=MLP()))
    assert "context_fn" in sel and "use_reentrant=False" in sel, sel


# -- what the probe found silently different, and mended --------------------------------------------------------

class InputMadeToRequireGrad(nn.Module):
    """Hugging Face's enable_input_require_grads (LoRA fine-tuning with use_reentrant=True): the region's only
    input is a tensor that requires grad but is no parameter. grad() would prune the region without running it,
    and its parameters would silently get no gradient."""

    def __init__(self, inside: bool) -> None:
        super().__init__()
        self.inside, self.block, self.head = inside, nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.inside:
            x = x.detach().requires_grad_()     # what the hook on the embedding's output does
        return self.head(checkpoint(self.block, x, use_reentrant=True))


@pytest.mark.parametrize("inside", [True, False])
def test_a_reentrant_region_fed_by_an_input_that_requires_grad(inside: bool) -> None:
    torch.manual_seed(0)
    m = InputMadeToRequireGrad(inside)
    (x,), y = _data()
    g = _trains_like_eager(m, (x if inside else x.requires_grad_(),), y, F.cross_entropy, optimizer="sgd")
    assert {"sgd:block.weight", "sgd:block.bias"} <= {o.id for o in g.ops}


class SameMaskTwice(nn.Module):
    """The generator's own state methods: the same dropout mask drawn twice."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.head = nn.Linear(8, 8), nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        s = torch.default_generator.get_state()
        a = F.dropout(h, 0.5)
        torch.default_generator.set_state(s)
        return self.head(a * F.dropout(h.tanh(), 0.5))


def test_the_default_generators_own_state_calls_are_graph_ops() -> None:
    torch.manual_seed(0)
    g = _trains_like_eager(SameMaskTwice(), *_data(), F.cross_entropy)
    assert [o.kind for o in g.ops].count("restore_state") == 1


def test_other_uses_of_the_default_generator_are_refused_naming_them() -> None:
    explicit = _one_line(Wrap(lambda m, h: h * torch.rand(h.shape, generator=torch.default_generator)))
    assert "generator=torch.default_generator" in explicit, explicit
    other = _one_line(Wrap(lambda m, h: h * torch.default_generator.graphsafe_get_state()))
    assert "torch.default_generator.graphsafe_get_state" in other, other
    assert isinstance(torch.default_generator, torch.Generator)    # the real one is back after capture


class MixedNorm(nn.Module):
    """A bfloat16 input to a float32 norm under autocast: the CPU kernels save float32 statistics, where
    PyTorch's shape rules say bfloat16."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.stem, self.norm, self.head = nn.Linear(8, 8), norm, nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.norm(self.stem(x).bfloat16())
        return self.head(h.float())


@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_mixed_precision_norms_record_their_statistics_dtype(norm: str) -> None:
    torch.manual_seed(0)
    g = _trains_like_eager(MixedNorm(nn.LayerNorm(8) if norm == "layer" else nn.BatchNorm1d(8)), *_data(),
                           F.cross_entropy)
    kernel = "native_layer_norm" if norm == "layer" else "batch_norm"
    stats = [t for o in g.ops if kernel in o.kind for t in o.outputs[1:3]]
    assert stats and all(g.tensor(t).extra["dtype"].endswith("float32") for t in stats), stats


def test_mixed_precision_group_norm_is_refused_naming_it() -> None:
    msg = _one_line(MixedNorm(nn.GroupNorm(2, 8)))
    assert "group norm" in msg and "bfloat16" in msg and "float32" in msg, msg
