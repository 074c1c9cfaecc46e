"""Executor memory = plan memory on the CPU: every op writes its outputs into its slots (native out=, or an
equivalent call that computes the same bits), and a dispatch-mode counter finds every byte allocated outside
the pool (executor.outside), reported in `Summary`."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from executor.api import Executor  # noqa: E402
from executor.check import compare, train_eager  # noqa: E402
from executor.ops import COPY, SLOT, compile_op  # noqa: E402
from executor.outside import DispatchCounter  # noqa: E402
from hybrid.capture.api import capture_model  # noqa: E402
from hybrid.plan import events as E  # noqa: E402
from hybrid.zoo import get_model  # noqa: E402

from tests.executor.cases import ITERS, SEED, swap_plan  # noqa: E402
from tests.executor.cases import case as get_case  # noqa: E402

pytestmark = pytest.mark.torch

RNN = {"hidden": 16, "embed": 12, "seq_len": 5, "vocab": 40}


def _run(graph, plan, module, args, target):  # noqa: ANN001, ANN202
    ex = Executor(graph, plan, "cpu")
    ex.load(module, args, target)
    ex.run(ITERS, seed=SEED)
    return ex


@pytest.mark.parametrize("kind", ["size_classes", "unconstrained"])
def test_an_rnn_step_allocates_nothing_outside_the_pool_and_trains_like_eager(kind: str) -> None:
    g = capture_model("rnn-2-1k", 3, optimizer="sgd", lr=0.02, optimizer_options={"momentum": 0.9}, overrides=RNN)
    spec = get_model("rnn-2-1k", **RNN)
    torch.manual_seed(0)
    base = spec.build()
    args, target = spec.make_inputs(3, torch.device("cpu"), torch.float32)
    plan = swap_plan(g, kind)
    ex = _run(g, plan, copy.deepcopy(base), args, target)
    s = ex.summary()
    assert s.outside_counted_by == "dispatch"
    assert s.outside_bytes == 0 and s.outside_beyond_workspace_bytes == 0 and s.outside_by_target == {}
    assert s.op_modes.get(COPY, 0) == 0 and s.op_modes.get(SLOT, 0) > 0   # embedding, its backward, fills
    # only the first step's SGD allocates (torch starts its momentum buffer as a clone of the gradient)
    assert set(ex.records[0].ops.outside.by_target) == {"hybrid.sgd"}
    assert all(r.ops.outside.bytes == 0 for r in ex.records[1:])
    ref = train_eager(g, copy.deepcopy(base), args, target, spec.loss, ITERS, SEED)
    cmp = compare(ex.losses, ex.state(), ref)
    assert cmp.bitwise, (cmp.mismatched[:5], cmp.max_abs_diff)


@pytest.mark.parametrize("name", ["resnet-18", "rnn-2-1k", "squeezenet", "tinylm"])
def test_only_ops_without_an_out_path_and_torchs_adam_allocate_outside_the_pool(name: str) -> None:
    """What the counter finds is exactly the copy fallback's results (ops with no out= path that computes eager's
    bits on the CPU: mkldnn convolution and its backward, batch norm backward, layer norm), and torch's Adam's
    temporaries, which the graph does not state as the optimizer op's workspace; nothing else, in any mode."""
    case = get_case(name)
    plan = swap_plan(case.graph, "unconstrained")
    ex = _run(case.graph, plan, case.module(), case.args, case.target)
    s = ex.summary()
    program = ex.runtime.program
    expected: dict[str, int] = {}
    for st in program.steps:
        if st.kind == E.COMPUTE and ex.runtime.ops.calls[st.ref].mode == COPY:
            call = ex.runtime.ops.calls[st.ref]
            target = call.op.extra["aten"]["target"]
            expected[target] = expected.get(target, 0) + call.copy_bytes
    copies = {t: b for t, b in s.outside_by_target.items() if not t.startswith("hybrid.")}
    assert copies == expected
    assert set(copies) <= {"aten.convolution.default", "aten.convolution_backward.default",
                           "aten.native_batch_norm_backward.default", "aten.native_layer_norm.default",
                           "aten.native_layer_norm_backward.default"}
    optimizer = {t for t in s.outside_by_target if t.startswith("hybrid.")}
    assert optimizer <= {"hybrid.adam"}
    assert s.outside_bytes == sum(s.outside_by_target.values())
    assert s.outside_beyond_workspace_bytes == s.outside_bytes   # these graphs state no workspaces
    assert 0 < s.outside_peak_bytes <= s.outside_bytes


