"""GA-only vs GA + CP-SAT refinement at equal wall time (issue 5's acceptance), per graph and seed.

Graphs: the SwapAdvisor suite captured for v100-16gb (`hybrid capture --model NAME --device v100-16gb`,
read from --graph-dir; big files, kept out of git) and the Checkmate training graphs imported with the
'balanced' time scale (benchmarks/common.py) at 25% of their unswapped peak, or 50% where 25% cannot run
(one op alone needs more), skipped where even 50% cannot. Each (graph, seed) runs `hybrid.report.compare.compare`
in one of its modes (--mode):
- beside (the default here; `hybrid optimize --refine-mode beside`): GA-only and GA+CP-SAT are two runs of the
  same search for the whole budget, the second with the CP-SAT refiner (`hybrid.refine.beside`) in a second
  process refining its best and elites, the first with one more evaluation process instead; each uses both
  cores, so run one benchmark process at a time;
- after: the GA for (1 - share) of the budget, then GA+CP-SAT refines for the rest (handing what refinement
  cannot use back to the search) while GA-only resumes the same search for the same time; single-core, so
  pieces can run in parallel (--only NAME[,NAME], then --merge);
- auto: per graph what `hybrid optimize` does by default here (`auto_mode`): beside or after, with its
  default evaluation processes.
Writes results/refine_compare[_beside|_auto].{csv,parquet,md} (all rows) and
results/refine_compare[_beside|_auto]_summary.{csv,md} (one line per graph), and the plans under
out/refine_compare[_beside|_auto]/ (no suffix: the after mode, whose tables came first). Merging recomputes
`hybrid.bounds.schedule_bound` for every saved plan.

Budgets. By default (the full runs) each arm gets --time-limit seconds: the comparison is at equal wall time,
so generations, windows and makespans depend on the machine's load. With --generations and --windows (quick
runs; N, or N,NAME=M,... per graph) the arms run counted work instead (`hybrid.report.compare.compare`):
after mode splits the generations and counts refinement's budget and patience in CP-SAT windows; beside
mode also needs --lockstep N (`hybrid.refine.beside.Lockstep`: an offer every N generations, refined in
this process; GA-only gets --second-core-ratio times the generations). Every figure but the measured seconds
is then fixed by the seeds; --time-limit is only a safety net (the `budget` column flags a row it cut).

Full runs (time budgets, the nine graphs, 3 seeds; about 65 min after, 110 min beside, 90 min auto):
    python -m benchmarks.refine_compare --time-limit 120 --seeds 1,2,3 --graph-dir out/graphs
    python -m benchmarks.refine_compare --mode after --time-limit 120 --seeds 1,2,3 --graph-dir out/graphs
    python -m benchmarks.refine_compare --mode auto --time-limit 120 --seeds 1,2,3 --graph-dir out/graphs
Quick, deterministic runs (about 16, 17 and 8 s here; --second-core-ratio 1.5: what a second evaluation
process bought the search on the bigger graphs in ga_second_core's full run, per hybrid.refine.beside):
    python -m benchmarks.refine_compare --mode after --time-limit 300 --seeds 1 \
        --generations 40,segnet_32_416_608_3_train=300 --windows 12,segnet_32_416_608_3_train=100 \
        --only inception-v4-4,segnet_32_416_608_3_train
    python -m benchmarks.refine_compare --mode beside --time-limit 300 --seeds 1 --generations 30 --windows 4 \
        --lockstep 10 --second-core-ratio 1.5 --only inception-v4-4
    python -m benchmarks.refine_compare --mode auto (the beside run's other flags)
"""
from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import pandas as pd

from benchmarks.common import (RESULTS, ROOT, balanced_checkmate, checkmate_train_files, quick_stem, relative_cells,
                               short_name, write_table)
from hybrid.device import preset
from hybrid.graph import Graph
from hybrid.graph.info import fraction_of_peak, largest_op

SUITE = ("rnn-8-8k", "brnn-4-8k", "wresnet-152-10", "inception-v4-4", "nasnet-25")


def base_stem(mode: str) -> str:
    return "refine_compare" if mode == "after" else f"refine_compare_{mode}"


