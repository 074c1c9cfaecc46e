"""Static planning of a graph (`schedule_buffers`): MegEngine's in-place overwrite saves memory where an
elementwise op reads its input last, never where it must not, and the per-tensor view stays valid."""
from __future__ import annotations

import numpy as np
import pytest

from hybrid.arena import exact
from hybrid.arena.heuristics import megengine
from hybrid.arena.lifetimes import schedule_buffers
from hybrid.arena.validate import check_offsets
from hybrid.graph import Graph
from hybrid.graph.types import Op, Tensor
from tests.cli.helpers import RESNET, run

MB = 1 << 20


def _chain(kind: str = "relu", view: bool = False, keep_x: bool = False) -> Graph:
    """inp -> convolution -> x -> kind -> a -> relu -> b -> mean -> m (every activation 1 MiB, m 4 bytes); `keep_x` adds a later
    reader of x, `view` has the first op read x through a transpose."""
    ts = [Tensor("inp", 4, "input", persistent=True), Tensor("x", MB), Tensor("a", MB), Tensor("b", MB), Tensor("m", 4), Tensor("y", 4)]
    arg: dict = {"t": "x"}
    if view:
        arg["view"] = [{"op": "aten.t.default"}]
    ops = [Op("op0", "convolution", ("inp",), ("x",), 1e-3),
           Op("op1", kind, ("x",), ("a",), 1e-3, extra={"aten": {"target": f"aten.{kind}.default", "args": [arg]}}),
           Op("op2", "relu", ("a",), ("b",), 1e-3),
           Op("op3", "mean", ("b",) + (("x",) if keep_x else ()), ("m",), 1e-3),
           Op("op4", "relu", ("m",), ("y",), 1e-3)]
    return Graph("chain", ts, ops)


def _solve(sb):  # noqa: ANN001, ANN202
    sol = exact.solve(sb.problem, 5.0)
    return sol, sb.tensor_offsets(sol.offsets)


def test_overwrite_provably_saves_memory_on_a_chain():
    g = _chain()
    plain, over = schedule_buffers(g, align=1), schedule_buffers(g, align=1, overwrite=True)
    # without overwrite x and a are live together (2 MiB); with it a takes x's bytes, b takes a's
    assert plain.problem.peak_live() == 2 * MB + 4
    assert [(i, o) for _, i, o in over.overwrites] == [("x", "a"), ("a", "b"), ("m", "y")]
    sol, offs = _solve(over)
    assert sol.arena_bytes == MB + 8 and sol.proven_optimal    # + inp and m
    assert offs[1] == offs[2] == offs[3]            # the chain shares one chunk
    assert check_offsets(over.tensors, offs).valid
    assert _solve(plain)[0].arena_bytes == 2 * MB + 4


@pytest.mark.parametrize("case", ["conv", "view", "later reader"])
def test_no_overwrite_where_it_would_be_wrong(case):
    g = _chain(kind="convolution") if case == "conv" else _chain(view=True) if case == "view" else _chain(keep_x=True)
    sb = schedule_buffers(g, align=1, overwrite=True)
    assert "x" not in [i for _, i, _ in sb.overwrites]
    assert sb.problem.peak_live() >= 2 * MB + 4


def test_validator_view_rejects_a_shared_chunk_without_overwrite():
    """The per-tensor view is what is checked: the same offsets are invalid when the pair is not an
    overwrite (x and a then live at one instant)."""
    over = schedule_buffers(_chain(), align=1, overwrite=True)
    _, offs = _solve(over)
    plain = schedule_buffers(_chain(), align=1)
    assert not check_offsets(plain.tensors, offs).valid


def test_captured_graph_overwrites_validate_and_do_not_grow_the_arena():
    g = Graph.load(RESNET)
    plain, over = schedule_buffers(g), schedule_buffers(g, overwrite=True)
    assert len(over.overwrites) > 10
    kinds = {g.ops[g.op_index[op]].kind for op, _, _ in over.overwrites}
    assert kinds <= {"relu", "add", "threshold_backward", "div"}
    assert over.problem.peak_live() <= plain.problem.peak_live()
    for sb in (plain, over):
        sol = megengine(sb.problem)
        assert check_offsets(sb.tensors, sb.tensor_offsets(sol.offsets)).valid
    # MegEngine: at most one overwriter per chunk, an output overwrites at most one input
    ins = [i for _, i, _ in over.overwrites]
    outs = [o for _, _, o in over.overwrites]
    assert len(set(ins)) == len(ins) and len(set(outs)) == len(outs)
    assert np.unique(over.chain_of).size == len(over.problem)


def test_cli_graph_overwrite_flag(tmp_path):
    out = tmp_path / "o.csv"
    r = run("arena", "--graph", RESNET, "--time-limit", "2s", "--overwrite", "--out", out)
    assert r.exit_code == 0, r.output
    assert "in-place overwrites" in r.output and out.exists()
    r2 = run("arena", "--graph", RESNET, "--time-limit", "2s", "--no-overwrite")
    assert r2.exit_code == 0 and "in-place overwrites" not in r2.output
