"""graph_bound (hybrid.bounds): below the makespan of every plan of a graph, whatever its schedule, memory
use, residents or reruns; above the ideal where activations cannot all fit; exact on small hand examples."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ga import GAConfig, optimize
from hybrid.device import Device
from hybrid.errors import InfeasibleError
from hybrid.graph import Graph, Op, Tensor
from hybrid.graph.info import largest_op, persistent_bound, unswapped_peak
from hybrid.graph.order import program_order, random_order
from hybrid.graph.synthetic import random_dag, training_graph
from hybrid.bounds import graph_bound, schedule_bound
from hybrid.refine import RefineOptions, refine
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.baselines import BASELINES, run_baseline
from hybrid.validator import check

MIB, MS = 1 << 20, 1e-3
BW = 3 * MIB / (2 * MS)  # 1.5 MiB per ms


def _graph(memory_mib: int, a_reader_first: bool = False) -> Graph:
    """op0 writes a (4 MiB) and x (1 MiB); op1 reads x (or nothing) and needs 9 MiB more; op2 reads a and b."""
    ins1 = () if a_reader_first else ("x",)
    return Graph("bound", [Tensor("a", 4 * MIB), Tensor("x", MIB), Tensor("b", MIB), Tensor("c", MIB)],
                 [Op("op0", "forward", (), ("a", "x"), MS), Op("op1", "forward", ins1, ("b",), MS, workspace_bytes=8 * MIB),
                  Op("op2", "forward", ("a", "b", "x"), ("c",), MS)], Device("d", memory_mib * MIB, BW, BW, 0.0))


def test_bytes_an_ancestor_wrote_for_a_descendant_must_move():
    """At op1 (after op0 in every order) a and x are live and op1 needs x + b + 8 MiB of 11 MiB: 3 MiB of a are
    off the device, copied out after op0 (1 ms) and back before op2 (1 ms of compute after it):
    (1 + 2) + max(2, 2 + 1) ms; by rerunning op0 instead (1 ms for a's 4 MiB) some of it: 3 + 6/11 ms."""
    g = _graph(11)
    assert graph_bound(g, g.device, recompute=False) == pytest.approx(6 * MS)
    assert graph_bound(g, g.device, recompute=True) == pytest.approx((3 + 6 / 11) * MS)
    roomy = replace(g.device, memory_bytes=1 << 40)
    assert graph_bound(g, roomy) == pytest.approx(3 * MS)  # nothing has to move: compute alone


def test_an_order_that_avoids_the_overlap_is_allowed_for():
    """With op1 independent of op0 it can run first, before a exists: no bytes must move, whatever the
    program order's schedule bound says."""
    g = _graph(10, a_reader_first=True)
    plan = run_baseline(g, g.device, "belady")
    assert schedule_bound(g, plan) > 4 * MS   # the program order runs op0 first: a must move
    assert graph_bound(g, g.device, recompute=False) == pytest.approx(3 * MS)
    swapped = run_baseline(g, g.device, "belady", schedule=np.array([1, 0, 2]))
    check(g, swapped)
    assert swapped.makespan_s == pytest.approx(3 * MS)  # and a plan reaches it


def test_infinite_where_an_op_alone_does_not_fit():
    """op1 reads x and writes b with 8 MiB of workspace: 10 MiB at once, whatever else is off the device. Below
    that no plan runs, so no time bounds them (it was a finite figure beside planners that refuse)."""
    g = _graph(10)
    assert np.isfinite(graph_bound(g, g.device))
    for rc in (True, False):
        assert graph_bound(g, replace(g.device, memory_bytes=10 * MIB - 1), recompute=rc) == float("inf")
    with pytest.raises(InfeasibleError):
        run_baseline(g, replace(g.device, memory_bytes=10 * MIB - 1), "belady")


def _plans(g: Graph, dev: Device, seed: int) -> list:
    rng = np.random.default_rng(seed)
    plans = []
    for order in (None, random_order(g, rng)):
        for kind in BASELINES:
            for rc in (False, True) if kind == "belady" else (False,):
                try:
                    plans.append(run_baseline(g, dev, kind, order, recompute=rc))
                except InfeasibleError:
                    pass
    try:
        for rc in (False, True):
            r = optimize(g, dev, GAConfig(population=6, children=6, seed=seed), generations=2,
                         options=PlannerOptions(recompute_ratio=1.0 if rc else 0.0))
            plans.append(r.to_plan())
    except InfeasibleError:
        pass
    return plans


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), n=st.integers(2, 40), frac=st.floats(0.15, 1.0),
       kind=st.sampled_from(["random", "training"]), link=st.sampled_from([1e8, 1e9, 1e10]))
