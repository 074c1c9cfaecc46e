"""`hybrid execute`: train a zoo model (or the user's own module) for N iterations under a plan, on CUDA streams or
the exact CPU backend; the cheap checks (plan vs graph, device, host memory) run before the model is built."""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import click

from hybrid.errors import HybridError
from hybrid.units import format_bytes, format_seconds


def _overrides_for(name: str, config: dict[str, Any]) -> dict[str, Any]:
    """The settings of a recorded model config that its family accepts as overrides."""
    from hybrid.zoo.registry import families

    key = name.strip().lower()
    for fam in families():
        if fam.match(key) is not None:
            return {k: v for k, v in config.items() if k in fam.overrides}
    return {}


def _graph_and_spec(model: str | None, graph_path: Path | None, graph: Any, batch: int | None, optimizer: str,
                    lr: float | None, momentum: float | None, weight_decay: float | None, dtype: str,
                    overrides: tuple[str, ...], plan: Any = None) -> tuple[Any, Any, int]:
    """The zoo model's spec and batch: as recorded in `graph` (loaded from `graph_path`), or captured now."""
    from hybrid.capture.api import capture_model
    from hybrid.cli.options import optimizer_options, parse_overrides
    from hybrid.zoo import get_model

    if graph is not None:
        rec = graph.extra.get("model")
        if model is None:
            if not isinstance(rec, dict):
                raise HybridError(f"graph {str(graph_path)!r} records no zoo model nor --module; give --model or "
                                  "--module PKG.MODULE:FACTORY, or run your own module from Python (executor.execute)")
            model = rec["name"]
        if isinstance(rec, dict) and rec.get("name") != model:
            raise HybridError(f"--model {model!r} but the graph was captured from {rec.get('name')!r}")
        cfg = _overrides_for(model, rec.get("config", {})) if isinstance(rec, dict) else {}
        cfg.update(parse_overrides(overrides))
        spec = get_model(model, **cfg)
        b = int(rec["batch"]) if isinstance(rec, dict) and batch is None else (batch or spec.default_batch)
        return graph, spec, b
    if model is None:
        raise HybridError("give --model NAME (captured on the fly with the capture flags) or --graph FILE")
    options = optimizer_options(optimizer, momentum, weight_decay)
    ov = parse_overrides(overrides)
    spec = get_model(model, **ov)
    b = spec.default_batch if batch is None else batch
    if plan is not None and plan.graph != f"{spec.name}-b{b}":   # before the capture, which can take a minute
        raise HybridError(f"the plan was made for graph {plan.graph!r}, not for {spec.name!r} at batch {b} "
                          f"({spec.name}-b{b}); give --graph with the graph it was made for, or plan this one")
    graph = capture_model(model, b, optimizer=optimizer, lr=lr, optimizer_options=options or None, dtype=dtype,
                          overrides=ov)
    return graph, spec, b


