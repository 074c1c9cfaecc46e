"""FLOPs, bytes and roofline times per op, for each device preset and its host CPU.

An op's time is `max(flops / peak, bytes / bandwidth) + launch` (a roofline
with a per-kernel overhead). The peak depends on the op and its dtype:
matmuls and convolutions run on tensor cores where PyTorch uses them by
default, everything else on the vector units. Measured times
(hybrid.capture.profile) replace these estimates op by op.

This module does not import torch: capture feeds it numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from hybrid.errors import HybridError

T = 1e12
G = 1e9


@dataclass(frozen=True)
class ComputeSpec:
    """Peak rates of one processor. `matrix` is for matmul/convolution, `vector` for the rest."""

    name: str
    matrix_flops: dict[str, float]      # dtype -> FLOP/s for mm, bmm, addmm, convolution
    vector_flops: dict[str, float]      # dtype -> FLOP/s for element-wise ops and reductions
    mem_bytes_per_s: float
    launch_s: float
    conv_fp32_flops: float | None = None  # fp32 convolutions when cuDNN uses TF32 (PyTorch's default)
    source: str = field(default="", compare=False)

    def peak(self, dtype: str, op_class: str) -> float:
        table = self.matrix_flops if op_class in ("matmul", "conv") else self.vector_flops
        if op_class == "conv" and dtype == "float32" and self.conv_fp32_flops:
            return self.conv_fp32_flops
        return table.get(dtype) or table["float32"]


# GPU peaks are the vendors' dense (no sparsity) figures for the SXM parts.
# PyTorch defaults: fp32 matmuls do NOT use TF32 (torch.backends.cuda.matmul
# .allow_tf32 = False since 1.12) but fp32 convolutions do (torch.backends
# .cudnn.allow_tf32 = True), hence `conv_fp32_flops`.
# Launch overhead: 5 us per kernel, an assumed figure for PyTorch eager
# dispatch + CUDA launch (typically quoted as 3-10 us); profiles replace it.
GPU: dict[str, ComputeSpec] = {
    # NVIDIA Tesla V100 datasheet (SXM2): FP32 15.7 TFLOPS, FP64 7.8, Tensor
    # (FP16 in, FP32 accumulate) 125 TFLOPS; non-tensor FP16 is 2x FP32 (31.4,
    # Volta whitepaper); HBM2 900 GB/s. Volta has no BF16: BF16 runs at FP32 rate.
    "v100-16gb": ComputeSpec(
        "V100-SXM2-16GB",
        matrix_flops={"float32": 15.7 * T, "float16": 125 * T, "bfloat16": 15.7 * T, "float64": 7.8 * T},
        vector_flops={"float32": 15.7 * T, "float16": 31.4 * T, "bfloat16": 15.7 * T, "float64": 7.8 * T},
        mem_bytes_per_s=900 * G, launch_s=5e-6,
        source="NVIDIA Tesla V100 datasheet; Volta V100 whitepaper"),
    # NVIDIA A100 Tensor Core GPU datasheet (SXM4): FP32 19.5 TFLOPS, TF32
    # tensor 156, BF16/FP16 tensor 312, FP64 9.7 (tensor 19.5); A100 whitepaper:
    # non-tensor FP16 78, BF16 39 TFLOPS. HBM2: 1555 GB/s (40 GB), HBM2e:
    # 2039 GB/s (80 GB).
    "a100-40gb": ComputeSpec(
        "A100-SXM4-40GB",
        matrix_flops={"float32": 19.5 * T, "float16": 312 * T, "bfloat16": 312 * T, "float64": 19.5 * T},
        vector_flops={"float32": 19.5 * T, "float16": 78 * T, "bfloat16": 39 * T, "float64": 9.7 * T},
        mem_bytes_per_s=1555 * G, launch_s=5e-6, conv_fp32_flops=156 * T,
        source="NVIDIA A100 datasheet; NVIDIA A100 Tensor Core GPU architecture whitepaper"),
    "a100-80gb": ComputeSpec(
        "A100-SXM4-80GB",
        matrix_flops={"float32": 19.5 * T, "float16": 312 * T, "bfloat16": 312 * T, "float64": 19.5 * T},
        vector_flops={"float32": 19.5 * T, "float16": 78 * T, "bfloat16": 39 * T, "float64": 9.7 * T},
        mem_bytes_per_s=2039 * G, launch_s=5e-6, conv_fp32_flops=156 * T,
        source="NVIDIA A100 datasheet; NVIDIA A100 Tensor Core GPU architecture whitepaper"),
    # NVIDIA H100 datasheet (SXM5), dense: FP32 67 TFLOPS, TF32 tensor 494.5,
    # BF16/FP16 tensor 989.5, FP64 34 (tensor 67); H100 whitepaper: non-tensor
    # FP16/BF16 133.8 TFLOPS. HBM3 3.35 TB/s.
    "h100-80gb": ComputeSpec(
        "H100-SXM5-80GB",
        matrix_flops={"float32": 67 * T, "float16": 989.5 * T, "bfloat16": 989.5 * T, "float64": 67 * T},
        vector_flops={"float32": 67 * T, "float16": 133.8 * T, "bfloat16": 133.8 * T, "float64": 34 * T},
        mem_bytes_per_s=3350 * G, launch_s=5e-6, conv_fp32_flops=494.5 * T,
        source="NVIDIA H100 datasheet; NVIDIA H100 Tensor Core GPU architecture whitepaper"),
    # NVIDIA Quadro P2200 datasheet: 1280 CUDA cores, 3.8 TFLOPS FP32, 5 GB GDDR5X at 200 GB/s, PCIe 3.0 x16.
    # Pascal GP106 runs FP16 at 1/64 and FP64 at 1/32 of the FP32 rate (Pascal tuning guide); no tensor cores,
    # no TF32, no BF16 (runs at the FP32 rate).
    "p2200": ComputeSpec(
        "Quadro P2200",
        matrix_flops={"float32": 3.8 * T, "float16": 3.8 * T / 64, "bfloat16": 3.8 * T, "float64": 3.8 * T / 32},
        vector_flops={"float32": 3.8 * T, "float16": 3.8 * T / 64, "bfloat16": 3.8 * T, "float64": 3.8 * T / 32},
        mem_bytes_per_s=200 * G, launch_s=5e-6,
        source="NVIDIA Quadro P2200 datasheet; NVIDIA Pascal tuning guide"),
}

# Host CPUs: the CPUs of NVIDIA's reference servers for each GPU, both sockets (the placement paper's one
# socket for p2200).
# Peak = sockets x cores x base clock x FP32 FLOP/cycle (AVX2 with two FMA
# ports: 32; AVX-512 with two: 64). Half precision runs at the FP32 rate
# (no AMX/AVX512-FP16 assumed). Bandwidth = sockets x channels x MT/s x 8 B.
# Per-op overhead 5 us (eager dispatch), assumed.
CPU: dict[str, ComputeSpec] = {
    # DGX-1: 2x Xeon E5-2698 v4 (20 cores, 2.2 GHz, AVX2), 4x DDR4-2400 per socket.
    "dgx1-host": ComputeSpec(
        "2x Xeon E5-2698 v4",
        matrix_flops={"float32": 2 * 20 * 2.2e9 * 32, "float64": 2 * 20 * 2.2e9 * 16},
        vector_flops={"float32": 2 * 20 * 2.2e9 * 32, "float64": 2 * 20 * 2.2e9 * 16},
        mem_bytes_per_s=2 * 4 * 2400e6 * 8, launch_s=5e-6,
        source="NVIDIA DGX-1 datasheet; Intel ARK Xeon E5-2698 v4"),
    # DGX A100: 2x AMD EPYC 7742 (64 cores, 2.25 GHz, AVX2), 8x DDR4-3200 per socket.
    "dgx-a100-host": ComputeSpec(
        "2x EPYC 7742",
        matrix_flops={"float32": 2 * 64 * 2.25e9 * 32, "float64": 2 * 64 * 2.25e9 * 16},
        vector_flops={"float32": 2 * 64 * 2.25e9 * 32, "float64": 2 * 64 * 2.25e9 * 16},
        mem_bytes_per_s=2 * 8 * 3200e6 * 8, launch_s=5e-6,
        source="NVIDIA DGX A100 datasheet; AMD EPYC 7742 product page"),
    # DGX H100: 2x Xeon Platinum 8480C (56 cores, 2.0 GHz, AVX-512), 8x DDR5-4800 per socket.
    "dgx-h100-host": ComputeSpec(
        "2x Xeon Platinum 8480C",
        matrix_flops={"float32": 2 * 56 * 2.0e9 * 64, "float64": 2 * 56 * 2.0e9 * 32},
        vector_flops={"float32": 2 * 56 * 2.0e9 * 64, "float64": 2 * 56 * 2.0e9 * 32},
        mem_bytes_per_s=2 * 8 * 4800e6 * 8, launch_s=5e-6,
        source="NVIDIA DGX H100 datasheet; Intel ARK Xeon Platinum 8480+"),
    # Seed 004's host: one Xeon Gold 6248R (24 cores, 3.0 GHz base, AVX-512 with two FMA units), 6x DDR4-2933.
    # Peak-rate rooflines flatter CPUs more than GPUs (the paper's measured CPU times are far slower); measured
    # times (`hybrid profile`) replace these.
    "xeon-6248r": ComputeSpec(
        "Xeon Gold 6248R",
        matrix_flops={"float32": 24 * 3.0e9 * 64, "float64": 24 * 3.0e9 * 32},
        vector_flops={"float32": 24 * 3.0e9 * 64, "float64": 24 * 3.0e9 * 32},
        mem_bytes_per_s=6 * 2933e6 * 8, launch_s=5e-6,
        source="Intel ARK Xeon Gold 6248R"),
    # This project's CI and developer machines: 2 cores of an AMD EPYC (lscpu: family 26, i.e. Zen 5; AVX-512
    # and FMA flags; 2 x 512-bit FMA pipes = 64 FP32 FLOP/cycle). The clock is not exposed in the VM: 2.5 GHz
    # assumed; memory bandwidth of a 2-core slice assumed 20 GB/s. Rooflines flatter CPUs: measure instead
    # (`hybrid profile --backend cpu`, results/placement_latency's measured rows).
    "epyc-2c": ComputeSpec(
        "AMD EPYC (Zen 5), 2 cores",
        matrix_flops={"float32": 2 * 2.5e9 * 64, "float64": 2 * 2.5e9 * 32},
        vector_flops={"float32": 2 * 2.5e9 * 64, "float64": 2 * 2.5e9 * 32},
        mem_bytes_per_s=20e9, launch_s=5e-6,
        source="lscpu on this machine (2 cores, AMD EPYC family 26, avx512f, fma); clock and bandwidth assumed"),
}

HOST_OF = {"v100-16gb": "dgx1-host", "a100-40gb": "dgx-a100-host", "a100-80gb": "dgx-a100-host",
           "h100-80gb": "dgx-h100-host", "p2200": "xeon-6248r"}


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
    if device not in GPU:
        raise HybridError(f"no compute figures for device {device!r}: choose one of {', '.join(GPU)}")
    return CostModel(device, GPU[device], CPU[HOST_OF[device]])


# Ops whose FLOPs run on matrix units, by aten op name.
MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm", "addbmm", "_scaled_mm", "dot", "mv", "addmv", "vdot"})
CONV_OPS = frozenset({"convolution", "convolution_backward", "_convolution", "cudnn_convolution",
                      "_slow_conv2d_forward", "_slow_conv2d_backward", "convolution_overrideable"})
# Ops that only allocate: no kernel, no time.
ALLOC_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})


def op_class(kind: str) -> str:
    if kind in MATMUL_OPS:
        return "matmul"
    if kind in CONV_OPS:
        return "conv"
    if kind in ALLOC_OPS:
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
