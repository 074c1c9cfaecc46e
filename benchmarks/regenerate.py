"""Regenerate every table and figure under results/ from today's code, in one command.

    python -m benchmarks.regenerate --quick          # every table, small budgets (17.5-31.6 minutes measured on 2 cores)
    python -m benchmarks.regenerate                  # the budgets the full tables state (hours: --list)
    python -m benchmarks.regenerate --only arena,milp_paper --quick
    python -m benchmarks.regenerate --list           # the jobs, their commands and outputs
    python -m benchmarks.compare_runs results/ OTHER/results/   # did a second run change a figure?

First the SwapAdvisor suite is captured afresh (`hybrid capture --model NAME --device v100-16gb`, the
capture's defaults) into --graphs (default out/graphs, kept out of git); then each job runs its benchmark
script in a child process, its output logged under out/regenerate/. A job that fails is reported and the rest
go on; a job that needs what this machine lacks (a CUDA device) says so and is skipped. Every table names the
command, the code's commit, and each graph's sha256 and capture settings (`benchmarks.common.write_table`).

Quick runs give every search a work budget (GA generations, CP-SAT deterministic time or windows, MILP nodes,
exact-search nodes), so a second run changes no figure but measured timings, whatever the load: that is what
lets two jobs run side by side (`--jobs`, default 2). Jobs that measure this machine (capture_scale,
planner_speed, ga_evals_per_second, ga_second_core, the arena solve times, placement's measured rows,
executor_cpu, eager_reproducibility) run alone, and their measurements move from run to run by design.
Full runs keep the papers' protocols (time limits), so their figures depend on the machine. A quick run writes
every table, plot, part and log as `*_quick`, beside the full run's and never over it (each child gets
HYBRID_QUICK=1: `benchmarks.common.quick_stem`). Writes results/regenerate.md (results/regenerate_quick.md for
--quick): each job's command, budget, status and time; every path in it repository-relative.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from benchmarks.common import QUICK_ENV, RESULTS, ROOT, commit, quick_stem, repo_path, write_table

SUITE = ("rnn-8-8k", "brnn-4-8k", "wresnet-152-10", "inception-v4-4", "nasnet-25")
G = "{graphs}"  # replaced by the --graphs folder


@dataclass(frozen=True)
class Job:
    name: str
    module: str
    quick: tuple[str, ...]
    full: tuple[str, ...]
    outputs: tuple[str, ...]           # files or folders under results/ this job rewrites
    paper: str = ""
    needs: str = ""                    # "cuda" for jobs that only run on a GPU
    clean: tuple[str, ...] = field(default=())  # folders under results/ (or out/...) emptied first: stale parts
    fresh: str = ""                    # a subfolder of --graphs the job captures into: emptied first
    quick_outputs: tuple[str, ...] = field(default=())  # where --quick writes, when not `outputs` with `_quick`
    alone: bool = False                # measures this machine (times, rates) or uses both cores: runs by itself
    after: tuple[str, ...] = field(default=())  # jobs whose output it reads

    def written(self, quick: bool) -> tuple[str, ...]:
        """The files this job rewrites: a quick run writes every table beside the full run's (`*_quick`:
        `benchmarks.common.quick_stem`, told by --quick or HYBRID_QUICK=1), so it never replaces a full run's
        figures."""
        if not quick:
            return self.outputs
        return self.quick_outputs or tuple(_quick_file(o) for o in self.outputs)

    def cleaned(self, quick: bool) -> tuple[str, ...]:
        """The folders emptied before the job runs: the quick run's own (`*_quick`) in a quick run."""
        return tuple(_quick_file(c) for c in self.clean) if quick else self.clean

    def argv(self, quick: bool, graphs: Path) -> list[str]:
        args = self.quick if quick else self.full
        return [sys.executable, "-m", self.module, *(a.replace(G, str(graphs)) for a in args)]


