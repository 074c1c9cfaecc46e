"""Acceptance (issue 18): the CPU executor runs a MO-SOS plan that picks non-default convolution impls and
matches eager training within the stated tolerance; with no impl chosen it stays bitwise."""
from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from examples.convnet import make
from executor.api import execute
from hybrid.capture import capture
from hybrid.capture.conv_impls import STEP_ATOL, STEP_RTOL
from hybrid.graph.info import unswapped_peak
from hybrid.validator import validate
from milp.api import plan_milp, solve_milp
from milp.solve import SolveOptions


@pytest.fixture(scope="module")
def convnet():  # noqa: ANN201
    torch.manual_seed(0)
    m, x, y, lf = make()
    return capture(m, x, lf, y, optimizer="sgd"), (m, x, y, lf)


def _plan(g, frac: float, byte_budget: bool = False):  # noqa: ANN001, ANN202
    """MO-SOS's plan at `frac` of the peak: laid out (`plan_milp`), or as the MILP counts it (`solve_milp`)."""
    peak = unswapped_peak(g, g.device.alignment_bytes)
    dev = replace(g.device, memory_bytes=int(peak * frac))
    run = (solve_milp if byte_budget else plan_milp)(g, dev, "mosos", None, SolveOptions("highs", 60, 0.01, 1))
    assert run.plan is not None and validate(g, run.plan).valid
    return run.plan


def _picked(plan) -> dict[str, str]:  # noqa: ANN001
    return {e.op: e.impl for e in plan.events if e.kind == "compute" and e.impl not in (None, "default")}


def test_mosos_plan_with_winograd_runs_on_cpu_within_tolerance(convnet) -> None:  # noqa: ANN001
    g, (m, x, y, lf) = convnet
    plan = _plan(g, 4.0)                       # roomy: MO-SOS takes the fastest impl everywhere
    picked = _picked(plan)
    # the 256->256 3x3 layer, forward and input gradient, where the roofline favours Winograd
    assert picked == {"convolution_1": "winograd", "convolution_backward_1": "winograd"}
    res = execute(g, plan, m, x, y, loss_fn=lf, iters=2, device="cpu", check=True)
    c = res.comparison
    assert c is not None and (c.rtol, c.atol) == (STEP_RTOL, STEP_ATOL)
    assert not c.bitwise and c.ok, c.to_json()
    assert any("2 compute event(s) with non-default implementations (winograd)" in n for n in c.notes)


def test_tight_memory_keeps_the_library_call_and_stays_bitwise(convnet) -> None:  # noqa: ANN001
    g, (m, x, y, lf) = convnet
    plan = _plan(g, 1.0)                       # no room for Winograd's workspace beside the tensors
    assert _picked(plan) == {}
    res = execute(g, plan, m, x, y, loss_fn=lf, iters=1, device="cpu", check=True)
    assert res.comparison is not None and res.comparison.bitwise


def test_a_tight_plan_whose_workspace_fits_only_beside_few_tensors_still_runs(convnet) -> None:  # noqa: ANN001
    g, (m, x, y, lf) = convnet
    # Winograd's 36 MiB fit only where few tensors live: not beside the pool's peak. Only a byte budget says so:
    # an arena must fit beside the largest workspace (rule 5), so plan_milp's laid-out plan re-solves without it
    plan = _plan(g, 2.4, byte_budget=True)
    assert _picked(plan).get("convolution_1") == "winograd"
    res = execute(g, plan, m, x, y, loss_fn=lf, iters=1, device="cpu", check=True)
    assert res.comparison is not None and res.comparison.ok


def test_a_mismatch_under_adam_says_what_adams_step_does_to_rounding(convnet) -> None:  # noqa: ANN001
    """Adam's first step moves each weight by about lr x sign(grad): a rounding difference in a gradient near zero
    became a 2e-3 difference, and `execute --check` said MISMATCH with nothing to say why (helper-128). Compared
    bitwise here (atol = rtol = 0), so that the winograd plan is beyond tolerance on every CPU."""
    g_sgd, (m, x, y, lf) = convnet
    torch.manual_seed(0)
    m2, x2, y2, lf2 = make()
    g_adam = capture(m2, x2, lf2, y2, optimizer="adam")
    for g, module, adam in ((g_sgd, m, False), (g_adam, m2, True)):
        plan = _plan(g, 4.0)
        assert _picked(plan).get("convolution_1") == "winograd"
        res = execute(g, plan, module, x, y, loss_fn=lf, iters=1, device="cpu", check=True, atol=0.0, rtol=0.0)
        c = res.comparison
        assert c is not None and not c.ok
        said = [n for n in c.notes if n.startswith("the optimizer is Adam (lr 0.001)")]
        assert len(said) == adam and (not adam or "--atol 0.002" in said[0]), c.notes
