"""Trace one training step of an nn.Module into an FX graph of aten ops, on fake tensors.

`make_fx(functionalize(step))` over `torch.func.grad_and_value` records the
forward, the backward the autograd engine runs, and nothing else; every tensor
is a FakeTensor (shapes, dtypes and strides, no data), so a model of any size
traces in little memory. Parameters, buffers and inputs become placeholders in
a known order; the optimizer step is added later as one op per parameter
(hybrid.capture.optimizers).

Functionalization removes in-place ops on activations (the graph format's
tensors are written once) and turns mutations of buffers into `copy_`s at the
end; `native_batch_norm` still updates its running statistics in place (its
schema does not say so), which hybrid.capture.to_graph accounts for.
"""
from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn
from torch.utils import _pytree as pytree

from hybrid.errors import HybridError

# Placeholder roles, in placeholder order.
TRAINABLE, FROZEN, BUFFER, INPUT, TARGET = "param", "frozen", "buffer", "input", "target"


@contextlib.contextmanager
def portable_kernels() -> Iterator[None]:
    """Kernels that exist on every device: math attention, no oneDNN (CPU-only fused RNN, conv).

    Capture traces under it so the graph runs on CUDA too; eager runs that are
    compared bitwise with a replay must use it as well, since nn.LSTM and
    scaled_dot_product_attention otherwise pick device-specific fused kernels.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with torch.backends.mkldnn.flags(enabled=False), sdpa_kernel(SDPBackend.MATH):
            yield


@dataclass(frozen=True)
class Role:
    kind: str        # TRAINABLE, FROZEN, BUFFER, INPUT or TARGET
    name: str        # module-qualified name, or the leaf's position for inputs and targets
    real: Any = field(default=None, compare=False, repr=False)  # the original tensor (real or meta)


@dataclass
class Traced:
    gm: torch.fx.GraphModule
    roles: list[Role]            # one per placeholder, in order
    training: bool               # backward traced
    has_loss: bool
    n_outputs: int               # forward outputs returned (inference only)
    input_spec: Any              # pytree spec of (args, kwargs)
    target_spec: Any


class _Stage:
    """Which part of the user's code is running, for error messages."""

    def __init__(self) -> None:
        self.name = "forward"


def _fake(mode: Any, t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    d = dtype if (dtype is not None and t.is_floating_point()) else t.dtype
    with mode:
        return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=d, device="cpu")


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    line = text.splitlines()[0].strip()
    return line if len(line) <= 300 else line[:297] + "..."