def _lines(graph: Any, plan: Any, result: Any, device: str) -> list[str]:
    s = result.summary
    mem = s.memory
    pool = mem["pool"]
    plan_mem = mem["plan_memory_bytes"]
    out = [f"executed {graph.name} under plan {plan.planner.get('name', '?')!r} ({pool['kind']} pool, "
           f"{format_bytes(plan_mem)}) on {device}: {s.iterations} iterations"]
    cmp_note = "" if device.startswith("cuda") else " (CPU times: not comparable with the plan's device)"
    out.append(f"  per iteration: {format_seconds(s.wall_s)} wall, {format_seconds(s.makespan_s)} device makespan "
               f"(median{' after the first' if s.measured_from else ''}); simulated {format_seconds(s.simulated_s)}, "
               f"measured/simulated {s.ratio:.3g}{cmp_note}")
    if s.graphed:
        out.append(f"  {s.graphed} iterations replayed as CUDA graphs (the makespan above is theirs); issued node by "
                   f"node: {format_seconds(s.issued_makespan_s or float('nan'))}, of which "
                   f"{format_seconds(s.issue_s)} for the host to issue it")
    elif not math.isnan(s.issue_s) and s.issue_s >= 0.9 * s.wall_s and device.startswith("cuda"):
        out.append(f"  host-bound: issuing each iteration took {format_seconds(s.issue_s)} of its "
                   f"{format_seconds(s.wall_s)} (try --cuda-graph)")
    if s.resimulated_s is not None:
        out.append(f"  re-simulated with the measured durations: {format_seconds(s.resimulated_s)}")
    if s.busy_s:
        out.append("  streams: " + " | ".join(f"{k} busy {format_seconds(s.busy_s[k])}, stall "
                                              f"{format_seconds(s.stall_s[k])}" for k in s.busy_s))
    extra = ""
    if pool.get("compactions_per_iteration"):
        extra = (f"; {pool['compactions_per_iteration']} compactions per iteration moving "
                 f"{format_bytes(pool['moved_bytes_per_iteration'])}")
    out.append(f"  device memory: pool peak {format_bytes(pool['peak_live_bytes'])} of the plan's "
               f"{format_bytes(plan_mem)} (buffer {format_bytes(pool['reserved_bytes'])}"
               f"{', offsets ' + pool['offsets'] if pool.get('offsets') else ''}{extra}); "
               f"copy-fallback transient up to {format_bytes(s.transient_peak_bytes)}"
               + (f"; CUDA max allocated {format_bytes(mem['cuda_max_allocated_bytes'])}"
                  if "cuda_max_allocated_bytes" in mem else ""))
    out.append(f"  host memory: {format_bytes(mem['host_pool_bytes'])} in one {'pinned ' if mem['pinned'] else ''}buffer")
    modes = s.op_modes
    out.append(f"  ops: {modes.get('out', 0)} write through out=, {modes.get('copy', 0)} via the copy fallback "
               f"({format_bytes(s.copy_bytes)}, {format_seconds(s.copy_s)} per iteration), "
               f"{modes.get('inplace', 0)} in place, {modes.get('optimizer', 0)} optimizer steps"
               + (f"; {format_bytes(s.version_bytes)} copied to start new versions of in-place intermediates"
                  if s.version_bytes else ""))
    if result.losses:
        out.append(f"  loss: first {result.losses[0]:.6g}, last {result.losses[-1]:.6g}")
    return out


@click.command("execute")
@click.option("--model", default=None, help="Zoo model name (see `hybrid models`); optional with a --graph that records it.")
@click.option("--module", "module_spec", default=None, metavar="PKG.MODULE:FACTORY",
              help="Your own model (as for `hybrid capture --module`); optional with a --graph that records it.")
@click.option("--graph", "graph_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The captured graph the plan was made for (default: capture --model now with the flags below).")
@click.option("--plan", "plan_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Plan file (hybrid-plan/1) for that graph.")
@click.option("--iters", type=int, default=20, show_default=True, help="Training iterations to run.")
@click.option("--device", "device", default=None,
              help="cuda (streams, pinned host memory) or cpu (the exact sequential backend); default cuda if present.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for the model's weights; iteration k also seeds torch with seed + k (dropout).")
@click.option("--check", is_flag=True, help="Also train eagerly on the CPU from the same seed (host memory holds what "
              "the GPU cannot); print the largest difference and exit 1 on a mismatch (bitwise on cpu, --atol/--rtol "
              "on cuda).")
@click.option("--atol", type=float, default=None, help="Absolute tolerance for --check (default 0 on cpu, 1e-5 on cuda).")
@click.option("--rtol", type=float, default=None, help="Relative tolerance for --check (default 0 on cpu, 1e-4 on cuda).")
@click.option("--sanitize", is_flag=True, help="Check every node for stream races and poison freed memory (slower).")
@click.option("--cuda-graph", is_flag=True,
              help="After two iterations issued node by node, record one as a CUDA graph and replay it: the host "
                   "no longer issues each node (the executor is otherwise host-bound on fast GPUs); no per-node times.")