def stem(mode: str) -> str:
    """The table's name, its parts' folder and the plans' folder under out/ (`_quick` in a quick run)."""
    return quick_stem(base_stem(mode))


def parts_dir(mode: str) -> Path:
    return RESULTS / quick_stem(f"{base_stem(mode)}_parts")


def graphs(graph_dir: Path, only: set[str] | None):
    """(name, graph, device) of every benchmark graph that can run."""
    for name in SUITE:
        if only and name not in only:
            continue
        path = graph_dir / f"{name}.json"
        if not path.exists():
            print(f"skip {name}: {path} missing (hybrid capture --model {name} --device v100-16gb --out {path})")
            continue
        g = Graph.load(path)
        yield name, g, preset("v100-16gb")
    for path in checkmate_train_files():
        g = balanced_checkmate(path)
        if only and g.name not in only:
            continue
        need = largest_op(g)[1]
        for frac in (0.25, 0.5):
            mem = fraction_of_peak(g, frac)
            if need <= mem:
                dev = replace(preset("v100-16gb"), name=f"v100-{int(frac * 100)}%peak", memory_bytes=mem)
                yield f"{g.name}@{frac}", g, dev
                break
        else:
            print(f"skip {g.name}: one op needs {need} bytes, more than 50% of the peak")


def graph_files(graph_dir: Path, labels) -> list[Path]:  # noqa: ANN001
    """The graph files behind table labels (suite names, Checkmate stems with an @fraction)."""
    names = {str(lab).split("@")[0] for lab in labels}
    files = [graph_dir / f"{n}.json" for n in SUITE if n in names]
    return files + [p for p in checkmate_train_files() if short_name(p) in names]


def per_graph(spec: str | None, label: str, flag: str) -> int | None:
    """A count from a per-graph flag value: `N` for every graph, or `N,NAME=M,...` (NAME: a label or its graph
    name before the @) so that one quick run gives a 77-op graph and a 1,618-op one comparable work."""
    if spec is None:
        return None
    default: int | None = None
    named: dict[str, int] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        key, eq, value = part.rpartition("=")
        try:
            n = int(value)
        except ValueError:
            raise SystemExit(f"{flag}: {part!r} is not a count (give N or NAME=N)") from None
        if n < 0:
            raise SystemExit(f"{flag}: {part!r} must not be negative")
        if eq:
            named[key] = n
        else:
            default = n
    n = named.get(label, named.get(label.split("@")[0], default))
    if n is None:
        raise SystemExit(f"{flag}: no count for graph {label!r} (give a default N or {label.split('@')[0]}=N)")
    return n


def auto_mode(g: Graph, dev) -> tuple[str, int]:  # noqa: ANN001
    """(mode, evaluation processes) that `hybrid optimize` picks by default for this graph on this machine."""
    from hybrid.pipeline import split_cores

    beside, workers, _ = split_cores(g, dev)
    return ("beside" if beside else "after"), int(workers or 1)


