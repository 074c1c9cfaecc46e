"""`hybrid place --graph G --cpu xeon-6248r --device p2200 --objective latency --out plan.json`: run the parts
of an inference graph on the host CPU and the GPU (the CPU/GPU partitioning paper)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import click

from hybrid.cli import clock
from hybrid.cli.options import load_graph, prepare_output, share_of_peak
from hybrid.errors import HybridError, InvalidPlanError
from hybrid.units import format_bytes, parse_duration, parse_share
from hybrid.jsonio import report_json

SCHEDULER_HELP = ("all-cpu, all-gpu, greedy (the paper's: each part on its faster device, then single flips "
                  "while they gain, 3 rounds without gain), heft (latency only), exact (dynamic programming on a "
                  "chain of parts, CP-SAT otherwise), or all (every one, a table; the plan written is the "
                  "fastest, exact's on a tie). Every one places within the GPU's usable memory: where all-gpu "
                  "does not fit it, greedy and heft move parts to the CPU (least time lost per byte freed first), "
                  "exact adds the memory to CP-SAT, and a row that cannot fit says 'does not fit'")

WRITE_S = 1.0   # kept back from --time-limit for building, validating and writing the plan


def _preset_key(name: object, table: dict) -> str | None:
    """The preset key (xeon-6248r) of a compute figures' name (Xeon Gold 6248R), else the name as it is."""
    if not name:
        return None
    return next((k for k, spec in table.items() if spec.name == name or k == name), str(name))


def cost_sources(original, base, final, device_preset: str | None, cpu_preset: str | None,  # noqa: ANN001 - Graphs
                 n_profiles: int) -> dict:
    """Which processors the GPU times (time_s) and host times (cpu_time_s) are for, and where they come from:
    `original` is the graph as loaded, `base` after --device/--cpu re-costing, `final` after --profile."""
    from hybrid.device import HOST_CPUS, PRESET_COMPUTE
    from hybrid.serve.costs import costed_for

    capture = original.extra.get("capture") if isinstance(original.extra.get("capture"), dict) else {}
    model = capture.get("costs") if isinstance(capture.get("costs"), dict) else {}
    placed = original.extra.get("placement_costs") if isinstance(original.extra.get("placement_costs"), dict) else {}
    after = final.extra.get("capture") if isinstance(final.extra.get("capture"), dict) else {}
    applied = [p for p in (after.get("profiles") or []) if isinstance(p, dict)] \
        if isinstance(after.get("profiles"), list) else []
    n = len(final.ops)

    def side(field: str, preset: str | None, table: dict, recorded: object, backend: str) -> dict:
        if preset is not None:   # re-costed here: only this command's profiles measured any op
            measured = sum(1 for b, f in zip(base.ops, final.ops) if getattr(b, field) != getattr(f, field))
            profiles = applied[len(applied) - n_profiles:] if n_profiles else []
            how = f"roofline, re-costed by --{'device' if field == 'time_s' else 'cpu'}"
        else:
            measured = sum(1 for o in final.ops if isinstance(o.extra.get("cost"), dict)
                           and o.extra["cost"].get(f"{field}_source") == "profile")
            profiles = applied
            preset = _preset_key(recorded, table)
            how = "roofline, as captured" if model.get("model") == "roofline" or placed.get(
                "gpu" if field == "time_s" else "cpu") else "the graph's own, source not recorded"
        names = sorted({str(p.get("device_name")) for p in profiles if p.get("backend") == backend
                        and p.get("device_name")})
        source = "measured" if measured == n else "roofline" if measured == 0 and how.startswith("roofline") else \
            "mixed" if measured else "graph"
        if measured == n:   # every op measured: the times are the profiled processor's, whatever preset came before
            preset = ", ".join(names) or preset
            how = "measured by `hybrid profile`" if names else "measured"
        elif measured:
            how = f"measured for {measured} of {n} ops" + (f" on {', '.join(names)}" if names else "") + \
                f", the rest {how}"
        if field == "cpu_time_s":   # an op without a host time pins its part to the GPU: say so, not a preset
            missing = sum(1 for o in final.ops if o.cpu_time_s is None)
            if missing == n:
                return {"times_for": None, "source": "none", "measured_ops": 0, "ops": n,
                        "text": "no op has cpu_time_s, so every part runs on the GPU; --cpu PRESET costs the "
                                "host"}
            if missing:
                how += (f"; {missing} of {n} ops {'has' if missing == 1 else 'have'} none, so their parts run on "
                        "the GPU")
        return {"times_for": preset, "source": source, "measured_ops": measured, "ops": n, "text": how}

    gpu_recorded = costed_for(original)   # serve's reading: re-costed, else captured, else the graph's device
    cpu_recorded = placed.get("cpu") or (model.get("cpu") or {}).get("name")
    return {"gpu": side("time_s", device_preset, PRESET_COMPUTE, gpu_recorded, "cuda"),
            "cpu": side("cpu_time_s", cpu_preset, HOST_CPUS, cpu_recorded, "cpu")}


