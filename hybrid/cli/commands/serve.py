"""`hybrid serve --graph G --models N --rate R ...`: serving several models on one GPU (SwapAdvisor Figure 8)."""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import click

from hybrid.cli.options import device_from, device_options, given, load_graph, prepare_output
from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.serve import POLICIES, ServeConfig, model_costs, simulate_serving
from hybrid.graph.info import training_reason
from hybrid.serve.costs import costed_for, recost_for
from hybrid.serve.simulate import ModelCosts, check_arrivals, resident_bytes
from hybrid.units import format_bytes, format_seconds, parse_duration, parse_share
from hybrid.jsonio import report_json


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
            if not math.isfinite(r):
                raise HybridError(f"--rate {part!r}: must be a finite number of requests per second, e.g. --rate 100")
            if not r > 0:
                raise HybridError(f"--rate {part!r}: must be positive requests per second")
            out.append(r)
    if not out:
        raise HybridError("--rate is required: requests per second, e.g. --rate 50,100,200")
    return tuple(out)


def refuse_ignored_flags(policies: tuple[str, ...], planner: str) -> None:
    """A flag the chosen policies or planner never read would be silently ignored: refuse it instead, so a
    table is never mistaken for one made with it."""
    chosen = policies or POLICIES
    if given("resident") and "time-shared" not in chosen:
        raise HybridError(f"--resident applies to --policy time-shared only, which --policy {','.join(chosen)} "
                          "leaves out; drop --resident or add --policy time-shared")
    for flag in ("planner", "generations"):
        if given(flag) and "swapping" not in chosen:
            raise HybridError(f"--{flag} plans the swapping policy's swaps, which --policy {','.join(chosen)} "
                              f"leaves out; drop --{flag} or add --policy swapping")
    if given("generations") and planner != "ga":
        raise HybridError(f"--generations applies to --planner ga only, not --planner {planner}; drop "
                          "--generations or add --planner ga")


def captured_batch(graph: Graph, path: Path) -> int | None:
    """The batch `graph` was captured at (its `model.batch`; a `--module` capture records none, so then the
    leading dimension its input tensors all share), or None when neither says (a hand-edited file: --batch then
    says what it is)."""
    def whole(b: object) -> bool:
        return isinstance(b, int) and not isinstance(b, bool) and b >= 1

    model = graph.extra.get("model")
    b = model.get("batch") if isinstance(model, dict) else None
    if not whole(b):
        leading = {t.extra["shape"][0] if isinstance(t.extra.get("shape"), list) and t.extra["shape"] else None
                   for t in graph.tensors if t.kind == "input"}
        b = leading.pop() if len(leading) == 1 else None
    return b if whole(b) else None


def serving_batch(graphs: list[Graph], paths: tuple[Path, ...], batch: int | None) -> int:
    """The one batch every model serves at. Service times are each graph's own, for the batch it was captured
    at, so graphs captured at different batches, or a --batch other than theirs, are refused rather than timed
    at the wrong size; a graph that records no batch is served at --batch as it is."""
    recorded = [(p, captured_batch(g, p)) for g, p in zip(graphs, paths)]
    known = [(p, b) for p, b in recorded if b is not None]
    for p, b in known[1:]:
        if b != known[0][1]:
            raise HybridError(f"--graph {known[0][0]} is captured at batch {known[0][1]} and {p} at batch {b}; "
                              "serve runs every model at one batch size: capture them at one --batch")
    if batch is not None:
        if known and batch != known[0][1]:
            raise HybridError(f"--batch {batch}: {known[0][0]} is captured at batch {known[0][1]}, and its "
                              f"service times are for that batch; capture it with --batch {batch}, or drop --batch")
        return batch
    missing = [p for p, b in recorded if b is None]
    if missing:
        raise HybridError(f"--batch: {missing[0]} does not record its batch as a positive whole number (model.batch); "
                          "give --batch")
    return known[0][1]


