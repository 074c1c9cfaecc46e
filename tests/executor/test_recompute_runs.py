"""Acceptance (recompute): plans that drop tensors and rerun their producers train bitwise like eager.

Three zoo models — ResNet-18 (batch norm: reruns on copies of the running statistics), SqueezeNet
(dropout) and an unrolled LSTM — and a user-defined module (dropout, tied weights), each under a
swap+recompute plan at 40% of the unswapped peak, for three iterations on the CPU backend with the race
checker on: every loss, parameter, buffer, optimizer state and the last gradients equal eager PyTorch's.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

import copy  # noqa: E402

import torch.nn as nn  # noqa: E402

from executor.api import Executor  # noqa: E402
from executor.check import compare  # noqa: E402
from executor.ops import OpRunner  # noqa: E402
from hybrid.capture.api import capture  # noqa: E402
from hybrid.graph.info import unswapped_peak  # noqa: E402
from hybrid.graph.order import program_order  # noqa: E402
from hybrid.swap.augmented import PlannerOptions  # noqa: E402
from hybrid.swap.planner import SwapPlanner  # noqa: E402
from hybrid.swap.pools import byte_pool  # noqa: E402
from hybrid.swap.to_plan import to_plan  # noqa: E402
from hybrid.validator import validate  # noqa: E402

from tests.executor.cases import ITERS, SEED, Case, lm_loss  # noqa: E402
from tests.executor.cases import case as get_case  # noqa: E402

pytestmark = pytest.mark.torch



def _recompute_plan(case: Case, fraction: float):
    g = case.graph
    dev = replace(g.device, memory_bytes=int(unswapped_peak(g) * fraction), reserve_bytes=0)
    # a ratio that drops whatever can be regenerated, so every model's plan reruns something
    aug = SwapPlanner(g, dev).plan(program_order(g), byte_pool(g, dev), PlannerOptions(recompute_ratio=1e6))
    plan = to_plan(aug, {"name": "test-recompute"})
    report = validate(g, plan)
    assert report.valid, report.violations[:3]
    return plan


@pytest.mark.parametrize("name", ["resnet-18", "squeezenet", "rnn-2-1k", "tinylm"])
def test_recompute_plan_trains_exactly_like_eager(name: str) -> None:
    case = get_case(name)
    # tinylm at 0.4: rerunning its dropout mask whole (hybrid.graph.rerun) lets the planner swap only there
    plan = _recompute_plan(case, 0.45 if name == "tinylm" else 0.4)
    reruns = [e for e in plan.events if e.kind == "compute" and e.recompute]
    assert reruns, "the plan recomputes nothing"
    if name == "resnet-18":
        assert any(case.graph.op(e.op).kind == "native_batch_norm" for e in reruns)

    ex = Executor(case.graph, plan, "cpu", sanitize=True)
    ex.keep_grads()
    ex.load(case.module(), case.args, case.target)
    ex.run(ITERS, seed=SEED)
    state = ex.state()
    cmp = compare(ex.losses, state, case.reference(), grads=True)
    assert cmp.bitwise, (cmp.mismatched[:5], cmp.max_abs_diff, cmp.worst)
    assert 0 < ex.runtime.pool.stats.peak_live_bytes <= plan.device.memory_bytes


def test_a_random_op_reruns_from_its_recorded_generator_state() -> None:
    """Dropout's mask: the rerun replays the generator as it was before the first run, whatever ran since."""
    case = get_case("tinylm")
    g = case.graph
    runner = OpRunner(g, torch.device("cpu"))
    o = next(i for i, op in enumerate(g.ops) if op.kind.startswith("bernoulli"))
    op = g.ops[o]
    call = runner.calls[o]
    env = {t.id: torch.zeros(max(1, t.bytes // 4)) for t in g.tensors}  # placeholders for unrelated ids

    def shaped(tid: str) -> torch.Tensor:
        meta = g.tensor(tid).extra.get("meta", {})
        shape = meta.get("shape") or [g.tensor(tid).bytes // 4]
        return torch.full(shape, 0.5)

    for tid in list(op.inputs) + list(op.outputs):
        if g.tensor(tid).bytes:
            env[tid] = shaped(tid)
    for new, old in call.versions:
        env[new].copy_(env[old])

    def run(rerun: bool) -> torch.Tensor:
        if call.mode == "copy":
            res = runner.compute(o, env, rerun)
            return res[0].clone()
        runner.run_direct(o, env, 1, rerun)
        return env[op.outputs[0]].clone()

    torch.manual_seed(3)
    first = run(False)
    torch.rand(1000)  # the generator moves on, as other random ops would move it
    again = run(True)
    assert torch.equal(first, again)
    fresh = run(False)  # a first run in a later iteration draws anew
    assert not torch.equal(first, fresh)


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_dropout_masks_rerun_from_their_allocation(name: str) -> None:
    """A dropout mask is rerun whole (empty_like, bernoulli_ from its recorded generator state, div_): the
    allocation's uninitialized bytes are overwritten before anything reads them (hybrid.graph.rerun)."""
    import copy

    from executor.check import train_eager
    from hybrid.capture import capture
    from tests.hybrid.checkpointed_models import BUILDERS

    torch.manual_seed(0)
    module, args, target, loss = BUILDERS[name]("none")
    graph = capture(module, args, loss, target, optimizer="adam", lr=0.01)
    case = Case(name, graph, lambda: copy.deepcopy(module), args, target, loss)
    plan = _recompute_plan(case, 0.4)
    kinds = {graph.op(e.op).kind for e in plan.events if e.kind == "compute" and e.recompute}
    assert {"empty_like", "bernoulli_"} <= kinds, kinds
    ex = Executor(graph, plan, "cpu", sanitize=True)
    ex.load(case.module(), args, target)
    ex.run(ITERS, seed=SEED)
    cmp = compare(ex.losses, ex.state(), train_eager(graph, case.module(), args, target, loss, ITERS, SEED))
    assert cmp.bitwise, (cmp.mismatched[:5], cmp.max_abs_diff, cmp.worst)



class _Attention(nn.Module):
    """Pre-norm attention with a fused q/k/v projection and dropout on the probabilities and the output."""

    def __init__(self, d: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.heads = heads
        self.ln, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.drop = nn.Dropout(0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln(x)).split(d, dim=2))
        a = self.drop((q @ k.transpose(-1, -2) / (d // self.heads) ** 0.5).softmax(-1))
        return x + self.drop(self.proj((a @ v).transpose(1, 2).reshape(b, t, d)))


def _attention_case() -> Case:
    torch.manual_seed(0)
    base = nn.Sequential(nn.Embedding(29, 16), _Attention(), _Attention(), nn.Linear(16, 29))
    tokens = torch.randint(29, (4, 17), generator=torch.Generator().manual_seed(1))
    args, target = (tokens[:, :-1].clone(),), tokens[:, 1:].clone()
    graph = capture(base, args, lm_loss, target, optimizer="sgd", lr=0.01, name="fused-attention")
    return Case("fused-attention", graph, lambda: copy.deepcopy(base), args, target, lm_loss)


def test_long_chain_plans_train_exactly_like_eager() -> None:
    """Chains of up to 24 producers through attention (their intermediates freed after their last rerun reader,
    or kept for the next chain: hybrid.swap.recompute.place_frees) train bitwise like eager."""
    case = _attention_case()
    g = case.graph
    dev = replace(g.device, memory_bytes=int(unswapped_peak(g) * 0.5), reserve_bytes=0)
    aug = SwapPlanner(g, dev).plan(program_order(g), byte_pool(g, dev),
                                   PlannerOptions(recompute_ratio=1e6, recompute_depth=24,
                                                  long_chains=True))
    plan = to_plan(aug, {"name": "test-long-chains"})
    report = validate(g, plan)
    assert report.valid, report.violations[:3]
    reruns = [e for e in plan.events if e.kind == "compute" and e.recompute]
    assert any(g.op(e.op).kind.startswith("bernoulli") for e in reruns)
    assert any(g.op(e.op).kind in ("addmm", "mm") for e in reruns)   # through the projection
    ex = Executor(g, plan, "cpu", sanitize=True)
    ex.keep_grads()
    ex.load(case.module(), case.args, case.target)
    ex.run(ITERS, seed=SEED)
    cmp = compare(ex.losses, ex.state(), case.reference(), grads=True)
    assert cmp.bitwise, (cmp.mismatched[:5], cmp.max_abs_diff, cmp.worst)


@pytest.mark.parametrize("name", ["resnet-18", "tinylm"])
def test_rebound_and_refined_rerun_plans_train_exactly_like_eager(name: str) -> None:
    """A plan with reruns re-bound in time order (PlannerOptions.rebind_reruns) and then refined by CP-SAT with
    its reruns kept in place (RefineOptions.reruns): both validate, keep their reruns and train bitwise like
    eager."""
    from hybrid.refine import RefineOptions, refine

    case = get_case(name)
    g = case.graph
    dev = replace(g.device, memory_bytes=int(unswapped_peak(g) * (0.45 if name == "tinylm" else 0.4)),
                  reserve_bytes=0)
    aug = SwapPlanner(g, dev).plan(program_order(g), byte_pool(g, dev),
                                   PlannerOptions(recompute_ratio=1e6, rebind_reruns=True))
    rebound = to_plan(aug, {"name": "test-rebind-reruns"})
    refined = refine(g, rebound, time_limit_s=60, seed=1, options=RefineOptions(max_windows=6)).plan
    assert refined.makespan_s <= rebound.makespan_s
    for plan in (rebound, refined):
        report = validate(g, plan)
        assert report.valid, report.violations[:3]
        assert any(e.kind == "compute" and e.recompute for e in plan.events), "the plan recomputes nothing"
        ex = Executor(g, plan, "cpu", sanitize=True)
        ex.keep_grads()
        ex.load(case.module(), case.args, case.target)
        ex.run(ITERS, seed=SEED)
        cmp = compare(ex.losses, ex.state(), case.reference(), grads=True)
        assert cmp.bitwise, (plan.planner.get("name"), cmp.mismatched[:5], cmp.max_abs_diff, cmp.worst)