def costs_line(costs: dict, dev) -> str:  # noqa: ANN001 - the Device placed for
    """One line naming the hardware the times are for and their source, and the link they cross."""
    def one(kind: str, c: dict) -> str:
        if c.get("source") == "none":
            return f"{kind}: none ({c['text']})"
        return f"{kind} {c['times_for'] or '(unnamed)'} ({c['text']})"

    return (f"times for: {one('GPU', costs['gpu'])}, {one('CPU', costs['cpu'])}; link of {dev.name}: "
            f"{dev.h2d_bytes_per_s / 1e9:g} GB/s h2d, {dev.d2h_bytes_per_s / 1e9:g} GB/s d2h")


@click.command("place")
@click.option("--graph", "graph_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="An inference graph (hybrid capture --optimizer none); a training graph is refused (its update ops "
                   "cannot run on the host).")
@click.option("--cpu", "cpu_preset", default=None,
              help="Re-cost host times (cpu_time_s) with this CPU preset: xeon-6248r (the paper's host), epyc-2c "
                   "(this project's machines), dgx1-host, ... Default: the graph's own cpu_time_s.")
@click.option("--device", "device_preset", default=None,
              help="Re-cost GPU times (time_s) with this preset and use its PCIe link, e.g. p2200 (the paper's "
                   "Quadro P2200 on PCIe 3.0). Default: the graph's own time_s and device.")
@click.option("--memory", default=None,
              help="What the GPU's copies may fill, e.g. 400MiB, or a share of the graph's unswapped peak, e.g. 50% "
                   "(no reserve then): parts whose parameters and activations do not fit go to the CPU. Default: "
                   "the device's usable memory.")
@click.option("--profile", "profiles", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Measured times from `hybrid profile` (a cpu profile sets cpu_time_s, a cuda one time_s); "
                   "applied after --cpu/--device; says how many ops each covers (matched by kernel and shapes), "
                   "and refuses one that covers none (another model's). Repeatable.")
@click.option("--objective", type=click.Choice(["latency", "throughput"]), default="latency", show_default=True,
              help="latency: one input, from host memory to its output back in host memory; throughput: a "
                   "stream of inputs pipelined across the parts (the busiest of CPU, GPU and each link "
                   "direction sets the time between outputs), placed by greedy and exact (heft places for "
                   "latency only: --scheduler heft is refused with it).")
@click.option("--scheduler", type=click.Choice(["all-cpu", "all-gpu", "greedy", "heft", "exact", "all"]),
              default="exact", show_default=True, help=SCHEDULER_HELP)
@click.option("--parts", type=click.Choice(["key", "fine"]), default="key", show_default=True,
              help="key: cut the chain only after pooling and concatenation (the paper's key operators); fine: "
                   "at every point where one tensor alone crosses.")
@click.option("--branches/--no-branches", default=True, show_default=True,
              help="Split stretches of independent branches (Inception modules, downsample paths) into one "
                   "part per branch and a join, so branches may run on both devices at once.")
@click.option("--time-limit", default="60s", show_default=True,
              help="CP-SAT's budget in its deterministic seconds (reproducible whatever the load), e.g. 30s, 5m; "
                   "it also bounds the whole command's wall clock, which then decides: the search stops 1 s before "
                   "it to lay out, check and write the plan, which takes longer on graphs of thousands of ops "
                   "(NASNet-25's 4,371: about 3 s; a note then says where the time went).")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="CP-SAT's random seed.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the placement as a plan (hybrid-plan/1 with a cpu stream).")
@click.option("--graph-out", "graph_out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the graph the plan belongs to: the re-costed one with --cpu/--device/--profile "
                   "(default then: next to --out, as NAME.graph.json), else a byte-for-byte copy of --graph (the "
                   "plan names its bytes), so that a script can always validate --out against --graph-out.")
