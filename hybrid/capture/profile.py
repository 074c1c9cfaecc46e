"""Measured op times: run each distinct captured op on real tensors and cache its time in a profile file.

Ops are keyed by a signature (the aten target, and every argument with
tensors replaced by their dtype, shape, strides and view chain), so the
hundreds of identical ops of a deep network are measured once, and a profile
made for one graph serves every graph that shares ops with it. Times are
medians of `repeat` runs after `warmup` runs: CUDA events on a GPU, wall
time on the CPU. Inputs are random floats and zero integers (valid indices).

File format `hybrid-profile/1`:
    {"format": "hybrid-profile/1", "backend": "cuda" | "cpu", "device_name": "...",
     "torch": "2.13.0", "entries": {SIGNATURE: {"time_s": 1.2e-4, "samples": 5, "target": "aten.mm.default"}}}
A profile with backend "cuda" supplies `time_s`; one with backend "cpu" supplies `cpu_time_s`. A cuda entry
may also hold `peak_bytes`: the most device bytes one run held above what was allocated before it (its results
and its kernels' scratch), and `copy_time_s`: the seconds to copy its fresh results once, which `apply_profile`
keeps as the op's `cost.device_peak_bytes` and `cost.device_copy_time_s` (executor.ops.with_copy_costs states
them where the executor runs the op through its copy fallback).
An op with alternative implementations (`impls`, hybrid.capture.conv_impls) has one more entry per
non-default impl, keyed `SIGNATURE#impl=NAME`: a cuda profile sets those impls' `time_s` (the default impl
takes the op's own measured time, so it stays the op's default); a cpu profile records them in the op's
`cost.cpu_impl_time_s`.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from hybrid.errors import FormatError, HybridError
from hybrid.graph import Graph, Op

PROFILE_FORMAT = "hybrid-profile/1"


@dataclass
class Profile:
    backend: str
    device_name: str
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    torch: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"format": PROFILE_FORMAT, "backend": self.backend, "device_name": self.device_name,
                "torch": self.torch, "entries": self.entries}

    def save(self, path: str | Path) -> None:
        from hybrid.files import write_whole

        write_whole(path, json.dumps(self.to_json(), indent=1, sort_keys=True))

    @staticmethod
    def load(path: str | Path) -> "Profile":
        p = Path(path)
        from hybrid.jsonio import loads_strict

        try:
            data = p.read_bytes()
        except OSError as e:
            raise FormatError(f"cannot read profile file {str(p)!r}: {e.strerror}") from None
        d = loads_strict(data, str(p))   # finite numbers only: a NaN time_s passes `t < 0`
        if not isinstance(d, dict) or d.get("format") != PROFILE_FORMAT:
            raise FormatError(f"{p}: field 'format' must be {PROFILE_FORMAT!r} (is this a profile file?)")
        if d.get("backend") not in ("cuda", "cpu") or not isinstance(d.get("entries"), dict):
            raise FormatError(f"{p}: a profile needs 'backend' (cuda or cpu) and an 'entries' object")
        for sig, e in d["entries"].items():
            t = e.get("time_s") if isinstance(e, dict) else None
            if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0:
                raise FormatError(f"{p}: entry for {e.get('target', sig[:60]) if isinstance(e, dict) else sig[:60]!r} "
                                  "needs a non-negative 'time_s'")
            pk = e.get("peak_bytes", 0)
            if isinstance(pk, bool) or not isinstance(pk, int) or pk < 0:
                raise FormatError(f"{p}: entry for {e.get('target', sig[:60])!r}: 'peak_bytes' must be a "
                                  "non-negative integer")
            ct = e.get("copy_time_s", 0.0)
            if isinstance(ct, bool) or not isinstance(ct, (int, float)) or not ct >= 0:
                raise FormatError(f"{p}: entry for {e.get('target', sig[:60])!r}: 'copy_time_s' must be a "
                                  "non-negative number")
        return Profile(d["backend"], str(d.get("device_name", "")), d["entries"], str(d.get("torch", "")))


def op_signature(graph: Graph, op: Op) -> str | None:
    """A key that two ops share exactly when they run the same kernel on same-shaped data."""
    rec = op.extra.get("aten")
    if not isinstance(rec, dict):
        return None

    def sub(v: Any) -> Any:
        if isinstance(v, list):
            return [sub(x) for x in v]
        if isinstance(v, dict):
            if "t" in v:
                m = graph.tensor(v["t"]).extra
                return {"dtype": m.get("dtype"), "shape": m.get("shape"), "stride": m.get("stride"),
                        "offset": m.get("storage_offset"), "view": v.get("view", [])}
            return {k: sub(x) for k, x in v.items()}
        return v

    return json.dumps({"target": rec["target"], "args": sub(rec.get("args", [])),
                       "kwargs": sub(rec.get("kwargs", {}))}, sort_keys=True, separators=(",", ":"))


@dataclass
class MeasureReport:
    measured: int = 0         # distinct signatures measured now (each implementation of an op its own)
    reused: int = 0           # distinct signatures already in the profile, counted the same way
    skipped: list[str] = field(default_factory=list)  # op ids not measured (too large, failed, out of time)
    reasons: dict[str, str] = field(default_factory=dict)   # op id -> why it alone was skipped
    warnings: list[str] = field(default_factory=list)  # why the times measured may not be the machine's own
    stopped: str | None = None   # "time limit", "Ctrl-C" or "SIGTERM": the ops not reached are among `skipped`
    not_reached: int = 0         # signatures left unmeasured by the stop (every op of one keeps its modelled time)


# A CPU op on several threads waits at each barrier for every one of them: where another process holds a core,
# each barrier waits for a scheduler time slice (an elementwise op of 1 MiB took 8 ms on 2 threads, 14 us on
# one, on this project's 2-core machine beside one busy process). Times measured then are the contention's.
BUSY_RATIO = 20.0
BUSY = "the CPU was busy"   # how the warning starts (benchmarks look for it)


def cpu_busy_ratio(torch: Any) -> float:
    """How much slower a small elementwise op runs on torch's threads than on one (1 with a single thread)."""
    threads = torch.get_num_threads()
    if threads <= 1:
        return 1.0
    x = torch.ones(1 << 18)

    def best(n: int) -> float:
        torch.set_num_threads(n)
        torch.relu(x)
        out = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            torch.relu(x)
            out = min(out, time.perf_counter() - t)
        return out

    try:
        one = best(1)
        many = best(threads)
    finally:
        torch.set_num_threads(threads)
    return many / max(one, 1e-9)