def merge(graph_dir: Path, mode: str = "beside") -> pd.DataFrame:
    """Concatenate the per-graph parts; fill bounds missing from older parts (from the saved plans)."""
    from hybrid.bounds import schedule_bound
    from hybrid.report.compare import COLUMNS, split_gains, summary, with_medians
    from hybrid.plan import Plan

    parts = sorted(parts_dir(mode).glob("*.parquet"))
    df = pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True)
    labels = dict(zip(zip(df["graph"], df["memory_bytes"]), df["label"]))
    df = df[df["row"] == "seed"].copy()
    for col in ("schedule_bound_s", "makespan/schedule_bound"):
        if col not in df:
            df[col] = float("nan")
    for col in COLUMNS:  # parts made before a column existed
        if col not in df:
            df[col] = {"final_from": "", "budget": "time"}.get(col, float("nan"))
    if mode != "auto":  # parts made before the mode column existed
        df["mode"] = df["mode"].where(df["mode"].isin(["beside", "after"]), mode).astype(object)
    for i in df.index[(df["arm"] == "ga+cpsat") & df["split_makespan_s"].isna()]:
        split = Path(str(df.at[i, "plan"]).replace("-ga+cpsat.json", "-split.json"))
        if split.exists():
            df.at[i, "split_makespan_s"] = Plan.load(ROOT / split).makespan_s
            df.at[i, "rewalk_gain"], df.at[i, "reorder_gain"], df.at[i, "window_gain"] = split_gains(
                df.at[i, "split_makespan_s"], df.at[i, "rebind_makespan_s"], df.at[i, "reorder_makespan_s"],
                df.at[i, "makespan_s"])
    # the bound is recomputed for every saved plan, so parts made with an older bound read the current one
    for label, g, _dev in graphs(graph_dir, {lab.split("@")[0] for lab in set(df["label"])}):
        for i in df.index[df["label"] == label]:
            sb = schedule_bound(g, Plan.load(ROOT / df.at[i, "plan"]))
            df.at[i, "schedule_bound_s"] = sb
            df.at[i, "makespan/schedule_bound"] = df.at[i, "makespan_s"] / sb
    df["seed"] = df["seed"].astype("Int64")
    df = with_medians(df[COLUMNS])
    df.insert(1, "label", [labels[(g, m)] for g, m in zip(df["graph"], df["memory_bytes"])])
    notes = budget_note(df) + "\n\n" + NOTES[mode]  # first: it says how to read the protocol below
    files = graph_files(graph_dir, set(df["label"]))
    paper = "SwapAdvisor §6 (the GA) with this project's CP-SAT refinement (no paper counterpart)"
    write_table(df, stem(mode), f"GA-only vs GA + CP-SAT refinement ({mode}) at equal wall time", notes,
                graphs=files, paper=paper, parquet=True)
    s = summary(df)
    s.insert(1, "label", [labels[(g, m)] for g, m in zip(s["graph"], s["memory_bytes"])])
    s["gain>=5%"] = s["median_gain"] >= 0.05
    write_table(s, f"{base_stem(mode)}_summary", f"GA-only vs GA + CP-SAT ({mode}): one line per graph",
                notes + "\n\n" + verdict(s, df, mode), graphs=files, paper=paper, parquet=True)
    return s


