"""The runtime's parts: ordering (events, race checker), pools, offline offsets, op modes, measurements."""
from __future__ import annotations

import dataclasses
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from executor.api import Executor, execute  # noqa: E402
from executor.check import compare, train_eager  # noqa: E402
from executor.device_pool import SizeClassPool  # noqa: E402
from executor.measure import to_profile  # noqa: E402
from executor.ops import COPY, OUT, compile_op, out_variant  # noqa: E402
from executor.offsets import arena_allocation  # noqa: E402
from executor.program import NO_FRONTIER, compile_program  # noqa: E402
from executor.races import RaceError  # noqa: E402
from executor.streams import CpuBackend, CpuEvent, OrderingError, make_backend  # noqa: E402
from hybrid.swap.baselines import run_baseline
from hybrid.capture.profile import apply_profile  # noqa: E402
from hybrid.errors import HybridError  # noqa: E402
from hybrid.graph.info import unswapped_peak
from hybrid.plan import SizeClass, SizeClassAllocation  # noqa: E402
from hybrid.validator import validate  # noqa: E402

from tests.executor.cases import ITERS, SEED, Case, swap_plan, user_case  # noqa: E402

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def case() -> Case:
    return user_case()


def _run(case: Case, plan, iters: int = ITERS, **kw) -> Executor:
    ex = Executor(case.graph, plan, "cpu", sanitize=True, **kw)
    ex.load(case.module(), case.args, case.target)
    ex.run(iters, seed=SEED)
    return ex


def _bitwise(case: Case, ex: Executor) -> None:
    cmp = compare(ex.losses, ex.state(), case.reference())
    assert cmp.bitwise, cmp.mismatched[:5]


def test_cpu_backend_refuses_an_event_not_recorded_this_iteration() -> None:
    b = CpuBackend()
    b.begin_iteration(0)
    ev = CpuEvent()
    with pytest.raises(OrderingError):
        b.wait(0, ev)
    b.record(ev, 1)
    b.wait(0, ev)
    b.begin_iteration(1)
    with pytest.raises(OrderingError):
        b.wait(0, ev)


