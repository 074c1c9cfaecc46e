"""A minute's checks before a GPU session's benchmarks: what the executor does only on CUDA, against eager on
the GPU at hand, so that a stage does not spend the session's device time on a path that is wrong there.

- A 2-d convolution writes its slot through `cudnn_convolution.out` (executor.ops `_cuda_conv`): bitwise equal
  to eager's `aten.convolution` over a few shapes, and no result-sized block requested beside the slot (the
  allocator's unrounded counter, so a small result shows too). Where it differs, exit 1:
  benchmarks/gpu_session.sh then runs its stages with HYBRID_CUDA_CONV_SLOTS=0 (the copy fallback, as before).
- What cuBLAS keeps for the executor's compute stream (executor.streams.kernel_state_bytes), printed.
- The host link as the plans will be timed (CUDA graph replays), beside one copy timed from the host, printed.
Without CUDA it says so and exits 0 (the CPU smoke test of gpu_session.sh).

    python -m benchmarks.gpu_preflight
"""
from __future__ import annotations

import sys
from typing import Callable

import torch


MiB = 1 << 20
# (batch, in channels, size, out channels, kernel, stride, padding, dilation, bias): ResNet's stem, a 3x3, a
# 1x1 with stride 2 (the downsample), a 3x3 with bias (VGG's), a dilated 3x3
SHAPES = [(8, 3, 64, 64, 7, 2, 3, 1, False), (8, 64, 28, 64, 3, 1, 1, 1, False), (8, 64, 28, 128, 1, 2, 0, 1, False),
          (4, 32, 20, 48, 3, 1, 1, 1, True), (4, 16, 24, 16, 3, 1, 2, 2, False)]


def _pool_slot(like: torch.Tensor) -> torch.Tensor:
    """A slot as the executor's pool makes one: a float view into a byte buffer, 64 bytes in."""
    nbytes = like.numel() * like.element_size()
    raw = torch.empty(nbytes + 128, dtype=torch.uint8, device=like.device)
    return raw[64:64 + nbytes].view(like.dtype).view(like.shape)


def _requested(dev: torch.device, key: str) -> int:
    """Bytes the allocator was asked for (`requested_bytes`: not rounded to its blocks, so a small result copied
    beside the slot shows), else its allocated bytes where this torch has no such counter."""
    stats = torch.cuda.memory_stats(dev)
    return int(stats.get(f"requested_bytes.all.{key}", stats.get(f"allocated_bytes.all.{key}", 0)))


def _peak_above(dev: torch.device, fn: Callable[[], object]) -> int:
    """The most bytes `fn` holds on `dev` above what was held before it."""
    torch.cuda.synchronize(dev)
    before = _requested(dev, "current")
    torch.cuda.reset_peak_memory_stats(dev)
    res = fn()
    torch.cuda.synchronize(dev)
    del res
    return _requested(dev, "peak") - before