def verdict(s: pd.DataFrame, df: pd.DataFrame, mode: str = "beside") -> str:
    """The acceptance reading of the summary, in words."""
    n = len(s)
    good = s[s["gain>=5%"]]
    listed = ", ".join(f"{lab} {100 * g:.1f}%" for lab, g in zip(good["label"], good["median_gain"]))
    lines = [f"GA+CP-SAT is never worse than GA-only on {int(s['never_worse'].sum())} of {n} graphs (every seed), "
             f"and at least 5% faster (median of seeds) on {len(good)} of {n}" + (f": {listed}." if listed else ".")]
    worse = s[~s["never_worse"]]
    if len(worse):
        seeds = df[(df["row"] == "seed") & (df["arm"] == "ga+cpsat")]
        parts = []
        modes: set[str] = set()  # the refinement modes of the worst seeds, for the explanation
        for lab, g, mem, w in zip(worse["label"], worse["graph"], worse["memory_bytes"], worse["worst_seed_gain"]):
            r = seeds[(seeds["graph"] == g) & (seeds["memory_bytes"] == mem)].sort_values("gain_vs_ga").iloc[0]
            modes.add(r["mode"])
            if r["mode"] == "after" and str(r.get("budget", "time")).startswith("work"):
                parts.append(f"{lab} (seed {r['seed']}: {100 * w:.2g}%, refinement {int(r['refine_windows'])} "
                             f"windows, then the search {int(r['resumed_generations'])} generations; final plan "
                             f"from {r['final_from'] or 'cpsat'})")
            elif r["mode"] == "after":
                parts.append(f"{lab} (seed {r['seed']}: {100 * w:.2g}%, refinement {r['refine_s']:.1f} s, then "
                             f"the search {r['resume_s']:.1f} s; final plan from {r['final_from'] or 'cpsat'})")
            else:
                ga = df[(df["row"] == "seed") & (df["arm"] == "ga") & (df["graph"] == g)
                        & (df["memory_bytes"] == mem) & (df["seed"] == r["seed"])].iloc[0]
                parts.append(f"{lab} (seed {r['seed']}: {100 * w:.2g}%; its own search reached "
                             f"{r['arm_ga_makespan_s']:.6g} s in {int(r['ga_generations'])} generations, GA-only "
                             f"{ga['makespan_s']:.6g} s in {int(ga['ga_generations'])})")
        if modes == {"after"}:
            lines.append("Worse on some seed: " + "; ".join(parts) + ". After the split both arms run the same "
                         "search (resumed from one checkpoint, the same generations in the same order); the "
                         "GA+CP-SAT arm's search starts later by the time refinement took before handing back. "
                         "Where refinement gained less than the search found in that time, GA-only ends ahead. "
                         "Equal wall time cannot rule that out; the patience keeps the time at stake to about a "
                         "tenth of the refinement share.")
        else:
            lines.append("Worse on some seed: " + "; ".join(parts) + ". Both arms run the same search with the "
                         "same seed; GA-only evaluates with the core the other arm gives the refiner, so it runs "
                         "more generations where an evaluation takes milliseconds (results/ga_second_core.md). "
                         "Where the search was still improving, those generations found more than refinement did. "
                         "This is why `--refine-mode auto` refines beside the search only where a second "
                         "evaluation process would not speed it up (one evaluation under 1 ms: here the Checkmate "
                         "graphs) and after it elsewhere.")
    rest = s[~s["gain>=5%"]]
    bound = rest["ga_makespan_s"] / rest["ga+cpsat_makespan_s"] * rest["ga+cpsat_makespan/schedule_bound"]
    tight = rest[bound < 1.05]  # GA-only already within 5% of the schedule bound: no re-timing can gain 5%
    loose = rest[bound >= 1.05]
    if len(tight):
        parts = [f"{lab} {round(100 * g, 1) + 0.0:.1f}% "   # + 0.0: a gain of -4e-16 reads 0.0%, not -0.0%
                 f"(GA-only within {100 * max(0.0, b - 1):.1f}% of the schedule bound)"
                 for lab, g, b in zip(tight["label"], tight["median_gain"], bound[tight.index])]
        lines.append("Below 5% with no room for 5%: " + "; ".join(parts) + ". The schedule bound (`hybrid.bounds`) "
                     "holds for any plan with the same schedule, memory and tensors resident at the start, all of "
                     "which refinement keeps, so re-timing copies or changing evictions cannot gain more "
                     "than that gap: these plans are bandwidth-bound (the d2h stream saturated while the forward "
                     "pass evicts, the h2d stream while the backward pass reloads); only another schedule or "
                     "recomputation could help.")
    if len(loose):
        parts = [f"{lab} {round(100 * g, 1) + 0.0:.1f}% (GA-only {100 * (b - 1):.1f}% above the schedule bound, GA+CP-SAT "
                 f"{100 * (r - 1):.1f}%; 5% would take a plan {100 * (0.95 * b - 1):.1f}% above it)"
                 for lab, g, b, r in zip(loose["label"], loose["median_gain"], bound[loose.index],
                                         loose["ga+cpsat_makespan/schedule_bound"])]
        lines.append("Below 5% although the bound leaves room: " + "; ".join(parts) + ". The bound relaxes the problem "
                     "(one op at a time, fractions of tensors, no wait for free memory), so part of that gap may not "
                     "be reachable; the rest is what larger windows or a longer refinement would have to find.")
    return "\n\n".join(lines)


GRAPHS_NOTE = """\
SwapAdvisor graphs: captured afresh for v100-16gb (`hybrid capture --model NAME --device v100-16gb`, the paper's
batch sizes, the capture's default Adam step; 16 GiB, 12 GB/s each way). Checkmate graphs: imported with the balanced
time scale, v100-16gb's link, memory at 25% (else 50%) of the unswapped peak; graphs whose largest op alone needs
more than 50% of the peak are skipped. All plans pass `hybrid validate`."""


