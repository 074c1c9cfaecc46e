"""Executor memory = plan memory on the CPU: every op writes its outputs into its slots (native out=, or an
equivalent call that computes the same bits), a dispatch-mode counter finds every byte allocated outside
the pool (executor.outside), reported in `Summary`, and what an op can only compute outside the pool is its
workspace, stated in the graph (executor.ops.copy_workspaces, hybrid.capture)."""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

from executor.api import Executor  # noqa: E402
from executor.check import compare, train_eager  # noqa: E402
from executor.ops import COPY, OPTIMIZER, SLOT, compile_op, with_copy_workspaces  # noqa: E402
from executor.outside import DispatchCounter  # noqa: E402
from hybrid.capture.api import capture_model  # noqa: E402
from hybrid.plan import events as E  # noqa: E402
from hybrid.zoo import get_model  # noqa: E402

from tests.executor.cases import ITERS, SEED, ZOO, swap_plan  # noqa: E402
from tests.executor.cases import case as get_case  # noqa: E402

pytestmark = pytest.mark.torch

RNN = {"hidden": 16, "embed": 12, "seq_len": 5, "vocab": 40}


@pytest.fixture
def no_cudnn(monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA's copy fallback for convolutions, as where cuDNN is missing (the CUDA slot writer needs it)."""
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: False)


@pytest.fixture
def with_cudnn(monkeypatch: pytest.MonkeyPatch) -> None:
    """cuDNN present and enabled, as on a GPU machine: compile_op's CUDA decisions without a GPU."""
    monkeypatch.setattr(torch.backends.cudnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.backends.cudnn, "enabled", True)


def _run(graph, plan, module, args, target):  # noqa: ANN001, ANN202
    ex = Executor(graph, plan, "cpu")
    ex.load(module, args, target)
    ex.run(ITERS, seed=SEED)
    return ex


@pytest.mark.parametrize("kind", ["size_classes", "unconstrained"])
def test_an_rnn_step_allocates_nothing_outside_the_pool_and_trains_like_eager(kind: str) -> None:
    g = capture_model("rnn-2-1k", 3, optimizer="sgd", lr=0.02, optimizer_options={"momentum": 0.9}, overrides=RNN)
    g = with_copy_workspaces(g)
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
    # the first step's SGD too: the momentum buffer starts as a copy of the gradient, in its state slot
    assert all(r.ops.outside.bytes == 0 for r in ex.records)
    ref = train_eager(g, copy.deepcopy(base), args, target, spec.loss, ITERS, SEED)
    cmp = compare(ex.losses, ex.state(), ref)
    assert cmp.bitwise, (cmp.mismatched[:5], cmp.max_abs_diff)


@pytest.mark.parametrize("kind", ["unconstrained", "size_classes"])
@pytest.mark.parametrize("name", ["resnet-18", "rnn-2-1k", "squeezenet", "tinylm"])
def test_zoo_models_allocate_nothing_outside_the_pool_beyond_stated_workspaces(name: str, kind: str) -> None:
    """The zoo test models (and the user module) on the CPU: every iteration allocates 0 bytes outside the pool
    beyond the ops' stated workspaces, and trains bitwise like eager. What is allocated at all is exactly the
    copy fallback's results (batch norm's backward, layer norm: no out= path computes eager's bits), each
    within its op's stated workspace; convolutions, their backward and the optimizer steps allocate nothing."""
    case = get_case(name)
    plan = swap_plan(case.graph, kind)
    ex = _run(case.graph, plan, case.module(), case.args, case.target)
    s = ex.summary()
    assert s.outside_counted_by == "dispatch" and s.outside_beyond_workspace_bytes == 0
    assert all(r.ops.outside.counted_by == "dispatch" and r.ops.outside.beyond_workspace_bytes == 0
               for r in ex.records)
    calls = ex.runtime.ops.calls
    copies = [calls[st.ref] for st in ex.runtime.program.steps if st.kind == E.COMPUTE and calls[st.ref].mode == COPY]
    expected: dict[str, int] = {}
    for call in copies:
        assert call.op.workspace_bytes == call.copy_bytes > 0          # stated by capture
        target = call.op.extra["aten"]["target"]
        expected[target] = expected.get(target, 0) + call.copy_bytes
    assert all(r.ops.outside.by_target == expected for r in ex.records)
    assert set(expected) <= {"aten.native_batch_norm_backward.default", "aten.native_layer_norm.default",
                             "aten.native_layer_norm_backward.default"}
    if name in ("rnn-2-1k", "squeezenet"):
        assert s.outside_bytes == 0
    if name != "rnn-2-1k":
        assert s.op_modes.get(SLOT, 0) > 0
    optimizer = [o for o, c in enumerate(calls) if c.mode == OPTIMIZER]
    assert optimizer and set(ex.runtime.ops.consume_grad) == set(optimizer)
    cmp = compare(ex.losses, ex.state(), case.reference())
    assert cmp.bitwise, (cmp.mismatched[:5], cmp.max_abs_diff)


