"""MO-SOS with persistent tensors managed, a start plan, the link-share rule and the refusal when nothing fits."""
from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph, Impl, Op, Tensor
from hybrid.graph.info import unswapped_peak
from hybrid.graph.synthetic import training_graph
from hybrid.validator import validate
from milp.api import belady_start, plan_milp, prepare_start, solve_milp
from milp.decode import _events, _plan, actions, decode, resident_at_start
from milp.model import ModelOptions, Values, build_model
from milp.solve import SolveOptions, solve
from milp.stages import build_problem, memory_refusal
from tests.milp.test_model import _minimal_keep

MB = 1 << 20
EXACT = SolveOptions(time_limit_s=60, gap=0.0)


def _persistent_graph() -> Graph:
    """w0, w1 persistent; pre() -> a0; g0(a0, w0) -> b0; f1(b0, w1) -> a1 with a lean impl (4 ms) and a fast
    one (1 ms) needing 4 MiB of workspace; mid(a1) -> c1; f2(c1, w0) -> a2; upd(a2, w1) updates w1 in place.
    With both weights on the device the fast impl does not fit in 13 MiB; with w0 on the host while f1 runs
    (prefetched for g0, dropped, prefetched again for f2) it does."""
    tensors = [Tensor("w0", 4 * MB, "param", True), Tensor("w1", 4 * MB, "param", True),
               Tensor("a0", MB), Tensor("b0", MB), Tensor("a1", MB), Tensor("c1", MB), Tensor("a2", MB)]
    ops = [Op("pre", "fill", (), ("a0",), 2e-3),
           Op("g0", "mm", ("a0", "w0"), ("b0",), 2e-3),
           Op("f1", "mm", ("b0", "w1"), ("a1",), 4e-3, 0, (Impl("lean", 4e-3, 0), Impl("fast", 1e-3, 4 * MB))),
           Op("mid", "relu", ("a1",), ("c1",), 1e-3),
           Op("f2", "mm", ("c1", "w0"), ("a2",), 2e-3),
           Op("upd", "sgd", ("a2", "w1"), (), 1e-3, updates=("w1",))]
    return Graph("persistent", tensors, ops, Device("t", 13 * MB, 64e9, 64e9, 0.0, alignment_bytes=512))


def _derived_keep(model, j: int, resident: bool, O: set, P: set) -> set[tuple[int, int]] | None:
    """S of persistent tensor j from its start residency and copies: kept into stage t iff it can be there
    (kept, landed, not offloaded) and is wanted before a prefetch brings it back (a read, an offload, or the
    end if resident at the start). None if a wanted tensor cannot be there."""
    pb = model.problem
    n = pb.n
    S: set[tuple[int, int]] = set()
    reads = set(pb.readers[j])
    lands = {model.sf_pre[k] + 1 for k in P}
    offs = {x for (x, _) in O}
    if resident:
        S.add((0, j))
    for t in range(1, n + 1):
        avail = ((t - 1, j) in S or t in lands) and (t - 1) not in offs
        wanted = False
        for d in range(t, n + 1):
            if d in lands and d > t:
                break
            if d in reads or d in offs or (d == n and resident):
                wanted = True
                break
        if wanted and not avail:
            return None
        if wanted:
            S.add((t, j))
    if resident and (n, j) not in S:
        return None
    return S


def _brute_force_persistent(model) -> float | None:
    """Least compute time over every impl choice x, per persistent tensor, its start residency, at most one
    offload and at most two prefetches (the model's own copy variables), each decoded and judged by the
    project's validator (independent of the model's constraints)."""
    pb = model.problem
    g = pb.graph
    per_tensor = []
    for j in sorted(pb.persistent):
        os_ = [()] + [(k,) for k in model.O if k[1] == j]
        pj = [k for k in model.P if k[1] == j]
        ps = [()] + [(k,) for k in pj] + list(itertools.combinations(pj, 2))
        opts = []
        for res in (False, True):
            for o in os_:
                for p in ps:
                    S = _derived_keep(model, j, res, set(o), set(p))
                    if S is not None:
                        opts.append((set(o), set(p), S))
        per_tensor.append(opts)
    nonp = {(t, j) for (t, j) in _minimal_keep(model, set()) if j not in pb.persistent}  # no reruns here
    impl_sets = sorted(itertools.product(*[range(len(nd.impls)) for nd in pb.nodes]),
                       key=lambda c: sum(pb.nodes[q].impls[v].time_s for q, v in enumerate(c)))
    for impls in impl_sets:
        R = frozenset((q, q, impls[q]) for q in range(pb.n))
        for combo in itertools.product(*per_tensor):
            O = set().union(*(c[0] for c in combo))
            P = set().union(*(c[1] for c in combo))
            S = set().union(*(c[2] for c in combo))
            vals = Values(R, frozenset(S | nonp), frozenset(O), frozenset(P))
            plan = _plan(model, _events(g, pb.device, actions(model, vals)), {}, {}, resident_at_start(model, vals))
            if validate(g, plan).valid:
                return sum(pb.nodes[q].impls[v].time_s for q, v in enumerate(impls))
    return None


