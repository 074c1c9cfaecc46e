"""Step time against memory: `hybrid optimize`'s written plan at each memory of a sweep, the lower bounds as a
curve, and other graphs' plans as points (`hybrid frontier`) — the picture to look at before choosing a memory.

One table (a pandas DataFrame, one row per point) with a `kind` column; `usable_bytes` (and `usable_MiB`) is
the memory a row's plan may fill, `Device.usable_bytes` (the device's memory less its reserve):

- `plan`: `hybrid.pipeline.run_optimize` at one memory (the bytes a plan may fill, the device's reserve kept
  aside), within `time_limit_s` per point; its makespan, and `best_s`, the fastest plan of the sweep that fits
  this memory (a plan made for less memory fits more too, so `best_s` never rises with memory; where the
  point's own plan is slower, its `note` says which plan is faster and why the search missed it). A memory no
  plan fits has an empty makespan and says so in `note`. `laid_out` is False where the plan was written
  without arena offsets (the executor compacts it at run time; `note` says why), `bound_s` the lower bound
  that holds for the sweep's plans (swap only with `recompute=False`).
- `bound`: the any-order lower bounds (`hybrid.bounds.graph_bound`, with recompute and swap only) at each memory
  of the sweep and between, in `bound_s` (`makespan_s` is empty): no plan of the graph at that memory is faster.
- `point`: another graph or plan file given as a point, e.g. the graph of the same step with
  `torch.utils.checkpoint` captured: a graph at its own unswapped peak and compute-only time (the simulator's
  time of its program order when nothing is swapped), a plan of the swept graph (validated against it) at the
  peak bytes and makespan of its events.
"""
from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.units import checked_bytes, format_bytes, format_bytes_up, format_seconds

DEFAULT_STEPS = 10        # memories in the default sweep, both ends included
BOUND_STEPS = 33          # memories of the bound curve (the sweep's are added)
COLUMNS = ["kind", "label", "usable_bytes", "usable_MiB", "makespan_s", "best_s", "ideal_s", "makespan/ideal",
           "bound_s", "bound/ideal", "peak_bytes", "planner", "laid_out", "interrupted", "seconds", "note", "plan"]
PLAN_FILE = re.compile(r"^plan-[0-9.]+(MiB)?\.json$")   # a sweep's plan file (plan-<bytes>.json before MiB names)


def memory_range(graph: Graph, device: Device) -> tuple[int, int]:
    """(least, most) memory worth sweeping: the largest single op's bytes (no plan runs with less:
    `hybrid.graph.info.largest_op`) and the unswapped peak of the program order (every plan fits there),
    both counted at the device's alignment."""
    from hybrid.graph.info import largest_op, unswapped_peak

    align = device.alignment_bytes
    peak = int(unswapped_peak(graph, align))
    return min(int(largest_op(graph, align)[1]), peak), peak


def default_memories(graph: Graph, device: Device, steps: int = DEFAULT_STEPS) -> list[int]:
    """`steps` memories evenly spaced from `memory_range`'s least to its most, both included."""
    lo, hi = memory_range(graph, device)
    if steps < 2 or hi <= lo:
        return [hi]
    return sorted({int(round(v)) for v in np.linspace(lo, hi, steps)})


def parse_memories(items: tuple[str, ...] | list[str], peak: int) -> list[int]:
    """`--memories 64MiB,128MiB --memories 50%`: sizes, or percentages of the unswapped `peak`; sorted, unique."""
    from hybrid.units import parse_memory, parse_share

    out: set[int] = set()
    for item in items:
        for part in str(item).split(","):
            part = part.strip()
            if not part:
                continue
            share = parse_share(part, "--memories")
            value = int(round(share * peak)) if share is not None else parse_memory(part, "--memories")
            if value <= 0:
                raise HybridError(f"--memories {part!r}: must be positive")
            out.add(value)
    return sorted(out)


