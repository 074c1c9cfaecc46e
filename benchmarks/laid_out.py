"""Issue 31's acceptance: is the plan `hybrid optimize` writes (laid out, exact offsets) as fast as the byte budget
its search scores, and faster than every baseline laid out the same way?

For each graph (the SwapAdvisor suite at v100-16gb with its 1 GiB reserve, and the Checkmate training graphs at
50% and 25% of their unswapped peak), three runs of `hybrid.pipeline.run_optimize`, the same seed and counted
generations, `--refine none` (deterministic):
- `relaxation`: `--no-arena --no-headroom`, the byte-budget search's best (memory that never fragments: a bound
  on what any layout of that search can give, not a plan the executor runs without compaction);
- `written`: the default (`--headroom`: the search gives up the memory its seeds' layouts need, and halfway
  what its incumbent's layout needs where that is more; the winner laid out within the full memory and
  re-planned with what the layout leaves); `memory_given_up` is what the search gave up at its end;
- `no_headroom`: `--no-headroom` (the flow before: search the full memory, lay the winner out afterwards).
`fallback` is the default run's layout step: "" (laid out as found), "more memory" (re-planned with some of the
memory the headroom left: not a fallback), "re-planned within headroom" (the search's best did not lay out; a
re-plan with no less memory than the search planned with did: `written_memory_given_up` <= `memory_given_up`),
"re-planned" (re-planned with less memory than the search planned with: the fallback issue 31 asks to fire 0
times), "slower candidate" or "size classes". The baselines (naive, odswap,
odswap-paper, vdnn, tflms, belady with recompute, recompute-only) are each laid out through the same layout
(`hybrid.pipeline.baselines.lay_out_baseline`, re-planned by their own rules with less memory where their byte
budget does not fit); `beats_baselines` compares the written plan with the fastest of them.
Writes results/laid_out.{md,csv} (results/laid_out_quick.* with --quick: two generations of 8, Checkmate only;
results/laid_out_only*.* with --only, a few rows that never replace the whole table).
"""
from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from benchmarks.common import balanced_checkmate, checkmate_train_files, is_quick, write_table
from hybrid.device import Device, preset
from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.graph.info import largest_op, unswapped_peak
from hybrid.validator import validate

SUITE = ("brnn-4-8k", "inception-v4-4", "nasnet-25", "rnn-8-8k", "wresnet-152-10")


def optimize(g: Graph, dev: Device, generations: int, population: int, seed: int, **kw):  # noqa: ANN201
    from ga import GAConfig
    from hybrid.pipeline import OptimizeOptions, run_optimize

    opts = OptimizeOptions(config=GAConfig(population=population, children=population, seed=seed),
                           generations=generations, workers=1, refine="none", stop_on_interrupt=False, **kw)
    res = run_optimize(g, dev, 4 * 3600.0, opts)
    report = validate(g, res.plan)
    if not report.valid:
        raise SystemExit(f"invalid plan on {g.name} ({kw}): {report.violations[0].message}")
    return res


def best_laid_out_baseline(g: Graph, dev: Device) -> tuple[str, float, int]:
    """(kind, makespan, how many re-planned with less memory) of the fastest baseline laid out like the
    written plan; ("", nan, n) where none runs."""
    from hybrid.pipeline.baselines import BASELINES, lay_out_baseline
    from hybrid.swap.baselines import run_baseline

    best, kind, replanned = float("nan"), "", 0
    for k in BASELINES:
        try:
            lay = lay_out_baseline(g, dev, k, run_baseline(g, dev, k, recompute=True), time_limit_s=None)
        except InfeasibleError:
            continue
        if not validate(g, lay.plan).valid:
            raise SystemExit(f"invalid laid-out {k} plan on {g.name}")
        replanned += lay.fallback == "re-planned"
        if not lay.plan.makespan_s >= best:
            best, kind = lay.plan.makespan_s, k
    return kind, best, replanned


