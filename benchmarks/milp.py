"""MO-SOS MILP: how far it scales, the MO-SOS paper's comparison (§3), and a CPU run of a MO-SOS plan.

The scale and paper parts score the model's own plans (`milp.api.solve_milp`: byte budgets, the paper's memory
model, no arena layout); the execute part runs `plan_milp`'s laid-out plan, as `hybrid milp` writes it.

`--part scale`: solve MO-SOS at growing stage counts (fine synthetic training graphs, one stage per op, and
the captured VGG19 coarsened to N stages) with HiGHS, one thread, the given time limit and a 1% gap; one row
per run with variables, constraints, solve time, status and gap. Writes results/milp_scale.{md,csv}.

`--part paper`: VGG19 (227x227, batch 144) and UNet (256x256, batch 120) captured with SGD, a P40 preset
(24 GB, 12 GB/s d2h, 11 GB/s h2d), memory at the given fractions of the unswapped peak: MO-SOS,
Checkmate-Auto and STR-Auto from the same model on the coarsened graph, and `hybrid optimize`'s search
(swap + recompute, default impls) for a fixed number of generations. Each convolution's implementations are
the ones capture emits (hybrid.capture.conv_impls: the library call, im2col + GEMM, Winograd F(2x2,3x3) whole
and in 4 batch pieces, roofline time and workspace). Writes results/milp.{md,csv}. Full run (5 fractions x 2
graphs x 3 solves of up to --time-limit, plus the searches): about 20 minutes at 60 s per solve on this
2-core machine; `--quick` (VGG19 at 0.8 and 0.6, 30 stages, 300 branch-and-bound nodes per solve, 3 generations): about a minute,
the same figures every run.

`--part execute`: examples/convnet captured, a MO-SOS plan on a roomy memory (it picks Winograd where the
roofline says it is faster), run by the CPU executor and compared with eager training. Writes
results/milp_execute.{md,csv}; under a minute (`--quick` is the same run).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from benchmarks.common import ROOT, write_table
from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.graph.info import largest_op, unswapped_peak
from hybrid.graph.synthetic import training_graph
from milp.api import KINDS, plan_milp, solve_milp
from milp.solve import SolveOptions


def paper(kind: str):  # noqa: ANN201 - milp.model.ModelOptions
    """The paper's model of `kind`: activations only, one copy in flight per direction, no blocking prefetch
    (`hybrid milp --activations-only --link paper --no-stalls`); today's defaults manage persistent tensors too."""
    return replace(KINDS[kind], persistent=False, link="paper", stalls=False)


GiB = 1 << 30
P40 = Device("p40-24gb", 24 * GiB, 11e9, 12e9, 0.0)  # MO-SOS §3.1: offload >= 12 GB/s, prefetch >= 11 GB/s
PAPER = "MO-SOS, §3: -13.53% vs Checkmate-Auto, -4.36% vs STR-Auto, VGG19 and UNet on a P40"


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def capture(model: str, folder: Path) -> Path:
    """The zoo model captured with SGD (made once per folder; a file from before capture emitted forward and
    backward convolution impls is captured again)."""
    path = folder / f"{model}.json"
    if path.exists() and not {"convolution", "convolution_backward"} <= {o.kind for o in Graph.load(path).ops
                                                                         if o.impls}:
        path.unlink()
    if not path.exists():
        subprocess.run([sys.executable, "-m", "hybrid.cli.main", "capture", "--model", model, "--optimizer", "sgd",
                        "--out", str(path)], check=True, cwd=ROOT)
    return path


def _row(run, graph: Graph, frac: float | None) -> dict:
    d = {"graph": graph.name, "ops": len(graph.ops), "memory_frac": frac, **run.row()}
    if run.plan is not None and d["makespan_s"]:
        d["ideal/makespan"] = d["ideal_s"] / d["makespan_s"]
    return d


