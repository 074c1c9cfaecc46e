"""A first run compiles the walk here and every other kernel in a second process (hybrid.pipeline.kernels): that
process must compile each kernel with the argument types of the real calls, or this one compiles it again."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hybrid.pipeline import kernels

ROOT = Path(__file__).resolve().parents[2]

# In a fresh interpreter (numba's cache as the tests left it): the signatures every kernel holds after the second
# process's job, then the ones a short optimize run (search, layout, baselines) adds.
_PROBE = r"""
import json, sys
from dataclasses import replace
from numba.core.registry import CPUDispatcher

def signatures():
    out = {}
    for name, mod in list(sys.modules.items()):
        if not (name.startswith("hybrid.") or name.startswith("ga.")):
            continue
        for attr, obj in list(vars(mod).items()):
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == name:
                out[f"{name}.{attr}"] = sorted(str(s) for s in obj.signatures)
    return out

from hybrid.pipeline.kernels import compile_beside_walk
compile_beside_walk(True)
before = signatures()
from hybrid.graph.info import unswapped_peak
from hybrid.graph.synthetic import training_graph
from hybrid.pipeline import run_optimize
from hybrid.pipeline.optimize import OptimizeOptions
g = training_graph(6, seed=3)
dev = replace(g.device, memory_bytes=int(0.6 * unswapped_peak(g)), reserve_bytes=0)
run_optimize(g, dev, 60.0, OptimizeOptions(generations=2, workers=1, baselines=True))
after = signatures()
print(json.dumps({"before": before, "after": after}))
"""

# the walk's own kernel and what it calls: compiled by the first process (with the walk, or loaded with it)
_WALK = ("hybrid.swap.kernel.", "hybrid.swap.eviction.", "hybrid.swap.addresses.", "hybrid.swap.recompute.",
         "hybrid.swap._heap.", "hybrid.swap.free_memory.")
# the layout's exact search: loaded where cached, else compiled by the layout's own rule (not on a first run)
_EXACT = ("hybrid.arena.exact.",)


def test_the_second_process_compiles_every_kernel_but_the_walk_with_the_real_calls_types() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    before, after = seen["before"], seen["after"]
    # it did compile (or load) the others: the re-walk, the layout's repair and heuristics, the bound, the GA's
    for name in ("hybrid.swap.rewalk.walk_into", "hybrid.arena.repair._repair", "hybrid.arena.heuristics._megengine",
                 "hybrid.bounds._at_op", "ga.mutation._ready_walk", "ga.repair._best_flip"):
        assert before.get(name), name
    added = {name: sorted(set(sigs) - set(before.get(name, ())))
             for name, sigs in after.items() if set(sigs) - set(before.get(name, ()))}
    assert not {k: v for k, v in added.items() if not k.startswith(_WALK + _EXACT)}, added


def test_one_core_or_a_cached_walk_starts_no_second_process(monkeypatch) -> None:
    started = []
    monkeypatch.setattr(kernels, "_start_beside", lambda arena: started.append(arena))
    kernels.load_kernels(repair=False, exact_search=False, cores=1)
    assert kernels.walk_cached()     # the tests' cache holds it once any test has planned
    kernels.load_kernels(repair=False, exact_search=False, cores=2)
    assert started == []


def test_where_the_walk_is_not_cached_a_second_interpreter_compiles_the_rest(monkeypatch) -> None:
    """The real second process (a fresh interpreter given the packages' folder and the cache folder): it starts,
    runs its job to the end (here loading from the tests' cache) and is waited for."""
    procs = []
    real = kernels._start_beside

    def start(arena: bool):  # noqa: ANN202
        procs.append(real(arena))
        return procs[-1]

    monkeypatch.setattr(kernels, "walk_cached", lambda: False)
    monkeypatch.setattr(kernels, "_start_beside", start)
    kernels.load_kernels(repair=True, exact_search=False, cores=2)
    assert len(procs) == 1 and procs[0] is not None and procs[0].returncode == 0


def test_a_second_process_that_fails_leaves_the_kernels_to_this_one(monkeypatch) -> None:
    procs = []
    real = kernels._start_beside
    monkeypatch.setattr(kernels, "walk_cached", lambda: False)
    monkeypatch.setattr(kernels, "_start_beside", lambda arena: procs.append(real(arena)) or procs[-1])
    monkeypatch.setattr(sys, "executable", "/bin/false" if Path("/bin/false").exists() else "false")
    kernels.load_kernels(repair=True, exact_search=False, cores=2)   # loads (here: from the cache) all the same
    assert procs[0] is None or procs[0].returncode != 0


_COMPILED = r"""
import json, sys
from numba.core.registry import CPUDispatcher
from hybrid.pipeline.kernels import compile_beside_walk
from hybrid.swap.planner import compile_kernels
compile_beside_walk(True) if sys.argv[1] == "beside" else compile_kernels(walk=True, rewalk=False)
print(json.dumps(sorted(f"{name}.{attr}" for name, mod in list(sys.modules.items())
                        if name.startswith(("hybrid.", "ga.")) for attr, obj in list(vars(mod).items())
                        if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == name and obj.signatures)))
"""


@pytest.mark.slow
def test_the_two_processes_compile_disjoint_kernels_from_an_empty_cache(tmp_path: Path) -> None:
    """Each side from an empty cache of its own (so every callee compiles and is listed): no kernel on both sides,
    so the two processes never write one function's cache index at once on a first run. About 40 s."""
    procs = {side: subprocess.Popen([sys.executable, "-c", _COMPILED, side], cwd=ROOT, text=True,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    env={**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / side)})
             for side in ("beside", "walk")}
    seen = {}
    for side, p in procs.items():
        out, err = p.communicate(timeout=900)
        assert p.returncode == 0, err[-3000:]
        seen[side] = set(json.loads(out.strip().splitlines()[-1]))
    assert "hybrid.swap.kernel.walk" in seen["walk"] and "hybrid.swap.rewalk.walk_into" in seen["beside"]
    assert not seen["beside"] & seen["walk"], sorted(seen["beside"] & seen["walk"])


def test_a_command_that_plans_says_it_compiles_on_a_first_run_only(monkeypatch) -> None:
    loads, lines = [], []
    monkeypatch.setattr(kernels, "load_kernels", lambda **kw: loads.append(kw))
    assert kernels.compile_if_first_run(lines.append) == 0.0 and loads == [] == lines   # cached: nothing said
    monkeypatch.setattr(kernels, "walk_cached", lambda: False)
    kernels.compile_if_first_run(lines.append, arena=False)
    assert loads == [{"repair": False, "exact_search": False}]
    assert len(lines) == 1 and "first run after an install" in lines[0]
