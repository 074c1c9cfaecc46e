"""GA -> CP-SAT -> GA: refinement that stalls hands its time back to the search (hybrid.refine.handoff)."""
from __future__ import annotations

import time

import pytest

from ga import GAConfig, optimize
from hybrid.device import Device
from hybrid.refine.handoff import patience_s, refine_then_resume
from hybrid.graph.synthetic import training_graph
from hybrid.validator import check


def _graph(seed: int):
    return training_graph(10, seed=seed, device=Device("s", 22 << 20, 12e9, 12e9, 0.0), workspace_prob=0.3)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_never_worse_than_the_same_search_without_refinement(seed, tmp_path):
    """With the generations fixed, the resumed search reaches exactly the GA-only arm's best; refinement only adds."""
    g = _graph(seed)
    cfg = GAConfig(population=8, children=8, seed=seed)
    ckpt = tmp_path / "split.ckpt"
    split = optimize(g, g.device, cfg, generations=4, checkpoint=ckpt, checkpoint_every=0)
    ga_only = optimize(g, g.device, cfg, generations=12)
    split_plan = split.to_plan()
    hand = refine_then_resume(g, g.device, split_plan, ckpt, deadline=time.monotonic() + 60, seed=seed,
                              patience=1e-6, generations=12)
    assert hand.refine.stop in ("stalled", "converged") and hand.resumed is not None
    assert hand.resumed.generations == 12
    assert hand.resumed.makespan_s == pytest.approx(ga_only.makespan_s, rel=1e-12)
    assert hand.plan.makespan_s <= min(ga_only.makespan_s, hand.refine.plan.makespan_s) * (1 + 1e-12)
    assert hand.plan.makespan_s <= split_plan.makespan_s
    assert hand.source == ("ga" if hand.resumed.makespan_s < hand.refine.plan.makespan_s else "cpsat")
    check(g, hand.plan)


def test_no_hand_back_when_refinement_uses_the_whole_budget(tmp_path):
    g = _graph(1)
    ckpt = tmp_path / "split.ckpt"
    split = optimize(g, g.device, GAConfig(population=8, children=8), generations=2, checkpoint=ckpt,
                     checkpoint_every=0)
    hand = refine_then_resume(g, g.device, split.to_plan(), ckpt, deadline=time.monotonic() + 0.2, seed=1,
                              patience=None)
    assert hand.resumed is None and hand.source == "cpsat"
    check(g, hand.plan)


def test_nothing_to_resume_without_a_checkpoint():
    g = _graph(2)
    split = optimize(g, g.device, GAConfig(population=8, children=8), generations=2)
    hand = refine_then_resume(g, g.device, split.to_plan(), None, deadline=time.monotonic() + 30, seed=1,
                              patience=1e-6)
    assert hand.refine.stop in ("stalled", "converged") and hand.resumed is None and hand.source == "cpsat"
    check(g, hand.plan)


def test_patience_is_a_share_of_the_budget_with_a_floor():
    assert patience_s(120.0) == pytest.approx(12.0)
    assert patience_s(2.0) == 1.0
    assert patience_s(100.0, 0.5) == 50.0
