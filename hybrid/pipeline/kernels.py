"""Loading the Numba kernels, and compiling them on two cores the first time after an install.

Every kernel is `@njit(cache=True)`: compiled once, then loaded from numba's on-disk cache by every later
process (0.1-0.5 s). The first compile after an install is what a new user waits for: about 55 s of compiling
on this project's 2-core machine, 30 s of it the planner's walk, which only one process can compile. So where the
walk is not cached yet and a second core is free, a second process compiles everything else the setup, the
search and the layout use (the re-walk, the layout's repair and heuristics, the lower bound's kernels, the
genetic operators) while this one compiles the walk; numba's cache carries its work over, and this process then
loads it. The README command's first run (30 s limit, an empty cache, 2 cores, 2026-11-29): 56 s before, 28.7 s
with it (its compile 47 s + 8 s inside the search and layout before, 27 s with it).
"""
from __future__ import annotations

import atexit
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

# The second process's compile takes about as long as the walk's here; waited for at most this long, then killed
# (whatever it did not write to numba's cache compiles here on first use, as without it)
BESIDE_MIN_WAIT_S = 60.0
BESIDE_WAIT_FACTOR = 2.0


def walk_cached() -> bool:
    """Whether numba's on-disk cache holds the planner's walk for this source and this CPU (so loading it takes a
    fraction of a second); False where it cannot tell (then a first run is assumed)."""
    from hybrid._numba_cache import holds
    from hybrid.swap import kernel

    return holds(kernel.walk)


def compile_beside_walk(arena: bool) -> None:
    """Compile (or load) every kernel a run uses but the walk's: what the second process does on a first run.
    Each on a tiny problem, with the argument types of the real calls (tests/hybrid/test_kernels.py checks that
    a run after this compiles nothing but the walk's kernels)."""
    from dataclasses import replace

    from hybrid.bounds import graph_bound
    from hybrid.graph.info import unswapped_peak
    from hybrid.graph.synthetic import training_graph
    from hybrid.swap.augmented import PlannerOptions
    from hybrid.swap.planner import compile_kernels

    compile_kernels(walk=False, rewalk=True)
    g = training_graph(3, seed=0)
    dev = replace(g.device, memory_bytes=int(0.8 * unswapped_peak(g)), reserve_bytes=0)
    for rc in (True, False):
        graph_bound(g, dev, recompute=rc)
    # where size-class pools fit but a random one is over the memory (its repair runs)
    _genetic_operators(g, replace(dev, memory_bytes=int(1.3 * unswapped_peak(g))), PlannerOptions())
    if arena:
        from hybrid.arena import heuristics
        from hybrid.arena.repair import warm_up

        warm_up()
        heuristics.warm_up()


def _genetic_operators(graph: Any, device: Any, options: Any) -> None:
    """The search's own kernels (its space, feasibility floor, random schedules and pools), without evaluating."""
    import numpy as np

    from ga.encoding import SearchSpace
    from ga.population import random_individuals, seeded
    from ga.repair import check_feasible

    space = SearchSpace.build(graph, device, options)
    check_feasible(space)
    seeds = seeded(space)
    random_individuals(space, 2, "both", "both", (0,), np.random.default_rng(0), seeds[0])


def load_kernels(repair: bool, exact_search: bool, cores: int | None = None) -> None:
    """The planner's kernels, and the layout's repair and exact search where asked: loaded from numba's cache, or
    compiled once after an install, then with a second process compiling everything but the walk at the same
    time where `cores` (default: this process's) allows (`run_optimize`'s setup and `warm_kernels`)."""
    from hybrid.swap.planner import compile_kernels

    if cores is None:
        from ga.evaluation import available_cores

        cores = available_cores()
    helper = None if cores < 2 or walk_cached() else _start_beside(arena=repair)
    try:
        t0 = time.monotonic()
        compile_kernels(walk=True, rewalk=helper is None)
        if helper is not None:
            from hybrid.signals import received

            # it takes about as long as the walk; a helper far slower (stuck) is killed below. A Ctrl-C or SIGTERM
            # (deferred by the caller's `interrupts_after`) ends the wait: the caller acts on it
            end = time.monotonic() + max(BESIDE_MIN_WAIT_S, BESIDE_WAIT_FACTOR * (time.monotonic() - t0))
            while helper.poll() is None and time.monotonic() < end and not received():
                try:
                    helper.wait(0.1)
                except subprocess.TimeoutExpired:
                    pass
            if received():
                return
            compile_kernels()   # the re-walk, now from the cache the helper wrote (compiled here if it did not)
    finally:
        if helper is not None:
            _kill(helper)
    if repair:
        from hybrid.arena import heuristics
        from hybrid.arena.repair import warm_up

        warm_up()
        heuristics.warm_up()
    if exact_search:
        from hybrid.arena import exact

        exact.warm_up()


def compile_if_first_run(note: Callable[[str], None] | None = None, arena: bool = True) -> float:
    """Where numba's cache lacks the planner's walk (the first run after an install): say so through `note`, then
    compile the kernels a plan and its layout need now (two processes where two cores are free), so a command
    that plans does not sit silent for half a minute inside its first plan. Seconds spent (0 when cached)."""
    if walk_cached():
        return 0.0
    from hybrid.signals import interrupts_after

    if note is not None:
        note("compiling the planner's kernels: the first run after an install (30-60 s on 2 cores; cached from "
             "now on)")
    t0 = time.monotonic()
    with interrupts_after():   # numba calls back into Python: a Ctrl-C is acted on once it returns
        load_kernels(repair=arena, exact_search=False)
    return time.monotonic() - t0


def _start_beside(arena: bool) -> subprocess.Popen | None:
    """Start the second process: a fresh interpreter running `compile_beside_walk` (not multiprocessing's spawn,
    which re-imports the caller's main module: a user's script without a `__main__` guard would run again), with
    this process's numba cache folder (inherited through the environment), no current folder on its path (`-P`:
    another copy of the packages there would be compiled instead) and the folder holding these packages where it
    is not already on it; None where it cannot start (then this process compiles everything, as with one core).
    Its output is discarded: where it fails, this process compiles what it left."""
    import hybrid
    from hybrid.signals import children_ignore_stops, register_cleanup

    if not sys.executable or getattr(sys, "frozen", False):   # embedded, or a frozen app: no interpreter to start
        return None
    root = str(Path(hybrid.__file__).resolve().parent.parent)
    code = (f"import sys; root = {root!r}; root in sys.path or sys.path.insert(0, root); "
            f"from hybrid.pipeline.kernels import compile_beside_walk; compile_beside_walk({bool(arena)})")
    try:
        with children_ignore_stops():   # a Ctrl-C or SIGTERM is this process's to act on; it kills the helper
            proc = subprocess.Popen([sys.executable, "-P", "-c", code], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return None
    global _registered
    if not _registered:
        atexit.register(_kill_all)
        register_cleanup(_kill_all)    # a second Ctrl-C exits at once (os._exit: no atexit)
        _registered = True
    _running.add(proc)
    return proc


_running: set[subprocess.Popen] = set()   # second processes not yet waited for and killed
_registered = False


def _kill_all() -> None:
    for proc in list(_running):
        _kill(proc)


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the helper if it still runs (its stop signals are blocked); numba writes each cache file whole."""
    _running.discard(proc)
    if proc.poll() is None:
        proc.kill()
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:   # stuck in the kernel: left to the system
            pass
