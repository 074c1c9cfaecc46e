"""Trace one training step of an nn.Module into an FX graph of aten ops, on fake tensors.

The module is copied with every parameter and buffer replaced by a FakeTensor
(shape, dtype and strides, no data), so a model of any size traces in little
memory; the user's module is not touched. AOTAutograd's joint export
(`aot_export_module(trace_joint=True)`) then records the forward, the loss
and the backward exactly as the autograd engine runs them in eager mode, with
every in-place op turned functional: buffer mutations (batch-norm statistics)
come back as extra outputs, which hybrid.capture.to_graph turns into in-place
update ops, and the optimizer step is added there as one op per parameter.

(`torch.func.grad_and_value` traces a different backward for some composite
ops, e.g. binary_cross_entropy_with_logits, so it does not replay bitwise.)
"""
from __future__ import annotations

import contextlib
import copy
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.fx as fx
import torch.nn as nn
from torch.utils import _pytree as pytree

from hybrid.errors import HybridError

# Placeholder roles, in placeholder order.
TRAINABLE, FROZEN, BUFFER, INPUT, TARGET = "param", "frozen", "buffer", "input", "target"
_PREFIX = "module."


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


@dataclass
class Traced:
    gm: fx.GraphModule
    roles: list[Role]                      # one per placeholder, in order
    training: bool                         # backward traced
    loss: fx.Node | None
    grads: dict[str, fx.Node]              # trainable parameter -> its gradient
    unused: list[str]                      # trainable parameters the loss does not depend on (no gradient)
    state_updates: list[tuple[fx.Node, fx.Node]] = field(default_factory=list)  # (placeholder, its new value)
    outputs: list[fx.Node | None] = field(default_factory=list)                 # forward outputs (inference)
    ties: dict[str, str] = field(default_factory=dict)    # tied parameter/buffer name -> the name it aliases


class _Stage:
    """Which part of the user's code is running, for error messages."""

    def __init__(self) -> None:
        self.name = "forward"


def _first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    line = text.splitlines()[0].strip()
    return line if len(line) <= 300 else line[:297] + "..."


class _Step(nn.Module):
    """The module plus its loss, as one module taking flat tensors: what AOTAutograd exports."""

    def __init__(self, module: nn.Module, call: Callable[[tuple], tuple]) -> None:
        super().__init__()
        self.module = module
        self._call = call

    def forward(self, *flat: torch.Tensor) -> tuple:
        return self._call(flat)