def conv_slots(dev: torch.device) -> list[str]:
    """The slot writer against eager on `dev`: one line per failed shape (none: it holds)."""
    from executor.ops import _cuda_conv

    failed = []
    gen = torch.Generator(device=dev).manual_seed(0)
    for n, c, hw, co, k, stride, pad, dil, bias in SHAPES:
        x = torch.randn(n, c, hw, hw, device=dev, generator=gen)
        w = torch.randn(co, c, k, k, device=dev, generator=gen)
        b = torch.randn(co, device=dev, generator=gen) if bias else None
        args = [x, w, b, [stride] * 2, [pad] * 2, [dil] * 2, False, [0, 0], 1]
        ref = torch.ops.aten.convolution.default(*args)
        shape = f"{n}x{c}x{hw}x{hw} -> {co} k{k} s{stride} d{dil}{' bias' if bias else ''}"
        if not torch.equal(torch.ops.aten.convolution.default(*args), ref):
            print(f"  conv slot {shape}: eager itself differs run to run here (a nondeterministic algorithm): "
                  "not compared")
            continue
        slot = _pool_slot(ref).fill_(7.0)
        write = _cuda_conv()
        write(args, {}, [slot])                    # first run: the backend is looked up
        eager = _peak_above(dev, lambda: torch.ops.aten.convolution.default(*args))   # result + workspace
        slot.fill_(7.0)
        beside = _peak_above(dev, lambda: write(args, {}, [slot]))                    # workspace only
        result = ref.numel() * ref.element_size()
        if not torch.equal(slot, ref):
            failed.append(f"{shape}: differs from eager by {(slot - ref).abs().max().item():.3g}")
        elif beside > eager - result // 2:       # a copy holds the whole result beside the slot
            failed.append(f"{shape}: {beside / MiB:.2f} MiB allocated beside the slot where eager allocates "
                          f"{eager / MiB:.2f} MiB with its {result / MiB:.2f} MiB result: written through a copy")
        else:
            print(f"  conv slot {shape}: bitwise equal to eager, {beside / MiB:.2f} MiB beside the slot (eager: "
                  f"{eager / MiB:.2f} MiB with its result)")
    return failed


def link_line(dev: torch.device) -> str:
    """The host link as the plans' device will state it (benchmarks.executor_gpu.measure_link: CUDA graph
    replays), beside one copy timed from the host as before 2026-11-30; never fails the preflight."""
    try:
        from benchmarks.executor_gpu import host_timed_s, measure_link

        g = measure_link(dev)
        if "latency_h2d_s" not in g:
            return f"host link: {g['method']} (the CUDA graph timing failed: its log line above)"
        host = torch.empty(4096, dtype=torch.uint8, pin_memory=True)
        d = torch.empty(4096, dtype=torch.uint8, device=dev)
        one = host_timed_s(dev, lambda: d.copy_(host, non_blocking=True), 5)
        gb = 1e9
        return (f"host link: h2d {g['h2d_bytes_per_s'] / gb:.1f} GB/s both ways at once ({g['h2d_alone_bytes_per_s'] / gb:.1f} "
                f"alone), d2h {g['d2h_bytes_per_s'] / gb:.1f} ({g['d2h_alone_bytes_per_s'] / gb:.1f}), latency "
                f"{g['latency_h2d_s'] * 1e6:.2f} / {g['latency_d2h_s'] * 1e6:.2f} us per copy replayed "
                f"(one copy timed from the host: {one * 1e6:.1f} us)")
    except Exception as e:  # noqa: BLE001 - a line of the log, not a check
        return f"host link: not measured ({type(e).__name__}: {str(e)[:160]})"


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_preflight: no CUDA device: skipped")
        return 0
    from executor.streams import kernel_state_bytes

    dev = torch.device("cuda", torch.cuda.current_device())
    print(f"gpu_preflight: torch {torch.__version__}, {torch.cuda.get_device_name(dev)}, cuDNN "
          f"{torch.backends.cudnn.version()}")
    print(f"  cuBLAS keeps {kernel_state_bytes(dev) / MiB:.1f} MiB for the executor's compute stream")
    print(f"  {link_line(dev)}")
    failed = conv_slots(dev)
    for line in failed:
        print(f"  FAILED conv slot {line}")
    if failed:
        print("gpu_preflight: the CUDA convolution slot writer is not eager's here: run with "
              "HYBRID_CUDA_CONV_SLOTS=0")
        return 1
    print("gpu_preflight: ok")
    return 0


def _main() -> int:
    """`main`, with a crash told apart from a writer that is not eager's (exit 2, the traceback printed)."""
    try:
        return main()
    except Exception:  # noqa: BLE001 - the session goes on with the copy fallback either way; the log says which
        import traceback

        traceback.print_exc()
        print("gpu_preflight: crashed (above)")
        return 2


if __name__ == "__main__":
    sys.exit(_main())
