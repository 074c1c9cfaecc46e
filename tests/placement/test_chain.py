"""Chain placement: exact is optimal (brute force) and never worse than any heuristic; cuts of real graphs."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.placement.chain import CPU, GPU, ChainCosts, Link, all_on, exact, greedy, heft_chain, latency

LINK = Link(1e9, 1e9, 1e-5)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1e-5, 1e-2), st.floats(1e-5, 1e-2), st.integers(0, 10**7)),
                min_size=1, max_size=9), st.integers(0, 10**7))
def test_exact_is_the_brute_force_optimum_and_beats_every_heuristic(rows, input_bytes):
    c = ChainCosts(tuple(r[0] for r in rows), tuple(r[1] for r in rows), tuple(r[2] for r in rows), input_bytes)
    brute = min(latency(c, d, LINK) for d in itertools.product((CPU, GPU), repeat=c.n))
    best = exact(c, LINK)
    assert best.latency_s == pytest.approx(brute, rel=1e-12)
    for other in (all_on(c, LINK, CPU), all_on(c, LINK, GPU), greedy(c, LINK), heft_chain(c, LINK)):
        assert best.latency_s <= other.latency_s * (1 + 1e-12)
        assert other.latency_s == pytest.approx(latency(c, other.devices, LINK))


def test_latency_charges_the_crossings_and_the_round_trip():
    c = ChainCosts((3.0, 1.0, 3.0), (1.0, 3.0, 1.0), (10, 20, 30), 5)
    link = Link(10.0, 5.0, 0.5)
    # GPU, CPU, GPU: in 0.5 + 5/10, part 0, out 0.5 + 10/5, part 1, in 0.5 + 20/10, part 2, back 0.5 + 30/5
    assert latency(c, (GPU, CPU, GPU), link) == pytest.approx(1.0 + 1 + 2.5 + 1 + 2.5 + 1 + 6.5)
    assert latency(c, (CPU, CPU, CPU), link) == pytest.approx(7.0)


def test_the_pipeline_period_is_set_by_the_busiest_resource():
    from hybrid.placement.chain import best_period, period

    c = ChainCosts((3.0, 1.0, 3.0), (1.0, 3.0, 1.0), (10, 20, 30), 5)
    link = Link(10.0, 5.0, 0.5)
    # GPU, CPU, GPU: CPU 1; GPU 1 + 1; h2d (0.5 + 0.5) + (0.5 + 2); d2h (0.5 + 2) + (0.5 + 6) = 9
    assert period(c, (GPU, CPU, GPU), link) == pytest.approx(9.0)
    assert period(c, (CPU, CPU, CPU), link) == pytest.approx(7.0)
    best = best_period(c, link)
    assert best.period_s == min(period(c, d, link) for d in itertools.product((CPU, GPU), repeat=3))
    assert best.latency_s == pytest.approx(latency(c, best.devices, link))
    # pipelining never does worse than one input at a time
    assert best.period_s <= exact(c, link).latency_s