def _fake_copy(module: nn.Module, mode: Any, dtype: torch.dtype | None) -> tuple[nn.Module, dict[str, str]]:
    """The module with fake parameters and buffers: a structural copy whose tensors take no memory.

    A tensor registered under several names (tied weights) gets one fake per
    name, because AOTAutograd wants distinct inputs; returns {alias: first name}
    so the graph can treat them as one tensor again and sum their gradients.
    """

    def fake(t: torch.Tensor) -> torch.Tensor:
        d = dtype if (dtype is not None and t.is_floating_point()) else t.dtype
        with mode:
            return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=d, device="cpu")

    memo: dict[int, Any] = {}
    for p in module.parameters():
        memo[id(p)] = nn.Parameter(fake(p), requires_grad=p.requires_grad)
    for b in module.buffers():
        memo[id(b)] = fake(b)
    try:
        fmod = copy.deepcopy(module, memo)
    except Exception as e:  # noqa: BLE001 - whatever the module holds that cannot be copied
        raise HybridError(f"capture copies the module with fake tensors in place of its weights, and this module "
                          f"cannot be copied: {type(e).__name__}: {_first_line(e)}") from None
    ties: dict[str, str] = {}
    first: dict[int, str] = {}
    for getter in (lambda m: m.named_parameters(remove_duplicate=False),
                   lambda m: m.named_buffers(remove_duplicate=False)):
        for name, t in list(getter(fmod)):
            if id(t) not in first:
                first[id(t)] = name
                continue
            ties[name] = first[id(t)]
            owner, _, leaf = name.rpartition(".")
            sub = fmod.get_submodule(owner)
            copy_t = nn.Parameter(fake(t), requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else fake(t)
            if isinstance(t, nn.Parameter):
                sub._parameters[leaf] = copy_t
            else:
                sub._buffers[leaf] = copy_t
    return fmod, ties


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
    from torch._functorch.aot_autograd import aot_export_module
    from torch._subclasses.fake_tensor import FakeTensorMode

    if not isinstance(module, nn.Module):
        raise HybridError(f"capture needs a torch.nn.Module, got {type(module).__name__}")
    if not isinstance(args, tuple):
        args = (args,)
    kwargs = dict(kwargs or {})
    if training and loss_fn is None and target is not None:
        raise HybridError("a target was given without a loss function: pass loss_fn=... (called as loss_fn(output, target))")
    if training and not any(p.requires_grad for p in module.parameters()):
        raise HybridError("no parameter of the module requires grad, so there is nothing to train; "
                          "capture with optimizer=None for an inference graph")

    mode = FakeTensorMode(allow_non_fake_inputs=True)

    def fake(t: torch.Tensor) -> torch.Tensor:
        d = dtype if (dtype is not None and t.is_floating_point()) else t.dtype
        with mode:
            return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=d, device="cpu")

    fmod, ties = _fake_copy(module, mode, dtype)
    in_leaves, input_spec = pytree.tree_flatten((args, kwargs))
    in_is_tensor = [isinstance(x, torch.Tensor) for x in in_leaves]
    t_leaves, target_spec = pytree.tree_flatten(target)
    t_is_tensor = [isinstance(x, torch.Tensor) for x in t_leaves]
    flat_inputs = [fake(x) for x in in_leaves if isinstance(x, torch.Tensor)]
    flat_targets = [fake(x) for x in t_leaves if isinstance(x, torch.Tensor)]
    n_in = len(flat_inputs)
    stage = _Stage()
    n_outputs = [0]

    def rebuild(leaves: list[Any], is_tensor: list[bool], tensors: tuple, spec: Any) -> Any:
        it = iter(tensors)
        return pytree.tree_unflatten([next(it) if is_t else x for x, is_t in zip(leaves, is_tensor)], spec)

    def check_loss(loss: Any) -> None:
        what = "the loss function" if loss_fn is not None else "the module's forward (used as the loss, no loss_fn given)"
        if not isinstance(loss, torch.Tensor):
            raise HybridError(f"{what} returned {type(loss).__name__}, not a tensor; the loss must be a scalar tensor")
        if loss.numel() != 1:
            raise HybridError(f"{what} returned a tensor of shape {list(loss.shape)}, not a scalar; "
                              "reduce it to one number (e.g. .mean() or .sum())")
        if not loss.is_floating_point():
            raise HybridError(f"{what} returned a {loss.dtype} tensor; the loss must be floating point")

    def call(flat: tuple) -> tuple:
        a, kw = rebuild(in_leaves, in_is_tensor, flat[:n_in], input_spec)
        stage.name = "forward"
        out = fmod(*a, **kw)
        loss = None
        if loss_fn is not None:
            stage.name = "loss"
            tgt = rebuild(t_leaves, t_is_tensor, flat[n_in:], target_spec)
            loss = loss_fn(out) if target is None else loss_fn(out, tgt)
        elif training:
            loss = out
        if loss is not None:
            check_loss(loss)
        stage.name = "backward"
        if training:
            return (loss,)
        outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
        n_outputs[0] = len(outs)
        return tuple(([loss] if loss is not None else []) + outs)

    step = _Step(fmod, call)
    unused: list[str] = []

    def export() -> tuple[fx.GraphModule, Any]:
        with mode, portable_kernels():
            return aot_export_module(step, tuple(flat_inputs + flat_targets), trace_joint=training,
                                     output_loss_index=0 if training else None)

    try:
        try:
            gm, sig = export()
        except AssertionError as e:
            if "did not receive a gradient" not in str(e):
                raise
            # Parameters the loss does not depend on get no gradient in eager PyTorch (grad is None);
            # find them with one eager pass on the fake tensors, freeze them in the copy and trace again.
            named = [(n, p) for n, p in fmod.named_parameters() if p.requires_grad]
            with mode, portable_kernels():
                loss = step(*flat_inputs, *flat_targets)[0]
                grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
            for (n, p), g in zip(named, grads):
                if g is None:
                    p.requires_grad_(False)
                    unused.append(n)
            gm, sig = export()
    except HybridError:
        raise
    except Exception as e:  # noqa: BLE001 - the user's code can raise anything; report it in one line
        name = type(e).__name__
        if "DataDependent" in name or "data-dependent" in str(e).lower() or "data dependent" in str(e).lower():
            raise HybridError(f"the module's {stage.name} depends on tensor values ({_first_line(e)}); "
                              "capture needs control flow and shapes that do not depend on data") from None
        where = {"forward": "the module's forward", "loss": "the loss function", "backward": "the backward pass"}
        raise HybridError(f"{where[stage.name]} failed under capture: {name}: {_first_line(e)}") from None
    return _traced(gm, sig, fmod, training, n_in, unused, n_outputs[0], ties)