def serving_graphs(graphs: list[Graph], paths: tuple[Path, ...], dev: Device, device_name: str | None,
                   memory: str | None) -> list[Graph]:
    """The graphs with op times for the GPU they are served on. --device re-costs each graph costed for another
    preset; without it the times are the graphs' own, and graphs made for different devices are refused unless
    --memory names the GPU they share (the times then stay each graph's own, as the summary says)."""
    if device_name is not None:
        return [g if costed_for(g) == device_name else recost_for(g, dev, str(p)) for g, p in zip(graphs, paths)]
    if memory is None:
        for g, p in zip(graphs[1:], paths[1:]):
            a, b = graphs[0].device, g.device
            if a != b:
                detail = a is not None and b is not None and a.name == b.name
                raise HybridError(f"--graph {paths[0]} is for {describe(a, detail)} and {p} for "
                                  f"{describe(b, detail)}; serve them on one GPU with --device (re-costs their "
                                  "times) or --memory")
    return graphs


def plain(v: float, decimals: int) -> str:
    """A table cell without an exponent (1.032e+04 reads as 10320.00): `decimals` places."""
    return f"{v:.{decimals}f}"


def plain_table(shown) -> str:  # noqa: ANN001 - the DataFrame of printed columns
    """The printed table: times and rates as plain decimals, never in exponent form."""
    return shown.to_string(index=False, formatters={
        "rate": lambda v: f"{v:.6f}".rstrip("0").rstrip("."), "throughput": lambda v: plain(v, 2),
        "p50_ms": lambda v: plain(v, 2), "p99_ms": lambda v: plain(v, 2), "utilization": lambda v: plain(v, 3)})


def not_shared_note(costs: list[ModelCosts], copies: int | None, memory_bytes: int) -> str | None:
    """What the not-shared rows are when the models cannot all stay resident: the paper's ideal, every model as
    if alone on the GPU; None when they all fit (then the rows are what one GPU would do)."""
    need = resident_bytes(costs)
    if need <= memory_bytes:
        return None
    params = (f"{copies} x {format_bytes(costs[0].param_bytes)}" if copies is not None
              else format_bytes(sum(c.param_bytes for c in costs)))
    return (f"each model as if alone on the GPU (the ideal; {params} of parameters and "
            f"{format_bytes(max(c.workspace_bytes for c in costs))} of activations do not fit in "
            f"{format_bytes(memory_bytes)})")


def io_note(costs: list[ModelCosts], dev: Device) -> str:
    """The one line saying what no service time counts: a batch's upload of its inputs and download of its
    outputs, in MiB and in ms over the device's link, per distinct model."""
    seen: dict[tuple[int, int], list[str]] = {}
    for c in costs:
        seen.setdefault((c.input_bytes, c.output_bytes), []).append(c.name)

    tail = "so req/s can exceed what `hybrid place --objective throughput` finds"
    if len(seen) == 1:
        (i, o), = seen
        return (f"note: service times are compute only (the paper's model): a batch's input upload "
                f"({format_bytes(i)}, {format_seconds(i / dev.h2d_bytes_per_s)}) and output download "
                f"({format_bytes(o)}, {format_seconds(o / dev.d2h_bytes_per_s)}) are not counted, {tail}")
    per = "; ".join(f"{names[0]}: {format_bytes(i)} in, {format_bytes(o)} out" for (i, o), names in seen.items())
    return (f"note: service times are compute only (the paper's model): a batch's input upload and output download "
            f"are not counted ({per}), {tail}")


def describe(dev: Device | None, detail: bool = False) -> str:
    """A graph's device in a message: its name, with memory and link when `detail` (two may share a name)."""
    if dev is None:
        return "no device"
    if not detail:
        return dev.name
    return (f"{dev.name} ({format_bytes(dev.memory_bytes)}, reserve {format_bytes(dev.reserve_bytes)}, "
            f"{dev.h2d_bytes_per_s / 1e9:g} GB/s to the device)")


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
              help="Requests per batch: every BATCH consecutive arrivals form one batch for a random model. "
                   "Service times are each graph's own, for the batch it was captured at, so BATCH must equal "
                   "that (default: it; every --graph must be captured at one batch); required for graphs that "
                   "record none.")
@click.option("--policy", "policies", multiple=True, type=click.Choice(POLICIES),
              help="Policies to compare (repeatable) [default: all]: not-shared (parameters always resident), "
                   "time-shared (whole models copied in on a miss), swapping (each model's swap plan in its share "
                   "of memory; the swap plans are made only when swapping is served).")
