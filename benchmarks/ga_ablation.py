"""The paper's Figures 9c and 10: what the search gains from searching the schedule, the allocation, both, and from
restricting the size-class mapping to be monotone.

Figure 10: RNN-8-8K and Inception-V4-4 (fresh captures), each search setting (both / schedule only / allocation
only, and both with the paper's selection temperature tau = 1) started from a RANDOM topological order
(`--start random`, MXNet's default schedule in the paper; a fixed schedule stays that order), with each pool kind
on its own (`--pool classes`: the paper's size classes; `--pool bytes`: the byte budget), 3 seeds.
Figure 9c: Inception-V4-4 searched with size classes only, the monotone mapping (`--class-mapping monotone`, the
paper's) against the unrestricted one (`--class-mapping free`), 3 seeds, with best/mean/worst per generation.

Every run is `hybrid optimize --refine none --workers 1 --generations G --seed S` (run in-process through
`ga.optimize`, the same search): deterministic for a seed. `--quick`: 6 generations, 3 seeds, no tau=1 runs,
about 75 s on the 2-core machine, written as results/ga_ablation_quick.*, fig9c_quick.* (never over the full run's);
the full run (`--generations 60`, with tau=1) about 8 times as long per run.
Writes results/ga_ablation.{md,csv}, results/fig9c.{md,csv,png} and convergence logs under results/ga_ablation/.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd

from benchmarks.common import RESULTS, write_table
from hybrid.device import preset
from hybrid.graph import Graph
from hybrid.graph.info import ideal_time
from hybrid.validator import validate

FRESH = Path("/work/graphs-fresh")
SETTINGS = {  # label -> GAConfig fields
    "both": {},
    "schedule only": {"search": "schedule"},
    "allocation only": {"search": "allocation"},
    "both, tau=1 (eq. 1)": {"temperature": 1.0},
}
POOLS = {"size classes": "classes", "byte budget": "bytes"}
# Figure 10 of the paper (throughput relative to the full search), as its §6.4 text states them.
PAPER_FIG10 = {("rnn-8-8k", "allocation only"): "7% (no schedule search)",
               ("inception-v4-4", "allocation only"): "93% (no schedule search)"}


def _sfx(quick: bool) -> str:
    """Quick runs write beside the full run's tables, never over them."""
    return "_quick" if quick else ""


def run(g: Graph, seed: int, generations: int, **fields) -> tuple[dict, "pd.DataFrame"]:
    """One search; its figures and its convergence log. The plan must validate."""
    from ga import GAConfig, optimize

    dev = preset("v100-16gb", reserve=True)
    t = time.monotonic()
    res = optimize(g, dev, GAConfig(seed=seed, **fields), generations=generations, workers=1)
    plan = res.to_plan()
    report = validate(g, plan)
    if not report.valid:
        raise SystemExit(f"invalid plan: {g.name} {fields} seed {seed}: {report}")
    return {"makespan_s": plan.makespan_s, "ideal/makespan": ideal_time(g) / plan.makespan_s,
            "pool_kind": plan.allocation.kind, "generations": res.generations, "evaluations": res.evaluations,
            "wall_s": round(time.monotonic() - t, 1)}, res.log_frame()


def fig10(graphs: dict[str, Path], seeds: list[int], generations: int, quick: bool = False) -> pd.DataFrame:
    rows = []
    logs = RESULTS / f"ga_ablation{_sfx(quick)}"
    logs.mkdir(parents=True, exist_ok=True)
    for name, path in graphs.items():
        g = Graph.load(path)
        for pool_label, pool in POOLS.items():
            for label, fields in SETTINGS.items():
                if quick and "tau" in label:
                    continue
                for seed in seeds:
                    figs, log = run(g, seed, generations, pool=pool, start="random", **fields)
                    stem = f"{name}-{pool}-{label.split(',')[0].replace(' ', '_')}" + \
                        ("-tau1" if "tau" in label else "") + f"-s{seed}"
                    log.to_csv(logs / f"{stem}.csv", index=False)
                    rows.append({"graph": name, "pool": pool_label, "run": label, "seed": seed, **figs})
                    print(name, pool_label, label, seed, round(figs["ideal/makespan"], 4), flush=True)
    df = pd.DataFrame(rows)
    both = df[df.run == "both"].groupby(["graph", "pool"])["ideal/makespan"].mean()
    df["vs_both_mean"] = [r["ideal/makespan"] / both[(r.graph, r.pool)] for _, r in df.iterrows()]
    return df


