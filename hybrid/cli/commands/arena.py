"""`hybrid arena`: static byte offsets in one arena, for a MiniMalloc CSV or for a plan's device copies."""
from __future__ import annotations

import math
import time
from pathlib import Path

import click

from hybrid.cli import clock
from hybrid.cli.options import prepare_output
from hybrid.errors import HybridError, InfeasibleError
from hybrid.device import parse_alignment
from hybrid.units import format_bytes_exact, format_seconds, parse_bytes, parse_duration


def _verdict(arena: int, peak: int, proven: bool, lb: int, solver: str, secs: float, skipped: str = "",
             solved=None, capacity: int | None = None) -> str:  # noqa: ANN001 - an exact.Solved or None
    """The result line. `lb` is never below `peak` (the live bytes at one time are a bound on any arena);
    `skipped` says why the exact search did not run, where it did not. `solved` (exact.solve's record) credits
    the heuristic and the exact search each with its own seconds."""
    lb = max(lb, peak)
    proven = proven or arena <= lb   # at the bound (the peak of live bytes): no arena is smaller
    proof = "proven optimal" if proven else (
        f"not proven optimal (lower bound {format_bytes_exact(lb)})" if lb != peak else "not proven optimal")
    return (f"arena {format_bytes_exact(arena)}, peak live {format_bytes_exact(peak)}: arena / peak {arena / peak if peak else 1.0:.4f}, "
            f"{proof}; {_credit(solver, secs, solved, arena, capacity)}" + (f"; {skipped}" if skipped else ""))


def _credit(solver: str, secs: float, solved, arena: int, capacity: int | None) -> str:  # noqa: ANN001
    """Who made the layout, in how long, and what the exact search did after it (issue: a greedy layout kept
    after 20 s of search was "by greedy-size in 20.59 s")."""
    if solved is None or not getattr(solved, "exact_ran", False):
        return f"by {solver} in {format_seconds(secs)}"
    search = format_seconds(solved.exact_s)
    if solved.solver == "exact":
        start = f", from {solved.start_solver}'s layout ({format_seconds(solved.start_s)})" \
            if solved.start_solver else ""
        return f"the exact search found it in {search}{start}"
    smaller = "one within the capacity" if capacity is not None else "a smaller arena"
    if capacity is not None and arena <= capacity:
        what = "it found none within the capacity first"
    elif solved.interrupted:
        what = f"interrupted before it found {smaller}"
    elif capacity is not None:
        what = "none within the capacity found"
    elif solved.proven_optimal:
        what = "no smaller arena exists (proven)"
    else:
        what = "no smaller arena found"
    return f"by {solver} ({format_seconds(solved.start_s)}); exact search {search}: {what}"


@click.command("arena")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="MiniMalloc CSV (id,lower,upper,size[,offset]) of buffers with half-open lifetimes (an offset "
                   "column is ignored: the buffers are laid out anew).")
@click.option("--capacity", default=None,
              help="With --csv: the arena may not exceed this (e.g. 1048576, 1MiB); the search stops at the first "
                   "assignment within it. Without: minimise the arena.")
@click.option("--alignment", default=None,
              help="Every offset a multiple of this, a power of two (default: 1 with --csv, the graph device's with "
                   "--graph alone). Not with --plan: its offsets follow its device's alignment_bytes.")
@click.option("--graph", "graph_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Graph file (hybrid-graph/1), with --plan.")
@click.option("--plan", "plan_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Plan whose device copies get offsets: the output plan's allocation is an arena.")
@click.option("--time-limit", "time_limit", default="60s", show_default=True,
              help="Time for the whole command, loading and writing included, e.g. 10s, 2m. Ctrl-C or SIGTERM "
                   "stops it early and writes the best layout so far.")
