"""`hybrid serve --graph G --models N --rate R ...`: serving several models on one GPU (SwapAdvisor Figure 8)."""
from __future__ import annotations

from pathlib import Path

import click

from hybrid.cli.options import device_from, device_options, load_graph, prepare_output
from hybrid.errors import HybridError
from hybrid.serve import POLICIES, ServeConfig, model_costs, simulate_serving
from hybrid.units import format_bytes, parse_duration


def parse_rates(items: tuple[str, ...]) -> tuple[float, ...]:
    """--rate 50 --rate 100,200 -> (50.0, 100.0, 200.0); a one-line error names the bad value."""
    out: list[float] = []
    for item in items:
        for part in str(item).split(","):
            try:
                r = float(part)
            except ValueError:
                raise HybridError(f"--rate {part!r}: write requests per second, e.g. --rate 100 or --rate 50,100,200") \
                    from None
            if not r > 0:
                raise HybridError(f"--rate {part!r}: must be positive requests per second")
            out.append(r)
    if not out:
        raise HybridError("--rate is required: requests per second, e.g. --rate 50,100,200")
    return tuple(out)


@click.command("serve")
@click.option("--graph", "graph_paths", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="An inference graph to serve (repeat for several different models), e.g. from `hybrid capture "
                   "--model resnet-152 --optimizer none --batch 16`.")
@click.option("--models", "copies", type=int, default=None,
              help="Serve this many copies of the one --graph, each with its own parameters (the paper's 4 and 16).")
@click.option("--rate", "rates", multiple=True,
              help="Poisson arrival rate in requests/s (repeat, or comma-separated: 50,100,200). Required.")
@click.option("--duration", default="60s", show_default=True, help="Simulated arrival window, e.g. 60s, 5m.")
@click.option("--batch", type=int, default=None,
              help="Requests per batch: every BATCH consecutive arrivals form one batch for a random model "
                   "(default: the batch the graph was captured at; service times are that graph's).")
@click.option("--policy", "policies", multiple=True, type=click.Choice(POLICIES),
              help="Policies to compare (repeatable) [default: all]: not-shared (parameters always resident), "
                   "time-shared (whole models copied in on a miss), swapping (each model's swap plan in its share "
                   "of memory).")
@click.option("--planner", type=click.Choice(["belady", "ga"]), default="belady", show_default=True,
              help="How swapping's plans are made: the Belady planner on the program order, or the genetic search "
                   "for --generations.")
@click.option("--generations", type=int, default=20, show_default=True, help="GA generations with --planner ga.")
@click.option("--resident", type=int, default=None,
              help="time-shared: keep at most this many models resident (the paper's baseline: 1) [default: as "
                   "many as fit in --memory].")
@click.option("--seed", type=int, default=1, show_default=True, help="Seed of the arrivals, model draws and the GA.")
@device_options
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the table as CSV.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Plot p99 latency against throughput (PNG), like the paper's Figure 8.")
@click.option("--json", "as_json", is_flag=True, help="Print the table as JSON records instead of text.")
def command(graph_paths: tuple[Path, ...], copies: int | None, rates: tuple[str, ...], duration: str,
            batch: int | None, policies: tuple[str, ...], planner: str, generations: int, resident: int | None, seed: int,
            csv_path: Path | None, plot_path: Path | None, as_json: bool, **kw) -> None:
    """Simulate serving models on one GPU with Poisson arrivals: p50/p99 latency and throughput per policy and rate.

    \b
    --memory is the GPU memory the models share (default: the device's, less its reserve). swapping gives each
    model an equal share and plans its swaps there; time-shared keeps whole models resident while they fit and
    copies a model's parameters in before a batch when it is not; not-shared is the ideal (compute only).
    One GPU serves batches first come, first served; the same arrivals (a seed) are used for every policy.

    \b
    Examples:
      hybrid serve --graph resnet152-b16.json --models 16 --memory 3GiB --rate 100,200,300 --plot fig8.png
      hybrid serve --graph a.json --graph b.json --memory 1GiB --rate 20 --policy swapping --json
    """
    rate_values = parse_rates(rates)
    if not graph_paths:
        raise HybridError("--graph is required: an inference graph to serve (repeat for several models)")
    if copies is not None:
        if copies < 1:
            raise HybridError(f"--models must be at least 1, got {copies}")
        if len(graph_paths) != 1:
            raise HybridError(f"--models copies one --graph; {len(graph_paths)} were given (drop --models to serve "
                              "each --graph once)")
    if generations < 1:
        raise HybridError(f"--generations must be at least 1, got {generations}")
    for p in graph_paths:
        if not p.is_file():
            raise HybridError(f"--graph {p}: no such file")
    duration_s = parse_duration(duration, "--duration")
    prepare_output(csv_path, "--csv")
    prepare_output(plot_path, "--plot", figure=True)
    graphs = [load_graph(p) for p in graph_paths]
    dev = device_from(graphs[0], kw)
    if batch is None:
        batch = int((graphs[0].extra.get("model") or {}).get("batch") or 0)
        if batch < 1:
            raise HybridError(f"--batch: {graph_paths[0]} does not record its batch; give --batch")
    n = copies if copies is not None else len(graphs)
    share = dev.usable_bytes // n
    costs = []
    for g in graphs:
        c = model_costs(g, dev, share, planner, generations, seed)  # type: ignore[arg-type]
        costs += [c] * (n if copies is not None else 1)
    if copies is not None:
        import dataclasses

        costs = [dataclasses.replace(c, name=f"{c.name}#{i}") for i, c in enumerate(costs)]
    cfg = ServeConfig(rates=rate_values, batch=batch, duration_s=duration_s, seed=seed,
                      memory_bytes=dev.usable_bytes, h2d_bytes_per_s=dev.h2d_bytes_per_s,
                      policies=tuple(policies) or POLICIES, resident=resident)
    df = simulate_serving(costs, cfg)
    if csv_path is not None:
        from hybrid.files import atomic_open

        with atomic_open(csv_path, "w", newline="") as f:
            df.to_csv(f, index=False)
    if plot_path is not None:
        from hybrid.serve.plot import plot_latency

        plot_latency(df, plot_path, f"{n} model(s), {format_bytes(dev.usable_bytes)}, batch {batch}")
    if as_json:
        import json

        click.echo(json.dumps({"models": [c.__dict__ for c in costs[:len(graphs)]] if copies is None else
                               [costs[0].__dict__], "share_bytes": share, "rows": df.to_dict("records")}, indent=1))
        return
    lines = [f"{n} model(s) on {dev.name}: {format_bytes(dev.usable_bytes)} shared ({format_bytes(share)} each for "
             f"swapping), batch {batch}, {duration_s:g} s of arrivals, seed {seed}"]
    for c in (costs if copies is None else costs[:1]):
        lines.append(f"  {c.name}: compute {c.ideal_s * 1e3:.2f} ms, swap plan {c.swap_s * 1e3:.2f} ms, parameters "
                     f"{format_bytes(c.param_bytes)} ({c.param_bytes / dev.h2d_bytes_per_s * 1e3:.2f} ms to copy in)")
    click.echo("\n".join(lines))
    shown = df.assign(p50_ms=df.p50_s * 1e3, p99_ms=df.p99_s * 1e3)[
        ["policy", "rate", "requests", "throughput", "p50_ms", "p99_ms", "utilization", "model_loads"]]
    click.echo(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
