"""`hybrid execute`: train a zoo model (or the user's own module) for N iterations under a plan, on CUDA streams or
the exact CPU backend. The work is the library's: the cheap checks (executor.preflight), the model
(executor.model), the run (executor.execute); this module parses, prints and writes."""
from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path
from typing import Any

import click

from hybrid.cli.options import FINITE
from hybrid.errors import HybridError
from hybrid.units import counted, format_bytes, format_ratio, format_seconds


def usable_words(device: Any) -> str:
    """The plan's memory as the planner filled it: usable, with the device's whole memory beside it where a
    reserve makes the two differ (a captured graph's 1 GiB), so that no figure is read against the wrong one."""
    usable = f"{format_bytes(device.usable_bytes)} usable"
    if not device.reserve_bytes:
        return usable
    return f"{usable}, {format_bytes(device.memory_bytes)} with its {format_bytes(device.reserve_bytes)} reserve"


def with_outside_words(s: Any) -> str:
    """The pool's peak with what was allocated outside it (executor.measure.Summary.peak_with_outside_bytes),
    named for what it is: a sum, with how much of it lies above the pool's own peak, not an outside figure."""
    both, pool = int(s.peak_with_outside_bytes), int(s.pool_peak_occupied_bytes)
    if s.outside_counted_by == "dispatch":
        above = (f"{format_bytes(both - pool)} above the pool's peak" if both > pool
                 else "no more than the pool's peak alone")
        return f"pool and outside allocations together at their peak {format_bytes(both)} ({above})"
    if s.outside_counted_by == "allocator":
        return (f"pool peak and the most allocated outside it at once together at most {format_bytes(both)} "
                f"(outside: {format_bytes(both - pool)})")
    return (f"pool peak and the copy fallback's largest result together at most {format_bytes(both)} "
            "(outside the pool not counted)")


