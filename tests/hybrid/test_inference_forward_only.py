"""An inference graph is the forward alone: no label to upload, no loss to compute, the model's outputs bound
(zoo models and a user's module alike), and its placements still run like eager inference."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

FACTORY = '''
import torch, torch.nn as nn, torch.nn.functional as F

def make():
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 4))
    gen = torch.Generator().manual_seed(5)
    return model, torch.randn(16, 20, generator=gen), torch.randint(4, (16,), generator=gen), F.cross_entropy
'''


def _forward_only(g) -> None:   # noqa: ANN001
    b = g.extra["bindings"] if hasattr(g, "extra") else g["bindings"]
    assert b["targets"] == [] and b.get("loss") is None and not b.get("optimizer")
    assert b["outputs"], "the model's outputs are the graph's"


def test_zoo_inference_graph_binds_no_label_and_no_loss_and_places_like_eager() -> None:
    import torch

    from executor import execute_placement
    from executor.model import workload
    from hybrid.capture.api import capture_model
    from hybrid.placement.partition import part_graph
    from hybrid.placement.schedulers import place
    from hybrid.placement.timing import link_of, to_plan

    g = capture_model("resnet-18", 1, overrides={"image_size": 32}, optimizer=None)
    _forward_only(g)
    assert [t.id for t in g.tensors if t.kind == "input"] == ["input:0"]          # the image; no label
    assert not any("loss" in str(o.extra.get("aten", {}).get("target", "")) for o in g.ops)
    w = workload(g, seed=0)
    assert w.target is None and w.loss_fn is None
    pg = part_graph(g, key_only=False)
    plan = to_plan(pg, place(pg, link_of(g.device), "greedy"), g.device)
    run = execute_placement(g, plan, w.module, w.args, w.target, iters=1, device="cpu", check=True)
    assert run.check is not None and run.check.bitwise
    w.module.eval()
    with torch.no_grad():
        assert w.module(*w.args).shape == (1, 1000)


def test_a_users_module_captured_for_inference_is_its_forward_alone(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(textwrap.dedent(FACTORY))
    r = subprocess.run([sys.executable, "-m", "hybrid.cli.main", "capture", "--module", "mine:make",
                        "--optimizer", "none", "--out", "g.json"], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    g = json.loads((tmp_path / "g.json").read_text())
    _forward_only(g)
    assert [t["id"] for t in g["tensors"] if t["kind"] == "input"] == ["input:0"]