def budget_note(df: pd.DataFrame) -> str:
    """Which figures are fixed by the seeds and which are timings, from the rows' `budget` column."""
    kinds = set(df.loc[df["row"] == "seed", "budget"].astype(str))
    timing = "`search_s`, `wall_s`, `refine_s`, `resume_s`"
    work = ("Work budget (--generations, --windows; beside: --lockstep, --second-core-ratio): the arms run counted "
            "generations and CP-SAT windows (each on deterministic time), with the wall-clock limit only a safety "
            f"net, so every figure but the measured seconds ({timing}) is fixed by the seeds. After mode: "
            "(1 - refine share) of the generations before the split; refinement's patience and hand-back count "
            "windows (`hybrid.refine.handoff.WorkBudget`: unused windows hand back their share of the resumed "
            "generations). Beside mode runs `hybrid.refine.beside.Lockstep` instead of a refiner process racing the "
            "search: the refiner takes an offer every N generations and refines it with the window budget, in the "
            "same process after the search (the offers do not depend on what refinement finds), and GA-only runs "
            "--second-core-ratio times as many generations (the second process's speed-up, a fixed input): it measures "
            "what refining the elites gains, not how two processes share the machine.")
    time_ = ("Figures depend on timing: the arms run on wall-clock budgets (the comparison is at equal wall time), "
             "so generations, windows and every makespan depend on this machine's load.")
    if any(k.startswith("work, cut") for k in kinds):
        work += (" WARNING: some phase stopped at the wall-clock safety net (`budget` says which rows); those "
                 "rows depend on timing.")
    if kinds <= {"work", "work, cut by the time limit"}:
        return work
    if "time" in kinds and len(kinds) == 1:
        return time_
    return (f"Mixed budgets (`budget` column): rows marked work as follows. {work} Rows marked time: {time_}")

NOTES_AFTER = """\
Mode after (`--mode after`). Per (graph, seed): the GA (`ga.optimize`, default settings) runs for 80% of the
budget; then the GA+CP-SAT arm refines its best plan with `hybrid.refine` for the remaining 20% while the GA-only
arm resumes the same search (from its checkpoint) for the same 20%. As in `hybrid optimize --refine cpsat`,
refinement that finds nothing faster for a tenth of its share (`hybrid.refine.handoff`) hands the rest back: the
search resumes from the same checkpoint and the faster plan wins (`final_from`: cpsat or ga; `refine_s` and
`resume_s` are the two parts of the time). `wall_s` is what each arm used (`search_s` the genetic search's part;
`resumed_generations` the generations after the split). `gain_vs_ga` = 1 - makespan(GA+CP-SAT) /
makespan(GA-only) of the same seed; median rows take medians over seeds. `split_makespan_s` is the GA's best at
the split, `rebind_makespan_s` that plan re-walked (objects re-assigned best-fit), `reorder_makespan_s` with its
copy streams re-ordered earliest-deadline-first (`hybrid.refine.stream_order`); `rewalk_gain`, `reorder_gain` and
`window_gain` split the gain between those stages and the CP-SAT windows. Ratios: makespan / ideal (compute
only), makespan / lower bound, and makespan / schedule bound (`hybrid.bounds.schedule_bound`: what any plan
with this schedule, memory and tensors resident at the start needs; near 1, only another schedule helps).

""" + GRAPHS_NOTE

NOTES_BESIDE = """\
Mode beside (`hybrid optimize --refine-mode beside`). Per (graph, seed), two runs of the same search
(`ga.optimize`, default settings, the same seed), each for the whole budget, one after the other, each using both
cores: GA-only with 2 evaluation processes; GA+CP-SAT with 1 while a second process (`hybrid.refine.beside`)
refines its best plan and, when that stalls, its next-best distinct individuals; the arm keeps the faster of its
search's best (`arm_ga_makespan_s`) and the best refined plan (`final_from`). `refined_plans` and
`refined_elites` count what the refiner took, `refine_s` its busy time, `split_makespan_s` the GA plan the winning
refined plan came from and `window_gain` what refinement gained on it. What the second evaluation process buys the
search alone is in results/ga_second_core.md. Columns otherwise as in results/refine_compare.md.

""" + GRAPHS_NOTE