def test_capture_states_the_copy_fallbacks_results_as_the_ops_workspace() -> None:
    g = get_case("resnet-18").graph
    by_target: dict[str, set[int]] = {}
    for op in g.ops:
        t = op.extra["aten"]["target"]
        outs = sum(g.tensor(x).bytes for x in op.outputs)
        if t == "aten.native_batch_norm_backward.default":
            assert op.workspace_bytes == outs > 0
        by_target.setdefault(t, set()).add(op.workspace_bytes)
    assert by_target["aten.convolution.default"] == {0}              # Slow2d writes its slot
    assert by_target["aten.convolution_backward.default"] == {0}
    assert by_target["hybrid.sgd"] == {0}                            # the step computes in the gradient's slot
    default = [op for op in g.ops if op.impls]
    assert default and all(op.implementations[op.default_impl].workspace_bytes == op.workspace_bytes for op in default)


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


def test_the_counter_says_what_the_peaks_own_node_allocated_beyond_its_workspace() -> None:
    """The peak of the pool's level with a node's bytes outside it, and of that peak what its node allocated
    beyond its workspace: not the iteration's sum over nodes, which another node's overrun fills (the warning's
    advice follows the peak's cause)."""
    levels = iter([1000, 100, 1000])
    counter = DispatchCounter(set(), level=lambda: next(levels))
    with counter:
        counter.node("at_peak", 64)
        torch.empty(16)                           # 64 bytes, all the op's workspace: 1,064 held
        counter.node("low", 0)
        torch.empty(200, dtype=torch.uint8)       # 200 beyond its workspace, at a low level: 300 held
        counter.node("tie", 32)
        torch.empty(16)                           # 64 bytes, 32 beyond: 1,064 held too, less of it the workspace's
    s = counter.finish()
    assert s.with_pool_peak_bytes == 1064 and s.with_pool_peak_beyond_bytes == 0
    assert s.beyond_workspace_bytes == 232


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