@click.option("--batch", type=int, default=None, help="Batch size when capturing --model (default: the model's).")
@click.option("--optimizer", type=click.Choice(["adam", "adamw", "sgd"]), default="adam", show_default=True,
              help="Optimizer when capturing --model.")
@click.option("--lr", type=float, default=None, help="Learning rate when capturing --model.")
@click.option("--momentum", type=float, default=None, help="SGD momentum when capturing --model.")
@click.option("--weight-decay", type=float, default=None, help="Weight decay when capturing --model.")
@click.option("--dtype", type=click.Choice(["fp32", "bf16", "fp16"]), default="fp32", show_default=True,
              help="Data type when capturing --model.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Model setting, as for hybrid capture.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the measurements (and the check) as JSON here.")
@click.option("--trace", "trace_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the last measured iteration beside the plan's simulated timeline as a Chrome trace "
                   "(Perfetto JSON), to lay beside a torch.profiler trace.")
@click.option("--profile-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the measured op times as a profile (hybrid-profile/1) for `hybrid capture --profile`.")
def command(model: str | None, module_spec: str | None, graph_path: Path | None, plan_path: Path, iters: int, device: str | None, seed: int,
            check: bool, atol: float | None, rtol: float | None, sanitize: bool, cuda_graph: bool, batch: int | None,
            optimizer: str,
            lr: float | None, momentum: float | None, weight_decay: float | None, dtype: str,
            overrides: tuple[str, ...], out_path: Path | None, trace_path: Path | None,
            profile_out: Path | None) -> None:
    """Train a model for --iters iterations under a plan and measure it.

    The plan's order, pool and copies are kept exactly: ops run on a compute
    stream, swap-ins and swap-outs on their own streams, ordered by events as
    the plan's augmented graph says; device memory comes from one pool laid
    out as the plan's allocation, host copies from one pinned buffer. The
    report gives time per iteration, stall per stream, peak device memory
    (never above the plan's) and measured vs simulated makespan. On cpu the
    streams run one after another, which tests the whole runtime exactly.

    \b
    Example:
      hybrid capture --model resnet-18 --batch 32 --set image_size=64 --out g.json
      hybrid baseline --graph g.json --kind belady --memory 80MiB --out p.json
      hybrid execute --graph g.json --plan p.json --iters 20 --device cuda --check
    """
    from hybrid.capture._torch import require_torch
    from hybrid.cli.options import prepare_output
    from hybrid.graph import Graph
    from hybrid.plan import Plan

    if iters < 1:
        raise HybridError(f"--iters must be at least 1, got {iters}")
    prepare_output(out_path, "--out")
    prepare_output(profile_out, "--profile-out")
    prepare_output(trace_path, "--trace")
    torch = require_torch()
    # Cheap checks first: building a large model takes minutes and tens of GB.
    plan = Plan.load(plan_path)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise HybridError(f"--device {device}: PyTorch {torch.__version__} sees no CUDA device here; run with "
                          "--device cpu (the exact sequential backend) or on a machine with a GPU")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise HybridError(f"--device {device!r}: choose cpu or cuda (or cuda:N)")
    if cuda_graph and not device.startswith("cuda"):
        raise HybridError(f"--cuda-graph needs --device cuda (a CUDA graph replays GPU work); got --device {device}")
    graph = Graph.load(graph_path) if graph_path is not None else None
    if graph is not None:
        _plan_fits(graph, plan, plan_path, graph_path)
        if module_spec is None and isinstance(graph.extra.get("module"), dict) and model is None:
            module_spec = str(graph.extra["module"]["spec"])
        _host_memory_suffices(graph, plan, device, check)
    from hybrid.capture.encoding import parse_dtype

    from executor import execute

    if module_spec is not None:
        if model is not None:
            raise HybridError("give --model (a zoo model) or --module (your own), not both")
        if graph is None:
            raise HybridError("--module needs --graph: the graph you captured with `hybrid capture --module`")
        from hybrid.capture.user_module import load_user_model

        dt = _graph_dtype(graph, torch)
        torch.manual_seed(seed)
        user = load_user_model(module_spec)
        module, loss_fn = user.module.to(dt), user.loss_fn
        args, target, kwargs = _cast_floats((user.args, user.target, user.kwargs), dt, torch)  # as capture did
    else:
        graph, spec, b = _graph_and_spec(model, graph_path, graph, batch, optimizer, lr, momentum, weight_decay,
                                         dtype, overrides, plan)
        if graph_path is None:
            _plan_fits(graph, plan, plan_path, None)
            _host_memory_suffices(graph, plan, device, check)
        dt = parse_dtype(dtype) or torch.float32
        if graph_path is not None:
            dt = _graph_dtype(graph, torch)
        torch.manual_seed(seed)
        module = spec.build().to(dt)
        args, target = spec.make_inputs(b, torch.device("cpu"), dt)
        loss_fn, kwargs = spec.loss, None
    if _is_placement(plan):
        _execute_placement(graph, plan, module, args, target, iters, device, check, atol, rtol, out_path)
        return
    records: list[Any] = []
    progress = _Progress(iters)
    try:
        result = execute(graph, plan, module, args, target, loss_fn=loss_fn, kwargs=kwargs, iters=iters,
                         device=device, seed=seed, check=check, sanitize=sanitize, atol=atol, rtol=rtol,
                         cuda_graph=cuda_graph,
                         on_iteration=lambda rec: (records.append(rec), progress.step(rec)))
    except KeyboardInterrupt:
        from hybrid.signals import exit_status, interrupted_by

        progress.close()
        how = interrupted_by()
        if out_path is not None and records:
            _write(out_path, _doc(graph, plan_path, device, iters, seed, None, [], records, None, interrupted=how))
            click.echo(f"interrupted ({how}) after {len(records)} of {iters} iterations: wrote the measurements so "
                       f"far to {out_path}", err=True)
        else:
            click.echo(f"interrupted ({how}) after {len(records)} of {iters} iterations", err=True)
        sys.exit(exit_status())
    progress.close()
    for line in _lines(graph, plan, result, device):
        click.echo(line)
    c = result.comparison
    if c is not None:
        if c.bitwise:
            click.echo(f"check: {c.values} values (losses, parameters, buffers, optimizer state) equal eager "
                       f"training bitwise")
        else:
            verdict = "within tolerance" if c.ok else "MISMATCH"
            click.echo(f"check: largest difference {c.max_abs_diff:.3g} ({c.worst}); {len(c.mismatched)} of "
                       f"{c.values} values differ; atol {c.atol:g}, rtol {c.rtol:g}: {verdict}")
        for note in c.notes:
            click.echo(f"  note: {note}")
    if out_path is not None:
        _write(out_path, _doc(graph, plan_path, device, iters, seed, result.summary.to_json(), result.losses,
                              result.records, c))
        click.echo(f"wrote {out_path}")
    if trace_path is not None:
        _write_trace(trace_path, graph, plan, result, device)
        click.echo(f"wrote {trace_path}")
    if profile_out is not None:
        from executor.measure import to_profile

        prof = to_profile(result.program, result.records[1:] or result.records,
                          "cuda" if device.startswith("cuda") else "cpu", device)
        prof.save(profile_out)
        click.echo(f"wrote {profile_out} ({len(prof.entries)} op signatures)")
    if c is not None and not c.ok:
        sys.exit(1)