def _strip(fqn: str) -> str:
    return fqn[len(_PREFIX):] if fqn.startswith(_PREFIX) else fqn


def _traced(gm: fx.GraphModule, sig: Any, fmod: nn.Module, training: bool, n_in: int, unused: list[str],
            n_outputs: int, ties: dict[str, str]) -> Traced:
    """Read AOTAutograd's signature: which placeholder is what, where loss, gradients and new buffers are."""
    if sig.input_tokens or sig.output_tokens:
        raise HybridError("the module calls side-effecting custom ops (effect tokens); capture does not support them")
    if sig.parameters_to_mutate:
        raise HybridError(f"the forward modifies parameter {_strip(next(iter(sig.parameters_to_mutate.values())))!r} "
                          "in place; capture supports in-place updates of buffers and inputs only")
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    by_name = {n.name: n for n in out_node.args[0] if isinstance(n, fx.Node)}
    trainable = {_PREFIX + n for n, p in fmod.named_parameters() if p.requires_grad} | {_PREFIX + u for u in unused}
    roles: list[Role] = []
    for fqn in sig.parameters:
        roles.append(Role(TRAINABLE if fqn in trainable else FROZEN, _strip(fqn)))
    for fqn in sig.buffers:
        roles.append(Role(BUFFER, _strip(fqn)))
    for i in range(len(sig.user_inputs)):
        roles.append(Role(INPUT, str(i)) if i < n_in else Role(TARGET, str(i - n_in)))
    if len(roles) != len(placeholders):
        raise HybridError(f"capture: traced {len(placeholders)} inputs but expected {len(roles)}")
    ph_of_buffer = {fqn: ph for fqn, ph in zip(sig.buffers, placeholders[len(sig.parameters):])}
    ph_of_input = {name: ph for name, ph in zip(sig.user_inputs, placeholders[len(sig.parameters) + len(sig.buffers):])}
    updates = [(ph_of_buffer[fqn], by_name[out]) for out, fqn in sig.buffers_to_mutate.items()]
    updates += [(ph_of_input[inp], by_name[out]) for out, inp in sig.user_inputs_to_mutate.items()]
    outs = [by_name.get(o) if isinstance(o, str) else None for o in sig.user_outputs]
    grads: dict[str, fx.Node] = {}
    loss = None
    if training:
        bw = sig.backward_signature
        # The loss is the first user output. (bw.loss_output is not offset by the mutated-buffer outputs
        # that come first in torch 2.13, so it can name a new running mean instead.)
        loss = by_name[sig.user_outputs[0]]
        for out, fqn in bw.gradients_to_parameters.items():
            grads[_strip(fqn)] = by_name[out]
        outputs: list[fx.Node | None] = []
    else:
        has_loss = len(outs) > n_outputs
        loss = outs[0] if has_loss else None
        outputs = outs[1:] if has_loss else outs
    return Traced(gm, roles, training, loss, grads, unused, updates, outputs, ties)
