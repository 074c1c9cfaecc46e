"""A CPU profile measured while another process holds a core says so (its times are the contention's)."""
from __future__ import annotations

import pytest

from hybrid.capture import profile as profile_mod

pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def test_busy_warning_only_past_the_ratio() -> None:
    assert profile_mod.busy_warning(1.5, 2) is None
    note = profile_mod.busy_warning(500.0, 2)
    assert note is not None and "busy" in note and "500x" in note and "\n" not in note


def test_the_probe_leaves_torch_threads_as_they_were() -> None:
    import torch

    before = torch.get_num_threads()
    assert profile_mod.cpu_busy_ratio(torch) > 0
    assert torch.get_num_threads() == before


def test_a_busy_measurement_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from hybrid.capture import capture

    def small_graph():   # noqa: ANN202 - a captured graph: its ops have aten records to measure
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        return capture(m, torch.randn(4, 8), torch.nn.functional.cross_entropy, torch.tensor([0, 1, 0, 1]),
                       optimizer="sgd")

    monkeypatch.setattr(profile_mod, "cpu_busy_ratio", lambda t: 400.0)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    _, report = profile_mod.measure_profile(small_graph(), backend="cpu", repeat=1, warmup=0)
    assert report.measured > 0 and len(report.warnings) == 1 and "400x" in report.warnings[0]
    monkeypatch.setattr(profile_mod, "cpu_busy_ratio", lambda t: 1.0)
    _, report = profile_mod.measure_profile(small_graph(), backend="cpu", repeat=1, warmup=0)
    assert report.warnings == []


def test_a_stop_counts_every_op_not_reached_and_names_no_op_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A time limit's 57 ops skipped were listed as one ("skipped <op>: time limit"); a Ctrl-C said "skipped 0
    ops" and then "skipped interrupted: Ctrl-C", its reason printed as an op id (helper-95)."""
    import torch

    from hybrid.capture import capture

    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    g = capture(m, torch.randn(4, 8), torch.nn.functional.cross_entropy, torch.tensor([0, 1, 0, 1]), optimizer="sgd")
    _, full = profile_mod.measure_profile(g, backend="cpu", repeat=1, warmup=0)
    assert full.stopped is None and full.measured > 2
    _, report = profile_mod.measure_profile(g, backend="cpu", repeat=1, warmup=0, time_limit_s=-1.0)
    assert report.stopped == "time limit" and report.measured == 0 and report.reasons == {}
    assert report.not_reached == full.measured
    assert len(report.skipped) == len({op.id for op in g.ops if op.id in set(report.skipped)}) > 0
    calls = []

    def interrupted(*a, **k):   # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        if len(calls) > 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    real = profile_mod._time_op
    monkeypatch.setattr(profile_mod, "_time_op", interrupted)
    _, report = profile_mod.measure_profile(g, backend="cpu", repeat=1, warmup=0)
    assert report.stopped == "Ctrl-C" and report.measured == 2 and report.reasons == {}
    assert report.not_reached == full.measured - 2
    assert len(report.skipped) > 0 and "interrupted" not in report.skipped