def part_scale(args: argparse.Namespace) -> None:
    so = SolveOptions("highs", args.time_limit, 0.01, 1, node_limit=args.node_limit)
    rows = []
    cases: list[tuple[Graph, int | None]] = []
    for n_layers in (int(x) for x in args.layers.split(",") if x):
        cases.append((training_graph(n_layers, seed=1, impls_prob=0.5, workspace_prob=0.3), None))
    vgg_path = capture("vgg19", Path(args.graphs))
    vgg = Graph.load(vgg_path)
    for s in (int(x) for x in args.stages.split(",") if x):
        cases.append((vgg, s))
    for g, stages in cases:
        dev = replace(P40 if stages else g.device, memory_bytes=int(unswapped_peak(g) * args.scale_fraction))
        try:
            start, note, t0 = None, None, time.monotonic()
            if args.warm_start:
                # The paper part's warm start: Checkmate-Auto's solution (no copies, leanest impls) with Auto's
                # impls, feasible for MO-SOS on the same stages; its solve counts in the MO-SOS run's limit.
                ca = solve_milp(g, dev, "checkmate-auto", stages, replace(so, gap=0.0, time_limit_s=args.time_limit / 4),
                               require=False, model_options=paper("checkmate-auto"))
                start = ca.auto_values
                note = (f"started from Checkmate-Auto's solution ({ca.result.status}, {ca.result.solve_s:.1f} s, "
                        f"makespan {ca.plan.makespan_s:.4f} s)" if ca.plan is not None else
                        f"Checkmate-Auto found no start ({ca.result.status})")
            left = args.time_limit - (time.monotonic() - t0)
            run = solve_milp(g, dev, "mosos", stages, replace(so, time_limit_s=max(1.0, left)), require=False,
                            start=start, model_options=paper("mosos"))
            row = _row(run, g, args.scale_fraction)
            if note is not None:
                row["total_s"] = time.monotonic() - t0
                row["note"] = note
        except HybridError as e:
            row = {"graph": g.name, "ops": len(g.ops), "stages": stages, "status": f"error: {e}"}
        rows.append(row)
        print({k: row.get(k) for k in ("graph", "stages", "variables", "constraints", "solve_s", "status", "gap")},
              flush=True)
        if args.parts:
            _write_scale_part(row, g, stages, args, time.monotonic() - t0)
        else:
            _write_scale(rows, args, so, vgg_path)


def _scale_parts_dir() -> Path:
    from benchmarks.common import RESULTS, quick_stem

    return RESULTS / quick_stem("milp_scale_parts")


def _scale_settings(args: argparse.Namespace) -> dict:
    """What every part of one scale table must share."""
    return {"time_limit": args.time_limit, "node_limit": args.node_limit, "scale_fraction": args.scale_fraction,
            "warm_start": bool(args.warm_start)}


