"""GA-only against GA + CP-SAT refinement, at equal total wall time, as a pandas table.

Two ways to add CP-SAT (`mode`), as in `hybrid optimize --refine-mode`:
- **beside** (the default here; `hybrid compare --refine-mode auto` picks it per
  graph, as `hybrid optimize` does): each arm is its own run of
  the same search (same seed, the whole budget); the GA+CP-SAT run also starts
  `hybrid.refine.beside`, a refiner process that refines the search's best and
  elites while it runs, and keeps the faster of the search's best and the best
  refined plan. The refiner takes a core, so GA-only evaluates with one
  process more (`workers` + 1): both arms use the same cores, as
  `hybrid optimize --refine none` and `--refine cpsat` do on one machine. `arm_ga_makespan_s` is that run's own search
  result, `split_makespan_s` the GA plan the winning refined plan came from.
- **after**: the search runs for (1 - refine_share) of the budget and
  checkpoints; then **ga+cpsat** refines that best plan for the rest (when
  refinement stops finding anything, the search resumes from the checkpoint
  and the faster plan wins, `hybrid.refine.handoff`; `final_from` says which) while
  **ga** resumes the same search for the same time. A paired comparison: the
  difference is what the last part of the budget bought. Its rows split
  refinement's gain: `rewalk_gain` is what re-walking the split plan gave
  (objects re-assigned best-fit, before any window), `reorder_gain` what
  re-ordering its copy streams earliest-deadline-first added
  (`hybrid.refine.stream_order`) and `window_gain` what the CP-SAT windows
  added on top (in beside mode too, for the winning refined plan).
Both plans are validated and written.

In beside mode each arm is one `hybrid.pipeline.run_optimize` (as `hybrid optimize --no-arena`, its
`--refine none` and `--refine cpsat --refine-mode beside`), so its `time_limit_s` covers the arm's setup too.
The after and counted-work protocols share one split between the arms, which `run_optimize` does not: they
call the search (`ga.optimize`) and `hybrid.refine.handoff` themselves.

Equal wall time: every phase of an arm takes its limit from the arm's
deadline (start + `time_limit_s`), the search's limit counting its own setup
(`ga.optimize`), and in after mode the split search, the hand-back and the
GA-only arm share one evaluator, so neither resumption spends its seconds
starting worker processes. What each arm actually took, from its start to its
final plan, is the `wall_s` column (after mode: the shared split counts for
both arms); `search_s` is the genetic search's own time in it, and
`resumed_generations` the generations run after the split.

`compare(...)` returns one row per (arm, seed) plus a median row per arm;
tables of several graphs concatenate (`pd.concat`) into one, and
`summary(...)` condenses any of them to one line per graph.
"""
from __future__ import annotations

import shlex
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from hybrid.bounds import plan_graph_bound, schedule_bound
from hybrid.units import format_bytes, format_seconds
from hybrid.validator import event_figures
from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.refine.handoff import DEFAULT_PATIENCE, refine_then_resume
from hybrid.plan import Plan

MODES = ("beside", "after")
COLUMNS = ["graph", "memory_bytes", "arm", "row", "seed", "makespan_s", "ideal_s", "persistent_bound_s", "makespan/ideal",
           "makespan/persistent_bound", "graph_bound_s", "makespan/graph_bound", "schedule_bound_s", "makespan/schedule_bound", "gain_vs_ga", "stall_s", "bytes_h2d",
           "bytes_d2h", "bytes_moved", "search_s", "wall_s", "workers", "ga_generations", "resumed_generations",
           "refine_s", "resume_s", "final_from",
           "refine_windows", "refine_accepted", "mode", "arm_ga_makespan_s", "refined_plans", "refined_elites",
           "split_makespan_s", "rebind_makespan_s", "reorder_makespan_s", "rewalk_gain", "reorder_gain",
           "window_gain", "milp_status", "milp_gap", "milp_stages", "ilp_objective_s", "budget", "plan"]
MILP_ARM = "milp"
RUN_TIME_COLUMNS = ("search_s", "wall_s", "refine_s", "resume_s")  # seconds spent, not seconds of a plan
MILP_STAGES = 60   # default coarsening for --with-milp: 60 stages reached gap <= 1% in 10 minutes (docs/milp.md)


