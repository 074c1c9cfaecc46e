"""benchmarks/executor_gpu.py's tables: rows of one card only (a run on another card does not merge into them)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import pandas as pd  # noqa: E402

from benchmarks.executor_gpu import (acceptance, device_label, fit_link, load_previous, measure_link,  # noqa: E402
                                     ranking_kept, write)

pytestmark = pytest.mark.torch


def test_append_keeps_the_previous_rows_only_when_they_are_this_devices(tmp_path: Path) -> None:
    cpu = torch.device("cpu")
    out = tmp_path / "executor_gpu.md"
    rows = {"rows": [{"model": "resnet-50"}], "ranks": [], "infos": [], "commands": ["python x"]}
    out.with_suffix(".json").write_text(json.dumps(rows))
    out.write_text("# t\n\nDevice: NVIDIA H100 80GB HBM3; torch 2.11.0+cu130. Measured host link: ...\n")
    assert load_previous(out, cpu) == {}                           # the table's Device line names another card
    out.with_suffix(".json").write_text(json.dumps({**rows, "device": device_label(cpu)}))
    assert load_previous(out, cpu)["rows"] == rows["rows"]         # this device's: kept
    assert load_previous(tmp_path / "none.md", cpu) == {}


def test_ranking_kept_reads_issue_31() -> None:
    assert not ranking_kept([], float("nan"))                      # a row with no plans is not kept
    assert ranking_kept(["a"], float("nan")) and ranking_kept(["a", "b"], 1.0) and not ranking_kept(["a", "b"], -1.0)
    assert ranking_kept(list("abcd"), 0.8) and not ranking_kept(list("abc"), 1 / 3)


def test_a_run_whose_every_plan_failed_still_writes_its_table(tmp_path: Path) -> None:
    """A failed plan's row holds model, memory, plan and error only: with no row that ran, the table is written
    with those rows and says that no run finished."""
    errors = [{"model": "resnet-50", "memory": m, "plan": p, "error": "RuntimeError: CUDA out of memory"}
              for m in ("60%", "35%") for p in ("belady", "vdnn")]
    ranks = [{"model": "resnet-50", "memory": m, "plans": 0, "kendall_tau": float("nan"), "ranking_kept": False}
             for m in ("60%", "35%")]
    assert acceptance(pd.DataFrame(errors), pd.DataFrame(ranks)) == \
        "Issue 31's GPU items: no run finished (4 failed: see their error)."
    out = tmp_path / "executor_gpu.md"
    link = {"h2d_bytes_per_s": 2e10, "d2h_bytes_per_s": 2e10, "latency_s": 1e-5}
    args = argparse.Namespace(commit="abc", iters=2, commands=["python benchmarks/executor_gpu.py"])
    write(out, torch.device("cpu"), link, errors, ranks, [{"model": "resnet-50"}], None, args)
    md = out.read_text()
    assert "no run finished (4 failed" in md and md.count("CUDA out of memory") == 4
    assert len(json.loads(out.with_suffix(".json").read_text())["rows"]) == 4
    ran = {"model": "vgg16", "memory": "60%", "plan": "belady", "measured_s": 0.0102, "simulated_s": 0.01,
           "measured/simulated": 1.02, "graphed": 4, "host_issue_s": 0.001, "compactions": 0}
    write(out, torch.device("cpu"), link, [ran, *errors], ranks, [], None, args)   # failed rows beside one that ran
    assert ("zero compactions on 1 of 1 rows that ran (4 failed: see their error); measured within 5% of "
            "simulated on 1 of 1 rows") in out.read_text()


def test_the_link_is_fitted_from_two_copy_sizes() -> None:
    """A copy of n bytes takes latency + n / bandwidth: two sizes give both (the CUDA timing's arithmetic); a
    small copy slower than the line through them leaves no negative latency, and times that do not grow with
    size leave the large copy's rate."""
    bw, lat = fit_link(4096, 2e-6 + 4096 / 5e10, 2 ** 28, 2e-6 + 2 ** 28 / 5e10)
    assert bw == pytest.approx(5e10) and lat == pytest.approx(2e-6)
    assert fit_link(4096, 0.0, 2 ** 28, 2 ** 28 / 5e10)[1] == 0.0
    assert fit_link(4096, 1e-3, 2 ** 28, 1e-3) == (2 ** 28 / 1e-3, 0.0)


def test_the_link_off_cuda_is_timed_from_the_host_and_says_so() -> None:
    link = measure_link(torch.device("cpu"), nbytes=2 ** 20, repeat=1)
    assert link["h2d_bytes_per_s"] > 0 and link["d2h_bytes_per_s"] > 0 and link["latency_s"] >= 0
    assert link["method"] == "host wall time around synchronized copies"


def test_the_graphed_link_recovers_latency_and_rates_from_replay_times(monkeypatch) -> None:
    """`_link_graphed`'s arithmetic on replay times from a known link (a fixed launch cost per replay, 1.3 us per
    copy, 54 GB/s one way, 50 both ways at once): the CUDA timing itself needs a GPU."""
    import benchmarks.executor_gpu as eg

    lat, alone, duplex, launch = 1.3e-6, 54e9, 50e9, 8e-6

    def replay_s(dev, lanes, repeat):  # noqa: ANN001, ANN202
        rate = alone if len(lanes) == 1 else duplex
        return launch + max(sum(lat + dst.numel() / rate for dst, _ in lane) for lane in lanes)

    monkeypatch.setattr(eg, "_graphed_copies_s", replay_s)
    n = 2 ** 24
    out = eg._link_graphed(torch.device("cpu"), torch.empty(n, dtype=torch.uint8), torch.empty(n, dtype=torch.uint8),
                           4096, 1, 256)
    assert out["latency_s"] == pytest.approx(lat, rel=1e-6)
    assert out["h2d_alone_bytes_per_s"] == pytest.approx(alone) and out["d2h_alone_bytes_per_s"] == pytest.approx(alone)
    assert out["h2d_bytes_per_s"] == pytest.approx(duplex) and out["d2h_bytes_per_s"] == pytest.approx(duplex)
