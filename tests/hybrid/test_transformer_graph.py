"""The 10^5-op generator (hybrid.graph.synthetic.transformer_training_graph) for the scale benchmark: its op
count is predictable, it is deterministic given the seed, and it has the structure it claims."""
from __future__ import annotations

from hybrid.graph.info import unswapped_peak
from hybrid.graph.synthetic import transformer_of_size, transformer_ops, transformer_training_graph


def test_op_count_is_what_transformer_ops_says_and_of_size_reaches_it():
    for layers, pieces in [(1, 1), (2, 4), (3, 2), (5, 3)]:
        assert len(transformer_training_graph(layers, pieces).ops) == transformer_ops(layers, pieces)
    g = transformer_of_size(2_000, pieces=4)
    assert 2_000 <= len(g.ops) < 2_000 + transformer_ops(1, 4)


def test_same_seed_same_graph_other_seed_other_times():
    a, b, c = (transformer_training_graph(2, 3, seed=s) for s in (7, 7, 8))
    assert a.dumps() == b.dumps()
    assert [o.id for o in a.ops] == [o.id for o in c.ops]
    assert [o.time_s for o in a.ops] != [o.time_s for o in c.ops]


def test_pieces_attend_to_earlier_pieces_and_every_parameter_has_its_own_step():
    g = transformer_training_graph(2, pieces=3)
    attn = g.op("L1.2.attn")
    assert "L1.0.qkv" in attn.inputs and "L1.1.qkv" in attn.inputs   # causal: earlier pieces' keys and values
    params = [t.id for t in g.tensors if t.kind == "param"]
    steps = [o for o in g.ops if o.kind == "optimizer"]
    assert sorted(o.updates[0] for o in steps) == sorted(params)
    assert all(len(o.updates) in (1, 3) for o in steps)              # the parameter and its two Adam moments
    assert g.device.usable_bytes == int(unswapped_peak(g) * 0.5)     # plans must swap
