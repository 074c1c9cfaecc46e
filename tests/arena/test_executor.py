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


def test_arena_plan_runs_bitwise_with_zero_compactions() -> None:
    case = user_case()
    plan = swap_plan(case.graph, "unconstrained")
    roomy = replace(plan, device=replace(plan.device, memory_bytes=2 * plan.device.memory_bytes))
    aplan, sol = with_arena(case.graph, roomy, 10.0)
    assert aplan.allocation.kind == "arena" and validate(case.graph, aplan).valid
    ex = Executor(case.graph, aplan, "cpu", sanitize=True)
    ex.load(case.module(), case.args, case.target)
    ex.run(ITERS, seed=SEED)
    cmp = compare(ex.losses, ex.state(), case.reference())
    assert cmp.bitwise, cmp.mismatched[:5]
    st = ex.runtime.pool.stats
    assert st.kind == "arena" and st.compactions == 0
    assert st.peak_live_bytes <= sol.arena_bytes
