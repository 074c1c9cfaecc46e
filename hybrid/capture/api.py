"""The public capture API: a module (or a zoo model name) and a batch in, a validated Graph out."""
from __future__ import annotations

import math
import numbers
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from hybrid.capture import costs, optimizers
from hybrid.capture.encoding import parse_dtype
from hybrid.capture.to_graph import convert
from hybrid.capture.trace import trace_step
from hybrid.units import counted, listed
from hybrid.device import Device, preset
from hybrid.errors import HybridError
from hybrid.graph import Graph


def _no_optimizer(optimizer: Any) -> bool:
    """Whether `optimizer` asks for an inference graph (None or "none")."""
    return optimizer is None or (isinstance(optimizer, str) and optimizer.strip().lower() == "none")


def forward_alone(optimizer: Any, loss_fn: Any, target: Any) -> tuple[Any, Any]:
    """The loss function and target an inference capture takes: none (`hybrid capture --optimizer none` and
    `capture_model` without an optimizer). An inference graph is the forward alone — no label to upload, no loss
    to compute; its outputs are the model's, and placement and serving time exactly that."""
    return (None, None) if _no_optimizer(optimizer) else (loss_fn, target)


def _optimizer_spec(optimizer: Any, module: torch.nn.Module, lr: float | None,
                    options: dict[str, Any] | None) -> optimizers.OptimizerSpec | None:
    if _no_optimizer(optimizer):
        if lr is not None or options:
            raise HybridError("lr/optimizer options were given without an optimizer; pass optimizer='sgd' or 'adam'")
        return None
    if lr is not None and not isinstance(lr, torch.Tensor) and (
            isinstance(lr, bool) or not isinstance(lr, numbers.Real) or not math.isfinite(lr) or lr <= 0):
        raise HybridError(f"lr must be a positive finite number, got {lr!r}")
    if isinstance(optimizer, str):
        opts = dict(options or {})
        if lr is not None:
            opts["lr"] = lr
        names = [n for n, p in module.named_parameters() if p.requires_grad]
        return optimizers.from_name(optimizer, names, opts)
    if isinstance(optimizer, torch.optim.Optimizer):
        if lr is not None or options:
            raise HybridError("lr/optimizer options come from the torch optimizer given; do not pass them too")
        return optimizers.from_torch(optimizer, module)
    raise HybridError(f"optimizer must be 'sgd', 'adam', 'adamw', None or a torch.optim optimizer, got {optimizer!r}")


class CaptureWarning(UserWarning):
    """What capture traced faithfully but the user likely did not mean (parameters that get no gradient)."""