def _quick_file(name: str) -> str:
    """`fig8.png` -> `fig8_quick.png`, `out/refine_compare` -> `out/refine_compare_quick` (names already quick
    stay)."""
    p = Path(name)
    stem = p.stem if p.suffix else p.name
    if stem.endswith("_quick"):
        return name
    return str(p.with_name(f"{stem}_quick{p.suffix}"))


# Order matters where one job reads another's output (refine_gap and refine_timeline read refine_compare's plans).
JOBS: tuple[Job, ...] = (
    Job("table1", "benchmarks.table1", ("--graph-dir", f"{G}/table1"), ("--graph-dir", f"{G}/table1"),
        ("table1.md",), "SwapAdvisor Table 1", fresh="table1"),
    Job("capture_scale", "benchmarks.capture_scale", ("--models", "nasnet-25:64", "rnn-8-8k:256"), (),
        ("capture_scale.md",)),
    Job("capture_replay", "benchmarks.capture_replay", ("--models", "resnet-18", "rnn-2-1k", "unet"), (), ("capture_replay.md",)),
    Job("checkmate_baselines", "benchmarks.checkmate_baselines", (), (), ("checkmate_baselines.md",)),
    Job("planner_speed", "benchmarks.planner_speed", ("--evals", "5", "--batches", "2"), (),
        ("planner_speed.md",)),
    Job("ga_evals_per_second", "benchmarks.ga_evals_per_second", ("--zoo-dir", G, "--children", "6"),
        ("--zoo-dir", G), ("ga_evals_per_second.md",)),
    Job("ga_second_core", "benchmarks.ga_second_core", ("--graph-dir", G, "--generations", "10", "--only", "rnn-8-8k"),
        ("--graph-dir", G, "--time-limit", "45"), ("ga_second_core.md",)),
    Job("recompute", "benchmarks.recompute", ("--graphs", G, "--generations", "2"),
        ("--graphs", G), ("recompute.md",)),
    Job("refine_compare", "benchmarks.refine_compare",
        ("--graph-dir", G, "--mode", "after", "--time-limit", "300", "--seeds", "1", "--generations",
         "40,segnet_32_416_608_3_train=300", "--windows", "12,segnet_32_416_608_3_train=100", "--only",
         "inception-v4-4,segnet_32_416_608_3_train"),
        ("--graph-dir", G, "--mode", "after", "--time-limit", "120", "--seeds", "1,2,3"),
        ("refine_compare.md", "refine_compare_summary.md"), "SwapAdvisor §6 (GA) with CP-SAT refinement",
        clean=("refine_compare_parts", "out/refine_compare")),
    Job("refine_compare_beside", "benchmarks.refine_compare",
        ("--graph-dir", G, "--mode", "beside", "--time-limit", "300", "--seeds", "1", "--generations", "30", "--windows",
         "4", "--lockstep", "10", "--second-core-ratio", "1.5", "--only", "inception-v4-4"),
        ("--graph-dir", G, "--mode", "beside", "--time-limit", "120", "--seeds", "1,2,3"),
        ("refine_compare_beside.md", "refine_compare_beside_summary.md"), clean=("refine_compare_beside_parts", "out/refine_compare_beside")),
    Job("refine_compare_auto", "benchmarks.refine_compare",
        ("--graph-dir", G, "--mode", "auto", "--time-limit", "300", "--seeds", "1", "--generations", "30", "--windows",
         "4", "--lockstep", "10", "--second-core-ratio", "1.5", "--only", "inception-v4-4"),
        ("--graph-dir", G, "--mode", "auto", "--time-limit", "120", "--seeds", "1,2,3"),
        ("refine_compare_auto.md", "refine_compare_auto_summary.md"), clean=("refine_compare_auto_parts", "out/refine_compare_auto")),
    Job("refine_gap", "benchmarks.refine_gap", ("--graph-dir", G, "--stem", "refine_compare"),
        ("--graph-dir", G, "--stem", "refine_compare"), ("refine_gap.md",)),
    Job("refine_timeline", "benchmarks.refine_timeline", ("--graph-dir", G, "--label", "inception-v4-4"),
        ("--graph-dir", G, "--label", "inception-v4-4"), ("refine_timeline_inception-v4-4.png",)),
    Job("refine_baselines", "benchmarks.refine_baselines",
        ("--graph-dir", G, "--windows", "6,segnet_32_416_608_3_train=100", "--time-limit", "300", "--only",
         "inception-v4-4,segnet_32_416_608_3_train", "--plot", "inception-v4-4"),
        ("--graph-dir", G, "--time-limit", "60", "--plot", "inception-v4-4"),
        ("refine_baselines.md", "refine_timeline_belady_inception-v4-4.png")),
    Job("arena", "benchmarks.arena", ("--quick",), (),
        ("arena.md",), "MiniMalloc (ASPLOS'23) Table 2; MegEngine static planning", quick_outputs=("arena_quick.md",)),
    Job("arena_cpsat", "benchmarks.arena_cpsat", ("--quick", "--only", "B"), ("--only", "A,B,E,F,G,K"),
        ("arena_cpsat.md",)),
    Job("arena_plans", "benchmarks.arena_plans", ("--quick",), (), ("arena_plans.md",)),
    Job("arena_plans_ga", "benchmarks.arena_plans", ("--planner", "ga", "--quick"), ("--planner", "ga"),
        ("arena_plans_ga.md",)),
    Job("arena_plans_ga_suite", "benchmarks.arena_plans", ("--planner", "ga", "--graphs", G, "--quick"),
        ("--planner", "ga", "--graphs", G), ("arena_plans_ga_suite.md",)),
    Job("arena_packings", "benchmarks.arena_packings", ("--quick",), (), ("arena_packings.md",),
        "MiniMalloc (ASPLOS'23) against perfect packings (MiniMalloc's columns need $HYBRID_MINIMALLOC)",
        alone=True),
    Job("arena_static", "benchmarks.arena_static", ("--quick",), (), ("arena_static.md",),
        "MegEngine static memory planning"),
    Job("milp_paper", "benchmarks.milp", ("--part", "paper", "--quick", "--graphs", f"{G}/milp"),
        ("--part", "paper", "--time-limit", "60", "--paper-stages", "60", "--generations", "20", "--graphs",
         f"{G}/milp"), ("milp.md",), "MO-SOS §3", fresh="milp", quick_outputs=("milp_quick.md",)),
    Job("milp_execute", "benchmarks.milp", ("--part", "execute", "--graphs", f"{G}/milp"),
        ("--part", "execute", "--graphs", f"{G}/milp"), ("milp_execute.md",)),
    Job("milp_scale", "benchmarks.milp",
        ("--part", "scale", "--time-limit", "120", "--node-limit", "300", "--layers", "10", "--stages", "",
         "--graphs", f"{G}/milp"),
        ("--part", "scale", "--time-limit", "600", "--layers", "10,20,30", "--stages", "30,60,90,145",
         "--graphs", f"{G}/milp"), ("milp_scale.md",)),
    Job("milp_scale_vgg", "benchmarks.milp",
        ("--part", "scale", "--time-limit", "120", "--node-limit", "300", "--layers", "", "--stages", "30",
         "--stem", "milp_scale_vgg_quick",
         "--graphs", f"{G}/milp"),
        ("--part", "scale", "--time-limit", "600", "--layers", "", "--stages", "60,90", "--warm-start", "--stem",
         "milp_scale_vgg", "--graphs", f"{G}/milp"), ("milp_scale_vgg.md",), quick_outputs=("milp_scale_vgg_quick.md",)),
    Job("placement", "benchmarks.placement", ("--graphs", f"{G}/placement", "--time-limit", "5", "--quick"),
        ("--graphs", f"{G}/placement", "--time-limit", "30"), ("placement_latency.md", "placement_parts.md"),
        "CPU/GPU partitioning paper, Tables 4-5, Fig. 9", fresh="placement"),
    Job("ga_acceptance", "benchmarks.ga_acceptance", ("--graphs", G, "--work", f"{G}/ga_acceptance", "--quick", "--force"),
        ("--graphs", G, "--work", f"{G}/ga_acceptance", "--force"), ("ga_acceptance.md",), "SwapAdvisor Fig. 6",
        fresh="ga_acceptance", clean=("ga_acceptance",)),
    Job("fig7", "benchmarks.fig7", ("--graphs", f"{G}/fig7", "--work", f"{G}/fig7/plans", "--quick"),
        ("--graphs", f"{G}/fig7", "--work", f"{G}/fig7/plans"), ("fig7.md",), "SwapAdvisor Fig. 7", fresh="fig7"),
    Job("table2", "benchmarks.table2", ("--work", f"{G}/table2", "--quick"), ("--work", f"{G}/table2"),
        ("table2.md",), "SwapAdvisor Table 2", fresh="table2"),
    Job("fig8", "benchmarks.fig8", ("--work", f"{G}/fig8", "--quick"), ("--work", f"{G}/fig8"),
        ("fig8.md", "fig8.png"), "SwapAdvisor Fig. 8", fresh="fig8"),
    Job("ga_ablation", "benchmarks.ga_ablation", ("--graphs", G, "--quick"), ("--graphs", G),
        ("ga_ablation.md", "fig9c.md", "fig9c.png"), "SwapAdvisor Fig. 9c, Fig. 10", clean=("ga_ablation",),
        quick_outputs=("ga_ablation_quick.md", "fig9c_quick.md", "fig9c_quick.png")),
    Job("sensitivity", "benchmarks.sensitivity", ("--graphs", G, "--quick"), ("--graphs", G), ("sensitivity.md",)),
    Job("laid_out", "benchmarks.laid_out", ("--graphs", G, "--quick"), ("--graphs", G), ("laid_out.md",),
        "issue 31's acceptance"),
    Job("executor_cpu", "benchmarks.executor_cpu", ("--fractions", "0.5", "--iters", "1"), (),
        ("executor_cpu.md",)),
    Job("eager_reproducibility", "benchmarks.eager_reproducibility", ("--runs", "2"), ("--runs", "24"),
        ("eager_reproducibility.md",)),
    Job("executor_outside", "benchmarks.executor_outside", ("--quick",), (), ("executor_outside.md",),
        "issue 32: executor memory = plan memory", quick_outputs=("executor_outside_quick.md",)),
    Job("executor_outside_wide", "benchmarks.executor_outside", ("--wide", "--quick"), ("--wide", "--reps", "1"),
        ("executor_outside_wide.md",), "issue 32: executor memory = plan memory",
        quick_outputs=("executor_outside_wide_quick.md",)),
    Job("scale", "benchmarks.scale", ("--quick",), (), ("scale.md",), quick_outputs=("scale_quick.md",)),
    Job("vs_torch", "benchmarks.vs_torch", ("--quick", "--generations", "5"), (), ("vs_torch.md", "vs_torch.png"),
        "issue 32: PyTorch's memory tools at the same peak"),
    Job("executor_gpu", "benchmarks.executor_gpu", ("--quick", "--out", "results/executor_gpu_quick.md"), (),
        ("executor_gpu.md",), "SwapAdvisor Fig. 11", needs="cuda", quick_outputs=("executor_gpu_quick.md",)),
    # one GPU call's rows on another card than executor_gpu.md's (benchmarks/gpu_session.sh's `executor` stage)
    Job("executor_gpu_h200", "benchmarks.executor_gpu", ("--quick", "--out", "results/executor_gpu_h200_quick.md"),
        ("--models", "resnet-50", "rnn-4-2k", "--ga-seconds", "15", "--no-sanitizer", "--out",
         "results/executor_gpu_h200.md"), ("executor_gpu_h200.md",), "issue 31: the written plan on a GPU",
        needs="cuda"),
    Job("vs_torch_measured", "benchmarks.vs_torch", ("--measured-only", "--measure-on", "cpu", "--quick"),
        ("--measured-only", "--iters", "8", "--hybrid-seconds", "12", "--alternatives",
         "eager,checkpoint,save_on_cpu,checkpoint+save_on_cpu"), ("vs_torch_measured.md",),
        "issue 32: PyTorch's memory tools at the same peak, measured", needs="cuda"),
    # reads the committed vs_torch_measured.csv and that card's profile (benchmarks/profiles/): runs anywhere
    Job("vs_torch_replay", "benchmarks.vs_torch_replay", ("--quick",), (), ("vs_torch_replay.md",),
        "issue 32: the measured peaks planned again, beside what any plan could reach",
        quick_outputs=("vs_torch_replay_quick.md",)),
    # reads the committed executor_gpu_h200.json and that card's profile: runs anywhere, in about 20 s
    Job("link_retime", "benchmarks.link_retime", (), (), ("link_retime.md",),
        "issue 31: the host link a GPU session's step times imply"),
)

