"""`executor.execute` on what a review found: inference graphs checked, the reference's loss reading the copy,
meta modules, a module in another mode than captured, keyword inputs fed by `batches`."""
from __future__ import annotations

import copy
import math
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from hybrid.capture.api import capture  # noqa: E402
from hybrid.capture.trace import portable_kernels  # noqa: E402
from hybrid.errors import HybridError  # noqa: E402

from executor import execute  # noqa: E402

ITERS = 3


def _gen() -> Any:
    return torch.Generator().manual_seed(1)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.b1 = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(8, 5)

    def forward(self, x: Any) -> Any:
        return self.fc(self.drop(F.relu(self.b1(self.c1(x))).mean((2, 3))))


def _cnn() -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    g = _gen()
    return CNN(), torch.randn(4, 3, 8, 8, generator=g), torch.randint(5, (4,), generator=g)


def _plan(graph: Any) -> Any:
    """A Belady plan at 60% of the unswapped peak, or the largest op's footprint where that is more."""
    from dataclasses import replace

    from hybrid.graph.info import graph_alignment, largest_op, unswapped_peak
    from hybrid.swap.baselines import run_baseline

    memory = max(largest_op(graph, graph_alignment(graph))[1] + 4096, int(0.6 * unswapped_peak(graph)))
    return run_baseline(graph, replace(graph.device, memory_bytes=memory, reserve_bytes=0), "belady")


# ---- 1. inference graphs: outputs and buffers against eager forward passes --------------------

@pytest.mark.parametrize("mode", ["train", "eval"])
def test_check_of_an_inference_graph_compares_outputs_and_buffers_with_eager_forwards(mode: str) -> None:
    m, x, _ = _cnn()
    m.train(mode == "train")
    g = capture(m, (x,), optimizer=None)
    res = execute(g, _plan(g), m, (x,), iters=ITERS, device="cpu", check=True)
    c = res.comparison
    assert c is not None and c.inference and c.bitwise, c.mismatched
    n_params, n_buffers = len(list(m.parameters())), len(list(m.buffers()))
    assert c.values == ITERS + n_params + n_buffers           # every iteration's output, the state
    assert "outputs" in c.compared and "optimizer" not in c.compared
    assert len(res.outputs) == ITERS and res.state.outputs[0] is not None
    # the same numbers as eager forward passes under no_grad from seed + k, by hand
    ref = copy.deepcopy(m)
    for k in range(ITERS):
        torch.manual_seed(k)
        with torch.no_grad(), portable_kernels():
            want = ref(x)
        assert torch.equal(res.outputs[k][0], want)
    assert torch.equal(res.state.buffers["b1.running_mean"], ref.b1.running_mean)
    if mode == "train":      # batch norm updated its statistics; dropout drew other masks each iteration
        assert not torch.equal(ref.b1.running_mean, m.b1.running_mean)
        assert not torch.equal(res.outputs[0][0], res.outputs[1][0])
    assert int(m.b1.num_batches_tracked) == 0                 # the caller's module is not modified


def test_a_training_graph_without_its_loss_fn_says_so_in_one_line() -> None:
    m, x, y = _cnn()
    g = capture(m, (x,), F.cross_entropy, y, optimizer="sgd", lr=0.1)
    with pytest.raises(HybridError, match=r"^the module's output is a tensor of shape \[4, 5\], not a scalar "
                                          r"loss: pass loss_fn=\.\.\. as captured$"):
        execute(g, _plan(g), m, (x,), y, iters=1, device="cpu", check=True)


# ---- 2. the reference copies the module and its loss together -------------------------------

class Clip(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.img = nn.Linear(16, 8)
        self.txt = nn.Linear(12, 8)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, a: Any, b: Any) -> Any:
        return F.normalize(self.img(a), dim=-1), F.normalize(self.txt(b), dim=-1)

    def loss(self, out: Any, labels: Any) -> Any:
        ia, tb = out
        logits = self.logit_scale.exp() * ia @ tb.t()
        return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


def _true_eager(m: Any, args: tuple, y: Any, loss_fn: Any) -> Any:
    """What training the module eagerly gives (Adam, seed k before iteration k)."""
    opt = torch.optim.Adam(m.parameters(), lr=1e-3, foreach=False)
    for k in range(ITERS):
        torch.manual_seed(k)
        opt.zero_grad()
        with portable_kernels():
            loss_fn(m(*args), y).backward()
        opt.step()
    return m