@click.option("--planner", type=click.Choice(["belady", "ga"]), default="belady", show_default=True,
              help="How swapping's plans are made: the Belady planner on the program order, or the genetic search "
                   "for --generations (refused when --policy leaves out swapping).")
@click.option("--generations", type=int, default=20, show_default=True,
              help="GA generations with --planner ga (refused with another planner).")
@click.option("--resident", type=int, default=None,
              help="time-shared: keep at most this many models resident (the paper's baseline: 1) [default: as "
                   "many as fit in --memory]; refused when --policy leaves out time-shared.")
@click.option("--seed", type=click.IntRange(min=0), default=1, show_default=True, help="Seed of the arrivals, model draws and the GA.")
@device_options
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the table as CSV.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Plot p99 latency against throughput (PNG), like the paper's Figure 8.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object instead of text: models (each served model's costs: ideal_s, swap_s "
                   "(null when swapping is not served), param_bytes, workspace_bytes, input_bytes and "
                   "output_bytes (a batch's, not counted in any time)), times_costed_for (the device each model's "
                   "times are for), device, batch, share_bytes (each model's memory for swapping; null when "
                   "swapping is not served), not_shared (null, or why not-shared's rows are the ideal) and rows "
                   "(one record per policy and rate, the table's columns and more).")
