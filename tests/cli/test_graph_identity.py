"""Plans name the user's graph file (its bytes' sha256) in every refine mode, also for files other tools wrote."""
from __future__ import annotations

import hashlib
import time
from dataclasses import replace

import numpy as np
import pytest

from ga.algorithm import SearchState
from ga.encoding import SearchSpace
from ga.population import seeded
from hybrid.graph import Graph
from hybrid.plan import Plan
from hybrid.swap.planner import SwapPlanner
from hybrid.validator import validate
from tests.cli.helpers import foreign_graph_file, run

MODES = {"auto": ["--refine-mode", "auto"], "beside": ["--refine-mode", "beside"],
         "after": ["--refine-mode", "after", "--refine-share", "0.5"], "none": ["--refine", "none"]}


@pytest.mark.parametrize("mode", list(MODES))
def test_optimize_writes_a_valid_plan_for_the_users_file_in_every_refine_mode(tmp_path, mode) -> None:
    path = foreign_graph_file(tmp_path)
    out = tmp_path / "plan.json"
    r = run("optimize", "--graph", path, "--memory", "12MiB", "--time-limit", "3s", "--population", 8, "--quiet",
            "--no-arena", "--out", out, *MODES[mode])  # a tight byte budget: identity, not layout, is tested
    assert r.exit_code == 0, r.output
    plan = Plan.load(out)
    assert plan.graph_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert validate(Graph.load(path), plan).valid


def test_plans_refined_beside_the_search_name_the_users_file(tmp_path) -> None:
    """The refiner process rebuilds the graph from JSON; its plans must still carry the file's sha256.

    Offered the slowest of the seeded plans, the refiner refines it at once (and usually improves it)."""
    path = foreign_graph_file(tmp_path, n_layers=30)
    g = Graph.load(path)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert g.sha256 == sha != hashlib.sha256(g.dumps().encode()).hexdigest()
    dev = replace(g.device, memory_bytes=24 << 20)
    space = SearchSpace.build(g, dev)
    planner = SwapPlanner(g, dev)
    seeds = seeded(space, "bytes", (0, 1, 2))
    for s in seeds:
        s.makespan = planner.makespan(s.schedule, space.pool(s), space.options_for(s))
    slow = max(seeds, key=lambda i: i.makespan)
    from hybrid.refine.beside import BesideRefiner

    import hybrid.refine.beside as beside

    # the refiner's first refinement is waited for (its start takes seconds, more on a loaded machine), not slept
    # for: the deadline and the waits are hang guards
    refiner = BesideRefiner(g, dev, deadline=time.monotonic() + 600.0, seed=1, elites=1, patience_s=2.0)
    refiner.offer(SearchState([slow], slow, 0, 1, 0.0, np.random.default_rng(0)))
    try:
        while refiner._report.refined == 0:       # fold its messages in as finish() does, up to the first run
            kind, body = refiner._outbox.get(timeout=300)
            assert kind != "done", "the refiner stopped without refining what it was offered"
            beside._take(refiner._report, kind, body)
    finally:
        old_grace = beside.EARLY_GRACE_S
        beside.EARLY_GRACE_S = 120.0
        try:
            rep = refiner.finish()
        finally:
            beside.EARLY_GRACE_S = old_grace
    assert rep.refined >= 1 and rep.error == "", rep.error
    assert all(entry["graph_sha256"] == sha for entry in rep.log)
    if rep.plan is not None:
        assert rep.plan.graph_sha256 == sha and validate(g, rep.plan).valid