def plan_names(memories: Iterable[int]) -> dict[int, str]:
    """Each memory's plan file name, in MiB (`plan-90.40MiB.json`), with the fewest decimals (2 at least) that
    give every memory of the sweep its own name (7 tell any two byte counts apart)."""
    mems = sorted(set(int(m) for m in memories))
    for digits in range(2, 8):
        names = {m: f"plan-{m / 2**20:.{digits}f}MiB.json" for m in mems}
        if len(set(names.values())) == len(mems):
            return names
    return names


def previous_plans(out_dir: Path) -> list[Path]:
    """The plan files a previous sweep into `out_dir` wrote: those its `frontier.csv` lists in the `plan` column
    of its `plan` rows, as files of `out_dir/plans` named as a sweep names them (never a --points file, nor any
    other file). Empty where there is no readable table."""
    table = Path(out_dir) / "frontier.csv"
    try:
        old = pd.read_csv(table, usecols=["kind", "plan"], dtype=str)
    except (OSError, ValueError):
        return []
    folder = Path(out_dir) / "plans"
    names = {Path(p).name for k, p in zip(old["kind"], old["plan"]) if k == "plan" and isinstance(p, str) and p}
    return [folder / n for n in sorted(names) if PLAN_FILE.match(n) and (folder / n).is_file()]


def remove_plans(paths: Iterable[Path]) -> None:
    """Remove the files `previous_plans` listed (those already gone are skipped), and their folder if that leaves
    it empty."""
    folders = set()
    for p in paths:
        Path(p).unlink(missing_ok=True)
        folders.add(Path(p).parent)
    for d in folders:
        try:
            d.rmdir()      # only when empty
        except OSError:
            pass


def check_memories(memories: object, what: str = "sweep: memories") -> list[int]:
    """`memories` as ints: a list of positive whole numbers of bytes, else HybridError saying how to make one
    from sizes ("4MiB" would otherwise fail deep inside the first search)."""
    how = ("pass bytes as integers, e.g. [hybrid.units.parse_bytes('4MiB')], or "
           "hybrid.report.frontier.parse_memories(['4MiB', '50%'], peak)")
    if isinstance(memories, (str, bytes)) or not isinstance(memories, Iterable):
        raise HybridError(f"{what} must be a list of byte counts, got {type(memories).__name__} {memories!r:.60}; "
                          f"{how}")
    out = []
    for k, m in enumerate(memories):
        try:
            out.append(checked_bytes(m, f"{what}[{k}]", lo=1))
        except HybridError as e:
            raise HybridError(f"{e}; {how}") from None
    if not out:
        raise HybridError(f"{what} is empty; {how}")
    return out


def at_memory(device: Device, memory: int) -> Device:
    """`device` whose plans may fill `memory` bytes (its reserve kept aside, as every planner counts)."""
    return dataclasses.replace(device, memory_bytes=int(memory) + int(device.reserve_bytes))


@dataclass
class Sweep:
    """What `sweep` did: the rows (`COLUMNS`), whether a Ctrl-C or SIGTERM cut it short, and the plans."""

    rows: list[dict] = field(default_factory=list)
    interrupted: bool = False
    plans: dict[int, object] = field(default_factory=dict)   # memory -> hybrid.plan.Plan written there


def _row(kind: str, label: str, memory: int, makespan: float = float("nan"), ideal: float = float("nan"),
         **extra: object) -> dict:
    row = {c: None for c in COLUMNS}
    row.update(kind=kind, label=label, usable_bytes=int(memory), usable_MiB=memory / 2**20, makespan_s=makespan,
               ideal_s=ideal, bound_s=float("nan"), interrupted=False, note="")
    row["makespan/ideal"] = makespan / ideal if ideal and ideal > 0 else float("nan")
    row.update(extra)
    return row


def no_offsets_reason(res, options) -> str:  # noqa: ANN001 - OptimizeResult, OptimizeOptions
    """Why `run_optimize` wrote its plan without arena offsets: the entry of `res.skipped` that says the byte
    budget is written without offsets (what `hybrid optimize` prints), else --no-arena where the layout was off."""
    why = next((s for s in res.skipped if "without offsets" in s), "")
    if why:
        return why.split(": ", 1)[1] if why.startswith("arena layout: ") else why
    if getattr(options, "arena_s", 0.0) is None:
        return "--no-arena: the byte budget is written as searched (the executor compacts at run time if it must)"
    return ""


