"""The bounds (hybrid.bounds) give the same figures as their former quadratic implementation
(tests/hybrid/bounds_reference.py) on small graphs of every shape the project generates."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid.device import Device
from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.graph.info import largest_op, unswapped_peak
from hybrid.graph.order import program_order, random_order
from hybrid.graph.synthetic import random_dag, training_graph, transformer_training_graph
from hybrid import bounds
from hybrid.swap.baselines import run_baseline
from tests.hybrid import bounds_reference as reference


def _graph(kind: str, n: int, seed: int) -> Graph:
    if kind == "random":
        return random_dag(n, seed=seed)
    if kind == "training":
        return training_graph(max(1, n // 3), seed=seed, workspace_prob=0.3, impls_prob=0.3, skip_prob=0.4)
    return transformer_training_graph(max(1, n // 40), pieces=1 + seed % 3, seed=seed)


def _same(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b))  # sums taken in another order


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(2, 120), frac=st.floats(0.1, 1.0),
       kind=st.sampled_from(["random", "training", "transformer"]), link=st.sampled_from([1e8, 1e9, 1e10]),
       max_ops=st.sampled_from([512, 4, None]))
def test_same_figures_as_the_quadratic_reference(seed, n, frac, kind, link, max_ops):
    g = _graph(kind, n, seed)
    dev = Device("d", max(int(unswapped_peak(g) * frac), int(largest_op(g, 256)[1] * 1.2)), link, link * 0.7, 0.0,
                 alignment_bytes=256)
    for rc in (False, True):
        assert _same(bounds.graph_bound(g, dev, rc), reference.graph_bound(g, dev, rc))
    rng = np.random.default_rng(seed)
    for order in (program_order(g), random_order(g, rng)):
        for rc in (False, True):
            assert bounds.activation_bound(g, dev, order, rc, max_ops) == \
                reference.activation_bound(g, dev, order, rc, max_ops)
        try:
            plan = run_baseline(g, dev, "belady", order, recompute=bool(seed % 2))
        except InfeasibleError:
            continue
        assert bounds.schedule_bound(g, plan, max_ops) == reference.schedule_bound(g, plan, max_ops)


def test_graph_bound_spans_several_column_blocks(monkeypatch):
    """The reachability sums run _BLOCK columns at a time: blocks smaller than the graph give the same figures."""
    g = transformer_training_graph(3, pieces=3, seed=2)
    dev = Device("d", unswapped_peak(g) // 3, 1e9, 1e9, 0.0)
    want = [reference.graph_bound(g, dev, rc) for rc in (False, True)]
    for block in (64, 128, 1000):
        monkeypatch.setattr(bounds, "_BLOCK", block)
        bounds._PREP.clear()
        assert all(_same(bounds.graph_bound(g, dev, rc), w) for rc, w in zip((False, True), want))
    bounds._PREP.clear()