def test_below_every_plan_on_random_graphs(seed, n, frac, kind, link):
    g = random_dag(n, seed=seed) if kind == "random" else training_graph(max(1, n // 3), seed=seed,
                                                                          workspace_prob=0.3, impls_prob=0.3)
    # at least what the hungriest op needs (aligned), so most examples have plans to check
    dev = Device("d", max(int(unswapped_peak(g) * frac), int(largest_op(g, 256)[1] * 1.2)), link, link * 0.7, 0.0,
                 alignment_bytes=256)
    b_swap, b_rc = graph_bound(g, dev, recompute=False), graph_bound(g, dev, recompute=True)
    assert persistent_bound(g, dev) <= b_rc <= b_swap * (1 + 1e-12)
    plans = _plans(g, dev, seed)
    assert any(p.device == dev for p in plans)  # belady always fits this memory
    for plan in plans:
        check(g, plan)
        if plan.device != dev:  # the ideal baseline's unlimited device
            assert graph_bound(g, plan.device) <= plan.makespan_s * (1 + 1e-9)
            continue
        assert b_rc <= plan.makespan_s * (1 + 1e-9), plan.planner.get("name")
        if not any(e.kind == "compute" and e.recompute for e in plan.events):
            assert b_swap <= plan.makespan_s * (1 + 1e-9), plan.planner.get("name")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000))
def test_below_refined_plans(seed):
    rng = np.random.default_rng(seed)
    g = training_graph(int(rng.integers(4, 12)), seed=seed, workspace_prob=0.3,
                       device=Device("s", int(rng.integers(14, 48)) << 20, 12e9, float(rng.choice([6e9, 12e9])), 0.0))
    try:
        plan = run_baseline(g, g.device, "belady", random_order(g, rng))
    except InfeasibleError:
        return
    res = refine(g, plan, time_limit_s=20, seed=seed, options=RefineOptions(window_time_s=0.2, max_windows=4))
    check(g, res.plan)
    assert graph_bound(g, g.device, recompute=False) <= res.plan.makespan_s * (1 + 1e-9)


def test_activations_raise_it_above_the_ideal_on_a_long_chain():
    g = training_graph(24, seed=1)
    dev = replace(g.device, memory_bytes=unswapped_peak(g) // 4, reserve_bytes=0,
                  h2d_bytes_per_s=g.device.h2d_bytes_per_s / 50, d2h_bytes_per_s=g.device.d2h_bytes_per_s / 50)
    ideal = float(g.arrays.op_time.sum())
    assert persistent_bound(g, dev) == pytest.approx(ideal)
    assert graph_bound(g, dev, recompute=False) > ideal * 1.05
    assert graph_bound(g, dev) >= ideal


def test_info_leaves_the_activation_bounds_to_hybrid_bounds():
    """hybrid.graph.info cannot import hybrid.bounds (that would close an import cycle): graph_info leaves the
    four bounds that count activations at None (not computed) and with_bounds fills them from graph_bound and
    activation_bound, each at least the persistent-tensor bound."""
    from hybrid.bounds import activation_bound, with_bounds
    from hybrid.graph.info import graph_info

    g = _graph(11)
    info = graph_info(g, g.device)
    assert (info.graph_swap_bound_s, info.graph_bound_s, info.program_order_swap_bound_s,
            info.program_order_recompute_bound_s) == (None,) * 4
    full = with_bounds(info, g, g.device)
    assert full.graph_swap_bound_s == pytest.approx(6 * MS) == graph_bound(g, g.device, recompute=False)
    assert full.graph_bound_s == pytest.approx((3 + 6 / 11) * MS) == graph_bound(g, g.device, recompute=True)
    order = program_order(g)
    # a narrower set of plans never shows a figure below a wider set's
    rc = max(full.graph_bound_s, activation_bound(g, g.device, order, recompute=True))
    assert full.program_order_recompute_bound_s == rc
    assert full.program_order_swap_bound_s == max(rc, full.graph_swap_bound_s,
                                                  activation_bound(g, g.device, order, recompute=False))
    assert replace(full, graph_swap_bound_s=None, graph_bound_s=None, program_order_swap_bound_s=None,
                   program_order_recompute_bound_s=None) == info


def test_info_json_names_the_devices_memory_and_what_a_plan_may_fill(tmp_path) -> None:
    import json

    from click.testing import CliRunner

    from hybrid.cli.main import cli
    from hybrid.graph.synthetic import training_graph

    path = tmp_path / "g.json"
    training_graph(4, seed=0).save(path)
    r = CliRunner().invoke(cli, ["info", "--graph", str(path), "--device", "v100-16gb", "--json"])
    d = json.loads(r.output)
    assert d["memory_bytes"] == 16 << 30 and d["usable_bytes"] == 15 << 30   # as the formats' device block


def test_info_names_the_ideal_of_the_default_and_of_the_fastest_implementations() -> None:
    """The bounds assume each op's fastest implementation: an ideal of the default ones alone read above them
    (vgg16: 'ideal (compute only) 11.52 ms', 'lower bound ... 11.1 ms')."""
    from dataclasses import replace as dc_replace

    from hybrid.graph.info import graph_info

    g = _graph(11)
    info = graph_info(g, g.device)
    assert info.fastest_ideal_s == pytest.approx(info.ideal_s)   # one implementation per op: one ideal
    assert [k for k, _ in info.rows() if k.startswith("ideal")] == ["ideal (compute only)"]
    faster = dc_replace(info, fastest_ideal_s=0.5 * info.ideal_s)
    assert [k for k, _ in faster.rows() if k.startswith("ideal")] == [
        "ideal (compute only, default implementations)", "ideal (compute only, fastest implementations)"]
