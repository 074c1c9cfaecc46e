"""Property: every plan producer, with each option the other tests leave out, makes plans that validate and run.

The project's rule: every plan any planner produces passes `hybrid.validator.validate`, in property-based tests
on random graphs, and runs in the CPU executor. One test per producer family, its options parametrized; each
example draws a small random net (captured training or inference step: validated, then run in the CPU executor
and compared bitwise with eager PyTorch) and, where the producer is cheap, a small synthetic graph too
(`hybrid.graph.synthetic`: workspaces, implementations, shared parameters; validated only, as no module
computes it). Memories are drawn as a fraction of the unswapped peak (up to a little over it), floored at 1.2x
the largest op (below it nothing that moves whole tensors fits; higher floors where a producer keeps more
resident). A producer may refuse a memory up front (`HybridError`): that draw is skipped (`assume`), but each
test asserts that most draws planned, so none of them passes by refusing everything; an error that calls
itself a bug ("failed validation", "a bug in the model") is a failure, not a refusal. No op takes zero time
in these graphs (dropout's `empty_like` is given a microsecond, `no_zero_time`).

A failure found: the MILP planned one byte over the device memory at a memory one byte short of an aligned
peak (its solver's tolerance; `milp.model.budget_bytes`); `test_milp_one_byte_under_the_unswapped_peak_...` holds
the reproducers.

Searches run on work budgets (`generations=`, `max_windows=`, `node_limit=`), not wall time, so a seed gives
one plan. Shrinking is off: a failing example re-runs every producer per step.
"""
from __future__ import annotations

import copy
import functools
from collections import Counter
from dataclasses import dataclass, replace
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

from executor.api import Executor, execute  # noqa: E402
from executor.check import compare, train_eager  # noqa: E402
from hybrid.capture import capture  # noqa: E402
from hybrid.device import Device, preset  # noqa: E402
from hybrid.errors import HybridError  # noqa: E402
from hybrid.graph import Graph  # noqa: E402
from hybrid.graph.info import largest_op, unswapped_peak  # noqa: E402
from hybrid.graph.synthetic import random_dag, training_graph  # noqa: E402
from hybrid.plan import Plan  # noqa: E402
from hybrid.validator import validate  # noqa: E402
from tests.random_nets import RandomNet  # noqa: E402

pytestmark = pytest.mark.torch

ITERS, SEED = 2, 3