def _row(graph: Graph, plan: Plan, arm: str, seed: int, search_s: float, plan_path: str) -> dict:
    m = plan.metrics
    ideal = float(m.get("ideal_s", 0.0))
    fig = event_figures(graph, plan)   # from the events, as every summary (hybrid.validator)
    lb = float(fig["persistent_bound_s"])
    gb = plan_graph_bound(graph, plan)
    h2d, d2h = int(fig["bytes_h2d"]), int(fig["bytes_d2h"])
    return {"graph": graph.name, "memory_bytes": int(plan.device.memory_bytes), "arm": arm, "row": "seed",
            "seed": seed, "makespan_s": plan.makespan_s, "ideal_s": ideal, "persistent_bound_s": lb,
            "makespan/ideal": plan.makespan_s / ideal if ideal > 0 else np.nan,
            "makespan/persistent_bound": plan.makespan_s / lb if lb > 0 else np.nan,
            "graph_bound_s": gb, "makespan/graph_bound": plan.makespan_s / gb if gb > 0 else np.nan,
            # a plan of this schedule is one of any schedule's: its bound is never below graph_bound (each is a
            # relaxation, and graph_bound's can be the tighter), as `hybrid info` takes the larger (with_bounds)
            "schedule_bound_s": (sb := max(schedule_bound(graph, plan), gb)),
            "makespan/schedule_bound": plan.makespan_s / sb if sb > 0 else np.nan, "gain_vs_ga": np.nan,
            "stall_s": float(fig["stall_s"]), "bytes_h2d": h2d, "bytes_d2h": d2h,
            "bytes_moved": h2d + d2h, "search_s": search_s, "wall_s": np.nan, "workers": np.nan,
            "ga_generations": np.nan, "resumed_generations": np.nan,
            "refine_s": np.nan, "resume_s": np.nan, "final_from": "", "refine_windows": np.nan,
            "refine_accepted": np.nan, "mode": "", "arm_ga_makespan_s": np.nan, "refined_plans": np.nan,
            "refined_elites": np.nan, "split_makespan_s": np.nan, "rebind_makespan_s": np.nan,
            "reorder_makespan_s": np.nan, "rewalk_gain": np.nan, "reorder_gain": np.nan, "window_gain": np.nan,
            "milp_status": "", "milp_gap": np.nan, "milp_stages": np.nan, "ilp_objective_s": np.nan,
            "budget": "", "plan": plan_path}


def milp_row(graph: Graph, device: Device, time_limit_s: float, stages: int | None = None,
             out: Path | None = None, say: Callable[[str], None] = lambda _m: None) -> dict:
    """The MO-SOS MILP (milp/, one deterministic run, no seed) as a row of the same table: `search_s` is its
    solve time, `wall_s` build + solve + decode; `stages` defaults to min(#ops, MILP_STAGES)."""
    from milp.api import plan_milp
    from milp.solve import SolveOptions
    from hybrid.validator import validate

    n = len(graph.ops) if stages is None and len(graph.ops) <= MILP_STAGES else (stages or MILP_STAGES)
    t0 = time.monotonic()
    run = plan_milp(graph, device, "mosos", n if n < len(graph.ops) else None,
                    SolveOptions("highs", time_limit_s, 0.01, 1), require=False)
    r = run.result
    if run.plan is None:    # a row that says so: the arms' rows stand, and the table is written
        proven = "infeasible" in str(r.status).lower()
        why = (f"the {run.stages}-stage model is infeasible at this memory (stages coarsen the schedule: more "
               "--milp-stages, up to the op count, or more memory)" if proven else
               f"no incumbent in {time_limit_s:g} s (give --with-milp more time)")
        say(f"{graph.name}: MO-SOS MILP found no plan: {why}")
        row = {c: np.nan for c in COLUMNS}
        row.update(graph=graph.name, memory_bytes=int(device.memory_bytes), arm=MILP_ARM, row="seed", seed=pd.NA,
                   search_s=r.solve_s, wall_s=time.monotonic() - t0, workers=1, milp_status=str(r.status),
                   milp_stages=run.stages, final_from="", mode="mosos", budget="time", plan="")
        return row
    report = validate(graph, run.plan)
    if not report.valid:
        raise HybridError(f"compare: the milp plan failed validation ({report.violations[0].message}); please "
                          "report this with the graph file")
    path = ""
    if out is not None:
        path = str(out / f"{graph.name}-milp.json")
        run.plan.save(path)
    row = _row(graph, run.plan, MILP_ARM, 0, r.solve_s, path)
    row.update(seed=pd.NA, wall_s=time.monotonic() - t0, workers=1, milp_status=r.status, milp_gap=r.gap,
               milp_stages=run.stages, ilp_objective_s=r.objective_s, mode="mosos", budget="time")
    say(f"{graph.name}: MO-SOS MILP {format_seconds(run.plan.makespan_s, 6)} ({run.stages} stages, {r.status}, gap "
        f"{'?' if r.gap is None else f'{100 * r.gap:.2f}%'}, {r.solve_s:.1f} s)")
    return row


def planner_options(recompute: bool = True):  # noqa: ANN201 - hybrid.swap.augmented.PlannerOptions
    """The planner options `hybrid optimize` searches from (`OptimizeOptions.planner_options`), which both arms
    use: one definition, so the comparison's GA-only arm is that command's `--refine none` run."""
    from hybrid.pipeline import OptimizeOptions

    return OptimizeOptions(recompute=recompute).planner_options()


def check_seeds(seeds: Sequence[int]) -> None:
    """HybridError naming the seed for a negative one (numpy's generators refuse it mid-run) or a repeated one
    (it would run twice and count twice in the medians)."""
    seen: set[int] = set()
    for seed in seeds:
        if int(seed) < 0:
            raise HybridError(f"--seeds must not be negative, got {seed}; give seeds such as 1,2,3")
        if int(seed) in seen:
            raise HybridError(f"--seeds has seed {seed} twice; give each seed once (a repeat would count twice in "
                              "the medians)")
        seen.add(int(seed))


def split_gains(split_s: float, rebind_s: float, reorder_s: float, refined_s: float) -> tuple[float, float, float]:
    """Refinement's gain in its stages, as fractions: re-walking the split plan, then re-ordering its copy
    streams, then CP-SAT windows (each on what the stage before left; a stage that did not help is kept out).
    A NaN `reorder_s` (refinement without that stage) counts as no gain."""
    walked = min(split_s, rebind_s)
    ordered = walked if np.isnan(reorder_s) else min(walked, reorder_s)
    return 1.0 - walked / split_s, 1.0 - ordered / walked, 1.0 - refined_s / ordered


