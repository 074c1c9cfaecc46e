"""Trace one training step of an nn.Module into an FX graph of aten ops, on fake tensors.

Parameters, buffers and inputs are replaced by FakeTensors (shape, dtype and
strides, no data) and the step — the module's forward with those tensors in
place of its own (for the whole step: a checkpointed region recomputes in the
backward), the loss, `torch.autograd.grad` (`loss.backward()` when reentrant
checkpointing needs it) — runs once under `make_fx`; generator save/restore
calls become ops (hybrid.capture.rng). The autograd
engine runs exactly as in eager training, so the recorded backward is eager's
op for op; a model of any size traces in little memory and the user's module
is not touched. Parameters, buffers and inputs become placeholders in a known
order; the optimizer step is added later (hybrid.capture.optimizers).

Nothing is functionalized here: in-place ops stay in the trace, and
hybrid.capture.to_graph gives each in-place write of an intermediate tensor a
new graph tensor (a version), while writes of buffers stay in-place updates.
(`torch.func.grad_and_value` traces a different backward for some composite
ops, e.g. binary_cross_entropy_with_logits; AOTAutograd's joint export is
eager-exact too but several times slower on graphs of 10,000 ops.)
"""
from __future__ import annotations

import contextlib
import operator
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, NoReturn

import torch
import torch.fx as fx
import torch.nn as nn
from torch.nn.utils.stateless import _reparametrize_module
from torch.utils import _pytree as pytree

from hybrid.capture.recomputation import marking_recomputation
from hybrid.capture.rng import prune_forks, rng_ops
from hybrid.errors import HybridError, first_line

# Placeholder roles, in placeholder order.
TRAINABLE, FROZEN, BUFFER, INPUT, TARGET = "param", "frozen", "buffer", "input", "target"


@contextlib.contextmanager
def portable_kernels() -> Iterator[None]:
    """Kernels that exist on every device: math attention, no oneDNN (CPU-only fused RNN, conv), and
    nn.MultiheadAttention / nn.TransformerEncoderLayer without their inference fast path.

    Capture traces under it so the graph runs on CUDA too; eager runs that are
    compared bitwise with a replay must use it as well, since nn.LSTM and
    scaled_dot_product_attention otherwise pick device-specific fused kernels, and
    an eval-mode attention layer outside autograd its fused one (which a trace does
    not take: its fake tensors dispatch through Python), last bits apart.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    mha = getattr(torch.backends, "mha", None)
    fast = mha.get_fastpath_enabled() if mha is not None else None
    with warnings.catch_warnings():
        # only the flags' own noise (TF32 on oneDNN, Intel GPUs): the user's warnings (a checkpoint whose inputs
        # need no gradient, so its parameters get none) stay theirs to see
        warnings.filterwarnings("ignore", message=r"TF32 acceleration on top of oneDNN", category=UserWarning)
        try:
            if mha is not None:
                mha.set_fastpath_enabled(False)
            with torch.backends.mkldnn.flags(enabled=False), sdpa_kernel(SDPBackend.MATH):
                yield
        finally:
            if mha is not None:
                mha.set_fastpath_enabled(fast)


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
    outputs: list[fx.Node | None] = field(default_factory=list)   # forward outputs (inference)
    numbers_changed: list[str] = field(default_factory=list)       # module attributes (Python numbers) the step
    #   changed, "name (old -> new)": the graph holds the values read while traced (hybrid.capture.api warns)
    tensors_changed: list[str] = field(default_factory=list)       # tensor attributes (not buffers) it rebound


_REENTRANT_GRAD = "use_reentrant=True, torch.utils.checkpoint is incompatible with .grad()"


def _host_random_states() -> dict[str, Any]:
    """The generators a step could draw from outside torch: Python's `random`, and NumPy's global one."""
    import random

    states: dict[str, Any] = {"Python's random module": random.getstate()}
    try:
        import numpy as np
    except ImportError:
        return states
    states["NumPy's global generator (np.random)"] = np.random.get_state()
    return states


def _same_state(a: Any, b: Any) -> bool:
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b))
    if hasattr(a, "shape") and hasattr(b, "shape"):    # NumPy's key array
        return a.shape == b.shape and bool((a == b).all())
    return a == b


def _attr(gm: fx.GraphModule, target: str) -> object:
    """A get_attr node's value (its target may be dotted)."""
    obj: object = gm
    for part in target.split("."):
        obj = getattr(obj, part, None)
    return obj


