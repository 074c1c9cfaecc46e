"""`hybrid profile`: measure a captured graph's op times on this machine and cache them."""
from __future__ import annotations

from pathlib import Path

import click

from hybrid.cli.options import graph_option, load_graph, prepare_output
from hybrid.errors import HybridError
from hybrid.units import counted, format_seconds, parse_bytes, parse_duration


@click.command("profile")
@graph_option
@click.option("--profile", "profile_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Profile file to read and update (hybrid-profile/1); created if missing.")
@click.option("--backend", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
              help="Where to run the ops: cuda (times become time_s), cpu (times become cpu_time_s); auto picks cuda if present.")
@click.option("--repeat", type=int, default=5, show_default=True, help="Timed runs per op (the median is kept).")
@click.option("--warmup", type=int, default=2, show_default=True, help="Untimed runs per op first.")
@click.option("--time-limit", default=None, help="Stop measuring after this long, keeping what was measured, e.g. 10m.")
@click.option("--max-op-bytes", default=None,
              help="Skip ops whose tensors exceed this, e.g. 4GiB (default: 2GiB on CPU, 80% of free GPU memory).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the random input data.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Also write the graph with the measured times here.")
def command(graph_path: Path, profile_path: Path, backend: str, repeat: int, warmup: int, time_limit: str | None,
            max_op_bytes: str | None, seed: int, out_path: Path | None) -> None:
    """Measure the op times of a captured graph and cache them in a profile file.

    Each distinct op (same kernel, same shapes; each implementation a convolution
    may choose counted apart) is run on random data, --warmup times untimed and
    --repeat times timed, keeping the median: CUDA events on a GPU, wall time
    on the CPU. Ops already in the
    profile are not measured again, so one profile serves many graphs and
    `hybrid capture --profile FILE` reuses it. Ctrl-C stops early and keeps
    what was measured.

    \b
    Example:
      hybrid profile --graph wrn.json --profile v100.prof.json --out wrn.measured.json
    """
    from hybrid.capture._torch import require_torch

    require_torch()
    from tqdm import tqdm

    from hybrid.capture.profile import Profile, apply_profile, measure_profile

    prepare_output(profile_path, "--profile")  # bad folders fail now, not after the measurements
    prepare_output(out_path, "--out")
    graph = load_graph(graph_path)
    if not any("aten" in o.extra for o in graph.ops):
        raise HybridError(f"{graph_path}: no op has an 'aten' record; only graphs from `hybrid capture` can be profiled")
    prof = Profile.load(profile_path) if profile_path.exists() else None
    bar = tqdm(total=0, unit="op", desc="profiling", disable=None, leave=False)

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.n = done
        bar.refresh()

    prof, report = measure_profile(
        graph, prof, backend=backend, repeat=repeat, warmup=warmup,
        time_limit_s=parse_duration(time_limit, "--time-limit") if time_limit else None,
        max_op_bytes=parse_bytes(max_op_bytes, "--max-op-bytes") if max_op_bytes else None,
        seed=seed, progress=progress)
    bar.close()
    prof.save(profile_path)
    click.echo(f"{prof.backend} ({prof.device_name}): measured {report.measured} op signatures (implementations apart), reused {report.reused}, "
               f"skipped {len(report.skipped)} ops -> {profile_path}")
    for oid, why in list(report.reasons.items())[:5]:
        click.echo(f"  skipped {oid}: {why}")
    if len(report.reasons) > 5:
        click.echo(f"  and {len(report.reasons) - 5} more skipped for their own reasons")
    if report.stopped is not None:
        click.echo(f"  stopped ({report.stopped}): {counted(report.not_reached, 'op signature')} not reached (their "
                   "ops keep their modelled times); run the command again to measure them (the profile keeps what "
                   "was measured)")
    for note in report.warnings:
        click.echo(f"warning: {note}", err=True)
    if out_path is not None:
        g = apply_profile(graph, prof)
        field = "time_s" if prof.backend == "cuda" else "cpu_time_s"
        total = sum(getattr(o, field) or 0.0 for o in g.ops)
        g.save(out_path)
        click.echo(f"wrote {out_path}: {field} sums to {format_seconds(total)}")