def busy_warning(ratio: float, threads: int) -> str | None:
    """The warning a profile measured on contended cores gets, or None."""
    if ratio < BUSY_RATIO:
        return None
    return (f"{BUSY}: an op on {threads} threads ran {ratio:.0f}x slower than on one (another process "
            f"holds a core), so these times count waiting for cores; measure again on an idle machine, or with "
            f"fewer threads (OMP_NUM_THREADS)")


def _device_name(dev: Any) -> str:
    import platform

    import torch

    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    return platform.processor() or platform.machine() or "cpu"


def _materialize(graph: Graph, tid: str, dev: Any, gen: Any) -> Any:
    import torch

    from hybrid.capture.encoding import dtype_from_name

    t = graph.tensor(tid)
    m = t.extra
    if "value" in m:
        return torch.tensor(m["value"], dtype=dtype_from_name(m["dtype"]), device=dev).reshape(m["shape"])
    if "shape" not in m:
        return torch.empty(0, device=dev)   # the rng token
    dt = dtype_from_name(m["dtype"])
    x = torch.empty_strided(m["shape"], m["stride"], dtype=dt, device=dev)
    if dt.is_floating_point:
        x.copy_(torch.randn(x.shape, generator=gen, dtype=torch.float32).to(dev, dt))
    else:
        x.zero_()
    return x


IMPL_MARK = "#impl="   # a non-default implementation's entry: the op's signature, this mark and the impl's name


def impl_signature(sig: str, impl: str) -> str:
    return f"{sig}{IMPL_MARK}{impl}"


def _alternatives(op: Op) -> list[str]:
    """The op's impls other than its default (the default is the op's own entry)."""
    if not op.impls:
        return []
    d = op.impls[op.default_impl].name
    return [im.name for im in op.impls if im.name != d]


