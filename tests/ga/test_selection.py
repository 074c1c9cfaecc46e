"""Softmax survival over t_norm (eq. 1): probabilities, sampling statistics, elitism, infeasible candidates."""
from __future__ import annotations

import numpy as np
import pytest

from ga.selection import select_survivors, survival_probabilities


def test_probabilities_are_equation_1() -> None:
    times = np.array([1.0, 1.5, 2.0])
    p = survival_probabilities(times, t_best=1.0, temperature=1.0)
    t_norm = (1.0 - times) / 1.0
    assert np.allclose(p, np.exp(t_norm) / np.exp(t_norm).sum())


def test_lower_temperature_selects_harder_and_infeasible_never_survive_by_chance() -> None:
    times = np.array([1.0, 1.1, np.inf, np.nan])
    soft = survival_probabilities(times, 1.0, 1.0)
    hard = survival_probabilities(times, 1.0, 0.05)
    assert soft[2] == soft[3] == hard[2] == hard[3] == 0.0
    assert hard[0] / hard[1] > soft[0] / soft[1] > 1.0


def test_survival_frequencies_follow_the_probabilities() -> None:
    rng = np.random.default_rng(0)
    times = np.linspace(1.0, 1.3, 10)
    counts = np.zeros(10)
    trials = 4000
    for _ in range(trials):
        counts[select_survivors(times, 1, 1.0, rng, temperature=0.1, elite=0)] += 1
    expected = survival_probabilities(times, 1.0, 0.1) * trials
    assert np.abs(counts - expected).max() < 5 * np.sqrt(expected.max())
    assert counts[0] > counts[-1] * 5


def test_survivors_are_distinct_include_the_best_and_prefer_feasible() -> None:
    rng = np.random.default_rng(1)
    times = np.array([3.0, np.inf, 2.0, 5.0, np.inf, 4.0])
    for _ in range(50):
        keep = select_survivors(times, 4, 2.0, rng, temperature=1.0, elite=1)
        assert len(set(keep.tolist())) == 4
        assert 2 in keep
        assert set(keep.tolist()) == {0, 2, 3, 5}
    keep = select_survivors(times, 5, 2.0, rng)
    assert len(set(keep.tolist())) == 5 and {0, 2, 3, 5} <= set(keep.tolist())


def test_a_best_time_of_zero_gives_finite_probabilities_and_the_search_runs() -> None:
    """A graph whose ops take no time has plans of makespan 0: Eq. 1 divided by it (NaN weights, and
    select_survivors raised ValueError in the first generation). The slowest feasible time normalizes then."""
    from ga import GAConfig, optimize
    from hybrid.device import Device
    from hybrid.graph import Graph, Op, Tensor

    p = survival_probabilities(np.array([0.0, 0.0, 2e-6, np.inf]), t_best=0.0)
    assert np.isfinite(p).all() and p.sum() == pytest.approx(1.0) and p[3] == 0 and p[0] == p[1] > p[2] > 0
    assert np.allclose(survival_probabilities(np.zeros(3), t_best=0.0), 1 / 3)
    g = Graph("zero", [Tensor("w", 1024, "param", True), Tensor("a", 1024, "activation"),
                       Tensor("b", 1024, "activation")],
              [Op("op0", "x", ("w",), ("a",), 0.0), Op("op1", "x", ("a", "w"), ("b",), 0.0)],
              Device("d", 1 << 20, 1e9, 1e9, 0.0))
    r = optimize(g, g.device, GAConfig(population=4, children=4, seed=1), generations=2, workers=1)
    assert r.makespan_s == 0.0