def _l2_closure() -> tuple[Any, Any, Any, Any]:
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))

    def loss(o: Any, t: Any) -> Any:
        return F.cross_entropy(o, t) + 1e-2 * sum(p.pow(2).sum() for p in m.parameters())

    g = _gen()
    return m, torch.randn(8, 16, generator=g), torch.randint(4, (8,), generator=g), loss


def test_a_loss_that_is_a_bound_method_reads_the_references_copy() -> None:
    torch.manual_seed(0)
    m = Clip()
    args, y = (torch.randn(6, 16, generator=_gen()), torch.randn(6, 12, generator=_gen())), torch.arange(6)
    g = capture(m, args, m.loss, y, optimizer="adam", lr=1e-3)
    res = execute(g, _plan(g), m, args, y, loss_fn=m.loss, iters=ITERS, device="cpu", check=True)
    assert res.comparison is not None and res.comparison.bitwise, res.comparison.mismatched
    assert all(p.grad is None for p in m.parameters())        # the caller's module is not modified
    mm = copy.deepcopy(m)
    want = _true_eager(mm, args, y, mm.loss)
    assert all(torch.equal(res.state.params[n], p) for n, p in want.named_parameters())


def test_a_closure_over_the_module_reads_the_references_copy() -> None:
    m, x, y, loss = _l2_closure()
    g = capture(m, (x,), loss, y, optimizer="adam", lr=1e-3)
    res = execute(g, _plan(g), m, (x,), y, loss_fn=loss, iters=ITERS, device="cpu", check=True)
    assert res.comparison is not None and res.comparison.bitwise, res.comparison.mismatched
    assert all(p.grad is None for p in m.parameters())
    want = _true_eager(m, (x,), y, loss)       # the closure reads m itself: true eager training of it
    assert all(torch.equal(res.state.params[n], p) for n, p in want.named_parameters())


_GLOBAL: dict[str, Any] = {}


def _global_loss(o: Any, t: Any) -> Any:
    return F.cross_entropy(o, t) + 1e-2 * sum(p.pow(2).sum() for p in _GLOBAL["model"].parameters())


def test_a_loss_reaching_the_module_through_a_global_is_refused_or_rebuilt() -> None:
    m, x, y, _ = _l2_closure()
    _GLOBAL["model"] = m
    g = capture(m, (x,), _global_loss, y, optimizer="adam", lr=1e-3)
    plan = _plan(g)
    with pytest.raises(HybridError, match=r"^loss_fn reads the module given, not the eager reference's copy.*"
                                          r"pass make_reference=\.\.\."):
        execute(g, plan, m, (x,), y, loss_fn=_global_loss, iters=ITERS, device="cpu", check=True)
    assert all(p.grad is None for p in m.parameters())        # put back as it was

    def rebuild() -> tuple[Any, Any]:          # as `hybrid execute --module` calls the factory again
        again = _l2_closure()[0]
        _GLOBAL["model"] = again
        return again, _global_loss

    res = execute(g, plan, m, (x,), y, loss_fn=_global_loss, iters=ITERS, device="cpu", check=True,
                  make_reference=rebuild)
    assert res.comparison is not None and res.comparison.bitwise and not res.comparison.notes

    def other() -> tuple[Any, Any]:           # a factory that builds other weights: the copy, with a note
        torch.manual_seed(5)
        return nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)), F.cross_entropy

    plain = capture(m, (x,), F.cross_entropy, y, optimizer="adam", lr=1e-3)
    res = execute(plain, _plan(plain), m, (x,), y, loss_fn=F.cross_entropy, iters=1, device="cpu", check=True,
                  make_reference=other)
    assert res.comparison is not None and res.comparison.bitwise
    assert any("differs from the module run (parameter '0.weight')" in n for n in res.comparison.notes)


# ---- 3. a meta module -----------------------------------------------------------------------

