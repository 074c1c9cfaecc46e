"""`hybrid execute`: train a zoo model for N iterations under a plan, on CUDA streams or the exact CPU backend."""
from __future__ import annotations

import json
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


def _graph_and_spec(model: str | None, graph_path: Path | None, batch: int | None, optimizer: str, lr: float | None,
                    momentum: float | None, weight_decay: float | None, dtype: str,
                    overrides: tuple[str, ...]) -> tuple[Any, Any, int]:
    from hybrid.capture.api import capture_model
    from hybrid.cli.options import optimizer_options, parse_overrides
    from hybrid.graph import Graph
    from hybrid.zoo import get_model

    if graph_path is not None:
        graph = Graph.load(graph_path)
        rec = graph.extra.get("model")
        if model is None:
            if not isinstance(rec, dict):
                raise HybridError(f"graph {str(graph_path)!r} does not record a zoo model; give --model, or run your "
                                  "own module from Python (executor.execute)")
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
               f"{', placement ' + pool['placement'] if pool.get('placement') else ''}{extra}); "
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
@click.option("--graph", "graph_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The captured graph the plan was made for (default: capture --model now with the flags below).")
@click.option("--plan", "plan_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Plan file (hybrid-plan/1) for that graph.")
@click.option("--iters", type=int, default=20, show_default=True, help="Training iterations to run.")
@click.option("--device", "device", default=None,
              help="cuda (streams, pinned host memory) or cpu (the exact sequential backend); default cuda if present.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for the model's weights; iteration k also seeds torch with seed + k (dropout).")
@click.option("--check", is_flag=True, help="Also train eagerly from the same seed; print the largest difference and "
              "exit 1 on a mismatch (bitwise on cpu, --atol/--rtol on cuda).")
@click.option("--atol", type=float, default=None, help="Absolute tolerance for --check (default 0 on cpu, 1e-5 on cuda).")
@click.option("--rtol", type=float, default=None, help="Relative tolerance for --check (default 0 on cpu, 1e-4 on cuda).")
@click.option("--sanitize", is_flag=True, help="Check every node for stream races and poison freed memory (slower).")
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
@click.option("--profile-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the measured op times as a profile (hybrid-profile/1) for `hybrid capture --profile`.")
def command(model: str | None, graph_path: Path | None, plan_path: Path, iters: int, device: str | None, seed: int,
            check: bool, atol: float | None, rtol: float | None, sanitize: bool, batch: int | None, optimizer: str,
            lr: float | None, momentum: float | None, weight_decay: float | None, dtype: str,
            overrides: tuple[str, ...], out_path: Path | None, profile_out: Path | None) -> None:
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

    torch = require_torch()
    from hybrid.capture.encoding import parse_dtype
    from hybrid.plan import Plan

    from executor import execute

    if iters < 1:
        raise HybridError(f"--iters must be at least 1, got {iters}")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    graph, spec, b = _graph_and_spec(model, graph_path, batch, optimizer, lr, momentum, weight_decay, dtype,
                                     overrides)
    plan = Plan.load(plan_path)
    dt = parse_dtype(dtype) or torch.float32
    if graph_path is not None:
        first = next((t for t in graph.tensors if t.kind == "param" and "dtype" in t.extra), None)
        dt = parse_dtype(first.extra["dtype"]) if first is not None else torch.float32
    torch.manual_seed(seed)
    module = spec.build().to(dt)
    args, target = spec.make_inputs(b, torch.device("cpu"), dt)
    result = execute(graph, plan, module, args, target, loss_fn=spec.loss, iters=iters, device=device, seed=seed,
                     check=check, sanitize=sanitize, atol=atol, rtol=rtol)
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
        doc = {"graph": graph.name, "plan": str(plan_path), "device": device, "iters": iters, "seed": seed,
               "summary": result.summary.to_json(), "losses": result.losses,
               "iterations": [{"wall_s": r.wall_s, "makespan_s": r.makespan_s, **r.ops.to_json()}
                              for r in result.records],
               "check": c.to_json() if c is not None else None}
        out_path.write_text(json.dumps(doc, indent=1, default=str))
        click.echo(f"wrote {out_path}")
    if profile_out is not None:
        from executor.measure import to_profile

        prof = to_profile(result.program, result.records[1:] or result.records,
                          "cuda" if device.startswith("cuda") else "cpu", device)
        prof.save(profile_out)
        click.echo(f"wrote {profile_out} ({len(prof.entries)} op signatures)")
    if c is not None and not c.ok:
        sys.exit(1)
