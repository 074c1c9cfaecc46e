"""Options shared by several subcommands (device flags, seeds, budgets) and file loading."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import click

from hybrid.device import EXECUTOR_MIN_ALIGNMENT, PRESETS, Device, resolve_device
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.units import parse_share


class FiniteFloat(click.FloatRange):
    """A float flag that is finite (click's FLOAT and FloatRange take `nan` and `inf`, and NaN passes every
    range check), optionally within [min, max]."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        import math

        rv = click.types.FLOAT.convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(rv, param, ctx)

    def _describe_range(self) -> str:
        """No bounds: nothing to say (click's own text read `x<=None` in --help)."""
        return "" if self.min is None and self.max is None else super()._describe_range()

    def get_metavar(self, *args: Any, **kwargs: Any) -> str | None:
        return super().get_metavar(*args, **kwargs) if (self.min is not None or self.max is not None) else "FLOAT"


FINITE = FiniteFloat()


def device_options(f: Callable | None = None, *, graph: bool = True, memory: bool = True) -> Callable:
    """--device/--memory/--h2d/--d2h/--latency/--reserve/--alignment; the graph's own device (else v100-16gb)
    is the base. `@device_options(graph=False)`: for a command that reads no graph (capture), whose help then
    names no graph device; `memory=False`: for one that sets the memory otherwise (frontier's --memories), whose
    help then leaves --memory out (still read, so that the command can refuse it in one line)."""
    if f is None:
        return lambda g: device_options(g, graph=graph, memory=memory)
    of_graph = "the graph's own device, else " if graph else ""
    opts = [
        click.option("--device", "device_name", type=click.Choice(sorted(PRESETS)), default=None,
                     help=f"Device preset (default: {of_graph}v100-16gb)."),
        click.option("--memory", default=None, hidden=not memory,
                     help="Device memory, e.g. 10GiB, 512MB (overrides the preset; alone it is all a plan may "
                          "fill, and a --reserve given comes out of it)" + (
                         "; or a share of the graph's unswapped peak, e.g. 50%: what a plan may fill (a --reserve "
                         "given is added on top)." if graph else ".")),
        click.option("--h2d", default=None, help="Host-to-device bandwidth, e.g. 12GB/s."),
        click.option("--d2h", default=None, help="Device-to-host bandwidth, e.g. 12GB/s."),
        click.option("--latency", default=None,
                     help="Per-transfer latency with its unit, e.g. 10us, 5ms, 800ns (a bare number is refused)."),
        click.option("--reserve", default=None,
                     help="Memory no plan touches (CUDA context, cuBLAS/cuDNN workspaces), e.g. 1GiB. " + (
                          "Default: 1 GiB of a --device preset used whole; 0 when --memory is given (it states what "
                          "a plan may fill)" + ("; else the graph device's reserve_bytes." if graph else ".")
                          if memory else
                          "Kept aside beside each memory swept. Default: the graph device's reserve_bytes (1 GiB "
                          "of a --device preset).")),
        click.option("--alignment", default=None,
                     help="Each device copy occupies its bytes rounded up to this, e.g. 512 (default: "
                          + ("the graph device's alignment_bytes, else " if graph else "")
                          + "512, CUDA's allocation granularity)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


# device_options' parameters, in resolve_device's argument order
DEVICE_KEYS = ("device_name", "memory", "h2d", "d2h", "latency", "reserve", "alignment")


def device_from(graph: Graph | None, kw: dict[str, Any], base: Device | None = None,
                recosts: bool = False, peak_of: Graph | None = None) -> Device:
    """Pop the device flags out of a command's kwargs and resolve them against `base` (default: the graph's).

    `--memory 50%` is that share of the unswapped peak of `peak_of` (default: `graph`) at the device's alignment,
    as `hybrid frontier --memories` reads it: what a plan may fill, so a --reserve given is added on top.
    A graph's op times are its capture device's: a `--device` preset naming another card changes the memory,
    the link and the reserve, not them, so the command says so on stderr (unless it re-costs the ops itself,
    `recosts`, as serve does)."""
    name = kw.get("device_name")
    flags = {k: kw.pop(k, None) for k in DEVICE_KEYS}
    share = parse_share(flags["memory"], "--memory")
    base = base if base is not None else graph.device if graph is not None else None
    if share is not None:
        without = resolve_device(base, *{**flags, "memory": None}.values())
        flags["memory"] = share_of_peak(peak_of if peak_of is not None else graph, share, without,
                                        flags["memory"], keep_reserve=flags["reserve"] is not None)
    dev = resolve_device(base, *flags.values())
    if graph is not None and name and not recosts and graph.device.name in PRESETS and dev.name != graph.device.name:
        click.echo(f"warning: graph {graph.name!r} times its ops as on {graph.device.name} (as captured); --device "
                   f"{name} sets the memory, link and reserve, not the op times: capture it again with --device "
                   f"{name} (or `hybrid profile` on that GPU) to time its ops there", err=True)
    if dev.alignment_bytes < EXECUTOR_MIN_ALIGNMENT:
        click.echo(f"note: alignment {dev.alignment_bytes} B: plans made for it validate and simulate, but "
                   f"`hybrid execute` runs only plans aligned to {EXECUTOR_MIN_ALIGNMENT} B or more (PyTorch's CPU "
                   f"kernels take another numeric path on less)", err=True)
    return dev


def share_of_peak(graph: Graph | None, share: float, dev: Device, text: str, keep_reserve: bool) -> int:
    """The bytes `--memory 50%` names on `dev` (resolved without it): the share of the graph's unswapped peak at
    the device's alignment, plus the reserve a --reserve keeps aside (`keep_reserve`; else there is none)."""
    from hybrid.graph.info import unswapped_peak

    if graph is None:
        raise HybridError(f"--memory {text.strip()}: a percentage is a share of a graph's unswapped peak, and this "
                          "command has no graph yet; give a size, e.g. --memory 10GiB")
    return int(round(share * int(unswapped_peak(graph, dev.alignment_bytes)))) + (
        dev.reserve_bytes if keep_reserve else 0)


graph_option = click.option("--graph", "graph_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
                            help="Graph file (hybrid-graph/1).")
out_option = click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                          help="Write the plan here (hybrid-plan/1).")
seed_option = click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True,
                           help="Random seed (0 or more): the same seed and budget give the same plan.")