def _is_placement(plan: Any) -> bool:
    """A placement plan (`hybrid place`): inference with compute events on the host's cpu stream."""
    return any(e.on_cpu for e in plan.events) or str(plan.planner.get("name", "")).startswith("place-")


def _execute_placement(graph: Any, plan: Any, module: Any, args: Any, target: Any, iters: int, device: str,
                       check: bool, atol: float | None, rtol: float | None, out_path: Path | None) -> None:
    """Run an inference placement: host ops on the CPU, the rest on `device` (the CPU stand-in on cpu)."""
    import statistics

    import torch

    from executor.placed import eager_outputs, run_placed

    module = module.eval()
    res = run_placed(graph, plan, module, args, target, device=device, iters=iters)
    wall = statistics.median(res.wall_s[1:] or res.wall_s)
    n_cpu = sum(1 for e in plan.events if e.on_cpu)
    n_gpu = sum(1 for e in plan.events if e.kind == "compute" and not e.on_cpu)
    click.echo(f"executed {graph.name} under placement {plan.planner.get('devices', '?')} ({n_cpu} ops on the host "
               f"CPU, {n_gpu} on {device}{' as the GPU stand-in' if device == 'cpu' else ''}): {iters} inferences")
    note = "" if device.startswith("cuda") else " (CPU stand-in: not comparable with the plan's devices)"
    click.echo(f"  per inference: {format_seconds(wall)} wall (median{' after the first' if iters > 1 else ''}); "
               f"simulated {format_seconds(plan.makespan_s)}{note}")
    ok = True
    diff = None
    if check:
        ref = eager_outputs(module, args)
        a = 0.0 if device == "cpu" and atol is None else (atol if atol is not None else 1e-5)
        r = 0.0 if device == "cpu" and rtol is None else (rtol if rtol is not None else 1e-4)
        diff = max(float((o.float() - e.float()).abs().max()) for o, e in zip(res.outputs, ref))
        ok = all(torch.allclose(o, e, atol=a, rtol=r) if (a or r) else torch.equal(o, e)
                 for o, e in zip(res.outputs, ref))
        click.echo(f"check: outputs {'equal eager inference bitwise' if ok and diff == 0 else 'within tolerance' if ok else 'MISMATCH'}"
                   f" (largest difference {diff:.3g})")
    if out_path is not None:
        _write(out_path, {"graph": graph.name, "device": device, "iters": iters, "wall_s": res.wall_s,
                          "simulated_s": plan.makespan_s, "check": None if diff is None else
                          {"ok": ok, "max_abs_diff": diff}})
        click.echo(f"wrote {out_path}")
    if not ok:
        sys.exit(1)