def _storages(module: nn.Module) -> dict[tuple[str, str], tuple[torch.Tensor, int]]:
    """Each parameter and buffer, by (kind, name), with its storage: `p.data = new` swaps the storage under the
    same tensor object, which no traced op records (a buffer rebound, `self.b = new`, is another object)."""
    return {(kind, n): (t, t.untyped_storage()._cdata)
            for kind, named in (("parameter", module.named_parameters(remove_duplicate=False)),
                                ("buffer", module.named_buffers(remove_duplicate=False)))
            for n, t in named if isinstance(t, torch.Tensor)}


def _refuse_data_rebinds(module: nn.Module, before: dict[tuple[str, str], tuple[torch.Tensor, int]]) -> None:
    """A parameter or buffer given new data through `.data =` (weight normalisation in older code, an EMA) keeps
    its old value in the graph: the trace saw the ops computing the new one, not the rebinding. Refused, naming
    it, rather than captured silently different from eager."""
    after = _storages(module)
    for (kind, name), (t, cdata) in before.items():
        now = after.get((kind, name))
        if now is not None and now[0] is t and now[1] != cdata:
            how = (f"update it in place under torch.no_grad() (self.{name}.copy_(new_value))" if kind == "parameter"
                   else f"assign the buffer itself (self.{name} = new_value) or update it in place "
                        f"(self.{name}.copy_(new_value))")
            raise HybridError(f"the step replaces the data of {kind} {name!r} (self.{name}.data = ..., .set_(), or "
                              f"module.to() in the step), which capture cannot record (the graph would keep its old "
                              f"value, unlike eager); {how}")


def _reassigned_buffers(module: nn.Module, traced: dict[str, torch.Tensor]) -> None:
    """A buffer the step rebinds (`self.ema = 0.9 * self.ema + ...`, `self.steps = self.steps + 1`) holds the new
    value from then on, in eager; the trace saw only its reads. Its new value is copied into the traced buffer
    at the step's end (the graph's update of it), as eager's next step reads it; a new shape or dtype, which no
    update in place can give, is refused naming the buffer."""
    for name, old in traced.items():
        new = module.get_buffer(name)
        if new is old:
            continue
        if not isinstance(new, torch.Tensor) or new.shape != old.shape or new.dtype != old.dtype:
            got = (f"a {str(new.dtype).removeprefix('torch.')} tensor of shape {list(new.shape)}"
                   if isinstance(new, torch.Tensor) else type(new).__name__)
            raise HybridError(f"the step assigns buffer {name!r} {got} where it was "
                              f"{str(old.dtype).removeprefix('torch.')} {list(old.shape)}: capture records a "
                              "buffer's update in place only; keep its shape and dtype (e.g. "
                              "self.buf.copy_(value))")
        with torch.no_grad():
            old.copy_(new)


