"""JSON encoding of aten call arguments, so a captured op can be replayed (docs/capture.md).

A tensor argument is a reference to the graph tensor that owns its storage,
plus the chain of view ops that turns the owner into the argument:
`{"t": "relu_3", "view": [{"op": "aten.view.default", "args": [[4, 512]]}]}`.
Other values are plain JSON, except a few torch types and non-finite floats,
which are one-key objects (`{"dtype": "float32"}`, `{"float": "inf"}`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import torch

from hybrid.errors import HybridError

Ref = tuple[str, tuple[dict[str, Any], ...]]  # (owner tensor id, view chain)

_DTYPES: dict[str, torch.dtype] = {
    str(d).removeprefix("torch."): d
    for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16, torch.int32,
              torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128)
}
_LAYOUTS = {"strided": torch.strided, "sparse_coo": torch.sparse_coo}
_MEMORY_FORMATS = {"contiguous_format": torch.contiguous_format, "channels_last": torch.channels_last,
                   "channels_last_3d": torch.channels_last_3d, "preserve_format": torch.preserve_format}

DTYPE_ALIASES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
                 "fp16": torch.float16, "float16": torch.float16, "half": torch.float16, "fp64": torch.float64,
                 "float64": torch.float64}


def dtype_name(d: torch.dtype) -> str:
    return str(d).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise HybridError(f"unknown dtype {name!r} in graph; expected one of {', '.join(_DTYPES)}") from None


def parse_dtype(text: str | torch.dtype | None) -> torch.dtype | None:
    """'bf16' / 'float16' / torch.float32 -> torch dtype; None stays None."""
    if text is None or isinstance(text, torch.dtype):
        return text
    key = str(text).strip().lower()
    if key not in DTYPE_ALIASES:
        raise HybridError(f"unknown dtype {text!r}: use fp32, bf16 or fp16")
    return DTYPE_ALIASES[key]


def target_name(target: Any) -> str:
    """'aten.mm.default' for an OpOverload."""
    return str(target)


_TARGET_CACHE: dict[str, Callable] = {}


def resolve_target(name: str) -> Callable:
    """The callable for 'aten.mm.default' (any torch.ops namespace) or a hybrid optimizer op."""
    fn = _TARGET_CACHE.get(name)
    if fn is not None:
        return fn
    if name.startswith("hybrid."):
        from hybrid.capture.optimizers import replay_function

        fn = replay_function(name)
    else:
        parts = name.split(".")
        if parts[0] == "hybrid_rng":
            import hybrid.capture.rng  # noqa: F401 - defines the generator-state ops
        if len(parts) != 3:
            raise HybridError(f"cannot replay op target {name!r}: expected namespace.op.overload")
        try:
            fn = getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
        except (AttributeError, RuntimeError):
            raise HybridError(f"cannot replay op target {name!r}: this torch ({torch.__version__}) has no such op") from None
    _TARGET_CACHE[name] = fn
    return fn


# ---- encoding ------------------------------------------------------------------

def encode_ref(ref: Ref) -> dict[str, Any]:
    tid, chain = ref
    return {"t": tid, "view": list(chain)} if chain else {"t": tid}


def encode_value(v: Any, ref_of: Callable[[Any], Ref | None]) -> Any:
    """Encode one argument; `ref_of(v)` gives the tensor reference of an FX node (None if it is not one)."""
    ref = ref_of(v)
    if ref is not None:
        return encode_ref(ref)
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else {"float": repr(v)}
    if isinstance(v, complex):
        return {"complex": [v.real, v.imag]}
    if isinstance(v, (list, tuple)):
        return [encode_value(x, ref_of) for x in v]
    if isinstance(v, torch.dtype):
        return {"dtype": dtype_name(v)}
    if isinstance(v, torch.device):
        return {"device": v.type}
    if isinstance(v, torch.layout):
        return {"layout": str(v).removeprefix("torch.")}
    if isinstance(v, torch.memory_format):
        return {"memory_format": str(v).removeprefix("torch.")}
    raise HybridError(f"cannot record argument of type {type(v).__name__} ({v!r}) for replay")


# ---- decoding ------------------------------------------------------------------

@dataclass
class DecodeContext:
    """What decoding needs besides the graph: tensors by id and the device to run on."""

    env: dict[str, torch.Tensor]
    device: torch.device


AS_STRIDED = "aten.as_strided.default"
OFFSET_FROM_ROOT = "offset_from_root"   # an as_strided step's storage offset counts from the chain's root tensor


def apply_chain(base: torch.Tensor, chain: list[dict[str, Any]], ctx: DecodeContext) -> torch.Tensor:
    x = base
    for step in chain:
        fn = resolve_target(step["op"])
        args = [decode_value(a, ctx) for a in step.get("args", ())]
        kwargs = {k: decode_value(a, ctx) for k, a in step.get("kwargs", {}).items()}
        if step.get(OFFSET_FROM_ROOT):   # where the root sits in this run's storage (the executor's pool)
            if len(args) > 2:
                args[2] += base.storage_offset()
            else:
                kwargs["storage_offset"] += base.storage_offset()
        x = fn(x, *args, **kwargs)
        if "index" in step:
            x = x[step["index"]]
    return x


def decode_value(v: Any, ctx: DecodeContext) -> Any:
    if isinstance(v, list):
        return [decode_value(x, ctx) for x in v]
    if not isinstance(v, dict):
        return v
    if "t" in v:
        try:
            base = ctx.env[v["t"]]
        except KeyError:
            raise HybridError(f"tensor {v['t']!r} is not available (not yet produced, or freed)") from None
        chain = v.get("view")
        return apply_chain(base, chain, ctx) if chain else base
    if "dtype" in v:
        return dtype_from_name(v["dtype"])
    if "device" in v:
        return ctx.device
    if "float" in v:
        return float(v["float"])
    if "layout" in v:
        return _LAYOUTS[v["layout"]]
    if "memory_format" in v:
        return _MEMORY_FORMATS[v["memory_format"]]
    if "complex" in v:
        return complex(*v["complex"])
    raise HybridError(f"cannot decode recorded argument {v!r}")


def tensor_ids(v: Any) -> list[str]:
    """Ids of the tensors an encoded argument refers to, in order (duplicates kept)."""
    if isinstance(v, list):
        return [t for x in v for t in tensor_ids(x)]
    if isinstance(v, dict):
        if "t" in v:
            return [v["t"]]
    return []