def sweep(graph: Graph, device: Device, memories: list[int], time_limit_s: float, options=None,  # noqa: ANN001
          say: Callable[[str], None] | None = None, plan_dir: Path | None = None,
          stale: Iterable[Path] = ()) -> Sweep:
    """`run_optimize(graph, at_memory(device, m), time_limit_s, options)` for each memory m, smallest first;
    each written plan saved under `plan_dir` (when given; made with the first plan) as `plan_names`' name, the
    files `stale` (a previous sweep's, `previous_plans`) removed just before that first plan is saved. A memory
    no plan fits gives a row that says so. Ctrl-C or SIGTERM: the point being searched keeps its best plan so
    far (marked `interrupted`) and the sweep stops there, returning the points done (with no plan made,
    KeyboardInterrupt). `memories` are whole numbers of bytes (HybridError otherwise, before any search):
    `parse_memories(["64MiB", "50%"], peak)` reads sizes and shares of the peak, as `hybrid frontier` does."""
    memories = check_memories(memories)
    from hybrid.errors import InfeasibleError
    from hybrid.pipeline import OptimizeOptions, Progress, run_optimize

    opts = dataclasses.replace(options or OptimizeOptions(), stop_on_interrupt=True)
    tell = say or (lambda _m: None)
    out = Sweep()
    names = plan_names(memories)
    stale = list(stale)
    try:
        for i, mem in enumerate(sorted(memories)):
            dev = at_memory(device, mem)
            t0 = time.monotonic()
            tell(f"[{i + 1}/{len(memories)}] {format_bytes(mem)}: planning, time limit {format_seconds(time_limit_s)} "
                 "(the first point may take longer: one-time compiles) ..." if i == 0 else
                 f"[{i + 1}/{len(memories)}] {format_bytes(mem)}: planning, time limit {format_seconds(time_limit_s)} ...")
            try:
                res = run_optimize(graph, dev, time_limit_s, opts, Progress(on_note=lambda t: tell(f"  {t}")))
            except InfeasibleError as e:
                # frontier's flag states what a plan may fill: the usable bytes, never the device's with its reserve
                why = str(e).splitlines()[0]
                if e.least_usable_bytes is not None and e.advice:
                    why = why.replace(e.advice, f"--memories of at least {format_bytes_up(e.least_usable_bytes)}")
                why = re.sub(r"--memory\b", "--memories", why)
                row = _row("plan", "optimize", mem, seconds=time.monotonic() - t0, note=f"no plan fits: {why}")
                out.rows.append(row)
                tell(f"[{i + 1}/{len(memories)}] {format_bytes(mem)}: no plan fits")
                continue
            plan = res.plan
            path = ""
            if plan_dir is not None:
                from hybrid.signals import deferred_interrupts

                p = Path(plan_dir) / names[mem]
                with deferred_interrupts():
                    if stale:   # the previous sweep's plans go when this one has a plan to save
                        remove_plans(stale)
                        stale = []
                    p.parent.mkdir(parents=True, exist_ok=True)
                    plan.save(p)
                path = str(p)
            ideal = float(plan.metrics.get("ideal_s", 0.0))
            notes = ["interrupted: the best plan found before the stop"] if res.interrupted else []
            # what made this point's written plan slower than its search's best, and what its time left out:
            # `monotone` points at them where a point is slower than one with less memory
            gave_up = [res.difference()] if plan.makespan_s > res.search_plan.makespan_s and res.difference() else []
            gave_up += [f"left out {s}" for s in res.skipped if s.startswith(("headroom", "refinement"))]
            notes += gave_up
            laid_out = plan.allocation.kind != "unconstrained"
            if not laid_out:   # the executor would compact it at run time: say so, and why
                why = no_offsets_reason(res, opts)
                notes.append("written without arena offsets" + (f": {why}" if why else ""))
            row = _row("plan", "optimize", mem, plan.makespan_s, ideal, peak_bytes=int(plan.metrics.get("peak_bytes", 0)),
                       planner=str(plan.planner.get("name", "")), interrupted=bool(res.interrupted),
                       laid_out=laid_out, seconds=time.monotonic() - t0, plan=path, note="; ".join(notes),
                       gave_up=bool(gave_up))   # not a column: what `monotone` names as the cause
            out.rows.append(row)
            out.plans[mem] = plan
            tell(f"[{i + 1}/{len(memories)}] {format_bytes(mem)}: makespan {format_seconds(plan.makespan_s)} "
                 f"({plan.makespan_s / ideal:.3f}x ideal) in {format_seconds(row['seconds'])}"
                 if ideal > 0 else f"[{i + 1}/{len(memories)}] {format_bytes(mem)}: makespan "
                 f"{format_seconds(plan.makespan_s)}")
            if res.interrupted:
                out.interrupted = True
                break
    except KeyboardInterrupt:
        if not out.plans:   # nothing worth a table (memories no plan fits at most): the previous run's stays whole
            raise
        out.interrupted = True
    return out


