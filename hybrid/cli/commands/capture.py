"""`hybrid capture`: a zoo model's (or the user's own module's) training iteration as a graph file."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from hybrid.cli.options import FINITE, device_from, device_options, optimizer_options, parse_overrides, prepare_output
from hybrid.errors import HybridError
from hybrid.units import format_bytes, format_seconds, listed


def summary_lines(graph, seconds: float) -> list[str]:  # noqa: ANN001 - a Graph
    by_kind: dict[str, int] = {}
    for t in graph.tensors:
        by_kind[t.kind] = by_kind.get(t.kind, 0) + t.bytes
    parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1]) if v)
    from_profile = sum(1 for o in graph.ops if o.extra.get("cost", {}).get("time_s_source") == "profile")
    return [
        f"captured {graph.name}: {len(graph.ops)} ops, {len(graph.tensors)} tensors in {seconds:.1f} s",
        f"  bytes by kind: {parts}; total {format_bytes(sum(by_kind.values()))}",
        f"  compute time {format_seconds(sum(o.time_s for o in graph.ops))} on {graph.device.name if graph.device else '?'}"
        f" ({from_profile} of {len(graph.ops)} ops measured, the rest roofline)",
    ]


def _training_mode_layers(module) -> list[str]:  # noqa: ANN001 - a torch.nn.Module
    """Dropout and batch-norm submodules in training mode: an inference graph would run them so."""
    from hybrid.capture.trace import layer_names, mode_layers

    drops, norms = mode_layers(module)
    return layer_names([(n, m) for n, m in drops + norms if m.training])


def _capture_user(spec: str, optimizer: str | None, lr: float | None, options: dict | None, device,  # noqa: ANN001
                  dtype: str | None):
    """Capture the factory's module; the graph records the spec for `hybrid execute`.

    `dtype` None keeps the factory's own dtypes (recorded as null: `execute` does not cast them)."""
    import torch

    from hybrid.capture.api import capture, forward_alone
    from hybrid.capture.user_module import load_user_model

    torch.manual_seed(0)
    user = load_user_model(spec)
    if optimizer is None:
        # the zoo switches to eval for an inference graph; a user's module keeps the mode it was returned in
        layers = _training_mode_layers(user.module)
        if layers:
            shown = listed(layers)
            click.echo(f"warning: --optimizer none: the module is in training mode, so the inference graph runs "
                       f"its dropout/batch norm ({shown}) in training mode; return module.eval() from the "
                       "factory if that is not meant", err=True)
    loss_fn, target = forward_alone(optimizer, user.loss_fn, user.target)
    graph = capture(user.module, user.args, loss_fn, target, kwargs=user.kwargs, optimizer=optimizer,
                    lr=lr, optimizer_options=options, device=device, dtype=dtype, name=spec.replace(":", "."))
    graph.extra["module"] = {"spec": spec, "dtype": dtype}
    return graph


@click.command("capture")
@click.option("--model", default=None, help="Zoo model name, e.g. wresnet-152-10, rnn-8-8k, resnet-50 (see `hybrid models`).")
@click.option("--module", "module_spec", default=None, metavar="PKG.MODULE:FACTORY",
              help="Your own model instead of --model: FACTORY is a function of no arguments returning (module, "
                   "inputs, target, loss_fn), or a dict with those keys and optionally kwargs; inputs is a tensor "
                   "or a tuple of positional inputs (a list is one input), and the loss is "
                   "loss_fn(module(*inputs, **kwargs), target). "
                   "PKG.MODULE is imported with the current folder on the path, e.g. --module mymodel:make for "
                   "./mymodel.py (docs/capture.md).")
@click.option("--batch", type=int, default=None, help="Batch size (default: the batch the model's paper uses).")
@click.option("--optimizer", type=click.Choice(["adam", "adamw", "sgd", "none"]), default="adam", show_default=True,
              help="Optimizer step to include; none captures an inference (forward-only) graph.")
@click.option("--lr", type=FINITE, default=None, help="Learning rate (default: torch.optim's, 1e-3).")
@click.option("--momentum", type=FINITE, default=None, help="SGD momentum; non-zero adds a momentum buffer per parameter.")
@click.option("--weight-decay", type=FINITE, default=None, help="Weight decay (default: torch.optim's).")
@device_options(graph=False)
@click.option("--dtype", type=click.Choice(["fp32", "bf16", "fp16"]), default=None,
              help="Data type of parameters, activations and optimizer state. Default: fp32 for --model; "
                   "the factory's own dtypes for --module (given, it casts them).")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Model setting, e.g. --set seq_len=20 or --set image_size=64 (repeatable; see `hybrid models`).")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Profile file (hybrid-profile/1, from `hybrid profile`): its measured op times replace the roofline ones.")
@click.option("--measure", is_flag=True,
              help="Also measure ops missing from --profile on this machine (GPU if any, else CPU) and update the file.")
