"""What a run checks before it builds anything: building a large model takes minutes and tens of GB, so a run
that cannot succeed should say so at once, in one line.

    from executor.preflight import preflight
    pre = preflight(graph, plan, device="cpu", check=True)     # HybridError naming the problem, or the figures
    print(pre.device, pre.host_needed_bytes, pre.host.available_bytes, pre.host.limited_by)

Checked, in order: the device (cpu or cuda, present; a CUDA graph only on cuda), the plan against the graph (its
name, the file's sha256, the ops it schedules: a plan of another graph is said before anything about the graph's
code, which would send the user the wrong way), each captured tensor's bytes against what its dtype and shape
take (a smaller one would silently overlap the next tensor), the Python code a graph names (a graph file is data: its `module`
spec runs only when the caller names the same code or trusts the graph) and the host memory the run
allocates against what this process may still get: free memory (MemAvailable), the cgroup's limit (v2
`memory.max`, v1 `memory.limit_in_bytes`, of its own group and every group above it) and the process limits
(`ulimit -v`, RLIMIT_AS, and `ulimit -d`, RLIMIT_DATA), whichever is smallest.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybrid.errors import HybridError, InvalidPlanError
from hybrid.units import format_bytes


class UntrustedModuleError(HybridError):
    """The graph names Python code to run (its `module` spec) and the caller neither named it nor trusted it."""

    def __init__(self, graph: str, spec: str, message: str | None = None) -> None:
        self.graph, self.spec = graph, spec
        super().__init__(message or (
            f"graph {graph} names Python code to run (module spec {spec!r}) and a graph file is data: pass "
            f"module={spec!r} if you trust that code, or trust_module=True"))


_SPEC = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")


def well_formed_spec(spec: str) -> bool:
    """`pkg.module:factory` and nothing else (a spec from a file may hold newlines or terminal escapes: such a
    spec is shown quoted, never echoed as a flag to copy)."""
    return _SPEC.fullmatch(spec) is not None


def graph_module_spec(graph: Any) -> str | None:
    """The `module.spec` the graph records (`hybrid capture --module`), None for a zoo or foreign graph."""
    rec = graph.extra.get("module")
    return str(rec["spec"]) if isinstance(rec, dict) and "spec" in rec else None


def module_to_run(graph: Any, module: str | None = None, trust_module: bool = False,
                  graph_path: Path | str | None = None) -> str | None:
    """The module spec a run may import: `module` as the caller names it, or the graph's own only with
    `trust_module`; None when the graph names none (a zoo model). Opening a graph someone sent must not run
    their code, so a graph's spec alone raises UntrustedModuleError."""
    if module is not None:
        return module
    spec = graph_module_spec(graph)
    if spec is None or trust_module:
        return spec
    raise UntrustedModuleError(repr(str(graph_path)) if graph_path is not None else repr(graph.name), spec)


def other_module_warning(graph: Any, module: str | None) -> str | None:
    """One line where the caller names another module spec than the graph records (a factory moved or renamed
    is fine; another model is not, and the parameter check catches only a different state, not other code)."""
    recorded = graph_module_spec(graph)
    if module is None or recorded is None or module == recorded:
        return None
    return (f"--module {module!r} is not the spec the graph was captured from ({recorded!r}); running "
            f"{module!r} (fine if the factory moved; otherwise this trains other code than the plan was made for)")


def resolve_device(device: str | None, cuda_graph: bool = False) -> str:
    """`device` checked against this machine (default: cuda where PyTorch sees one, else cpu)."""
    import torch

    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise HybridError(f"--device {device}: PyTorch {torch.__version__} sees no CUDA device here; run with "
                          "--device cpu (the exact sequential backend) or on a machine with a GPU")
    if device != "cpu" and not device.startswith("cuda"):
        raise HybridError(f"--device {device!r}: choose cpu or cuda (or cuda:N)")
    if cuda_graph and not device.startswith("cuda"):
        raise HybridError(f"--cuda-graph needs --device cuda (a CUDA graph replays GPU work); got --device {device}")
    return device


def storage_fits(graph: Any, graph_path: Path | str | None = None) -> None:
    """Each captured tensor's `bytes` holds what its dtype, shape, strides and storage offset address: the
    executor cuts views of that many bytes at the plan's offsets, so a smaller `bytes` (a hand-edited graph)
    would read and write the next tensor's bytes and train wrong numbers without an error."""
    from executor.device_pool import itemsize
    from hybrid.capture.encoding import dtype_from_name

    for t in graph.tensors:
        meta = t.extra
        if not all(k in meta for k in ("dtype", "shape", "stride")):
            continue
        shape, stride, offset = meta["shape"], meta["stride"], meta.get("storage_offset", 0)
        if not (isinstance(shape, (list, tuple)) and isinstance(stride, (list, tuple)) and len(shape) == len(stride)
                and all(_whole(n) and n >= 0 for n in shape) and all(_whole(st) for st in stride)
                and _whole(offset) and offset >= 0):
            raise HybridError(f"tensor {t.id!r}: shape {shape!r}, stride {stride!r} and storage_offset {offset!r} "
                              "are not lists of whole numbers of one length and an offset of 0 or more: the graph "
                              f"file was edited or is corrupt; recapture it{f' ({graph_path})' if graph_path else ''}")
        elems = 0 if 0 in shape else offset + 1 + sum((n - 1) * abs(st) for n, st in zip(shape, stride))
        need = elems * itemsize(dtype_from_name(meta["dtype"]))
        if need > t.bytes:
            raise HybridError(f"tensor {t.id!r}: bytes {t.bytes} is less than its {meta['dtype']} {shape} (stride "
                              f"{stride}) takes ({need} bytes): the graph file was edited or is corrupt; recapture "
                              f"it{f' ({graph_path})' if graph_path else ''} or fix its bytes")


