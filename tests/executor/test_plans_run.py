"""A plan that validates runs: every planner's plans, on random models and a transformer, in the CPU executor.

Planners count each device copy at the device's alignment (docs/formats.md, rule 5) and the executor places
copies at exactly that alignment, so a byte budget that validates can always be laid out (by the offline
offsets, or best fit with compaction) and trains bitwise like eager. A planner may instead refuse a memory
up front, naming what it needs.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Callable

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from executor.api import Executor  # noqa: E402
from executor.check import compare, train_eager  # noqa: E402
from hybrid.swap.quick_plans import size_class_plan  # noqa: E402
from ga import GAConfig, optimize  # noqa: E402
from hybrid.swap.pools import byte_pool, per_size_pool
from hybrid.swap.baselines import run_baseline
from hybrid.capture.api import capture  # noqa: E402
from hybrid.errors import InfeasibleError  # noqa: E402
from hybrid.graph import Graph  # noqa: E402
from hybrid.graph.info import largest_op, unswapped_peak
from hybrid.plan import Plan  # noqa: E402
from hybrid.swap.to_plan import to_plan
from hybrid.graph.order import program_order
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.planner import SwapPlanner
from hybrid.validator import validate  # noqa: E402

pytestmark = pytest.mark.torch

SEED = 3
ITERS = 2


def _planners(graph: Graph, device) -> dict[str, Callable[[], Plan]]:
    """Every planner the project has, each returning a plan of the one plan type for `device`."""
    order = program_order(graph)

    def classes() -> Plan:
        return to_plan(SwapPlanner(graph, device).plan(order, per_size_pool(graph, order, device)),
                       {"name": "simulate", "pool": "per size"})

    def belady_bytes() -> Plan:
        return to_plan(SwapPlanner(graph, device).plan(order, byte_pool(graph, device)), {"name": "simulate"})

    def ga() -> Plan:
        return optimize(graph, device, GAConfig(population=6, children=6, seed=1), generations=3).to_plan()

    def ga_recompute() -> Plan:
        return optimize(graph, device, GAConfig(population=6, children=6, seed=1), generations=3,
                        options=PlannerOptions(recompute_ratio=1.0)).to_plan()

    def recompute(pool: str) -> Callable[[], Plan]:
        def plan() -> Plan:  # drops whatever can be regenerated, so the reruns are exercised
            p = per_size_pool(graph, order, device) if pool == "classes" else byte_pool(graph, device)
            aug = SwapPlanner(graph, device).plan(order, p, PlannerOptions(recompute_ratio=1e6))
            return to_plan(aug, {"name": f"recompute ({pool})"})
        return plan

    def optimize_flow() -> Plan:   # `hybrid optimize`'s default: headroom, laid out, re-planned with what is left
        from hybrid.pipeline import OptimizeOptions, run_optimize

        return run_optimize(graph, device, 600.0, OptimizeOptions(config=GAConfig(population=6, children=6, seed=1),
                                                                  generations=2, workers=1, refine="none")).plan

    def belady_laid_out() -> Plan:   # a baseline as `--compare-baselines` shows it: through the same layout
        from hybrid.pipeline.baselines import lay_out_baseline

        return lay_out_baseline(graph, device, "belady", run_baseline(graph, device, "belady", recompute=True)).plan

    out: dict[str, Callable[[], Plan]] = {k: (lambda k=k: run_baseline(graph, device, k))
                                          for k in ("naive", "odswap", "vdnn", "belady", "recompute-only")}
    out.update({"per-size classes": classes, "byte budget": belady_bytes,
                "merged classes": lambda: size_class_plan(graph, device), "ga": ga, "ga+recompute": ga_recompute,
                "recompute, byte budget": recompute("bytes"), "recompute, per-size classes": recompute("classes"),
                "optimize (default flow)": optimize_flow, "belady laid out": belady_laid_out})
    return out


def _runs_like_eager(graph: Graph, plan: Plan, build: Callable[[], nn.Module], args, target, loss_fn,
                     reference) -> None:
    report = validate(graph, plan)
    assert report.valid, report.violations[:3]
    ex = Executor(graph, plan, "cpu", sanitize=True)
    ex.load(build(), args, target)
    ex.run(ITERS, seed=SEED)
    cmp = compare(ex.losses, ex.state(), reference)
    assert cmp.bitwise, (plan.planner, cmp.mismatched[:5], cmp.max_abs_diff)
    assert ex.runtime.pool.stats.peak_live_bytes <= plan.device.usable_bytes


def _check_every_planner(graph: Graph, fraction: float, build, args, target, loss_fn, reference) -> int:
    """Runs every planner at `fraction` of the unswapped peak, floored at 1.2x the largest op (below it no plan
    that moves whole tensors exists, and a random model there checked nothing); returns how many plans ran."""
    floor = int(1.2 * largest_op(graph, graph.device.alignment_bytes)[1])
    device = dataclasses.replace(graph.device, memory_bytes=max(int(unswapped_peak(graph) * fraction), floor),
                                 reserve_bytes=0)
    ran = 0
    for name, make in _planners(graph, device).items():
        try:
            plan = make()
        except InfeasibleError as e:   # refused up front, with what it needs
            assert "memory" in str(e) or "count" in str(e), (name, str(e))
            continue
        _runs_like_eager(graph, plan, build, args, target, loss_fn, reference)
        ran += 1
    return ran


class _Mlp(nn.Module):
    def __init__(self, widths: list[int], residual: bool, dropout: float) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.residual = residual
        self.drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            y = layer(x)
            if i < len(self.layers) - 1:
                y = self.drop(F.relu(y))
            x = y + x if self.residual and y.shape == x.shape else y
        return x


@settings(max_examples=6, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(depth=st.integers(2, 5), width=st.sampled_from([7, 24, 33, 64]), batch=st.integers(1, 9),
       residual=st.booleans(), dropout=st.sampled_from([0.0, 0.3]), fraction=st.floats(0.3, 0.9),
       optimizer=st.sampled_from(["sgd", "adam"]))
def test_every_planners_plan_runs_on_random_models(depth: int, width: int, batch: int, residual: bool,
                                                   dropout: float, fraction: float, optimizer: str) -> None:
    torch.manual_seed(0)
    base = _Mlp([13] + [width] * depth + [5], residual, dropout)
    x = torch.randn(batch, 13, generator=torch.Generator().manual_seed(1))
    y = torch.randint(5, (batch,), generator=torch.Generator().manual_seed(2))
    graph = capture(base, (x,), F.cross_entropy, y, optimizer=optimizer, lr=0.01, name="mlp")
    build = lambda: copy.deepcopy(base)  # noqa: E731
    ref = train_eager(graph, build(), (x,), y, F.cross_entropy, ITERS, SEED)
    assert _check_every_planner(graph, fraction, build, (x,), y, F.cross_entropy, ref) >= 6


@pytest.fixture(scope="module")
def transformer():
    from examples.transformer_lm import make

    torch.manual_seed(0)
    base, args, target, loss = make()  # the case: a 2-layer encoder LM, d=256, trained with AdamW
    graph = capture(base, args, loss, target, optimizer="adamw", lr=1e-3, name="transformer-lm")
    build = lambda: copy.deepcopy(base)  # noqa: E731
    return graph, build, args, target, loss, train_eager(graph, build(), args, target, loss, ITERS, SEED)


@pytest.mark.parametrize("fraction", [0.5, 0.7])
def test_the_transformer_runs_under_every_planners_plan(transformer, fraction: float) -> None:
    graph, build, args, target, loss, ref = transformer
    assert _check_every_planner(graph, fraction, build, args, target, loss, ref) >= 6


@pytest.mark.parametrize("share", [0.15, 0.4])
def test_plans_with_the_largest_workspace_held_aside_run(share: float) -> None:
    # a graph stating one large workspace: `hybrid optimize --workspaces-aside`'s plan and the layout's last
    # resort (Belady re-planned with that workspace aside) validate against it and train bitwise like eager
    from hybrid.arena.layout import replan_schedule
    from hybrid.graph.info import largest_workspace
    from hybrid.pipeline import OptimizeOptions, run_optimize

    torch.manual_seed(0)
    base = _Mlp([13, 64, 64, 64, 5], residual=True, dropout=0.3)
    x = torch.randn(6, 13, generator=torch.Generator().manual_seed(1))
    y = torch.randint(5, (6,), generator=torch.Generator().manual_seed(2))
    plain = capture(base, (x,), F.cross_entropy, y, optimizer="adam", lr=0.01, name="mlp")
    peak = unswapped_peak(plain)
    big = max(plain.ops, key=lambda o: sum(plain.tensor(t).bytes for t in o.inputs))
    graph = Graph(plain.name, list(plain.tensors), [dataclasses.replace(o, workspace_bytes=int(share * peak))
                                                   if o.id == big.id else o for o in plain.ops], plain.device, plain.extra)
    assert largest_workspace(graph) == int(share * peak)
    build = lambda: copy.deepcopy(base)  # noqa: E731
    ref = train_eager(graph, build(), (x,), y, F.cross_entropy, ITERS, SEED)
    device = dataclasses.replace(graph.device, memory_bytes=int(unswapped_peak(graph) * 0.9), reserve_bytes=0)
    opts = OptimizeOptions(config=GAConfig(population=6, children=6, seed=1), generations=2, workers=1)
    plans = [run_optimize(graph, device, 600.0, dataclasses.replace(opts, workspaces_aside=True)).plan,
             replan_schedule(graph, run_baseline(graph, device, "belady"), None, workspaces_aside=True)]
    assert "workspaces_aside" in plans[0].planner and "aside" in plans[1].planner["fallback"]
    for plan in plans:
        _runs_like_eager(graph, plan, build, (x,), y, F.cross_entropy, ref)