def monotone(rows: list[dict]) -> list[dict]:
    """Sets each plan row's `best_s`: the fastest plan at this memory or less (it fits here too). Where the row's
    own plan is slower than that, its note names the faster plan: more memory is never slower in the table, or
    the row says why."""
    best, best_mem = float("inf"), None
    for row in sorted((r for r in rows if r["kind"] == "plan"), key=lambda r: r["usable_bytes"]):
        t = row["makespan_s"]
        if t is not None and np.isfinite(t) and t < best:
            best, best_mem = float(t), row["usable_bytes"]
        row["best_s"] = best if np.isfinite(best) else float("nan")
        if t is not None and np.isfinite(t) and t > best:
            cause = ("what this point's run gave up or left out (above)" if row.get("gave_up") else
                     "the search's time per point did not find as fast a plan here")
            why = (f"slower than the plan at {format_bytes(best_mem)} ({format_seconds(best)}), which fits this "
                   f"memory too: {cause}; best_s is that plan's")
            row["note"] = f"{row['note']}; {why}" if row["note"] else why
    return rows


def bound_rows(graph: Graph, device: Device, memories: list[int]) -> list[dict]:
    """The any-order lower bounds at each memory (the sweep's and BOUND_STEPS between its ends): `graph_bound`
    with recompute (holds for every plan) and swap only. An infinite bound (no plan of that kind fits) is NaN."""
    from hybrid.bounds import graph_bound
    from hybrid.graph.info import ideal_time

    ideal = ideal_time(graph)
    grid = sorted(set(int(m) for m in memories) | {int(round(v)) for v in np.linspace(min(memories), max(memories),
                                                                                       BOUND_STEPS)})
    rows = []
    for rc, label in ((True, "lower bound, any order, with recompute"), (False, "lower bound, any order, swap only")):
        for mem in grid:
            b = graph_bound(graph, at_memory(device, mem), recompute=rc)
            rows.append(_row("bound", label, mem, ideal=ideal, bound_s=float(b) if np.isfinite(b) else float("nan")))
    return rows