def _whole(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def plan_fits(graph: Any, plan: Any, plan_path: Path | str | None = None, graph_path: Path | str | None = None) -> None:
    """The plan names this graph (and this version of its file) and schedules exactly its ops."""
    from dataclasses import replace

    from hybrid.validator import require_plan_of

    where = f"graph file {str(graph_path)!r}" if graph_path is not None else f"the captured graph {graph.name!r}"
    what = f"plan {str(plan_path)!r}" if plan_path is not None else "the plan"
    # a graph captured now is no file whose version the plan could name: only its name is checked then
    require_plan_of(graph, plan if graph_path is not None else replace(plan, graph_sha256=""), what, where)
    if set(plan.schedule) != {o.id for o in graph.ops}:
        raise InvalidPlanError(f"{what} schedules other ops than {where} has; plan it again")


def device_pool_bytes(plan: Any) -> int:
    """The device pool's buffer as the executor allocates it (executor.runtime.make_pool): the size classes with
    each object rounded up to the device's alignment, the arena's size, or for an unconstrained plan (laid out at
    run time, near its peak) the peak the plan reports, at most its usable memory: at most what the run allocates,
    so that a refusal is right."""
    from hybrid.plan import ArenaAllocation, SizeClassAllocation
    from hybrid.units import round_up

    alloc = plan.allocation
    if isinstance(alloc, SizeClassAllocation):
        align = plan.device.alignment_bytes
        return max(16, sum(round_up(c.bytes, align) * c.count for c in alloc.classes))
    if isinstance(alloc, ArenaAllocation):
        return max(16, int(alloc.arena_bytes))
    usable = int(plan.device.usable_bytes)
    peak = plan.metrics.get("peak_bytes") if isinstance(plan.metrics, dict) else None
    if isinstance(peak, (int, float)) and 0 < peak < usable:
        return int(peak)
    return usable


def host_bytes_needed(graph: Any, plan: Any, device: str, check: bool) -> int:
    """Host bytes a run allocates: the module's parameters, the host pool (persistent and swapped tensors), the
    device pool itself on cpu, and for `check` an eager step (its unswapped peak)."""
    swapped = {e.tensor for e in plan.events if e.kind in ("swap_in", "swap_out")}
    params = sum(t.bytes for t in graph.tensors if t.kind == "param")
    host = sum(t.bytes for t in graph.tensors if t.persistent or t.id in swapped)
    need = params + host
    if device == "cpu":
        need += device_pool_bytes(plan)
    if check:
        from hybrid.graph.info import unswapped_peak

        need += unswapped_peak(graph, align=1)
    return need


# ---------------------------------------------------------------- what this process may still allocate

def available_ram() -> int | None:
    """Host bytes a new allocation can get without swapping: psutil if installed, else Linux's MemAvailable
    (free memory plus reclaimable caches), else free pages (os.sysconf); None where none of them answers."""
    try:
        import psutil  # type: ignore[import-not-found]

        return int(psutil.virtual_memory().available)
    except Exception:  # not installed, or no answer on this platform
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        return None


def _read_int(path: Path) -> int | None:
    """A cgroup file's number; None for "max", a missing file or anything unreadable."""
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _stat_field(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _groups(proc_cgroup: Path, root: Path) -> list[tuple[Path, str, str, str]]:
    """(folder, limit file, usage file, reclaimable key in memory.stat) for this process's memory cgroup and each
    group above it, v2 and v1 alike."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        if controllers == "":                               # v2: one unified hierarchy
            base = root if (root / "cgroup.controllers").exists() else root / "unified"
            files = ("memory.max", "memory.current", "inactive_file")
        elif "memory" in controllers.split(","):            # v1: the memory controller's own hierarchy
            base = root / "memory"
            files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file")
        else:
            continue
        rel_parts = [p for p in rel.strip().split("/") if p]
        # In a container the path may be relative to a namespace whose root is mounted at `base`: try both.
        for k in range(len(rel_parts), -1, -1):
            folder = base.joinpath(*rel_parts[:k])
            if folder.is_dir():
                out.append((folder, *files))
    return out


def cgroup_headroom(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = Path("/sys/fs/cgroup")) -> int | None:
    """Bytes this process's memory cgroups still allow: the smallest limit minus usage (page cache the kernel can
    drop, inactive_file, not counted as used) over its group and the groups above it; None without a limit."""
    best: int | None = None
    seen: set[Path] = set()
    for folder, limit_file, usage_file, reclaimable in _groups(proc_cgroup, root):
        if folder in seen:
            continue
        seen.add(folder)
        limit = _read_int(folder / limit_file)
        if limit is None or limit >= 1 << 60:                # "max", or v1's "no limit" (about 2**63)
            continue
        usage = _read_int(folder / usage_file) or 0
        usage = max(0, usage - _stat_field(folder / "memory.stat", reclaimable))
        left = max(0, limit - usage)
        best = left if best is None else min(best, left)
    return best


def _status_bytes(key: str) -> int:
    """A `/proc/self/status` size (VmSize, VmData) in bytes; 0 where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def rlimit_headroom() -> dict[str, int]:
    """Bytes the process limits still allow, by the shell command that sets each: `ulimit -v` (RLIMIT_AS, the
    address space mapped now, VmSize, counts against it) and `ulimit -d` (RLIMIT_DATA, against VmData). An
    allocation past either fails however much memory is free. Empty without limits (or off POSIX)."""
    try:
        import resource
    except ImportError:
        return {}
    out = {}
    for name, which, used in (("ulimit -v", "RLIMIT_AS", "VmSize"), ("ulimit -d", "RLIMIT_DATA", "VmData")):
        soft, _ = resource.getrlimit(getattr(resource, which))
        if soft != resource.RLIM_INFINITY and soft >= 0:
            out[name] = max(0, soft - _status_bytes(used))
    return out


@dataclass(frozen=True)
class HostMemory:
    """What this process may still allocate on the host, and which limit says so."""
    available_bytes: int | None                 # None: nothing answered
    limited_by: str                             # the reading that gave available_bytes
    readings: dict[str, int] = field(default_factory=dict)   # every reading that answered, by name


LIMITS = {"free": "free memory (MemAvailable)", "cgroup": "the memory cgroup's limit",
          "ulimit -v": "the address-space limit (ulimit -v)", "ulimit -d": "the data-segment limit (ulimit -d)"}


def host_memory() -> HostMemory:
    """The smallest of free memory, the cgroup's headroom and the process limits' headroom."""
    readings = {k: v for k, v in (("free", available_ram()), ("cgroup", cgroup_headroom())) if v is not None}
    readings.update(rlimit_headroom())
    if not readings:
        return HostMemory(None, "unknown", {})
    key = min(readings, key=lambda k: readings[k])
    return HostMemory(readings[key], key, readings)


def host_memory_suffices(need: int, host: HostMemory, device: str, check: bool) -> None:
    """Refuse, with the figures and the limit that binds, a run whose host memory would not fit (instead of an
    OOM kill or a MemoryError mid-run)."""
    have = host.available_bytes
    if have is None or need <= have:
        return
    raise_it = {"cgroup": "raise the container's memory limit or "}.get(host.limited_by, "")
    if host.limited_by.startswith("ulimit"):
        raise_it = f"raise `{host.limited_by}` or "
    fix = f"{raise_it}use a machine with more memory"
    raise HybridError(f"this run needs about {format_bytes(need)} of host memory (the model's parameters, host "
                      f"copies{', the CPU device pool' if device == 'cpu' else ''}"
                      f"{', the eager reference for --check' if check else ''}) but {format_bytes(have)} is "
                      f"available (under {LIMITS[host.limited_by]}); {fix}{' or drop --check' if check else ''}")


@dataclass(frozen=True)
class Preflight:
    """What the checks found: the device the run uses, the module spec it may import (None: a zoo model or the
    caller's own object), and the host memory it needs against what it may get."""
    device: str
    module_spec: str | None
    host_needed_bytes: int
    host: HostMemory
    warnings: tuple[str, ...] = ()     # one line each, for the caller to show (another module spec than recorded)


def preflight(graph: Any, plan: Any, *, device: str | None = None, check: bool = False, cuda_graph: bool = False,
              model: str | None = None, module: str | None = None, trust_module: bool = False,
              plan_path: Path | str | None = None, graph_path: Path | str | None = None) -> Preflight:
    """Every cheap check of a run of `plan` on `graph`, in the order the module docstring gives; the first
    problem raises a one-line HybridError (UntrustedModuleError for a graph's own module spec). `model` (a zoo
    model's name) or `module` (a module spec) say what the caller will build; neither: what the graph records."""
    dev = resolve_device(device, cuda_graph)
    if model is not None and module is not None:
        raise HybridError("give --model (a zoo model) or --module (your own), not both")
    plan_fits(graph, plan, plan_path, graph_path)
    storage_fits(graph, graph_path)
    spec = None if model is not None else module_to_run(graph, module, trust_module, graph_path)
    need = host_bytes_needed(graph, plan, dev, check)
    host = host_memory()
    host_memory_suffices(need, host, dev, check)
    warn = other_module_warning(graph, module) if model is None else None
    return Preflight(dev, spec, need, host, (warn,) if warn else ())