@contextlib.contextmanager
def _module_kept(module: nn.Module, numbers_changed: list[str] | None = None,
                 tensors_changed: list[tuple[str, torch.Tensor]] | None = None) -> Iterator[None]:
    """The user's module as it was before capture, whatever the step stored on it while traced (a lazily built
    table, `self.last = h.detach()`, a hook appending to a list): those hold fake tensors, which would break the
    module's next eager step. Attributes are put back, lists and dicts (one level) refilled in place.
    `numbers_changed` gets each Python number attribute the step changed (`self.calls += 1`): the trace read
    it as a constant, so a step whose arithmetic uses it differs from eager's from the second iteration."""
    saved = []
    for name, m in module.named_modules():
        d = {k: v for k, v in m.__dict__.items() if k not in ("_parameters", "_buffers", "_modules")}
        saved.append((name, m, d, {k: (list(v) if isinstance(v, list) else dict(v)) for k, v in d.items()
                                   if type(v) in (list, dict)}))
    done = False
    try:
        yield
        done = True
    finally:
        if done and tensors_changed is not None:   # `self.scale = self.scale * 0.5`, scale no registered buffer
            tensors_changed.extend(
                (f"{name + '.' if name else ''}{k}", v) for name, m, d, _ in saved for k, v in d.items()
                if isinstance(v, torch.Tensor) and isinstance(m.__dict__.get(k), torch.Tensor)
                and m.__dict__[k] is not v)
        if done and numbers_changed is not None:
            numbers_changed.extend(
                f"{name + '.' if name else ''}{k} ({v!r} -> {m.__dict__[k]!r})" for name, m, d, _ in saved
                for k, v in d.items() if type(v) in (int, float) and type(m.__dict__.get(k)) in (int, float)
                and m.__dict__[k] != v)
        for _, m, d, contents in saved:
            for k in [k for k in m.__dict__ if k not in d and k not in ("_parameters", "_buffers", "_modules")]:
                del m.__dict__[k]
            m.__dict__.update(d)
            for k, c in contents.items():
                if isinstance(c, list):
                    d[k][:] = c
                else:
                    d[k].clear()
                    d[k].update(c)