def compare(graph: Graph, device: Device | None = None, *, time_limit_s: float, seeds: Sequence[int] = (1, 2, 3),
            refine_share: float = 0.2, workers: int = 1, out_dir: str | Path | None = None, ga_config=None,
            refine_options=None, patience: float | None = DEFAULT_PATIENCE, mode: str = "beside",
            elites: int | None = None, progress: Callable[[str], None] | None = None,
            options=None, milp_time_s: float | None = None, milp_stages: int | None = None,
            generations: int | None = None, windows: int | None = None, lockstep: int | None = None,
            second_core_ratio: float = 1.0) -> pd.DataFrame:
    """Run both arms for every seed on `graph` (on `device`, default the graph's); the table as a DataFrame.

    Plans go to `out_dir` when given: `<graph>-seed<N>-ga.json`, `<graph>-seed<N>-ga+cpsat.json`, and
    `<graph>-seed<N>-split.json` (the GA plan refinement started from: the best at the split, or in beside
    mode the one the winning refined plan came from).
    `ga_config` (a ga.GAConfig) sets the search's other parameters; its seed is replaced per run.
    `options` (hybrid.swap.augmented.PlannerOptions) are the planner options both arms search from (default:
    `hybrid optimize`'s, `planner_options()`: the arms are that command's runs, so a weaker planner here would
    make GA-only look worse than `hybrid optimize --refine none` is).
    `seeds` must be distinct non-negative integers: a repeated seed would be counted twice in the medians.
    `patience` is a share of `refine_share` of the budget: how long refinement may go without a lower
    makespan before it hands the rest of its time back to the search (after), or moves on to another of the
    search's plans (beside; `elites` of them are offered each generation, default
    `hybrid.refine.beside.DEFAULT_ELITES`). `workers` is the search's evaluation processes in both arms,
    except that GA-only gets one more in beside mode (the core the refiner uses in the other arm).
    `milp_time_s` adds the MO-SOS MILP (milp/, HiGHS with that time limit, `milp_stages` stages, default
    min(#ops, MILP_STAGES)) as one more arm, `milp`: one row (it has no seed), `gain_vs_ga` against the median
    GA-only makespan.
    `generations` and `windows` (after mode only, both or neither) budget the arms in counted work instead of
    seconds, so that a seed fixes every makespan whatever the machine's load: the search runs
    (1 - refine_share) of `generations` to the split; GA-only resumes it to `generations`; GA+CP-SAT refines
    with at most `windows` CP-SAT windows (each on deterministic time) and a patience of `patience` of them,
    and the windows it leaves unused hand back their share of the resumed generations
    (`hybrid.refine.handoff.WorkBudget`). `time_limit_s` is then only a safety net for each phase (the
    `budget` column says "work, cut by the time limit" if one ever stopped there).
    In beside mode they need `lockstep` (generations between the refiner's offers,
    `hybrid.refine.beside.Lockstep`): the GA+CP-SAT arm's search runs `generations` and the refiner
    refines one offer per `lockstep` generations with `windows` windows each; GA-only runs
    round(`second_core_ratio` x `generations`), the generations its extra evaluation process would buy
    (a fixed input, e.g. `gen_ratio` of results/ga_second_core.md, so that no figure depends on timing).
    Ctrl-C (or SIGTERM under `hybrid compare`) returns the seeds completed so far, with
    `attrs["interrupted"]` set; with none completed, KeyboardInterrupt propagates.
    """
    from hybrid.pipeline.optimize import _seconds

    time_limit_s = _seconds(time_limit_s)   # seconds, or text with its unit ("30s"), as run_optimize takes it
    if not 0 < time_limit_s < float("inf"):
        raise HybridError(f"--time-limit must be positive and finite, got {time_limit_s}")
    if not 0.0 < refine_share < 1.0:
        raise HybridError(f"--refine-share must be within (0, 1), got {refine_share}")
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, (Sequence, np.ndarray)) or \
            not all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in seeds):
        raise HybridError(f"seeds (--seeds) must be a sequence of whole numbers such as (1, 2, 3), got {seeds!r}")
    if not seeds:
        raise HybridError("give at least one seed, e.g. --seeds 1,2,3")
    check_seeds(seeds)
    if mode not in MODES:
        raise HybridError(f"mode (--refine-mode) must be one of {', '.join(MODES)}, got {mode!r} (`hybrid compare "
                          "--refine-mode auto` picks one of them per graph, as `hybrid optimize` does)")
    work = None
    if (generations is None) != (windows is None):
        raise HybridError("give --generations and --windows together (a work budget for both arms), or neither")
    if lockstep is not None and (mode != "beside" or generations is None):
        raise HybridError("--lockstep needs --refine-mode beside and a work budget (--generations, --windows)")
    if second_core_ratio <= 0:
        raise HybridError(f"--second-core-ratio must be positive, got {second_core_ratio}")
    if generations is not None and mode == "beside":
        if lockstep is None:
            raise HybridError("a work budget in beside mode needs --lockstep N (generations between offers)")
        from hybrid.refine.beside import DEFAULT_ELITES, Lockstep
        from hybrid.refine.handoff import WorkBudget

        work = Lockstep(lockstep, int(windows), elites or DEFAULT_ELITES,  # type: ignore[arg-type]
                        WorkBudget.patience_of(int(windows), patience)), generations, second_core_ratio
    elif generations is not None:
        from hybrid.refine.handoff import WorkBudget

        split_at = round((1.0 - refine_share) * generations)
        work = (split_at, WorkBudget(int(windows), generations - split_at,  # type: ignore[arg-type]
                                     WorkBudget.patience_of(int(windows), patience)))
    device = device or graph.device
    if device is None:
        from hybrid.device import PRESETS

        device = PRESETS["v100-16gb"]
    from ga import GAConfig

    base = ga_config or GAConfig()
    options = options or planner_options()
    say = progress or (lambda _msg: None)
    out = Path(out_dir) if out_dir is not None else None
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    interrupted = False
    try:
        for seed in seeds:
            rows += _seed_rows(graph, device, replace(base, seed=int(seed)), time_limit_s, refine_share, workers,
                               refine_options, patience, elites, say, mode, out, options, work)
        if milp_time_s is not None:
            row = milp_row(graph, device, milp_time_s, milp_stages, out, say)
            ga = [r["makespan_s"] for r in rows if r["arm"] == "ga"]
            if ga:
                row["gain_vs_ga"] = 1.0 - row["makespan_s"] / float(np.median(ga))
            rows.append(row)
    except KeyboardInterrupt:
        if not rows:
            raise
        interrupted = True
    df = with_medians(pd.DataFrame(rows, columns=COLUMNS))
    df.attrs["interrupted"] = interrupted
    return df