def test_the_counter_counts_fresh_storage_once_per_node_and_not_the_pool() -> None:
    pool = torch.zeros(1024, dtype=torch.uint8)
    counter = DispatchCounter({pool.untyped_storage().data_ptr()})
    with counter:
        counter.node("a", 0)
        view = pool[:64].view(torch.float32)
        view.add_(1)                              # in the pool: nothing
        fresh = torch.ones(8)                     # 32 bytes
        fresh.view(2, 4).t()                      # views of it: counted once
        counter.node("b", 16)
        torch.empty(10, dtype=torch.float64)      # 80 bytes, 16 of them the op's workspace
    s = counter.finish()
    assert s.by_target == {"a": 32, "b": 80} and s.bytes == 112
    assert s.peak_bytes == 80 and s.beyond_workspace_bytes == 32 + 64


def _aten(target: str, args: list, kwargs: dict, returns: list[str]) -> dict:
    return {"target": target, "args": args, "kwargs": kwargs, "returns": returns}


@pytest.mark.parametrize("target, args, kwargs, fn", [
    ("aten.relu.default", [{"t": "x"}], {}, lambda x, i: torch.ops.aten.relu.default(x)),
    ("aten.div.Scalar", [{"t": "x"}, 3.7], {}, lambda x, i: torch.ops.aten.div.Scalar(x, 3.7)),
    ("aten.ones_like.default", [{"t": "x"}], {}, lambda x, i: torch.ops.aten.ones_like.default(x)),
    ("aten.full_like.default", [{"t": "x"}, 2.5], {}, lambda x, i: torch.ops.aten.full_like.default(x, 2.5)),
])
def test_slot_writers_compute_eagers_bits(target, args, kwargs, fn) -> None:
    from hybrid.graph import Graph, Op, Tensor

    x = torch.randn(6, 5)
    x[0, 0], x[0, 1] = -0.0, float("nan")
    meta = {"dtype": "float32", "shape": [6, 5], "stride": [5, 1]}
    g = Graph("t", [Tensor("x", 120, "input", True, extra=dict(meta)), Tensor("y", 120, "activation", extra=dict(meta))],
              [Op("f", "f", ("x",), ("y",), 1e-6, extra={"aten": _aten(target, args, kwargs, ["y"])})])
    call = compile_op(g, g.ops[0])
    assert call.mode == SLOT
    slot = torch.full((6, 5), 99.0)
    call.slot_fn([x, *args[1:]], kwargs, [slot])
    assert torch.equal(slot.view(torch.int32), fn(x, None).view(torch.int32))   # bitwise, NaN and -0.0 too


@pytest.mark.parametrize("padding_idx", [-1, 2])
def test_embedding_and_its_backward_write_eagers_bits_into_their_slots(padding_idx: int) -> None:
    from executor.ops import _embedding, _embedding_backward

    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(7, 5, generator=gen)
    idx = torch.randint(7, (4, 6), generator=gen)
    idx[0, :3] = 2
    out = torch.empty(4, 6, 5)
    _embedding([weight, idx, padding_idx], {}, [out])
    assert torch.equal(out, torch.ops.aten.embedding.default(weight, idx, padding_idx))
    grad = torch.randn(4, 6, 5, generator=gen)
    gw = torch.full((7, 5), 5.0)
    _embedding_backward([grad, idx, 7, padding_idx, False], {}, [gw])
    ref = torch.ops.aten.embedding_dense_backward.default(grad, idx, 7, padding_idx, False)
    assert torch.equal(gw.view(torch.int32), ref.view(torch.int32))