def capture(
    module: torch.nn.Module,
    args: Any,
    loss_fn: Callable[..., torch.Tensor] | None = None,
    target: Any = None,
    *,
    kwargs: dict[str, Any] | None = None,
    optimizer: Any = "adam",
    lr: float | None = None,
    optimizer_options: dict[str, Any] | None = None,
    device: str | Device = "v100-16gb",
    cost_device: str | None = None,
    dtype: str | torch.dtype | None = None,
    name: str | None = None,
    profile: str | Path | None = None,
) -> Graph:
    """One training iteration of `module` as a graph: forward, backward and the optimizer step.

    `module(*args, **kwargs)` is traced on fake tensors (no memory is used for
    parameters or activations; the module may live on the meta device); the
    loss is `loss_fn(output, target)` (or `loss_fn(output)` without target, or
    the module's output itself without loss_fn) and must be a scalar.
    `optimizer`: 'sgd', 'adam', 'adamw' (hyper-parameters from `lr` and
    `optimizer_options`, torch's defaults otherwise), a torch.optim
    SGD/Adam/AdamW instance, or None for an inference graph (forward only).
    `device`: the preset (or Device) written into the graph and used for the
    roofline times. A preset named here is recorded as the card alone, with no
    reserve (plans from the graph may fill all of it); the CLI's `--device`
    keeps 1 GiB free for the CUDA context: pass `preset(name, reserve=True)`
    for the graph `hybrid capture --device name` writes. `cost_device` names the compute preset when `device` is a
    custom Device. `dtype` ('fp32', 'bf16', 'fp16') casts floating parameters,
    buffers and inputs. `profile`: a profile file whose measured times replace
    the roofline estimates of matching ops. `executor.ops.with_copy_workspaces(graph)` states the workspaces
    hybrid's executor needs (`hybrid capture --executor-workspaces`).
    """
    if not isinstance(module, torch.nn.Module):
        raise HybridError(f"capture needs a torch.nn.Module, got {type(module).__name__}")
    dev = device if isinstance(device, Device) else preset(device)
    model = costs.cost_model(cost_device or dev.name)
    spec = _optimizer_spec(optimizer, module, lr, optimizer_options)
    training = spec is not None
    traced = trace_step(module, args, kwargs, loss_fn, target, training, parse_dtype(dtype))
    if traced.unused:
        names = listed(traced.unused, 4)
        n = len(traced.unused)
        warnings.warn(f"{counted(n, 'trainable parameter')} {'gets' if n == 1 else 'get'} no "
                      f"gradient from the loss ({names}): the step never updates them (as eager would not); a "
                      "checkpoint with use_reentrant=True whose inputs need no gradient does this (use "
                      "use_reentrant=False), or freeze them (requires_grad=False)", CaptureWarning, stacklevel=2)
    if traced.numbers_changed:
        n = len(traced.numbers_changed)
        names = listed(traced.numbers_changed)
        first = traced.numbers_changed[0].split(" ", 1)[0].rsplit(".", 1)[-1]
        warnings.warn(f"the step changes the module's {'attribute' if n == 1 else 'attributes'} {names}, a Python "
                      "number: the graph holds the value read while traced, so where the step's arithmetic uses "
                      "it, replay differs from eager from the second step on; keep such a counter in a buffer "
                      f"(self.register_buffer({first!r}, torch.zeros(()))) to have it updated each step",
                      CaptureWarning, stacklevel=2)
    if traced.tensors_changed:
        n = len(traced.tensors_changed)
        names = listed(traced.tensors_changed)
        first = traced.tensors_changed[0].rsplit(".", 1)[-1]
        warnings.warn(f"the step rebinds the module's tensor {'attribute' if n == 1 else 'attributes'} {names}, "
                      f"not {'a registered buffer' if n == 1 else 'registered buffers'}: the graph holds the value "
                      "read while traced as a constant, so where the step uses it, replay differs from eager from "
                      f"the second step on; register it as a buffer (self.register_buffer({first!r}, tensor)) to "
                      "have it updated each step", CaptureWarning, stacklevel=2)
    graph = convert(traced, spec, model, name or type(module).__name__.lower(), dev)
    if profile is not None:
        from hybrid.capture.profile import Profile, apply_profile

        graph = apply_profile(graph, Profile.load(profile))
    return graph


def capture_model(
    model: str,
    batch: int | None = None,
    *,
    optimizer: Any = "adam",
    lr: float | None = None,
    optimizer_options: dict[str, Any] | None = None,
    device: str | Device = "v100-16gb",
    cost_device: str | None = None,
    dtype: str | torch.dtype | None = "fp32",
    overrides: dict[str, Any] | None = None,
    profile: str | Path | None = None,
) -> Graph:
    """Capture a zoo model (`hybrid models` lists them) at `batch` (default: the paper's batch).

    The model is built on the meta device, so even a model far larger than
    host memory captures in little RAM. Without an optimizer it is captured in
    eval mode (inference) as the forward alone: the model's outputs, without its loss and label input;
    `capture` itself never changes a module's mode.
    """
    from hybrid.zoo import get_model

    spec = get_model(model, **(overrides or {}))
    batch = spec.default_batch if batch is None else int(batch)
    if batch <= 0:
        raise HybridError(f"--batch must be positive, got {batch}")
    dt = parse_dtype(dtype) or torch.float32
    with torch.device("meta"):
        module = spec.build()
    inference = _no_optimizer(optimizer)
    if inference:
        module.eval()   # an inference graph: batch norm uses its running statistics, dropout is off
    args, target = spec.make_inputs(batch, torch.device("meta"), dt)
    loss, target = forward_alone(optimizer, spec.loss, target)
    graph = capture(module, args, loss, target, optimizer=optimizer, lr=lr, optimizer_options=optimizer_options,
                    device=device, cost_device=cost_device, dtype=dt, name=f"{spec.name}-b{batch}", profile=profile)
    graph.extra["model"] = {"name": spec.name, "family": spec.family, "batch": batch, "paper": spec.paper,
                            "description": spec.description, "config": dict(spec.config)}
    return graph