def _seed_rows(graph, device, cfg, time_limit_s, refine_share, workers, refine_options, patience,  # noqa: ANN001
               elites, say, mode: str, out: Path | None, options, work=None) -> list[dict]:  # noqa: ANN001
    """Both arms for one seed: validated, written to `out`, as two table rows."""
    from hybrid.validator import validate

    seed = cfg.seed
    if work is not None and mode == "beside":
        ga_plan, r_ga, hybrid_plan, r_h, split_plan = _beside_lockstep(graph, device, cfg, options, time_limit_s,
                                                                       workers, refine_options, work, say)
    elif work is not None:
        ga_plan, r_ga, hybrid_plan, r_h, split_plan = _after_work(graph, device, cfg, options, time_limit_s, workers,
                                                                  refine_options, work, say)
    else:
        run = _beside if mode == "beside" else _after
        ga_plan, r_ga, hybrid_plan, r_h, split_plan = run(graph, device, cfg, options, time_limit_s, refine_share,
                                                           workers, refine_options, patience, elites, say)
        r_ga["budget"] = r_h["budget"] = "time"
    for arm, plan in (("ga", ga_plan), ("ga+cpsat", hybrid_plan)):
        report = validate(graph, plan)
        if not report.valid:
            raise HybridError(f"compare: the {arm} plan for seed {seed} failed validation "
                              f"({report.violations[0].message}); please report this with the graph file")
    paths = {}
    if out is not None and split_plan is not None:  # the plan refinement started from, for before/after
        split_plan.save(out / f"{graph.name}-seed{seed}-split.json")
    for arm, plan in (("ga", ga_plan), ("ga+cpsat", hybrid_plan)):
        paths[arm] = ""
        if out is not None:
            p = out / f"{graph.name}-seed{seed}-{arm}.json"
            plan.save(p)
            paths[arm] = str(p)
    row_ga = {**_row(graph, ga_plan, "ga", int(seed), r_ga.pop("search_s"), paths["ga"]), **r_ga, "mode": mode}
    row_h = {**_row(graph, hybrid_plan, "ga+cpsat", int(seed), r_h.pop("search_s"), paths["ga+cpsat"]), **r_h,
             "mode": mode}
    row_h["gain_vs_ga"] = 1.0 - hybrid_plan.makespan_s / ga_plan.makespan_s
    return [row_ga, row_h]


def _ga_only(graph, device, cfg, options, time_limit_s: float, workers: int, say,  # noqa: ANN001
             generations: int | None = None):  # noqa: ANN202 - (Plan, row, SearchResult)
    """The GA-only arm of a beside comparison: `hybrid optimize --refine none --no-arena` with the refiner's
    core as one more worker (`hybrid.pipeline.run_optimize`), for the time limit; or the bare search for
    `generations` (the time limit then a safety net)."""
    t0 = time.monotonic()
    if generations is None:
        from hybrid.pipeline import OptimizeOptions, run_optimize

        res = run_optimize(graph, device, time_limit_s, OptimizeOptions(
            config=cfg, workers=workers + 1, refine="none", arena_s=None, planner=options, stop_on_interrupt=False))
        if res.interrupted:
            raise KeyboardInterrupt   # the seed is incomplete: `compare` returns the seeds before it
        alone, ga_plan = res.search, res.plan
    else:
        from ga import optimize

        alone = optimize(graph, device, cfg, time_limit_s=time_limit_s, generations=generations,
                         workers=workers + 1, options=options)
        ga_plan = alone.to_plan(generations=generations)
    r_ga = {"search_s": alone.search_time_s, "wall_s": time.monotonic() - t0, "ga_generations": alone.generations,
            "workers": workers + 1}
    say(f"{graph.name} seed {cfg.seed}: GA-only {format_seconds(ga_plan.makespan_s, 6)} ({alone.generations} generations, "
        f"{workers + 1} workers, {r_ga['wall_s']:.1f} s)")
    return ga_plan, r_ga, alone