def test_backend_names_are_checked() -> None:
    with pytest.raises(HybridError, match="cpu or cuda"):
        make_backend("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(HybridError, match="no CUDA"):
            make_backend("cuda")


def test_race_checker_catches_a_missing_wait(case: Case) -> None:
    plan = swap_plan(case.graph, "unconstrained")
    ex = Executor(case.graph, plan, "cpu", sanitize=True)
    steps = ex.runtime.program.steps
    # Forget what the swap-outs wait for: they would read tensors still being written.
    steps[:] = [dataclasses.replace(st, frontier=NO_FRONTIER) if st.kind == 2 else st for st in steps]
    ex.load(case.module(), case.args, case.target)
    with pytest.raises(RaceError, match="no wait between them"):
        ex.run(1)


def test_arena_plan_runs_at_its_offsets(case: Case) -> None:
    plan = swap_plan(case.graph, "unconstrained")
    program = compile_program(case.graph, plan)
    arena = arena_allocation(program, capacity=1 << 40)
    # the arena and, beside it, the largest workspace an op states (the copy fallback's results: layer norm)
    memory = max(plan.device.memory_bytes, arena.arena_bytes + int(program.aug.op_ws.max(initial=0)))
    aplan = replace(plan, allocation=arena, device=replace(plan.device, memory_bytes=memory))
    assert validate(case.graph, aplan).valid
    ex = _run(case, aplan)
    _bitwise(case, ex)
    assert ex.runtime.pool.stats.kind == "arena"
    assert ex.runtime.pool.stats.peak_live_bytes <= memory


def test_unconstrained_plans_get_offline_offsets_when_they_can_and_compact_otherwise(case: Case) -> None:
    plan = swap_plan(case.graph, "unconstrained")
    roomy = replace(plan, device=replace(plan.device, memory_bytes=2 * plan.device.memory_bytes))
    ex = _run(case, roomy)
    _bitwise(case, ex)
    assert ex.runtime.pool.stats.offsets == "offline" and ex.runtime.pool.stats.compactions == 0
    # A tight byte budget fragments: best fit plus compaction keeps it within the plan's memory.
    from tests.executor.cases import zoo_case

    rnn = zoo_case("rnn-2-1k")
    tight = swap_plan(rnn.graph, "unconstrained", 0.3)
    ex = Executor(rnn.graph, tight, "cpu", sanitize=True)
    ex.load(rnn.module(), rnn.args, rnn.target)
    ex.run(2, seed=SEED)
    st = ex.runtime.pool.stats
    assert st.offsets.startswith("online") and st.peak_live_bytes <= tight.device.memory_bytes
    ref = train_eager(rnn.graph, rnn.module(), rnn.args, rnn.target, rnn.loss_fn, 2, SEED)
    assert compare(ex.losses, ex.state(), ref).bitwise


def test_overlapping_moves_copy_the_right_bytes(case: Case) -> None:
    plan = swap_plan(case.graph, "unconstrained")
    ex = Executor(case.graph, plan, "cpu")
    buf = ex.runtime.pool.buffer.data
    for old, new, n in ((1000, 0, 600), (1000, 900, 300), (5000, 4990, 2000)):
        src = torch.randint(0, 255, (n,), dtype=torch.uint8)
        buf[old:old + n] = src
        ex.runtime._move(old, new, n)
        assert torch.equal(buf[new:new + n], src)


def test_naive_plan_runs_on_one_stream(case: Case) -> None:
    memory = unswapped_peak(case.graph) // 2
    plan = run_baseline(case.graph, replace(case.graph.device, memory_bytes=memory), "naive")
    program = compile_program(case.graph, plan)
    assert program.serialize and {st.stream for st in program.steps} <= {0, -1}
    _bitwise(case, _run(case, plan))


def test_each_iteration_can_take_a_new_batch(case: Case) -> None:
    gen = torch.Generator().manual_seed(5)
    data = [torch.randint(37, (4, 9), generator=gen) for _ in range(ITERS)]

    def batches(k: int):
        return (data[k][:, :-1].clone(),), data[k][:, 1:].clone()

    plan = swap_plan(case.graph, "size_classes")
    res = execute(case.graph, plan, case.module(), *batches(0), loss_fn=case.loss_fn, iters=ITERS, seed=SEED,
                  batches=batches, check=True, sanitize=True)
    assert res.comparison is not None and res.comparison.bitwise
    fixed = case.reference().losses
    assert [float(x) for x in fixed] != res.losses


def test_pool_refuses_more_objects_than_the_plan_has(case: Case) -> None:
    g = case.graph
    big = max(t.bytes for t in g.tensors)
    alloc = SizeClassAllocation((SizeClass(big, 1),), {t.id: 0 for t in g.tensors})
    pool = SizeClassPool(g, alloc, (big + 511) // 512 * 512, CpuBackend(), 512)
    ts = [i for i, t in enumerate(g.tensors) if t.bytes > 0][:2]
    pool.alloc(ts[0], 0)
    with pytest.raises(HybridError, match="no free object"):
        pool.alloc(ts[1], 1)
    pool.release(ts[0], NO_FRONTIER)
    pool.alloc(ts[1], 1)
    assert pool.stats.peak_live_bytes <= big


def test_invalid_or_foreign_plans_are_refused(case: Case) -> None:
    plan = swap_plan(case.graph, "unconstrained")
    with pytest.raises(HybridError, match="sha256|another graph"):
        Executor(case.graph, replace(plan, graph_sha256="0" * 64), "cpu")
    broken = replace(plan, events=[e for e in plan.events if e.kind != "swap_in"])
    with pytest.raises(HybridError):
        Executor(case.graph, broken, "cpu")


def test_out_variants_and_the_copy_fallback() -> None:
    aten = torch.ops.aten
    fn, names, _ = out_variant(aten.mm.default)
    assert fn is aten.mm.out and names == ("out",)
    assert out_variant(aten.add.Tensor)[0] is aten.add.out
    assert out_variant(aten.threshold_backward.default)[0] is aten.threshold_backward.grad_input
    assert out_variant(aten.convolution.default)[0] is None
    assert "generated" in out_variant(aten.convolution.default)[2]
    assert "random" in out_variant(aten.native_dropout.default)[2]
    assert out_variant(aten.copy_.default)[0] is None


def test_measurements_and_profile_feedback(case: Case) -> None:
    plan = swap_plan(case.graph, "size_classes")
    res = execute(case.graph, plan, case.module(), case.args, case.target, iters=ITERS, seed=SEED)
    s = res.summary
    assert s.iterations == ITERS and s.measured_from == 1 and s.simulated_s == plan.makespan_s
    assert set(s.busy_s) == {"compute", "h2d", "d2h"} and s.busy_s["h2d"] > 0 and s.busy_s["d2h"] > 0
    assert s.resimulated_s is not None and s.resimulated_s > 0
    assert s.op_modes.get(OUT, 0) > 0 and s.op_modes.get(COPY, 0) > 0
    assert s.copy_bytes > 0 and s.transient_peak_bytes > 0
    assert s.memory["pool"]["peak_live_bytes"] <= plan.device.memory_bytes
    assert len(res.losses) == ITERS
    modes = {compile_op(case.graph, op).mode for op in case.graph.ops}
    assert {"out", "copy", "optimizer"} <= modes
    prof = to_profile(res.program, res.records, "cpu", "test-cpu")
    assert prof.entries and all(e["time_s"] >= 0 for e in prof.entries.values())
    g2 = apply_profile(case.graph, prof)
    assert sum(1 for o in g2.ops if o.extra["cost"].get("cpu_time_s_source") == "profile") > len(g2.ops) // 2


def test_write_back_trains_the_module(case: Case) -> None:
    plan = swap_plan(case.graph, "size_classes")
    ex = _run(case, plan, iters=1)
    module = case.module()
    ex.write_back(module)
    st = ex.state()
    for n, p in module.named_parameters():
        assert torch.equal(p.detach(), st.params[n])


def test_cuda_graph_needs_a_cuda_device(case: Case) -> None:
    with pytest.raises(HybridError, match="--cuda-graph needs --device cuda"):
        Executor(case.graph, swap_plan(case.graph, "size_classes"), "cpu", cuda_graph=True)
    ex = Executor(case.graph, swap_plan(case.graph, "size_classes"), "cpu")
    assert "need --device cuda" in ex.runtime.graph_blocker()


def test_summary_reads_graph_replays_apart_from_issued_iterations(case: Case) -> None:
    from executor.measure import summarize

    ex = _run(case, swap_plan(case.graph, "unconstrained"), iters=4)
    recs = ex.records
    # Stand-ins for two replays: no node times, their own makespans.
    recs[2] = dataclasses.replace(recs[2], start=None, end=None, makespan_s=1.0, graphed=True)
    recs[3] = dataclasses.replace(recs[3], start=None, end=None, makespan_s=3.0, graphed=True)
    s = summarize(ex.runtime.program, recs)
    assert s.graphed == 2 and s.makespan_s == 2.0
    assert s.issued_makespan_s == recs[1].makespan_s      # the issued iterations past the first
    assert s.resimulated_s is not None and s.busy_s["compute"] > 0
    assert s.issue_s == recs[1].issue_s > 0


@pytest.mark.parametrize("kind", ["size_classes", "unconstrained"])
def test_pool_state_saved_for_graph_replays_restores_the_same_iterations(case: Case, kind: str) -> None:
    # What a CUDA graph replay leaves behind on the host is a saved pool state: issuing from a restored state
    # must train exactly as issuing straight on.
    plan = swap_plan(case.graph, kind)
    straight = _run(case, plan, iters=3).state()
    ex = Executor(case.graph, plan, "cpu")
    ex.load(case.module(), case.args, case.target)
    ex.run(2, seed=SEED)
    rt = ex.runtime
    where, env = dict(rt.pool.where), set(rt.env)
    rt._set_pool_state(rt._pool_state())    # copies of every list and dict: nothing may still point at the old
    assert rt.pool.where == where and set(rt.env) == env
    ex.run(1, seed=SEED)
    restored = ex.state()
    for n, p in straight.params.items():
        assert torch.equal(p, restored.params[n]), n


def test_a_plan_trains_as_the_unlimited_run_bitwise_on_cpu(case: Case) -> None:
    from executor.check import against_unlimited

    c = against_unlimited(case.graph, swap_plan(case.graph, "unconstrained"), case.module(), case.args,
                          case.target, 2, "cpu", SEED)
    assert c.bitwise and c.values > 0


def test_recordings_share_one_step_counter_per_optimizer_op() -> None:
    # A CUDA graph's kernels hold the counter's address: a later recording must reuse it, not free it.
    from tests.executor.cases import zoo_case

    case = zoo_case("rnn-2-1k")       # Adam
    ex = Executor(case.graph, swap_plan(case.graph, "size_classes"), "cpu")
    ops = ex.runtime.ops
    ops.device_steps(3)
    first = dict(ops._step_counters)
    ops.device_steps(None)
    assert first and all(float(c) == 2.0 for c in first.values())
    ops.device_steps(7)
    assert all(ops._step_counters[o] is c and float(c) == 6.0 for o, c in first.items())
    ops.device_steps(None)
    assert not ops._recording


def test_summary_leaves_out_first_replays_where_later_ones_exist(case: Case) -> None:
    from executor.measure import summarize

    ex = _run(case, swap_plan(case.graph, "size_classes"), iters=4)
    recs = ex.records
    recs[2] = dataclasses.replace(recs[2], start=None, end=None, makespan_s=9.0, graphed=True, first_replay=True)
    recs[3] = dataclasses.replace(recs[3], start=None, end=None, makespan_s=2.0, graphed=True)
    s = summarize(ex.runtime.program, recs)
    assert s.graphed == 2 and s.makespan_s == 2.0


def test_watching_after_graphs_were_recorded_is_refused(case: Case) -> None:
    ex = Executor(case.graph, swap_plan(case.graph, "size_classes"), "cpu")
    ex.runtime.graphs[()] = None   # as if an iteration had been recorded
    with pytest.raises(HybridError, match="already replayed as CUDA graphs"):
        ex.keep_grads()