def _eq(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


@pytest.mark.parametrize("n, c, hw, co, k, stride, pad, bias, mask", [
    (2, 3, 9, 8, 3, 1, 1, True, [False, True, True]),
    (2, 3, 32, 16, 7, 2, 3, False, [False, True, False]),
    (2, 16, 8, 16, 3, 1, 1, False, [True, True, False]),
    (2, 16, 8, 32, 1, 2, 0, False, [True, True, False]),
    (3, 8, 5, 10, 1, 1, 0, True, [True, True, True]),
    (1, 5, 7, 6, 3, 2, 1, True, [True, False, True]),
])
def test_convolution_and_its_backward_write_eagers_bits_into_their_slots(n, c, hw, co, k, stride, pad, bias,
                                                                          mask) -> None:
    gen = torch.Generator().manual_seed(n * 100 + k)
    x = torch.randn(n, c, hw, hw, generator=gen)
    w = torch.randn(co, c, k, k, generator=gen)
    b = torch.randn(co, generator=gen) if bias else None
    _writes_eagers_bits([x, w, b, [stride] * 2, [pad] * 2, [1, 1], False, [0, 0], 1], mask, gen)


def _writes_eagers_bits(conv: list, mask: list[bool], gen: torch.Generator) -> None:
    """`conv` (aten.convolution's arguments) runs as Slow2d, and the slot writers give eager's bits for it and
    for its backward under `mask`."""
    from executor.ops import _conv, _conv_backward
    from hybrid.capture.trace import portable_kernels

    aten = torch.ops.aten
    x, w, b = conv[:3]
    with portable_kernels():
        assert torch._C._select_conv_backend(x, w, b, *conv[3:], None).name == "Slow2d"
        ref = aten.convolution.default(*conv)
        out = torch.full_like(ref, 7.0)
        _conv(conv, {}, [out])
        assert _eq(out, ref)
        go = torch.randn(ref.shape, generator=gen)
        back = [go, x, w, [w.shape[0]] if b is not None else None, *conv[3:], mask]
        refs = aten.convolution_backward.default(*back)
        slots = [torch.full_like(t, 5.0) if m else None for t, m in zip((x, w, torch.empty(w.shape[0])), mask)]
        _conv_backward(back, {}, slots)
    for r, got, m in zip(refs, slots, mask):
        assert (r is None and got is None) if not m else _eq(got, r)


@pytest.mark.parametrize("stride, pad, bias, mask", [(1, 1, True, [True, True, True]),
                                                    (2, 2, False, [False, True, False]),
                                                    (1, 0, True, [True, False, True])])
def test_a_1d_convolution_writes_eagers_bits_into_its_slots(stride: int, pad: int, bias: bool, mask) -> None:
    # ATen runs a 1-d convolution as Slow2d too, on views with a unit height (view1d_as_2d): the writer does the
    # same (it called the 2-d kernel with the 3-d tensors: "2D kernel_size expected", a plain nn.Conv1d)
    gen = torch.Generator().manual_seed(stride * 10 + pad)
    x, w = torch.randn(3, 4, 17, generator=gen), torch.randn(6, 4, 5, generator=gen)
    b = torch.randn(6, generator=gen) if bias else None
    _writes_eagers_bits([x, w, b, [stride], [pad], [1], False, [0], 1], mask, gen)


def _conv_graph(n: int, c: int, groups: int, mask: list[bool] | None = None):  # noqa: ANN202
    from hybrid.graph import Graph, Op, Tensor

    def t(tid: str, shape: list[int], kind: str = "activation", persistent: bool = False) -> Tensor:
        stride, acc = [], 1
        for d in reversed(shape):
            stride.insert(0, acc)
            acc *= d
        return Tensor(tid, 4 * acc, kind, persistent, extra={"dtype": "float32", "shape": shape, "stride": stride})

    x, w, y = t("x", [n, c, 8, 8], "input", True), t("w", [c, c // groups, 3, 3], "param", True), t("y", [n, c, 8, 8])
    conv = [{"t": "x"}, {"t": "w"}, None, [1, 1], [1, 1], [1, 1], False, [0, 0], groups]
    if mask is None:
        return Graph("c", [x, w, y], [Op("conv", "convolution", ("x", "w"), ("y",), 1e-6,
                                         extra={"aten": _aten("aten.convolution.default", conv, {}, ["y"])})])
    y = t("y", [n, c, 8, 8], "input", True)                          # the output gradient, fed
    gi, gw = t("gi", [n, c, 8, 8], "gradient"), t("gw", [c, c // groups, 3, 3], "gradient")
    back = [{"t": "y"}, {"t": "x"}, {"t": "w"}, None, *conv[3:], mask]
    rets = [r if m else None for r, m in zip(["gi", "gw", None], mask)]
    outs = tuple(r for r in rets if r is not None)
    return Graph("c", [x, w, y] + [gt for gt in (gi, gw) if gt.id in outs], [Op("convb", "convolution_backward", ("y", "x", "w"), outs, 1e-6, extra={
        "aten": _aten("aten.convolution_backward.default", back, {}, rets)})])


def test_convolutions_write_their_slots_only_where_aten_runs_slow2d_on_the_cpu(no_cudnn: None) -> None:
    g = _conv_graph(2, 4, 1)
    assert compile_op(g, g.ops[0]).mode == SLOT
    assert compile_op(g, g.ops[0], torch.device("cuda")).mode == COPY          # eager runs cuDNN there
    g = _conv_graph(2, 4, 2)
    assert compile_op(g, g.ops[0]).mode == COPY                                # grouped: ATen concatenates groups
    if torch.backends.nnpack.is_available():
        g = _conv_graph(16, 4, 1)                                              # NNPACK from a batch of 16
        assert compile_op(g, g.ops[0]).mode == COPY
    g = _conv_graph(2, 4, 1, [False, True, False])
    call = compile_op(g, g.ops[0])
    assert call.mode == SLOT and call.out_ids == (None, "gw", None)


def _torch_steps(opt_cls, options: dict, p0: torch.Tensor, grads: list[torch.Tensor]):  # noqa: ANN001, ANN202
    p = torch.nn.Parameter(p0.clone())
    opt = opt_cls([p], foreach=False, **options)
    for gr in grads:
        p.grad = gr.clone()
        opt.step()
    return p.detach(), opt.state[p]


@pytest.mark.parametrize("name, options", [
    ("sgd", {"lr": 0.1, "momentum": 0.9}),
    ("sgd", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("sgd", {"lr": 0.1, "momentum": 0.5, "dampening": 0.3, "maximize": True}),
    ("sgd", {"lr": 0.1, "weight_decay": 0.1}),
    ("adam", {"lr": 0.01}),
    ("adam", {"lr": 0.01, "weight_decay": 0.05, "maximize": True}),
    ("adamw", {"lr": 0.01, "weight_decay": 0.1}),
])
@pytest.mark.parametrize("consume", [False, True])
def test_optimizer_steps_match_torch_bitwise_and_allocate_nothing_when_they_consume_the_gradient(
        name: str, options: dict, consume: bool) -> None:
    from hybrid.capture.optimizers import from_name, replay_function

    gen = torch.Generator().manual_seed(5)
    p0 = torch.randn(37, 11, generator=gen)
    grads = [torch.randn(37, 11, generator=gen) for _ in range(3)]
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name]
    ref_p, ref_state = _torch_steps(cls, options, p0, grads)

    spec = from_name(name, ["w"], options)
    keys = spec.state_keys("w")
    step_fn = replay_function(f"hybrid.{name}")
    p = p0.clone()
    state = [torch.zeros_like(p0) for _ in keys]
    for k, gr in enumerate(grads, start=1):
        g = gr.clone()
        counter = DispatchCounter({t.untyped_storage().data_ptr() for t in [p, g, *state]})
        with counter:
            step_fn(p, g, *state, step=k, work=g if consume else None, **spec.op_kwargs("w"))
        allocated = counter.finish().bytes
        needs = name != "sgd" or any(options.get(o) for o in ("weight_decay", "maximize", "nesterov"))
        assert allocated == (0 if consume or not needs else p0.numel() * 4)
    assert _eq(p, ref_p)
    for key, st in zip(keys, state):
        assert _eq(st, ref_state[key]), key


def test_a_convolution_of_a_non_contiguous_input_states_the_copy_its_slot_writer_makes() -> None:
    from executor.ops import copy_workspaces
    from hybrid.graph import Graph, Op, Tensor

    def t(tid: str, shape: list[int], kind: str, persistent: bool) -> Tensor:
        stride, acc = [], 1
        for d in reversed(shape):
            stride.insert(0, acc)
            acc *= d
        return Tensor(tid, 4 * acc, kind, persistent, extra={"dtype": "float32", "shape": shape, "stride": stride})

    half = {"t": "x", "view": [{"op": "aten.slice.Tensor", "args": [1, 0, 4]}]}    # x[:, :4]: not contiguous
    conv = [half, {"t": "w"}, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1]
    g = Graph("c", [t("x", [2, 8, 6, 6], "input", True), t("w", [5, 4, 3, 3], "param", True),
                    t("y", [2, 5, 6, 6], "activation", False)],
              [Op("conv", "convolution", ("x", "w"), ("y",), 1e-6,
                  extra={"aten": _aten("aten.convolution.default", conv, {}, ["y"])})])
    call = compile_op(g, g.ops[0])
    assert call.mode == SLOT and call.scratch_bytes == 2 * 4 * 6 * 6 * 4
    assert copy_workspaces(g) == {"conv": call.scratch_bytes}
    x, w = torch.randn(2, 8, 6, 6), torch.randn(5, 4, 3, 3)
    counter = DispatchCounter({x.untyped_storage().data_ptr()})
    y = torch.empty(2, 5, 6, 6)
    counter.known.add(y.untyped_storage().data_ptr())
    with counter:
        counter.node("conv", call.scratch_bytes)
        call.slot_fn([x[:, :4], w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1], {}, [y])
    s = counter.finish()
    assert s.bytes == call.scratch_bytes and s.beyond_workspace_bytes == 0
    from hybrid.capture.trace import portable_kernels

    with portable_kernels():
        assert _eq(y, torch.ops.aten.convolution.default(x[:, :4], w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1))


def test_capture_states_no_copy_workspaces_unless_asked() -> None:
    """Off by default (the result tables' graphs stay as they were); `executor.ops.with_copy_workspaces` or
    `hybrid capture --executor-workspaces` states them."""
    batch, ov, opt, options = ZOO["resnet-18"]
    plain = capture_model("resnet-18", batch, optimizer=opt, lr=0.02, optimizer_options=options, overrides=ov)
    stated = get_case("resnet-18").graph
    assert all(op.workspace_bytes == 0 for op in plain.ops)
    assert any(op.workspace_bytes > 0 for op in stated.ops)
    assert [op.id for op in plain.ops] == [op.id for op in stated.ops]


def test_on_cuda_convolutions_state_their_results_and_a_profile_states_kernel_scratch(no_cudnn: None) -> None:
    """Without cuDNN the executor runs a CUDA convolution through the copy fallback, so its results are its
    workspace there; a cuda profile's measured peak (`cost.device_peak_bytes`) adds the
    kernels' scratch: the whole peak for a copy-fallback op, the peak less its results for one writing its slots."""
    import dataclasses

    from executor.ops import OUT, copy_workspaces
    from hybrid.capture.profile import ALLOCATOR_ROUNDING_BYTES

    batch, ov, opt, options = ZOO["resnet-18"]
    g = capture_model("resnet-18", batch, optimizer=opt, lr=0.02, optimizer_options=options, overrides=ov)
    cpu, cuda = copy_workspaces(g), copy_workspaces(g, "cuda")
    convs = [op for op in g.ops if op.extra["aten"]["target"] == "aten.convolution.default"]
    assert convs and all(op.id not in cpu for op in convs)
    cuda_dev = torch.device("cuda")
    for op in convs:
        assert compile_op(g, op, cuda_dev).mode == COPY
        assert cuda[op.id] == sum(g.tensor(t).bytes for t in op.outputs)
    out_op = next(op for op in g.ops if compile_op(g, op, cuda_dev).mode == OUT and op.id not in cuda)
    results = sum(g.tensor(t).bytes for t in dict.fromkeys(out_op.outputs))
    scratch = ALLOCATOR_ROUNDING_BYTES + 512           # more than the allocator's rounding explains
    measured = {convs[0].id: cuda[convs[0].id] + 4096, out_op.id: results + scratch}
    ops = [dataclasses.replace(op, extra={**op.extra, "cost": {**op.extra.get("cost", {}),
                                                                "device_peak_bytes": measured[op.id]}})
           if op.id in measured else op for op in g.ops]
    g2 = type(g)(g.name, list(g.tensors), ops, g.device, g.extra)
    got = copy_workspaces(g2, "cuda")
    assert got[convs[0].id] == measured[convs[0].id] and got[out_op.id] == scratch
    assert copy_workspaces(g2) == cpu                  # the CPU executor ignores a GPU's measurement
    stated = with_copy_workspaces(g2, "cuda")
    assert stated.op(out_op.id).workspace_bytes == scratch
    assert max(op.workspace_bytes for op in stated.ops) == max(got.values())


def test_a_measured_excess_the_allocators_rounding_explains_is_no_scratch(no_cudnn: None) -> None:
    """CUDA's allocator counts rounded blocks (512 B steps, a cached block up to about 1 MiB larger handed out
    whole): an op writing its slots whose measured peak exceeds its results by at most ALLOCATOR_ROUNDING_BYTES
    states no scratch; by more, the whole excess. A copy-fallback op keeps its peak: its results are allocated."""
    import dataclasses

    from executor.ops import OUT, copy_workspaces
    from hybrid.capture.profile import ALLOCATOR_ROUNDING_BYTES

    batch, ov, opt, options = ZOO["resnet-18"]
    g = capture_model("resnet-18", batch, optimizer=opt, lr=0.02, optimizer_options=options, overrides=ov)
    cuda_dev = torch.device("cuda")
    cuda = copy_workspaces(g, "cuda")
    outs = [op for op in g.ops if compile_op(g, op, cuda_dev).mode == OUT and op.id not in cuda][:3]
    conv = next(op for op in g.ops if compile_op(g, op, cuda_dev).mode == COPY)
    results = {op.id: sum(g.tensor(t).bytes for t in dict.fromkeys(op.outputs)) for op in [*outs, conv]}
    excess = {outs[0].id: 512, outs[1].id: ALLOCATOR_ROUNDING_BYTES, outs[2].id: ALLOCATOR_ROUNDING_BYTES + 512,
              conv.id: 512}
    ops = [dataclasses.replace(op, extra={**op.extra, "cost": {**op.extra.get("cost", {}),
                                                                "device_peak_bytes": results[op.id] + excess[op.id]}})
           if op.id in excess else op for op in g.ops]
    got = copy_workspaces(type(g)(g.name, list(g.tensors), ops, g.device, g.extra), "cuda")
    assert outs[0].id not in got and outs[1].id not in got
    assert got[outs[2].id] == ALLOCATOR_ROUNDING_BYTES + 512
    assert got[conv.id] == results[conv.id] + 512


def test_on_cuda_a_measured_copy_of_a_copy_fallback_ops_results_is_added_to_its_time(no_cudnn: None) -> None:
    import dataclasses

    from executor.ops import OUT, with_copy_costs

    batch, ov, opt, options = ZOO["resnet-18"]
    g = capture_model("resnet-18", batch, optimizer=opt, lr=0.02, optimizer_options=options, overrides=ov)
    cuda = torch.device("cuda")
    conv = next(op for op in g.ops if op.extra["aten"]["target"] == "aten.convolution.default")
    out_op = next(op for op in g.ops if compile_op(g, op, cuda).mode == OUT)
    ops = [dataclasses.replace(op, extra={**op.extra, "cost": {**op.extra.get("cost", {}),
                                                                "device_copy_time_s": 1e-3}})
           if op.id in (conv.id, out_op.id) else op for op in g.ops]
    g2 = type(g)(g.name, list(g.tensors), ops, g.device, g.extra)
    on_gpu, on_cpu = with_copy_costs(g2, "cuda"), with_copy_costs(g2)
    assert on_gpu.op(conv.id).time_s == pytest.approx(conv.time_s + 1e-3)      # copied into its slot there
    assert on_gpu.op(conv.id).extra["cost"]["copy_time_added_s"] == 1e-3
    assert on_gpu.op(out_op.id).time_s == out_op.time_s                        # writes its slot: no copy
    assert on_cpu.op(conv.id).time_s == conv.time_s                            # the CPU writes its slots
    assert on_gpu.op(conv.id).workspace_bytes == sum(g.tensor(t).bytes for t in conv.outputs)


def test_with_cudnn_a_cuda_convolution_writes_its_slot_through_cudnn_convolution_out(
        with_cudnn: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """On CUDA a 2-d convolution of one group, not transposed, writes its slot through `cudnn_convolution.out`
    (ATen's own out= kernel: what `_convolution` computes with cuDNN) and adds its bias in place; others stay
    with the copy fallback. Without a GPU, the cuDNN call is stood in for by the same convolution without bias
    (the bits on a GPU are checked there: tests/executor/test_cuda.py)."""
    from unittest import mock

    from executor.ops import CONV_SLOTS_ENV, copy_workspaces

    cuda = torch.device("cuda")
    g = _conv_graph(2, 4, 1)
    assert compile_op(g, g.ops[0], cuda).mode == SLOT
    assert compile_op(g, g.ops[0]).mode == SLOT                           # the CPU's Slow2d writer, as before
    assert compile_op(*(lambda h: (h, h.ops[0]))(_conv_graph(2, 4, 2)), cuda).mode == COPY   # two groups
    assert "conv" not in copy_workspaces(g, "cuda")                       # nothing allocated outside the pool
    monkeypatch.setenv(CONV_SLOTS_ENV, "0")                               # as gpu_session.sh sets it after a
    assert compile_op(g, g.ops[0], cuda).mode == COPY                     # failed preflight
    monkeypatch.delenv(CONV_SLOTS_ENV)
    calls: list[tuple] = []

    def cudnn_out(x, w, padding, stride, dilation, groups, benchmark, deterministic, tf32, out):  # noqa: ANN001
        calls.append((padding, stride, dilation, groups, benchmark, deterministic, tf32, out.data_ptr()))
        return out.copy_(torch.ops.aten.convolution.default(x, w, None, stride, padding, dilation, False, [0, 0],
                                                            groups))

    class Backend:
        name = "Cudnn"

    gen = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(2, 3, 9, 9, generator=gen), torch.randn(5, 3, 3, 3, generator=gen), torch.randn(5)
    conv = [x, w, b, [2, 2], [1, 1], [1, 1], False, [0, 0], 1]
    ref = torch.ops.aten.convolution.default(*conv)
    call = compile_op(g, g.ops[0], cuda)
    monkeypatch.setattr(torch._C, "_select_conv_backend", lambda *a: Backend())
    monkeypatch.setattr(torch._C, "_conv_determine_backend_memory_format", lambda x, w, backend:
                        torch.contiguous_format, raising=False)
    with mock.patch("torch.ops.aten.cudnn_convolution", mock.Mock(out=cudnn_out)):
        slot = torch.full_like(ref, 7.0)
        call.slot_fn(conv, {}, [slot])
        call.slot_fn(conv, {}, [slot])
    assert torch.allclose(slot, ref, atol=1e-5)
    assert len(calls) == 2 and calls[0][:4] == ([1, 1], [2, 2], [1, 1], 1) and calls[0][-1] == slot.data_ptr()

    class Other:
        name = "CudaDepthwise2d"

    other = compile_op(g, g.ops[0], cuda)                                 # a fresh call decides afresh
    monkeypatch.setattr(torch._C, "_select_conv_backend", lambda *a: Other())
    slot = torch.full_like(ref, 7.0)
    other.slot_fn(conv, {}, [slot])                                       # another backend: the functional op
    assert torch.equal(slot, ref) and len(calls) == 2

    def no_lookup(*a):  # noqa: ANN002, ANN202 - a torch whose private backend lookup is missing or refuses
        raise RuntimeError("no such lookup")

    unknown = compile_op(g, g.ops[0], cuda)
    monkeypatch.setattr(torch._C, "_select_conv_backend", no_lookup)
    slot = torch.full_like(ref, 7.0)
    unknown.slot_fn(conv, {}, [slot])                                     # the functional op and a copy, no crash
    assert torch.equal(slot, ref) and len(calls) == 2


def test_a_cuda_convolution_whose_output_slot_has_channels_last_strides_keeps_the_copy_fallback(
        with_cudnn: None) -> None:
    """`cudnn_convolution.out` takes its memory format from its output's strides: an N x C x 1 x 1 output
    recorded with channels-last strides (contiguous by size-1 rules) would run channels-last, not eager's
    algorithm, so only a row-major slot is written in place."""
    g = _conv_graph(2, 4, 1)
    y = g.tensor("y")
    assert compile_op(g, g.ops[0], torch.device("cuda")).mode == SLOT
    y.extra["shape"], y.extra["stride"] = [2, 4, 1, 1], [4, 1, 4, 4]        # channels-last strides, 1 x 1
    assert compile_op(g, g.ops[0], torch.device("cuda")).mode == COPY
    y.extra["stride"] = [4, 1, 1, 1]                                       # row-major
    assert compile_op(g, g.ops[0], torch.device("cuda")).mode == SLOT


def test_cudnn_tf32_is_read_as_convolution_reads_it() -> None:
    """`_convolution` asks for TF32 with the conv operator's setting (torch 2.9+'s fp32-precision API: conv,
    then cuDNN's, then the global one); the legacy getter raises once conv and RNN settings differ."""
    from executor.ops import _conv_tf32, _pair

    cudnn = torch.backends.cudnn
    if not hasattr(getattr(cudnn, "conv", None), "fp32_precision"):
        pytest.skip("this torch predates the fp32-precision API")
    saved = cudnn.conv.fp32_precision
    try:
        cudnn.conv.fp32_precision = "ieee"
        assert _conv_tf32() is False               # where the legacy getter would raise
        cudnn.conv.fp32_precision = "tf32"
        assert _conv_tf32() is True
    finally:
        cudnn.conv.fp32_precision = saved
    assert _pair([2]) == [2, 2] and _pair([1, 3]) == [1, 3]


def test_losses_whose_out_overload_outgrows_its_slot_take_the_copy_fallback() -> None:
    """mse_loss.out (and four other losses') computes the unreduced loss into `out` first: a 0-d slot at the end
    of a buffer moves the buffer's storage. Each denied op still does so (the list does not outlive the cause),
    and each is run as a functional call and a copy."""
    from executor.ops import DENY_OUT, out_variant

    a, b = torch.rand(64, 16), torch.rand(64, 16)
    args = {"mse_loss": (a, b), "smooth_l1_loss": (a, b), "huber_loss": (a, b), "soft_margin_loss": (a, b.sign()),
            "binary_cross_entropy": (a, b.round())}
    assert {f"aten.{k}.default" for k in args} == set(DENY_OUT)
    for name, xs in args.items():
        fn = getattr(torch.ops.aten, name).default
        out_fn, _, why = out_variant(fn)
        assert out_fn is None and "growing it past its slot" in why
        buf = torch.zeros(4096)
        slot = torch.as_strided(buf, (), (), 4095)
        ptr = buf.untyped_storage().data_ptr()
        getattr(torch.ops.aten, name).out(*xs, out=slot)
        assert buf.untyped_storage().data_ptr() != ptr, name


EMB_MODULE = '''
import torch, torch.nn as nn, torch.nn.functional as F
class E(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.head = nn.Embedding(50, 32), nn.Linear(32, 50)
    def forward(self, idx):
        return self.head(self.emb(idx))
def make():
    g = torch.Generator().manual_seed(3)
    loss = lambda o, t: F.cross_entropy(o.reshape(-1, 50), t.reshape(-1))
    return E(), torch.randint(50, (4, 8), generator=g), torch.randint(50, (4, 8), generator=g), loss
'''


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_an_embeddings_gradient_in_any_dtype_trains_bitwise_like_eager(dtype: str, tmp_path, monkeypatch) -> None:
    """ATen's CPU embedding backward rounds bf16 and fp16 otherwise than index_add_ in that dtype: those take the
    copy fallback (a user's bf16 model differed from eager in its last bits); float32 writes its slot."""
    from click.testing import CliRunner

    from hybrid.cli.main import cli
    from hybrid.graph import Graph

    (tmp_path / "embmod.py").write_text(EMB_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    g, p = tmp_path / "g.json", tmp_path / "p.json"
    for args in (["capture", "--module", "embmod:make", "--dtype", dtype, "--optimizer", "adam", "--out", g],
                 ["simulate", "--graph", g, "--out", p],
                 ["execute", "--graph", g, "--plan", p, "--module", "embmod:make", "--device", "cpu", "--iters", "2",
                  "--check"]):
        r = CliRunner().invoke(cli, [str(a) for a in args])
        assert r.exit_code == 0, r.output
    assert "bitwise" in r.output
    graph = Graph.load(g)
    op = next(o for o in graph.ops if o.kind == "embedding_dense_backward")
    assert compile_op(graph, op).mode == (SLOT if dtype == "fp32" else COPY)
