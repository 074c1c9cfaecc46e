"""Cuts where one tensor alone crosses, on a captured inference graph."""
from __future__ import annotations

import pytest

from hybrid.graph.order import program_order
from hybrid.placement.partition import cuts, key_cuts, parts

torch = pytest.importorskip("torch")


def test_alexnet_cuts_and_parts():
    from hybrid.capture.api import capture_model

    g = capture_model("alexnet", 1, optimizer="none", overrides={"image_size": 64, "num_classes": 10})
    order = program_order(g)
    every = cuts(g, order)
    key = key_cuts(g, order)
    assert key and set(key) <= set(every)
    # at each cut exactly that tensor is written before and read after
    pos = {int(o): i for i, o in enumerate(order)}
    for k, t in every:
        tid = g.tensors[t].id
        assert any(pos[g.op_index[o.id]] < k and tid in o.outputs for o in g.ops)
        assert any(pos[g.op_index[o.id]] >= k and tid in o.inputs for o in g.ops)
    ps = parts(g, key, order)
    assert [o for p in ps for o in p.ops] == [int(o) for o in order]
    assert len(ps) == len(key) + 1
    assert all(p.gpu_s > 0 and p.cpu_s > 0 for p in ps)
    assert all(p.out_bytes > 0 for p in ps[:-1]) and ps[-1].out_bytes == 0
    assert sum(p.param_bytes for p in ps) > 0