def test_persistent_tensors_managed_equals_brute_force() -> None:
    g = _persistent_graph()
    opts = ModelOptions(recompute=False, stalls=False)
    m = build_model(build_problem(g, g.device, manage_persistent=True), opts)
    r = solve(m, EXACT)
    brute = _brute_force_persistent(m)
    assert brute is not None and r.status == "optimal"
    assert r.objective_s == pytest.approx(brute, rel=1e-9)
    assert r.objective_s == pytest.approx(9e-3)      # the fast impl: w0 is on the host while f1 runs
    plan = decode(m, r.values, ilp_objective_s=r.objective_s)
    assert validate(g, plan).valid
    assert any(e.kind == "compute" and e.op == "f1" and e.impl == "fast" for e in plan.events)
    # activations only (the paper): both weights stay, the fast impl does not fit
    m2 = build_model(build_problem(g, g.device, manage_persistent=False), ModelOptions(recompute=False, stalls=False))
    r2 = solve(m2, EXACT)
    assert r2.status == "optimal" and r2.objective_s == pytest.approx(12e-3)


@pytest.mark.parametrize("mem_mb", [7, 10, 12])
def test_persistent_brute_force_when_weights_must_move(mem_mb: int) -> None:
    g = _persistent_graph()
    dev = replace(g.device, memory_bytes=mem_mb * MB)
    m = build_model(build_problem(g, dev, manage_persistent=True), ModelOptions(recompute=False, stalls=False))
    r = solve(m, EXACT)
    brute = _brute_force_persistent(m)
    if brute is None:
        assert r.status == "infeasible"
    else:
        assert r.status == "optimal" and r.objective_s == pytest.approx(brute, rel=1e-9)
        assert validate(g, decode(m, r.values)).valid


def test_updated_parameter_is_written_back_when_it_ends_on_the_host() -> None:
    # the update on w0, the weight the plans keep on the host (w1, updated before, stayed resident at every
    # memory that fits, so the write-back below was never checked)
    g = _persistent_graph()
    ops = [replace(o, inputs=("a2", "w0"), updates=("w0",)) if o.id == "upd" else o for o in g.ops]
    g = Graph(g.name, list(g.tensors), ops, g.device)
    dev = replace(g.device, memory_bytes=12 * MB)
    run = plan_milp(g, dev, "mosos", None, EXACT, ModelOptions(recompute=False, stalls=False))
    assert run.plan is not None and validate(g, run.plan).valid
    ev = run.plan.events
    assert "w0" not in run.plan.resident_at_start
    upd = max(e.end_s for e in ev if e.kind == "compute" and e.op == "upd")
    assert any(e.kind == "swap_out" and e.tensor == "w0" and e.start_s >= upd - 1e-12 for e in ev)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layers=st.integers(2, 3), seed=st.integers(0, 50), frac=st.sampled_from([0.95, 0.85, 0.75, 0.65]),
       link=st.sampled_from(["bandwidth", "paper"]))
def test_written_plan_is_never_slower_than_the_start(layers: int, seed: int, frac: float, link: str) -> None:
    g = training_graph(layers, seed=seed, impls_prob=0.5, workspace_prob=0.3)
    dev = replace(g.device, memory_bytes=max(1, int(unswapped_peak(g) * frac)))
    start = belady_start(g, dev)
    if start is None:
        return
    so = SolveOptions(time_limit_s=10, gap=0.01, node_limit=200)   # caps the re-solves (14-48 s at 30 s)
    prepared = prepare_start(g, dev, start)
    run = plan_milp(g, dev, "mosos", None, so, ModelOptions(link=link), start_plan=prepared, start_name="belady")
    assert run.plan is not None
    assert validate(g, run.plan).valid
    assert run.written in ("milp", "start")
    # never slower than the start as it is written (laid out, re-planned with less memory where its copies do
    # not lay out at its own times), and a plan with offsets is preferred to a byte budget
    written = prepared.written
    if run.written == "start":
        assert run.plan is written
    else:
        laid, start_laid = run.plan.allocation.kind == "arena", written.allocation.kind == "arena"
        assert laid >= start_laid
        if laid == start_laid:
            assert run.plan.makespan_s <= written.makespan_s * (1 + 1e-9)
        assert run.plan.makespan_s in (run.milp_makespan_s, run.resolve_makespan_s)   # the first solve, or a re-solve
    if written.allocation.kind == "arena":
        assert run.plan.allocation.kind == "arena"


