"""Convolution implementations the executor and the interpreter can run instead of the library call.

Capture lists them in a convolution op's `impls` (names and roofline figures: hybrid.capture.costs.conv_impls);
a plan's compute event names one (`impl`), and `run_impl` runs it on the op's recorded aten.convolution
arguments. `default` is not here: it is the recorded call itself, bitwise equal to eager.

- `unfold_gemm`: im2col (torch.nn.functional.unfold) and one batched GEMM; the unfolded buffer (C*kh*kw x
  OH*OW per image) is the workspace.
- `winograd`: Winograd's minimal filtering F(2x2, 3x3) (Lavin & Gray, CVPR 2016): 4x4 input tiles and the
  3x3 filters are transformed (B^T d B, G g G^T), multiplied as 16 GEMMs, and transformed back (A^T m A):
  2.25x fewer multiplies than the direct convolution, with the transformed tiles as workspace (about 4x the
  input and 4x the output). 3x3 kernels, stride 1, no dilation, one group.
- `winograd_chunkK`: the same on the batch in K pieces, each written into its slice of the output: a K-th of
  the workspace, K times the launches.
- For `convolution_backward`, `winograd` and `winograd_chunkK` compute the input gradient (a stride-1 3x3
  convolution of the output gradient with the flipped, transposed filters) that way, and the weight and bias
  gradients by the library call.

Accuracy (float32, CPU): each agrees with the library call within `RTOL`/`ATOL` (tests/hybrid/test_conv_impls.py),
not bitwise (other summation orders; the transforms round); a whole training step with them agrees with eager
within `STEP_RTOL`/`STEP_ATOL` (tests/milp/test_impls_execute.py).
"""
from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

from hybrid.capture.costs import CONV_DEFAULT, CONV_UNFOLD, CONV_WINOGRAD
from hybrid.errors import HybridError
from hybrid.graph import Op

RTOL = 1e-4   # float32: relative tolerance of an alternative impl against the library call
ATOL = 1e-5   # float32: absolute tolerance (outputs of order 1)
# A training step (loss, gradients, updated parameters and optimizer state) run with such impls against eager:
# the per-op differences pass through the backward and the update, so the step's tolerance is looser.
STEP_RTOL = 1e-3
STEP_ATOL = 1e-5

