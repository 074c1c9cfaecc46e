"""The SwapAdvisor paper's worked examples (Figures 1 and 3) reproduced by the swap planner."""
from __future__ import annotations

import numpy as np
import pytest

from hybrid.swap.pools import class_pool
from hybrid.graph.liveness import distinct_sizes
from hybrid.swap.to_plan import to_plan
from hybrid.graph.order import program_order
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.planner import SwapPlanner
from hybrid.validator import check

from .paper_examples import figure1, figure3

# Weights start on the host in the paper's example: one pass, nothing resident at the start.
FIG1 = PlannerOptions(passes=1)


def _pools(g):
    ts = distinct_sizes(g)  # [0 (the stand-in backward outputs), 1 MB, 2 MB]
    fine = class_pool(g, np.array([0, 1, 2]), np.array([6, 8, 1]), ts, align=g.device.alignment_bytes)    # 8 x 1 MB + 1 x 2 MB
    coarse = class_pool(g, np.array([0, 1, 1]), np.array([6, 5]), ts, align=g.device.alignment_bytes)     # 5 x 2 MB
    return fine, coarse


def concat_end(order: str, pool_name: str, options: PlannerOptions = FIG1) -> float:
    g = figure1(order)
    fine, coarse = _pools(g)
    aug = SwapPlanner(g, g.device).plan(program_order(g), fine if pool_name == "fine" else coarse, options)
    check(g, to_plan(aug, {"name": "test"}))
    return float(next(aug.end[i] for i in range(aug.n_nodes) if aug.label(i) == "Concat"))


def test_figure1_right_first_fine_pool_takes_6_units():
    assert concat_end("right", "fine") == 6.0          # Figure 1 (d)


def test_figure1_right_first_coarse_pool_takes_7_units():
    assert concat_end("right", "coarse") == 7.0        # Figure 1 (c): W1 waits for room at t4


def test_figure1_left_first_fine_pool_takes_7_units():
    assert concat_end("left", "fine") == 7.0           # Figure 1 (e): Concat waits for A2's swap-out


@pytest.mark.parametrize("recency", [0, 1, 2, 3])
def test_figure1_orderings_hold_for_any_recency(recency):
    opt = PlannerOptions(passes=1, recency=recency)
    assert concat_end("right", "fine", opt) == 6.0
    assert concat_end("right", "fine", opt) < concat_end("left", "fine", opt)


def test_figure3_swap_nodes_and_control_edges():
    g = figure3()
    aug = SwapPlanner(g, g.device).plan(program_order(g), _byte_pool(g), PlannerOptions(passes=1))
    check(g, to_plan(aug, {"name": "test"}))
    edges = set(aug.edges())
    # op3 needs W3 and room for A3: W1 makes room for W3, W2 for A3 (unchanged weights are freed, not copied).
    assert ("op1", "free:W1") in edges
    assert ("free:W1", "swap_in:W3") in edges
    assert ("swap_in:W3", "op3") in edges
    assert ("op2", "free:W2") in edges
    assert ("free:W2", "op3") in edges
    assert ("swap_in:W1", "op1") in edges and ("swap_in:W2", "op2") in edges


def _byte_pool(g):
    from hybrid.swap.pools import byte_pool

    return byte_pool(g, g.device)
