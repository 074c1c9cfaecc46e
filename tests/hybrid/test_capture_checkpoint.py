"""Capture of checkpointed modules (torch.utils.checkpoint, reentrant or not, and selective checkpointing).

The recomputation appears in the backward, reads the traced parameters (no weights baked in as
constants) and draws the forward's dropout masks (the generator fork PyTorch does, as hybrid_rng
save/restore ops), so a plan of the graph trains bitwise like eager on the CPU; what capture cannot
represent is refused in one line.
"""
from __future__ import annotations

import copy

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

from executor.api import execute  # noqa: E402
from hybrid.capture import capture  # noqa: E402
from hybrid.graph import Graph  # noqa: E402
from tests.hybrid.test_capture import one_line_error  # noqa: E402
from hybrid.graph.rerun import why_not_rerunnable  # noqa: E402
from hybrid.swap.quick_plans import quick_plan  # noqa: E402
from hybrid.validator import validate  # noqa: E402
from tests.hybrid.checkpointed_models import BUILDERS, HOWS, MLPBlock, mlp  # noqa: E402

pytestmark = pytest.mark.torch


def build(name: str, how: str):
    torch.manual_seed(0)
    return BUILDERS[name](how)


def graph_of(name: str, how: str):
    m, args, tgt, loss = build(name, how)
    return capture(m, args, loss, tgt, optimizer="adam", lr=0.01), m, args, tgt, loss


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_checkpointed_module_trains_bitwise_like_eager(name: str, how: str) -> None:
    g, m, args, tgt, loss = graph_of(name, how)
    kinds = [o.kind for o in g.ops]
    assert kinds.count("save_state") > 0 and kinds.count("restore_state") > 0
    assert not [t.id for t in g.tensors if t.id.startswith("const:")]
    plan = quick_plan(g, 0.6, "unconstrained")     # swaps (and reruns) on top of the user's own recomputation
    assert validate(g, plan).valid
    r = execute(g, plan, copy.deepcopy(m), args, tgt, loss_fn=loss, iters=3, device="cpu", check=True, seed=7)
    assert r.comparison is not None and r.comparison.bitwise, (r.comparison.mismatched[:3], r.comparison.max_abs_diff)


def test_recomputation_reads_the_parameters_and_restores_the_forward_state() -> None:
    g, *_ = graph_of("mlp", "nonreentrant")
    w = "param:blocks.0.fc1.weight"
    readers = [o for o in g.ops if w in o.inputs and o.kind == "addmm"]
    assert [o.extra["phase"] for o in readers] == ["forward", "backward"]    # the forward and its recomputation
    by_id = {o.id: o for o in g.ops}
    producer = {t: o for o in g.ops for t in o.outputs}
    restores = [o for o in g.ops if o.kind == "restore_state"]
    # Each recomputation first sets the state its forward saved, then the state it forked from.
    saved_in = [producer[o.inputs[0]].extra["phase"] for o in restores if o.inputs[0] in producer]
    assert saved_in.count("forward") == len(restores) // 2 and saved_in.count("backward") == len(restores) // 2
    assert all("rng" in o.updates for o in restores)
    save = next(o for o in g.ops if o.kind == "save_state")
    assert "rng" in save.inputs and not save.updates and by_id[save.id].outputs
    assert "generator" in why_not_rerunnable(g, save)


def _bytes_of(g: Graph, kind: str) -> int:
    return sum(t.bytes for t in g.tensors if t.kind == kind)


@pytest.mark.parametrize("how", HOWS)
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_a_recomputation_makes_activations_and_the_gradients_are_the_plain_steps(name: str, how: str) -> None:
    """The region's ops run again in the backward, but what they make are the forward's activations: the graph's
    gradients are the uncheckpointed step's, byte for byte (they counted the recomputation as gradients)."""
    g, plain = graph_of(name, how)[0], graph_of(name, "none")[0]
    assert _bytes_of(g, "gradient") == _bytes_of(plain, "gradient")
    assert _bytes_of(g, "activation") > _bytes_of(plain, "activation")
    forward_kinds = {"addmm", "convolution", "gelu", "relu", "native_layer_norm"}
    recomputed = [o for o in g.ops if o.extra["phase"] == "backward" and o.kind in forward_kinds]
    assert recomputed and {g.tensor(t).kind for o in recomputed for t in o.outputs} == {"activation"}
    states = [t for o in g.ops if o.kind == "save_state" for t in o.outputs]
    assert states and {g.tensor(t).kind for t in states} == {"other"}


