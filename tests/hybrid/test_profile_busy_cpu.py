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
