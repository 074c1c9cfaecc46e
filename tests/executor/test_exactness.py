"""Acceptance: training under a swapping plan on the CPU backend equals eager training bitwise.

Three zoo models (convolutions + batch norm, an unrolled LSTM with shared weights,
SqueezeNet with dropout) and a user-defined module (tied embedding, layer norm,
dropout), each under a size-class plan and a byte-budget (unconstrained) plan at
half the unswapped peak, for three iterations: every loss, parameter, buffer,
optimizer state and the last gradients equal eager PyTorch's, the race checker
sees every conflicting access ordered, and the pool never holds more than the
plan's memory.
"""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from executor.api import Executor  # noqa: E402
from executor.check import compare  # noqa: E402
from hybrid.graph.info import unswapped_peak

from tests.executor.cases import ITERS, SEED, swap_plan  # noqa: E402
from tests.executor.cases import case as get_case  # noqa: E402

pytestmark = pytest.mark.torch



@pytest.mark.parametrize("kind", ["size_classes", "unconstrained"])
@pytest.mark.parametrize("name", ["resnet-18", "rnn-2-1k", "squeezenet", "tinylm"])
def test_swapping_plan_trains_exactly_like_eager(name: str, kind: str) -> None:
    case = get_case(name)
    plan = swap_plan(case.graph, kind)
    memory = plan.device.memory_bytes
    assert memory <= unswapped_peak(case.graph) // 2
    assert plan.allocation.kind == kind
    assert sum(1 for e in plan.events if e.kind == "swap_out") > 0 and sum(1 for e in plan.events if e.kind == "swap_in") > 0

    ex = Executor(case.graph, plan, "cpu", sanitize=True)
    ex.keep_grads()
    ex.load(case.module(), case.args, case.target)
    records = ex.run(ITERS, seed=SEED)
    state = ex.state()

    cmp = compare(ex.losses, state, case.reference(), grads=True)
    assert cmp.bitwise, (cmp.mismatched[:5], cmp.max_abs_diff, cmp.worst)
    assert cmp.values > 3 + len(state.params)

    stats = ex.runtime.pool.stats
    assert 0 < stats.peak_live_bytes <= memory
    assert stats.reserved_bytes <= memory
    if kind == "size_classes":
        classes = plan.allocation.classes
        assert all(peak <= c.count for peak, c in zip(stats.classes_peak, classes))
    assert ex.runtime.races is not None and ex.runtime.races.checked > 0
    assert all(r.ops.ops_by_mode.get("copy", 0) + r.ops.ops_by_mode.get("out", 0) > 0 for r in records)


def test_the_check_compares_bits_so_equal_nans_agree_and_a_nan_against_a_number_does_not() -> None:
    """fp16 Adam's 0/0 leaves NaN on both sides, bit for bit: that is agreement, not a mismatch."""
    from executor.check import EagerRun
    from hybrid.capture.interpreter import StepResult

    nan = torch.tensor([1.0, float("nan"), 2.0], dtype=torch.float16)

    def result(w: torch.Tensor) -> StepResult:
        return StepResult(torch.tensor(0.5), {}, {"w": w}, {}, {}, [])

    same = compare([torch.tensor(0.5)], result(nan.clone()), EagerRun([torch.tensor(0.5)], result(nan.clone())))
    assert same.mismatched == [] and same.beyond_tolerance == []
    other = torch.tensor([1.0, 3.0, 2.0], dtype=torch.float16)
    diff = compare([torch.tensor(0.5)], result(other), EagerRun([torch.tensor(0.5)], result(nan.clone())))
    assert diff.mismatched == ["params[w]"] and diff.max_abs_diff == float("inf")