def _write_trace(path: Path, graph: Any, plan: Any, result: Any, device: str) -> None:
    """The plan as simulated and the last iteration as measured, two processes of one Chrome trace."""
    import math

    from hybrid.report.timeline import memory_profile, plan_trace_rows, write_chrome_trace

    from hybrid.plan.events import STREAMS

    # Graph replays have no node times: the last iteration issued node by node.
    rec = next((r for r in reversed(result.records) if r.start is not None), result.records[-1])
    program = result.program
    rows = []
    if rec.start is not None and rec.end is not None:
        for st in program.steps:
            s, e = float(rec.start[st.node]), float(rec.end[st.node])
            if st.stream < 0 or math.isnan(s) or math.isnan(e):
                continue
            label = program.aug.label(st.node)
            lane = STREAMS[st.stream]
            rows.append((label, lane, lane, s, e, {"node": st.node}))
    write_chrome_trace(path, [("plan (simulated)", plan_trace_rows(graph, plan), memory_profile(graph, plan)),
                              (f"iteration {rec.iteration} (measured on {device})", rows, None)])


def _doc(graph: Any, plan_path: Path, device: str, iters: int, seed: int, summary: Any, losses: list[float],
         records: list[Any], c: Any, interrupted: str | None = None) -> dict[str, Any]:
    doc = {"graph": graph.name, "plan": str(plan_path), "device": device, "iters": iters, "seed": seed,
           "summary": summary, "losses": losses or [r.loss for r in records],
           "iterations": [{"wall_s": r.wall_s, "makespan_s": r.makespan_s, **r.ops.to_json()} for r in records],
           "check": c.to_json() if c is not None else None}
    if interrupted:
        doc["interrupted"] = interrupted
    return doc