def row_for(name: str, g: Graph, dev: Device, args: argparse.Namespace) -> dict:
    row: dict = {"graph": name, "ops": len(g.ops), "memory_GiB": dev.memory_bytes / 2**30}
    if largest_op(g, dev.alignment_bytes)[1] > dev.usable_bytes:
        row["note"] = "cannot run: one op needs more than the memory"
        return row
    t0 = time.monotonic()
    run = lambda **kw: optimize(g, dev, args.generations, args.population, args.seed, **kw)  # noqa: E731
    relax = run(arena_s=None, headroom=False)
    written = run()
    before = run(headroom=False)
    kind, base, replanned = best_laid_out_baseline(g, dev)
    lay = written.layout
    head = written.search_plan.planner.get("headroom", {}) if isinstance(written.search_plan.planner, dict) else {}
    r = relax.plan.makespan_s
    row.update({
        "relaxation_s": r,
        "written_s": written.plan.makespan_s,
        "written/relaxation": written.plan.makespan_s / r,
        "no_headroom/relaxation": before.plan.makespan_s / r,
        "memory_given_up": float(head.get("shrink", 0.0)),
        "written_memory_given_up": lay.memory_given_up if lay is not None else float("nan"),
        "fallback": (("re-planned within headroom" if lay.fallback == "re-planned" and not lay.gave_up_memory
                      else lay.fallback) if lay is not None else "not laid out"),
        "no_headroom_fallback": before.layout.fallback if before.layout is not None else "not laid out",
        "best_baseline": f"{kind} {base:.4g}" if kind else "none runs",
        "written/best_baseline": written.plan.makespan_s / base if kind else float("nan"),
        "beats_baselines": _verdict(written.plan.makespan_s, base) if kind else "",
        "baselines_replanned": replanned,
        "pool": written.plan.allocation.kind,
        "seconds": time.monotonic() - t0,
    })
    print(f"{name}: written/relaxation {row['written/relaxation']:.4f} (fallback {row['fallback']!r}), "
          f"no headroom {row['no_headroom/relaxation']:.4f}, best laid-out baseline {row['best_baseline']}",
          flush=True)
    return row


TIE_REL = 1e-9   # the same plan re-timed by another code path differs in the last bits: a tie, not a loss


def _verdict(written: float, base: float) -> str:
    """The written plan against the fastest laid-out baseline: yes (faster), tie (within TIE_REL) or NO."""
    if abs(written - base) <= TIE_REL * max(abs(written), abs(base)):
        return "tie"
    return "yes" if written < base else "NO"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", type=Path, default=Path("out/graphs"), help="folder of the captured suite graphs")
    ap.add_argument("--generations", type=int, default=5)
    ap.add_argument("--population", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fractions", default="0.5,0.25", help="Checkmate memory as fractions of the peak")
    ap.add_argument("--only", default="", help="comma-separated graph names")
    ap.add_argument("--quick", action="store_true", help="two generations of 8, Checkmate graphs only")
    args = ap.parse_args()
    quick = is_quick()
    if quick:
        args.generations, args.population = 2, 8
    only = {s for s in args.only.split(",") if s}
    targets: list[tuple[str, Graph, Device, Path | None]] = []
    if not quick:
        for name in SUITE:
            path = args.graphs / f"{name}.json"
            if path.exists() and (not only or name in only):
                targets.append((name, Graph.load(path), preset("v100-16gb", reserve=True), path))
            elif not path.exists():
                print(f"skip {name}: capture it first: hybrid capture --model {name} --device v100-16gb --out {path}")
    for src in checkmate_train_files():
        g = balanced_checkmate(src)
        if only and g.name not in only:
            continue
        for frac in (float(x) for x in args.fractions.split(",")):
            dev = replace(preset("v100-16gb"), name=f"v100-{int(frac * 100)}%peak",
                          memory_bytes=int(unswapped_peak(g) * frac))
            targets.append((f"{g.name} {frac:.0%}", g, dev, None))
    rows = [row_for(name, g, dev, args) for name, g, dev, _ in targets]
    df = pd.DataFrame(rows)
    ok = df.dropna(subset=["written/relaxation"]) if "written/relaxation" in df else df.iloc[0:0]
    summary = ""
    if len(ok):
        w = ok["written/relaxation"].to_numpy()
        summary = (f"Over the {len(ok)} rows that run: written/relaxation median {np.median(w):.4f}, worst "
                   f"{w.max():.4f} (issue 31: within 1.02 at the median, 1.05 at worst); the written plan beats every "
                   f"laid-out baseline on {int((ok['beats_baselines'] == 'yes').sum())} of {len(ok)} and ties the "
                   f"fastest on {int((ok['beats_baselines'] == 'tie').sum())}; the fallback (re-planned with less "
                   f"memory than the search planned with) fired on {int((ok['fallback'] == 're-planned').sum())}, "
                   f"a re-plan within the headroom on {int((ok['fallback'] == 're-planned within headroom').sum())}.")
    notes = f"""{__doc__.split('Writes results')[0].strip()}

{args.generations} generations of population {args.population}, seed {args.seed}, one worker. {summary}
A held-out transformer (issue 31 asks for one) is not in this table."""
    # --only runs a few rows: their own table, never over the whole one
    write_table(df, "laid_out_only" if only else "laid_out",
                "Laid-out plans against their byte-budget relaxation and laid-out baselines (issue 31)",
                notes, graphs=[p for *_, p in targets if p is not None])


if __name__ == "__main__":
    main()
