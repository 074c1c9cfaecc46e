"""`hybrid execute`: a zoo model's graph file and plan in, measurements and the eager check out."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from hybrid.cli.main import cli  # noqa: E402

from tests.executor.cases import ZOO, swap_plan, zoo_case  # noqa: E402

pytestmark = pytest.mark.torch

MODEL = "rnn-2-1k"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("exec")
    case = zoo_case(MODEL)
    g, p = d / "g.json", d / "p.json"
    case.graph.save(g)
    swap_plan(case.graph, "size_classes").save(p)
    return g, p


def _capture_flags() -> list[str]:
    batch, ov, opt, options = ZOO[MODEL]
    flags = ["--model", MODEL, "--batch", str(batch), "--optimizer", opt, "--lr", "0.02"]
    flags += ["--weight-decay", str(options["weight_decay"])]
    for k, v in ov.items():
        flags += ["--set", f"{k}={v}"]
    return flags


def test_execute_checks_against_eager_and_writes_results(files: tuple[Path, Path], tmp_path: Path) -> None:
    g, p = files
    out, prof = tmp_path / "r.json", tmp_path / "prof.json"
    res = CliRunner().invoke(cli, ["execute", "--graph", str(g), "--plan", str(p), "--iters", "3", "--device", "cpu",
                                   "--check", "--sanitize", "--out", str(out), "--profile-out", str(prof)])
    assert res.exit_code == 0, res.output
    assert "equal eager training bitwise" in res.output
    assert "stall" in res.output and "pool peak" in res.output
    doc = json.loads(out.read_text())
    assert doc["check"]["bitwise"] and len(doc["losses"]) == 3 and len(doc["iterations"]) == 3
    assert doc["summary"]["memory"]["pool"]["peak_live_bytes"] <= doc["summary"]["memory"]["plan_memory_bytes"]
    assert doc["summary"]["memory"]["plan_usable_bytes"] <= doc["summary"]["memory"]["plan_memory_bytes"]
    assert json.loads(prof.read_text())["format"] == "hybrid-profile/1"
    # what was allocated outside the pool: counted, printed, and here only the optimizer's (torch Adam's temporaries)
    assert "outside the pool:" in res.output and doc["summary"]["outside_counted_by"] == "dispatch"
    assert all(t.startswith("hybrid.") for t in doc["summary"]["outside_by_target"])


def test_execute_captures_the_model_itself(files: tuple[Path, Path]) -> None:
    _, p = files
    res = CliRunner().invoke(cli, ["execute", *_capture_flags(), "--plan", str(p), "--iters", "2", "--device", "cpu"])
    assert res.exit_code == 0, res.output
    assert "2 iterations" in res.output


def test_execute_exits_1_on_a_mismatch(files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    import executor.check as check

    real = check.torch_optimizer

    def other_lr(graph, module):  # noqa: ANN001, ANN202 - the eager reference trains with another learning rate
        opt = real(graph, module)
        for grp in opt.param_groups:
            grp["lr"] *= 2
        return opt

    monkeypatch.setattr(check, "torch_optimizer", other_lr)
    g, p = files
    res = CliRunner().invoke(cli, ["execute", "--graph", str(g), "--plan", str(p), "--iters", "2", "--device", "cpu",
                                   "--check"])
    assert res.exit_code == 1, res.output
    assert "MISMATCH" in res.output and "largest difference" in res.output


def test_execute_errors_are_one_line(files: tuple[Path, Path]) -> None:
    g, p = files
    res = CliRunner().invoke(cli, ["execute", "--graph", str(g), "--plan", str(p), "--iters", "0"])
    assert res.exit_code == 2 and res.output.startswith("error: --iters")
    res = CliRunner().invoke(cli, ["execute", "--graph", str(g), "--plan", str(p), "--device", "tpu"])
    assert res.exit_code == 2 and "cpu or cuda" in res.output
    res = CliRunner().invoke(cli, ["execute", "--model", "resnet-18", "--graph", str(g), "--plan", str(p)])
    assert res.exit_code == 2 and "captured from" in res.output
    res = CliRunner().invoke(cli, ["execute", "--plan", str(p)])
    assert res.exit_code == 2 and "--model" in res.output
    res = CliRunner().invoke(cli, ["execute", "--graph", str(g), "--plan", str(p), "--device", "cpu", "--cuda-graph"])
    assert res.exit_code == 2 and res.output.startswith("error: --cuda-graph needs --device cuda")


def test_a_cuda_run_over_its_plans_memory_gets_one_line_saying_what_to_do() -> None:
    from executor.api import peak_warning

    mib = 1 << 20
    mem = {"cuda_own_peak_bytes": 1233 * mib, "cuda_kernel_state_bytes": 33 * mib}
    line = peak_warning(mem, 1024 * mib)
    assert line is not None and "over the plan's" in line and "--reserve" in line and "--executor-workspaces" in line
    assert peak_warning(mem, 1233 * mib) is None                      # within the plan's memory
    assert peak_warning({"plan_memory_bytes": 1}, 1) is None           # the CPU: no allocator figures