# Jobs that measure this machine (their tables report seconds or rates, or they use both cores) run alone.
ALONE = {"capture_scale", "scale", "planner_speed", "ga_evals_per_second", "ga_second_core", "arena", "arena_cpsat",
         "placement", "executor_cpu", "eager_reproducibility", "executor_outside",
         "executor_outside_wide"}
ALONE_IN_FULL_RUNS_ONLY = {"arena", "arena_cpsat"}   # their quick runs count nodes; their full runs time solvers
# Jobs that read another job's output, or share its capture folder (milp_paper empties out/graphs/milp first).
AFTER = {"refine_gap": ("refine_compare",), "refine_timeline": ("refine_compare",),
         "milp_execute": ("milp_paper",), "milp_scale": ("milp_paper",), "milp_scale_vgg": ("milp_paper",)}
JOBS = tuple(dataclasses.replace(j, alone=j.name in ALONE, after=AFTER.get(j.name, ())) for j in JOBS)

# Minutes each job takes at full budgets on this 2-core machine: measured where the job was run at full budgets
# (stated in its table), otherwise its budgets added up (time limits x runs). The full run has not been run whole.
FULL_MINUTES: dict[str, tuple[float, str]] = {
    "table1": (0.7, "same as --quick"),
    "arena_packings": (45, "100 packings, hybrid and MiniMalloc up to 60 s each (45 min measured, in parts: "
                           "the unsolved ones take the full limit)"),
    "scale": (40, "six commands at 10k, 30k and 100k ops, measured in parts on a loaded machine"),
    "capture_scale": (10, "8 models, each captured in a child process (up to 2 min each)"),
    "capture_replay": (3, "every small model replayed"),
    "checkmate_baselines": (0.1, "same as --quick"),
    "planner_speed": (1, "20 evaluations x 5 batches"),
    "ga_evals_per_second": (1, "every suite graph"),
    "ga_second_core": (5, "45 s x (1 and 2 workers) x 3 graphs"),
    "recompute": (16, "measured: 928 s at 964ea16 (60 s per suite search, 20 s per Checkmate search)"),
    "refine_compare": (65, "120 s per arm and seed, 3 seeds, every graph"),
    "refine_compare_beside": (110, "120 s per arm and seed (two processes), 3 seeds, every graph"),
    "refine_compare_auto": (90, "120 s per arm and seed, 3 seeds, every graph"),
    "refine_gap": (0.5, "reads refine_compare's plans"),
    "refine_timeline": (0.1, "one plot"),
    "refine_baselines": (12, "60 s per graph"),
    "arena": (3.0, "measured (results/arena.md)"),
    "arena_cpsat": (2.5, "measured: 138 s at 964ea16 (6 instances x 2 solvers, up to 30 s each)"),
    "arena_plans": (0.1, "measured: 3 s at 964ea16 (Belady plans, up to 10 s of layout each)"),
    "arena_plans_ga": (0.2, "measured: 8 s at 964ea16 (30 generations per Checkmate plan)"),
    "arena_plans_ga_suite": (5, "measured: 279 s at 964ea16 (30 generations per suite graph)"),
    "arena_static": (0.2, "measured: 7 s at 964ea16"),
    "milp_paper": (20, "measured (results/milp.md)"),
    "milp_execute": (1, "same as --quick"),
    "milp_scale": (70, "600 s x 7 models at most"),
    "milp_scale_vgg": (6, "measured: 60 stages optimal in 256 s, 90 stages up to 600 s"),
    "placement": (8, "11 models, VGG16 at 5 batches, 3 profiling runs"),
    "ga_acceptance": (3.9, "measured (results/ga_acceptance.md)"),
    "fig7": (1.5, "measured"),
    "table2": (1, "measured"),
    "fig8": (0.2, "measured"),
    "ga_ablation": (25, "measured (results/ga_ablation.md)"),
    "sensitivity": (3.5, "measured: 201 s at 964ea16 (118 s before)"),
    "laid_out": (10.3, "measured: 616 s (3 runs of 5 generations of 16 and 7 laid-out baselines per graph)"),
    "executor_cpu": (4, "2 memory fractions x 3 iterations per model"),
    "eager_reproducibility": (2, "24 runs"),
    "executor_outside": (1.5, "measured: 4 models, 3 counted iterations and 2 x 3 timed runs of 10 each"),
    "executor_outside_wide": (3, "measured: 9 models, 3 counted iterations and 2 timed runs of 10 each"),
    "vs_torch": (13, "6 models: 2 captures each, 60 s of search and 60 s of the rerun-chain bound at the checkpointed "
                 "peak (simulated without a GPU)"),
    "executor_gpu": (12, "measured on an H100 (results/executor_gpu.md), in parts of 10 minutes at most"),
    "executor_gpu_h200": (4.5, "measured on an H200: resnet-50 in 4.2 min (rnn-4-2k's profile did not end within "
                               "the call's cap)"),
    "vs_torch_measured": (3.5, "measured on an H200: five models, 12 s of search per peak"),
    "link_retime": (0.5, "measured: 17 s (one capture, the baselines' plans at two memories)"),
    "vs_torch_replay": (14, "measured: 14 peaks, 12 s of search twice each (workspaces counted and aside) and 10 s "
                            "of the chain bound"),
}