def command(graph_paths: tuple[Path, ...], copies: int | None, rates: tuple[str, ...], duration: str,
            batch: int | None, policies: tuple[str, ...], planner: str, generations: int, resident: int | None, seed: int,
            csv_path: Path | None, plot_path: Path | None, as_json: bool, **kw) -> None:
    """Simulate serving models on one GPU with Poisson arrivals: p50/p99 latency and throughput per policy and rate.

    \b
    --memory is the GPU memory the models share (default: the device's, less its reserve). swapping gives each
    model an equal share and plans its swaps there; time-shared keeps whole models resident while they fit and
    copies a model's parameters in before a batch when it is not; not-shared is the ideal (compute only; each
    model as if alone on the GPU when they do not all fit, as the note under the table says).
    One GPU serves batches first come, first served; the same arrivals (a seed) are used for every policy.
    Service times are compute only, as in the paper: a batch's input upload and output download are not
    counted (a note says how many MiB), so an output-heavy model (a language model's logits) serves more
    requests/s here than `hybrid place --objective throughput` finds for it.
    Compute times are each graph's own (the summary names the device they were costed for); --device re-costs
    them for that preset from each op's recorded FLOPs and bytes. Graphs made for different devices need
    --device or --memory. Only inference graphs are served (capture with --optimizer none).

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
    refuse_ignored_flags(policies, planner)
    for p in graph_paths:
        if not p.is_file():
            raise HybridError(f"--graph {p}: no such file")
    duration_s = parse_duration(duration, "--duration")
    check_arrivals(rate_values, duration_s)   # before any work: an expected count too large to hold is refused
    prepare_output(csv_path, "--csv")
    prepare_output(plot_path, "--plot", figure=True)
    graphs = [load_graph(p) for p in graph_paths]
    for g, p in zip(graphs, graph_paths):
        why = training_reason(g)
        if why is not None:
            raise HybridError(f"--graph {p} is a training graph ({why}); serve simulates inference: capture it "
                              "with `hybrid capture ... --optimizer none`")
        drawing = next((op for op in g.ops if op.updates), None)   # a random op's generator: timed all the same
        if drawing is not None:
            click.echo(f"note: --graph {p}: op {drawing.id!r} draws random numbers (dropout left in train mode?); a "
                       "served model usually runs in eval mode: capture it after module.eval()", err=True)
    batch = serving_batch(graphs, graph_paths, batch)
    device_name, memory = kw.get("device_name"), kw.get("memory")
    if parse_share(memory, "--memory") is not None and len(graphs) > 1:   # whose peak would it be?
        raise HybridError(f"--memory {memory}: a percentage is a share of one graph's unswapped peak, and serve was "
                          f"given {len(graphs)} graphs; give a size, e.g. --memory 10GiB")
    dev = device_from(graphs[0], kw, recosts=True)   # serving_graphs re-costs the ops for --device
    graphs = serving_graphs(graphs, graph_paths, dev, device_name, memory)
    times_for = [costed_for(g) for g in graphs]
    n = copies if copies is not None else len(graphs)
    share = dev.usable_bytes // n
    served = tuple(policies) or POLICIES
    swapping = "swapping" in served   # only then a swap plan per model, and a share that must hold each op
    costs = []
    for g in graphs:
        c = model_costs(g, dev, share, planner, generations, seed, swapping=swapping)  # type: ignore[arg-type]
        costs += [c] * (n if copies is not None else 1)
    if copies is not None:
        costs = [dataclasses.replace(c, name=f"{c.name}#{i}") for i, c in enumerate(costs)]
        times_for = times_for * n
    cfg = ServeConfig(rates=rate_values, batch=batch, duration_s=duration_s, seed=seed,
                      memory_bytes=dev.usable_bytes, h2d_bytes_per_s=dev.h2d_bytes_per_s,
                      policies=served, resident=resident)
    df = simulate_serving(costs, cfg)
    ideal = not_shared_note(costs, copies, dev.usable_bytes) if "not-shared" in served else None
    io = io_note(costs, dev)
    if csv_path is not None:
        from hybrid.files import atomic_open

        with atomic_open(csv_path, "w", newline="") as f:
            df.to_csv(f, index=False)
    if plot_path is not None:
        from hybrid.serve.plot import plot_latency

        plot_latency(df, plot_path, f"{n} model(s), {format_bytes(dev.usable_bytes)}, batch {batch}",
                     notes={"not-shared": "ideal, each model as if alone (they do not all fit)"} if ideal else None,
                     footnote="compute only: a batch's input upload and output download are not counted")
    if as_json:
        click.echo(report_json({"models": [dataclasses.asdict(c) for c in costs], "times_costed_for": times_for,
                               "device": dev.name, "batch": batch, "share_bytes": share if swapping else None,
                               "not_shared": ideal, "rows": df.to_dict("records")}, indent=1))
        return
    recosted = device_name is not None
    distinct = sorted({str(t) for t in times_for})
    if recosted:
        times = f"re-costed for {device_name} from each op's FLOPs and bytes (roofline)"
    elif len(distinct) == 1 and times_for[0] is not None:
        times = f"the graph's own, costed for {times_for[0]}"
    else:
        times = "each graph's own, costed for the device named per model"
    each = f" ({format_bytes(share)} each for swapping)" if swapping else ""
    lines = [f"{n} model(s) on {dev.name}: {format_bytes(dev.usable_bytes)} shared{each}, batch {batch}, "
             f"{duration_s:g} s of arrivals, seed {seed}", f"  compute times: {times}"]
    shown_models = list(zip(costs, times_for))
    if copies is not None:
        shown_models = shown_models[:1]
    for c, t in shown_models:
        name = f"{c.name[:c.name.rindex('#')]}#0..#{n - 1}" if copies is not None and n > 1 else c.name
        where = f" (costed for {t or 'an unnamed device'})" if len(distinct) > 1 and not recosted else ""
        plan = f", swap plan {c.swap_s * 1e3:.2f} ms" if c.swap_s is not None else ""
        lines.append(f"  {name}: compute {c.ideal_s * 1e3:.2f} ms{where}{plan}, "
                     f"parameters {format_bytes(c.param_bytes)} ({c.param_bytes / dev.h2d_bytes_per_s * 1e3:.2f} ms "
                     "to copy in)")
    click.echo("\n".join(lines))
    shown = df.assign(p50_ms=df.p50_s * 1e3, p99_ms=df.p99_s * 1e3)[
        ["policy", "rate", "requests", "throughput", "p50_ms", "p99_ms", "utilization", "model_loads"]]
    click.echo(plain_table(shown))
    if ideal:
        click.echo(f"note: not-shared: {ideal}")
    click.echo(io)
    for path in (csv_path, plot_path):
        if path is not None:
            click.echo(f"wrote {path}")
