"""FLOPs, bytes and roofline times per op, for each device preset and its host CPU (their peak rates:
`hybrid.device`, beside the presets' memory and link).

An op's time is `max(flops / peak, bytes / bandwidth) + launch` (a roofline
with a per-kernel overhead). The peak depends on the op and its dtype:
matmuls and convolutions run on tensor cores where PyTorch uses them by
default, everything else on the vector units. Measured times
(hybrid.capture.profile) replace these estimates op by op.

This module does not import torch: capture feeds it numbers.
"""
from __future__ import annotations

from dataclasses import dataclass

from hybrid.device import HOST_CPUS, HOST_OF, PRESET_COMPUTE, ComputeSpec
from hybrid.errors import HybridError
from hybrid.graph.rerun import UNINITIALIZED_KINDS


@dataclass(frozen=True)
class CostModel:
    """The GPU preset that gives `time_s` and the host CPU that gives `cpu_time_s`."""

    device: str
    gpu: ComputeSpec
    cpu: ComputeSpec

    def to_json(self) -> dict:
        def spec(s: ComputeSpec) -> dict:
            return {"name": s.name, "matrix_flops": s.matrix_flops, "vector_flops": s.vector_flops,
                    "conv_fp32_flops": s.conv_fp32_flops, "mem_bytes_per_s": s.mem_bytes_per_s,
                    "launch_s": s.launch_s, "source": s.source}
        return {"model": "roofline", "device": self.device, "gpu": spec(self.gpu), "cpu": spec(self.cpu)}


def cost_model(device: str) -> CostModel:
    if device not in PRESET_COMPUTE:
        raise HybridError(f"no compute figures for device {device!r}: choose one of {', '.join(PRESET_COMPUTE)}")
    return CostModel(device, PRESET_COMPUTE[device], HOST_CPUS[HOST_OF[device]])


# Ops whose FLOPs run on matrix units, by aten op name.
MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "_scaled_mm", "dot", "mv", "addmv", "vdot"})
CONV_OPS = frozenset({"convolution", "convolution_backward", "_convolution", "cudnn_convolution",
                      "_slow_conv2d_forward", "_slow_conv2d_backward", "convolution_overrideable"})
# Ops that only allocate (no kernel, no time): hybrid.graph.rerun.UNINITIALIZED_KINDS.


def op_class(kind: str) -> str:
    if kind in MATMUL_OPS:
        return "matmul"
    if kind in CONV_OPS:
        return "conv"
    if kind in UNINITIALIZED_KINDS:
        return "alloc"
    return "vector"


def roofline_s(flops: float, nbytes: float, dtype: str, cls: str, spec: ComputeSpec) -> float:
    """max(compute, memory) + launch; allocation-only ops cost nothing."""
    if cls == "alloc":
        return 0.0
    compute = flops / spec.peak(dtype, cls) if flops else 0.0
    return max(compute, nbytes / spec.mem_bytes_per_s) + spec.launch_s


# ---- convolution implementations ------------------------------------------------------------------------------
# Capture offers each 2-D forward convolution alternatives that hybrid.capture.conv_impls runs in PyTorch. The
# times are rooflines of exactly the kernels those functions launch (a GEMM at the matmul peak, data movement at
# the memory bandwidth, one launch each), and the workspace is the largest set of their temporaries alive at
# once, so the trade-off is that of the code the executor runs, not of cuDNN's algorithms (which PyTorch cannot
# pin per call: pytorch/pytorch#49207).
CONV_DEFAULT = "default"          # the library call (aten.convolution), exactly as captured
CONV_UNFOLD = "unfold_gemm"       # im2col (F.unfold) + one GEMM: the unfolded buffer is the workspace
CONV_WINOGRAD = "winograd"        # Winograd F(2x2, 3x3): 2.25x fewer multiplies, transformed tiles as workspace
CONV_CHUNKS = 4                   # winograd_chunk4: the batch in 4 pieces, a quarter of the workspace