def _write_scale_part(row: dict, g: Graph, stages: int | None, args: argparse.Namespace, wall_s: float) -> None:
    """One run of the scale sweep as a part (results/milp_scale_parts/<case>.{csv,json}), with its command,
    commit and wall time; `--merge-parts` writes the table from them."""
    import json

    from benchmarks.common import command_line
    from benchmarks.common import commit as code_commit

    folder = _scale_parts_dir()
    folder.mkdir(parents=True, exist_ok=True)
    case = f"{g.name}-s{stages}" if stages else g.name
    pd.DataFrame([row]).to_csv(folder / f"{case}.csv", index=False)
    meta = {"case": case, "layers": None if stages else int(g.name.split("-")[1]), "stages": stages,
            **_scale_settings(args), "command": command_line(), "commit": code_commit(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "wall_s": wall_s}
    (folder / f"{case}.json").write_text(json.dumps(meta, indent=1) + "\n")


def merge_scale_parts(args: argparse.Namespace) -> None:
    """The scale table from results/milp_scale_parts/: the parts must share their settings (time limit, node
    limit, memory fraction, warm start) and cover --layers and --stages once each; the rows come in the order a
    single run writes them."""
    import json

    metas = {json.loads(m.read_text())["case"]: (json.loads(m.read_text()), pd.read_csv(m.with_suffix(".csv")))
             for m in sorted(_scale_parts_dir().glob("*.json"))}
    want = [f"synthetic-{n}-1" for n in (int(x) for x in args.layers.split(",") if x)] + \
        [f"vgg19-b144-s{s}" for s in (int(x) for x in args.stages.split(",") if x)]
    missing = [c for c in want if c not in metas]
    if missing:
        raise SystemExit(f"error: --merge-parts: no part for {', '.join(missing)} in {_scale_parts_dir()}; run "
                         "them with --parts first")
    parts = [metas[c] for c in want]
    keys = {json.dumps({k: m[k] for k in _scale_settings(args)}, sort_keys=True) for m, _ in parts}
    if len(keys) != 1:
        raise SystemExit(f"error: --merge-parts: the parts disagree on their settings ({sorted(keys)}); rerun the "
                         "stale ones")
    args.time_limit, args.node_limit, args.scale_fraction, args.warm_start = (
        parts[0][0][k] for k in ("time_limit", "node_limit", "scale_fraction", "warm_start"))
    rows = [{k: v for k, v in r.items() if not pd.isna(v)} for _, d in parts for r in d.to_dict("records")]
    lines = "".join(f"\n- `{m['command']}` (code {m['commit']}, {m['date']}, {m['wall_s'] / 60:.1f} min)"
                    for m, _ in parts)
    so = SolveOptions("highs", args.time_limit, 0.01, 1, node_limit=args.node_limit)
    _write_scale(rows, args, so, Path(args.graphs) / "vgg19.json",
                 f"\n\nRun in {len(parts)} parts, one run each (its command, its code and its wall time):{lines}")


def _write_scale(rows: list[dict], args: argparse.Namespace, so: SolveOptions, vgg_path: Path,
                 parts: str = "") -> None:
    """Rewritten after every run, so a stopped sweep still leaves its table."""
    df = pd.DataFrame(rows)
    ok = df[(df["gap"].fillna(1.0) <= 0.01) & df["status"].isin(["optimal", "feasible"])]
    best = int(ok["stages"].max()) if len(ok) else 0
    code = "Code: each part's, listed below" if parts else f"Commit {commit()}"
    notes = f"""{code}. HiGHS {so.threads} thread, time limit {args.time_limit:.0f} s{_nodes(args)}, MIP gap 1%, on this
2-core machine shared with other jobs (solve times are wall clock). Synthetic graphs: `training_graph(n, seed=1,
impls_prob=0.5, workspace_prob=0.3)`, one stage per op, memory {args.scale_fraction} x unswapped peak, their own
device. VGG19: captured (SGD, batch 144, 227x227) with capture's convolution impls, P40 link, memory {args.scale_fraction} x peak, coarsened to `stages` segments.
{_warm(args)}`gap` is (incumbent - HiGHS dual bound) / incumbent; `status` optimal only when HiGHS says so and that gap is within 1%.
**Largest stage count reaching gap <= 1% within the limit: {best}.**{parts}"""
    write_table(df, args.stem or "milp_scale", "MO-SOS MILP: model size and solve time against stage count", notes,
                graphs=[vgg_path])   # the synthetic graphs are made in code (their call is in the notes)


def optimize_row(g: Graph, dev: Device, frac: float, generations: int, seed: int) -> dict:
    """`hybrid optimize`'s search (GA over schedules and pools, Belady swaps, recompute on, default impls) for a
    fixed number of generations: deterministic, unlike a wall-clock budget."""
    from ga.algorithm import GAConfig
    from ga.search import optimize
    from hybrid.swap.augmented import PlannerOptions
    from hybrid.swap.baselines import RECOMPUTE_RATIO
    from hybrid.validator import validate

    row: dict = {"graph": g.name, "ops": len(g.ops), "memory_frac": frac, "planner": "optimize"}
    t0 = time.monotonic()
    try:
        res = optimize(g, dev, GAConfig(seed=seed), time_limit_s=None, generations=generations,
                       options=PlannerOptions(recompute_ratio=RECOMPUTE_RATIO))
        plan = res.to_plan()
    except HybridError as e:
        row.update(status="no_plan", solve_s=time.monotonic() - t0, note=f"no plan: {e}")
        return row
    rep = validate(g, plan)
    n_re = sum(1 for e in plan.events if e.kind == "compute" and e.recompute)
    row.update(status="valid" if rep.valid else "invalid", solve_s=time.monotonic() - t0, makespan_s=plan.makespan_s,
               ideal_s=plan.metrics.get("ideal_s"), compute_s=plan.metrics.get("ideal_s"), recomputes=n_re,
               swaps_out=sum(1 for e in plan.events if e.kind == "swap_out"),
               peak_bytes=plan.metrics.get("peak_bytes"), generations=res.generations,
               note=f"GA {res.generations} generations, seed {seed}, default impls (the search does not choose "
                    "implementations)" + ("" if rep.valid else f"; INVALID: {rep.first}"))
    if row["ideal_s"] and plan.makespan_s:
        row["ideal/makespan"] = row["ideal_s"] / plan.makespan_s
    return row


def impl_worth(g: Graph) -> dict:
    """What implementation choice can be worth on `g` at most: the ideal (sum of op times, unlimited memory, so
    no copy or rerun) with every op at its fastest impl against every op at its default impl. No plan of any
    planner is faster than the fastest ideal, so MO-SOS can beat a baseline by at most fastest/baseline - 1."""
    default = sum(o.implementations[o.default_impl].time_s for o in g.ops)
    fastest = sum(min(i.time_s for i in o.implementations) for o in g.ops)
    return {"graph": g.name, "ops with impls": sum(1 for o in g.ops if len(o.implementations) > 1),
            "ideal, default impls (s)": default, "ideal, fastest impls (s)": fastest,
            "fastest/default - 1": fastest / default - 1}


def part_paper(args: argparse.Namespace) -> None:
    so = SolveOptions("highs", args.time_limit, 0.01, 1, node_limit=args.node_limit)
    rows = []
    paths = []
    if args.merge:  # the rows of models run in an earlier part (a full run in parts of at most ~15 minutes)
        from benchmarks.common import RESULTS, quick_stem, regenerate_commands

        kept = [capture(m, Path(args.graphs)) for m in args.merge.split(",")]
        names = {Graph.load(p).name for p in kept}
        old = pd.read_csv(RESULTS / f"{quick_stem(args.stem or 'milp')}.csv")
        args.made_before = regenerate_commands(quick_stem(args.stem or "milp"))   # the runs that made those rows
        rows = [{k: v for k, v in r.items() if not pd.isna(v)} for r in old.to_dict("records") if r["graph"] in names]
        paths = kept
    for model in args.models.split(","):
        path = capture(model, Path(args.graphs))
        if path not in paths:
            paths.append(path)
        g = Graph.load(path)
        peak = unswapped_peak(g, P40.alignment_bytes)
        fixed = sum(P40.occupied(t.bytes) for t in g.tensors if t.persistent)
        need = fixed + largest_op(g, P40.alignment_bytes)[1]
        for frac in (float(x) for x in args.fractions.split(",")):
            dev = replace(P40, name=f"p40@{frac}", memory_bytes=min(P40.memory_bytes, int(peak * frac)))
            base = {}
            starts: dict[str, object] = {}
            first = len(rows)
            for kind in ("checkmate-auto", "str-auto", "mosos"):
                try:
                    # Checkmate-Auto's solution is feasible for the other two: their MIP start (MO-SOS's with
                    # the impls Auto picked).
                    run = solve_milp(g, dev, kind, args.paper_stages, so, require=False, start=starts.get(kind),
                                    model_options=paper(kind))
                    if kind == "checkmate-auto":
                        starts = {"str-auto": run.values, "mosos": run.auto_values}
                    row = _row(run, g, frac)
                    if run.plan is not None:
                        row["impls"] = _impl_counts(run.plan)
                    else:
                        row["note"] = f"no plan: {run.result.status} ({run.result.solver_status})"
                        if need > dev.memory_bytes:
                            row["note"] += (f"; the largest op with the resident parameters needs {need / peak:.2f} "
                                            f"of the peak: no plan that moves whole tensors fits")
                except HybridError as e:
                    row = {"graph": g.name, "planner": kind, "memory_frac": frac, "note": f"cannot run: {e}"}
                base[kind] = row.get("makespan_s")
                rows.append(row)
                _say(row)
            if args.generations > 0:
                row = optimize_row(g, dev, frac, args.generations, args.seed)
                if need > dev.memory_bytes and not row.get("makespan_s"):
                    row["note"] += f"; the largest op with the resident parameters needs {need / peak:.2f} of the peak"
                rows.append(row)
                _say(row)
            for r in rows[first:]:
                for ref in ("checkmate-auto", "str-auto"):
                    if r.get("makespan_s") and base.get(ref):
                        r[f"vs_{ref}"] = r["makespan_s"] / base[ref] - 1
            _write_paper(rows, args, paths)


def _impl_counts(plan) -> str:  # noqa: ANN001 - a Plan
    """How many first runs of each non-default impl the plan has (e.g. 'winograd:9 winograd_chunk4:2')."""
    counts: dict[str, int] = {}
    for e in plan.events:
        if e.kind == "compute" and not e.recompute and e.impl and e.impl != "default":
            counts[e.impl] = counts.get(e.impl, 0) + 1
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items())) or "-"