# The CUDA caching allocator counts whole blocks: sizes rounded up to 512 B, and a cached block too large to split
# (less than 1 MiB would remain) handed out whole. A measured peak may so exceed the op's results and scratch by up
# to about 1 MiB that no kernel allocated: executor.ops.copy_workspaces ignores an excess over the results up to
# this much where it derives an op's scratch (the results of an op writing its slots are not allocated there).
ALLOCATOR_ROUNDING_BYTES = 1 << 20


def _peak_and_copy(op: Op, env: dict, ctx: Any, dev: Any, impl: str | None, repeat: int) -> tuple[int, float]:
    """CUDA: the most bytes one run of the op holds allocated above what was allocated before it (its results
    and its kernels' scratch, in the allocator's rounded blocks: `ALLOCATOR_ROUNDING_BYTES`), after the warm-up
    runs allocated whatever kernels keep for good (cuBLAS's workspace of the stream); and the seconds to copy its
    fresh results once into tensors of their own (what an executor that cannot make the op write in place adds:
    executor.ops' copy fallback). Resets the device's peak counter."""
    import torch

    from hybrid.capture.interpreter import run_op

    torch.cuda.synchronize(dev)
    base = torch.cuda.memory_allocated(dev)
    torch.cuda.reset_peak_memory_stats(dev)
    ran = dict(env)
    run_op(op, ran, ctx, versions_ready=True, impl=impl)
    torch.cuda.synchronize(dev)
    peak = max(0, int(torch.cuda.max_memory_allocated(dev)) - int(base))
    fresh = [ran[t] for t in dict.fromkeys(op.outputs) if t not in env and isinstance(ran.get(t), torch.Tensor)]
    pairs = [(torch.empty_like(r), r) for r in fresh]
    if not pairs:
        return peak, 0.0

    def copy_all() -> None:
        for dst, src in pairs:
            dst.copy_(src)

    copy_all()
    torch.cuda.synchronize(dev)
    return peak, statistics.median(_event_samples(copy_all, repeat))


def _time_op(op: Op, graph: Graph, dev: Any, repeat: int, warmup: int, gen: Any,
             impl: str | None = None) -> tuple[list[float], int | None, float | None]:
    """Seconds per run (`repeat` samples) and, on CUDA, the run's peak device bytes and its results' copy
    seconds (`_peak_and_copy`)."""
    import torch

    from hybrid.capture.interpreter import ReplayContext, run_op

    env = {tid: _materialize(graph, tid, dev, gen) for tid in dict.fromkeys(op.inputs)}
    # New versions written in place exist beforehand, so only the kernel is timed, not the copy.
    env.update({new: _materialize(graph, new, dev, gen) for new in op.extra["aten"].get("versions", {})})
    ctx = ReplayContext(dev, step=1, check=False)
    with torch.no_grad():
        for _ in range(max(1, warmup) if dev.type == "cuda" else warmup):
            run_op(op, dict(env), ctx, versions_ready=True, impl=impl)
        samples = []
        if dev.type == "cuda":
            peak, copy_s = _peak_and_copy(op, env, ctx, dev, impl, repeat)
            graphed = _time_graphed(op, env, ctx, dev, repeat, impl)
            if graphed is not None:
                return graphed, peak, copy_s
            torch.cuda.synchronize(dev)
            launch = lambda: run_op(op, dict(env), ctx, versions_ready=True, impl=impl)  # noqa: E731
            return _event_samples(launch, repeat), peak, copy_s
        else:
            for _ in range(repeat):
                t0 = time.perf_counter()
                run_op(op, dict(env), ctx, versions_ready=True, impl=impl)
                samples.append(time.perf_counter() - t0)
    return samples, None, None


def _event_samples(launch: Any, repeat: int, runs: int = 1) -> list[float]:
    """Seconds per run of `launch()` (which issues `runs` runs), between CUDA events, `repeat` times."""
    import torch

    samples = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        launch()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / runs)
    return samples


GRAPH_RUNS = 5   # runs of one op recorded back to back in one CUDA graph, so a short kernel is timed whole