def _settings(n: int) -> settings:
    return settings(max_examples=n, deadline=None, phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------------------------------------------- graphs

@dataclass(frozen=True)
class NetSpec:
    widths: tuple[int, ...]
    acts: tuple[int, ...]
    residual: tuple[bool, ...]
    drop: float
    optimizer: str
    batch: int
    seed: int
    tricks: tuple[int, ...] = ()    # RandomNet.TRICKS per layer

    def module(self) -> RandomNet:
        torch.manual_seed(self.seed)
        return RandomNet(self.widths, self.acts, self.residual, self.drop, self.tricks)

    def batch_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator().manual_seed(self.seed)
        return torch.randn(self.batch, self.widths[0], generator=gen), torch.randint(5, (self.batch,), generator=gen)


@st.composite
def net_specs(draw: Any, depth: tuple[int, int] = (1, 3), widths: tuple[int, ...] = (8, 16, 32),
              dropout: bool = True, tricks: bool = False) -> NetSpec:
    n = draw(st.integers(*depth))
    w = draw(st.sampled_from(widths))
    hidden = tuple(draw(st.sampled_from([w, max(4, w // 2), 2 * w])) for _ in range(n))
    return NetSpec((w, *hidden), tuple(draw(st.integers(0, 2)) for _ in range(n)),
                   tuple(draw(st.booleans()) for _ in range(n)),
                   draw(st.sampled_from([0.0, 0.2])) if dropout else 0.0,
                   draw(st.sampled_from(["sgd", "adam"])), draw(st.sampled_from([4, 16, 48, 96])),
                   draw(st.integers(0, 1000)),
                   tuple(draw(st.integers(1, len(RandomNet.TRICKS) - 1)) for _ in range(n)) if tricks else ())


@dataclass(frozen=True)
class Training:
    """A net's captured training step and eager PyTorch's losses and state after ITERS steps."""
    graph: Graph
    module: RandomNet
    x: torch.Tensor
    y: torch.Tensor
    eager: Any


def no_zero_time(g: Graph) -> Graph:
    """`g` with the ops that take no time (dropout's `empty_like`) given a microsecond: zero-time ops are left
    out of these draws (their layout and MILP are tested elsewhere); the executor does not read times."""
    ops = [o if o.time_s > 0 else replace(o, time_s=1e-6) for o in g.ops]
    return Graph(g.name, list(g.tensors), ops, g.device, g.extra)


@functools.lru_cache(maxsize=None)
def training(spec: NetSpec) -> Training:
    base = spec.module()
    x, y = spec.batch_tensors()
    g = no_zero_time(capture(base, (x,), F.cross_entropy, y, optimizer=spec.optimizer, lr=0.01, name="random-net"))
    return Training(g, base, x, y, train_eager(g, copy.deepcopy(base), (x,), y, F.cross_entropy, ITERS, SEED))


@dataclass(frozen=True)
class Inference:
    graph: Graph
    module: RandomNet
    x: torch.Tensor


@functools.lru_cache(maxsize=None)
def inference(spec: NetSpec) -> Inference:
    module = spec.module().eval()
    x, _ = spec.batch_tensors()
    g = capture(module, (x,), optimizer=None, device="p2200", name="random-net-inference")
    assert all(o.time_s > 0 for o in g.ops)
    return Inference(g, module, x)


@st.composite
def synthetic_graphs(draw: Any, layers: int = 3, dag_ops: int = 10) -> Graph:
    """A small synthetic training graph or random DAG (no zero-time op)."""
    seed = draw(st.integers(0, 10_000))
    if draw(st.booleans()):
        g = random_dag(draw(st.integers(3, dag_ops)), seed=seed)
    else:
        g = training_graph(draw(st.integers(1, layers)), seed=seed, share_params=draw(st.integers(0, 2)),
                           workspace_prob=draw(st.sampled_from([0.0, 0.3])),
                           impls_prob=draw(st.sampled_from([0.0, 0.3])))
    assume(all(o.time_s > 0 for o in g.ops))
    return g


def memory(graph: Graph, fraction: float, align: int, resident: bool = False, op_floor: float = 1.2) -> int:
    """`fraction` of the unswapped peak, floored at `op_floor` times the largest op (size classes round objects
    up: they need more); `resident`: floored at the persistent tensors plus 1.1x the largest op too (vdnn and
    tflms keep parameters and optimizer state resident)."""
    op = largest_op(graph, align)[1]
    floor = int(op_floor * op)
    if resident:
        floor = max(floor, sum(-(-t.bytes // align) * align for t in graph.tensors if t.persistent) + int(1.1 * op))
    return max(int(unswapped_peak(graph, align) * fraction), floor)


def net_device(graph: Graph, fraction: float, align: int = 64, resident: bool = False,
               op_floor: float = 1.2) -> Device:
    return replace(preset("v100-16gb"), memory_bytes=memory(graph, fraction, align, resident, op_floor),
                   reserve_bytes=0, alignment_bytes=align)


@st.composite
def synthetic_devices(draw: Any, graph: Graph, fractions: tuple[float, float], resident: bool = False,
                      op_floor: float = 1.2) -> Device:
    align = draw(st.sampled_from([1, 256, 512]))
    mem = memory(graph, draw(st.floats(*fractions)), align, resident, op_floor)
    reserve = int(mem * draw(st.sampled_from([0.0, 0.1])))
    link = draw(st.sampled_from([1e9, 1.2e10]))
    return Device("d", mem + reserve, link, link * draw(st.sampled_from([0.5, 1.0])),
                  draw(st.sampled_from([0.0, 1e-5])), alignment_bytes=align, reserve_bytes=reserve)


# ---------------------------------------------------------------------------------------------------- checks

BUG_WORDS = ("failed validation", "bug")


class Tally(Counter):
    """Planned and refused draws per graph source; `plans(...)` runs a producer, skipping a refusal."""

    def __init__(self) -> None:
        super().__init__()
        self.why: dict[str, str] = {}   # the first refusal per source

    def plans(self, source: str, make: Callable[[], Plan | None]) -> Plan | None:
        try:
            plan = make()
        except HybridError as e:
            if any(w in str(e) for w in BUG_WORDS):   # the producer's own bug check, not a refusal
                raise
            self[source + " refused"] += 1
            self.why.setdefault(source, str(e)[:200])
            return None
        if plan is None:
            self[source + " refused"] += 1
            return None
        self[source + " planned"] += 1
        return plan

    def check(self, case: "Training", dev: Device, graph: Graph, draw_device: Callable[[], Device],
              make: Callable[[Graph, Device], Plan | None]) -> None:
        """`make` on the drawn net at `dev` (validated, trained like eager) and on the synthetic `graph` at the
        device `draw_device` draws then (validated); a draw both refuse is not counted (hypothesis.assume)."""
        plan = self.plans("net", lambda: make(case.graph, dev))
        if plan is not None:
            trains_like_eager(case, plan)
        sdev = draw_device()
        splan = self.plans("synthetic", lambda: make(graph, sdev))
        if splan is not None:
            valid(graph, splan)
        assume(plan is not None or splan is not None)

    def assert_mostly_planned(self, *sources: str) -> None:
        """Each source planned at least once, and most draws planned: no test passes by refusing everything."""
        planned, refused = (sum(self[f"{s} {w}"] for s in sources) for w in ("planned", "refused"))
        assert all(self[s + " planned"] for s in sources) and refused <= planned, (dict(self), self.why)


def valid(graph: Graph, plan: Plan) -> None:
    report = validate(graph, plan)
    assert report.valid, (plan.planner if not isinstance(plan.planner, dict) else plan.planner.get("name"),
                          report.violations[:2])


def trains_like_eager(case: Training, plan: Plan) -> None:
    """Validates, trains ITERS steps in the CPU executor (sanitized) and compares bitwise with eager."""
    valid(case.graph, plan)
    ex = Executor(case.graph, plan, "cpu", sanitize=True)
    ex.load(copy.deepcopy(case.module), (case.x,), case.y)
    ex.run(ITERS, seed=SEED)
    cmp = compare(ex.losses, ex.state(), case.eager)
    assert cmp.bitwise, (cmp.mismatched[:3], cmp.max_abs_diff)
    stats = ex.runtime.pool.stats
    assert stats.peak_live_bytes <= plan.device.usable_bytes, stats
    if plan.allocation.kind == "arena":
        assert stats.compactions == 0, stats


# ---------------------------------------------------------------------------------------------------- baselines

def _baseline(kind: str) -> Callable[..., Plan]:
    def make(g: Graph, dev: Device, rc: bool, ad: bool) -> Plan:
        from hybrid.swap.baselines import run_baseline

        return run_baseline(g, dev, kind, recompute=rc, addresses=ad)
    return make


def _laid_out_baseline(kind: str) -> Callable[..., Plan]:
    def make(g: Graph, dev: Device, rc: bool, ad: bool) -> Plan:
        from hybrid.pipeline.baselines import lay_out_baseline
        from hybrid.swap.baselines import run_baseline

        plan = lay_out_baseline(g, dev, kind, run_baseline(g, dev, kind, recompute=rc), 5.0, recompute=rc).plan
        assert plan.allocation.kind == "arena" and plan.device == dev, (plan.allocation.kind, plan.device)
        return plan
    return make


BASELINE_PRODUCERS = {"tflms": _baseline("tflms"), "odswap-paper": _baseline("odswap-paper"),
                      "ideal": _baseline("ideal"), "lay_out_baseline vdnn": _laid_out_baseline("vdnn"),
                      "lay_out_baseline tflms": _laid_out_baseline("tflms"),
                      "lay_out_baseline recompute-only": _laid_out_baseline("recompute-only")}


@pytest.mark.parametrize("producer", list(BASELINE_PRODUCERS))
def test_baselines_validate_and_train_like_eager(producer: str) -> None:
    make, tally = BASELINE_PRODUCERS[producer], Tally()
    resident = producer.endswith(("vdnn", "tflms"))

    @_settings(4)
    @given(spec=net_specs(), fraction=st.floats(0.6, 1.05), graph=synthetic_graphs(), data=st.data(),
           recompute=st.booleans(), addresses=st.booleans())
    def prop(spec: NetSpec, fraction: float, graph: Graph, data: Any, recompute: bool, addresses: bool) -> None:
        case = training(spec)
        dev = net_device(case.graph, fraction, resident=resident)
        tally.check(case, dev, graph, lambda: data.draw(synthetic_devices(graph, (0.6, 1.05), resident)),
                    lambda g, d: make(g, d, recompute, addresses))

    prop()
    print(producer, dict(tally))
    tally.assert_mostly_planned("net", "synthetic")


# ---------------------------------------------------------------------------------------------------- swap planner

SWAP_OPTIONS = {"rebind_reruns": dict(rebind_reruns=True, rebind=True), "write_back=False": dict(write_back=False),
                "passes=3": dict(passes=3)}


@st.composite
def planner_options(draw: Any, **fixed: Any) -> Any:
    from hybrid.swap.augmented import PlannerOptions

    drawn = dict(victim=draw(st.sampled_from(["belady", "lru"])), recency=draw(st.sampled_from([0, 2, 8])),
                 overlap=draw(st.booleans()), keep_persistent=draw(st.sampled_from([False, False, True])),
                 passes=draw(st.sampled_from([1, 2, 3])), keep=draw(st.sampled_from(["best", "last"])),
                 lookahead=draw(st.sampled_from([1, 3])), rebind=draw(st.booleans()),
                 write_back=draw(st.booleans()), recompute_ratio=draw(st.sampled_from([0.0, 1.0, 1e6])),
                 recompute_depth=draw(st.sampled_from([1, 3, 6])), rebind_reruns=draw(st.booleans()),
                 long_chains=draw(st.booleans()))
    if fixed.get("rebind_reruns"):   # re-binding reruns needs reruns
        drawn["recompute_ratio"] = draw(st.sampled_from([1.0, 1e6]))
    return PlannerOptions(**{**drawn, **fixed})


def _swap_plan(g: Graph, dev: Device, options: Any, pool: str, order: str, seed: int) -> Plan:
    import numpy as np

    from hybrid.graph.order import depth_first_order, program_order, random_order
    from hybrid.swap.planner import SwapPlanner
    from hybrid.swap.pools import arena_pool, byte_pool, per_size_pool
    from hybrid.swap.quick_plans import merged_class_pool
    from hybrid.swap.to_plan import to_plan

    o = {"program": program_order, "dfs": depth_first_order,
         "random": lambda g: random_order(g, np.random.default_rng(seed))}[order](g)
    if pool == "arena":
        options = replace(options, addresses=True)
    p = {"bytes": lambda: byte_pool(g, dev), "classes": lambda: per_size_pool(g, o, dev),
         "merged": lambda: merged_class_pool(g, dev, o), "arena": lambda: arena_pool(g, dev)}[pool]()
    return to_plan(SwapPlanner(g, dev).plan(o, p, options), {"name": "swap planner",
                                                             "planner_options": options.describe()})


@pytest.mark.parametrize("option", list(SWAP_OPTIONS))
def test_swap_planner_options_validate_and_train_like_eager(option: str) -> None:
    tally = Tally()

    @_settings(6)
    @given(spec=net_specs(), fraction=st.floats(0.6, 1.1), graph=synthetic_graphs(), data=st.data(),
           options=planner_options(**SWAP_OPTIONS[option]),
           pool=st.sampled_from(["bytes", "classes", "merged", "arena"]), order=st.sampled_from(["program", "dfs", "random"]), seed=st.integers(0, 100))
    def prop(spec: NetSpec, fraction: float, graph: Graph, data: Any, options: Any, pool: str, order: str,
             seed: int) -> None:
        case = training(spec)
        dev = net_device(case.graph, fraction, resident=options.keep_persistent, op_floor=1.6)
        tally.check(case, dev, graph, lambda: data.draw(synthetic_devices(graph, (0.6, 1.1), options.keep_persistent, 1.6)),
                    lambda g, d: _swap_plan(g, d, options, pool, order, seed))

    prop()
    print(option, dict(tally), tally.why)
    tally.assert_mostly_planned("net", "synthetic")


def test_nets_that_change_tensors_in_place_train_like_eager_under_plans_that_move_them() -> None:
    """Nets whose layers change their outputs in place (RandomNet.TRICKS: arithmetic, unsqueeze_/squeeze_, t_,
    writes through a strided slice, fill_diagonal_), planned by the swap planner at memories where it swaps
    and reruns: each plan validates and trains bitwise like eager. An in-place transpose_ and an as_strided
    view's offset were captured wrong and showed only once a plan moved the tensor or laid it out elsewhere."""
    tally, moved = Tally(), Counter()

    @_settings(12)
    @given(spec=net_specs(depth=(2, 4), tricks=True), fraction=st.floats(0.35, 0.9),
           options=planner_options(), pool=st.sampled_from(["bytes", "arena"]),
           order=st.sampled_from(["program", "dfs"]))
    def prop(spec: NetSpec, fraction: float, options: Any, pool: str, order: str) -> None:
        case = training(spec)
        dev = net_device(case.graph, fraction, resident=options.keep_persistent, op_floor=1.6)
        plan = tally.plans("net", lambda: _swap_plan(case.graph, dev, options, pool, order, spec.seed))
        assume(plan is not None)
        moved["swaps"] += any(e.kind == "swap_in" for e in plan.events)
        moved["reruns"] += any(e.recompute for e in plan.events)
        trains_like_eager(case, plan)

    prop()
    print(dict(tally), dict(moved), tally.why)
    tally.assert_mostly_planned("net")
    assert moved["swaps"] and moved["reruns"], moved   # the draws moved tensors: the test can fail


# ---------------------------------------------------------------------------------------------------- GA

GA_CONFIGS = {"pool=classes, class_mapping=free": dict(pool="classes", class_mapping="free"),
              "pool=bytes, start=random": dict(pool="bytes", start="random"),
              "pool=both, search=schedule": dict(pool="both", search="schedule"),
              "pool=classes, search=allocation, planner_knobs=False": dict(pool="classes", search="allocation",
                                                                           planner_knobs=False),
              "pool=both, class_mapping=free, start=random": dict(pool="both", class_mapping="free", start="random")}


@pytest.mark.parametrize("config", list(GA_CONFIGS))
def test_ga_configurations_validate_and_train_like_eager(config: str) -> None:
    from ga import GAConfig, optimize
    from ga.encoding import POLICIES
    from hybrid.swap.augmented import PlannerOptions

    tally = Tally()

    @_settings(4)
    @given(spec=net_specs(), fraction=st.floats(0.5, 1.05), graph=synthetic_graphs(), data=st.data(),
           seed=st.integers(0, 100), policies=st.lists(st.sampled_from(POLICIES), min_size=1, max_size=3, unique=True),
           mutation=st.sampled_from([0.1, 0.5, 1.0]), recompute=st.sampled_from([0.0, 1.0]),
           addresses=st.booleans(), rebind_reruns=st.booleans(), long_chains=st.booleans())
    def prop(spec: NetSpec, fraction: float, graph: Graph, data: Any, seed: int, policies: list[str],
             mutation: float, recompute: float, addresses: bool, rebind_reruns: bool, long_chains: bool) -> None:
        cfg = GAConfig(population=4, children=4, seed=seed, policies=tuple(policies), mutation_rate=mutation,
                       schedule_mutation_rate=mutation, **GA_CONFIGS[config])
        opts = PlannerOptions(recompute_ratio=recompute, addresses=addresses, rebind_reruns=rebind_reruns,
                              long_chains=long_chains)

        def search(g: Graph, dev: Device) -> Plan:
            res = optimize(g, dev, cfg, generations=2, options=opts, workers=1)
            plan = res.to_plan()
            assert abs(plan.makespan_s - res.makespan_s) <= 1e-9 * max(1.0, res.makespan_s), \
                (plan.makespan_s, res.makespan_s)   # the plan written is the one the search scored
            return plan

        case = training(spec)
        dev = net_device(case.graph, fraction, op_floor=1.6)
        tally.check(case, dev, graph, lambda: data.draw(synthetic_devices(graph, (0.5, 1.05), op_floor=1.6)),
                    lambda g, d: search(g, d))

    prop()
    print(config, dict(tally), tally.why)
    tally.assert_mostly_planned("net", "synthetic")


# ---------------------------------------------------------------------------------------------------- run_optimize

OPTIMIZE_OPTIONS = {"refine=cpsat": dict(refine="cpsat", refine_mode="after"), "addresses": dict(addresses=True),
                    "no arena (arena_s=None)": dict(arena_s=None), "no headroom": dict(headroom=False),
                    "baselines": dict(baselines=True), "no recompute": dict(recompute=False)}


@pytest.mark.parametrize("option", list(OPTIMIZE_OPTIONS))
def test_run_optimize_options_validate_and_train_like_eager(option: str) -> None:
    from ga import GAConfig
    from hybrid.pipeline import OptimizeOptions, run_optimize
    from hybrid.refine import RefineOptions

    tally = Tally()

    @_settings(3)
    @given(spec=net_specs(), fraction=st.floats(0.6, 1.05), graph=synthetic_graphs(), data=st.data(),
           seed=st.integers(0, 100), pool=st.sampled_from(["both", "classes", "bytes"]))
    def prop(spec: NetSpec, fraction: float, graph: Graph, data: Any, seed: int, pool: str) -> None:
        opts = OptimizeOptions(config=GAConfig(population=4, children=4, seed=seed, pool=pool), generations=2,
                               workers=1, refine_options=RefineOptions(window_time_s=0.1, max_windows=2),
                               **OPTIMIZE_OPTIONS[option])

        def optimized(g: Graph, dev: Device, run: Callable[[Plan], None]) -> Plan:
            res = run_optimize(g, dev, 600.0, opts)
            assert not res.failures, res.failures
            assert res.plan.device == dev
            for p in (res.search_plan, res.refined_plan, res.laid_out_plan):
                if p is not None:
                    valid(g, p)
            for p in (res.baselines.plans.values() if res.baselines is not None else ()):
                run(p)   # every baseline row's plan, laid out as the written plan is
                tally["baseline rows"] += 1
            if opts.arena_s is None:
                assert res.layout is None
            return res.plan

        case = training(spec)
        dev = net_device(case.graph, fraction)
        plan = tally.plans("net", lambda: optimized(case.graph, dev, lambda p: trains_like_eager(case, p)))
        if plan is not None:
            trains_like_eager(case, plan)
        sdev = data.draw(synthetic_devices(graph, (0.6, 1.05)))
        splan = tally.plans("synthetic", lambda: optimized(graph, sdev, lambda p: valid(graph, p)))
        if splan is not None:
            valid(graph, splan)
        assume(plan is not None or splan is not None)

    prop()
    print(option, dict(tally), tally.why)
    tally.assert_mostly_planned("net", "synthetic")
    assert (tally["baseline rows"] > 0) == ("baselines" in OPTIMIZE_OPTIONS[option]), dict(tally)


# ---------------------------------------------------------------------------------------------------- refine

@pytest.mark.parametrize("source", ["address walk (belady, addresses)", "lay_out(belady)",
                                    "lay_out(belady, recompute)"])
def test_refine_relayout_validates_and_trains_like_eager(source: str) -> None:
    from hybrid.arena.layout import lay_out
    from hybrid.refine import RefineOptions, refine
    from hybrid.swap.baselines import run_baseline

    tally = Tally()

    def arena_plan(g: Graph, dev: Device) -> Plan:
        if source.startswith("address walk"):
            plan = run_baseline(g, dev, "belady", addresses=True)
        else:
            rc = "recompute" in source
            plan = lay_out(g, run_baseline(g, dev, "belady", recompute=rc), 5.0, recompute=rc).plan
        valid(g, plan)
        if plan.allocation.kind != "arena":   # the walk found no offsets: a byte budget, nothing to lay out again
            raise HybridError("no arena plan to refine")
        return plan

    @_settings(4)
    @given(spec=net_specs(), fraction=st.floats(0.6, 1.05), graph=synthetic_graphs(), data=st.data(),
           seed=st.integers(0, 100), reorder=st.booleans(), reruns=st.booleans(), windows=st.integers(1, 3))
    def prop(spec: NetSpec, fraction: float, graph: Graph, data: Any, seed: int, reorder: bool, reruns: bool,
             windows: int) -> None:
        ro = RefineOptions(window_time_s=0.1, max_windows=windows, reorder=reorder, reruns=reruns, relayout=True)

        def refined(g: Graph, dev: Device) -> Plan:
            start = arena_plan(g, dev)
            res = refine(g, start, time_limit_s=10, seed=seed, options=ro)
            assert not [n for n in res.notes if "failed validation" in n], res.notes
            assert res.plan.makespan_s <= start.makespan_s * (1 + 1e-12), (res.plan.makespan_s, start.makespan_s)
            assert res.plan.device == start.device
            return res.plan

        case = training(spec)
        dev = net_device(case.graph, fraction)
        tally.check(case, dev, graph, lambda: data.draw(synthetic_devices(graph, (0.6, 1.05))),
                    lambda g, d: refined(g, d))

    prop()
    print(source, dict(tally), tally.why)
    tally.assert_mostly_planned("net", "synthetic")


# ---------------------------------------------------------------------------------------------------- MILP

MILP_CASES = {"str-auto, plan_milp": ("str-auto", {}, True),
              "checkmate-auto, solve_milp": ("checkmate-auto", {}, False),
              "checkmate, plan_milp": ("checkmate", {}, True),
              "mosos, stalls=False, solve_milp": ("mosos", dict(stalls=False), False),
              "mosos, persistent=False, plan_milp": ("mosos", dict(persistent=False), True),
              "str-auto, stalls=False, persistent=False, link=paper, solve_milp":
                  ("str-auto", dict(stalls=False, persistent=False, link="paper"), False)}


@pytest.mark.parametrize("case_name", list(MILP_CASES))
def test_milp_kinds_and_options_validate_and_train_like_eager(case_name: str) -> None:
    from milp.api import KINDS, plan_milp, solve_milp
    from milp.solve import SolveOptions

    kind, changes, laid = MILP_CASES[case_name]
    model = replace(KINDS[kind], **changes)
    resident = not model.manages_persistent   # parameters and optimizer state stay on the device
    tally = Tally()

    @_settings(3)
    @given(spec=net_specs(depth=(1, 2), widths=(4, 8)), fraction=st.floats(0.85, 1.15),
           graph=synthetic_graphs(layers=2, dag_ops=6), data=st.data(), stages=st.sampled_from([10, 14]))
    def prop(spec: NetSpec, fraction: float, graph: Graph, data: Any, stages: int) -> None:
        def solved(g: Graph, dev: Device) -> Plan:
            run = (plan_milp if laid else solve_milp)(g, dev, kind, min(stages, len(g.ops)),
                                                       SolveOptions(time_limit_s=20, gap=0.05, node_limit=200),
                                                       model, require=False)
            if run.plan is None:
                raise HybridError(f"the MILP found no plan: {run.result.status} ({run.result.solver_status})")
            assert run.plan.device == dev
            return run.plan

        case = training(spec)
        dev = net_device(case.graph, fraction, resident=resident)
        tally.check(case, dev, graph, lambda: data.draw(synthetic_devices(graph, (0.85, 1.15), resident)),
                    lambda g, d: solved(g, d))

    prop()
    print(case_name, dict(tally), tally.why)
    tally.assert_mostly_planned("net", "synthetic")


# ---------------------------------------------------------------------------------------------------- placement

PLACEMENTS = [("greedy", "latency"), ("heft", "latency"), ("exact", "latency"), ("greedy", "throughput"),
              ("exact", "throughput")]


@pytest.mark.parametrize("scheduler, objective", PLACEMENTS)
def test_placement_within_a_binding_gpu_memory_validates_and_infers_like_eager(scheduler: str,
                                                                                objective: str) -> None:
    from executor.placed import eager_outputs, run_placed
    from hybrid.placement.partition import part_graph
    from hybrid.placement.schedulers import all_on, place
    from hybrid.placement.timing import link_of, to_plan
    from tests.placement.random_graphs import random_inference_graph

    tally = Tally()

    def placed(source: str, g0: Graph, fraction: float, key_only: bool, align: int) -> tuple[Graph, Plan | None]:
        need = all_on(part_graph(g0, key_only=key_only), link_of(g0.device), "gpu").gpu_bytes
        dev = replace(g0.device, memory_bytes=max(1, int(need * fraction)), reserve_bytes=0, alignment_bytes=align)
        g = Graph(g0.name, g0.tensors, g0.ops, dev, g0.extra)
        pg = part_graph(g, key_only=key_only)
        plan = tally.plans(source, lambda: to_plan(pg, place(pg, link_of(dev), scheduler, objective,
                                                             time_limit_s=10), dev))
        assert dev.usable_bytes < need   # the memory binds: all-GPU does not fit
        if plan is not None and any(e.kind == "compute" and e.stream != "cpu" for e in plan.events):
            tally[source + " on the GPU"] += 1   # a placement using the GPU within the budget
        return g, plan

    @_settings(4)
    @given(spec=net_specs(depth=(2, 4), widths=(64, 128, 256), dropout=False), fraction=st.floats(0.3, 0.95),
           key_only=st.booleans(), seed=st.integers(0, 1000), stages=st.integers(2, 6),
           align=st.sampled_from([1, 512, 4096]))
    def prop(spec: NetSpec, fraction: float, key_only: bool, seed: int, stages: int, align: int) -> None:
        case = inference(spec)
        g, plan = placed("net", case.graph, fraction, key_only, 64)
        if plan is not None:
            valid(g, plan)
            out = run_placed(g, plan, case.module, (case.x,), iters=1).outputs[0]
            assert torch.equal(out, eager_outputs(case.module, (case.x,))[0])
        sg, splan = placed("synthetic", random_inference_graph(seed, stages), fraction, key_only, align)
        if splan is not None:
            valid(sg, splan)
        assume(plan is not None or splan is not None)

    prop()
    print(scheduler, objective, dict(tally), tally.why)
    tally.assert_mostly_planned("net", "synthetic")
    assert tally["net on the GPU"] + tally["synthetic on the GPU"] > 0, dict(tally)


# ---------------------------------------------------------------------------------------------------- serve

@pytest.mark.parametrize("planner", ["belady", "ga"])
def test_serve_swap_plans_validate_and_infer_like_eager(planner: str) -> None:
    from hybrid.serve.costs import swap_plan
    from tests.placement.random_graphs import random_inference_graph

    tally = Tally()

    @_settings(4)
    @given(spec=net_specs(depth=(1, 3), dropout=False), fraction=st.floats(0.4, 1.0), seed=st.integers(0, 1000),
           stages=st.integers(2, 6))
    def prop(spec: NetSpec, fraction: float, seed: int, stages: int) -> None:
        case = inference(spec)
        g = case.graph
        plan = tally.plans("net", lambda: swap_plan(g, g.device, memory(g, fraction, g.device.alignment_bytes),
                                                    planner=planner, generations=2, seed=seed))
        if plan is not None:
            valid(g, plan)
            res = execute(g, plan, case.module, (case.x,), iters=2, device="cpu", check=True)
            assert res.comparison is not None and res.comparison.bitwise, res.comparison
        sg = random_inference_graph(seed, stages)
        splan = tally.plans("synthetic", lambda: swap_plan(sg, sg.device, memory(sg, fraction, 1), planner=planner,
                                                           generations=2, seed=seed))
        if splan is not None:
            valid(sg, splan)
        assume(plan is not None or splan is not None)

    prop()
    print(planner, dict(tally), tally.why)
    tally.assert_mostly_planned("net", "synthetic")


# The edge the MILP property found with fresh draws (fraction 0.99999): a memory one byte short of the unswapped
# peak (a multiple of the alignment), where the MILP's plan needed exactly that multiple: its memory rows in MiB
# let HiGHS's feasibility tolerance (1e-6 MiB, about a byte) through, and decode refused the plan (DecodeError,
# 'a bug in the model'), or the start plan was written instead. Fixed nets, so each case runs the same every time.
ONE_BYTE_UNDER = [
    pytest.param("mosos", {}, False, NetSpec((8, 8, 16), (0, 0), (False, True), 0.2, "sgd", 48, 120),
                 id="mosos-defaults"),
    pytest.param("mosos", dict(stalls=False), False, NetSpec((4, 4), (0,), (False,), 0.0, "sgd", 4, 0),
                 id="mosos-stalls=False"),
    pytest.param("mosos", dict(persistent=False), True, NetSpec((4, 4), (0,), (False,), 0.0, "sgd", 4, 0),
                 id="mosos-persistent=False-plan_milp"),
    pytest.param("str-auto", dict(stalls=False, persistent=False, link="paper"), False,
                 NetSpec((4, 4, 8), (0, 2), (True, True), 0.0, "adam", 4, 869), id="str-auto-paper"),
]


@pytest.mark.parametrize("kind, changes, laid, spec", ONE_BYTE_UNDER)
def test_milp_one_byte_under_the_unswapped_peak_validates_and_trains_like_eager(kind: str, changes: dict,
                                                                                laid: bool, spec: NetSpec) -> None:
    from milp.api import KINDS, plan_milp, solve_milp
    from milp.solve import SolveOptions

    case = training(spec)
    assert all(o.time_s > 0 for o in case.graph.ops)
    dev = replace(net_device(case.graph, 1.0), memory_bytes=unswapped_peak(case.graph, 64) - 1)
    run = (plan_milp if laid else solve_milp)(case.graph, dev, kind, 10,
                                              SolveOptions(time_limit_s=20, gap=0.05, node_limit=200),
                                              replace(KINDS[kind], **changes), require=False)
    assert run.plan is not None, run.result.status
    assert run.milp_plan is not None and validate(case.graph, run.milp_plan).valid   # its own plan decoded
    trains_like_eager(case, run.plan)