def test_a_module_on_the_meta_device_is_refused_naming_the_parameter() -> None:
    with torch.device("meta"):
        m = nn.Linear(16, 4)
    x, y = torch.randn(8, 16, generator=_gen()), torch.randint(4, (8,), generator=_gen())
    g = capture(m, (x,), F.cross_entropy, y, optimizer="sgd", lr=0.1)
    with pytest.raises(HybridError, match=r"^parameter 'weight' is on the meta device and has no data: executing a "
                                          r"graph needs real weights \(build the module on cpu or cuda, or load a "
                                          r"checkpoint into it\)$"):
        execute(g, _plan(g), m, (x,), y, loss_fn=F.cross_entropy, iters=1, device="cpu")


# ---- 4. the mode the graph was captured in ----------------------------------------------------

def test_a_module_in_another_mode_than_captured_is_refused() -> None:
    m, x, y = _cnn()
    train_g = capture(m, (x,), F.cross_entropy, y, optimizer="sgd", lr=0.1)
    with pytest.raises(HybridError, match=r"^graph captured with batch norm 'b1' in training mode; the module given "
                                          r"has it in eval mode: return the module in the mode it was captured in "
                                          r"\(\.train\(\)\)$"):
        execute(train_g, _plan(train_g), copy.deepcopy(m).eval(), (x,), y, loss_fn=F.cross_entropy, device="cpu")
    eval_g = capture(copy.deepcopy(m).eval(), (x,), F.cross_entropy, y, optimizer="sgd", lr=0.1)
    with pytest.raises(HybridError, match=r"^graph captured with batch norm 'b1' in eval mode; .* \(\.eval\(\)\)$"):
        execute(eval_g, _plan(eval_g), m, (x,), y, loss_fn=F.cross_entropy, device="cpu")
    res = execute(eval_g, _plan(eval_g), copy.deepcopy(m).eval(), (x,), y, loss_fn=F.cross_entropy, device="cpu",
                  check=True)
    assert res.comparison is not None and res.comparison.bitwise

    mlp = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Dropout(0.2), nn.Linear(16, 4))
    xs, ys = torch.randn(8, 16, generator=_gen()), torch.randint(4, (8,), generator=_gen())
    g = capture(mlp, (xs,), F.cross_entropy, ys, optimizer="sgd", lr=0.1)       # draws dropout masks
    with pytest.raises(HybridError, match=r"^graph captured with dropout in training mode \(it draws dropout "
                                          r"masks\); the module given is in eval mode"):
        execute(g, _plan(g), copy.deepcopy(mlp).eval(), (xs,), ys, loss_fn=F.cross_entropy, device="cpu")


# ---- 5. keyword tensor inputs from `batches` --------------------------------------------------