@click.option("--overwrite/--no-overwrite", default=None,
              help="--graph alone: let an elementwise op write its output into an input it reads last "
                   "(MegEngine's in-place overwrite; hybrid.arena.lifetimes.OVERWRITE_KINDS). Default: on.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="CSV with an offset column (--csv), or the plan with arena offsets (--plan).")
def command(csv_path: Path | None, capacity: str | None, alignment: str | None, graph_path: Path | None,
            plan_path: Path | None, time_limit: str, overwrite: bool | None, out_path: Path | None) -> None:
    """Give every buffer a byte offset so that buffers live at the same time never overlap.

    --csv: MiniMalloc's buffers. --graph with --plan: the plan's device copies (the plan comes back with an
    arena allocation). --graph alone: the graph run in program order without swapping (MegEngine's static
    planning), written as a MiniMalloc CSV with offsets.

    Heuristics (greedy by size, best fit, MegEngine's simulation) give a first arena; MiniMalloc's exact
    search then looks for a smaller one down to the peak of live bytes, which proves optimality. Prints the
    arena, the peak and whether the arena is proven optimal.
    """
    limit = parse_duration(time_limit, "--time-limit")
    if limit <= 0:   # no time: no layout, and the error then named an arena a cut-short heuristic left
        raise HybridError(f"--time-limit must be positive, got {time_limit!r}")
    # --time-limit bounds the whole command from its start (the process's: imports too), loading and writing
    # included: one deadline for every part (time.perf_counter())
    deadline = time.perf_counter() + clock.left(limit)
    if (csv_path is None) == (graph_path is None):
        raise HybridError("give either --csv FILE, or --graph G (with --plan P to lay out a plan)")
    align = parse_alignment(alignment) if alignment is not None else None
    prepare_output(out_path, "--out")   # a bad folder, or the file an input names, fails before any search
    if out_path is not None and csv_path is not None and Path(out_path).resolve() == Path(csv_path).resolve():
        raise HybridError(f"--out {out_path} is the --csv file it reads; write the output to another file")
    if overwrite is not None and (csv_path is not None or plan_path is not None):
        # a CSV's and a plan's lifetimes are given: only the graph run in program order has in-place writes to make
        raise HybridError(f"--{'' if overwrite else 'no-'}overwrite is for --graph alone (the graph run in program "
                          f"order without swapping); leave it out with {'--csv' if csv_path is not None else '--plan'}")
    if csv_path is not None:
        if plan_path is not None:
            raise HybridError("--plan goes with --graph, not with --csv")
        _csv(csv_path, capacity, align or 1, deadline, out_path, limit)
        return
    if plan_path is None:
        if capacity is not None:
            raise HybridError("--capacity is for --csv; --graph alone finds the smallest arena")
        _graph(graph_path, deadline, out_path, True if overwrite is None else overwrite, align)
        return
    if capacity is not None:
        raise HybridError("--capacity is for --csv; a plan's capacity is its device memory")
    if align is not None:
        # the plan's copies were sized for its device's alignment (rule 5): another one would change what fits
        raise HybridError(f"--alignment does not go with --plan: its offsets follow the plan's device alignment, "
                          f"which its copies were planned with; plan again with --alignment {align} (e.g. "
                          "`hybrid baseline ... --alignment`, which lays its plan out, or `hybrid simulate ... "
                          "--alignment` and lay that plan out)")
    _plan(graph_path, plan_path, deadline, out_path, limit)


# The exact search's set-up lists every pair of buffers live together (quadratic: 15.7 s on 17,866 buffers
# here); above this many buffers the heuristics' layout is kept, so --time-limit holds on large plans.
EXACT_MAX_BUFFERS = 5_000
# Of the time left after loading, what lay_out's search may use: past its limit it still finishes the step it
# is in, re-plans with per-size classes when nothing laid out, and validates what it returns (each about as
# long as one step: 2 s on rnn-8-8k's 11,512 ops here), then the plan is written. rnn-8-8k at --time-limit 10s:
# 7.3 s in all (load 4 on 2 cores), re-planned with 15% less memory and laid out.
LAYOUT_SHARE = 0.65
WRITE_SHARE = 0.15   # ... and what is kept for writing the plan; the exact search may use what lies between


def _exact_skipped(n: int, exact_end: float, limit: float) -> str:
    """Why the exact search is not run on n buffers with `exact_end` (time.perf_counter()) as its end ('' where it
    may run): a result without it is not the search's, and the reader should know what would buy it."""
    from hybrid.arena.layout import EXACT_COMPILE_S, exact_ready

    if n > EXACT_MAX_BUFFERS:
        return (f"exact search skipped: {n} buffers, above the {EXACT_MAX_BUFFERS} whose pairs it can list in "
                "time (the heuristics' layout is kept)")
    if not exact_ready(exact_end):   # `_warm` left it cold: numba's cache has no compiled copy of it
        left = max(0.0, exact_end - time.perf_counter())
        more = (EXACT_COMPILE_S - left) / (1.0 - WRITE_SHARE) + 5.0   # what the exact search would need beside
        return (f"exact search skipped: it is not compiled yet (numba's cache has no copy; compiling takes up to "
                f"{EXACT_COMPILE_S:.0f} s, once) and {format_seconds(left)} of --time-limit was left for it; give "
                f"--time-limit {5 * math.ceil((limit + more) / 5):.0f}s or more once (later runs load it from the "
                "cache)")
    return ""


def _exact_cached() -> bool:
    """Whether numba's disk cache holds the exact search's kernels (`hybrid.arena.exact.cached`)."""
    from hybrid.arena import exact

    return exact.cached()


def _warm(deadline: float) -> None:
    """Load the exact search now, counted against the command's time, where that is cheap (numba's cache has
    it) or time enough is left to compile it (`EXACT_COMPILE_S`); say so when it really compiled. Left cold
    otherwise: `exact_ready` then keeps the search out and `_exact_skipped` says why. Only `hybrid arena` does
    this: the pipeline's layouts (`hybrid optimize`, `baseline`) keep their own rule (`exact_ready`)."""
    from hybrid.arena import exact
    from hybrid.arena.layout import EXACT_COMPILE_S

    if getattr(exact, "_warmed", False):
        return
    if not _exact_cached() and deadline - time.perf_counter() <= EXACT_COMPILE_S:
        return
    def misses() -> int | None:   # numba's counts are the process's: what this warm-up compiled is the change
        try:
            return sum(sum(getattr(exact, k).stats.cache_misses.values()) for k in exact.KERNELS)
        except (AttributeError, TypeError):
            return None

    before, t = misses(), time.perf_counter()
    exact.warm_up()
    after = misses()
    compiled = (after > before) if before is not None and after is not None else time.perf_counter() - t > 2.0
    if compiled:
        click.echo(f"compiled the exact search in {format_seconds(time.perf_counter() - t)} (once: later runs "
                   "load it from numba's cache)", err=True)


def _interrupted(hits: list[int], out_path: Path | None, what: str = "layout") -> None:
    """After a Ctrl-C or SIGTERM that stopped the search (`hits`): one line on stderr saying what was kept."""
    if not hits:
        return
    from hybrid.signals import interrupted_by

    where = f"wrote the best {what} so far to {out_path}" if out_path is not None else \
        f"the search stopped; the {what} above is the best so far (no --out: nothing written)"
    click.echo(f"interrupted ({interrupted_by()}): {where}", err=True)


def _nothing_kept(hits: list[int], why: str) -> None:
    """A stop came and there is nothing to write: say so and exit 130 (Ctrl-C) or 143 (SIGTERM)."""
    import sys

    from hybrid.signals import exit_status, interrupted_by

    click.echo(f"interrupted ({interrupted_by()}): {why}; nothing written", err=True)
    sys.exit(exit_status())


def _replanned(given, new, layout):  # noqa: ANN001, ANN202 - Plan, Plan, hybrid.arena.layout.Layout
    """`new` (what lay_out re-planned from `given`) with a planner record of its own: the re-plan copies the
    given plan's record, whose name, options and refinement describe a plan that was not written (issue: a
    re-planned `belady+cpsat` plan still claimed its refinement). It names the Belady planner that made it
    and keeps what it was re-planned from under `replanned_from`."""
    import dataclasses

    old = dict(given.planner) if isinstance(given.planner, dict) else {}
    cur = dict(new.planner) if isinstance(new.planner, dict) else {}
    source = layout.source if layout.fallback == "re-planned" and layout.source else "belady"
    record = {"name": source, "schedule": "the given plan's"}
    if layout.fallback == "size classes":
        record["pool"] = "size classes"
    for key in ("fallback", "arena"):
        if key in cur:
            record[key] = cur[key]
    record["replanned_from"] = {
        "name": old.get("name", "?"), "makespan_s": given.makespan_s, "refined": "refine" in old,
        "why": f"its device copies do not lay out within the memory (best {100 * layout.overflow:+.1f}% over)",
        "memory_given_up": layout.memory_given_up}
    return dataclasses.replace(new, planner=record)


def _slower(given, written, out: bool = True) -> None:  # noqa: ANN001 - Plans
    """Say plainly when the plan written (`out`; else the one laid out, not written) is slower than the plan
    given (a re-plan for want of a layout drops what the given plan had, a refinement above all), and what
    would keep it."""
    if written.makespan_s <= given.makespan_s * (1 + 1e-9):
        return
    info = given.planner if isinstance(given.planner, dict) else {}
    refine = info.get("refine") if isinstance(info.get("refine"), dict) else None
    before = refine.get("from_makespan_s") if refine is not None else None
    was = f" ({format_seconds(float(before))} before its refinement)" if isinstance(before, (int, float)) else ""
    line = (f"the plan {'written' if out else 'laid out (not written: no --out)'} is slower than the plan given: "
            f"{format_seconds(written.makespan_s)} against "
            f"{format_seconds(given.makespan_s)}{was}")
    if refine is not None:
        line += ("; the re-plan cannot keep a refinement: lay the plan out before refining it (`hybrid arena` on "
                 "the plan refine started from, then `hybrid refine` on that output)")
    click.echo(line)


def _plan(graph_path: Path, plan_path: Path, deadline: float, out_path: Path | None, limit: float = 60.0) -> None:
    """--graph G --plan P: P's device copies laid out in one arena within `deadline` (the command's). A
    byte-budget plan whose copies do not lay out within its memory is re-planned (hybrid.arena.layout.lay_out:
    a little less memory, else per-size classes), and the command says so; it never fails for want of a fit
    when a re-plan fits. The exact search then shrinks the arena while time is left (up to EXACT_MAX_BUFFERS).
    Ctrl-C or SIGTERM stops the work and writes the best layout so far."""
    from hybrid.arena import exact
    from hybrid.cli.options import load_graph, load_plan
    from hybrid.validator import require_valid

    graph = load_graph(graph_path)
    plan = load_plan(plan_path)
    require_valid(graph, plan, f"--plan {plan_path}")   # offsets for a broken plan would be a broken plan
    with exact.stop_on_signal() as hits:
        try:
            _lay_out_plan(graph, plan, deadline, out_path, limit)
        except InfeasibleError:
            if hits:
                _nothing_kept(hits, "no layout within the memory was found before it")
            raise
        _interrupted(hits, out_path)


def _lay_out_plan(graph, plan, deadline: float, out_path: Path | None, limit: float) -> None:  # noqa: ANN001
    """`_plan`'s work, inside its stop context (`exact.stopped()` true once a Ctrl-C or SIGTERM came)."""
    import dataclasses

    import numpy as np

    from hybrid.arena import exact
    from hybrid.arena.heuristics import Solution
    from hybrid.arena.layout import DEFAULT_BUDGET, exact_ready, heuristic_layout, lay_out
    from hybrid.arena.lifetimes import arena_plan, plan_buffers

    _warm(deadline)   # a cached kernel loads in 0.1-0.5 s: counted here, so the search below may run
    after_load = max(0.0, deadline - time.perf_counter())
    work_end = time.perf_counter() + LAYOUT_SHARE * after_load
    exact_end = deadline - WRITE_SHARE * after_load

    def left(end: float | None = None) -> float:
        return max(0.0, (work_end if end is None else end) - time.perf_counter())

    solve_s = 0.0
    if plan.allocation.kind == "unconstrained":
        # the exact search for near misses only where it can compile in time (lay_out's limit is a safety cap)
        budget = DEFAULT_BUDGET if exact_ready(work_end) else dataclasses.replace(DEFAULT_BUDGET, exact_tries=0)
        layout = lay_out(graph, plan, left(), budget=budget, stop=exact.stopped)
        new, solve_s = layout.plan, layout.solve_s
        if layout.fallback in ("re-planned", "size classes"):
            new = _replanned(plan, new, layout)
        if layout.describe() and layout.fallback:
            click.echo(layout.describe())
        if new.allocation.kind != "arena":
            _write(graph, new, out_path, plan)
            return
        info = new.planner.get("arena", {}) if isinstance(new.planner, dict) else {}
        if len(new.allocation.offsets) > EXACT_MAX_BUFFERS or not exact_ready(exact_end) or exact.stopped():
            peak = int(info.get("peak_live_bytes", 0))     # nothing left to do but say what lay_out found
            proven = bool(info.get("proven_optimal", False)) or 0 < new.allocation.arena_bytes <= peak
            click.echo(_verdict(new.allocation.arena_bytes, peak, proven, peak, str(info.get("solver", "")), solve_s,
                                "" if proven or exact.stopped()
                                else _exact_skipped(len(new.allocation.offsets), exact_end, limit)))
            _write(graph, new, out_path, plan)
            return
    else:
        new = plan
    pb = plan_buffers(graph, new)

    def offsets_of(p, solver: str, seconds: float) -> Solution:  # noqa: ANN001 - a Plan with offsets
        """The plan's own offsets as a solution, in `pb`'s buffer order."""
        offs = np.array([p.allocation.offsets[t] for t in pb.tensors], np.int64)
        return Solution(offs, int((offs + pb.problem.arrays.size).max()) if len(offs) else 0, solver, seconds,
                        False, pb.problem.peak_live())

    if new is not plan:   # lay_out's arena: the solution it wrote
        sol = offsets_of(new, str(info.get("solver", "")), solve_s)
    else:
        sol = heuristic_layout(pb.problem, deadline=work_end)
        if plan.allocation.kind == "arena" and set(pb.tensors) <= set(plan.allocation.offsets):
            # a plan laid out already is a layout to start from: heuristics cut short by a spent limit gave 137
            # MiB where its own offsets take 63 (resnet18 at --time-limit 0.5s), and the command failed
            given = offsets_of(plan, "the input plan", 0.0)
            sol = given if given.arena_bytes < sol.arena_bytes else sol
    skipped = ""
    if sol.arena_bytes > sol.lower_bound and not exact.stopped():
        skipped = _exact_skipped(len(pb.problem), exact_end, limit)
        if not skipped:
            if left(exact_end) > 0:
                sol = exact.solve(pb.problem, left(exact_end), start=sol)
            else:
                skipped = "exact search skipped: no time of --time-limit was left for it"
    new = arena_plan(new, pb, sol)
    click.echo(_verdict(sol.arena_bytes, pb.problem.peak_live(), sol.proven_optimal, sol.lower_bound, sol.solver,
                        sol.seconds, skipped, sol))
    _write(graph, new, out_path, plan)


def _write(graph, plan, out_path: Path | None, given) -> None:  # noqa: ANN001 - a Graph and Plans
    """The plan with offsets, written; first, where it is slower than the plan `given`, a line saying so."""
    _slower(given, plan, out_path is not None)
    if out_path is not None:
        from hybrid.validator import write_plan

        write_plan(graph, plan, out_path, "the plan with arena offsets")
        click.echo(f"wrote {out_path}")


# Evictions the repair may make when the heuristics end above 1.001 x the peak (hybrid.arena.repair; ~12 ms each
# on 18,692 buffers, beside --time-limit): what brings pangu_2.6B from 1.0076 to its peak.
REPAIR_MOVES = 400


# Of the time left once the buffers are read, what the exact search (heuristics and repair included) may use:
# the rest checks the offsets and writes the file (pangu_2.6B's 18,692 buffers: 0.1 s), so that --time-limit
# holds (issue: 10 s gave 10.4-10.7 s, the whole limit having been given to the search after reading).
SEARCH_SHARE = 0.95


def _search_s(deadline: float) -> float:
    return max(0.0, SEARCH_SHARE * (deadline - time.perf_counter()))


def _graph(graph_path: Path, deadline: float, out_path: Path | None, overwrite: bool, align: int | None = None
           ) -> None:
    from hybrid.arena import exact
    from hybrid.arena.lifetimes import schedule_buffers
    from hybrid.arena.problem import write_csv
    from hybrid.arena.validate import check_offsets
    from hybrid.cli.options import load_graph

    sb = schedule_buffers(load_graph(graph_path), align=align, overwrite=overwrite)
    problem = sb.problem
    with exact.stop_on_signal() as hits:
        sol = exact.solve(problem, _search_s(deadline), repair_moves=REPAIR_MOVES)
        offsets = sb.tensor_offsets(sol.offsets)
        chk = check_offsets(sb.tensors, offsets)
        if not chk.valid:     # per tensor, overwrite pairs included: never write what the validator rejects
            raise HybridError(f"internal error: {sol.solver} produced an invalid assignment: {chk.problems[0]}")
        click.echo(_verdict(sol.arena_bytes, problem.peak_live(), sol.proven_optimal, sol.lower_bound, sol.solver,
                            sol.seconds, solved=sol))
        if overwrite:
            click.echo(f"{len(sb.overwrites)} in-place overwrites; {len(problem)} buffers for {len(sb.tensors)} tensors")
        if out_path is not None:
            write_csv(out_path, sb.tensors, offsets)
            click.echo(f"wrote {out_path}")
        _interrupted(hits, out_path)


def _csv(path: Path, capacity: str | None, align: int, deadline: float, out_path: Path | None, limit: float
         ) -> None:
    from hybrid.arena import exact
    from hybrid.arena.problem import read_csv, write_csv
    from hybrid.arena.validate import check_offsets

    problem, given = read_csv(path, align)
    if given is not None:   # MiniMalloc's output read back: its offsets are not kept nor checked
        click.echo(f"note: {path} has an offset column; its offsets are ignored: the buffers are laid out anew",
                   err=True)
    cap = parse_bytes(capacity, "--capacity") if capacity is not None else None
    peak = problem.peak_live()
    if cap is not None and cap < peak:   # the bytes live at one time need that much whatever the offsets: no search
        raise InfeasibleError(f"no assignment within --capacity {format_bytes_exact(cap)}: none exists (proven: the live bytes "
                              f"peak at {format_bytes_exact(peak)}, above it); give --capacity {peak} or more")
    with exact.stop_on_signal() as hits:
        sol = exact.solve(problem, _search_s(deadline), capacity=cap, first_fit=cap is not None,
                          repair_moves=REPAIR_MOVES)
        chk = check_offsets(problem, sol.offsets)
        if not chk.valid:     # the validator is independent of the solvers: never write what it rejects
            raise HybridError(f"internal error: {sol.solver} produced an invalid assignment: {chk.problems[0]}")
        click.echo(_verdict(sol.arena_bytes, peak, sol.proven_optimal, sol.lower_bound, sol.solver, sol.seconds,
                            solved=sol, capacity=cap))
        if cap is not None and sol.arena_bytes > cap:
            if hits:
                _nothing_kept(hits, f"no assignment within --capacity {format_bytes_exact(cap)} was found before it "
                                    f"(the best found needs {format_bytes_exact(sol.arena_bytes)})")
            why = "none exists (proven)" if sol.lower_bound > cap else f"none found in {format_seconds(limit)}"
            raise InfeasibleError(f"no assignment within --capacity {format_bytes_exact(cap)}: {why}; the best found "
                                  f"needs {format_bytes_exact(sol.arena_bytes)}")
        if out_path is not None:
            write_csv(out_path, problem, sol.offsets)
            click.echo(f"wrote {out_path}")
        _interrupted(hits, out_path)