def summary(df: pd.DataFrame) -> pd.DataFrame:
    s = df.groupby(["graph", "pool", "run"], sort=False).agg(
        seeds=("seed", "count"), mean=("ideal/makespan", "mean"), min=("ideal/makespan", "min"),
        max=("ideal/makespan", "max"), vs_both=("vs_both_mean", "mean")).reset_index()
    s["paper"] = [PAPER_FIG10.get((r.graph, r.run), "") for r in s.itertuples()]
    return s


def fig9c(path: Path, seeds: list[int], generations: int) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    g = Graph.load(path)
    rows, logs = [], []
    for mapping in ("monotone", "free"):
        for seed in seeds:
            figs, log = run(g, seed, generations, pool="classes", start="random", class_mapping=mapping)
            log.insert(0, "mapping", mapping)
            log.insert(1, "seed", seed)
            logs.append(log)
            rows.append({"graph": g.name, "mapping": mapping, "seed": seed, **figs,
                         "final_mean_s": float(log["mean_s"].iloc[-1]), "final_worst_s": float(log["worst_s"].iloc[-1])})
            print("fig9c", mapping, seed, round(figs["ideal/makespan"], 4), flush=True)
    return pd.DataFrame(rows), logs


def plot_fig9c(logs: list[pd.DataFrame], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, mapping in zip(axes, ("monotone", "free")):
        for log in (x for x in logs if x["mapping"].iloc[0] == mapping):
            seed = log["seed"].iloc[0]
            for col, style in (("best_s", "-"), ("mean_s", "--"), ("worst_s", ":")):
                ax.plot(log["generation"], log[col], style, label=f"{col[:-2]} (seed {seed})")
        ax.set_title(f"Inception-V4-4, size classes, {mapping} mapping")
        ax.set_xlabel("generation")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("simulated s / iteration")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--graphs", type=Path, default=FRESH, help="folder with rnn-8-8k.json and inception-v4-4.json")
    ap.add_argument("--generations", type=int, default=60)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--quick", action="store_true", help="6 generations, no tau=1 runs; writes the *_quick tables beside the full run's")
    ap.add_argument("--only", choices=["fig10", "fig9c"], default=None)
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    gens = 6 if args.quick else args.generations
    sfx = _sfx(args.quick)
    graphs = {m: args.graphs / f"{m}.json" for m in ("rnn-8-8k", "inception-v4-4")}
    for p in graphs.values():
        if not p.exists():
            raise SystemExit(f"{p} missing: capture it with `hybrid capture --model {p.stem} --device v100-16gb "
                             f"--out {p}`")
    if args.only in (None, "fig10"):
        df = fig10(graphs, seeds, gens, args.quick)
        s = summary(df)
        measured = "; ".join(
            f"{g} with {pool}: " + ", ".join(f"{r.run} {100 * r.vs_both:.0f}%" for r in part.itertuples() if r.run != "both")
            for (g, pool), part in s.groupby(["graph", "pool"], sort=False))
        notes = f"""Each run: `hybrid optimize --graph G --device v100-16gb --refine none --workers 1 --generations {gens}
--seed S --start random --pool classes|bytes [--search schedule|allocation] [--temperature 1]` (in-process). `start
random`: the first generation's seeded schedule is one random topological order (MXNet's default, as in the paper)
instead of the program order, and `--search allocation` keeps it. `vs_both` = throughput relative to the full search
with the same pool kind (mean over seeds). Per-run rows: results/ga_ablation{sfx}.csv; convergence logs:
results/ga_ablation{sfx}/.

The paper (§6.4, Figure 10): without searching the schedule the RNN reaches 7% of the full search, Inception-V4 93%;
the allocation matters more for Inception. Measured here (mean over seeds, relative to `both` with the same pool):
{measured}.

Why ours differ:
- **Budget.** {gens} generations of 48 children on one core (seconds per run), where the paper searched 30 minutes
  on 72 cores. From a random start the population holds only random orders, and in this budget the schedule search
  does not find the layer-by-layer RNN order: every RNN setting stays near a quarter of the ideal, where the same
  search seeded with the program order reaches about 0.95 (results/ga_acceptance.md). So `both` is close to
  `allocation only` here; the paper's 7% is the gap a long search closes, which this budget does not reach. What
  the table does show is the paper's RNN point itself: a random order costs the RNN about 4x against the program
  order, because it interleaves LSTM cells of different layers and their large parameters swap back and forth.
- **`schedule only` keeps the best seeded pool**, which can beat the pools `both` reaches in a short search
  (Inception with size classes).
- **A byte budget has no allocation to search** (only the planner settings vary), so `allocation only` with the
  byte budget is the random order with the best planner settings; with size classes it is the paper's setting.
  The byte budget beats size classes on both graphs (this project's time-ordered re-binding in a byte pool), which
  is why `hybrid optimize` searches both kinds by default.

Summary (mean, min and max of ideal/makespan over seeds):

{s.to_markdown(index=False, floatfmt=".4g")}"""
        write_table(df, f"ga_ablation{sfx}", "GA ablations from random topological orders (Figure 10)", notes,
                    graphs=list(graphs.values()), paper="SwapAdvisor (ASPLOS'20) Figure 10, §6.4")
    if args.only in (None, "fig9c"):
        df9, logs = fig9c(graphs["inception-v4-4"], seeds, gens)
        plot_fig9c(logs, RESULTS / f"fig9c{sfx}.png")
        pd.concat(logs, ignore_index=True).to_csv(RESULTS / f"ga_ablation{sfx}" / "fig9c_logs.csv", index=False)
        means = df9.groupby("mapping")[["makespan_s", "final_mean_s", "final_worst_s"]].mean()

        def rel(col: str) -> str:
            return f"{100 * (means.loc['free', col] / means.loc['monotone', col] - 1):+.1f}%"

        same = all(a == b for a, b in zip(df9[df9.mapping == "free"].makespan_s, df9[df9.mapping == "monotone"].makespan_s))
        same_best = ("The best plan is the same for both mappings with every seed: no child beat the seeded pools in "
                     "this budget.") if same else ""
        per_seed = df9.pivot(index="seed", columns="mapping", values="makespan_s")
        worse = int((per_seed["free"] > per_seed["monotone"] * (1 + 1e-9)).sum())
        verdict = (f"As in the paper: free is slower than monotone with every seed ({worse} of {len(per_seed)}), best, "
                   "mean and worst alike." if worse == len(per_seed) and all(
                       means.loc["free", c] > means.loc["monotone", c] for c in means.columns)
                   else f"Free is slower than monotone with {worse} of {len(per_seed)} seeds; in this budget the "
                        "difference is of the size seeds differ by, so the paper's effect is not shown here.")
        notes = f"""Each run: `hybrid optimize --graph inception-v4-4.json --device v100-16gb --refine none --workers 1
--generations {gens} --seed S --start random --pool classes --class-mapping monotone|free` (in-process). `free`
lets any tensor size join any class (a class's objects are its largest member), the paper's Figure 9c; `monotone`
is the paper's restriction (classes are runs of consecutive sizes). Best, mean and worst of the final population:
columns `makespan_s`, `final_mean_s`, `final_worst_s`; per generation in results/ga_ablation{sfx}/fig9c_logs.csv and
results/fig9c{sfx}.png.

Means over seeds (seconds per iteration):

{means.to_markdown(floatfmt=".4g")}

The paper (Figure 9b against 9c): with the unrestricted mapping the best, mean and worst are all worse than with the
monotone one, because the larger space (N^N mappings instead of 2^N) is harder to search. Measured here, free
against monotone (mean over seeds): best {rel("makespan_s")}, population mean {rel("final_mean_s")}, worst
{rel("final_worst_s")} (positive: free is slower). {same_best}

{verdict}

Budget: {gens} generations of 48 children on one core against the paper's 30 minutes on 72 cores. Both mappings
start from the same seeded individuals (one class per size and the lowest-floor classes, both monotone), so the
free mapping only enters through the random individuals and the children: the longer the search, the more of the
population it shapes."""
        write_table(df9, f"fig9c{sfx}", "Figure 9c: unrestricted against monotone size-class mapping (Inception-V4-4)",
                    notes, graphs=[graphs["inception-v4-4"]], paper="SwapAdvisor (ASPLOS'20) Figure 9b/9c, §6.4")


if __name__ == "__main__":
    main()