def _time_graphed(op: Op, env: dict, ctx: Any, dev: Any, repeat: int, impl: str | None) -> list[float] | None:
    """Device time of one run: GRAPH_RUNS runs recorded as a CUDA graph, replayed between two events.

    Timing a single launch between events also counts the host's time to
    issue it (tens of microseconds from Python), longer than many kernels on
    a fast GPU; a replayed graph has no host in the way. None where the op
    cannot be recorded (it synchronizes with the host, say).
    """
    import torch

    from hybrid.capture.interpreter import run_op

    stream = torch.cuda.current_stream(dev)
    try:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(GRAPH_RUNS):
                run_op(op, dict(env), ctx, versions_ready=True, impl=impl)
        g.replay()
        torch.cuda.synchronize(dev)
        return _event_samples(g.replay, repeat, GRAPH_RUNS)
    except Exception:  # noqa: BLE001 - any refusal of the recording: time it launch by launch instead
        torch.cuda.set_stream(stream)   # a capture that failed to end leaves its stream current
        torch.cuda.synchronize(dev)
        return None


def measure_profile(
    graph: Graph,
    profile: Profile | None = None,
    backend: str = "auto",
    repeat: int = 5,
    warmup: int = 2,
    time_limit_s: float | None = None,
    max_op_bytes: int | None = None,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Profile, MeasureReport]:
    """Measure every op signature of `graph` missing from `profile` (a new one if None).

    Stops early (keeping what it has) at `time_limit_s` or on Ctrl-C. Ops whose
    inputs and outputs exceed `max_op_bytes` (default: 2 GiB on the CPU, 80% of
    free memory on a GPU) are skipped and keep their roofline times.
    """
    from hybrid.capture._torch import require_torch
    from hybrid.capture.trace import portable_kernels

    torch = require_torch()
    if backend == "auto":
        backend = "cuda" if torch.cuda.is_available() else "cpu"
    if backend not in ("cuda", "cpu"):
        raise HybridError(f"backend must be auto, cuda or cpu, got {backend!r}")
    if backend == "cuda" and not torch.cuda.is_available():
        raise HybridError("backend cuda was asked for but this torch sees no CUDA device; use --backend cpu")
    if repeat < 1 or warmup < 0:
        raise HybridError("repeat must be at least 1 and warmup not negative")
    dev = torch.device("cuda" if backend == "cuda" else "cpu")
    if profile is None:
        profile = Profile(backend, _device_name(dev), {}, torch.__version__)
    elif profile.backend != backend:
        raise HybridError(f"the profile holds {profile.backend} times; measure with backend {profile.backend} "
                          "or start a new profile file")
    if max_op_bytes is None:
        max_op_bytes = int(0.8 * torch.cuda.mem_get_info(dev)[0]) if backend == "cuda" else 2 << 30
    report = MeasureReport()
    todo: dict[str, tuple[Op, str | None]] = {}   # signature -> (op, impl: None for the recorded call)
    reused: set[str] = set()                       # signatures (implementations counted apart) already there
    for op in graph.ops:
        sig = op_signature(graph, op)
        if sig is None:
            report.skipped.append(op.id)
            report.reasons[op.id] = "no aten record"
            continue
        # Each alternative implementation (hybrid.capture.conv_impls) is measured too, under its own entry.
        for key, impl in [(sig, None)] + [(impl_signature(sig, name), name) for name in _alternatives(op)]:
            if key in profile.entries:
                reused.add(key)
            else:
                todo.setdefault(key, (op, impl))
    report.reused = len(reused)
    gen = torch.Generator().manual_seed(seed)
    ratios = [cpu_busy_ratio(torch)] if backend == "cpu" and todo else []
    start = time.monotonic()
    k = 0

    def not_reached(k: int, why: str) -> None:
        report.stopped = why
        report.not_reached = len(todo) - k
        left = [o.id for o, _ in list(todo.values())[k:] if o.id not in report.skipped]
        report.skipped.extend(dict.fromkeys(left))

    try:
        with portable_kernels():
            for k, (sig, (op, impl)) in enumerate(todo.items()):
                if progress:
                    progress(k, len(todo))
                if time_limit_s is not None and time.monotonic() - start > time_limit_s:
                    not_reached(k, "time limit")
                    break
                nbytes = sum(graph.tensor(t).bytes for t in dict.fromkeys(op.inputs + op.outputs))
                if nbytes > max_op_bytes:
                    report.skipped.append(op.id)
                    report.reasons[op.id] = f"needs {nbytes} bytes > max_op_bytes {max_op_bytes}"
                    continue
                try:
                    samples, peak, copy_s = _time_op(op, graph, dev, repeat, warmup, gen, impl)
                except Exception as e:  # noqa: BLE001 - out of memory, a kernel this device lacks, or an op this
                    # profiler cannot replay: that op keeps its modelled time, named, and the rest are measured
                    report.skipped.append(op.id)
                    first = (str(e).splitlines() or [""])[0][:200]
                    report.reasons[op.id] = first if isinstance(e, (RuntimeError, HybridError)) else \
                        f"{type(e).__name__}: {first}"
                    if backend == "cuda":
                        torch.cuda.empty_cache()
                    continue
                profile.entries[sig] = {"time_s": statistics.median(samples), "samples": len(samples),
                                        "target": op.extra["aten"]["target"], **({"impl": impl} if impl else {}),
                                        **({"peak_bytes": peak} if peak is not None else {}),
                                        **({"copy_time_s": copy_s} if copy_s is not None else {})}
                report.measured += 1
    except KeyboardInterrupt:
        from hybrid.signals import interrupted_by

        not_reached(k, interrupted_by())
    if ratios:   # before and after: contention may start or end while measuring
        ratios.append(cpu_busy_ratio(torch))
        note = busy_warning(max(ratios), torch.get_num_threads())
        if note:
            report.warnings.append(note)
    if progress:
        progress(len(todo), len(todo))
    return profile, report


