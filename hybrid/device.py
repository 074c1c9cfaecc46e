"""Device descriptions: memory and the host link, with presets and command-line overrides; each preset's
compute (peak rates of its GPU and host CPU) lives here too, so a preset is defined in one place."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from hybrid.errors import FormatError, HybridError
from hybrid.units import (MAX_ALIGNMENT, MAX_BYTES, MAX_RATE, MAX_SECONDS, MIN_RATE, checked_number, format_bytes,
                          parse_bandwidth, parse_bytes, parse_duration, parse_memory, round_up)

GiB = 2**30
MiB = 2**20
DEFAULT_ALIGNMENT = 512     # a device that states none: CUDA's allocation granularity
EXECUTOR_MIN_ALIGNMENT = 64  # the executor runs plans of at least this: PyTorch's CPU kernels need it to match eager


DEVICE_FIELDS = ("name", "memory_bytes", "h2d_bytes_per_s", "d2h_bytes_per_s", "transfer_latency_s",
                 "alignment_bytes", "reserve_bytes")   # what a device file states and this reader knows


@dataclass(frozen=True)
class Device:
    """What a plan is made for: device memory and the PCIe link to host memory."""

    name: str
    memory_bytes: int
    h2d_bytes_per_s: float
    d2h_bytes_per_s: float
    transfer_latency_s: float = 0.0
    # Every device copy occupies its bytes rounded up to this (docs/formats.md, rule 5): CUDA's caching
    # allocator hands out 512-byte aligned blocks, and PyTorch's CPU kernels take another numeric path on
    # data that is not 64-byte aligned, so the executor never places a tensor at a weaker alignment.
    alignment_bytes: int = DEFAULT_ALIGNMENT
    # Memory the plan leaves alone: the CUDA context, cuBLAS/cuDNN handles and their workspaces.
    reserve_bytes: int = 0
    # Whether the file left alignment_bytes out (it then has DEFAULT_ALIGNMENT): not part of the device (not
    # compared, not written), only so that a size check failing by the rounding can say where the 512 came from.
    alignment_default: bool = field(default=False, compare=False, repr=False)
    # Fields of the file this reader does not know (the format allows them): written back as read, as a plan's,
    # an op's and a tensor's are; not part of the device (not compared).
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        """Every field finite and in range (hybrid.units' limits), however the device was made: a NaN or an
        infinity here would reach every planner and the validator (NaN passes a `<= 0` check)."""
        what = f"device {self.name!r}"
        for key in ("memory_bytes", "reserve_bytes"):   # a whole float (peak * 0.5) kept as one, as a file reads it
            v = getattr(self, key)
            if isinstance(v, float) and v.is_integer():
                object.__setattr__(self, key, int(v))
        checked_number(self.memory_bytes, f"{what}: memory_bytes", lo=1, hi=MAX_BYTES, integer=True)
        checked_number(self.reserve_bytes, f"{what}: reserve_bytes", lo=0, hi=MAX_BYTES, integer=True)
        for key in ("h2d_bytes_per_s", "d2h_bytes_per_s"):
            checked_number(getattr(self, key), f"{what}: {key}", lo=MIN_RATE, hi=MAX_RATE)
        checked_number(self.transfer_latency_s, f"{what}: transfer_latency_s", lo=0.0, hi=MAX_SECONDS)
        a = self.alignment_bytes
        if isinstance(a, bool) or not isinstance(a, int) or a < 1 or a & (a - 1) or a > MAX_ALIGNMENT:
            raise HybridError(f"{what}: alignment_bytes must be a power of two up to {format_bytes(MAX_ALIGNMENT)} "
                              f"(512 for CUDA; at least {EXECUTOR_MIN_ALIGNMENT} for plans the executor runs), "
                              f"got {a!r}")
        if self.reserve_bytes >= self.memory_bytes:
            raise HybridError(f"{what}: the reserve ({format_bytes(self.reserve_bytes)}) leaves nothing "
                              f"of its {format_bytes(self.memory_bytes)}; give more --memory or a smaller --reserve")

    @property
    def usable_bytes(self) -> int:
        """What a plan may fill: the memory less the reserve. Every planner and the validator use this."""
        return int(self.memory_bytes) - int(self.reserve_bytes)

    def occupied(self, nbytes: int) -> int:
        """Bytes a device copy of `nbytes` takes: rounded up to the alignment."""
        return round_up(int(nbytes), self.alignment_bytes)

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        del d["alignment_default"], d["extra"]
        return {**{k: v for k, v in self.extra.items() if k not in d}, **d}

    def default_alignment_hint(self, fits_unrounded: bool = True, flag: bool = False) -> str:
        """Where a size check fails: why the rounding (to a default alignment the device did not state) applies
        and how to drop it; "" unless the device left alignment_bytes out and the sizes fit unrounded
        (`fits_unrounded`). `flag`: the command has --alignment."""
        if not (self.alignment_default and self.alignment_bytes == DEFAULT_ALIGNMENT and fits_unrounded):
            return ""
        return (f"the device does not state alignment_bytes, so it has the default {DEFAULT_ALIGNMENT} bytes "
                "(CUDA's allocation granularity: each copy is rounded up to it, each arena offset is a multiple of "
                "it); for sizes in abstract units, state \"alignment_bytes\": 1 in the device"
                + (" or pass --alignment 1" if flag else ""))

    @staticmethod
    def from_json(d: dict[str, Any], where: str = "device") -> "Device":
        """The device a JSON object describes; every field is checked (type, finite, range) and a bad one is
        refused naming it."""
        if not isinstance(d, dict):
            raise FormatError(f"{where}: expected an object with name, memory_bytes, h2d_bytes_per_s, d2h_bytes_per_s")
        for key in ("memory_bytes", "h2d_bytes_per_s", "d2h_bytes_per_s"):
            if key not in d:
                raise FormatError(f"{where}: missing field {key!r}")
        name = d.get("name", "custom")
        if not isinstance(name, str):
            raise FormatError(f"{where}: field 'name' must be a string, got {name!r}")
        try:
            return Device(
                name=name,
                memory_bytes=checked_number(d["memory_bytes"], f"{where}.memory_bytes", lo=1, hi=MAX_BYTES,
                                            integer=True),
                h2d_bytes_per_s=checked_number(d["h2d_bytes_per_s"], f"{where}.h2d_bytes_per_s", lo=MIN_RATE,
                                               hi=MAX_RATE),
                d2h_bytes_per_s=checked_number(d["d2h_bytes_per_s"], f"{where}.d2h_bytes_per_s", lo=MIN_RATE,
                                               hi=MAX_RATE),
                transfer_latency_s=checked_number(d.get("transfer_latency_s", 0.0), f"{where}.transfer_latency_s",
                                                  lo=0.0, hi=MAX_SECONDS),
                alignment_bytes=_power_of_two(d.get("alignment_bytes", DEFAULT_ALIGNMENT), f"{where}.alignment_bytes"),
                reserve_bytes=checked_number(d.get("reserve_bytes", 0), f"{where}.reserve_bytes", lo=0,
                                             hi=MAX_BYTES, integer=True),
                alignment_default="alignment_bytes" not in d,
                extra={k: v for k, v in d.items() if k not in DEVICE_FIELDS},
            )
        except FormatError:
            raise
        except HybridError as e:   # one the fields check together (the reserve within the memory)
            raise FormatError(str(e) if str(e).startswith(where) else f"{where}: {e}") from None

    def h2d_time(self, nbytes: int) -> float:
        return nbytes / self.h2d_bytes_per_s + self.transfer_latency_s

    def d2h_time(self, nbytes: int) -> float:
        return nbytes / self.d2h_bytes_per_s + self.transfer_latency_s


def parse_alignment(text: str | int, what: str = "--alignment") -> int:
    """An alignment flag as bytes: a power of two up to MAX_ALIGNMENT, the rule a device's alignment_bytes
    follows (docs/formats.md, rule 5)."""
    a = parse_bytes(text, what)
    if a < 1 or a & (a - 1) or a > MAX_ALIGNMENT:
        raise HybridError(f"{what} must be a power of two up to {format_bytes(MAX_ALIGNMENT)} (512 for CUDA), "
                          f"got {text!r}")
    return a


def _power_of_two(value: Any, what: str) -> int:
    a = checked_number(value, what, lo=1, hi=MAX_ALIGNMENT, integer=True)
    if a & (a - 1):
        raise FormatError(f"{what} must be a power of two (512 for CUDA), got {value!r}")
    return a


# Host-link rates are per direction, as sustained by pinned-memory copies, not
# the raw signalling rate:
# - v100-16gb: the SwapAdvisor paper's setting (ASPLOS'20 §6: 16 GB V100,
#   PCIe 3.0 x16, 12 GB/s each way measured).
# - a100-40gb / a100-80gb: PCIe 4.0 x16 is 31.5 GB/s per direction raw
#   (PCI-SIG PCIe 4.0 spec, 16 GT/s x 16 lanes, 128b/130b); NVIDIA's
#   bandwidthTest on A100 reports about 25 GB/s pinned, which we use.
# - h100-80gb: PCIe 5.0 x16 is 63 GB/s per direction raw (PCI-SIG PCIe 5.0,
#   32 GT/s); pinned copies sustain about 50 GB/s (NVIDIA H100 datasheet lists
#   128 GB/s bidirectional for PCIe Gen5), which we use.
# - p2200: the CPU/GPU partitioning paper's card (a Quadro P2200 on PCIe 3.0 x16 beside a Xeon Gold 6248R),
#   15.75 GB/s per direction raw; pinned copies on PCIe 3.0 sustain about 12 GB/s, as for the V100 above.
#   Copies of small tensors cost latency first (the paper measured transfer time linear in bytes, saturating
#   near 150 KB): 10 us per copy, an assumed figure of the usual cudaMemcpy order.
# Memory sizes are the marketed capacities in GiB.
# Reserve: what a plan leaves free on a real card. cudaMemGetInfo reports 0.2-0.6 GiB less total memory than
# the marketed size (V100 16 GB: 15.78 GiB; A100 80 GB: 79.2 GiB; H100 80 GB: 79.1 GiB), and PyTorch's CUDA
# context with cuBLAS/cuDNN handles takes another 0.3-0.5 GiB before the first tensor; 1 GiB covers both.
# The objects below carry no reserve, so `dataclasses.replace(preset(...), memory_bytes=X)` means X; the
# command line (`resolve_device`) applies PRESET_RESERVE where a preset is used whole, as does
# `preset(name, reserve=True)`.
PRESET_RESERVE = 1 * GiB
PRESETS: dict[str, Device] = {
    "v100-16gb": Device("v100-16gb", 16 * GiB, 12e9, 12e9, 0.0),
    "a100-40gb": Device("a100-40gb", 40 * GiB, 25e9, 25e9, 0.0),
    "a100-80gb": Device("a100-80gb", 80 * GiB, 25e9, 25e9, 0.0),
    "h100-80gb": Device("h100-80gb", 80 * GiB, 50e9, 50e9, 0.0),
    "p2200": Device("p2200", 5 * GiB, 12e9, 12e9, 10e-6),
}


# ---- each preset's compute: peak rates for the roofline estimates capture makes (hybrid.capture.costs) ---------
# Every preset above has an entry in PRESET_COMPUTE (its GPU) and in HOST_OF (the host CPU in HOST_CPUS that
# gives `cpu_time_s`); tests/hybrid/test_capture_costs.py checks that no part is missing.
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
PRESET_COMPUTE: dict[str, ComputeSpec] = {
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
HOST_CPUS: dict[str, ComputeSpec] = {
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
    # The CPU/GPU partitioning paper's host: one Xeon Gold 6248R (24 cores, 3.0 GHz base, AVX-512 with two FMA
    # units), 6x DDR4-2933.
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


def preset(name: str, reserve: bool = False) -> Device:
    """A preset card; with `reserve`, PRESET_RESERVE of it is kept free for the CUDA context."""
    try:
        dev = PRESETS[name]
    except KeyError:
        raise HybridError(f"unknown device {name!r}: choose one of {', '.join(PRESETS)} or give --memory/--h2d/--d2h") from None
    return replace(dev, reserve_bytes=PRESET_RESERVE) if reserve else dev


def resolve_device(
    base: Device | None,
    name: str | None = None,
    memory: str | int | None = None,
    h2d: str | float | None = None,
    d2h: str | float | None = None,
    latency: str | float | None = None,
    reserve: str | int | None = None,
    alignment: str | int | None = None,
) -> Device:
    """Start from a preset (or the graph's own device) and apply flag overrides.

    A preset named here (or the default one) is a whole card: PRESET_RESERVE of it is kept free for the CUDA
    context. `--memory` says what the plan may fill, so it sets the reserve to 0 unless `--reserve` is given
    too; `--memory 10GiB` is 10 GiB.
    """
    if name:
        dev = preset(name, reserve=True)
    elif base is not None:
        dev = base
    else:
        dev = preset("v100-16gb", reserve=True)
    changes: dict[str, Any] = {}
    if memory is not None:
        changes["memory_bytes"] = parse_memory(memory, "--memory")
        if changes["memory_bytes"] <= 0:
            raise HybridError(f"--memory must be positive, got {memory!r}")
        changes["reserve_bytes"] = 0
    if reserve is not None:
        changes["reserve_bytes"] = parse_bytes(reserve, "--reserve")
        if changes["reserve_bytes"] < 0:
            raise HybridError(f"--reserve must not be negative, got {reserve!r}")
    if alignment is not None:
        changes["alignment_bytes"] = parse_alignment(alignment)
        changes["alignment_default"] = False
    if h2d is not None:
        changes["h2d_bytes_per_s"] = parse_bandwidth(h2d, "--h2d")
    if d2h is not None:
        changes["d2h_bytes_per_s"] = parse_bandwidth(d2h, "--d2h")
    if latency is not None:
        changes["transfer_latency_s"] = parse_duration(latency, "--latency", short=True)
    if not changes:
        return dev
    mem = changes.get("memory_bytes", dev.memory_bytes)
    res = changes.get("reserve_bytes", dev.reserve_bytes)
    if res >= mem:
        raise HybridError(f"--reserve {format_bytes(res)} leaves nothing of the {format_bytes(mem)} of device memory; "
                          "give a smaller --reserve or more --memory")
    return replace(dev, **changes)