recompute_option = click.option(
    "--recompute/--no-recompute", default=True, show_default=True,
    help="Let the planner free a tensor that has no host copy without copying it, and rerun the op that made "
         "it before its next use, where that costs less compute time than the copies cost link time. "
         "--no-recompute: swap only (SwapAdvisor).")
patience_option = click.option(
    "--refine-patience", "refine_patience", type=FiniteFloat(0.0, 1.0, min_open=True), default=0.1,
    show_default=True,
    help="When refinement has found nothing faster for this share of its budget, the GA resumes with the rest "
         "and the faster plan is kept (1: refine for the whole share).")


def given(name: str, ctx: click.Context | None = None) -> bool:
    """Whether the user gave parameter `name` (on the command line, or through the environment) rather than left
    it at its default: the one test for "a flag this command would ignore, or that overrides a file's value"."""
    ctx = ctx or click.get_current_context()
    return ctx.get_parameter_source(name) not in (None, click.core.ParameterSource.DEFAULT,
                                                  click.core.ParameterSource.DEFAULT_MAP)


def given_flags(ctx: click.Context, names: tuple[str, ...]) -> list[str]:
    """The flags among parameter `names` the user gave (`given`), as typed (`--memory`)."""
    flags = {p.name: p.opts[0] for p in ctx.command.params}
    return [flags[n] for n in names if n in flags and given(n, ctx)]