def point_row(path: Path, graph: Graph, device: Device) -> dict:
    """Another graph or plan file as one point: a graph at its own unswapped peak (at `device`'s alignment) and
    its compute-only time; a plan of `graph` (the swept graph: InvalidPlanError for another's, or for one the
    validator rejects) at the peak device bytes and the makespan of its events, not the figures its
    metrics state."""
    from hybrid.graph.info import ideal_time, unswapped_peak
    from hybrid.plan import Plan
    from hybrid.validator import event_figures, memory_needed, require_valid

    path = Path(path)
    try:
        fmt = str(json.loads(path.read_text()).get("format", ""))
    except (OSError, ValueError, AttributeError) as e:
        raise HybridError(f"--points {path}: cannot read it as a graph or plan file ({e})") from None
    if fmt.startswith("hybrid-plan"):
        plan = Plan.load(path)
        if plan.graph != graph.name:   # an invalid plan for this graph: exit 1, as every command given one
            from hybrid.errors import InvalidPlanError

            raise InvalidPlanError(f"--points {path}: a plan of graph {plan.graph!r}, not of {graph.name!r} (the graph "
                              f"swept); give {plan.graph!r}'s graph file as a point instead, or a plan of "
                              f"{graph.name!r}")
        require_valid(graph, plan, f"--points {path}")   # makespan_s is the last event's end (rule 7)
        peak = int(event_figures(graph, plan)["peak_bytes"])
        need = memory_needed(graph, plan)   # on the memory axis: an arena plan needs its arena, not its live peak
        ideal = float(plan.metrics.get("ideal_s", 0.0))   # checked by the validator (rule 7)
        laid_out = plan.allocation.kind != "unconstrained"
        where = ("its peak device bytes" if need == peak else
                 f"the memory its {plan.allocation.kind.replace('_', ' ')} needs with the largest workspace "
                 f"({format_bytes(need)}; live peak {format_bytes(peak)})")
        return _row("point", path.stem, need, float(plan.makespan_s), ideal, peak_bytes=peak,
                    planner=str(plan.planner.get("name", "")), plan=str(path), laid_out=laid_out,
                    note=f"plan of {plan.graph}: {where} and its makespan (from its events)"
                    + ("" if laid_out else "; written without arena offsets"))
    if fmt.startswith("hybrid-graph"):
        g = Graph.load(path)
        peak = int(unswapped_peak(g, device.alignment_bytes))
        ideal = ideal_time(g)
        return _row("point", path.stem, peak, ideal, ideal, peak_bytes=peak, planner="unswapped",
                    plan=str(path), note=f"graph {g.name}: its unswapped peak and compute time (program order)")
    raise HybridError(f"--points {path}: neither a graph (hybrid-graph/1) nor a plan (hybrid-plan/1) file "
                      f"(format {fmt!r})")


def frame(rows: list[dict], graph: Graph, recompute: bool = True) -> pd.DataFrame:
    """The rows as the table: plans, then points, then bounds, each by memory. A bound row has its bound in
    `bound_s` (and `bound/ideal`), its `makespan_s` empty; `bound_s` on a plan row is the bound at that memory
    that holds for the sweep's plans (with recompute, or swap only where `recompute` is False), on a point row
    the with-recompute bound (it holds for every plan), where the sweep computed it. Plan rows `monotone` has not
    seen get their `best_s` here (a frame of `sweep(...).rows` had it empty, an object column of None)."""
    if any(r["kind"] == "plan" and r.get("best_s") is None for r in rows):
        rows = monotone([dict(r) for r in rows])
    df = pd.DataFrame(rows, columns=COLUMNS)
    df["best_s"] = df["best_s"].astype(float)
    curve = {rc: {r["usable_bytes"]: r["bound_s"] for r in rows
                  if r["kind"] == "bound" and r["label"].endswith(end)}
             for rc, end in ((True, "with recompute"), (False, "swap only"))}
    df["bound_s"] = [b if k == "bound" else curve[recompute if k == "plan" else True].get(m, np.nan)
                     for k, m, b in zip(df["kind"], df["usable_bytes"], df["bound_s"])]
    df["bound_s"] = df["bound_s"].astype(float)
    ideal = df["ideal_s"].astype(float)
    df["bound/ideal"] = (df["bound_s"] / ideal).where(ideal > 0)
    df["kind"] = pd.Categorical(df["kind"], ["plan", "point", "bound"])
    df = df.sort_values(["kind", "label", "usable_bytes"], kind="stable").reset_index(drop=True)
    df["kind"] = df["kind"].astype(str)
    df["interrupted"] = df["interrupted"].astype(bool)
    df.insert(0, "graph", graph.name)
    return df