def _beside(graph, device, cfg, options, time_limit_s, refine_share, workers, refine_options, patience, elites,  # noqa: ANN001
            say) -> tuple[Plan, dict, Plan, dict, Plan | None]:  # noqa: ANN001
    """Two runs of `hybrid.pipeline.run_optimize` for the whole budget, the second with the refiner beside it."""
    from hybrid.pipeline import OptimizeOptions, run_optimize
    from hybrid.refine.beside import DEFAULT_ELITES

    ga_plan, r_ga, _ = _ga_only(graph, device, cfg, options, time_limit_s, workers, say)
    t1 = time.monotonic()
    out = run_optimize(graph, device, time_limit_s, OptimizeOptions(
        config=cfg, workers=workers, refine="cpsat", refine_mode="beside", refine_share=refine_share,
        refine_patience=patience, refine_elites=elites or DEFAULT_ELITES, refine_options=refine_options,
        arena_s=None, planner=options, stop_on_interrupt=False))
    if out.interrupted:
        raise KeyboardInterrupt
    res, rep, own, hybrid_plan = out.search, out.refinement.report, out.search_plan, out.plan
    if rep is None:   # the search reached the lower bound: the refiner was closed unread
        from hybrid.refine.beside import BesideReport

        rep = BesideReport()
    r_h = _beside_row(res, rep, own, hybrid_plan, workers, time.monotonic() - t1)
    say(f"{graph.name} seed {cfg.seed}: GA+CP-SAT {format_seconds(hybrid_plan.makespan_s, 6)} ({res.generations} generations; "
        f"{rep.refined} plans refined beside it, {rep.elites} of them elites, {rep.windows} windows, "
        f"{rep.accepted} accepted; final from {r_h['final_from']}; {r_h['wall_s']:.1f} s)"
        + (f"; {rep.error}" if rep.error else ""))
    return ga_plan, r_ga, hybrid_plan, r_h, rep.from_plan


def _beside_row(res, rep, own: Plan, hybrid_plan: Plan, workers: int, wall_s: float, **extra) -> dict:  # noqa: ANN001
    """The GA+CP-SAT arm's row, refined beside the search (as a process or in lockstep)."""
    r_h = {"search_s": res.search_time_s, "wall_s": wall_s, "ga_generations": res.generations,
           "workers": workers, "refine_s": rep.busy_s, "final_from": "ga" if hybrid_plan is own else "cpsat",
           "refine_windows": rep.windows, "refine_accepted": rep.accepted, "arm_ga_makespan_s": own.makespan_s,
           "refined_plans": rep.refined, "refined_elites": rep.elites, **extra}
    if rep.plan is not None:
        r_h.update(split_makespan_s=rep.from_makespan_s, rebind_makespan_s=rep.rebind_makespan_s,
                   reorder_makespan_s=rep.reorder_makespan_s)
        r_h["rewalk_gain"], r_h["reorder_gain"], r_h["window_gain"] = split_gains(
            rep.from_makespan_s, rep.rebind_makespan_s, rep.reorder_makespan_s, rep.plan.makespan_s)
    return r_h


def _beside_lockstep(graph, device, cfg, options, time_limit_s, workers, refine_options, work,  # noqa: ANN001
                     say) -> tuple[Plan, dict, Plan, dict, Plan | None]:
    """Beside on counted work: `work` = (a fresh `Lockstep`, generations, GA-only's generation ratio)."""
    from dataclasses import replace as copy

    from ga import optimize

    proto, generations, ratio = work
    lock = copy(proto, offers=[], _done=set())  # the offers of this seed only
    ga_gens = max(0, round(ratio * generations))
    ga_plan, r_ga, alone = _ga_only(graph, device, cfg, options, time_limit_s, workers, say, generations=ga_gens)
    t1 = time.monotonic()
    res = optimize(graph, device, cfg, time_limit_s=time_limit_s, generations=generations, workers=workers,
                   observe=lock.offer, options=options)
    rep = lock.refine(graph, device, options, seed=cfg.seed, refine_options=refine_options,
                      plan_info={"generations": generations}, time_limit_s=time_limit_s)
    cut = "time limit" in (alone.stop_reason, res.stop_reason) or any(e["stop"] == "time limit" for e in rep.log)
    label = "work, cut by the time limit" if cut else "work"
    if cut:
        say(f"{graph.name} seed {cfg.seed}: WARNING a phase stopped at the --time-limit safety net; its figures "
            "depend on this machine's load (raise --time-limit)")
    own = res.to_plan(generations=generations)
    hybrid_plan = rep.pick(own)
    r_ga["budget"] = label
    r_h = _beside_row(res, rep, own, hybrid_plan, workers, time.monotonic() - t1, budget=label)
    say(f"{graph.name} seed {cfg.seed}: GA+CP-SAT {format_seconds(hybrid_plan.makespan_s, 6)} ({res.generations} generations; "
        f"{rep.refined} plans refined in lockstep, every {lock.every} generations, {rep.elites} of them elites, "
        f"{rep.windows} windows, {rep.accepted} accepted; final from {r_h['final_from']}; {r_h['wall_s']:.1f} s)"
        + (f"; {rep.error}" if rep.error else ""))
    return ga_plan, r_ga, hybrid_plan, r_h, rep.from_plan