def _reentrant_checkpoint_in(loss: torch.Tensor) -> bool:
    """Whether the loss's autograd graph holds a reentrant `torch.utils.checkpoint` region (its node's class is
    CheckpointFunctionBackward): that region's parameters are reached only by backward(), never by grad()."""
    seen: set[int] = set()
    todo = [loss.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        if type(fn).__name__ == "CheckpointFunctionBackward":
            return True
        todo.extend(nxt for nxt, _ in fn.next_functions)
    return False


class _Stage:
    """Which part of the user's code is running, for error messages."""

    def __init__(self) -> None:
        self.name = "forward"


def output_tensors(out: Any) -> list[torch.Tensor]:
    """A forward's tensor outputs in the order an inference graph's bindings list them (its pytree's leaves):
    what capture binds, and what an eager reference compares with."""
    return [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]


def mode_layers(module: nn.Module) -> tuple[list[tuple[str, nn.Module]], list[tuple[str, nn.Module]]]:
    """(dropout layers, batch norms with running statistics), named: the layers whose train/eval mode changes
    what a step computes (capture's warnings and refusals, execute's mode check)."""
    drops = [(n, m) for n, m in module.named_modules() if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0]
    norms = [(n, m) for n, m in module.named_modules()
             if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats]
    return drops, norms


def layer_names(layers: list[tuple[str, nn.Module]]) -> list[str]:
    return [f"{name or '(the module)'!r} ({type(m).__name__})" for name, m in layers]


def _cumulative_batch_norms(module: nn.Module) -> list[str]:
    """Training batch norms with momentum=None: their cumulative average reads num_batches_tracked as a
    Python number (`1 / float(num_batches_tracked)`), a value a fake tensor does not have."""
    return layer_names([(n, m) for n, m in mode_layers(module)[1] if m.training and m.momentum is None])


def _value_read_frames(e: BaseException) -> tuple[str, traceback.FrameSummary | None]:
    """Where a traced step read a tensor's value: (", called at FILE:LINE" for the user's last line on the
    stack, or "", and the last frame inside torch.nn's layers, if any), so the refusal points at the line."""
    import os

    torch_dir = os.path.dirname(torch.__file__) + os.sep
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    user = nn_frame = None
    for f in traceback.extract_tb(e.__traceback__):
        path = os.path.abspath(f.filename) if not f.filename.startswith("<") else f.filename
        if path.startswith(torch_dir):
            rel = path[len(torch_dir):]
            if rel.startswith(("nn" + os.sep, "nn/")) and not rel.endswith(os.sep.join(("modules", "module.py"))):
                nn_frame = f
        elif not path.startswith(here):
            user, nn_frame = f, None   # a torch.nn frame counts only below the user's last line
    return (f", called at {_short_path(user.filename)}:{user.lineno}" if user is not None else ""), nn_frame


def _short_path(path: str) -> str:
    """A path as a user reads it in a message: relative to the working folder when under it, torch's files from
    `torch/`."""
    import os

    if path.startswith("<"):
        return path
    torch_root = os.path.dirname(os.path.dirname(torch.__file__)) + os.sep
    if path.startswith(torch_root):
        return path[len(torch_root):]
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("..") else path


def _refuse(e: BaseException, stage: str, module: nn.Module | None = None) -> NoReturn:
    """The user's code failed under capture: one line naming where and why."""
    name = type(e).__name__
    if "DataDependent" in name or "data-dependent" in str(e).lower() or "data dependent" in str(e).lower():
        bns = _cumulative_batch_norms(module) if module is not None else []
        if bns:
            raise HybridError(f"batch norm {', '.join(bns)} has momentum=None: its cumulative average reads "
                              "num_batches_tracked as a Python number, which capture cannot trace "
                              f"({first_line(e)}); give it a momentum (e.g. 0.1) or capture it in eval mode") from None
        user, nn_frame = _value_read_frames(e)
        if nn_frame is not None and nn_frame.name == "_detect_is_causal_mask":
            raise HybridError(f"nn.TransformerEncoder or nn.Transformer{user + ',' if user else ''} compares mask= "
                              "with a causal mask to choose is_causal, reading tensor values, which capture cannot "
                              "trace; pass "
                              "is_causal=True (the mask is causal) or is_causal=False beside mask=") from None
        inside = (f" in {nn_frame.name} ({_short_path(nn_frame.filename)}:{nn_frame.lineno})"
                  if nn_frame is not None else "")
        raise HybridError(f"the module's {stage} depends on tensor values ({first_line(e)}{inside}){user}; "
                          "capture needs control flow and shapes that do not depend on data") from None
    where = {"forward": "the module's forward", "loss": "the loss function", "backward": "the backward pass"}
    if "DynamicOutputShape" in name:    # the kernel's name is the message
        raise HybridError(f"{where[stage]} calls {first_line(e)}, whose output's shape depends on tensor values "
                          "(e.g. x[mask] with a boolean mask, nonzero, masked_select, pack_padded_sequence); "
                          "capture needs shapes that do not depend on data (e.g. torch.where(mask, x, 0))") from None
    if isinstance(e, TypeError) and "generator=_TracedGenerator" in str(e):   # hybrid.capture.rng's stand-in
        raise HybridError(f"{where[stage]} passes generator=torch.default_generator, which capture cannot "
                          "represent; draw without generator= (the same global generator)") from None
    user, _ = _value_read_frames(e)     # the user's last line on the stack: where to look
    raise HybridError(f"{where[stage]} failed under capture: {name}: {first_line(e)}{user}") from None


def _refuse_parameter_hooks(module: nn.Module) -> None:
    """Hooks on a parameter or buffer never fire under capture (it traces fresh fake tensors in their place),
    so the graph would silently differ from eager training: refuse them by name."""
    found = []
    for kind, named in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for name, t in named:
            hooks = [h for h, attr in (("register_hook", "_backward_hooks"),
                                       ("register_post_accumulate_grad_hook", "_post_accumulate_grad_hooks"))
                     if getattr(t, attr, None)]
            if hooks:
                found.append(f"{kind} {name!r} ({', '.join(hooks)})")
    if found:
        raise HybridError(f"gradient hooks on {'; '.join(found)}: hybrid cannot capture hooks on parameters or "
                          "buffers (they would not run); apply the transformation in the loss or the forward "
                          "instead (e.g. a hook on an intermediate tensor or a module backward hook)")


def _refuse_compiled(module: nn.Module) -> None:
    """A torch.compile'd module (an OptimizedModule) cannot be traced by make_fx (FX's own error: "Detected that you
    are using FX to symbolically trace a dynamo-optimized function"): name it and the way out, its original."""
    for name, m in module.named_modules():
        if type(m).__name__ == "OptimizedModule" and hasattr(m, "_orig_mod"):
            what = f"submodule {name!r}" if name else "the module"
            where = f"{name}._orig_mod" if name else "module._orig_mod"
            raise HybridError(f"{what} is torch.compile'd, which capture cannot trace (it traces the step itself): "
                              f"capture the model built without torch.compile (a compiled module's original is its "
                              f"_orig_mod: {where})")


def _refuse_sparse_gradients(module: nn.Module) -> None:
    """A sparse gradient is a sparse tensor, which has no storage for a plan to place: name the layer."""
    for name, m in module.named_modules():
        if isinstance(m, (nn.Embedding, nn.EmbeddingBag)) and m.sparse and m.weight.requires_grad:
            raise HybridError(f"{type(m).__name__} {name or '(the module)'!r} has sparse=True: hybrid captures "
                              "dense tensors only and its gradient would be sparse; build it with sparse=False")


# Kernels that eager PyTorch runs only on operands of one floating dtype (fake tensors do not check).
_SAME_DTYPE_OPS = {torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm, torch.ops.aten.baddbmm,
                   torch.ops.aten.addbmm, torch.ops.aten.mv, torch.ops.aten.addmv, torch.ops.aten.dot,
                   torch.ops.aten.vdot, torch.ops.aten.matmul, torch.ops.aten.linear, torch.ops.aten.convolution,
                   torch.ops.aten._convolution, torch.ops.aten.conv1d, torch.ops.aten.conv2d, torch.ops.aten.conv3d}


# Normalizations whose saved statistics (output positions) the CPU kernels return in the parameters' dtype when
# the input is of lower precision (a bfloat16 input under autocast with float32 weights), where PyTorch's shape
# rules say the input's dtype (CUDA's kernels return float32 there too): op -> (weight's argument, outputs).
_NORM_STATISTICS = {torch.ops.aten.native_layer_norm.default: (2, (1, 2)),
                    torch.ops.aten.native_group_norm.default: (1, (1, 2)),
                    torch.ops.aten.native_batch_norm.default: (1, (1, 2)),
                    torch.ops.aten._native_batch_norm_legit.default: (1, (1, 2)),
                    torch.ops.aten._native_batch_norm_legit_functional.default: (1, (1, 2)),
                    torch.ops.aten._native_batch_norm_legit_no_training.default: (1, (1, 2))}
for _name in ("_batch_norm_with_update", "_batch_norm_with_update_functional"):
    if hasattr(torch.ops.aten, _name):
        _NORM_STATISTICS[getattr(torch.ops.aten, _name).default] = (1, (1, 2))
# ops whose output is their first argument's values, dtype included (how autograd saves the statistics)
_SAME_VALUES = {torch.ops.aten.detach.default, torch.ops.aten.alias.default, torch.ops.aten.view.default,
                torch.ops.aten._unsafe_view.default, torch.ops.aten.clone.default, torch.ops.aten.reshape.default,
                torch.ops.aten.squeeze.dim, torch.ops.aten.squeeze.dims, torch.ops.aten.unsqueeze.default,
                torch.ops.aten.expand.default, torch.ops.aten.t.default, torch.ops.aten.permute.default,
                torch.ops.aten.transpose.int}


def _dtype(n: fx.Node) -> str:
    return str(n.meta["val"].dtype).removeprefix("torch.")


def _as_dtype(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    with v.fake_mode:
        return torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=dtype, device=v.device)


def _norm_statistics_dtypes(gm: fx.GraphModule) -> None:
    """Record a mixed-precision normalization's saved statistics in the dtype its kernel writes them (the
    parameters', float32), not the shape rules' (the input's): else the graph holds a bfloat16 tensor that the
    executor's kernel fills with float32 and the run stops."""
    def mixed(x: object, w: object) -> bool:
        return (isinstance(x, torch.Tensor) and isinstance(w, torch.Tensor) and x.is_floating_point()
                and w.is_floating_point() and x.element_size() < w.element_size())

    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.aten.native_group_norm_backward.default and \
                mixed(*(a.meta.get("val") if isinstance(a, fx.Node) else None for a in (n.args[1], n.args[4]))):
            # its CPU kernel returns the weight's gradient in the input's dtype where the shape rules say the
            # weight's, and eager's autograd casts it: a graph of the rules' dtypes would not run
            raise HybridError(f"the step runs group norm on a {_dtype(n.args[1])} input with "
                              f"{_dtype(n.args[4])} weights (mixed precision, e.g. under autocast), whose "
                              "gradient capture cannot represent; give the norm its input's dtype or cast the "
                              "input to the weights' dtype")
        rule = _NORM_STATISTICS.get(n.target) if n.op == "call_function" else None
        if rule is None or len(n.args) <= rule[0]:
            continue
        x, w = (a.meta.get("val") if isinstance(a, fx.Node) else None for a in (n.args[0], n.args[rule[0]]))
        if not mixed(x, w):
            continue
        vals = list(n.meta["val"])
        for i in rule[1]:
            if isinstance(vals[i], torch.Tensor) and vals[i].dtype == x.dtype:
                vals[i] = _as_dtype(vals[i], w.dtype)
        n.meta["val"] = tuple(vals)
        todo = [u for u in n.users if u.target is operator.getitem and u.args[1] in rule[1]]
        while todo:
            u = todo.pop()
            v = u.meta.get("val")
            if isinstance(v, torch.Tensor) and v.dtype == x.dtype:
                u.meta["val"] = _as_dtype(v, w.dtype)
                todo.extend(d for d in u.users if d.target in _SAME_VALUES and d.args[0] is u)


def _refuse_mixed_dtypes(gm: fx.GraphModule) -> None:
    """A matmul or convolution on operands of different floating dtypes (e.g. float64 weights, float32
    inputs) traces on fake tensors but fails in eager ('mat1 and mat2 must have the same dtype'): refuse it.
    Autocast casts its operands first (the trace holds those casts), so it passes."""
    for n in gm.graph.nodes:
        if n.op != "call_function" or getattr(n.target, "overloadpacket", None) not in _SAME_DTYPE_OPS:
            continue
        vals = [a.meta.get("val") for a in pytree.tree_leaves((n.args, n.kwargs)) if isinstance(a, fx.Node)]
        dts = list(dict.fromkeys(str(v.dtype).removeprefix("torch.") for v in vals
                                 if isinstance(v, torch.Tensor) and v.is_floating_point()))
        if len(dts) > 1:
            raise HybridError(f"the step calls {n.target} on {' and '.join(dts)} tensors, which eager PyTorch "
                              "refuses (e.g. parameters of one dtype, inputs of another); give the module and its "
                              "inputs one dtype, or cast both with dtype='fp32' (hybrid capture --dtype fp32)")


@contextlib.contextmanager
def _quiet_fake_tensors() -> Iterator[None]:
    """PyTorch logs a traceback (19 lines on stderr) for every op whose meta kernel fails on fake tensors, before
    the exception that `_refuse` reports in one line: that logger is silent while capture traces."""
    import logging

    log = logging.getLogger("torch._subclasses.fake_tensor")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


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
    if kwargs is not None and not isinstance(kwargs, dict):
        raise HybridError(f"kwargs must be a dict of the forward's keyword inputs, got {type(kwargs).__name__}")
    kwargs = dict(kwargs or {})
    if training and loss_fn is None and target is not None:
        raise HybridError("a target was given without a loss function: pass loss_fn=... (called as loss_fn(output, target))")
    if training and not any(p.requires_grad for p in module.parameters()):
        raise HybridError("no parameter of the module requires grad, so there is nothing to train; "
                          "capture with optimizer=None for an inference graph")
    _refuse_compiled(module)
    if training:
        _refuse_parameter_hooks(module)
        _refuse_sparse_gradients(module)

    mode = FakeTensorMode(allow_non_fake_inputs=True)

    def fake(t: torch.Tensor, requires_grad: bool = False) -> torch.Tensor:
        d = dtype if (dtype is not None and t.is_floating_point()) else t.dtype
        with mode:
            f = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=d, device="cpu")
        return f.requires_grad_(True) if requires_grad else f

    # named_parameters() lists a tied weight once; functional_call re-ties its other names.
    pnames, fparams, roles = [], [], []
    for name, p in module.named_parameters():
        trainable = training and p.requires_grad
        pnames.append(name)
        # requires_grad as the module's own, also for inference: eager's kernels read it (matmul folds a 3-d
        # input into one mm where the weight requires grad, bmm otherwise: a last-bit difference)
        fparams.append(fake(p, p.requires_grad))
        roles.append(Role(TRAINABLE if trainable else FROZEN, name))
    bnames = [name for name, _ in module.named_buffers()]
    fbuffers = [fake(b) for _, b in module.named_buffers()]
    roles += [Role(BUFFER, n) for n in bnames]
    in_leaves, input_spec = pytree.tree_flatten((args, kwargs))
    in_is_tensor = [isinstance(x, torch.Tensor) for x in in_leaves]
    t_leaves, target_spec = pytree.tree_flatten(target)
    t_is_tensor = [isinstance(x, torch.Tensor) for x in t_leaves]
    # an input that requires grad keeps it: a reentrant checkpoint region fed only by it computes its parameters'
    # gradients only then (with no input requiring grad, eager's region gives them none either)
    finputs = [fake(x, training and x.requires_grad) for x in in_leaves if isinstance(x, torch.Tensor)]
    ftargets = [fake(x) for x in t_leaves if isinstance(x, torch.Tensor)]
    roles += [Role(INPUT, str(i)) for i in range(len(finputs))]
    roles += [Role(TARGET, str(i)) for i in range(len(ftargets))]
    trainable_idx = [i for i, r in enumerate(roles[:len(pnames)]) if r.kind == TRAINABLE]
    stage = _Stage()
    n_outputs = [0]

    def rebuild(leaves: list[Any], is_tensor: list[bool], tensors: list, spec: Any) -> Any:
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

    def step(params: list, buffers: list, inputs: list, targets: list) -> list:
        # The module holds the traced parameters for the whole step, not only its forward: a checkpointed
        # region recomputes in the backward and must read them there too (not the module's own tensors).
        state = {**dict(zip(pnames, params)), **dict(zip(bnames, buffers))}
        host = _host_random_states()
        with _reparametrize_module(module, state, tie_weights=True, strict=False), rng_ops(), \
                marking_recomputation():
            before = _storages(module)
            out = run(params, inputs, targets)
            _refuse_data_rebinds(module, before)
            _reassigned_buffers(module, dict(zip(bnames, buffers)))
        after = _host_random_states()
        drawn = [name for name, before in host.items() if not _same_state(before, after[name])]
        if drawn:
            # the trace holds the numbers drawn once, as constants: eager draws new ones every step
            raise HybridError(f"the step draws from {' and '.join(drawn)}, whose numbers capture would record "
                              "once as constants (eager draws new ones every step); draw with torch instead "
                              "(torch.rand, torch.randint, torch.randperm)")
        return out

    def run(params: list, inputs: list, targets: list) -> list:
        a, kw = rebuild(in_leaves, in_is_tensor, inputs, input_spec)
        stage.name = "forward"
        with torch.set_grad_enabled(training):
            out = module(*a, **kw)
            loss = None
            if loss_fn is not None:
                stage.name = "loss"
                tgt = rebuild(t_leaves, t_is_tensor, targets, target_spec)
                loss = loss_fn(out) if target is None else loss_fn(out, tgt)
            elif training:
                loss = out
            if loss is not None:
                check_loss(loss)
        if not training:
            outs = output_tensors(out)
            n_outputs[0] = len(outs)
            return ([loss] if loss is not None else []) + outs
        stage.name = "backward"
        if not loss.requires_grad:
            raise HybridError("the loss does not depend on any trainable parameter; nothing to train "
                              "(capture with optimizer=None for an inference graph)")
        if accumulate[0] or _reentrant_checkpoint_in(loss):
            # Reentrant checkpointing runs its own backward inside the engine and accumulates into .grad;
            # it refuses torch.autograd.grad, so this step uses backward() as eager training does. Its refusal
            # alone is not enough: where the region's only inputs are tensors that are not parameters (an input
            # made to require grad, as Hugging Face's enable_input_require_grads does), grad() prunes the region
            # without running it, and its parameters would silently get no gradient.
            loss.backward()
            grads = [params[i].grad for i in trainable_idx]
        else:
            grads = list(torch.autograd.grad(loss, [params[i] for i in trainable_idx], allow_unused=True))
        return [loss, *grads]

    accumulate = [False]
    gm = None
    for attempt in range(2):
        changed: list[str] = []
        rebound: list[tuple[str, torch.Tensor]] = []
        try:
            with _module_kept(module, changed, rebound), mode, portable_kernels(), _quiet_fake_tensors():
                if attempt:
                    fparams = [fake(p, p.requires_grad) for p in module.parameters()]
                gm = make_fx(step)(fparams, fbuffers, finputs, ftargets)
            break
        except HybridError:
            raise
        except Exception as e:  # noqa: BLE001 - the user's code can raise anything; report it in one line
            if not attempt and _REENTRANT_GRAD in str(e):
                accumulate[0] = True
                continue
            if (isinstance(e, TypeError) and "positional argument" in str(e) and stage.name == "forward"
                    and len(args) == 1 and isinstance(args[0], list)):   # a list meant as positional inputs
                raise HybridError(f"the module's forward failed under capture: TypeError: {first_line(e)}; its "
                                  f"inputs are one list of {len(args[0])}, passed whole: give them as a tuple to "
                                  "pass them as positional inputs") from None
            _refuse(e, stage.name, module)
    assert gm is not None
    # a rebound tensor attribute matters where the step read its old value, which the graph then holds as a
    # constant; old weight_norm, spectral_norm and prune rebind `weight` from parameters each step, never reading it
    constants = {id(_attr(gm, n.target)) for n in gm.graph.nodes if n.op == "get_attr"}
    rebound_names = [name for name, old in rebound if id(old) in constants]
    _refuse_mixed_dtypes(gm)
    _norm_statistics_dtypes(gm)
    prune_forks(gm)

    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    flat = list(out_node.args[0])
    if training:
        loss_node = flat[0]
        grads: dict[str, fx.Node] = {}
        unused: list[str] = []
        for i, g in zip(trainable_idx, flat[1:]):
            if isinstance(g, fx.Node):
                grads[pnames[i]] = g
            else:
                unused.append(pnames[i])
        return Traced(gm, roles, True, loss_node, grads, unused, numbers_changed=changed,
                      tensors_changed=rebound_names)
    has_loss = len(flat) > n_outputs[0]
    return Traced(gm, roles, False, flat[0] if has_loss else None, {}, [], flat[1:] if has_loss else flat,
                  numbers_changed=changed, tensors_changed=rebound_names)
