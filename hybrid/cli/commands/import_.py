"""`hybrid import checkmate FILE --out g.json`."""
from __future__ import annotations

from pathlib import Path

import click

from hybrid.cli.options import DEVICE_KEYS, device_from, device_options, given, prepare_output
from hybrid.errors import HybridError
from hybrid.graph.importers.checkmate import load_checkmate
from hybrid.units import format_seconds


@click.group("import")
def command() -> None:
    """Convert other projects' graph files to hybrid-graph/1."""


@command.command("checkmate")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--time-unit", default="us", show_default=True,
              help="Unit of the file's cost_cpu/duration: s, ms, us, ns, or seconds per unit as a number.")
@click.option("--scale-to", default=None,
              help="Instead of --time-unit, rescale times so the whole iteration's compute takes this long, e.g. "
                   "2s (the files' units differ between graphs).")
@click.option("--name", default=None, help="Graph name (default: the file's).")
@device_options
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path), help="Graph file to write.")
def checkmate(file: Path, time_unit: str, scale_to: str | None, name: str | None, out_path: Path, **kw) -> None:
    """Import a Checkmate/Moccasin node-link JSON graph (one op per node, cost_cpu time, cost_ram bytes)."""
    if scale_to is not None and given("time_unit"):
        raise HybridError("give --time-unit or --scale-to, not both: --scale-to sets the time scale itself")
    prepare_output(out_path, "--out")
    g = load_checkmate(file, time_unit, scale_to, None, name)
    if any(kw.get(k) is not None for k in DEVICE_KEYS):   # --memory 50%: a share of this graph's unswapped peak
        g.device = device_from(None, kw, peak_of=g)
    g.save(out_path)
    compute = sum(o.time_s for o in g.ops)
    click.echo(f"wrote {out_path}: {len(g.ops)} ops, {len(g.tensors)} tensors, compute {format_seconds(compute)}")
    if scale_to is None and not given("time_unit"):   # the files' units differ between graphs (README)
        click.echo(f"note: times read as --time-unit {time_unit} (the default): check that the iteration's "
                   f"{format_seconds(compute)} of compute is plausible, else give --time-unit or --scale-to",
                   err=True)
