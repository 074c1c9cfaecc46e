"""The chain that decides a plan's makespan: contiguous, covering it, and made of copies only when memory is short."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.swap.pools import byte_pool, per_size_pool
from hybrid.swap.critical_path import critical_path, path_shares
from hybrid.device import Device
from hybrid.errors import InfeasibleError
from hybrid.swap.to_plan import to_plan
from hybrid.graph.order import program_order, random_order
from hybrid.swap.planner import SwapPlanner
from hybrid.graph.synthetic import training_graph


def _plan(g, order, classes: bool):
    pool = per_size_pool(g, order, g.device) if classes else byte_pool(g, g.device)
    return to_plan(SwapPlanner(g, g.device).plan(order, pool), {"name": "belady"})


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), classes=st.booleans())
def test_the_chain_covers_the_makespan(seed, classes):
    rng = np.random.default_rng(seed)
    g = training_graph(int(rng.integers(4, 14)), seed=seed, workspace_prob=0.3,
                       device=Device("s", int(rng.integers(14, 48)) << 20, 12e9, 6e9, 0.0))
    try:
        plan = _plan(g, random_order(g, rng), classes)
    except InfeasibleError:
        return
    path = critical_path(g, plan)
    assert path["start_s"].iloc[0] == pytest.approx(0.0, abs=1e-12)
    assert path["end_s"].iloc[-1] == pytest.approx(plan.makespan_s)
    assert np.allclose(path["start_s"].to_numpy()[1:], path["end_s"].to_numpy()[:-1])  # no gaps, no overlaps
    assert path["busy_s"].sum() == pytest.approx(plan.makespan_s)
    assert set(path["kind"]) <= {"compute", "swap_in", "swap_out"}


def test_copies_decide_only_when_memory_is_short():
    g = training_graph(12, seed=1, device=Device("s", 24 << 20, 12e9, 12e9, 0.0))
    tight = _plan(g, program_order(g), classes=False)
    shares = path_shares(critical_path(g, tight), tight.makespan_s)
    assert shares["copy_share"] > 0 and tight.metrics["stall_s"] > 0
    assert shares["compute_s"] + shares["swap_in_s"] + shares["swap_out_s"] == pytest.approx(tight.makespan_s)
    big = Device("s", 1 << 30, 12e9, 12e9, 0.0)
    g2 = training_graph(12, seed=1, device=big)
    roomy = _plan(g2, program_order(g2), classes=False)
    path = critical_path(g2, roomy)
    assert list(path["kind"]) == ["compute"] and path_shares(path, roomy.makespan_s)["copy_share"] == 0.0


def test_a_wait_for_memory_the_plan_file_does_not_show_still_continues_the_chain():
    """Found by hypothesis (seed 663): fwd11 waits for the swap_out that frees its memory, an edge from_plan
    does not recover; the chain must still reach time 0."""
    rng = np.random.default_rng(663)
    g = training_graph(int(rng.integers(4, 14)), seed=663, workspace_prob=0.3,
                       device=Device("s", int(rng.integers(14, 48)) << 20, 12e9, 6e9, 0.0))
    plan = _plan(g, random_order(g, rng), False)
    path = critical_path(g, plan)
    assert path["start_s"].iloc[0] == pytest.approx(0.0, abs=1e-12)
    assert path["end_s"].iloc[-1] == pytest.approx(plan.makespan_s)