def capture_suite(graphs: Path, log) -> list[str]:  # noqa: ANN001
    """Capture the suite afresh (a stale file from older code would make every table that reads it stale)."""
    graphs.mkdir(parents=True, exist_ok=True)
    exe = Path(sys.executable).with_name("hybrid")
    done = []
    for name in SUITE:
        t0 = time.perf_counter()
        subprocess.run([str(exe), "capture", "--model", name, "--device", "v100-16gb", "--out",
                        str(graphs / f"{name}.json")], check=True, stdout=log, stderr=subprocess.STDOUT)
        done.append(f"{name} ({time.perf_counter() - t0:.0f} s)")
    return done


def ready(pending: list[Job], running: dict, in_run: set[str], slots: int) -> list[Job]:
    """Jobs to start now, in table order: a job waits for the jobs it reads (`after`); a job that measures
    this machine (`alone`) waits for an empty machine and keeps it; the rest share `slots` cores. Their
    figures do not depend on the company they keep (work budgets), only their measured seconds do."""
    out: list[Job] = []
    busy = len(running)
    if any(r[0].alone for r in running.values()):
        return out
    waiting = {j.name for j in pending}
    for j in pending:
        if any(d in in_run and (d in waiting or d in running) for d in j.after):
            continue
        if j.alone:
            if busy == 0 and not out:
                return [j]
            continue
        if busy + len(out) < slots:
            out.append(j)
    return out


