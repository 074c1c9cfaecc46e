"""benchmarks/executor_gpu.py's tables: rows of one card only (a run on another card does not merge into them)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from benchmarks.executor_gpu import device_label, load_previous, ranking_kept  # noqa: E402

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