def trace_step(
    module: nn.Module,
    args: tuple,
    kwargs: dict[str, Any] | None,
    loss_fn: Callable[..., torch.Tensor] | None,
    target: Any,
    training: bool,
    dtype: torch.dtype | None,
) -> Traced:
    """Trace forward (+ loss) (+ backward w.r.t. trainable parameters) on fake tensors."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    if not isinstance(module, nn.Module):
        raise HybridError(f"capture needs a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(args, tuple):
        args = (args,)
    kwargs = dict(kwargs or {})
    if training and loss_fn is None and target is not None:
        raise HybridError("a target was given without a loss function: pass loss_fn=... (called as loss_fn(output, target))")

    mode = FakeTensorMode(allow_non_fake_inputs=True)
    roles: list[Role] = []
    fakes: dict[str, list[torch.Tensor]] = {TRAINABLE: [], FROZEN: [], BUFFER: [], INPUT: [], TARGET: []}
    for name, p in module.named_parameters():
        kind = TRAINABLE if (training and p.requires_grad) else FROZEN
        roles_kind = Role(kind, name, p)
        fakes[kind].append(_fake(mode, p, dtype))
        roles.append(roles_kind)
    for name, b in module.named_buffers():
        fakes[BUFFER].append(_fake(mode, b, dtype))
        roles.append(Role(BUFFER, name, b))
    in_leaves, input_spec = pytree.tree_flatten((args, kwargs))
    in_is_tensor = [isinstance(x, torch.Tensor) for x in in_leaves]
    for i, x in enumerate(in_leaves):
        if in_is_tensor[i]:
            fakes[INPUT].append(_fake(mode, x, dtype))
            roles.append(Role(INPUT, str(i), x))
    t_leaves, target_spec = pytree.tree_flatten(target)
    t_is_tensor = [isinstance(x, torch.Tensor) for x in t_leaves]
    for i, x in enumerate(t_leaves):
        if t_is_tensor[i]:
            fakes[TARGET].append(_fake(mode, x, dtype))
            roles.append(Role(TARGET, str(i), x))
    # Placeholders follow the argument order of `step` below.
    order = {TRAINABLE: 0, FROZEN: 1, BUFFER: 2, INPUT: 3, TARGET: 4}
    roles.sort(key=lambda r: order[r.kind])

    names = {k: [r.name for r in roles if r.kind == k] for k in order}
    stage = _Stage()
    n_outputs = [0]

    def rebuild(leaves: list[Any], is_tensor: list[bool], tensors: list[torch.Tensor], spec: Any) -> Any:
        it = iter(tensors)
        return pytree.tree_unflatten([next(it) if is_t else x for x, is_t in zip(leaves, is_tensor)], spec)

    def forward(trainable: list, frozen: list, buffers: list, inputs: list, targets: list) -> tuple[Any, list]:
        state = {**dict(zip(names[TRAINABLE], trainable)), **dict(zip(names[FROZEN], frozen)),
                 **dict(zip(names[BUFFER], buffers))}
        a, kw = rebuild(in_leaves, in_is_tensor, inputs, input_spec)
        stage.name = "forward"
        out = torch.func.functional_call(module, state, tuple(a), kw)
        if loss_fn is None:
            return (out if training else None), pytree.tree_leaves(out)
        stage.name = "loss"
        tgt = rebuild(t_leaves, t_is_tensor, targets, target_spec)
        loss = loss_fn(out) if target is None else loss_fn(out, tgt)
        return loss, pytree.tree_leaves(out)

    def check_loss(loss: Any) -> None:
        what = "the loss function" if loss_fn is not None else "the module's forward (used as the loss, no loss_fn given)"
        if not isinstance(loss, torch.Tensor):
            raise HybridError(f"{what} returned {type(loss).__name__}, not a tensor; the loss must be a scalar tensor")
        if loss.numel() != 1:
            raise HybridError(f"{what} returned a tensor of shape {list(loss.shape)}, not a scalar; "
                              "reduce it to one number (e.g. .mean() or .sum())")
        if not loss.is_floating_point():
            raise HybridError(f"{what} returned a {loss.dtype} tensor; the loss must be floating point")

    def step(trainable: list, frozen: list, buffers: list, inputs: list, targets: list) -> list:
        if not training:
            loss, outs = forward(trainable, frozen, buffers, inputs, targets)
            if loss is not None:
                check_loss(loss)
            n_outputs[0] = len(outs)
            return ([loss] if loss is not None else []) + list(outs)

        def loss_only(trainable: list, frozen: list, buffers: list, inputs: list, targets: list) -> torch.Tensor:
            loss, _ = forward(trainable, frozen, buffers, inputs, targets)
            check_loss(loss)
            stage.name = "backward"
            return loss

        grads, loss = torch.func.grad_and_value(loss_only)(trainable, frozen, buffers, inputs, targets)
        return [loss] + list(grads)

    try:
        with mode, portable_kernels():
            gm = make_fx(torch.func.functionalize(step, remove="mutations"))(
                fakes[TRAINABLE], fakes[FROZEN], fakes[BUFFER], fakes[INPUT], fakes[TARGET])
    except HybridError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code can raise anything; report it in one line
        name = type(e).__name__
        if "DataDependent" in name or "data-dependent" in str(e).lower():
            raise HybridError(f"the module's {stage.name} depends on tensor values ({_first_line(e)}); "
                              "capture needs control flow and shapes that do not depend on data") from None
        where = {"forward": "the module's forward", "loss": "the loss function", "backward": "the backward pass"}
        raise HybridError(f"{where[stage.name]} failed under capture: {name}: {_first_line(e)}") from None
    return Traced(gm, roles, training, loss_fn is not None or training, n_outputs[0], input_spec, target_spec)