def prepare_output(path: Path | None, flag: str, *, folder: bool = False, figure: bool = False) -> Path | None:
    """Make sure an output path can be written, before any work: create its parent folder (or, with `folder`,
    the folder itself), else a one-line error naming the flag (exit 2).

    Call it right after reading the flags, so that a typo in --out costs nothing rather than the whole
    search. `figure`: the suffix must name a format a figure can be written as. Returns `path` (None passes
    through, for optional flags).
    """
    if path is None:
        return None
    path = Path(path)
    if figure:
        from hybrid.files import figure_format

        try:
            figure_format(path)
        except HybridError as e:
            raise HybridError(f"{flag} {e}") from None
    where = path if folder else path.parent
    if not folder:
        from hybrid.files import target_of

        try:
            target_of(path)  # a folder, a read-only file, a name too long: refused now rather than after the work
        except HybridError as e:
            raise HybridError(f"{flag}: {e}") from None
    if not folder and path.is_dir():
        raise HybridError(f"{flag} {path} is a folder; give a file name, e.g. {flag} {path / 'plan.json'}")
    if folder and path.exists() and not path.is_dir():
        raise HybridError(f"{flag} {path} is a file; give a folder")
    blocker = next((p for p in (where, *where.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise HybridError(f"{flag} {path}: {blocker} is a file, not a folder; choose another path")
    try:
        where.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HybridError(f"{flag} {path}: cannot create the folder {where} ({e.strerror or e}); "
                          "choose a path you can write to") from None
    if not os.access(where, os.W_OK | os.X_OK):
        raise HybridError(f"{flag} {path}: the folder {where} is not writable; choose a path you can write to")
    try:   # os.access passes for root where the file system itself refuses new files (/proc, read-only mounts)
        import tempfile

        fd, probe = tempfile.mkstemp(dir=where, prefix=".hybrid-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        from hybrid.files import write_error

        raise HybridError(f"{flag}: {write_error(path, e, where)}") from None
    if not folder:
        _distinct_output(path, flag)
    return path


def _distinct_output(path: Path, flag: str) -> None:
    """Two outputs of one command written to one file lose the first (a plan overwritten by the CSV log), and an
    output on the input graph loses the graph: both refused up front. (`--checkpoint` on the `--resume` file is
    fine: that is how a search goes on from where it left off.) Refused too: an output on a file an input flag
    names (--plan, --from, --start, --resume, import's FILE; arena's input --csv is its own check): a trace or a result
    written over a plan loses it, a refined plan the one it came from, an imported graph its source."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    key = path.resolve()
    seen: dict[Path, str] = ctx.meta.setdefault("hybrid.outputs", {})
    other = seen.get(key)
    if other is not None and other != flag:
        raise HybridError(f"{flag} {path} is also the {other} file; give each output its own file")
    seen[key] = flag
    for param, name in (("graph_path", "--graph"), ("graph_paths", "--graph"), ("plan_path", "--plan"),
                        ("plan_paths", "--plan"), ("from_path", "--from"), ("start_path", "--start"),
                        ("file", "input"), ("resume_path", "--resume")):
        if name == "--resume" and flag == "--checkpoint":
            continue           # going on from where it left off
        given = ctx.params.get(param) or ()
        for g in [given] if isinstance(given, (str, Path)) else given:
            if Path(g).resolve() == key:
                raise HybridError(f"{flag} {path} is the {name} file it reads; write the output to another file")


def json_summary(graph: Graph, device: Device, plan: Plan, path: Path | None) -> dict[str, Any]:
    """A plan's figures for `--json` (optimize, baseline, simulate, refine): one flat object a script can read.

    Times in seconds, sizes in bytes (`memory_bytes` the device's, `usable_bytes` what a plan may fill); a ratio's
    key says what it divides, as the tables' columns do: `ideal/makespan` (1.0: no stall), `makespan/graph_bound`
    over the lower bound for any schedule counting activations (`graph_bound_s`, hybrid.bounds.plan_graph_bound:
    with recompute when the plan reruns ops, else swap only), `makespan/persistent_bound` over the bound counting
    persistent tensors only (`persistent_bound_s`); `plan` is the file written (null if none); `arena_bytes` the
    arena an arena plan runs in (null for other pools), what the text's "pool: arena of" line gives.
    """
    from hybrid.bounds import plan_graph_bound
    from hybrid.validator import event_figures

    m = plan.metrics
    fig = event_figures(graph, plan)   # from the events, not the file's own metrics
    ideal = float(m.get("ideal_s", 0.0))
    lb = float(fig["persistent_bound_s"])
    gb = plan_graph_bound(graph, plan)
    return {"graph": graph.name, "graph_sha256": plan.graph_sha256, "device": device.name,
            "memory_bytes": int(plan.device.memory_bytes), "usable_bytes": int(plan.device.usable_bytes),
            "planner": str(plan.planner.get("name", "")),
            "plan": str(path) if path is not None else None, "makespan_s": plan.makespan_s, "ideal_s": ideal,
            "ideal/makespan": ideal / plan.makespan_s if plan.makespan_s > 0 else None,
            "graph_bound_s": gb, "makespan/graph_bound": plan.makespan_s / gb if gb > 0 else None,
            "persistent_bound_s": lb, "makespan/persistent_bound": plan.makespan_s / lb if lb > 0 else None,
            "stall_s": float(fig["stall_s"]), "bytes_h2d": int(fig["bytes_h2d"]), "bytes_d2h": int(fig["bytes_d2h"]),
            "peak_bytes": int(fig["peak_bytes"]), "pool": plan.allocation.kind,
            "arena_bytes": int(plan.allocation.arena_bytes) if plan.allocation.kind == "arena" else None}


def load_graph(path: Path) -> Graph:
    """The graph, with a warning line per field named almost like one the format reads (at most 5)."""
    g = Graph.load(path)
    typos = g.misspelt_fields()
    for line in typos[:5]:
        click.echo(f"warning: {path}: {line}", err=True)
    if len(typos) > 5:
        click.echo(f"warning: {path}: {len(typos) - 5} more such fields", err=True)
    return g


def load_plan(path: Path) -> Plan:
    return Plan.load(path)


def parse_overrides(items: tuple[str, ...]) -> dict[str, str]:
    """`--set KEY=VALUE` items (model constructor overrides) as a dict."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise HybridError(f"--set {item!r}: write KEY=VALUE, e.g. --set seq_len=20")
        out[key.strip()] = value.strip()
    return out


def optimizer_options(optimizer: str | None, momentum: float | None, weight_decay: float | None) -> dict[str, float]:
    """The optimizer keyword arguments the capture flags ask for, refusing ones the optimizer lacks."""
    options: dict[str, float] = {}
    if momentum is not None:
        if optimizer != "sgd":
            raise HybridError("--momentum applies to --optimizer sgd only")
        options["momentum"] = momentum
    if weight_decay is not None:
        options["weight_decay"] = weight_decay
    return options
