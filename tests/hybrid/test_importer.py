"""Checkmate/Moccasin node-link graphs → hybrid-graph/1."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybrid.errors import FormatError
from hybrid.graph import Graph
from hybrid.graph.importers.checkmate import load_checkmate

SHARED = Path(__file__).resolve().parents[3] / "shared" / "benchmarks" / "checkmate-graphs"


def _write(tmp_path: Path, d: dict) -> Path:
    p = tmp_path / "g.json"
    p.write_text(json.dumps(d))
    return p


def test_checkmate_style_nodes_and_links(tmp_path):
    d = {"directed": True, "multigraph": False, "graph": {"name": "tiny_train"},
         "nodes": [{"id": 0, "name": "conv", "backward": False, "cost_cpu": 10, "cost_ram": 100},
                   {"id": 1, "name": "loss", "backward": True, "cost_cpu": 2, "cost_ram": 4},
                   {"id": 2, "name": "conv_backward", "backward": True, "cost_cpu": 20, "cost_ram": 100}],
         "links": [{"source": 0, "target": 1}, {"source": 1, "target": 2}, {"source": 0, "target": 2}]}
    g = load_checkmate(_write(tmp_path, d), time_unit="ms")
    assert [o.id for o in g.ops] == ["conv", "loss", "conv_backward"]
    assert g.op("conv_backward").inputs == ("loss", "conv")
    assert g.op("conv").time_s == pytest.approx(0.010)
    assert g.tensor("loss").kind == "gradient" and g.tensor("conv").kind == "activation"
    scaled = load_checkmate(_write(tmp_path, d), scale_to="3.2s")
    assert sum(o.time_s for o in scaled.ops) == pytest.approx(3.2)


def test_random_layered_style_with_order_params_and_numeric_keys(tmp_path):
    d = {"graph": {"name": "rl", "order": [1, 0]},
         "nodes": [{"name": 0, "duration": 3, "out_cost": 8, "param_cost": 0},
                   {"name": 1, "duration": 0, "out_cost": 16, "param_cost": 32}],
         "links": [{"0": 1, "1": 0}]}
    g = load_checkmate(_write(tmp_path, d), time_unit="us")
    assert [o.id for o in g.ops] == ["1", "0"]
    assert g.op("0").inputs == ("1",)
    assert g.tensor("1.param").persistent and g.op("1").inputs == ("1.param",)


def test_bad_files_give_one_line_errors(tmp_path):
    with pytest.raises(FormatError, match="not a networkx node-link"):
        load_checkmate(_write(tmp_path, {"nodes": []}))
    d = {"nodes": [{"id": 0, "cost_cpu": 1, "cost_ram": 1}], "links": [{"source": 0, "target": 7}]}
    with pytest.raises(FormatError, match="unknown node"):
        load_checkmate(_write(tmp_path, d))
    with pytest.raises(FormatError, match="--time-unit"):
        load_checkmate(_write(tmp_path, {"nodes": [], "links": []}), time_unit="fortnights")


@pytest.mark.skipif(not SHARED.exists(), reason="shared benchmark data not present")
def test_real_training_graphs_import_and_round_trip(tmp_path):
    for path in sorted(SHARED.glob("*_train_nx.json")):
        g = load_checkmate(path, time_unit="us")
        out = tmp_path / "g.json"
        g.save(out)
        again = Graph.load(out)
        assert len(again.ops) == len(g.ops) and again.sha256 == g.sha256
