"""The serving simulation (hybrid.serve): service times, queueing, policies, determinism."""
from __future__ import annotations

import numpy as np
import pytest

from hybrid.errors import HybridError
from hybrid.serve import ModelCosts, ServeConfig, simulate_serving, workload

MODEL = ModelCosts("m", ideal_s=0.010, swap_s=0.015, param_bytes=120_000_000, workspace_bytes=50_000_000)


def row(df, policy: str, rate: float):
    return df[(df.policy == policy) & (df.rate == rate)].iloc[0]


def test_tiny_rate_latency_is_the_service_time() -> None:
    df = simulate_serving([MODEL], ServeConfig(rates=(0.5,), batch=1, duration_s=2000, seed=3))
    assert row(df, "not-shared", 0.5).p99_s == pytest.approx(0.010, rel=1e-6)
    assert row(df, "swapping", 0.5).p50_s == pytest.approx(0.015, rel=1e-6)
    # one model, resident after its first load: time-sharing loads it once
    ts = row(df, "time-shared", 0.5)
    assert ts.model_loads == 1 and ts.p50_s == pytest.approx(0.010, rel=1e-6)


def test_queueing_grows_with_rate() -> None:
    rates = (10.0, 50.0, 80.0, 95.0)
    df = simulate_serving([MODEL], ServeConfig(rates=rates, batch=1, duration_s=200, seed=1, policies=("not-shared",)))
    p99 = [row(df, "not-shared", r).p99_s for r in rates]
    assert all(a < b for a, b in zip(p99, p99[1:]))
    util = [row(df, "not-shared", r).utilization for r in rates]
    assert util[0] == pytest.approx(0.1, rel=0.1) and util[-1] == pytest.approx(0.95, rel=0.05)


def test_overload_caps_throughput_at_capacity() -> None:
    df = simulate_serving([MODEL], ServeConfig(rates=(300.0,), batch=1, duration_s=20, seed=1, policies=("swapping",)))
    assert row(df, "swapping", 300.0).throughput == pytest.approx(1 / 0.015, rel=0.02)


def test_deterministic_by_seed_and_differs_across_seeds() -> None:
    cfg = ServeConfig(rates=(40.0, 60.0), batch=4, duration_s=30, seed=7)
    a = simulate_serving([MODEL] * 3, cfg)
    b = simulate_serving([MODEL] * 3, cfg)
    assert a.equals(b)
    c = simulate_serving([MODEL] * 3, ServeConfig(rates=(40.0, 60.0), batch=4, duration_s=30, seed=8))
    assert not np.allclose(a.p99_s, c.p99_s)


def test_batches_group_consecutive_arrivals_and_random_models() -> None:
    wl = workload(100.0, 4, 10.0, 5, seed=2)
    assert len(wl.arrivals) % 4 == 0 and np.all(np.diff(wl.arrivals) > 0)
    assert np.array_equal(wl.release, wl.arrivals[3::4])
    assert set(np.unique(wl.model)) == set(range(5))
    assert np.all(wl.arrivals < 10.0)


def test_time_shared_misses_pay_the_parameter_copy() -> None:
    # memory for one model's parameters beside the workspace: every switch of model is a load
    cfg = ServeConfig(rates=(0.1,), batch=1, duration_s=30000, seed=1, memory_bytes=200_000_000,
                      h2d_bytes_per_s=12e9)
    df = simulate_serving([MODEL, MODEL], cfg)
    ts = row(df, "time-shared", 0.1)
    assert ts.model_loads == pytest.approx(ts.requests / 2, rel=0.15)  # switches half the time
    assert ts.p99_s == pytest.approx(0.010 + 0.01, rel=1e-3)           # 120 MB at 12 GB/s = 10 ms
    # with room for both, and --resident 1 limiting it to one, the loads come back
    big = ServeConfig(rates=(0.1,), batch=1, duration_s=30000, seed=1, memory_bytes=10**9)
    assert row(simulate_serving([MODEL, MODEL], big), "time-shared", 0.1).model_loads == 2
    one = ServeConfig(rates=(0.1,), batch=1, duration_s=30000, seed=1, memory_bytes=10**9, resident=1)
    assert row(simulate_serving([MODEL, MODEL], one), "time-shared", 0.1).model_loads == ts.model_loads


def test_policies_order_under_load() -> None:
    cfg = ServeConfig(rates=(60.0,), batch=1, duration_s=100, seed=1, memory_bytes=200_000_000, resident=1)
    df = simulate_serving([MODEL] * 4, cfg)
    assert row(df, "not-shared", 60.0).p99_s < row(df, "swapping", 60.0).p99_s < row(df, "time-shared", 60.0).p99_s


@pytest.mark.parametrize("kw, flag", [({"rates": ()}, "--rate"), ({"rates": (-1.0,)}, "--rate"),
                                      ({"rates": (1.0,), "batch": 0}, "--batch"),
                                      ({"rates": (1.0,), "duration_s": 0}, "--duration"),
                                      ({"rates": (1.0,), "policies": ("fifo",)}, "--policy"),
                                      ({"rates": (1.0,), "resident": 0}, "--resident")])
def test_bad_config_is_one_line_naming_the_flag(kw, flag) -> None:
    with pytest.raises(HybridError, match=flag):
        ServeConfig(**kw)


def test_time_shared_needs_a_whole_model_to_fit() -> None:
    with pytest.raises(HybridError, match="--memory"):
        simulate_serving([MODEL], ServeConfig(rates=(1.0,), duration_s=10, memory_bytes=100_000_000))


def test_swap_cost_below_ideal_is_refused() -> None:
    with pytest.raises(HybridError, match="below its ideal"):
        ModelCosts("x", ideal_s=0.02, swap_s=0.01, param_bytes=1, workspace_bytes=1)
