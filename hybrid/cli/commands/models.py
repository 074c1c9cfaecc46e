"""`hybrid models`: the model zoo, with parameter counts taken on the meta device (no weights allocated)."""
from __future__ import annotations

from typing import Any

import click

from hybrid.cli.options import parse_overrides
from hybrid.errors import HybridError
from hybrid.units import format_bytes
from hybrid.jsonio import report_json

PATTERNS = ("rnn-{L}-{X}k, brnn-{L}-{X}k (L layers, X*1024 hidden units), wresnet-{depth}-{X}, "
            "inception-v4-{X} (width scale X), nasnet-{R} (3R normal cells), resnet-{depth}")


def _row(spec: Any, count: Any) -> dict[str, Any]:
    return {"name": spec.name, "family": spec.family, "paper": spec.paper, "default_batch": spec.default_batch,
            "parameters": count, "parameter_bytes_fp32": None if count is None else 4 * count,
            "description": spec.description, "config": dict(spec.config)}


@click.command("models", epilog=f"Parameterised names: {PATTERNS}.")
@click.argument("names", nargs=-1)
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Override a setting of the named models, e.g. --set seq_len=20 (repeatable; "
                   "an unknown key lists the accepted ones).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def command(names: tuple[str, ...], sets: tuple[str, ...], as_json: bool) -> None:
    """List the model zoo: name, family, source paper, default batch, parameters, description.

    Without NAMES, lists one model per family and size the papers use; with
    NAMES (e.g. `hybrid models rnn-2-1k wresnet-50-4`), describes those.
    Parameters are counted on PyTorch's meta device, so nothing is allocated;
    bytes are at fp32. GPT-2 and Llama need `pip install 'hybrid-offload[transformers]'`
    to be counted.
    """
    from hybrid.zoo import get_model, list_models, parameter_count  # here, so the CLI starts without torch

    overrides = parse_overrides(sets)
    if overrides and not names:
        raise HybridError("--set needs model NAMES to apply to, e.g. hybrid models rnn-8-8k --set seq_len=20")
    specs = [get_model(n, **overrides) for n in names] if names else list_models()
    rows, missing = [], []
    for spec in specs:
        try:
            count: int | None = parameter_count(spec)
        except HybridError:
            if spec.family not in ("gpt2", "llama"):
                raise
            count = None
            missing.append(spec.name)
        rows.append(_row(spec, count))
    if as_json:
        click.echo(report_json(rows, indent=2))
        return
    from tabulate import tabulate

    table = [[r["name"], r["family"], r["paper"], r["default_batch"],
              "n/a" if r["parameters"] is None else f"{r['parameters']:,}",
              "n/a" if r["parameters"] is None else format_bytes(r["parameter_bytes_fp32"]), r["description"]]
             for r in rows]
    click.echo(tabulate(table, headers=["name", "family", "paper", "batch", "parameters", "fp32", "description"],
                        colalign=("left", "left", "left", "right", "right", "right", "left")))
    if missing:
        click.echo(f"\n{', '.join(missing)}: pip install 'hybrid-offload[transformers]' to build and count them.")