def test_link_shares_admit_two_copies_in_one_stage() -> None:
    """Two offloads issued together: the paper's rule refuses it, the link-share rule takes it when the
    link carries both within their windows."""
    g = training_graph(3, seed=0, impls_prob=0.5)
    dev = replace(g.device, memory_bytes=int(unswapped_peak(g) * 0.8))
    res = {}
    for link in ("paper", "bandwidth"):
        m = build_model(build_problem(g, dev, manage_persistent=True), ModelOptions(link=link))
        res[link] = solve(m, EXACT)
    assert res["bandwidth"].status == "optimal"
    if res["paper"].status == "optimal":
        assert res["bandwidth"].objective_s <= res["paper"].objective_s * (1 + 1e-9)


def test_refusal_names_the_stage_and_the_memory_that_suffices() -> None:
    g = _persistent_graph()
    tight = replace(g.device, memory_bytes=5 * MB)      # g0 alone needs w0 + a0 + b0 = 6 MiB (f1 too: the first)
    msg = memory_refusal(g, tight, ModelOptions())
    assert msg is not None and "stage 1" in msg and "'g0'" in msg and "w0 (4 MiB)" in msg
    need = int(msg.split("at least ")[1].split("B")[0])
    assert memory_refusal(g, replace(g.device, memory_bytes=need), ModelOptions()) is None
    assert memory_refusal(g, replace(g.device, memory_bytes=need - 1), ModelOptions()) is not None
    # activations only: the persistent tensors count on top
    assert memory_refusal(g, replace(g.device, memory_bytes=need), ModelOptions(persistent=False)) is not None


def test_checkmate_start_carries_over_to_managed_persistent_tensors() -> None:
    """A Checkmate-Auto solution (persistent tensors resident) starts MO-SOS with persistent tensors managed
    (resident throughout there too): stopped at its first node, HiGHS has an incumbent at least that good."""
    from milp.solve import start_of

    g = training_graph(4, seed=1, impls_prob=0.6, workspace_prob=0.3)
    dev = replace(g.device, memory_bytes=int(unswapped_peak(g) * 0.9))
    mc = build_model(build_problem(g, dev), ModelOptions(offload=False, impl_choice=False))
    rc = solve(mc, EXACT)
    assert rc.status == "optimal"
    mm = build_model(build_problem(g, dev, manage_persistent=True), ModelOptions())
    r = solve(mm, SolveOptions(time_limit_s=60, gap=0.0, node_limit=1), start_of(mm, rc.values))
    assert r.values is not None and r.objective_s <= rc.objective_s * (1 + 1e-9)


def test_cbc_takes_the_start_too() -> None:
    # CBC reads the start (its .mst file), builds a solution from it, and proves optimality; the MILP's plan does
    # not lay out, none of the re-solves' plans does either, and the start, laid out, is written (seed 3 at 0.8
    # took the same path in 20 s)
    g = training_graph(3, seed=9, impls_prob=0.5)
    dev = replace(g.device, memory_bytes=int(unswapped_peak(g) * 0.85))
    start = belady_start(g, dev)
    assert start is not None
    run = plan_milp(g, dev, "mosos", None, SolveOptions("cbc", 60, 0.0), start_plan=start, start_name="belady")
    assert run.result.status == "optimal" and run.plan is not None and validate(g, run.plan).valid
    assert run.plan.makespan_s <= start.makespan_s * (1 + 1e-9)
    # and uses it: with its preprocessing on, CBC read the start and said "mipstart values could not be used to
    # build a solution" (HiGHS finds the same start feasible)
    assert run.result.start_used is True


@pytest.mark.parametrize("seed", range(4))
def test_a_decoded_plan_reads_back_as_a_feasible_start(seed: int) -> None:
    """The MILP's own (simulated) plan, read back by milp.start, satisfies every constraint of the model
    that involves only binaries, and as a start HiGHS keeps an incumbent at least as good."""
    from milp.start import binary_start, values_of_plan

    g = training_graph(3, seed=seed, impls_prob=0.5)
    dev = replace(g.device, memory_bytes=int(unswapped_peak(g) * 0.9))
    first = solve_milp(g, dev, "mosos", None, EXACT)    # as the model counts it (plan_milp may re-solve to lay out)
    m = build_model(build_problem(g, dev, manage_persistent=True), ModelOptions())
    sm = values_of_plan(m, first.plan)
    assert sm.unmapped == 0
    b = binary_start(m, sm.values)
    for v in m.lp.variables():
        v.varValue = b.get(v.name)
    bad = [c.name for c in m.lp.constraints()
           if all(v.varValue is not None for v in c.keys()) and not c.valid(1e-6)]
    assert bad == []
    # 5 s: the solve stopped at its first node takes well under a second; the re-solves with less memory that
    # follow where its plan does not lay out (up to 8 s with 60 s, no part of what is checked) are skipped
    again = plan_milp(g, dev, "mosos", None, SolveOptions(time_limit_s=5, gap=0.0, node_limit=1),
                      start_plan=first.plan)
    assert again.result.objective_s is not None
    assert again.result.objective_s <= first.result.objective_s * (1 + 1e-9)