def _after(graph, device, cfg, options, time_limit_s, refine_share, workers, refine_options, patience, elites,  # noqa: ANN001
           say) -> tuple[Plan, dict, Plan, dict, Plan | None]:  # noqa: ANN001
    """The search to the split; then refinement (handing back when it stalls) against the resumed search."""
    from ga import optimize

    from ga.evaluation import make_evaluator

    ga_time = time_limit_s * (1.0 - refine_share)
    # one evaluator for the split search and both resumptions: a fresh process pool would spend the seconds
    # left after the split starting up (the hand-back then resumed 0 generations) and run the arm over its time
    ev = make_evaluator(graph, device, options, workers)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = Path(tmp) / "split.ckpt"
            t0 = time.monotonic()
            first = optimize(graph, device, cfg, time_limit_s=ga_time, evaluator=ev, options=options, checkpoint=ckpt,
                             checkpoint_every=0)
            split_plan = first.to_plan(time_limit_s=time_limit_s)
            spent = time.monotonic() - t0
            say(f"{graph.name} seed {cfg.seed}: GA {first.generations} generations in {spent:.1f} s, "
                f"makespan {format_seconds(split_plan.makespan_s, 6)}")
            # arm 1: refine the split plan; when refinement stalls, the search resumes with the time left
            t1 = time.monotonic()
            hand = refine_then_resume(graph, device, split_plan, ckpt, deadline=t1 + max(0.0, time_limit_s - spent),
                                      seed=cfg.seed, refine_options=refine_options, patience=patience,
                                      plan_info={"time_limit_s": time_limit_s}, evaluator=ev, options=options)
            ref = hand.refine
            hybrid_plan = hand.plan
            hybrid_s = spent + (time.monotonic() - t1)
            resumed_h = hand.resumed.generations - first.generations if hand.resumed is not None else 0
            say(f"{graph.name} seed {cfg.seed}: GA+CP-SAT {format_seconds(hybrid_plan.makespan_s, 6)} "
                f"({ref.windows} windows, {ref.accepted} accepted in {hand.refine_s:.1f} s"
                + (f"; then the GA for {hand.resume_s:.1f} s, {resumed_h} generations" if hand.resumed is not None
                   else "") + f"; {hybrid_s:.1f} s)")
            # arm 2: the same search, resumed for the same remaining time
            t2 = time.monotonic()
            deadline = t2 + max(0.0, time_limit_s - spent)
            second = optimize(graph, device, cfg, time_limit_s=max(1e-3, deadline - time.monotonic()), evaluator=ev,
                              resume=ckpt, options=options)
            ga_plan = second.to_plan(time_limit_s=time_limit_s)
            ga_s = spent + (time.monotonic() - t2)
            say(f"{graph.name} seed {cfg.seed}: GA-only {format_seconds(ga_plan.makespan_s, 6)} ({second.generations} "
                f"generations, {second.generations - first.generations} after the split; {ga_s:.1f} s)")
    finally:
        ev.close()
    r_ga = {"search_s": second.search_time_s, "wall_s": ga_s, "ga_generations": second.generations,
            "resumed_generations": second.generations - first.generations, "workers": ev.workers}
    r_h = _after_row(first, hand, split_plan, hybrid_s, resumed_h, ev.workers)
    return ga_plan, r_ga, hybrid_plan, r_h, split_plan


def _after_row(first, hand, split_plan: Plan, hybrid_s: float, resumed_h: int, workers: int,  # noqa: ANN001
               **extra) -> dict:
    """The GA+CP-SAT arm's row after the split: refinement, then the search resumed with what it handed back."""
    ref = hand.refine
    rewalk, reorder, window = split_gains(split_plan.makespan_s, ref.rebind_makespan, ref.reorder_makespan,
                                          ref.plan.makespan_s)
    return {"search_s": hand.resumed.search_time_s if hand.resumed is not None else first.search_time_s,
            "wall_s": hybrid_s, "workers": workers,
            "ga_generations": hand.resumed.generations if hand.resumed is not None else first.generations,
            "resumed_generations": resumed_h,
            "refine_s": hand.refine_s, "resume_s": hand.resume_s, "final_from": hand.source,
            "refine_windows": ref.windows, "refine_accepted": ref.accepted, "split_makespan_s": split_plan.makespan_s,
            "rebind_makespan_s": ref.rebind_makespan, "reorder_makespan_s": ref.reorder_makespan,
            "rewalk_gain": rewalk, "reorder_gain": reorder, "window_gain": window, **extra}