@dataclass(frozen=True)
class ConvShape:
    """A 2-D convolution's geometry (NCHW, not transposed), as aten.convolution's arguments give it."""

    n: int
    c_in: int
    h: int
    w: int
    c_out: int
    kh: int
    kw: int
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    itemsize: int
    bias: bool

    @property
    def out_hw(self) -> tuple[int, int]:
        oh = (self.h + 2 * self.padding[0] - self.dilation[0] * (self.kh - 1) - 1) // self.stride[0] + 1
        ow = (self.w + 2 * self.padding[1] - self.dilation[1] * (self.kw - 1) - 1) // self.stride[1] + 1
        return oh, ow

    @property
    def winograd_ok(self) -> bool:
        """F(2x2, 3x3) as implemented: 3x3 kernel, stride 1, no dilation, one group."""
        return (self.kh, self.kw) == (3, 3) and self.stride == (1, 1) and self.dilation == (1, 1) and self.groups == 1

    def tiles(self) -> tuple[int, int]:
        oh, ow = self.out_hw
        return -(-oh // 2), -(-ow // 2)


def _kernel(flops: float, nbytes: float, cls: str, dtype: str, spec: ComputeSpec) -> float:
    return roofline_s(flops, nbytes, dtype, cls, spec)


def unfold_gemm_cost(s: ConvShape, dtype: str, spec: ComputeSpec) -> tuple[float, int]:
    """(time, workspace) of `conv_impls.unfold_gemm`: unfold, one (batched) GEMM, the bias added in place."""
    oh, ow = s.out_hw
    L = oh * ow
    k = s.c_in // s.groups * s.kh * s.kw
    cols = s.n * s.c_in * s.kh * s.kw * L * s.itemsize
    x = s.n * s.c_in * s.h * s.w * s.itemsize
    wb = s.c_out * k * s.itemsize
    out = s.n * s.c_out * L * s.itemsize
    t = _kernel(0, x + cols, "vector", dtype, spec)                                      # unfold
    t += _kernel(2.0 * s.n * s.c_out * k * L, cols + wb + out, "matmul", dtype, spec)    # GEMM
    if s.bias:
        t += _kernel(s.n * s.c_out * L, 2 * out, "vector", dtype, spec)
    return t, cols


def winograd_cost(s: ConvShape, dtype: str, spec: ComputeSpec, chunks: int = 1) -> tuple[float, int]:
    """(time, workspace) of `conv_impls.winograd` on the batch in `chunks` pieces (each writes its slice of the
    output through a temporary). Kernels per piece: pad, tile gather, input transform (a 16x16 GEMM), the 16
    batched GEMMs, output transform (a 4x16 GEMM), the un-tiling copy, crop and bias; plus the filter
    transform once."""
    th, tw = s.tiles()
    oh, ow = s.out_hw
    it = s.itemsize
    t_all = 0.0
    ws = 0
    u = 16 * s.c_out * s.c_in * it
    t_all += _kernel(2.0 * 16 * 9 * s.c_out * s.c_in, s.c_out * s.c_in * 9 * it + u, "matmul", dtype, spec)
    left = s.n
    for k in range(chunks):
        n = left // (chunks - k)
        left -= n
        T = n * th * tw
        x = n * s.c_in * s.h * s.w * it
        xp = n * s.c_in * (2 * th + 2) * (2 * tw + 2) * it
        d16 = 16 * s.c_in * T * it
        m = 16 * s.c_out * T * it
        y4 = 4 * s.c_out * T * it
        out = n * s.c_out * oh * ow * it
        t = _kernel(0, x + xp, "vector", dtype, spec)                                   # pad
        t += _kernel(0, 2 * d16, "vector", dtype, spec)                                 # tiles -> [16, C*T]
        t += _kernel(2.0 * 16 * 16 * s.c_in * T, 2 * d16, "matmul", dtype, spec)        # V = (Bt x Bt) D
        t += _kernel(2.0 * 16 * s.c_out * s.c_in * T, d16 + u + m, "matmul", dtype, spec)   # M = U V
        t += _kernel(2.0 * 4 * 16 * s.c_out * T, m + y4, "matmul", dtype, spec)         # Y = (At x At) M
        t += _kernel(0, 2 * y4, "vector", dtype, spec)                                  # un-tile
        crop = 4 * s.c_out * T * it != out
        if crop:
            t += _kernel(0, 2 * out, "vector", dtype, spec)
        if s.bias:
            t += _kernel(n * s.c_out * oh * ow, 2 * out, "vector", dtype, spec)
        chunked = chunks > 1
        if chunked:
            t += _kernel(0, 2 * out, "vector", dtype, spec)                             # piece -> output slice
        # Temporaries alive together at each step (conv_impls.winograd frees each as soon as it is read); the
        # op's output is not workspace, but a piece's result (chunked) or the uncropped result is.
        peak = max(xp + d16, 2 * d16, d16 + m, m + y4, y4 + (y4 if crop or chunked else 0),
                   (y4 + out) if crop and chunked else 0)
        ws = max(ws, u + peak)
        t_all += t
    return t_all, ws


def conv_impls(s: ConvShape, dtype: str, spec: ComputeSpec, default_time_s: float,
               default_ws: int) -> list[tuple[str, float, int]]:
    """(name, time, workspace) of each implementation conv_impls can run for this shape; the library call first,
    with the op's own figures (so planners that do not choose keep their results)."""
    out = [(CONV_DEFAULT, default_time_s, default_ws)]
    out.append((CONV_UNFOLD, *unfold_gemm_cost(s, dtype, spec)))
    if s.winograd_ok:
        out.append((CONV_WINOGRAD, *winograd_cost(s, dtype, spec)))
        if s.n >= CONV_CHUNKS:
            out.append((f"{CONV_WINOGRAD}_chunk{CONV_CHUNKS}", *winograd_cost(s, dtype, spec, CONV_CHUNKS)))
    return out


def conv_backward_impls(gi: ConvShape, dtype: str, spec: ComputeSpec, default_time_s: float, default_ws: int,
                        rest_time_s: float) -> list[tuple[str, float, int]]:
    """A convolution_backward that computes the input gradient: the library call for everything, or the input
    gradient by Winograd (a stride-1 3x3 convolution of the output gradient with the flipped, transposed
    filters: `gi`) and the rest (weight and bias gradients) by the library call, whose roofline is
    `rest_time_s`."""
    out = [(CONV_DEFAULT, default_time_s, default_ws)]
    if gi.winograd_ok:
        t, ws = winograd_cost(gi, dtype, spec)
        flipped = gi.c_out * gi.c_in * 9 * gi.itemsize    # the flipped, transposed filters
        out.append((CONV_WINOGRAD, rest_time_s + t, ws + flipped))
        if gi.n >= CONV_CHUNKS:
            t, ws = winograd_cost(gi, dtype, spec, CONV_CHUNKS)
            out.append((f"{CONV_WINOGRAD}_chunk{CONV_CHUNKS}", rest_time_s + t, ws + flipped))
    return out