def test_stage_times_follow_the_start_and_only_lengthen_windows() -> None:
    from hybrid.graph.order import from_ids
    from milp.start import stage_times

    g = training_graph(3, seed=1, impls_prob=0.5)
    dev = replace(g.device, memory_bytes=int(unswapped_peak(g) * 0.8))
    sp = belady_start(g, dev)
    assert sp is not None
    pb = build_problem(g, dev, order=from_ids(g, sp.schedule, "start"), manage_persistent=True)
    times = stage_times(pb, sp)
    assert len(times) == pb.n and min(times) >= 0
    assert sum(times) == pytest.approx(max(e.end_s for e in sp.events if e.kind == "compute" and not e.recompute))
    plain = build_model(pb, ModelOptions())
    timed = build_model(pb, ModelOptions(), stage_times=times)
    assert timed.tau == [max(a, b) for a, b in zip(plain.tau, times)]
    with pytest.raises(HybridError, match="stage times"):
        build_model(pb, ModelOptions(), stage_times=times[1:])


def test_start_violations_name_what_a_start_breaks() -> None:
    """The solver's own solution breaks nothing (memory included: U follows from the binaries); the same
    solution with every kept tensor dropped breaks the reads that needed them."""
    from milp.start import start_violations

    g = training_graph(3, seed=2, impls_prob=0.5)
    dev = replace(g.device, memory_bytes=int(unswapped_peak(g) * 0.8))
    first = plan_milp(g, dev, "mosos", None, EXACT)
    m = build_model(build_problem(g, dev, manage_persistent=True), ModelOptions())
    vals = first.values
    assert vals is not None and vals.S
    assert start_violations(m, vals) == {}
    broken = start_violations(m, replace(vals, S=frozenset()))
    assert broken.get("inputs readable [4]", 0) > 0


def test_impl_worth_is_the_fastest_against_the_default_ideal() -> None:
    from benchmarks.milp import impl_worth

    w = impl_worth(_persistent_graph())   # f1: default (lean) 4 ms, fastest 1 ms; 12 ms of ops in all
    assert w["ops with impls"] == 1
    assert w["ideal, default impls (s)"] == pytest.approx(12e-3)
    assert w["ideal, fastest impls (s)"] == pytest.approx(9e-3)
    assert w["fastest/default - 1"] == pytest.approx(-0.25)


def test_a_start_whose_copies_do_not_lay_out_is_replanned_and_written_with_offsets() -> None:
    # the README's graph at 64 MiB: Belady's start is 7.5% over the arena at its own times; it was written as a
    # byte budget (the executor compacting at run time), now re-planned with less memory as `hybrid optimize`
    # lays a plan out, and the report says how
    from pathlib import Path

    from hybrid.device import preset

    g = Graph.load(Path(__file__).resolve().parents[2] / "examples" / "resnet18-b32.json")
    dev = replace(preset("v100-16gb"), memory_bytes=64 * 2 ** 20, reserve_bytes=0)
    prepared = prepare_start(g, dev, belady_start(g, dev))
    assert prepared.auto.allocation.kind == "unconstrained"
    w = prepared.written
    assert w.allocation.kind == "arena" and validate(g, w).valid and w.device == dev
    assert "re-planned" in w.planner["layout"] and w.makespan_s >= prepared.auto.makespan_s
    # the recompute-only kinds (--no-offload) take no re-plan: Belady's would add copies their plans must not have
    kept = prepare_start(g, dev, belady_start(g, dev), replan=False).written
    assert kept.allocation.kind == "unconstrained" and "layout" not in kept.planner


def test_a_placement_plan_as_start_is_refused_in_one_line() -> None:
    """Its host ops' outputs have no device copy: the start's re-plan raised KeyError 'convolution' (a new user's
    walkthrough, helper-95)."""
    from hybrid.placement.partition import part_graph
    from hybrid.placement.schedulers import place
    from hybrid.placement.timing import link_of, to_plan
    from tests.placement.random_graphs import random_inference_graph

    g = random_inference_graph(3, 3)
    pg = part_graph(g, key_only=False)
    p = place(pg, link_of(g.device), "all-cpu", "latency", time_limit_s=5)
    plan = to_plan(pg, p, g.device)
    assert any(e.on_cpu for e in plan.events)
    with pytest.raises(HybridError, match=r"^--start: op '.*' runs on the host \(a placement plan from `hybrid "
                                          r"place`\); the MILP plans graphs"):
        prepare_start(g, g.device, plan)