def _lines(graph: Any, plan: Any, result: Any, device: str) -> list[str]:
    s = result.summary
    mem = s.memory
    pool = mem["pool"]
    dev = plan.device
    out = [f"executed {graph.name} under plan {plan.planner.get('name', '?')!r} ({pool['kind']} pool, "
           f"{usable_words(dev)}) on {device}: {counted(s.iterations, 'iteration')}"]
    cmp_note = "" if device.startswith("cuda") else " (CPU times: not comparable with the plan's device)"
    out.append(f"  per iteration: {format_seconds(s.wall_s)} wall, {format_seconds(s.makespan_s)} device makespan "
               f"(median{' after the first' if s.measured_from else ''}); simulated {format_seconds(s.simulated_s)}, "
               f"measured/simulated {format_ratio(s.ratio)}{cmp_note}")
    if s.graphed:
        out.append(f"  {counted(s.graphed, 'iteration')} replayed as CUDA graphs (the makespan above is theirs); "
                   f"issued node by node: {format_seconds(s.issued_makespan_s or float('nan'))}, of which "
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
        extra = (f"; {counted(pool['compactions_per_iteration'], 'compaction')} per iteration moving "
                 f"{format_bytes(pool['moved_bytes_per_iteration'])}")
    align = int(pool.get("alignment_bytes", 1))
    out.append(f"  device memory: pool peak {format_bytes(s.pool_peak_occupied_bytes)} as the plan counts it "
               f"(each copy rounded up to {format_bytes(align)}; {format_bytes(pool['peak_live_bytes'])} of tensor "
               f"data), "
               f"{with_outside_words(s)} (copy-fallback transient up to {format_bytes(s.transient_peak_bytes)}), "
               f"of the plan's {format_bytes(dev.usable_bytes)} usable (buffer {format_bytes(pool['reserved_bytes'])}"
               f"{', offsets ' + pool['offsets'] if pool.get('offsets') else ''}{extra})"
               + (f"; CUDA max allocated {format_bytes(mem['cuda_max_allocated_bytes'])}, this run's own "
                  f"{format_bytes(mem['cuda_own_peak_bytes'])} (its peak "
                  f"above what was allocated before it, with the {format_bytes(mem['cuda_kernel_state_bytes'])} "
                  "cuBLAS keeps for its stream)"
                  if "cuda_own_peak_bytes" in mem else ""))
    from executor.api import memory_warning

    warn = memory_warning(s, plan)
    if warn:
        out.append(f"  warning: {warn}")
    if s.outside_counted_by:
        how = "aten calls' results" if s.outside_counted_by == "dispatch" else "CUDA allocator statistics"
        out.append(f"  outside the pool: {format_bytes(s.outside_bytes)} allocated per iteration (at most "
                   f"{format_bytes(s.outside_peak_bytes)} by one op), {format_bytes(s.outside_beyond_workspace_bytes)} "
                   f"beyond the graph's stated workspaces ({how})"
                   + ("; most by " + ", ".join(f"{t} {format_bytes(b)}" for t, b in sorted(
                       s.outside_by_target.items(), key=lambda kv: -kv[1])[:3]) if s.outside_by_target else ""))
    out.append(f"  host memory: {format_bytes(mem['host_pool_bytes'])} in one {'pinned ' if mem['pinned'] else ''}buffer")
    modes = s.op_modes
    out.append(f"  ops: {modes.get('out', 0)} write through out=, {modes.get('slot', 0)} through an equivalent out= "
               f"call, {modes.get('copy', 0)} via the copy fallback "
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
              help="Your own model (as for `hybrid capture --module`): the code execute imports and runs. A graph "
                   "captured with --module records its spec, but a graph file is data: name the spec here too, or "
                   "pass --trust-graph-module.")
@click.option("--trust-graph-module", is_flag=True,
              help="Import and run the module spec the --graph file records (its code runs here: only for graphs "
                   "you trust).")
@click.option("--graph", "graph_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The captured graph the plan was made for (default: capture --model now with the flags below).")
@click.option("--plan", "plan_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Plan file (hybrid-plan/1) for that graph.")
@click.option("--iters", type=int, default=20, show_default=True, help="Training iterations to run.")
@click.option("--device", "device", default=None,
              help="cuda (streams, pinned host memory) or cpu (the exact sequential backend); default cuda if present.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed for the model's weights; iteration k also seeds torch with seed + k (dropout).")
@click.option("--check", is_flag=True, help="Also train eagerly on the CPU from the same seed (host memory holds what "
              "the GPU cannot; an inference graph: eager forward passes, their outputs compared); print the largest "
              "difference and exit 1 on a mismatch (bitwise on cpu, --atol/--rtol on cuda).")
@click.option("--atol", type=FINITE, default=None, help="Absolute tolerance for --check (default 0 on cpu, 1e-5 on cuda).")
@click.option("--rtol", type=FINITE, default=None, help="Relative tolerance for --check (default 0 on cpu, 1e-4 on cuda).")
@click.option("--sanitize", is_flag=True, help="Check every node for stream races and poison freed memory (slower).")
@click.option("--cuda-graph", is_flag=True,
              help="After two iterations issued node by node, record one as a CUDA graph and replay it: the host "
                   "no longer issues each node (the executor is otherwise host-bound on fast GPUs); no per-node times.")
@click.option("--count-outside/--no-count-outside", default=True, show_default=True,
              help="Count the bytes allocated outside the pool (executor.outside): on cpu a dispatch mode sees every "
                   "aten call, 1.5-2.5x slower per iteration; on cuda the allocator's statistics, nearly free.")
@click.option("--batch", type=int, default=None, help="Batch size when capturing --model (default: the model's).")
@click.option("--optimizer", type=click.Choice(["adam", "adamw", "sgd"]), default="adam", show_default=True,
              help="Optimizer when capturing --model.")
@click.option("--lr", type=FINITE, default=None, help="Learning rate when capturing --model.")
@click.option("--momentum", type=FINITE, default=None, help="SGD momentum when capturing --model.")
@click.option("--weight-decay", type=FINITE, default=None, help="Weight decay when capturing --model.")
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
def command(model: str | None, module_spec: str | None, trust_graph_module: bool, graph_path: Path | None,
            plan_path: Path, iters: int, device: str | None, seed: int,
            check: bool, atol: float | None, rtol: float | None, sanitize: bool, cuda_graph: bool,
            count_outside: bool, batch: int | None,
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
    (with a warning where the run held more than the plan allows) and measured
    vs simulated makespan. On cpu the
    streams run one after another, which tests the whole runtime exactly.

    \b
    Example:
      hybrid capture --model resnet-18 --batch 32 --set image_size=64 --out g.json
      hybrid baseline --graph g.json --kind belady --memory 80MiB --out p.json
      hybrid execute --graph g.json --plan p.json --iters 20 --device cuda --check
      hybrid execute --graph mine.json --plan p.json --module mymodel:make --device cpu --check
    """
    from hybrid.capture._torch import require_torch
    from hybrid.cli.options import load_graph, optimizer_options, parse_overrides, prepare_output
    from hybrid.plan import Plan

    if iters < 1:
        raise HybridError(f"--iters must be at least 1, got {iters}")
    prepare_output(out_path, "--out")
    prepare_output(profile_out, "--profile-out")
    prepare_output(trace_path, "--trace")
    require_torch()
    from executor import execute, is_placement
    from executor.api import CheckMismatchWarning, PlanMemoryWarning
    from executor.model import capture_for_plan, workload
    from executor.preflight import UntrustedModuleError, preflight, resolve_device, well_formed_spec

    # Cheap checks first: building a large model takes minutes and tens of GB.
    plan = Plan.load(plan_path)
    if is_placement(plan):   # runs as one program per inference, without the per-node records these need
        given = [flag for flag, v in (("--trace", trace_path), ("--profile-out", profile_out),
                                      ("--sanitize", sanitize), ("--cuda-graph", cuda_graph)) if v]
        if given:
            raise HybridError(f"{', '.join(given)}: not for a placement plan (inference on the host CPU and the GPU), "
                              "which runs as one program without per-node records; drop "
                              f"{'them' if len(given) > 1 else 'it'} (`hybrid timeline --graph G --plan "
                              f"{plan_path} --format chrome --out t.json` writes the placement's planned trace)")
    device = resolve_device(device, cuda_graph)
    if model is not None and module_spec is not None:
        raise HybridError("give --model (a zoo model) or --module (your own), not both")
    ov = parse_overrides(overrides)
    if graph_path is not None:
        graph = load_graph(graph_path)   # its near-miss field warnings, as every command's
    elif module_spec is not None:
        raise HybridError("--module needs --graph: the graph you captured with `hybrid capture --module`")
    elif model is None:
        raise HybridError("give --model NAME (captured on the fly with the capture flags) or --graph FILE")
    else:
        graph = capture_for_plan(model, plan, batch, optimizer=optimizer, lr=lr, dtype=dtype, overrides=ov,
                                 optimizer_options=optimizer_options(optimizer, momentum, weight_decay))
        model = None                   # the captured graph records it
    try:
        pre = preflight(graph, plan, device=device, check=check, cuda_graph=cuda_graph,
                        model=model, module=module_spec, trust_module=trust_graph_module, plan_path=plan_path,
                        graph_path=graph_path)
    except UntrustedModuleError as e:
        flag = f"--module {e.spec}" if well_formed_spec(e.spec) else "--module PKG.MODULE:FACTORY"
        raise HybridError(f"graph {e.graph} names Python code to run, module spec {e.spec!r}, and a graph file is "
                          f"data: to run it, add {flag} (or --trust-graph-module)") from None
    for line in pre.warnings:     # another module spec than the graph records: run it (a factory moves), say so
        click.echo(f"warning: {line}", err=True)
    if not is_placement(plan):   # a broken plan: exit 1 naming its first violation, as validate, arena, refine
        from hybrid.validator import require_valid

        require_valid(graph, plan, f"--plan {plan_path}")
    w = workload(graph, model=model, module=pre.module_spec, seed=seed, batch=batch, overrides=ov,
                 graph_path=graph_path)
    module, args, target = w.module, w.args, w.target

    def make_reference() -> tuple[Any, Any]:
        """The user's factory called again with the same seed: its loss may hold the module in ways a copy
        cannot follow (a closure over `model.parameters()`); the zoo's losses are plain functions."""
        again = workload(graph, model=model, module=pre.module_spec, seed=seed, batch=batch, overrides=ov,
                         graph_path=graph_path)
        return again.module, again.loss_fn
    if is_placement(plan):
        _execute_placement(graph, plan, module, args, target, iters, device, check, atol, rtol, out_path, w.kwargs)
        return
    records: list[Any] = []
    progress = _Progress(iters)
    try:
        with warnings.catch_warnings():   # its memory and check warnings are lines of the summary here (_lines)
            warnings.simplefilter("ignore", PlanMemoryWarning)
            warnings.simplefilter("ignore", CheckMismatchWarning)
            result = execute(graph, plan, module, args, target, loss_fn=w.loss_fn, kwargs=w.kwargs, iters=iters,
                             device=device, seed=seed, check=check, sanitize=sanitize, atol=atol, rtol=rtol,
                             cuda_graph=cuda_graph, count_outside=count_outside, validate=False,   # validated above
                             make_reference=make_reference if pre.module_spec is not None else None,
                             on_iteration=lambda rec: (records.append(rec), progress.step(rec)))
    except KeyboardInterrupt:
        from hybrid.signals import exit_status, interrupted_by

        progress.close()
        how = interrupted_by()
        if out_path is not None and records:
            _write(out_path, _doc(graph, plan_path, device, iters, seed, None, [], records, None, interrupted=how))
            click.echo(f"interrupted ({how}) after {len(records)} of {counted(iters, 'iteration')}: wrote the "
                       f"measurements so far to {out_path}", err=True)
        else:
            click.echo(f"interrupted ({how}) after {len(records)} of {counted(iters, 'iteration')}", err=True)
        sys.exit(exit_status())
    progress.close()
    for line in _lines(graph, plan, result, device):
        click.echo(line)
    sanitized = result.extra.get("sanitize")
    if sanitized is not None:
        click.echo(f"sanitize: {counted(sanitized['races'], 'race')} in {counted(sanitized['nodes_checked'], 'node')} "
                   f"checked over {counted(sanitized['iterations'], 'iteration')}")
    c = result.comparison
    if c is not None:
        click.echo(c.line())
        for note in c.notes:
            click.echo(f"  note: {note}")
    if out_path is not None:
        doc = _doc(graph, plan_path, device, iters, seed, result.summary.to_json(), result.losses, result.records, c)
        if sanitized is not None:
            doc["sanitize"] = sanitized
        _write(out_path, doc)
        click.echo(f"wrote {out_path}")
    if trace_path is not None:
        _write_trace(trace_path, graph, plan, result, device)
        click.echo(f"wrote {trace_path}")
    if profile_out is not None:
        from executor.measure import to_profile

        prof = to_profile(result.program, result.records[1:] or result.records,
                          "cuda" if device.startswith("cuda") else "cpu", device)
        prof.save(profile_out)
        click.echo(f"wrote {profile_out} ({counted(len(prof.entries), 'op signature')})")
    if c is not None and not c.ok:
        sys.exit(1)


def _execute_placement(graph: Any, plan: Any, module: Any, args: Any, target: Any, iters: int, device: str,
                       check: bool, atol: float | None, rtol: float | None, out_path: Path | None,
                       kwargs: dict | None = None) -> None:
    """Run an inference placement (executor.execute_placement) and print it."""
    from executor import CheckMismatchWarning, execute_placement

    with warnings.catch_warnings():   # its check warning is the check line printed below
        warnings.simplefilter("ignore", CheckMismatchWarning)
        run = execute_placement(graph, plan, module, args, target, iters=iters, device=device, check=check,
                                atol=atol, rtol=rtol, kwargs=kwargs)
    click.echo(f"executed {graph.name} under placement {plan.planner.get('devices', '?')} ({run.host_ops} ops on the "
               f"host CPU, {run.device_ops} on {device}{' as the GPU stand-in' if device == 'cpu' else ''}): "
               f"{counted(iters, 'inference')}")
    note = "" if device.startswith("cuda") else " (CPU stand-in: not comparable with the plan's devices)"
    click.echo(f"  per inference: {format_seconds(run.median_wall_s)} wall (median"
               f"{' after the first' if iters > 1 else ''}); simulated {format_seconds(plan.makespan_s)}{note}")
    c = run.check
    if c is not None:
        click.echo(c.line())
    if out_path is not None:
        _write(out_path, {"graph": graph.name, "device": device, "iters": iters, "wall_s": run.wall_s,
                          "simulated_s": plan.makespan_s, "check": None if c is None else c.to_json()})
        click.echo(f"wrote {out_path}")
    if c is not None and not c.ok:
        sys.exit(1)


def _write_trace(path: Path, graph: Any, plan: Any, result: Any, device: str) -> None:
    """The plan as simulated and the last iteration as measured, two processes of one Chrome trace."""
    from hybrid.report.timeline import memory_profile, plan_trace_rows, write_chrome_trace

    from executor.measure import measured_trace_rows

    iteration, rows = measured_trace_rows(result.program, result.records)
    # counted from 1, as the progress lines on stderr count them ("iteration 3/3")
    write_chrome_trace(path, [("plan (simulated)", plan_trace_rows(graph, plan), memory_profile(graph, plan)),
                              (f"iteration {iteration + 1}/{len(result.records)} (measured on {device})", rows,
                               None)])


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