def _say(row: dict) -> None:
    print({k: row.get(k) for k in ("graph", "memory_frac", "planner", "status", "gap", "solve_s",
                                  "ilp_objective_s", "makespan_s", "impls", "note")}, flush=True)


def _write_paper(rows: list[dict], args: argparse.Namespace, paths: list[Path]) -> None:
    """Rewritten after every memory fraction, so a stopped sweep still leaves its table."""
    df = pd.DataFrame(rows)
    worth = pd.DataFrame([impl_worth(Graph.load(p)) for p in dict.fromkeys(paths)])
    fastest = dict(zip(worth["graph"], worth["ideal, fastest impls (s)"]))
    ca = df[df["planner"] == "checkmate-auto"].set_index(["graph", "memory_frac"])["makespan_s"]
    df["most_vs_checkmate-auto"] = [fastest[g] / ca[g, f] - 1 if (g, f) in ca.index and ca[g, f] == ca[g, f]
                                    else None for g, f in zip(df["graph"], df["memory_frac"])]
    mo = df[df["planner"] == "mosos"]
    avg = {ref: mo[f"vs_{ref}"].mean() for ref in ("checkmate-auto", "str-auto") if f"vs_{ref}" in mo}
    n = {ref: int(mo[f"vs_{ref}"].notna().sum()) for ref in ("checkmate-auto", "str-auto") if f"vs_{ref}" in mo}
    notes = f"""Graphs captured with `hybrid capture --model vgg19|unet --optimizer sgd` (paper's batches: 144 at
227x227, 120 at 256x256; roofline op times for v100-16gb, as capture estimates them; the P40's own speeds are not
modelled). Each 2-D forward convolution carries the implementations capture emits (hybrid.capture.conv_impls,
docs/milp.md): `default` (aten.convolution, no workspace), `unfold_gemm`, `winograd` (F(2x2,3x3): faster on
the deep 3x3 layers, workspace about 4x input + 4x output), `winograd_chunk4` (a quarter of that workspace, more
launches); backward convolutions computing an input gradient of a 3x3 stride-1 convolution get
`winograd`/`winograd_chunk4` for that gradient (weight gradients: the library call). No assumed trade-off. Device: P40 preset (24 GiB,
d2h 12 GB/s, h2d 11 GB/s), memory = fraction x unswapped peak (capped at 24 GiB). MILPs solved on
{args.paper_stages} stages (segments of consecutive ops; docs/milp.md), HiGHS 1 thread, {args.time_limit:.0f} s
limit{_nodes(args)}, gap 1%; STR-Auto and MO-SOS start from Checkmate-Auto's solution with Auto's impls (a HiGHS MIP start).
`optimize`: `hybrid optimize`'s GA search, {args.generations} generations, seed {args.seed}, recompute on,
default impls. makespan_s is the simulator's time of the decoded (or searched), validated plan; ideal/makespan =
sum of the chosen impls' times / makespan; `impls` counts first runs of non-default impls; vs_X = makespan / X's
makespan - 1. **Average MO-SOS vs Checkmate-Auto: {avg.get('checkmate-auto', float('nan')):+.2%} over
{n.get('checkmate-auto', 0)} settings, vs STR-Auto: {avg.get('str-auto', float('nan')):+.2%} over
{n.get('str-auto', 0)} (paper: -13.53% and -4.36%).**{_merged(args)}

**What implementation choice can be worth at most** (every op at its fastest impl against its default, unlimited
memory: no copies, no reruns; no plan is faster than the fastest ideal). `most_vs_checkmate-auto` in the table
below is the fastest ideal over that setting's Checkmate-Auto makespan - 1: the most any planner, MO-SOS
included, could gain over Checkmate-Auto there. Where it is above the paper's -13.53%, the paper's gap cannot
appear on these graphs whatever the solver does.

{worth.to_markdown(index=False, floatfmt=".4g")}
"""
    write_table(df, args.stem or "milp",
                "MO-SOS against Checkmate-Auto, STR-Auto and hybrid optimize (the MO-SOS paper's setup)", notes,
                graphs=paths, paper=PAPER, before=getattr(args, "made_before", ()))


