"""Timeline pictures of one graph before and after CP-SAT refinement, from refine_compare's saved plans.

Draws the GA's best plan at the split (what refinement started from), the same plan refined with CP-SAT,
and the GA-only arm's plan after the same extra time, stacked on one time axis: compute / h2d / d2h lanes
with compute stalls shaded, and device memory over time. Writes results/refine_timeline_<label>.png.

With --mode beside (results/refine_compare_beside.md): the search's plan the refiner started from, that plan
refined, and the GA-only run's plan; writes results/refine_timeline_beside_<label>.png. With --mode auto
(results/refine_compare_auto.md), as whichever of the two that run used for the graph;
results/refine_timeline_auto_<label>.png.

No search here (a second or two per figure): the pictures are as deterministic as the plans they draw (those
of a work-budget refine_compare run are fixed by its seeds).

What produced the committed figures:
    python -m benchmarks.refine_timeline --label segnet_32_416_608_3_train@0.5 --seed 1
    python -m benchmarks.refine_timeline --label inception-v4-4 --seed 2
    python -m benchmarks.refine_timeline --mode beside --label segnet_32_416_608_3_train@0.5 --seed 1
    python -m benchmarks.refine_timeline --mode auto --label inception-v4-4 --seed 2
(Inception seed 2 in the after run: refinement found nothing and handed its time back; the search's plan won,
and the GA-only arm, with the same search for about 2.7 s longer, found one 0.2% faster. That run predates
refinement's copy-stream re-ordering, `hybrid.refine.stream_order`; in the auto run, with it, the d2h stream
starts its swap-outs as soon as they are released instead of idling for the first 0.135 s, and the refined
plan is 2.1% faster than GA-only's.)
"""
from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.common import RESULTS, ROOT, quick_name
from benchmarks.refine_compare import auto_mode, graphs, stem
from hybrid.plan import Plan
from hybrid.report.timeline import plot_timeline


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", required=True, help="a graph label of results/refine_compare.md")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--mode", choices=("after", "beside", "auto"), default="after",
                    help="which refine_compare run's plans (auto: drawn as the mode that run used for this graph)")
    ap.add_argument("--graph-dir", type=Path, default=ROOT / "out" / "graphs")
    args = ap.parse_args()
    found = [(lab, g, dev) for lab, g, dev in graphs(args.graph_dir, {args.label.split("@")[0]}) if lab == args.label]
    if not found:
        raise SystemExit(f"no benchmark graph labelled {args.label!r}")
    label, g, dev = found[0]
    folder = ROOT / "out" / stem(args.mode) / label.replace("@", "_")
    name = f"{g.name}-seed{args.seed}"
    hybrid = Plan.load(folder / f"{name}-ga+cpsat.json")
    refined = str(hybrid.planner.get("name", "")).endswith("+cpsat")
    layout = auto_mode(g, dev)[0] if args.mode == "auto" else args.mode
    if layout == "beside":
        if not (folder / f"{name}-split.json").exists():
            raise SystemExit(f"seed {args.seed} of {label}: no refinement beside the search lowered a makespan")
        plans = [("search plan the refiner started from", Plan.load(folder / f"{name}-split.json")),
                 ("GA + CP-SAT: refined beside the search" if refined else "GA + CP-SAT arm (its search's plan won)",
                  hybrid),
                 ("GA-only, same wall time", Plan.load(folder / f"{name}-ga.json"))]
    else:
        plans = [("GA best at the split (input to refinement)", Plan.load(folder / f"{name}-split.json")),
                 ("GA + CP-SAT refinement" if refined
                  else "GA + CP-SAT arm (refinement handed back; the search's plan)", hybrid),
                 ("GA-only, same extra time", Plan.load(folder / f"{name}-ga.json"))]
    prefix = "refine_timeline_" + ("" if args.mode == "after" else f"{args.mode}_")
    out = RESULTS / quick_name(f"{prefix}{label.replace('@', '_')}.png")
    plot_timeline(g, plans, out, title=f"{g.name} on {dev.name} ({dev.memory_bytes / 2**30:.1f} GiB), seed {args.seed}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