def apply_profile(graph: Graph, profile: Profile) -> Graph:
    """A copy of `graph` whose ops take measured times where the profile has them.

    A cuda profile sets `time_s`, a cpu profile `cpu_time_s`; other ops keep
    their roofline estimates. `cost.source` says which op got which.
    """
    field_name = "time_s" if profile.backend == "cuda" else "cpu_time_s"
    ops = []
    hits = 0
    for op in graph.ops:
        sig = op_signature(graph, op)
        e = profile.entries.get(sig) if sig is not None else None
        if e is None:
            ops.append(op)
            continue
        hits += 1
        extra = dict(op.extra)
        cost = dict(extra.get("cost", {}))
        cost[f"{field_name}_source"] = "profile"
        cost[f"roofline_{field_name}"] = getattr(op, field_name)
        if isinstance(e.get("peak_bytes"), int) and field_name == "time_s":
            # the recorded call's results and scratch at its peak on this device: what an executor that runs it
            # outside its pool holds there (executor.ops.with_copy_workspaces states it as the op's workspace)
            cost["device_peak_bytes"] = int(e["peak_bytes"])
        if isinstance(e.get("copy_time_s"), (int, float)) and field_name == "time_s":
            cost["device_copy_time_s"] = float(e["copy_time_s"])   # its results copied once (the copy fallback)
        new_t = float(e["time_s"])
        impls = op.impls
        if impls:
            # The default impl is the op's own call: it takes the op's measured time. The others take theirs
            # where measured (a cuda profile; a cpu profile's impl times go to cost.cpu_impl_time_s, as an
            # impl's time is the accelerator's).
            d = op.default_impl
            measured = {im.name: profile.entries.get(impl_signature(sig, im.name)) for im in impls}  # type: ignore[arg-type]
            if field_name == "time_s":
                impls = tuple(replace(im, time_s=new_t) if v == d else
                              replace(im, time_s=float(measured[im.name]["time_s"])) if measured[im.name] else im
                              for v, im in enumerate(impls))
                cost["impl_time_s_source"] = {im.name: ("profile" if v == d or measured[im.name] else "roofline")
                                              for v, im in enumerate(op.impls)}
            else:
                cost["cpu_impl_time_s"] = {im.name: (new_t if v == d else float(measured[im.name]["time_s"]))
                                           for v, im in enumerate(op.impls) if v == d or measured[im.name]}
        extra["cost"] = cost
        ops.append(replace(op, extra=extra, impls=impls, **{field_name: new_t}))
    extra = dict(graph.extra)
    cap = dict(extra.get("capture", {}))
    cap["profiles"] = list(cap.get("profiles", [])) + [
        {"backend": profile.backend, "device_name": profile.device_name, "field": field_name,
         "ops_from_profile": hits, "ops": len(graph.ops)}]
    extra["capture"] = cap
    return Graph(graph.name, graph.tensors, ops, graph.device, extra)
