"""Options shared by several subcommands (device flags, seeds, budgets) and file loading."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import click

from hybrid.device import PRESETS, Device, resolve_device
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.plan import Plan


def device_options(f: Callable) -> Callable:
    """--device/--memory/--h2d/--d2h/--latency; the graph's own device (else v100-16gb) is the base."""
    opts = [
        click.option("--device", "device_name", type=click.Choice(sorted(PRESETS)), default=None,
                     help="Device preset (default: the graph's own device, else v100-16gb)."),
        click.option("--memory", default=None, help="Device memory, e.g. 10GiB, 512MB (overrides the preset)."),
        click.option("--h2d", default=None, help="Host-to-device bandwidth, e.g. 12GB/s."),
        click.option("--d2h", default=None, help="Device-to-host bandwidth, e.g. 12GB/s."),
        click.option("--latency", default=None, help="Per-transfer latency, e.g. 10us."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def device_from(graph: Graph | None, kw: dict[str, Any]) -> Device:
    """Pop the device flags out of a command's kwargs and resolve them against the graph."""
    return resolve_device(graph.device if graph is not None else None, kw.pop("device_name", None),
                          kw.pop("memory", None), kw.pop("h2d", None), kw.pop("d2h", None), kw.pop("latency", None))


graph_option = click.option("--graph", "graph_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
                            help="Graph file (hybrid-graph/1).")
out_option = click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
                          help="Write the plan here (hybrid-plan/1).")
seed_option = click.option("--seed", type=int, default=1, show_default=True, help="Random seed.")
patience_option = click.option(
    "--refine-patience", "refine_patience", type=click.FloatRange(0.0, 1.0, min_open=True), default=0.1,
    show_default=True,
    help="When refinement has found nothing faster for this share of its budget, the GA resumes with the rest "
         "and the faster plan is kept (1: refine for the whole share).")


def load_graph(path: Path) -> Graph:
    return Graph.load(path)


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