def _after_work(graph, device, cfg, options, time_limit_s, workers, refine_options, work,  # noqa: ANN001
                say) -> tuple[Plan, dict, Plan, dict, Plan | None]:
    """The after protocol on a work budget: `work` = (generations to the split, `WorkBudget` of the rest).

    Every figure but the seconds is fixed by the seed: the search is deterministic for a generation count
    (whatever its evaluation processes), the refiner for a window count. `time_limit_s` guards each phase.
    """
    from ga import optimize
    from ga.evaluation import make_evaluator

    split_at, budget = work
    total = split_at + budget.generations
    cut = False
    ev = make_evaluator(graph, device, options, workers)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ckpt = Path(tmp) / "split.ckpt"
            t0 = time.monotonic()
            first = optimize(graph, device, cfg, time_limit_s=time_limit_s, generations=split_at, evaluator=ev,
                             options=options, checkpoint=ckpt, checkpoint_every=0)
            cut |= first.stop_reason == "time limit"
            split_plan = first.to_plan(generations=total)
            spent = time.monotonic() - t0
            say(f"{graph.name} seed {cfg.seed}: GA {first.generations} generations in {spent:.1f} s, "
                f"makespan {format_seconds(split_plan.makespan_s, 6)}")
            t1 = time.monotonic()
            hand = refine_then_resume(graph, device, split_plan, ckpt, deadline=t1 + time_limit_s, seed=cfg.seed,
                                      refine_options=refine_options, plan_info={"generations": total},
                                      evaluator=ev, options=options, work=budget)
            ref, hybrid_plan = hand.refine, hand.plan
            cut |= ref.stop == "time limit" or (hand.resumed is not None and hand.resumed.stop_reason == "time limit")
            hybrid_s = spent + (time.monotonic() - t1)
            resumed_h = hand.resumed.generations - first.generations if hand.resumed is not None else 0
            say(f"{graph.name} seed {cfg.seed}: GA+CP-SAT {format_seconds(hybrid_plan.makespan_s, 6)} ({ref.windows} of "
                f"{budget.windows} windows, {ref.accepted} accepted, stop {ref.stop}; then {resumed_h} of "
                f"{budget.generations} generations; {hybrid_s:.1f} s)")
            t2 = time.monotonic()
            second = optimize(graph, device, cfg, time_limit_s=time_limit_s, generations=total, evaluator=ev,
                              resume=ckpt, options=options)
            cut |= second.stop_reason == "time limit"
            ga_plan = second.to_plan(generations=total)
            ga_s = spent + (time.monotonic() - t2)
            say(f"{graph.name} seed {cfg.seed}: GA-only {format_seconds(ga_plan.makespan_s, 6)} ({second.generations} "
                f"generations; {ga_s:.1f} s)")
    finally:
        ev.close()
    label = "work, cut by the time limit" if cut else "work"
    if cut:
        say(f"{graph.name} seed {cfg.seed}: WARNING a phase stopped at the --time-limit safety net; its figures "
            "depend on this machine's load (raise --time-limit)")
    r_ga = {"search_s": second.search_time_s, "wall_s": ga_s, "ga_generations": second.generations,
            "resumed_generations": second.generations - first.generations, "workers": ev.workers, "budget": label}
    r_h = _after_row(first, hand, split_plan, hybrid_s, resumed_h, ev.workers, budget=label)
    return ga_plan, r_ga, hybrid_plan, r_h, split_plan


def with_medians(df: pd.DataFrame) -> pd.DataFrame:
    """Append a median row per (graph, memory, arm, mode) over its seed rows (gain: median of per-seed gains):
    tables of two modes concatenated keep a median each."""
    seeds = df[df["row"] == "seed"]
    med = []
    mode_of = seeds["mode"].fillna("").astype(str)
    num = ["makespan_s", "ideal_s", "persistent_bound_s", "makespan/ideal", "makespan/persistent_bound", "graph_bound_s",
           "makespan/graph_bound", "schedule_bound_s",
           "makespan/schedule_bound", "gain_vs_ga", "stall_s",
           "bytes_h2d", "bytes_d2h", "bytes_moved", "search_s", "wall_s", "workers", "ga_generations",
           "resumed_generations", "refine_s", "resume_s",
           "refine_windows", "arm_ga_makespan_s", "refined_plans", "refined_elites",
           "refine_accepted", "split_makespan_s", "rebind_makespan_s", "reorder_makespan_s", "rewalk_gain",
           "reorder_gain", "window_gain"]
    for (g, mem, arm, _), part in seeds.groupby([seeds["graph"], seeds["memory_bytes"], seeds["arm"], mode_of],
                                                sort=False):
        r = {c: part[c].median() for c in num}
        r.update({"graph": g, "memory_bytes": mem, "arm": arm, "row": "median", "seed": pd.NA, "plan": "",
                  "mode": "/".join(sorted(set(part["mode"].dropna().astype(str)) - {""})),
                  "budget": "/".join(sorted(set(part["budget"].dropna().astype(str)) - {""})),
                  "final_from": "/".join(sorted(set(part["final_from"].dropna().astype(str)) - {""})),
                  # text as the seed rows have it ('' where none): NaN here made the column mixed (str after Parquet)
                  "milp_status": "/".join(sorted(set(part["milp_status"].dropna().astype(str)) - {""}))})
        med.append(r)
    out = pd.concat([seeds, pd.DataFrame(med, columns=COLUMNS)], ignore_index=True)
    out["seed"] = out["seed"].astype("Int64")
    return out[COLUMNS]


