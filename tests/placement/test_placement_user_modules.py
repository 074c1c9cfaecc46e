"""Inference graphs of users' modules placed by every scheduler and run by the placement executor, bitwise like
eager inference: in-place ops (ReLU(inplace=True), `+=`, masked_fill_), recurrent layers and attention (whose
eager inference once took other kernels than the trace), keyword inputs; and graphs that update a tensor
(a buffer the forward changes, a random draw) refused up front by the library's own entry, in one line."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

from executor.api import execute  # noqa: E402
from executor.placed import eager_outputs, run_placed  # noqa: E402
from hybrid.capture import capture  # noqa: E402
from hybrid.errors import HybridError  # noqa: E402
from hybrid.placement.partition import part_graph  # noqa: E402
from hybrid.placement.schedulers import SCHEDULERS, place  # noqa: E402
from hybrid.placement.timing import link_of, to_plan  # noqa: E402
from hybrid.swap.quick_plans import quick_plan  # noqa: E402
from hybrid.validator import validate  # noqa: E402

pytestmark = pytest.mark.torch


class InPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.act = nn.Linear(8, 8), nn.Linear(8, 4), nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
        h = self.act(self.a(x))
        h += x
        if keep is not None:
            h.masked_fill_(~keep, 0.0)
        return self.b(h)


class Recurrent(nn.Module):
    def __init__(self, cell: type) -> None:
        super().__init__()
        self.rnn, self.head = cell(8, 6, num_layers=2, bidirectional=True, batch_first=True), nn.Linear(12, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0]).mean(1)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, 0.1, batch_first=True), 2,
                                         enable_nested_tensor=False)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(x, mask=nn.Transformer.generate_square_subsequent_mask(x.shape[1]), is_causal=True))


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1))


CASES = {
    "inplace": lambda: (InPlace(), (_x(6, 8),), {"keep": _x(6, 8) > 0}),
    "gru": lambda: (Recurrent(nn.GRU), (_x(3, 5, 8),), None),
    "lstm": lambda: (Recurrent(nn.LSTM), (_x(3, 5, 8),), None),
    "transformer-encoder": lambda: (Attention(), (_x(3, 5, 8),), None),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_schedulers_placement_runs_bitwise_like_eager_inference(name: str) -> None:
    torch.manual_seed(0)
    m, args, kwargs = CASES[name]()
    m = m.eval()
    g = capture(m, args, kwargs=kwargs, optimizer=None, device="p2200", name=name)
    ref = eager_outputs(m, args, kwargs)
    pg = part_graph(g, key_only=False)
    for s in SCHEDULERS:
        plan = to_plan(pg, place(pg, link_of(g.device), s, time_limit_s=5), g.device)
        assert validate(g, plan).valid, s
        out = run_placed(g, plan, m, args, iters=2, kwargs=kwargs).outputs
        assert len(out) == len(ref) and all(torch.equal(a, b) for a, b in zip(out, ref)), s
    # and the swap executor's own check of the same graph (it compared last bits apart for RNNs and attention)
    r = execute(g, quick_plan(g, 1.0, "unconstrained"), m, args, kwargs=kwargs, iters=1, device="cpu", check=True)
    assert r.comparison is not None and r.comparison.bitwise, r.comparison.mismatched[:3]


class UpdatesABuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        return self.fc(x)


class Draws(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(nn.functional.dropout(x, 0.5, training=True))   # MC dropout at inference


@pytest.mark.parametrize("module, words", [(UpdatesABuffer, ("not an inference graph", "buffer:calls", "eval mode")),
                                           (Draws, ("draws random numbers", "rng"))])
def test_a_graph_that_updates_a_tensor_is_refused_by_part_graph_in_one_line(module: type, words: tuple) -> None:
    # the validator refused a host op that updates a tensor only once a plan was laid out, and the placement
    # executor failed on the device ("op 'add_' returned 1 values"): refused before any scheduling now
    g = capture(module().eval(), (_x(6, 8),), optimizer=None, device="p2200", name="updates")
    with pytest.raises(HybridError) as info:
        part_graph(g, key_only=False)
    msg = str(info.value)
    assert "\n" not in msg and "graph 'updates'" in msg and all(w in msg for w in words), msg