_BT = [[1.0, 0.0, -1.0, 0.0], [0.0, 1.0, 1.0, 0.0], [0.0, -1.0, 1.0, 0.0], [0.0, 1.0, 0.0, -1.0]]
_G = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]]
_AT = [[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, -1.0, -1.0]]
_MATS: dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def _mats(dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """kron(B^T, B^T) [16,16], kron(G, G) [16,9], kron(A^T, A^T) [4,16]: the 2-D transforms as one matrix each
    (row-major vec(P X Q) = kron(P, Q^T) vec(X))."""
    key = (dtype, device)
    if key not in _MATS:
        bt, g, at = (torch.tensor(m, dtype=torch.float64) for m in (_BT, _G, _AT))
        _MATS[key] = tuple(torch.kron(m, m).to(device=device, dtype=dtype) for m in (bt, g, at))  # type: ignore
    return _MATS[key]


def _pair(v: Any) -> tuple[int, int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return (int(v[0]), int(v[-1]))


def _conv_args(args: list[Any], kwargs: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None,
                                                                 tuple[int, int], tuple[int, int], tuple[int, int],
                                                                 int]:
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups")
    a = dict(zip(names, args))
    a.update(kwargs)
    if a.get("transposed"):
        raise HybridError("conv impls: transposed convolutions run only the default impl")
    x, w = a["input"], a["weight"]
    if x.dim() != 4 or w.dim() != 4:
        raise HybridError(f"conv impls: 2-D convolutions only, got a {x.dim()}-D input")
    return x, w, a.get("bias"), _pair(a["stride"]), _pair(a["padding"]), _pair(a["dilation"]), int(a["groups"])


def unfold_gemm(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: tuple[int, int],
                padding: tuple[int, int], dilation: tuple[int, int], groups: int) -> torch.Tensor:
    n, c, h, wd = x.shape
    co, cg, kh, kw = w.shape
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    cols = F.unfold(x, (kh, kw), dilation=dilation, padding=padding, stride=stride)   # [n, c*kh*kw, L]
    k = cg * kh * kw
    wg = w.reshape(groups, co // groups, k)
    out = torch.matmul(wg, cols.view(n, groups, k, oh * ow))                         # [n, g, co/g, L]
    del cols
    out = out.view(n, co, oh, ow)
    if bias is not None:
        out.add_(bias.view(1, co, 1, 1))
    return out


def winograd(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, stride: tuple[int, int],
             padding: tuple[int, int], dilation: tuple[int, int], groups: int) -> torch.Tensor:
    if w.shape[2:] != (3, 3) or stride != (1, 1) or dilation != (1, 1) or groups != 1:
        raise HybridError("conv impls: winograd needs a 3x3 kernel, stride 1, no dilation and one group")
    n, c, h, wd = x.shape
    co = w.shape[0]
    oh, ow = h + 2 * padding[0] - 2, wd + 2 * padding[1] - 2
    th, tw = -(-oh // 2), -(-ow // 2)
    kb, kg, ka = _mats(x.dtype, x.device)
    u = (kg @ w.reshape(co * c, 9).t()).view(16, co, c)                       # filters, transformed
    xp = F.pad(x, (padding[1], 2 * tw + 2 - wd - padding[1], padding[0], 2 * th + 2 - h - padding[0]))
    tiles = xp.unfold(2, 4, 2).unfold(3, 4, 2)                                  # [n, c, th, tw, 4, 4], a view
    d = tiles.permute(4, 5, 1, 0, 2, 3).reshape(16, c * n * th * tw)           # copy: [16, c*T]
    del xp, tiles
    v = kb @ d                                                                   # input tiles, transformed
    del d
    m = torch.bmm(u, v.view(16, c, n * th * tw))                                 # [16, co, T]
    del v
    y4 = ka @ m.view(16, co * n * th * tw)                                       # [4, co*T]
    del m
    y = y4.view(2, 2, co, n, th, tw).permute(3, 2, 4, 0, 5, 1).reshape(n, co, 2 * th, 2 * tw)
    del y4
    if (2 * th, 2 * tw) != (oh, ow):
        y = y[:, :, :oh, :ow].contiguous()
    if bias is not None:
        y.add_(bias.view(1, co, 1, 1))
    return y


def chunked(fn: Callable[..., torch.Tensor], pieces: int) -> Callable[..., torch.Tensor]:
    """`fn` on the batch in `pieces` slices, each result copied into its slice of one output."""
    def run(x: torch.Tensor, w: torch.Tensor, *rest: Any) -> torch.Tensor:
        n = x.shape[0]
        out: torch.Tensor | None = None
        lo = 0
        for k in range(pieces):
            hi = lo + (n - lo) // (pieces - k)
            part = fn(x[lo:hi], w, *rest)
            if out is None:
                out = part.new_empty((n, *part.shape[1:]))
            out[lo:hi].copy_(part)
            del part
            lo = hi
        assert out is not None
        return out
    return run


def impl_function(name: str) -> Callable[..., torch.Tensor]:
    """The function of a non-default impl name (`winograd_chunk4`: winograd on 4 batch pieces)."""
    base, _, tail = name.partition("_chunk")
    fns = {CONV_UNFOLD: unfold_gemm, CONV_WINOGRAD: winograd}
    if base not in fns or (tail and not tail.isdigit()):
        raise HybridError(f"unknown convolution impl {name!r}: known are {CONV_DEFAULT}, {', '.join(fns)} and "
                          "their _chunkK variants")
    return chunked(fns[base], int(tail)) if tail else fns[base]


def conv_backward(name: str, args: list[Any], kwargs: dict[str, Any]) -> tuple[Any, Any, Any]:
    """aten.convolution_backward with the input gradient computed by impl `name` (a Winograd variant): the
    stride-1 convolution of the output gradient with the flipped, transposed filters, padded by 2 - padding;
    the weight and bias gradients by the library call."""
    names = ("grad_output", "input", "weight", "bias_sizes", "stride", "padding", "dilation", "transposed",
             "output_padding", "groups", "output_mask")
    a = dict(zip(names, args))
    a.update(kwargs)
    mask = list(a["output_mask"])
    gout, w = a["grad_output"], a["weight"]
    p = _pair(a["padding"])
    if (a.get("transposed") or not mask[0] or gout.dim() != 4 or w.shape[2:] != (3, 3) or _pair(a["stride"]) != (1, 1)
            or _pair(a["dilation"]) != (1, 1) or int(a["groups"]) != 1 or max(p) > 2):
        raise HybridError(f"conv impls: {name} computes the input gradient of a 3x3, stride-1, undilated, "
                          "ungrouped convolution with padding <= 2 only")
    wt = w.transpose(0, 1).flip(2, 3)
    gi = impl_function(name)(gout, wt, None, (1, 1), (2 - p[0], 2 - p[1]), (1, 1), 1)
    del wt
    rest = list(args)
    if "output_mask" in kwargs:
        kwargs = {**kwargs, "output_mask": [False, *mask[1:]]}
    else:
        rest[10] = [False, *mask[1:]]
    _, gw, gb = torch.ops.aten.convolution_backward.default(*rest, **kwargs)
    return gi, gw, gb


def run_impl(kind: str, name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """Run impl `name` of a captured op of kind `kind` on its decoded aten arguments."""
    if kind == "convolution_backward":
        return conv_backward(name, args, kwargs)
    if kind != "convolution":
        raise HybridError(f"impl {name!r}: only convolution ops have runnable alternative impls, not {kind!r}")
    x, w, bias, stride, padding, dilation, groups = _conv_args(args, kwargs)
    return impl_function(name)(x, w, bias, stride, padding, dilation, groups)


def is_default(op: Op, name: str | None) -> bool:
    """Whether a compute event naming impl `name` runs the op's recorded call itself (its default impl)."""
    return name is None or not op.impls or name in (CONV_DEFAULT, op.impls[op.default_impl].name)
