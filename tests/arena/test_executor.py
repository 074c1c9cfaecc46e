"""The CPU executor runs a plan laid out by `with_arena` at its offsets: bitwise equal to eager, no compaction."""
from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from executor.api import Executor  # noqa: E402
from executor.check import compare  # noqa: E402
from hybrid.arena.lifetimes import with_arena  # noqa: E402
from hybrid.validator import validate  # noqa: E402
from tests.executor.cases import ITERS, SEED, swap_plan, user_case  # noqa: E402

pytestmark = pytest.mark.torch


def _laid_out(case):  # noqa: ANN001, ANN202 - the case's swap plan with room, laid out: (plan, Solution)
    plan = swap_plan(case.graph, "unconstrained")
    roomy = replace(plan, device=replace(plan.device, memory_bytes=2 * plan.device.memory_bytes))
    return with_arena(case.graph, roomy, 10.0)


def _run_bitwise(case, plan) -> Executor:  # noqa: ANN001
    """`plan` run on the CPU for ITERS iterations, checked bitwise against eager."""
    ex = Executor(case.graph, plan, "cpu", sanitize=True)
    ex.load(case.module(), case.args, case.target)
    ex.run(ITERS, seed=SEED)
    cmp = compare(ex.losses, ex.state(), case.reference())
    assert cmp.bitwise, cmp.mismatched[:5]
    return ex


@pytest.fixture(scope="module")
def laid_out():  # noqa: ANN201
    """(case, laid-out plan, Solution), made once for this module (the layout's search takes its 10 s): the tests
    read them and change only copies (dataclasses.replace)."""
    case = user_case()
    return (case, *_laid_out(case))


def test_arena_plan_runs_bitwise_with_zero_compactions(laid_out) -> None:  # noqa: ANN001
    case, aplan, sol = laid_out
    assert aplan.allocation.kind == "arena" and validate(case.graph, aplan).valid
    ex = _run_bitwise(case, aplan)
    st = ex.runtime.pool.stats
    assert st.kind == "arena" and st.compactions == 0
    assert st.peak_live_bytes <= sol.arena_bytes


def test_an_arena_may_end_at_its_top_copys_bytes_not_its_rounded_extent(laid_out) -> None:  # noqa: ANN001
    """docs/formats.md (rule 5, arenas): a copy lies inside [0, arena_bytes) by its bytes; the padding that
    rounds it up to the alignment need not. Every arena hybrid writes spans the rounded extents, but a file that
    ends its arena at the top copy's last byte is valid, and the executor runs it at those offsets."""
    from hybrid.plan import ArenaAllocation

    case, aplan, _ = laid_out
    align = aplan.device.alignment_bytes
    size = {t.id: t.bytes for t in case.graph.tensors}
    alloc = aplan.allocation
    assert alloc.arena_bytes % align == 0          # what hybrid writes: the rounded extents
    odd = max((t for t in alloc.offsets if size[t] % align), key=lambda t: size[t])
    offsets = {**alloc.offsets, odd: alloc.arena_bytes}     # alone above every other copy
    top = alloc.arena_bytes + size[odd]
    tight = replace(aplan, allocation=ArenaAllocation(top, offsets))
    assert top % align and validate(case.graph, tight).valid
    assert not validate(case.graph, replace(tight, allocation=ArenaAllocation(top - 1, offsets))).valid
    ex = _run_bitwise(case, tight)
    st = ex.runtime.pool.stats
    assert st.kind == "arena" and st.compactions == 0 and ex.runtime.pool.arena_bytes == top
