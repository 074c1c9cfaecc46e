"""Run a captured op so that its outputs land in the slots the plan gave them.

Each op's recorded aten call (hybrid.capture) is resolved once into a call
mode:
- `out`: the op has a native `out=` overload (same arguments plus keyword-only
  outputs, e.g. `aten.mm.out`, `aten.add.out`, `threshold_backward.grad_input`);
  it writes straight into the output slots, with no extra memory or copy.
- `copy` (the fallback): the functional op runs, PyTorch allocates its result
  outside the pool, and the result is copied into the slot and dropped. This
  is used when there is no out= overload (e.g. `_native_batch_norm_legit_functional`),
  when torch's out= overload is *generated* (it does exactly this internally:
  functional call, then copy; e.g. `convolution.out`, `relu.out`), for random
  ops (so they draw random numbers exactly as the eager op does), and when some
  of the op's outputs are not graph tensors. Its cost is counted per
  iteration: ops, bytes copied, time spent copying, and the largest transient
  (result bytes briefly held outside the pool).
- `slot`: no native out= overload, but an equivalent call that computes the same bits with one writes
  straight into the slots (`SLOT_WRITERS`: relu as `clamp_min.out`, which is how ATen computes relu;
  `div.Scalar` as `div.out` with the number wrapped as ATen wraps it; `embedding` as `index_select.out`, its
  ATen implementation; `embedding_dense_backward` as zero + `index_add_` in index order, as ATen accumulates;
  `ones_like`, `new_zeros` and the like as a fill of the slot; on the CPU, `convolution` and
  `convolution_backward` as the out= overloads of the kernel ATen picks for them there, `_slow_conv2d_forward` and
  `_slow_conv2d_backward`, when it picks that one; on CUDA, a 2-d `convolution` as `cudnn_convolution.out`, a
  native out= overload, and the bias added in place, as `_convolution` runs it with cuDNN). Bitwise equal to
  eager on the CPU (tests/executor/test_exactness.py, tests/executor/test_outside.py).
- `inplace`: the op only updates its inputs (buffer `copy_`s); `optimizer`:
  the per-parameter optimizer step (hybrid.capture.optimizers), in place. Where the step is its gradient's
  last reader (`consumable_grad`), the temporary torch would allocate (Adam's denominator; the gradient with
  weight decay) is computed in the gradient's slot instead, which nothing reads afterwards.

An in-place op on an intermediate tensor (dropout's `bernoulli_` and `div_`,
`relu_`, `+=`) writes a new *version*, a graph tensor of its own (docs/capture.md):
its slot is first filled with the old version's bytes, then the op runs in
place on it. Those bytes are counted too (`version_bytes`).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from hybrid.capture.conv_impls import run_impl
from hybrid.capture.encoding import DecodeContext, decode_value, dtype_from_name, resolve_target
from hybrid.capture.profile import ALLOCATOR_ROUNDING_BYTES
from hybrid.errors import HybridError
from hybrid.graph import Graph, Op
from hybrid.graph.rerun import updates_generator_only

from executor.outside import OutsideStats

OUT, COPY, INPLACE, OPTIMIZER, SLOT = "out", "copy", "inplace", "optimizer", "slot"

# Ops whose out= overload exists but must not be used, with the reason. These losses compute their unreduced
# result into `out` first (resized to the input's shape, then back): a 0-d slot in the pool so grows over the
# bytes after it, and near the pool's end ATen reallocates the pool's storage (torch 2.13, CPU; probed with
# 256 x 64 inputs and 0-d slots at the end of a buffer; nll_loss, the other losses' and the reductions' out=
# overloads keep their slot).
_RESIZES = "its out= overload computes the unreduced loss into the output first, growing it past its slot"
DENY_OUT: dict[str, str] = {f"aten.{name}.default": _RESIZES for name in (
    "mse_loss", "smooth_l1_loss", "huber_loss", "soft_margin_loss", "binary_cross_entropy")}


SlotWriter = Callable[[list, dict, list], None]   # (decoded args, kwargs, output slots): writes the slots
EMBEDDING_INDEX_ADD_MAX = 3000   # ATen's CPU embedding backward accumulates in index order up to this many indices


def _fill(value: float | None) -> SlotWriter:
    """A factory op (`ones_like`, `new_zeros`, `empty_like`, ...): its slot filled (None: left as it is, like
    the uninitialized memory eager's `empty` returns)."""
    def write(args: list, kwargs: dict, slots: list) -> None:
        if value is not None:
            slots[0].fill_(value)
    return write


def _full(position: int) -> SlotWriter:
    """`full_like(self, fill_value)` (position 1), `new_full(self, size, fill_value)` (position 2)."""
    def write(args: list, kwargs: dict, slots: list) -> None:
        slots[0].fill_(kwargs["fill_value"] if "fill_value" in kwargs else args[position])
    return write


def _relu(args: list, kwargs: dict, slots: list) -> None:
    torch.clamp_min(args[0], 0, out=slots[0])   # ATen's relu is clamp_min(self, 0)


def _div_scalar(args: list, kwargs: dict, slots: list) -> None:
    torch.div(args[0], args[1], out=slots[0])   # the number wrapped as div.Scalar wraps it: same kernel, same bits


def _embedding(args: list, kwargs: dict, slots: list) -> None:
    weight, indices = args[0], args[1]
    # ATen: weight.index_select(0, indices.reshape(-1)).view(indices.shape + weight.shape[1:])
    torch.index_select(weight, 0, indices.reshape(-1), out=slots[0].view(-1, *weight.shape[1:]))


def _embedding_backward(args: list, kwargs: dict, slots: list) -> None:
    grad, indices = args[0], args[1]
    padding_idx = int(kwargs.get("padding_idx", args[3] if len(args) > 3 else -1))
    out = slots[0]
    out.zero_()
    out.index_add_(0, indices.reshape(-1), grad.reshape(-1, out.shape[-1]))   # row by row in index order
    if padding_idx >= 0:
        out[padding_idx].zero_()   # eager skips that row's indices: it stays zero


_CONV = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups")
_CONV_BACKWARD = ("grad_output", "input", "weight", "bias_sizes", "stride", "padding", "dilation", "transposed",
                  "output_padding", "groups", "output_mask")


def _named(names: tuple[str, ...], args: list, kwargs: dict) -> dict[str, Any]:
    a = dict(zip(names, args))
    a.update(kwargs)
    return a


def _as_2d(a: dict, *tensors: str) -> tuple[list, list]:
    """A 1-d convolution as ATen runs it on Slow2d (`view1d_as_2d`): the named tensors with a unit height
    inserted (in `a`, in place) and the stride and padding with a leading 1 and 0; a 2-d one as it is."""
    if a["weight"].dim() != 3:
        return list(a["stride"]), list(a["padding"])
    for k in tensors:
        a[k] = a[k].unsqueeze(2)
    return [1, *a["stride"]], [0, *a["padding"]]


def _unit_height(t: torch.Tensor | None, conv1d: bool) -> torch.Tensor | None:
    """A slot of a 1-d convolution seen as the 2-d kernel's (a view of it: the kernel writes the slot)."""
    return t.unsqueeze(2) if conv1d and t is not None and t.dim() == 3 else t


def _conv(args: list, kwargs: dict, slots: list) -> None:
    """aten.convolution where ATen's CPU backend is Slow2d: `_convolution` calls `_slow_conv2d_forward` on the
    contiguous input; its out= overload writes the slot (its column buffer is the kernel's own scratch)."""
    a = _named(_CONV, args, kwargs)
    conv1d = a["weight"].dim() == 3
    stride, padding = _as_2d(a, "input", "weight")
    w = a["weight"]
    torch.ops.aten._slow_conv2d_forward.output(a["input"].contiguous(), w, list(w.shape[2:]), a.get("bias"),
                                               stride, padding, output=_unit_height(slots[0], conv1d))


def _conv_backward(args: list, kwargs: dict, slots: list) -> None:
    """aten.convolution_backward where the CPU backend is Slow2d: `_slow_conv2d_backward`'s out= overload
    computes exactly the gradients whose slot is given (an undefined output is skipped, as the output mask
    skips it). Called below the ADInplaceOrView key, which would bump the version of the undefined outputs."""
    a = _named(_CONV_BACKWARD, args, kwargs)
    conv1d = a["weight"].dim() == 3
    stride, padding = _as_2d(a, "grad_output", "input", "weight")
    w = a["weight"]
    mask = a["output_mask"]
    outs = [_unit_height(s, conv1d) if m else None for s, m in zip(slots, mask)]
    with torch._C._AutoDispatchBelowADInplaceOrView():
        torch.ops.aten._slow_conv2d_backward.grad_input(
            a["grad_output"].contiguous(), a["input"].contiguous(), w, list(w.shape[2:]), stride,
            padding, grad_input=outs[0], grad_weight=outs[1], grad_bias=outs[2])


def _conv_tf32() -> bool:
    """Whether cuDNN convolutions may use TF32, as `_convolution` reads it (`allowTF32CuDNN(conv)`): the conv
    setting of the fp32-precision API (torch 2.9+), else cuDNN's, else the global one; before that API the
    legacy flag. (The legacy `cudnn.allow_tf32` getter raises once conv and RNN settings differ.)"""
    cudnn = torch.backends.cudnn
    conv = getattr(cudnn, "conv", None)
    if conv is None or not hasattr(conv, "fp32_precision"):
        return bool(cudnn.allow_tf32)
    for level in (conv, cudnn, torch.backends):
        precision = getattr(level, "fp32_precision", "none")
        if precision != "none":
            return precision == "tf32"
    try:
        return bool(cudnn.allow_tf32)
    except RuntimeError:
        return False


def cudnn_flags() -> tuple[bool, bool, bool]:
    """(benchmark, deterministic, allow_tf32) as `_convolution` passes them to cuDNN: the context's settings."""
    return (bool(torch.backends.cudnn.benchmark),
            bool(torch.backends.cudnn.deterministic) or torch.are_deterministic_algorithms_enabled(), _conv_tf32())


def _pair(v: Any) -> Any:
    """A 2-d convolution's stride, padding or dilation as ATen expands it (one value for both dimensions)."""
    return [v[0], v[0]] if isinstance(v, (list, tuple)) and len(v) == 1 else v


def _contiguous_format(x: torch.Tensor, w: torch.Tensor, backend: Any) -> bool:
    """Does ATen run this cuDNN convolution in the contiguous (NCHW) format, the slot's?"""
    decide = getattr(torch._C, "_conv_determine_backend_memory_format", None)
    if decide is not None:
        return decide(x, w, backend) == torch.contiguous_format
    return not any(t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous() for t in (x, w))


def _cuda_conv() -> SlotWriter:
    """aten.convolution on CUDA where ATen runs it with cuDNN: `_convolution` calls `cudnn_convolution` on the
    input made contiguous in cuDNN's suggested format and adds the bias in place; `cudnn_convolution.out` is
    ATen's own out= kernel (not a generated copy), so the result is computed in the slot, with the same
    algorithm. Where ATen would pick another backend, or another memory format, for the real tensors (looked
    up once per op and setting of `cudnn.enabled` and determinism), the functional op runs and its result is
    copied into the slot, as the copy fallback does."""
    decided: dict[tuple, bool] = {}

    def write(args: list, kwargs: dict, slots: list) -> None:
        a = _named(_CONV, args, kwargs)
        x, w, b = a["input"], a["weight"], a.get("bias")
        key = (torch.backends.cudnn.enabled, torch.backends.cudnn.deterministic,
               torch.are_deterministic_algorithms_enabled())
        if key not in decided:
            try:
                backend = torch._C._select_conv_backend(x, w, b, a["stride"], a["padding"], a["dilation"],
                                                        a["transposed"], a["output_padding"], a["groups"], None)
                decided[key] = backend.name == "Cudnn" and _contiguous_format(x, w, backend)
            except (RuntimeError, TypeError, AttributeError):   # a torch without this private lookup
                decided[key] = False
        out = slots[0]
        if not decided[key]:
            out.copy_(torch.ops.aten.convolution.default(*args, **kwargs))
            return
        torch.ops.aten.cudnn_convolution.out(x.contiguous(), w, _pair(a["padding"]), _pair(a["stride"]),
                                             _pair(a["dilation"]), a["groups"], *cudnn_flags(), out=out)
        if isinstance(b, torch.Tensor):
            out.add_(b.reshape(1, -1, 1, 1))
    return write


CONV_SLOTS_ENV = "HYBRID_CUDA_CONV_SLOTS"   # "0": CUDA convolutions through the copy fallback


def cuda_conv_slots_on() -> bool:
    """Whether CUDA convolutions may write their slots (`_cuda_conv_writer`): the one reading of CONV_SLOTS_ENV,
    which the GPU benchmarks also report."""
    return os.environ.get(CONV_SLOTS_ENV, "1") != "0"


def _cuda_conv_writer(graph: Graph, args: Any, kwargs: dict, ids: tuple[str | None, ...]) -> SlotWriter | None:
    """A CUDA 2-d convolution writes its slot (`_cuda_conv`) where cuDNN is there and ATen would run it: not
    transposed, one group (a depthwise one has kernels of its own), its output contiguous; else None.
    HYBRID_CUDA_CONV_SLOTS=0 turns it off (the copy fallback: benchmarks/gpu_session.sh sets it where
    benchmarks/gpu_preflight.py finds the writer's bits differ from eager's on the GPU at hand). A fallback at
    run time (ATen picking another backend or format for the real tensors) allocates the result beside the
    pool, which the plan did not count: the GPUs' models (ResNet, VGG, UNet) take cuDNN in NCHW throughout."""
    if not cuda_conv_slots_on():
        return None
    if not (torch.backends.cudnn.is_available() and torch.backends.cudnn.enabled):
        return None
    a = _named(_CONV, args, kwargs)
    w = a.get("weight")
    shape = graph.tensor(w["t"]).extra.get("shape") if isinstance(w, dict) and "t" in w else None
    if (a.get("transposed") is not False or int(a.get("groups", 0)) != 1 or not isinstance(shape, list)
            or len(shape) != 4 or len(ids) != 1 or ids[0] is None
            or not _is_contiguous(graph.tensor(ids[0]), strict=True)):
        return None
    return _cuda_conv()


def _stand_in(t: Any) -> torch.Tensor:
    """A host tensor with graph tensor `t`'s recorded geometry (its memory is never touched)."""
    meta = t.extra
    dt = dtype_from_name(meta["dtype"])
    size = torch.empty((), dtype=dt).element_size()
    flat = torch.empty(max(1, -(-int(t.bytes) // size)), dtype=dt)
    return torch.as_strided(flat, meta["shape"], meta["stride"], int(meta.get("storage_offset", 0)))


def _conv_backend(graph: Graph, args: Any, kwargs: dict, names: tuple[str, ...]) -> tuple[str | None, int]:
    """The backend ATen selects on the CPU for this convolution (its recorded geometry, the kernels the
    executor runs under: hybrid.capture.trace.portable_kernels), or None when the arguments are not plain;
    and the bytes of the contiguous copies the slot writer makes of a non-contiguous input (or output
    gradient), as ATen does too: they are allocated outside the pool."""
    from hybrid.capture.trace import portable_kernels

    refs = [v for v in [*args, *kwargs.values()] if isinstance(v, dict) and "t" in v]
    try:
        env = {r["t"]: _stand_in(graph.tensor(r["t"])) for r in refs}
        a = _named(names, decode_value(args, DecodeContext(env, torch.device("cpu"))),
                   {k: decode_value(v, DecodeContext(env, torch.device("cpu"))) for k, v in kwargs.items()})
        x, w = a["input"], a["weight"]
        if not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor) or x.dim() not in (3, 4):
            return None, 0
        copies = sum(t.numel() * t.element_size() for t in (x, a.get("grad_output"))
                     if isinstance(t, torch.Tensor) and not t.is_contiguous())
        bias = a.get("bias")
        bias_sizes = a.get("bias_sizes")
        with portable_kernels():
            backend = torch._C._select_conv_backend(x, w, bias if isinstance(bias, torch.Tensor) else None,
                                                    a["stride"], a["padding"], a["dilation"], a["transposed"],
                                                    a["output_padding"], a["groups"], bias_sizes)
    except (KeyError, RuntimeError, TypeError, ValueError, HybridError):
        return None, 0
    return backend.name, copies


def _slot_writer(graph: Graph, op: Op, target: str, args: Any, kwargs: dict, ids: tuple[str | None, ...],
                 device: torch.device) -> tuple[SlotWriter | None, int]:
    """The equivalent out= path of a functional op without a native out= overload, or None (copy fallback); and
    the bytes it allocates outside the pool per run (its scratch: contiguous copies of a convolution's input)."""
    if target in ("aten.convolution.default", "aten.convolution_backward.default") and device.type == "cpu":
        return _conv_writer(graph, target, args, kwargs, ids)
    if target == "aten.convolution.default" and device.type == "cuda":
        return _cuda_conv_writer(graph, args, kwargs, ids), 0
    return _slot_writer_fn(graph, op, target, args, kwargs, ids), 0


def _conv_writer(graph: Graph, target: str, args: Any, kwargs: dict, ids: tuple[str | None, ...]
                 ) -> tuple[SlotWriter | None, int]:
    """A CPU convolution (or its backward) writes its slots where ATen runs it as Slow2d on one group, its
    outputs contiguous (and, backward, every graph output asked for by the mask); with its scratch bytes."""
    backward = target == "aten.convolution_backward.default"
    names = _CONV_BACKWARD if backward else _CONV
    a = _named(names, args, kwargs)
    mask = a.get("output_mask", [True])
    if backward and any(t is not None and not m for t, m in zip(ids, mask)):
        return None, 0
    if int(a.get("groups", 0)) != 1 or not all(_is_contiguous(graph.tensor(t)) for t in ids if t is not None):
        return None, 0
    backend, copies = _conv_backend(graph, args, kwargs, names)
    if backend != "Slow2d":
        return None, 0
    return (_conv_backward if backward else _conv), copies


def _slot_writer_fn(graph: Graph, op: Op, target: str, args: Any, kwargs: dict, ids: tuple[str | None, ...]
                    ) -> SlotWriter | None:
    if None in ids:
        return None
    outs = [graph.tensor(t) for t in op.outputs]
    contiguous = len(outs) == 1 and _is_contiguous(outs[0])
    if target in _FILLS:
        return _fill(_FILLS[target])
    if target in ("aten.full_like.default", "aten.new_full.default"):
        return _full(1 if target == "aten.full_like.default" else 2)
    if target == "aten.relu.default":
        return _relu
    if target == "aten.div.Scalar":
        return _div_scalar
    if target == "aten.embedding.default" and contiguous:
        return _embedding
    if (target == "aten.embedding_dense_backward.default" and contiguous
            and outs[0].extra.get("dtype") in ("float32", "float64")):
        # bf16 and fp16 gradients: ATen's CPU kernel rounds otherwise than index_add_ in that dtype (a user's
        # bf16 embedding differed from eager in its last bits); those take the copy fallback, bit for bit
        scale = kwargs.get("scale_grad_by_freq", args[4] if len(args) > 4 else False)
        n_idx = _numel(graph, args[1])
        if scale is False and n_idx is not None and n_idx <= EMBEDDING_INDEX_ADD_MAX:
            return _embedding_backward
    return None


_FILLS: dict[str, float | None] = {
    "aten.ones_like.default": 1, "aten.new_ones.default": 1, "aten.zeros_like.default": 0,
    "aten.new_zeros.default": 0, "aten.empty_like.default": None, "aten.new_empty.default": None,
}


def _is_contiguous(t: Any, strict: bool = False) -> bool:
    """Row-major strides, those of size-1 dimensions aside as torch reads them; `strict`: theirs too
    (`cudnn_convolution.out` takes its memory format from its output's strides, and an N x C x 1 x 1 slot with
    channels-last strides would run channels-last, not eager's algorithm)."""
    shape, stride = t.extra.get("shape"), t.extra.get("stride")
    if shape is None or stride is None or (strict and len(shape) != len(stride)):
        return False
    expect = 1
    for n, st in reversed(list(zip(shape, stride))):
        if (strict or n != 1) and st != expect:
            return False
        expect *= n
    return True


def _numel(graph: Graph, ref: Any) -> int | None:
    """Elements of an encoded graph-tensor argument ({"t": id}), or None."""
    if not isinstance(ref, dict) or "t" not in ref:
        return None
    shape = graph.tensor(ref["t"]).extra.get("shape")
    if shape is None:
        return None
    n = 1
    for d in shape:
        n *= int(d)
    return n


def consumable_grad(graph: Graph, args: Any, readers: dict[str, int], updated: set[str]) -> str | None:
    """The gradient an optimizer op may overwrite as its step's buffer, or None: a graph tensor (or a view of
    all of it) of its parameter's bytes, not persistent, read by no other op (`readers`: tensor id -> ops
    reading it) and updated by none (`updated`). At run time the view must also have the parameter's geometry
    (`OpRunner._run_direct`), and the plan must not copy it to the host (Runtime checks)."""
    if not isinstance(args, list) or len(args) < 2:
        return None
    p, g = args[0], args[1]
    if not (isinstance(g, dict) and "t" in g and isinstance(p, dict) and "t" in p):
        return None
    gt, pt = graph.tensor(g["t"]), graph.tensor(p["t"])
    if gt.persistent or readers.get(gt.id, 0) != 1 or gt.bytes != pt.bytes or gt.id == pt.id or gt.id in updated:
        return None
    return gt.id


@dataclass(frozen=True)
class OpCall:
    op: Op
    fn: Callable
    mode: str
    reason: str                       # why this mode (for the copy fallback: why no out= variant)
    args: Any
    kwargs: dict[str, Any]
    out_fn: Callable | None = None
    out_names: tuple[str, ...] = ()
    out_ids: tuple[str | None, ...] = ()   # returned graph tensors, in return order (None: not a graph tensor)
    copy_bytes: int = 0               # bytes the copy fallback copies per run
    scratch_bytes: int = 0            # mode slot: bytes the writer allocates outside the pool per run
    slot_fn: SlotWriter | None = None  # mode slot: the equivalent call writing the slots
    versions: tuple[tuple[str, str], ...] = ()   # in-place op on an intermediate: (new version, old version)


@dataclass
class OpStats:
    """Per iteration: how ops wrote their outputs and what the copy fallback cost."""

    ops_by_mode: dict[str, int] = field(default_factory=dict)
    copy_bytes: int = 0
    copy_s: float = 0.0
    transient_peak_bytes: int = 0     # largest functional result held outside the pool (copy fallback)
    copy_targets: dict[str, str] = field(default_factory=dict)   # aten target -> reason, for the report
    version_bytes: int = 0            # bytes copied to start new versions of intermediates (in-place ops)
    outside: OutsideStats = field(default_factory=OutsideStats)   # allocated outside the pool (executor.outside)

    def to_json(self) -> dict[str, Any]:
        return {"ops_by_mode": dict(self.ops_by_mode), "copy_bytes": self.copy_bytes, "copy_s": self.copy_s,
                "transient_peak_bytes": self.transient_peak_bytes, "copy_targets": dict(self.copy_targets),
                "version_bytes": self.version_bytes, "outside": self.outside.to_json()}


def _placed(t: torch.Tensor) -> tuple:
    """Where a slot lies and what it spans: its address, shape and strides, and its storage's address and size."""
    st = t.untyped_storage()
    return t.data_ptr(), tuple(t.shape), t.stride(), st.data_ptr(), st.nbytes()


def _writes_arguments(schema: Any) -> bool:
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def out_variant(fn: Any) -> tuple[Any, tuple[str, ...], str]:
    """(out overload, its output argument names, '') or (None, (), why not) for an aten OpOverload."""
    schema = getattr(fn, "_schema", None)
    if schema is None:
        return None, (), "not an aten op"
    name = str(fn)
    if name in DENY_OUT:
        return None, (), DENY_OUT[name]
    if _writes_arguments(schema):
        return None, (), "the op also updates its arguments"
    if torch.Tag.nondeterministic_seeded in fn.tags:
        return None, (), "random op (run as recorded so it draws the same numbers)"
    base = [(a.name, str(a.type), a.kwarg_only) for a in schema.arguments]
    packet = fn.overloadpacket
    generated = False
    for ov in packet.overloads():
        cand = getattr(packet, ov)
        cs = cand._schema
        outs = [a for a in cs.arguments if a.is_out]
        if not outs or len(outs) != len(schema.returns) or any(str(a.type) != "Tensor" for a in outs):
            continue
        if [(a.name, str(a.type), a.kwarg_only) for a in cs.arguments if not a.is_out] != base:
            continue
        if torch.Tag.generated in cand.tags:
            generated = True
            continue
        return cand, tuple(a.name for a in outs), ""
    if generated:
        return None, (), "torch's out= overload is generated (a functional call and a copy, like this fallback)"
    return None, (), "no out= overload"


def compile_op(graph: Graph, op: Op, device: torch.device | None = None) -> OpCall:
    """How `op` writes its outputs on `device` (default the CPU)."""
    rec = op.extra.get("aten")
    if not isinstance(rec, dict) or "target" not in rec:
        raise HybridError(f"op {op.id!r} has no 'aten' record; only graphs from hybrid capture can be executed")
    target = rec["target"]
    fn = resolve_target(target)
    args = rec.get("args", [])
    kwargs = rec.get("kwargs", {})
    versions = tuple((str(new), str(old)) for new, old in rec.get("versions", {}).items())
    for new, old in versions:
        if graph.tensor(new).bytes != graph.tensor(old).bytes:
            raise HybridError(f"op {op.id!r}: version {new!r} and {old!r} differ in size; the graph is malformed")
    if target.startswith("hybrid."):
        return OpCall(op, fn, OPTIMIZER, "optimizer step, in place", args, kwargs, versions=versions)
    ret = rec.get("returns")
    ids: tuple[str | None, ...] = tuple(ret) if isinstance(ret, list) else (ret,)
    if all(t is None for t in ids):
        why = "writes a new version of an intermediate in place" if versions else "updates its inputs in place"
        return OpCall(op, fn, INPLACE, why, args, kwargs, versions=versions)
    out_fn, names, why = out_variant(fn)
    if out_fn is not None and any(t is None for t in ids):
        out_fn, why = None, "some outputs are not graph tensors"
    if out_fn is not None and len(names) != len(ids):
        out_fn, why = None, "out= overload returns a different number of tensors"
    if out_fn is not None:
        return OpCall(op, fn, OUT, "native out= overload", args, kwargs, out_fn, names, ids, versions=versions)
    writer, scratch = _slot_writer(graph, op, target, args, kwargs, ids, device or torch.device("cpu"))
    if writer is not None:
        return OpCall(op, fn, SLOT, f"an equivalent call writes its slot ({why})", args, kwargs, None, (), ids,
                      versions=versions, slot_fn=writer, scratch_bytes=scratch)
    nbytes = sum(graph.tensor(t).bytes for t in ids if t is not None)
    return OpCall(op, fn, COPY, why, args, kwargs, None, (), ids, nbytes, versions)


def copy_workspaces(graph: Graph, device: str | torch.device = "cpu") -> dict[str, int]:
    """Op id -> bytes the executor allocates outside the pool while the op runs on `device`: the results of an op
    it runs through the copy fallback (computed, then copied into their slots), a slot writer's scratch
    (contiguous copies of a convolution's non-contiguous input), and on CUDA, where a profile measured the op
    (`cost.device_peak_bytes`, hybrid.capture.profile), its kernels' scratch too. That is the op's workspace,
    which the graph must state for a plan to count it (`with_copy_workspaces` states it). Ops that allocate
    nothing are absent. The CPU has the most out= paths (its convolutions write their slots); on CUDA a forward
    2-d convolution of one group writes its slot where cuDNN is there (`_cuda_conv_writer`, decided on this
    machine: a graph stated here is run with the same decision), other convolutions and every backward one go
    through the copy fallback."""
    dev = torch.device(device)
    out: dict[str, int] = {}
    for op in graph.ops:
        rec = op.extra.get("aten")
        if not isinstance(rec, dict) or "target" not in rec:
            continue
        call = compile_op(graph, op, dev)
        nbytes = call.copy_bytes if call.mode == COPY else call.scratch_bytes if call.mode == SLOT else 0
        peak = op.extra.get("cost", {}).get("device_peak_bytes") if dev.type == "cuda" else None
        if isinstance(peak, int) and not isinstance(peak, bool):
            # the measured call held its results and its scratch; an op writing its slots holds the scratch only,
            # and an excess that the allocator's rounding of the results explains is no scratch
            results = sum(graph.tensor(t).bytes for t in dict.fromkeys(op.outputs))
            scratch = peak - results if peak - results > ALLOCATOR_ROUNDING_BYTES else 0
            nbytes = max(nbytes, scratch if call.mode in (OUT, SLOT) else peak)
        if nbytes > 0:
            out[op.id] = nbytes
    return out


def with_copy_workspaces(graph: Graph, device: str | torch.device = "cpu") -> Graph:
    """`graph` with each op's workspace raised to what `copy_workspaces` says this executor allocates outside
    its pool while the op runs on `device` (the default implementation's too), so that a plan counts those
    bytes: the plan's memory is then what the executor allocates (`hybrid capture --executor-workspaces`). Not
    applied by default: the result tables' graphs stay as they were until those tables are regenerated."""
    import dataclasses

    ws = copy_workspaces(graph, device)
    if not ws:
        return graph
    ops = []
    for op in graph.ops:
        w = ws.get(op.id, 0)
        if w > op.workspace_bytes:
            default = op.default_impl if op.impls else -1
            impls = tuple(dataclasses.replace(im, workspace_bytes=max(im.workspace_bytes, w)) if i == default else im
                          for i, im in enumerate(op.impls))
            op = dataclasses.replace(op, workspace_bytes=w, impls=impls)
        ops.append(op)
    return Graph(graph.name, list(graph.tensors), ops, graph.device, graph.extra)


def with_copy_costs(graph: Graph, device: str | torch.device = "cpu") -> Graph:
    """`with_copy_workspaces`, and each op this executor runs through the copy fallback on `device` made slower
    by the copy of its results into their slots, where a profile measured it (`cost.device_copy_time_s`,
    hybrid.capture.profile; the op's default implementation's time too): what the simulator then times is what
    the executor runs. The time added is kept as `cost.copy_time_added_s`."""
    import dataclasses

    g = with_copy_workspaces(graph, device)
    dev = torch.device(device)
    ops = []
    for op in g.ops:
        add = op.extra.get("cost", {}).get("device_copy_time_s") if dev.type == "cuda" else None
        rec = op.extra.get("aten")
        if (isinstance(add, (int, float)) and add > 0 and isinstance(rec, dict) and "target" in rec
                and compile_op(g, op, dev).mode == COPY):
            extra = {**op.extra, "cost": {**op.extra.get("cost", {}), "copy_time_added_s": float(add)}}
            default = op.default_impl if op.impls else -1
            impls = tuple(dataclasses.replace(im, time_s=im.time_s + float(add)) if i == default else im
                          for i, im in enumerate(op.impls))
            op = dataclasses.replace(op, time_s=op.time_s + float(add), impls=impls, extra=extra)
        ops.append(op)
    return Graph(g.name, list(g.tensors), ops, g.device, g.extra)


class OpRunner:
    """Decodes and runs compiled ops against `env` (graph tensor id -> device tensor).

    A rerun (a plan's recompute event, `rerun=True`) must reproduce the first run's outputs
    (hybrid.graph.rerun): an op that updates tensors in place (batch norm's running statistics) reruns on
    copies of them, which are then dropped; a random op reruns drawing what its first run drew in this
    iteration (executor.random_state: the generator state recorded before the first run, or the op's own
    seed for the step).
    """

    def __init__(self, graph: Graph, device: torch.device, random: str = "replay",
                 runs: dict[int, int] | None = None) -> None:
        """`random`: where random ops' numbers come from (executor.random_state): "replay" (the global generator,
        replayed for reruns: eager's numbers) or "op_seeds" (graph-safe: per op and step); `runs`: how many times
        each op runs in an iteration (op_seeds on CUDA makes a generator state per run)."""
        from executor.random_state import HostReplay, OpSeeds

        self.graph = graph
        self.device = device
        self.calls = [compile_op(graph, op, device) for op in graph.ops]
        readers: dict[str, int] = {}
        updated: set[str] = set()
        for op in graph.ops:
            for t in set(op.inputs):
                readers[t] = readers.get(t, 0) + 1
            updated.update(op.updates)
        # optimizer op -> the gradient it may overwrite (its last reader); Runtime drops those the plan swaps out
        self.consume_grad: dict[int, str] = {}
        for o, call in enumerate(self.calls):
            if call.mode == OPTIMIZER:
                g = consumable_grad(graph, call.args, readers, updated)
                if g is not None:
                    self.consume_grad[o] = g
        self._checked: set[int] = set()
        self._random = {o for o, op in enumerate(graph.ops) if updates_generator_only(graph, op)}
        if random not in ("replay", "op_seeds"):
            raise HybridError(f"random must be 'replay' or 'op_seeds', got {random!r}")
        self.random: HostReplay | OpSeeds = (
            HostReplay(device) if random == "replay"
            else OpSeeds(device, {o: max(1, (runs or {}).get(o, 1)) for o in self._random}))
        self._step_counters: dict[int, torch.Tensor] = {}   # kept alive: a recorded CUDA graph reads them
        self._recording = False

    @property
    def random_ops(self) -> set[int]:
        """Ops that draw random numbers and may rerun (`self.random` says where their numbers come from)."""
        return self._random

    def device_steps(self, step: int | None) -> None:
        """While a CUDA graph records (`step` = the step it records), optimizer ops that accept one take a
        device counter instead of the host's int, so each replay is the next step; None: host ints again."""
        self._recording = step is not None
        if step is None:
            return
        for o, call in enumerate(self.calls):
            if call.mode == OPTIMIZER and getattr(call.fn, "device_step", False):
                # One counter per op for good: every recorded graph reads and advances the same one, so a
                # second recording must not replace (and free) what the first one's kernels point at.
                c = self._step_counters.get(o)
                if c is None:
                    self._step_counters[o] = torch.full((), float(step - 1), dtype=torch.float32,
                                                        device=self.device)
                else:
                    c.fill_(float(step - 1))

    @contextmanager
    def _run_context(self, o: int, env: dict[str, torch.Tensor], rerun: bool) -> Iterator[dict[str, torch.Tensor]]:
        """The env a run reads: for a rerun, copies of the tensors the op updates; a random op's numbers from
        `self.random` (a rerun draws what the first run drew)."""
        if o not in self._random and not (rerun and self.calls[o].op.updates):
            yield env
            return
        own = env
        if rerun:
            own = dict(env)
            for t in self.calls[o].op.updates:
                if t in own:
                    own[t] = own[t].clone()
        if o not in self._random:
            yield own
            return
        with self.random.run(o, rerun, self.calls[o].op.id):
            yield own

    def _decode(self, call: OpCall, env: dict[str, torch.Tensor]) -> tuple[list, dict]:
        ctx = DecodeContext(env, self.device)
        return decode_value(call.args, ctx), {k: decode_value(v, ctx) for k, v in call.kwargs.items()}

    def run_direct(self, o: int, env: dict[str, torch.Tensor], step: int, rerun: bool = False) -> None:
        """Modes out, slot, inplace and optimizer: nothing to copy afterwards."""
        with self._run_context(o, env, rerun) as env:
            self._run_direct(o, env, step)

    def _run_direct(self, o: int, env: dict[str, torch.Tensor], step: int) -> None:
        call = self.calls[o]
        args, kwargs = self._decode(call, env)
        if call.mode == OPTIMIZER:
            p, g, gid = args[0], args[1], self.consume_grad.get(o)
            work = g if (gid is not None and g.shape == p.shape and g.stride() == p.stride() and g.dtype == p.dtype
                         and g.numel() * g.element_size() == self.graph.tensor(gid).bytes) else None
            call.fn(*args, step=self._step_counters[o] if self._recording and o in self._step_counters else step,
                    work=work, **kwargs)
        elif call.mode == INPLACE:
            call.fn(*args, **kwargs)
        elif call.mode == SLOT:
            call.slot_fn(args, kwargs, [None if t is None else env[t] for t in call.out_ids])  # type: ignore[misc]
        else:
            slots = [env[t] for t in call.out_ids]  # type: ignore[index]
            first = o not in self._checked
            if first:    # an out= kernel that resizes its output moves or outgrows the pool: caught on its first call
                before = [_placed(s) for s in slots]
            res = call.out_fn(*args, **kwargs, **dict(zip(call.out_names, slots)))  # type: ignore[misc]
            if first:
                got = res if isinstance(res, (tuple, list)) else (res,)
                for t, r, s, b in zip(call.out_ids, got, slots, before):
                    if not isinstance(r, torch.Tensor) or r.data_ptr() != s.data_ptr() or _placed(s) != b:
                        raise HybridError(f"op {call.op.id!r}: {call.out_fn} did not write {t!r} into its slot "
                                          "as it was (resized or moved); please report it (executor.ops.DENY_OUT)")
                self._checked.add(o)

    def compute(self, o: int, env: dict[str, torch.Tensor], rerun: bool = False,
                impl: str | None = None) -> list[torch.Tensor | None]:
        """Copy fallback, part 1: the functional op's results (allocated outside the pool). A non-default `impl`
        (hybrid.capture.conv_impls) always runs this way: its result and its workspace live outside the pool."""
        call = self.calls[o]
        with self._run_context(o, env, rerun) as env:
            args, kwargs = self._decode(call, env)
            if impl is None:
                res = call.fn(*args, **kwargs)
            else:
                res = run_impl(call.op.kind, impl, args, kwargs)
        got = list(res) if isinstance(res, (tuple, list)) else [res]
        if len(got) != len(call.out_ids):
            raise HybridError(f"op {call.op.id!r} returned {len(got)} values, the graph records {len(call.out_ids)}")
        return got

    def store(self, o: int, env: dict[str, torch.Tensor], results: list[torch.Tensor | None]) -> None:
        """Copy fallback, part 2: results into their slots (same bytes: the slot has the recorded strides)."""
        call = self.calls[o]
        for t, r in zip(call.out_ids, results):
            if t is None:
                continue
            slot = env[t]
            if not isinstance(r, torch.Tensor) or r.shape != slot.shape or r.dtype != slot.dtype:
                what = f"{r.dtype} {list(r.shape)}" if isinstance(r, torch.Tensor) else type(r).__name__
                raise HybridError(f"op {call.op.id!r} produced {t!r} as {what}, but the graph records "
                                  f"{slot.dtype} {list(slot.shape)}")
            slot.copy_(r)