@click.option("--show-parts", is_flag=True,
              help="Also print the parts: kind, ops, GFLOPs, parameter bytes, GPU and CPU time, bytes sent on.")
@click.option("--json", "as_json", is_flag=True,
              help="Print the result as JSON on stdout, with costs: the GPU and CPU the times are for, their "
                   "source (roofline, measured, mixed, graph: the graph's own, source not recorded, or none: no "
                   "op has a host time) and the link.")
def command(graph_path: Path, cpu_preset: str | None, device_preset: str | None, memory: str | None,
            profiles: tuple[Path, ...],
            objective: str, scheduler: str, parts: str, branches: bool, time_limit: str, seed: int,
            out_path: Path | None, graph_out: Path | None, show_parts: bool, as_json: bool) -> None:
    """Cut an inference graph into parts and place each on the host CPU or the GPU.

    Parts end where one tensor alone crosses (after pooling and concatenation with --parts key); a stretch
    of independent branches becomes one part per branch plus a join. Each placement is timed by the
    simulator: ops on the GPU's compute stream or the host's cpu stream, activations copied over h2d/d2h
    where devices change, parameters uploaded once. GPU parts' parameters stay resident, so every scheduler
    places within the device's usable memory (the graph's device, e.g. `hybrid capture --memory 400MiB`, or
    --device's card; each row prints the GPU memory its plan needs); where all-GPU does not fit it, parts
    move to the CPU and all-gpu's row says it does not fit. The plan validates with `hybrid validate`
    against the graph it was made from (the re-costed one when costs were changed) and runs with
    `hybrid execute`.

    \b
    Example:
      hybrid capture --model vgg16 --optimizer none --device p2200 --batch 1 --out vgg16.json
      hybrid place --graph vgg16.json --cpu xeon-6248r --device p2200 --scheduler all --out vgg16.place.json
    """
    from hybrid.device import resolve_device
    from hybrid.files import write_whole
    from hybrid.placement.costs import recost, with_profiles
    from hybrid.placement.memory import Budget, DoesNotFit, floor, not_even_floor, score
    from hybrid.placement.partition import part_graph, parts_table, require_inference
    from hybrid.placement.schedulers import SCHEDULERS, THROUGHPUT_SCHEDULERS, all_on, place
    from hybrid.placement.timing import link_of, to_plan
    from hybrid.units import format_seconds
    from hybrid.signals import deferred_interrupts, exit_status, interrupted_by, received
    from hybrid.validator import validate, write_plan

    if scheduler == "heft" and objective == "throughput":
        raise HybridError("--scheduler heft places for latency only; for --objective throughput use --scheduler "
                          f"{' or '.join(THROUGHPUT_SCHEDULERS)} (or all, for every scheduler's table)")
    prepare_output(out_path, "--out")
    limit = parse_duration(time_limit, "--time-limit")
    if limit <= 0:   # as optimize and milp: a limit of nothing is a usage error, not a solver's failure
        raise HybridError(f"--time-limit must be positive, got {time_limit!r}")
    g = original = load_graph(graph_path)
    require_inference(g, f"--graph {graph_path}")
    recosted = bool(cpu_preset or device_preset or profiles)
    coverage: list[dict] = []

    def covered(path: Path, hits: int, n: int, field_name: str) -> None:
        coverage.append({"profile": str(path), "ops_from_profile": hits, "ops": n, "field": field_name})
        click.echo(f"profile {path} covers {hits} of {n} ops ({field_name} measured, the rest as before)", err=True)

    base = recost(g, device_preset, cpu_preset)
    g = with_profiles(base, list(profiles), covered, str(graph_path))
    sources = cost_sources(original, base, g, device_preset, cpu_preset, len(profiles))
    if recosted:
        from hybrid.graph import Graph

        g = Graph.from_json(g.to_json())   # its sha256 is that of the file we write
        if graph_out is None and out_path is not None:
            graph_out = out_path.with_name(out_path.stem + ".graph.json")
    prepare_output(graph_out, "--graph-out")   # also refuses the --graph or --out file
    # a preset named here is a whole card, its reserve kept free for the CUDA context, as in every command
    # (`resolve_device`); the graph's own device as it is; none: the default card
    if g.device is None and not device_preset:
        click.echo("note: the graph names no device and no --device was given: placing for v100-16gb's PCIe link",
                   err=True)
    share = parse_share(memory, "--memory")
    if share is not None:
        memory = share_of_peak(g, share, resolve_device(g.device, device_preset), memory, keep_reserve=False)
    dev = resolve_device(g.device, device_preset, memory)
    if device_preset:
        g = type(g)(g.name, g.tensors, g.ops, dev, g.extra)
    link = link_of(dev)
    pg = part_graph(g, key_only=parts == "key", branches=branches)
    names = SCHEDULERS if scheduler == "all" else (scheduler,)
    budget = Budget.of(dev)
    all_gpu_bytes = all_on(pg, link, "gpu").gpu_bytes
    binds = all_gpu_bytes > budget.usable_bytes
    if binds:   # one clear error where no scheduler can fit, rather than one per row
        low = floor(pg, link)
        if not budget.fits(low):
            raise not_even_floor(pg, low, budget)
    placed: dict = {}
    unfit: dict[str, DoesNotFit] = {}
    left_out: list[str] = []
    # A first Ctrl-C or SIGTERM is noted, not raised: the scheduler running keeps its best placement so far (greedy's
    # correction loop, CP-SAT's search), the ones after it are left out, and the best placed is written
    t_search = time.monotonic()
    with deferred_interrupts():
        for name in names:
            if received() and placed:
                left_out.append(name)
                continue
            try:
                placed[name] = place(pg, link, name, objective, limit, seed,
                                     deadline=clock.deadline(limit) - WRITE_S, device=dev)
            except DoesNotFit as e:
                if scheduler != "all":
                    raise DoesNotFit(e.need, e.usable, f"--scheduler {name}" + (
                        "; greedy, heft and exact move parts to the CPU" if name == "all-gpu" else "")) from None
                unfit[name] = e
            except HybridError as e:
                if received():    # stopped before it found anything (CP-SAT's half second after a stop)
                    left_out.append(name)
                    continue
                if scheduler != "all":
                    raise
                click.echo(f"{name}: {e}", err=True)
    if not placed:
        if received():
            click.echo(f"interrupted ({interrupted_by()}) before any placement was found: nothing written", err=True)
            sys.exit(exit_status())
        raise HybridError("no scheduler could place this graph")
    t_build = time.monotonic()
    # built, checked and written whole even if a Ctrl-C or SIGTERM comes now (a large graph's layout and checks
    # take seconds: NASNet's 4,371 ops 3-8 s, and a stop then lost the placement found), a second one stops at once
    with deferred_interrupts():
        # memory also binds where all-GPU fits but a mixed placement's copies did not (`place` placed it again)
        binds = binds or any(p.extra.get("memory_binds") for p in placed.values())
        # the fastest placed, exact's on a tie: exact is never slower than greedy with its time, but a stop or the
        # time limit can leave its greedy hint uncorrected while greedy's own row had the time
        chosen = min(placed.values(), key=lambda p: (score(p, objective), p.scheduler != "exact"))
        plan = to_plan(pg, chosen, dev, link)
        arena = plan.planner.get("arena") if isinstance(plan.planner, dict) else None
        if binds and isinstance(arena, dict) and arena.get("laid_out") is False:   # `place` re-places to avoid this
            raise DoesNotFit(chosen.gpu_bytes, budget.usable_bytes,
                             f"the {chosen.scheduler} placement's copies fit at their peak, but no arena layout of "
                             f"them does (best {100 * float(arena.get('overflow', 0.0)):+.1f}%); give the GPU more "
                             "memory, or try --parts fine")
        plan.planner.update({"objective": objective, "parts_mode": parts, "branches": branches})
        report = validate(g, plan)
        if not report.valid:   # as `hybrid validate` reports an invalid plan: exit 1, nothing written
            v = report.violations[0]
            raise InvalidPlanError(f"the {chosen.scheduler} placement's plan fails validation, so nothing was written: "
                                   f"rule {v.rule}: {v.message}")
        if graph_out is not None and recosted:
            g.save(graph_out)
        elif graph_out is not None:
            write_whole(graph_out, graph_path.read_bytes())   # the plan names these bytes (sha256)
        if out_path is not None:
            write_plan(g, plan, out_path, "the placement plan")
    if clock.left(limit) < -max(0.5, 0.05 * limit):   # the search stops WRITE_S before the limit; a large graph's plan takes more
        t_end = time.monotonic()
        click.echo(f"note: took {format_seconds(t_end - clock.started())}, past the --time-limit of "
                   f"{format_seconds(limit)}: starting, loading and parting the graph "
                   f"{format_seconds(t_search - clock.started())}, the search {format_seconds(t_build - t_search)}, "
                   f"laying out, checking and writing the plan of {len(g.ops):,} ops "
                   f"{format_seconds(t_end - t_build)} (so a limit under about "
                   f"{format_seconds(t_end - clock.started() - (t_build - t_search))} cannot be held here)", err=True)
    if received():
        click.echo(f"interrupted ({interrupted_by()}): the best placement so far is {chosen.scheduler}'s"
                   + (f", written to {out_path}" if out_path is not None else "")
                   + (f"; left out: {', '.join(left_out)}" if left_out else ""), err=True)
    rows = [{"scheduler": k, "latency_s": p.latency_s, "period_s": p.period_s, "devices": p.code,
             "status": "placed for latency" if k == "heft" and objective == "throughput" else p.status,
             "gpu_bytes": p.gpu_bytes} if p is not None else
            {"scheduler": k, "latency_s": None, "period_s": None, "devices": "", "status": str(unfit[k]),
             "gpu_bytes": unfit[k].need}
            for k, p in ((k, placed.get(k)) for k in names if k in placed or k in unfit)]
    memory = {"usable_bytes": budget.usable_bytes, "all_gpu_bytes": all_gpu_bytes, "binds": binds,
              "line": None if not binds else
              (f"memory binds: all-gpu needs {format_bytes(all_gpu_bytes)} of {format_bytes(budget.usable_bytes)} "
               "usable; parts placed to fit") if all_gpu_bytes > budget.usable_bytes else
              (f"memory binds: a mixed placement's copies did not fit the {format_bytes(budget.usable_bytes)} "
               "usable (all-gpu's do); parts placed to fit")}
    costs = {**{k: {f: v for f, v in c.items() if f != "text"} for k, c in sources.items()},
             "link": {"device": dev.name, "h2d_bytes_per_s": dev.h2d_bytes_per_s,
                      "d2h_bytes_per_s": dev.d2h_bytes_per_s},
             "line": costs_line(sources, dev)}
    if as_json:
        click.echo(report_json({"graph": g.name, "parts": pg.n, "describe": pg.describe(), "objective": objective,
                               "part_table": parts_table(pg).to_dict("records") if show_parts else None,
                               "placements": rows, "plan": str(out_path) if out_path else None,
                               "graph_out": str(graph_out) if graph_out else None,
                               "profiles": coverage, "costs": costs, "memory": memory}, indent=1))
        return
    click.echo(f"{g.name}: {pg.n} parts ({parts}{', branches' if branches else ''}): {pg.describe()}")
    click.echo(costs["line"])
    if show_parts:   # bytes in human units here; --json's part_table keeps them in bytes
        table = parts_table(pg).rename(columns={"param_bytes": "params", "out_bytes": "sent"})
        click.echo(table.to_string(index=False, float_format=lambda x: f"{x:.4g}",
                                   formatters={"params": format_bytes, "sent": format_bytes}))
    if memory["line"]:
        click.echo(memory["line"])
    click.echo(f"{'scheduler':10} {'latency':>10} {'period':>10} {'GPU mem':>10}  devices (C/G per part)")
    for r in rows:
        lat = format_seconds(r["latency_s"]) if r["latency_s"] is not None else "-"
        per = format_seconds(r["period_s"]) if r["period_s"] is not None else "-"
        click.echo(f"{r['scheduler']:10} {lat:>10} {per:>10} {format_bytes(r['gpu_bytes']):>10}  "
                   f"{r['devices']}{'  (' + r['status'] + ')' if r['status'] else ''}")
    if out_path is not None:
        click.echo(f"wrote {out_path} ({chosen.scheduler}, valid)" +
                   (f" for the re-costed graph {graph_out}" if recosted and graph_out else
                    f" for {graph_out} (a copy of {graph_path})" if graph_out else ""))
    elif graph_out is not None:
        click.echo(f"wrote {graph_out} ({'the re-costed graph' if recosted else f'a copy of {graph_path}'}; "
                   "no plan: give --out for one)")