@pytest.mark.parametrize("how", ["nested", "sequential"])
def test_nested_and_sequential_recomputations_make_activations_too(how: str) -> None:
    """A checkpoint inside a checkpointed function (recomputed twice over: inside the outer recomputation too)
    and checkpoint_sequential: the gradients are still the plain step's."""
    from torch.utils.checkpoint import checkpoint_sequential

    class Stack(nn.Module):
        def __init__(self, wrap: bool) -> None:
            super().__init__()
            self.wrap, self.blocks = wrap, nn.Sequential(MLPBlock(8), MLPBlock(8), MLPBlock(8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not self.wrap:
                return self.blocks(x).square().mean()
            if how == "sequential":
                return checkpoint_sequential(self.blocks, 2, x, use_reentrant=False).square().mean()

            def outer(h: torch.Tensor) -> torch.Tensor:   # reentrant on an input that requires grad (else no grads)
                h = checkpoint(self.blocks[1], self.blocks[0](h), use_reentrant=True)
                return checkpoint(self.blocks[2], h, use_reentrant=False)
            return checkpoint(outer, x, use_reentrant=False).square().mean()

    x = (torch.randn(4, 8),)
    torch.manual_seed(0)
    g = capture(Stack(True), x, optimizer="sgd", lr=0.1)
    torch.manual_seed(0)
    plain = capture(Stack(False), x, optimizer="sgd", lr=0.1)
    assert _bytes_of(g, "gradient") == _bytes_of(plain, "gradient")
    assert _bytes_of(g, "activation") > _bytes_of(plain, "activation")


def test_selective_checkpointing_recomputes_only_what_the_policy_drops() -> None:
    counts = {how: sum(o.kind == "addmm" for o in graph_of("mlp", how)[0].ops) for how in ("none", "nonreentrant",
                                                                                        "selective")}
    assert counts["selective"] == counts["none"] < counts["nonreentrant"]


def test_regions_without_random_ops_fork_nothing() -> None:
    class Plain(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem, self.block = nn.Linear(6, 8), nn.Sequential(nn.Linear(8, 8), nn.Tanh())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return checkpoint(self.block, self.stem(x), use_reentrant=False).sum()

    g = capture(Plain(), (torch.randn(4, 6),), optimizer="sgd")
    assert not [o for o in g.ops if o.kind in ("save_state", "restore_state")]
    assert "rng" not in {t.id for t in g.tensors}
    assert sum(o.kind == "addmm" for o in g.ops) == 3    # stem, block, the block's recomputation


def test_preserve_rng_state_false_redraws_as_eager_does() -> None:
    class Redraw(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem, self.block = nn.Linear(6, 8), MLPBlock(8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return checkpoint(self.block, self.stem(x), use_reentrant=False, preserve_rng_state=False).square().mean()

    torch.manual_seed(0)
    m, x = Redraw(), (torch.randn(4, 6),)
    g = capture(m, x, optimizer="sgd", lr=0.1)
    assert not [o for o in g.ops if o.kind in ("save_state", "restore_state")]
    assert sum(o.kind == "bernoulli_" for o in g.ops) == 4
    plan = quick_plan(g, 1.0, "unconstrained")
    r = execute(g, plan, copy.deepcopy(m), x, None, iters=3, device="cpu", check=True, seed=3)
    assert r.comparison is not None and r.comparison.bitwise


def test_save_on_cpu_is_refused_naming_it() -> None:
    class Offload(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = mlp("nonreentrant")[0]

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            with torch.autograd.graph.save_on_cpu():
                return self.inner(x)

    m, args, tgt, loss = mlp("none")
    msg = one_line_error(capture, Offload(), args, loss, tgt, optimizer="sgd")
    assert "save_on_cpu" in msg and "saved-tensor hooks" in msg


def test_reseeding_inside_the_step_is_refused() -> None:
    class Reseed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.manual_seed(1)
            return F.dropout(self.fc(x)).sum()

    msg = one_line_error(capture, Reseed(), (torch.randn(2, 4),), optimizer="sgd")
    assert "torch.manual_seed" in msg
    torch.manual_seed(0)
    assert torch.rand(1).item() == pytest.approx(0.4962566)    # the real generator was left alone


def test_capture_leaves_the_module_and_the_generator_as_they_were() -> None:
    m, args, tgt, loss = build("transformer", "reentrant")
    before = {n: (p, p.detach().clone()) for n, p in m.named_parameters()}
    torch.manual_seed(5)
    state = torch.get_rng_state()
    capture(m, args, loss, tgt, optimizer="sgd")
    assert torch.equal(torch.get_rng_state(), state)
    for n, p in m.named_parameters():
        assert p is before[n][0] and torch.equal(p, before[n][1]) and p.grad is None
    assert torch.get_rng_state is torch.random.get_rng_state and "hybrid" not in torch.get_rng_state.__module__


def test_selective_checkpointing_captures_alike_without_the_non_strict_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """PyTorch before 2.13 (the GPU machine's 2.11) has no `torch.compiler._non_strict_tracing_context`, and its
    checkpoint's `_is_compiling` is True under any proxy mode (make_fx's): capture must trace eager semantics
    there too, the same graph as with the flag."""
    import torch.utils.checkpoint as ckpt

    with_flag, m, args, tgt, loss = graph_of("mlp", "selective")

    def is_compiling_2_11(func: object, args: object, kwargs: object) -> bool:
        return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.PROXY) is not None

    if hasattr(torch.compiler, "_non_strict_tracing_context"):
        monkeypatch.delattr(torch.compiler, "_non_strict_tracing_context")
    monkeypatch.setattr(ckpt, "_is_compiling", is_compiling_2_11)
    without, m, args, tgt, loss = graph_of("mlp", "selective")
    assert ckpt._is_compiling is is_compiling_2_11                 # put back after the capture
    assert [o.kind for o in without.ops] == [o.kind for o in with_flag.ops]
    assert without.dumps() == with_flag.dumps()
    plan = quick_plan(without, 0.6, "unconstrained")
    r = execute(without, plan, copy.deepcopy(m), args, tgt, loss_fn=loss, iters=3, device="cpu", check=True, seed=7)
    assert r.comparison is not None and r.comparison.bitwise


class _ReentrantOnRawInput(nn.Module):
    """A reentrant checkpoint on the raw input, which needs no gradient: eager warns and the block's parameters
    get none. Capture traced it faithfully but said nothing (its UserWarnings were all silenced)."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6))
        self.head = nn.Linear(6, 3)

    def forward(self, x):  # noqa: ANN001, ANN201
        return self.head(checkpoint(self.block, x, use_reentrant=True))


def test_parameters_that_get_no_gradient_are_warned_about_in_python_and_on_the_command_line() -> None:
    from hybrid.capture.api import CaptureWarning
    from hybrid.cli.main import _warning_lines

    torch.manual_seed(0)
    m = _ReentrantOnRawInput()
    x, y = torch.randn(4, 6), torch.randint(3, (4,))
    with pytest.warns(CaptureWarning, match=r"^4 trainable parameters get no gradient from the loss \(block\.0\.weight, "
                                            r"block\.0\.bias, block\.2\.weight, block\.2\.bias\): .*use_reentrant=False"):
        capture(m, (x,), F.cross_entropy, y, optimizer="sgd", lr=0.1)
    # the command prints the library's own warnings as its own one-line `warning: ...`
    import io
    import contextlib

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        _warning_lines(None)(CaptureWarning("4 trainable parameters get no gradient"), CaptureWarning, "x.py", 1)
    assert err.getvalue() == "warning: 4 trainable parameters get no gradient\n"
