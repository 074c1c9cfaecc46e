"""capture() refuses in one line what it cannot capture faithfully (hooks on parameters, mixed float dtypes,
sparse gradients, private generators, cumulative batch norm) and keeps what it can (hooks elsewhere, autocast)."""
from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from hybrid.capture import capture  # noqa: E402
from hybrid.errors import HybridError  # noqa: E402

pytestmark = pytest.mark.torch


def _data(d: int = 16, c: int = 4, n: int = 8) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, d, generator=g), torch.randint(c, (n,), generator=g)


def _mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))


def _refused(module: nn.Module, *fragments: str, args: Any = None, **kw: Any) -> str:
    x, y = _data()
    with pytest.raises(HybridError) as e:
        capture(module, (x,) if args is None else args, F.cross_entropy, y, **kw)
    msg = str(e.value)
    assert "\n" not in msg
    for f in fragments:
        assert f in msg, msg
    return msg


@pytest.mark.parametrize("register,kind", [
    (lambda p: p.register_hook(lambda g: g.clamp(-1e-3, 1e-3)), "register_hook"),
    (lambda p: p.register_post_accumulate_grad_hook(lambda p: None), "register_post_accumulate_grad_hook"),
])
def test_gradient_hooks_on_parameters_are_refused_by_name(register: Any, kind: str) -> None:
    m = _mlp()
    register(m[0].weight)
    _refused(m, "'0.weight'", kind, "cannot capture hooks on parameters", "in the loss or the forward")
    x, _ = _data()
    capture(m, (x,), optimizer=None)   # no backward in an inference graph: the hook would not run in eager either


def test_hooks_on_intermediates_and_module_hooks_still_capture() -> None:
    class Reversal(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 4)

        def forward(self, x: Any) -> Any:
            h = self.a(x)
            h.register_hook(lambda g: -g)
            return self.b(torch.relu(h))

    x, y = _data()
    torch.manual_seed(0)
    _trains_like_eager(Reversal(), x, y)
    torch.manual_seed(0)
    m = _mlp()
    m[2].register_full_backward_hook(lambda mod, gi, go: (gi[0] * 0.5,))
    m[2].register_full_backward_pre_hook(lambda mod, go: (go[0] * 0.25,))
    m[0].register_forward_hook(lambda mod, inp, out: out * 0.5)
    _trains_like_eager(m, x, y)


def _trains_like_eager(m: nn.Module, x: Any, y: Any) -> None:
    """Captured, planned and run on the CPU for 3 steps of SGD, bitwise like eager (which runs the hooks): a
    capture that dropped a hook would train differently (the test only captured before)."""
    import warnings

    from executor import execute
    from executor.api import PlanMemoryWarning
    from hybrid.swap.quick_plans import quick_plan

    g = capture(m, (x,), F.cross_entropy, y, optimizer="sgd", lr=0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlanMemoryWarning)
        r = execute(g, quick_plan(g, 1.0, "unconstrained"), m, (x,), y, loss_fn=F.cross_entropy, iters=3,
                    device="cpu", check=True)
    assert r.comparison is not None and r.comparison.bitwise, r.comparison.mismatched[:3]


def test_mixed_float_dtypes_that_eager_refuses_are_refused() -> None:
    x, y = _data()
    with pytest.raises(RuntimeError, match="dtype"):
        F.cross_entropy(nn.Linear(16, 4).double()(x), y)       # what eager says
    _refused(nn.Linear(16, 4).double(), "aten.addmm", "float64 and float32", "one dtype")
    _refused(nn.Sequential(nn.Linear(16, 16).double(), nn.Linear(16, 4)), "aten.addmm", "float32 and float64",
             args=(x.double(),))                                  # layers of two dtypes


def test_one_dtype_casts_and_autocast_still_capture() -> None:
    x, y = _data()
    g = capture(nn.Linear(16, 4).double(), (x,), F.cross_entropy, y, dtype="fp32")
    assert {t.extra["dtype"] for t in g.tensors if t.kind == "param"} == {"float32"}
    g = capture(nn.Linear(16, 4).double(), (x.double(),), F.cross_entropy, y)
    assert {t.extra["dtype"] for t in g.tensors if t.kind == "param"} == {"float64"}

    class Autocast(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc, self.o = nn.Linear(16, 16), nn.Linear(16, 4)

        def forward(self, x: Any) -> Any:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                h = self.fc(x)
            return self.o(h.float())

    capture(Autocast(), (x,), F.cross_entropy, y)


def test_sparse_embedding_is_refused_by_name() -> None:
    m = nn.Sequential(nn.Embedding(20, 8, sparse=True), nn.Flatten(), nn.Linear(24, 4))
    idx = torch.randint(20, (8, 3))
    _refused(m, "Embedding '0'", "sparse=True", "sparse=False", args=(idx,))


def test_sparse_tensors_in_the_step_are_one_line() -> None:
    from hybrid.capture.storage import storage_key

    with pytest.raises(HybridError, match="sparse_coo tensor.*dense \\(strided\\) tensors only"):
        storage_key(torch.eye(3).to_sparse())


def test_a_private_generator_is_named() -> None:
    class GenDrop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(16, 16), nn.Linear(16, 4)
            self.gen = torch.Generator().manual_seed(9)

        def forward(self, x: Any) -> Any:
            h = self.a(x)
            return self.b(h * (torch.rand(h.shape, generator=self.gen) > 0.3).float())

    msg = _refused(GenDrop(), "torch.Generator", "only the global generator", "torch.manual_seed")
    assert "_opaque_obj" not in msg


def test_batch_norm_with_a_cumulative_average_is_named() -> None:
    m = nn.Sequential(nn.Linear(16, 16), nn.BatchNorm1d(16, momentum=None), nn.Linear(16, 4))
    _refused(m, "batch norm '1' (BatchNorm1d)", "momentum=None", "num_batches_tracked")
    x, y = _data()
    capture(m.eval(), (x,), F.cross_entropy, y)   # eval mode reads the running statistics only


@pytest.mark.parametrize("kw,fragment", [
    ({"lr": "1e-3"}, "lr must be a positive finite number, got '1e-3'"),
    ({"lr": -1.0}, "lr must be a positive finite number"),
    ({"lr": float("nan")}, "lr must be a positive finite number"),
    ({"lr": True}, "lr must be a positive finite number"),
    ({"kwargs": [1]}, "kwargs must be a dict"),
])
def test_bad_lr_and_kwargs_are_one_line(kw: dict[str, Any], fragment: str) -> None:
    _refused(_mlp(), fragment, **kw)
