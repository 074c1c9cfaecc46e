"""Plans with swaps, recomputes and several copies per tensor get arena offsets that the validator accepts."""
from __future__ import annotations

from dataclasses import replace

import pytest

from hybrid.arena.lifetimes import plan_buffers, with_arena
from hybrid.device import preset
from hybrid.errors import InfeasibleError
from hybrid.graph.info import unswapped_peak
from hybrid.graph.synthetic import training_graph
from hybrid.swap.baselines import run_baseline
from hybrid.validator import validate


@pytest.mark.parametrize("kind,frac", [("recompute-only", 0.9), ("belady", 0.6), ("vdnn", 0.6)])
def test_laid_out_plan_validates(kind: str, frac: float) -> None:
    g = training_graph(12, seed=4, share_params=6)
    dev = replace(g.device or preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * frac), reserve_bytes=0)
    plan = run_baseline(g, dev, kind)
    if kind == "recompute-only":
        assert any(e.kind == "compute" and e.recompute for e in plan.events)
    roomy = replace(plan, device=replace(plan.device, memory_bytes=2 * plan.device.memory_bytes))
    pb = plan_buffers(g, roomy)
    assert any(b.gaps for b in pb.problem.buffers) or kind == "recompute-only"   # several copies, one offset
    new, sol = with_arena(g, roomy, 3.0)
    assert new.allocation.kind == "arena" and sol.arena_bytes >= pb.problem.peak_live()
    assert validate(g, new).valid


def test_a_layout_that_cannot_fit_is_refused_naming_the_shortfall() -> None:
    g = training_graph(12, seed=4, share_params=6)
    dev = replace(g.device or preset("v100-16gb"), memory_bytes=int(unswapped_peak(g) * 0.5), reserve_bytes=0)
    plan = run_baseline(g, dev, "belady")
    tight = replace(plan, device=replace(plan.device, memory_bytes=plan_buffers(g, plan).problem.peak_live() - 1))
    with pytest.raises(InfeasibleError, match="once laid out"):
        with_arena(g, tight, 1.0)