def _write(path: Path, doc: dict[str, Any]) -> None:
    from hybrid.files import write_whole

    write_whole(path, json.dumps(doc, indent=1, default=str))


class _Progress:
    """Per-iteration progress on stderr: a bar on a terminal, a line per iteration in a log (Slurm, nohup)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.k = 0
        self.bar = None
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc="iterations", unit="it", file=sys.stderr, leave=False)

    def step(self, rec: Any) -> None:
        self.k += 1
        loss = f", loss {rec.loss:.6g}" if rec.loss is not None else ""
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix_str(f"{format_seconds(rec.wall_s)}/it{loss}")
        else:
            click.echo(f"iteration {self.k}/{self.total}: {format_seconds(rec.wall_s)}{loss}", err=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _cast_floats(tree: Any, dt: Any, torch: Any) -> Any:
    """Floating tensors of a factory's inputs at the graph's dtype (`capture --dtype` cast them the same way)."""
    from torch.utils import _pytree as pytree

    return pytree.tree_map(lambda v: v.to(dt) if isinstance(v, torch.Tensor) and v.is_floating_point() else v, tree)


def _graph_dtype(graph: Any, torch: Any) -> Any:
    from hybrid.capture.encoding import parse_dtype

    first = next((t for t in graph.tensors if t.kind == "param" and "dtype" in t.extra), None)
    return parse_dtype(first.extra["dtype"]) if first is not None else torch.float32


def _plan_fits(graph: Any, plan: Any, plan_path: Path, graph_path: Path | None) -> None:
    """Rule 0's cheap part: the plan names this graph (and this version of its file)."""
    where = f"graph file {str(graph_path)!r}" if graph_path is not None else f"the captured graph {graph.name!r}"
    if plan.graph != graph.name:
        raise HybridError(f"plan {str(plan_path)!r} was made for graph {plan.graph!r}, not {where} ({graph.name!r}); "
                          "give the graph it was made for, or plan this one")
    if graph_path is not None and plan.graph_sha256 and plan.graph_sha256 != graph.sha256:
        raise HybridError(f"plan {str(plan_path)!r} was made for another version of {where} (sha256 "
                          f"{plan.graph_sha256[:12]}, the file's is {graph.sha256[:12]}); plan it again")
    known = {o.id for o in graph.ops}
    if set(plan.schedule) != known:
        raise HybridError(f"plan {str(plan_path)!r} schedules other ops than {where} has; plan it again")


def _available_ram() -> int | None:
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


def _host_memory_suffices(graph: Any, plan: Any, device: str, check: bool) -> None:
    """Refuse up front, with the figures, a run whose host memory would not fit (instead of an OOM kill)."""
    need = host_bytes_needed(graph, plan, device, check)
    have = _available_ram()
    if have is not None and need > have:
        raise HybridError(f"this run needs about {format_bytes(need)} of host memory (the model's parameters, host "
                          f"copies{', the CPU device pool' if device == 'cpu' else ''}"
                          f"{', the eager reference for --check' if check else ''}) but "
                          f"{format_bytes(have)} is available; use a machine with more memory"
                          f"{' or drop --check' if check else ''}")


def host_bytes_needed(graph: Any, plan: Any, device: str, check: bool) -> int:
    """Host bytes a run allocates: the module's parameters, the host pool (persistent and swapped tensors), the
    device pool itself on cpu, and for --check an eager step (its unswapped peak)."""
    swapped = {e.tensor for e in plan.events if e.kind in ("swap_in", "swap_out")}
    params = sum(t.bytes for t in graph.tensors if t.kind == "param")
    host = sum(t.bytes for t in graph.tensors if t.persistent or t.id in swapped)
    need = params + host
    if device == "cpu":
        need += plan.device.usable_bytes
    if check:
        from hybrid.graph.info import unswapped_peak

        need += unswapped_peak(graph, align=1)
    return need