NOTES_AUTO = """\
Mode auto: what `hybrid optimize` does by default on this machine, per graph (`hybrid.pipeline.split_cores`):
beside the search where one evaluation takes under 1 ms, after it elsewhere, each with the default evaluation
processes; the `mode` and `workers` columns say which ran. Protocols and columns as in
results/refine_compare.md (after) and results/refine_compare_beside.md (beside).

""" + GRAPHS_NOTE
NOTES = {"beside": NOTES_BESIDE, "after": NOTES_AFTER, "auto": NOTES_AUTO}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds per arm and seed")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--refine-share", type=float, default=0.2)
    ap.add_argument("--patience", type=float, default=None,
                    help="refinement's patience, a share of its budget (default: hybrid.refine.handoff's)")
    ap.add_argument("--graph-dir", type=Path, default=ROOT / "out" / "graphs")
    ap.add_argument("--only", default=None, help="comma-separated graph names (suite names or Checkmate stems)")
    ap.add_argument("--mode", choices=("beside", "after", "auto"), default="beside",
                    help="how GA+CP-SAT refines: beside the search (a second process) or after it (a share); auto: "
                         "per graph as `hybrid optimize` does by default, with its default evaluation processes")
    ap.add_argument("--elites", type=int, default=None, help="plans offered to the refiner per generation (beside)")
    ap.add_argument("--generations", default=None,
                    help="work budget (after mode, and graphs auto runs after): the GA's generations per arm, "
                         "(1 - refine share) of them before the split; N, or N,NAME=M,... per graph; with "
                         "--windows. --time-limit is then only a safety net per phase")
    ap.add_argument("--windows", default=None,
                    help="work budget: CP-SAT windows refinement may solve after the split (N or N,NAME=M,...; "
                         "with --generations)")
    ap.add_argument("--lockstep", default=None,
                    help="beside on a work budget (and auto's beside graphs): the refiner takes an offer every N "
                         "generations and refines it with --windows windows, in this process after the search "
                         "(hybrid.refine.beside.Lockstep); N or N,NAME=M,...")
    ap.add_argument("--second-core-ratio", type=float, default=1.0,
                    help="with --lockstep: GA-only runs this times --generations (what its extra evaluation "
                         "process buys; gen_ratio in results/ga_second_core.md), a fixed input")
    ap.add_argument("--merge", action="store_true", help="only merge results/<stem>_parts/ into the tables")
    args = ap.parse_args()
    if (args.generations is None) != (args.windows is None):
        raise SystemExit("refine_compare: give --generations and --windows together, or neither")
    if args.lockstep is not None and args.generations is None:
        raise SystemExit("refine_compare: --lockstep needs a work budget (--generations, --windows)")
    if args.generations is not None and args.mode == "beside" and args.lockstep is None:
        raise SystemExit("refine_compare: a work budget in beside mode needs --lockstep N (generations between the "
                         "refiner's offers); without it beside races a process against the search on wall time")
    if args.merge:
        print(merge(args.graph_dir, args.mode).to_markdown(index=False, floatfmt=".4g"))
        return
    from hybrid.report.compare import compare

    only = set(args.only.split(",")) if args.only else None
    seeds = tuple(int(s) for s in args.seeds.split(","))
    parts = parts_dir(args.mode)
    parts.mkdir(parents=True, exist_ok=True)
    for label, g, dev in graphs(args.graph_dir, only):
        extra = {} if args.patience is None else {"patience": args.patience}
        mode, workers = auto_mode(g, dev) if args.mode == "auto" else (args.mode, 1)
        if args.generations is not None and (mode == "after" or args.lockstep is not None):
            extra.update(generations=per_graph(args.generations, label, "--generations"),
                         windows=per_graph(args.windows, label, "--windows"))
            if mode == "beside":
                extra.update(lockstep=per_graph(args.lockstep, label, "--lockstep"),
                             second_core_ratio=args.second_core_ratio)
        df = compare(g, dev, time_limit_s=args.time_limit, seeds=seeds, refine_share=args.refine_share, **extra,
                     mode=mode, workers=workers, elites=args.elites, progress=print,
                     out_dir=ROOT / "out" / stem(args.mode) / label.replace("@", "_"))
        df.insert(1, "label", label)
        relative_cells(df).to_parquet(parts / f"{label}.parquet", index=False)  # plan paths under out/
        print(df[df["row"] == "median"][["label", "arm", "makespan_s", "gain_vs_ga", "makespan/graph_bound"]], flush=True)
    print(merge(args.graph_dir, args.mode).to_markdown(index=False, floatfmt=".4g"))


if __name__ == "__main__":
    main()