class KW(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.g = nn.Linear(8, 3)

    def forward(self, x: Any, *, mask: Any = None, scale: float = 1.0) -> Any:
        return self.g(torch.relu(self.fc(x)) * scale * mask)


def test_batches_feed_keyword_tensor_inputs() -> None:
    torch.manual_seed(0)
    m = KW()
    gen = _gen()
    x, y = torch.randn(8, 8, generator=gen), torch.randint(3, (8,), generator=gen)
    kw = {"mask": (torch.rand(8, 8, generator=gen) > 0.2).float(), "scale": 2.0}
    g = capture(m, (x,), F.cross_entropy, y, kwargs=kw, optimizer="adam", lr=1e-2)
    plan = _plan(g)
    data = [(torch.randn(8, 8, generator=gen), torch.randint(3, (8,), generator=gen),
             (torch.rand(8, 8, generator=gen) > 0.5).float()) for _ in range(ITERS)]

    def with_kwargs(k: int) -> tuple:
        return (data[k][0],), data[k][1], {"mask": data[k][2], "scale": 2.0}

    def without(k: int) -> tuple:
        return (data[k][0],), data[k][1]

    fed = execute(g, plan, m, (x,), y, loss_fn=F.cross_entropy, kwargs=kw, iters=ITERS, device="cpu", check=True,
                  batches=with_kwargs)
    assert fed.comparison is not None and fed.comparison.bitwise, fed.comparison.mismatched
    kept = execute(g, plan, m, (x,), y, loss_fn=F.cross_entropy, kwargs=kw, iters=ITERS, device="cpu", check=True,
                   batches=without)                       # the kwargs given are fed again
    assert kept.comparison is not None and kept.comparison.bitwise
    assert fed.losses != kept.losses                      # the masks of `batches` were fed
    with pytest.raises(HybridError, match=r"^batches\(k\) returned a tuple of 1; return \(args, target\) or "
                                          r"\(args, target, kwargs\)"):
        execute(g, plan, m, (x,), y, loss_fn=F.cross_entropy, kwargs=kw, device="cpu", batches=lambda k: (x,))


# ---- from the code review of the above ------------------------------------------------------

def test_a_zoo_inference_graph_runs_its_model_in_eval_mode_as_captured() -> None:
    """capture_model captures inference in eval mode; workload builds the model so (it was refused: the
    graph's batch norm in eval mode, the zoo's model in training mode)."""
    from executor.model import workload
    from hybrid.capture.api import capture_model

    g = capture_model("resnet-18", 1, overrides={"image_size": 32}, optimizer=None)
    w = workload(g, seed=0)
    assert not w.module.training and w.target is None and w.loss_fn is None
    res = execute(g, _plan(g), w.module, w.args, w.target, loss_fn=w.loss_fn, iters=2, device="cpu", check=True)
    assert res.comparison is not None and res.comparison.bitwise and res.comparison.inference


def test_a_loss_reaching_the_module_is_caught_even_where_the_caller_holds_gradients() -> None:
    m, x, y = _cnn()
    g = capture(m, (x,), F.cross_entropy, y, optimizer="sgd")
    for p in m.parameters():
        p.grad = torch.full_like(p, 7.0)
    before = [(p.grad, p.grad.clone()) for p in m.parameters()]
    holder = {"m": m}

    def loss(out: Any, t: Any) -> Any:   # reaches the caller's module through a global-like holder
        return F.cross_entropy(out, t) + 0.0 * holder["m"].fc.weight.sum()

    with pytest.raises(HybridError, match="loss_fn reads the module given"):
        execute(g, _plan(g), m, (x,), y, loss_fn=loss, iters=1, device="cpu", check=True)
    for p, (g0, v0) in zip(m.parameters(), before):
        assert p.grad is g0 and torch.equal(p.grad, v0)       # the caller's gradients as they were


def test_an_inference_graph_captured_with_its_loss_needs_the_loss_fn() -> None:
    m, x, y = _cnn()
    m.eval()
    g = capture(m, (x,), F.cross_entropy, y, optimizer=None)   # a Python capture may keep an evaluation loss
    with pytest.raises(HybridError, match="the graph computes a loss but no loss_fn was given"):
        execute(g, _plan(g), m, (x,), y, iters=1, device="cpu", check=True)
    c = execute(g, _plan(g), m, (x,), y, loss_fn=F.cross_entropy, iters=2, device="cpu", check=True).comparison
    assert c is not None and c.bitwise and c.compared.startswith("losses, outputs")


def test_outputs_are_copied_only_when_asked_for() -> None:
    m, x, _ = _cnn()
    m.eval()
    g = capture(m, (x,), optimizer=None)
    assert execute(g, _plan(g), m, (x,), iters=2, device="cpu").outputs == []       # a timing run copies none
    kept = execute(g, _plan(g), m, (x,), iters=2, device="cpu", keep_outputs=True).outputs
    assert len(kept) == 2 and kept[1][0].shape == (4, 5)


def test_a_training_graph_with_a_target_that_is_no_tensor_keeps_it(tmp_path: Any, monkeypatch: Any) -> None:
    """The graph binds no target tensor but does bind a loss: the factory's target is the loss's to take."""
    from executor.model import workload

    (tmp_path / "intarget.py").write_text(
        "import torch, torch.nn as nn\n"
        "def make():\n"
        "    torch.manual_seed(0)\n"
        "    return nn.Linear(4, 3), torch.randn(2, 4), 1, lambda out, k: out[:, k].sum()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from hybrid.capture.user_module import load_user_model

    u = load_user_model("intarget:make")
    g = capture(u.module, u.args, u.loss_fn, u.target, optimizer="sgd")
    g.extra["module"] = {"spec": "intarget:make", "dtype": None}
    w = workload(g, module="intarget:make")
    assert w.target == 1 and w.loss_fn is not None
    res = execute(g, _plan(g), w.module, w.args, w.target, loss_fn=w.loss_fn, iters=2, device="cpu", check=True)
    assert res.comparison is not None and res.comparison.bitwise
