"""Placements on part graphs: every scheduler's plan validates, exact is never worse than a heuristic, CP-SAT
equals dynamic programming on chains and brute force on small graphs, and the CPU stand-in of the executor
matches eager inference bitwise."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hybrid.placement.chain import CPU, GPU
from hybrid.placement.cpsat import solve_latency, solve_period
from hybrid.placement.partition import part_graph
from hybrid.placement.schedulers import SCHEDULERS, exact, place
from hybrid.placement.timing import evaluate, latency, link_of, period, to_plan
from hybrid.validator import validate
from tests.placement.random_graphs import random_inference_graph


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 5), st.sampled_from(["latency", "throughput"]))
def test_every_schedulers_placement_is_a_valid_plan_and_exact_is_never_worse(seed, stages, objective):
    g = random_inference_graph(seed, stages)
    pg = part_graph(g, key_only=False)
    link = link_of(g.device)
    placed = {s: place(pg, link, s, objective, time_limit_s=20) for s in SCHEDULERS}
    for s, p in placed.items():
        plan = to_plan(pg, p, g.device)
        report = validate(g, plan)
        assert report.valid, (s, report.violations[:1])
        assert plan.makespan_s == pytest.approx(p.latency_s, rel=1e-12)
    best = placed["exact"]
    key = "latency_s" if objective == "latency" else "period_s"
    if best.status == "optimal":
        for s, p in placed.items():
            assert getattr(best, key) <= getattr(p, key) * (1 + 1e-6) + 1e-9, s


# Fixed examples (derandomize): a few random 9-part graphs take CP-SAT more than its 20 s of deterministic
# work to prove optimal (seed 649, 4 stages: 'feasible'), so free draws made this test fail now and then.
@settings(max_examples=15, deadline=None, derandomize=True)
@given(st.integers(0, 10**6), st.integers(1, 4))
def test_cp_sat_is_at_least_as_good_as_every_device_assignment_in_program_order(seed, stages):
    """Brute force over the 2^n device choices (each timed in program order): CP-SAT, free to reorder too,
    is never above the best of them, and its simulated latency is within rounding of its objective."""
    g = random_inference_graph(seed, stages, max_branches=2)
    pg = part_graph(g, key_only=False)
    if pg.n > 9:
        return
    link = link_of(g.device)
    brute = min(latency(pg, d, link) for d in itertools.product((CPU, GPU), repeat=pg.n))
    sol = solve_latency(pg, link, time_limit_s=20)
    assert sol.status == "optimal"
    assert sol.objective_s <= brute + 1e-9 * (pg.n + len(pg.edges) + 2)
    assert latency(pg, sol.devices, link, sol.starts, sol.copy_starts) <= sol.objective_s + 1e-9 * (pg.n + len(pg.edges) + 2)
    per = solve_period(pg, link, time_limit_s=20)
    assert per.objective_s == pytest.approx(min(period(pg, d, link)
                                                for d in itertools.product((CPU, GPU), repeat=pg.n)), abs=1e-8)


@settings(max_examples=15, deadline=None, derandomize=True)   # fixed examples: CP-SAT must prove each optimal
@given(st.integers(0, 10**6), st.integers(1, 8))
def test_on_a_chain_dynamic_programming_equals_cp_sat_and_the_simulator(seed, stages):
    g = random_inference_graph(seed, stages, chain_only=True)
    pg = part_graph(g, key_only=False)
    assert pg.is_chain
    link = link_of(g.device)
    dp = exact(pg, link)
    assert dp.extra["method"] == "dynamic programming"
    assert dp.latency_s == pytest.approx(dp.model_s, rel=1e-9)      # the chain formula is the simulation
    sol = solve_latency(pg, link, time_limit_s=20)
    assert sol.objective_s == pytest.approx(dp.latency_s, abs=1e-9 * (pg.n + 2))


def test_a_branch_stage_lets_both_devices_work_at_once():
    """Two equal branches, each 1 ms on either device, joined: one on each device beats both on one."""
    from hybrid.graph import Graph

    def op(i, ins, out):
        return {"id": f"o{i}", "kind": "conv", "inputs": ins, "outputs": [out], "time_s": t[i], "cpu_time_s": t[i]}

    t = {0: 1e-6, 1: 1e-3, 2: 1e-3, 3: 1e-6}
    g = Graph.from_json({
        "format": "hybrid-graph/1", "name": "fork",
        "device": {"name": "d", "memory_bytes": 1 << 30, "h2d_bytes_per_s": 1e12, "d2h_bytes_per_s": 1e12,
                   "transfer_latency_s": 0.0},
        "tensors": [{"id": "x", "bytes": 4, "kind": "input", "persistent": True}] +
                   [{"id": f"a{i}", "bytes": 4, "kind": "activation"} for i in range(4)],
        "ops": [op(0, ["x"], "a0"), op(1, ["a0"], "a1"), op(2, ["a0"], "a2"), op(3, ["a1", "a2"], "a3")]})
    pg = part_graph(g, key_only=False)
    assert pg.kind.count("branch") == 2
    link = link_of(g.device)
    best = place(pg, link, "exact")
    assert best.latency_s == pytest.approx(1e-3 + 2e-6, rel=1e-3)
    assert place(pg, link, "all-gpu").latency_s == pytest.approx(2e-3 + 2e-6, rel=1e-3)
    plan = to_plan(pg, best, g.device)
    assert validate(g, plan).valid
    assert {e.stream for e in plan.events if e.op in ("o1", "o2")} == {"cpu", "compute"}


@pytest.mark.torch
@pytest.mark.parametrize("name", ["chain", "inception", "residual"])
def test_the_cpu_stand_in_runs_every_placement_bitwise_like_eager(name):
    torch = pytest.importorskip("torch")
    from executor.placed import eager_outputs, run_placed
    from hybrid.capture import capture
    from tests.placement.models import make

    module, x = make(name)
    g = capture(module, (x,), optimizer=None, device="p2200", name=name)
    ref = eager_outputs(module, (x,))[0]
    pg = part_graph(g, key_only=False)
    link = link_of(g.device)
    mixed = [place(pg, link, s) for s in SCHEDULERS]
    mixed.append(evaluate(pg, tuple(GPU if p % 2 else CPU for p in range(pg.n)), link, "alternate"))
    assert any(0 < p.code.count("G") < pg.n for p in mixed)    # some placement uses both devices
    for p in mixed:
        plan = to_plan(pg, p, g.device)
        assert validate(g, plan).valid
        res = run_placed(g, plan, module, (x,), iters=2)
        assert torch.equal(res.outputs[0], ref), (p.scheduler, p.code)
        assert res.plan_latency_s == plan.makespan_s and len(res.wall_s) == 2   # the prediction beside the clock


def _mixed_plan():
    """A valid placement plan with ops on both devices, and its graph."""
    g = random_inference_graph(11, stages=5, chain_only=True)
    pg = part_graph(g, key_only=False)
    devices = tuple(GPU if p % 2 == 0 else CPU for p in range(pg.n))
    plan = to_plan(pg, evaluate(pg, devices, link_of(g.device), "alternate"), g.device)
    assert validate(g, plan).valid
    return g, plan


def _first_rule(g, plan, **changes):
    import dataclasses

    return validate(g, dataclasses.replace(plan, **changes)).violations[0]


def test_the_validator_reads_the_cpu_stream():
    import dataclasses

    g, plan = _mixed_plan()
    events = plan.events
    i = next(k for k, e in enumerate(events) if e.on_cpu)
    # a cpu compute that lasts longer than the op's cpu_time_s (rule 1)
    bad = list(events)
    bad[i] = dataclasses.replace(events[i], end_s=events[i].end_s + 1.0)
    v = _first_rule(g, plan, events=bad)
    assert v.rule == 1 and "cpu_time_s" in v.message
    # the swap_out that feeds a cpu op removed: its input has no host copy (rule 3)
    j = next(k for k, e in enumerate(events) if e.kind == "swap_out" and any(
        x.on_cpu and e.tensor in g.op(x.op).inputs for x in events if x.kind == "compute"))
    bad = [e if k != j else dataclasses.replace(e, kind="free", end_s=e.start_s, extra={}) for k, e in enumerate(events)]
    v = _first_rule(g, plan, events=bad)
    assert v.rule in (3, 4) and "host copy" in v.message
    # a recompute on the cpu stream (rule 0)
    bad = list(events) + [dataclasses.replace(events[i], recompute=True)]
    assert _first_rule(g, plan, events=bad).rule == 0
    # a cpu compute naming an impl the host does not run (rule 0); 'cpu' is its own name
    bad = list(events)
    bad[i] = dataclasses.replace(events[i], impl="bogus")
    v = _first_rule(g, plan, events=bad)
    assert v.rule == 0 and "'bogus'" in v.message and "cpu_time_s" in v.message
    bad[i] = dataclasses.replace(events[i], impl="cpu")
    assert validate(g, dataclasses.replace(plan, events=bad)).valid
    # two cpu computes at once (rule 1)
    k = next(k for k, e in enumerate(events) if e.on_cpu and k != i)
    d = events[k].end_s - events[k].start_s
    bad = list(events)
    bad[k] = dataclasses.replace(events[k], start_s=events[i].start_s, end_s=events[i].start_s + d)
    v = _first_rule(g, plan, events=bad)
    assert v.rule == 1
    # the plan file round-trips the stream
    from hybrid.plan import Plan

    again = Plan.from_json(json_roundtrip(plan))
    assert [e.on_cpu for e in again.events] == [e.on_cpu for e in events]


def json_roundtrip(plan):
    import json

    return json.loads(plan.dumps())


def test_refinement_refuses_a_plan_with_ops_on_the_host_in_one_line() -> None:
    """CP-SAT refinement walks device plans: a placement plan (ops on the `cpu` stream) is refused naming the
    op, not a KeyError from deep inside the walk."""
    from hybrid.errors import HybridError
    from hybrid.refine import refine

    for seed in range(20):
        g = random_inference_graph(seed, 3)
        pg = part_graph(g, key_only=False)
        plan = to_plan(pg, place(pg, link_of(g.device), "heft", "latency", time_limit_s=5), g.device)
        host = [e.op for e in plan.events if e.kind == "compute" and e.on_cpu]
        if host:
            with pytest.raises(HybridError, match=f"op '{host[0]}' runs on the host"):
                refine(g, plan, time_limit_s=5)
            return
    pytest.skip("no seed placed an op on the host")


def test_greedys_correction_loop_ends_at_the_deadline_with_a_placement_as_good_as_its_start() -> None:
    """`hybrid place` handed greedy (and exact's greedy hint) no deadline: a ResNet-152 at --parts fine ran 5 s
    past --time-limit 1s, and a Ctrl-C in the loop lost every placement (helper-95)."""
    import time

    from hybrid.placement.schedulers import greedy

    g = random_inference_graph(0, 8)
    pg = part_graph(g, key_only=False)
    link = link_of(g.device)
    free = greedy(pg, link)
    start = greedy(pg, link, rounds=0)                 # no pass of the loop: where it starts
    assert free.latency_s < start.latency_s            # the loop gains here (by 7.6%): a stop shows
    stopped = greedy(pg, link, deadline=time.monotonic() - 1)
    assert stopped.devices == start.devices
    assert validate(g, to_plan(pg, stopped, g.device)).valid
