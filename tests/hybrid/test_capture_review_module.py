"""`hybrid capture --module`: one-line errors for a factory that fails, the factory's own dtypes kept (and run
at them by `execute`), and a warning for an inference graph of a module left in training mode."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from click.testing import CliRunner  # noqa: E402

from hybrid.capture.user_module import load_user_model  # noqa: E402
from hybrid.cli.main import cli  # noqa: E402
from hybrid.errors import HybridError  # noqa: E402
from hybrid.graph import Graph  # noqa: E402

pytestmark = pytest.mark.torch

FACTORIES = '''
import torch, torch.nn as nn, torch.nn.functional as F

def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=g), torch.randint(4, (8,), generator=g)

def make_raises():
    raise ValueError("boom in factory\\nsecond line")

def make_needs_arg(batch):
    return None

def make_three():
    x, y = _data(); return nn.Linear(16, 4), x, y

def make_double():
    x, y = _data(); return nn.Linear(16, 4).double(), x.double(), y, F.cross_entropy

def make_bf16():
    x, y = _data(); return nn.Linear(16, 4).to(torch.bfloat16), x.to(torch.bfloat16), y, F.cross_entropy

def make_dropout():
    x, y = _data(); return nn.Sequential(nn.Linear(16, 16), nn.Dropout(0.5), nn.Linear(16, 4)), x, y, F.cross_entropy

def make_dropout_eval():
    m, x, y, l = make_dropout(); return m.eval(), x, y, l
'''


@pytest.fixture
def factories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A factory file in a fresh folder, the current one; its module name is unique to the test."""
    name = f"review_factories_{abs(hash(str(tmp_path))) % 10 ** 8}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(FACTORIES))
    (tmp_path / "review_needs_pkg.py").write_text("import review_not_installed_pkg\ndef make(): pass\n")
    (tmp_path / "review_syntax.py").write_text("import torch\ndef make(:\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for mod in ("review_needs_pkg", "review_syntax"):
        monkeypatch.delitem(sys.modules, mod, raising=False)
    return name


def _error(spec: str) -> str:
    with pytest.raises(HybridError) as e:
        load_user_model(spec)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_a_failing_factory_is_one_line(factories: str) -> None:
    msg = _error(f"{factories}:make_raises")
    assert f"--module '{factories}:make_raises': the factory raised ValueError: boom in factory" in msg
    assert "second line" not in msg
    assert "must take no arguments" in _error(f"{factories}:make_needs_arg") and "'batch'" in \
        _error(f"{factories}:make_needs_arg")
    assert "returned a tuple of 3 values" in _error(f"{factories}:make_three")


def test_a_factory_files_missing_package_is_named_not_the_folder(factories: str) -> None:
    msg = _error("review_needs_pkg:make")
    assert "review_not_installed_pkg" in msg and "install" in msg and "folder" not in msg
    assert "run from the folder that holds it" in _error("review_no_such_file:make")
    assert "importing 'review_syntax' raised SyntaxError" in _error("review_syntax:make")


def _capture(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(cli, ["capture", *args])
    return r.exit_code, r.stdout, r.stderr


def test_capture_module_keeps_the_factorys_dtypes_and_execute_runs_them(factories: str) -> None:
    from executor.model import workload

    for fn, dt in (("make_double", torch.float64), ("make_bf16", torch.bfloat16)):
        code, out, err = _capture("--module", f"{factories}:{fn}", "--out", f"{fn}.json")
        assert code == 0, out + err
        g = Graph.load(f"{fn}.json")
        assert g.extra["module"]["dtype"] is None
        assert {t.extra["dtype"] for t in g.tensors if t.kind == "param"} == {str(dt).removeprefix("torch.")}
        w = workload(g, module=f"{factories}:{fn}")
        assert {p.dtype for p in w.module.parameters()} == {dt} and w.args[0].dtype == dt
    # --dtype still casts; a graph that records a cast (as every graph before recorded "fp32") runs cast
    code, out, err = _capture("--module", f"{factories}:make_double", "--dtype", "fp32", "--out", "cast.json")
    assert code == 0, out + err
    g = Graph.load("cast.json")
    assert g.extra["module"]["dtype"] == "fp32"
    assert {t.extra["dtype"] for t in g.tensors if t.kind == "param"} == {"float32"}
    w = workload(g, module=f"{factories}:make_double")
    assert {p.dtype for p in w.module.parameters()} == {torch.float32} and w.args[0].dtype == torch.float32
    # a factory that no longer builds what the graph recorded is refused, not cast
    with pytest.raises(HybridError, match="parameter 'weight' is bfloat16 but the graph recorded float64"):
        workload(Graph.load("make_double.json"), module=f"{factories}:make_bf16")


def test_zoo_models_keep_the_fp32_default() -> None:
    from hybrid.capture.api import capture_model

    g = capture_model("resnet-18", 2, overrides={"image_size": 32, "num_classes": 10})
    assert {t.extra["dtype"] for t in g.tensors if t.kind == "param"} == {"float32"}


def test_inference_of_a_training_mode_module_warns(factories: str) -> None:
    code, out, err = _capture("--module", f"{factories}:make_dropout", "--optimizer", "none", "--out", "i.json")
    assert code == 0, out + err
    warn = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warn) == 1 and "'1' (Dropout)" in warn[0] and "training mode" in warn[0] and "module.eval()" in warn[0]
    code, out, err = _capture("--module", f"{factories}:make_dropout_eval", "--optimizer", "none", "--out", "e.json")
    assert code == 0 and "warning" not in err
    code, out, err = _capture("--module", f"{factories}:make_dropout", "--out", "t.json")
    assert code == 0 and "warning" not in err                       # training graphs train in training mode