def kept_full_tables() -> str:
    """The full-budget tables a quick run leaves alone, each with the commit its header names."""
    import re

    out = []
    for j in JOBS:
        for name in (o for o in j.outputs if o.endswith(".md")):
            path = RESULTS / name
            if path.exists():
                m = re.search(r"code ([0-9a-f]{7,}(?:\+dirty)?)\)", path.read_text())
                out.append(f"`{name}` (code {m.group(1) if m else 'unknown'})")
    return ", ".join(out)


def full_hours(jobs) -> float:  # noqa: ANN001
    return sum(FULL_MINUTES[j.name][0] for j in jobs) / 60


def has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="\n".join(__doc__.splitlines()[1:]),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small budgets: every table in 20-32 minutes on 2 cores (17.5 measured at e0cc01a, 31.6 at 87ce94a "
                    "on a machine slower by a third: results/regenerate_quick.md)")
    ap.add_argument("--only", default="", help="comma-separated job names (see --list)")
    ap.add_argument("--skip", default="", help="comma-separated job names not to run")
    ap.add_argument("--graphs", type=Path, default=ROOT / "out" / "graphs", help="where graphs are captured")
    ap.add_argument("--no-capture", action="store_true", help="reuse the suite graphs already in --graphs")
    ap.add_argument("--list", action="store_true", help="print the jobs and exit")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="jobs run side by side (default: 2, or 1 on a 1-core machine); jobs that measure this "
                         "machine always run alone")
    args = ap.parse_args()
    names = {j.name for j in JOBS}
    only = {s for s in args.only.split(",") if s}
    skip = {s for s in args.skip.split(",") if s}
    bad = (only | skip) - names
    if bad:
        sys.exit(f"error: unknown job {sorted(bad)[0]!r} in --only/--skip; the jobs are: {', '.join(sorted(names))}")
    jobs = [j for j in JOBS if (not only or j.name in only) and j.name not in skip]
    if args.list:
        for j in jobs:
            full = "" if args.quick else f"  (~{FULL_MINUTES[j.name][0]:g} min: {FULL_MINUTES[j.name][1]})"
            print(f"{j.name:24s} {shlex.join(j.argv(args.quick, args.graphs)[1:])}  -> "
                  f"{', '.join(j.written(args.quick))}{full}")
        if not args.quick:
            print(f"full budgets: about {full_hours(jobs):.1f} hours in all (estimates above)")
        return
    if commit().endswith("+dirty"):
        print("warning: the code has uncommitted changes; every table will name its commit with +dirty (commit "
              "first for tables a reader can trace)", file=sys.stderr, flush=True)
    logs = ROOT / "out" / "regenerate"
    logs.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()
    rows = []
    if not args.no_capture:
        with open(logs / "capture.log", "w") as log:
            t0 = time.perf_counter()
            got = capture_suite(args.graphs.resolve(), log)
            print(f"captured {', '.join(got)}", flush=True)
            rows.append({"job": "capture suite", "status": "ok", "seconds": time.perf_counter() - t0,
                         "command": f"hybrid capture --model NAME --device v100-16gb --out {repo_path(args.graphs)}/NAME.json",
                         "writes": "graphs (not in git)"})
    cuda = has_cuda()
    budget = "quick" if args.quick else "full"
    pending = []
    jobs = [dataclasses.replace(j, alone=False) if args.quick and j.name in ALONE_IN_FULL_RUNS_ONLY else j
            for j in jobs]
    for j in jobs:
        if j.needs == "cuda" and not cuda:
            print(f"[{j.name}] skipped: no CUDA device on this machine", flush=True)
            rows.append({"job": j.name, "status": "skipped: needs a CUDA device", "seconds": 0.0,
                         "command": ("HYBRID_QUICK=1 " if args.quick else "") + "python " + shlex.join(j.argv(args.quick, args.graphs)[1:]),
                         "writes": ", ".join(j.written(args.quick)), "budget": budget})
        else:
            pending.append(j)
    running: dict[str, tuple[Job, subprocess.Popen, float, object]] = {}
    in_run = {j.name for j in pending}
    while pending or running:
        for j in ready(pending, running, in_run, args.jobs):
            pending.remove(j)
            argv = j.argv(args.quick, args.graphs)
            if j.fresh and not args.no_capture:
                shutil.rmtree(args.graphs / j.fresh, ignore_errors=True)
            for c in j.cleaned(args.quick):
                shutil.rmtree(ROOT / c if c.startswith("out/") else RESULTS / c, ignore_errors=True)
            print(f"[{j.name}] python {shlex.join(argv[1:])}", flush=True)
            log = open(logs / f"{j.name}.log", "w")
            env = {**os.environ, QUICK_ENV: "1" if args.quick else "0"}   # every table it writes is then *_quick
            running[j.name] = (j, subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env),
                               time.perf_counter(), log)
        time.sleep(0.2)
        for name, (j, proc, t0, log) in list(running.items()):
            rc = proc.poll()
            if rc is None:
                continue
            log.close()
            del running[name]
            secs = time.perf_counter() - t0
            status = "ok" if rc == 0 else f"failed (exit {rc}; see out/regenerate/{j.name}.log)"
            print(f"[{j.name}] {status} in {secs:.0f} s", flush=True)
            rows.append({"job": j.name, "status": status, "seconds": secs,
                         "command": ("HYBRID_QUICK=1 " if args.quick else "") + "python " + shlex.join(j.argv(args.quick, args.graphs)[1:]),
                         "writes": ", ".join(j.written(args.quick)), "budget": budget,
                         "ran": "alone" if j.alone else f"beside others (--jobs {args.jobs})"})
    total = time.perf_counter() - t_all
    df = pd.DataFrame(rows)
    df.insert(2, "commit", commit())
    title = "Every table under results/ and the run that made it"
    if not only and not skip:
        write_table(df, "regenerate", title,
                    f"Code {commit()}; {total / 60:.1f} minutes in all on this machine "
                    f"({'--quick' if args.quick else 'full budgets'}). Each table's own header names its command, "
                    "the commit and its graphs. The full budgets take about "
                    f"{full_hours(JOBS):.1f} hours on this machine by the jobs' estimates (`--list`), most of it the "
                    "three refine_compare tables (120 s per arm, seed and graph); tables committed at full budgets are "
                    f"kept beside their quick twins (`*_quick`), so a quick run never replaces them: {kept_full_tables()}. "
                    "Check that a "
                    "second run changes no figure: `python -m benchmarks.compare_runs results/ OTHER/results/`.")
    elif (RESULTS / f"{quick_stem('regenerate')}.csv").exists():  # a partial run replaces its jobs' rows in the last
        old = pd.read_csv(RESULTS / f"{quick_stem('regenerate')}.csv")       # whole run's table
        old = old[~old["job"].isin(df["job"])]
        merged = pd.concat([old, df], ignore_index=True)
        note = (RESULTS / f"{quick_stem('regenerate')}.md").read_text().split("\n\n")
        notes = next((n for n in note if n.startswith("Code ")), "")
        notes += f" Re-run afterwards with --only (their rows' commit): {', '.join(df['job'])}."
        path = write_table(merged, "regenerate", title, notes)
        text = path.read_text().replace("Regenerate: `python -m benchmarks.regenerate --only",
                                        "Last partial run: `python -m benchmarks.regenerate --only")
        path.write_text(text)
    print(f"done in {total / 60:.1f} min; {sum(r['status'] != 'ok' and not r['status'].startswith('skipped') for r in rows)} failed")
    if any(r["status"].startswith("failed") for r in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