@click.option("--executor-workspaces", is_flag=True,
              help="State as each op's workspace the results `hybrid execute` can only compute outside its pool "
                   "and copy in (batch norm backward, layer norm, random ops, convolutions ATen does not run as "
                   "Slow2d on the CPU), so a plan's memory is what the executor allocates (docs/capture.md). With "
                   "a cuda --profile: what it does on CUDA (convolutions copied in too; the kernels' scratch and "
                   "the copies' time that profile measured). Off by default until the result tables made from "
                   "captured graphs are regenerated.")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Write the graph here (hybrid-graph/1).")
def command(model: str | None, module_spec: str | None, batch: int | None, optimizer: str, lr: float | None, momentum: float | None,
            weight_decay: float | None, dtype: str | None, overrides: tuple[str, ...], profile_path: Path | None,
            measure: bool, out_path: Path, executor_workspaces: bool, **kw: object) -> None:
    """Capture one training iteration of a zoo model (--model) or of your own module (--module) as a graph file.

    Forward, backward and the optimizer step are traced on fake tensors, so
    models far larger than this machine's memory capture quickly. Op times are
    roofline estimates for --device (its peak FLOP/s, memory bandwidth and
    launch overhead), or measured ones from --profile. From Python, capture
    any nn.Module with hybrid.capture.capture (docs/capture.md).

    With --module, the factory runs once on the CPU (after torch.manual_seed(0))
    to build the module and its inputs, which are then traced like a zoo
    model's; the graph records the spec, so `hybrid execute --graph` rebuilds
    the model by calling the factory again (run it from the same folder).
    --batch and --set do not apply: the factory decides its inputs. Ctrl-C or
    SIGTERM stops a capture without writing anything.

    \b
    Examples:
      hybrid capture --model wresnet-152-10 --batch 64 --optimizer sgd --momentum 0.9 --out wrn.json
      hybrid capture --module mymodel:make --optimizer adamw --lr 1e-3 --out mine.json
    """
    from hybrid.capture._torch import require_torch

    require_torch()
    from hybrid.capture.api import capture_model

    if (model is None) == (module_spec is None):
        raise HybridError("give exactly one of --model NAME (a zoo model) or --module PKG.MODULE:FACTORY (your own)")
    if module_spec is not None and (batch is not None or overrides):
        raise HybridError("--batch and --set apply to zoo models; with --module your factory decides the inputs")
    prepare_output(out_path, "--out")
    if measure and profile_path is None:
        raise HybridError("--measure needs --profile FILE (where measured times are kept)")
    if measure:
        prepare_output(profile_path, "--profile")   # --measure writes it
    if profile_path is not None and not measure and not profile_path.exists():
        raise HybridError(f"profile file {str(profile_path)!r} does not exist; make it with `hybrid profile` "
                          "or add --measure")
    device = device_from(None, kw)
    options = optimizer_options(optimizer, momentum, weight_decay)
    opt = None if optimizer == "none" else optimizer
    if opt is None and (lr is not None or options):
        raise HybridError("--lr/--momentum/--weight-decay need an optimizer; drop them or pick --optimizer sgd/adam")
    start = time.monotonic()
    try:
        if module_spec is not None:
            graph = _capture_user(module_spec, opt, lr, options or None, device, dtype)
        else:
            graph = capture_model(model, batch, optimizer=opt, lr=lr, optimizer_options=options or None,
                                  device=device, dtype=dtype or "fp32", overrides=parse_overrides(overrides))
        seconds = time.monotonic() - start
        prof = None
        if profile_path is not None:
            from hybrid.capture.profile import Profile, apply_profile, measure_profile

            prof = Profile.load(profile_path) if profile_path.exists() else None
            if measure:
                prof, report = measure_profile(graph, prof)
                prof.save(profile_path)
                if report.stopped is not None:   # a Ctrl-C or SIGTERM while measuring (it has no time limit)
                    from hybrid.signals import exit_status

                    click.echo(f"interrupted ({report.stopped}) while measuring: {profile_path} keeps the "
                               f"{report.measured} op signatures measured (run again to go on); nothing written "
                               f"to {out_path}", err=True)
                    sys.exit(exit_status())
                click.echo(f"measured {report.measured} op signatures on {prof.device_name} ({report.reused} "
                           f"reused, {len(report.skipped)} ops skipped) -> {profile_path}", err=True)
                for note in report.warnings:
                    click.echo(f"warning: {note}", err=True)
            if prof is not None:   # it exists: checked above, or just measured
                graph = apply_profile(graph, prof)
        if executor_workspaces:
            from executor.ops import with_copy_costs

            # what `hybrid execute` does where the profile was measured: on CUDA more ops go through the copy
            # fallback, and the profile's measured scratch and copies count too
            graph = with_copy_costs(graph, "cuda" if prof is not None and prof.backend == "cuda" else "cpu")
        sha = graph.save(out_path)   # whole or not at all
    except KeyboardInterrupt:
        # Ctrl-C, or SIGTERM (hybrid.signals): a half-captured graph is worth nothing, so nothing is written.
        from hybrid.signals import exit_status, interrupted_by

        click.echo(f"interrupted ({interrupted_by()}) while capturing: nothing written to {out_path}", err=True)
        sys.exit(exit_status())
    for line in summary_lines(graph, seconds):
        click.echo(line)
    click.echo(f"wrote {out_path} (sha256 {sha[:12]})")