def part_execute(args: argparse.Namespace) -> None:
    """A MO-SOS plan with non-default impls, run by the CPU executor against eager training."""
    import torch

    from examples.convnet import make
    from executor.api import execute
    from hybrid.capture import capture as capture_module
    from hybrid.capture.conv_impls import STEP_ATOL, STEP_RTOL

    torch.manual_seed(0)
    module, x, y, loss_fn = make()
    g = capture_module(module, x, loss_fn, y, optimizer="sgd")
    path = Path(args.graphs) / "convnet.json"
    g.save(path)
    g = Graph.load(path)
    peak = unswapped_peak(g, g.device.alignment_bytes)
    rows = []
    for frac in (4.0, 1.0):
        dev = replace(g.device, name=f"v100@{frac}", memory_bytes=int(peak * frac))
        run = plan_milp(g, dev, "mosos", None, SolveOptions("highs", 60, 0.01, 1))
        row = {"graph": "examples.convnet (b16, 16x16, 256 ch)", "memory_frac": frac, **run.row(),
               "impls": _impl_counts(run.plan)}
        res = execute(g, run.plan, module, x, y, loss_fn=loss_fn, iters=args.iters, device="cpu", check=True)
        c = res.comparison
        assert c is not None
        row.update(iters=args.iters, values_compared=c.values, bitwise=c.bitwise, within_tolerance=c.ok,
                   max_abs_diff=c.max_abs_diff, worst=c.worst, rtol=c.rtol, atol=c.atol)
        rows.append(row)
        print(row, flush=True)
    notes = f"""`examples/convnet.py` (conv 3->256, conv 256->256, conv 1x1, batch 16, 16x16 images, SGD) captured with
v100-16gb rooflines; MO-SOS on every op (no coarsening) with memory = memory_frac x the unswapped peak; the
decoded plan run by the executor on the CPU for {args.iters} iterations with `--check` (eager training from the
same seed). A plan that runs non-default impls is compared within rtol {STEP_RTOL:g}, atol {STEP_ATOL:g}
(hybrid.capture.conv_impls.STEP_RTOL/STEP_ATOL), else bitwise. max_abs_diff: largest difference over every loss,
parameter and optimizer state."""
    write_table(pd.DataFrame(rows), args.stem or "milp_execute", "A MO-SOS plan with non-default convolution impls "
                "on the CPU executor", notes, graphs=[path], paper="issue 18 acceptance: CPU executor runs a MO-SOS "
                "plan with non-default implementations")