def summary(df: pd.DataFrame) -> pd.DataFrame:
    """One line per graph, memory and refinement mode (`compare()`'s tables of two modes concatenated: a line
    each): median makespans of both arms, the median gain, ratios to the bounds; the MILP arm (its own mode)
    beside every line of its graph and memory."""
    missing = [c for c in ("row", "arm", "graph", "memory_bytes", "mode", "gain_vs_ga") if c not in df.columns]
    if missing:
        raise HybridError(f"summary() takes compare()'s table (with_medians applied); this one has no column "
                          f"{missing[0]!r}")
    mode = df["mode"].fillna("").astype(str)
    arms = df["arm"] != MILP_ARM
    med = df[(df["row"] == "median") & arms]
    milp = df[(df["row"] == "median") & ~arms]
    seeds = df[(df["row"] == "seed") & (df["arm"] == "ga+cpsat")]
    worst = seeds.groupby([seeds["graph"], seeds["memory_bytes"], mode[seeds.index]])["gain_vs_ga"].min()
    rows = []
    for (g, mem, m), part in med.groupby([med["graph"], med["memory_bytes"], mode[med.index]], sort=False):
        if not ((part["arm"] == "ga").any() and (part["arm"] == "ga+cpsat").any()):
            continue
        ga = part[part["arm"] == "ga"].iloc[0]
        hy = part[part["arm"] == "ga+cpsat"].iloc[0]
        w = float(worst.get((g, mem, m), np.nan))
        mine = milp[(milp["graph"] == g) & (milp["memory_bytes"] == mem)]
        rows.append({"graph": g, "memory_bytes": mem, "mode": m, "ga_makespan_s": ga["makespan_s"],
                     "ga+cpsat_makespan_s": hy["makespan_s"], "median_gain": hy["gain_vs_ga"],
                     "median_rewalk_gain": hy.get("rewalk_gain", np.nan),
                     "median_reorder_gain": hy.get("reorder_gain", np.nan),
                     "median_window_gain": hy.get("window_gain", np.nan),
                     "ga_makespan/graph_bound": ga["makespan/graph_bound"],
                     "ga+cpsat_makespan/graph_bound": hy["makespan/graph_bound"],
                     "ga+cpsat_makespan/schedule_bound": hy.get("makespan/schedule_bound", np.nan),
                     "worst_seed_gain": w,
                     "milp_makespan_s": mine["makespan_s"].iloc[0] if len(mine) else np.nan,
                     # -1e-9: equal plans re-timed by different code paths differ in the last bits.
                     "never_worse": bool(w >= -1e-9) if not np.isnan(w) else True})
    return pd.DataFrame(rows)


def seconds_text(t: float, digits: int = 4) -> str:
    """`t` as hybrid.units.format_seconds writes it with `digits` significant digits; "" for NaN (an empty
    table cell)."""
    if t is None or pd.isna(t):
        return ""
    return format_seconds(float(t), digits)


def time_digits(values, lo: int = 4, hi: int = 9, rel: float = 1e-9) -> int:  # noqa: ANN001
    """The fewest significant digits (`lo` to `hi`) at which `values` that differ by more than `rel` (relative)
    print differently: two arms' makespans a hair apart must not read the same. Differences within `rel` are
    the same plan re-timed by another code path (see `summary`'s never_worse) and do not count."""
    v = np.unique(np.asarray([x for x in values if x is not None and not pd.isna(x) and np.isfinite(float(x))],
                             dtype=float))
    for d in range(lo, hi + 1):
        texts = [seconds_text(x, d) for x in v]
        if not any(texts[i] == texts[i + 1] and v[i + 1] - v[i] > rel * max(abs(v[i]), abs(v[i + 1]))
                   for i in range(len(v) - 1)):
            return d
    return hi


def printable(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with its seconds columns (`*_s`) and memory as text in human units, for the printed and Markdown
    tables (the CSV and Parquet keep raw seconds and bytes): plan times (makespans, bounds, stall) with as many digits as tell
    them apart (`time_digits`), the seconds spent (RUN_TIME_COLUMNS) with four."""
    out = df.copy()
    cols = [c for c in out.columns if str(c).endswith("_s") and pd.api.types.is_numeric_dtype(out[c])]
    plan_cols = [c for c in cols if c not in RUN_TIME_COLUMNS]
    digits = time_digits(np.concatenate([out[c].to_numpy(dtype=float) for c in plan_cols])) if plan_cols else 4
    for c in cols:
        d = 4 if c in RUN_TIME_COLUMNS else digits
        out[c] = [seconds_text(x, d) for x in out[c]]
    if "memory_bytes" in out.columns and pd.api.types.is_numeric_dtype(out["memory_bytes"]):
        out = out.rename(columns={"memory_bytes": "memory"})
        out["memory"] = [format_bytes(int(x)) if pd.notna(x) else "" for x in out["memory"]]
    return out


def write_tables(df: pd.DataFrame, stem: str | Path, title: str, notes: str = "") -> list[Path]:
    """`<stem>.csv`, `.parquet` (raw seconds) and `.md` (the Markdown names the command that made it; its
    times in human units, `printable`)."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(".csv"), stem.with_suffix(".parquet"), stem.with_suffix(".md")]
    from hybrid.files import atomic_open, write_whole

    with atomic_open(paths[0], "w", newline="") as f:
        df.to_csv(f, index=False)
    with atomic_open(paths[1], "wb") as f:
        df.to_parquet(f, index=False)
    cmd = " ".join(shlex.quote(a) for a in [Path(sys.argv[0]).name, *sys.argv[1:]])
    md = [f"# {title}", "", f"Command: `{cmd}` ({time.strftime('%Y-%m-%d')}).", ""]
    if notes:
        md += [notes.strip(), ""]
    md.append(printable(df.drop(columns=["plan"], errors="ignore")).to_markdown(index=False, floatfmt=".4g"))
    write_whole(paths[2], "\n".join(md) + "\n")
    return paths