def _merged(args: argparse.Namespace) -> str:
    return (f" Made in parts: the rows of {args.merge} were kept from the table this run merged, made by the "
            f"earlier command(s) the Regenerate line names first; the last command there made the rest (`--merge "
            f"{args.merge}`)." if args.merge else "")


def _warm(args: argparse.Namespace) -> str:
    return ("Warm start (--warm-start): Checkmate-Auto solved first on the same stages (a quarter of the limit, "
            "gap 0), its solution with Auto's impls given to MO-SOS as a HiGHS MIP start; MO-SOS gets what is left "
            "of the limit (`total_s`: both solves and builds).\n" if args.warm_start else "")


def _nodes(args: argparse.Namespace) -> str:
    return "" if args.node_limit is None else f" and {args.node_limit} branch-and-bound nodes (what stops it: the figures repeat)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--part", choices=("scale", "paper", "execute"), required=True)
    ap.add_argument("--quick", action="store_true", help="paper: VGG19 at 0.8 and 0.6, 30 stages, 300 nodes per "
                    "solve, 3 generations; scale: 10 layers and 30 stages, 300 nodes; execute: unchanged (already quick).")
    ap.add_argument("--time-limit", type=float, default=600.0)
    ap.add_argument("--node-limit", type=int, default=None,
                    help="HiGHS branch-and-bound nodes per solve: a work budget, so figures repeat whatever the load "
                         "(--quick: 300; the time limit then only guards)")
    ap.add_argument("--graphs", default="/tmp/milp-graphs", help="Folder for captured graphs (made if missing).")
    ap.add_argument("--layers", default="10,20", help="scale: synthetic training graphs, layers each (~3 ops/layer).")
    ap.add_argument("--stages", default="30,60,90", help="scale: VGG19 coarsened to these stage counts.")
    ap.add_argument("--scale-fraction", type=float, default=0.6)
    ap.add_argument("--warm-start", action="store_true", help="scale: MO-SOS starts from Checkmate-Auto's solution "
                    "on the same stages (solved first, within the same time limit).")
    ap.add_argument("--models", default="vgg19,unet")
    ap.add_argument("--fractions", default="0.8,0.7,0.6,0.5,0.4")
    ap.add_argument("--merge", default=None, help="paper: keep these models' rows of the table from an earlier run "
                    "(e.g. vgg19), so a full run can be made in parts (--models unet --merge vgg19).")
    ap.add_argument("--paper-stages", type=int, default=60)
    ap.add_argument("--generations", type=int, default=20, help="paper: the optimize column's GA generations "
                    "(0: leave it out).")
    ap.add_argument("--parts", action="store_true", help="scale: write each run as a part under "
                    "results/milp_scale_parts/ (its command, commit and wall time) instead of the table, so a full "
                    "sweep can be run a row or two per call; then --merge-parts.")
    ap.add_argument("--merge-parts", action="store_true", help="scale: run nothing; write the table from the parts "
                    "that cover --layers and --stages (see --parts).")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--iters", type=int, default=2, help="execute: training iterations to run and compare.")
    ap.add_argument("--stem", default=None, help="Table name under results/ (default: milp_scale, milp or "
                    "milp_execute).")
    args = ap.parse_args()
    if args.quick:
        if args.part == "paper":
            args.models, args.fractions, args.paper_stages = "vgg19", "0.8,0.6", 30
            args.time_limit, args.generations = min(args.time_limit, 120.0), min(args.generations, 3)
            args.node_limit = args.node_limit or 300
            args.stem = args.stem or "milp_quick"
        elif args.part == "scale":
            args.layers, args.stages, args.time_limit = "10", "30", min(args.time_limit, 120.0)
            args.node_limit = args.node_limit or 300
            args.stem = args.stem or "milp_scale_quick"
    Path(args.graphs).mkdir(parents=True, exist_ok=True)
    if args.merge_parts:
        if args.part != "scale":
            raise SystemExit("error: --merge-parts is for --part scale; give --part scale")
        merge_scale_parts(args)
        return
    {"scale": part_scale, "paper": part_paper, "execute": part_execute}[args.part](args)


if __name__ == "__main__":
    main()
