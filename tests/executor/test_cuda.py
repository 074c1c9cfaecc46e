"""The CUDA backend (skipped without a GPU): real streams and events, CUDA graph replays, each against the same graph
run with no memory limit on the same GPU."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from executor.api import GRAPH_AFTER, Executor, execute  # noqa: E402
from executor.check import against_unlimited, exact_kernels  # noqa: E402
from executor.runtime import MAX_GRAPHS  # noqa: E402

from tests.executor.cases import ITERS, SEED, swap_plan, user_case, zoo_case  # noqa: E402

pytestmark = [pytest.mark.torch,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.mark.parametrize("kind", ["size_classes", "unconstrained"])
@pytest.mark.parametrize("name", ["resnet-18", "rnn-2-1k"])
def test_cuda_training_matches_the_unlimited_run(name: str, kind: str) -> None:
    # The reference runs the same graph with no memory limit on the same GPU, with deterministic float32
    # kernels: any difference is the plan's copies, streams or pool. (Eager PyTorch on the GPU runs other
    # kernels, cuDNN batch norm for one, and these tiny models' batch norms over a few elements amplify it.)
    case = zoo_case(name)
    plan = swap_plan(case.graph, kind)
    with exact_kernels():
        c = against_unlimited(case.graph, plan, case.module(), case.args, case.target, ITERS, "cuda", SEED)
        res = execute(case.graph, plan, case.module(), case.args, case.target, loss_fn=case.loss_fn, iters=ITERS,
                      device="cuda", seed=SEED, sanitize=True)
    assert c.ok and c.max_abs_diff <= 1e-6, (c.max_abs_diff, c.worst, c.mismatched[:5])
    mem = res.summary.memory
    assert mem["pool"]["peak_live_bytes"] <= plan.device.memory_bytes
    assert mem["pool"]["reserved_bytes"] <= plan.device.memory_bytes
    assert res.summary.busy_s["h2d"] > 0 and res.summary.makespan_s > 0


def test_cuda_host_pool_is_pinned_and_streams_are_distinct() -> None:
    case = user_case()
    ex = Executor(case.graph, swap_plan(case.graph, "size_classes"), "cuda")
    assert ex.runtime.host.pinned and ex.runtime.host.buffer.data.is_pinned()
    streams = ex.backend.streams
    assert len({s.cuda_stream for s in streams}) == 3
    assert torch.cuda.current_stream().cuda_stream not in {s.cuda_stream for s in streams}


@pytest.mark.parametrize("kind", ["size_classes", "unconstrained"])
@pytest.mark.parametrize("name", ["resnet-18", "rnn-2-1k"])
def test_cuda_graph_replay_trains_as_issuing_node_by_node(name: str, kind: str) -> None:
    # A recorded iteration replayed later steps must train as issuing every node does: same kernels, same
    # addresses; only Adam's bias correction moves to device counters (capturable Adam), within an ulp or two.
    case = zoo_case(name)
    plan = swap_plan(case.graph, kind)
    iters = 7
    with exact_kernels():
        c = against_unlimited(case.graph, plan, case.module(), case.args, case.target, iters, "cuda", SEED,
                              cuda_graph=True)
        res = execute(case.graph, plan, case.module(), case.args, case.target, loss_fn=case.loss_fn,
                      iters=iters, device="cuda", seed=SEED, cuda_graph=True)
    # Every iteration after the first two is a replay (of a recording made for that pool layout, or an
    # earlier one whose layout came back), unless the layouts kept changing past MAX_GRAPHS recordings.
    assert res.summary.graphed >= min(iters - GRAPH_AFTER, MAX_GRAPHS)
    # Adam's replays compute its bias correction on the device (capturable Adam): an ulp apart, not bitwise.
    assert c.ok, (c.max_abs_diff, c.worst, c.beyond_tolerance[:5])


def test_a_plan_that_reruns_dropout_is_recorded_as_a_cuda_graph_and_trains_as_issued() -> None:
    """Graph-safe random ops (executor.random_state.OpSeeds): the recorded replays draw, per step and op, what
    issuing node by node with the same seeds draws, reruns included."""
    from tests.executor.test_random_state import _plan, mask_case

    case = mask_case()
    plan = _plan(case, 0.5, recompute=True)
    iters = 6
    runs = []
    with exact_kernels():
        for graphed in (False, True):
            ex = Executor(case.graph, plan, "cuda", cuda_graph=graphed, random="op_seeds")
            ex.load(case.module(), case.args, case.target)
            ex.run(iters, seed=SEED)
            runs.append(ex)
    issued, replayed = runs
    assert replayed.summary().graphed >= 1 and replayed.runtime.graph_note == ""
    assert replayed.runtime.graph_blocker() == ""
    for a, b in zip(issued.losses, replayed.losses):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (a, b)
    for n, p in issued.state().params.items():
        assert torch.allclose(p, replayed.state().params[n], rtol=1e-4, atol=1e-5), n


def test_cuda_convolutions_write_their_slots_with_eagers_bits_and_no_result_beside_them() -> None:
    # executor.ops' CUDA slot writer (cudnn_convolution.out, bias added in place) against aten.convolution on
    # this GPU: bitwise equal, and the result is not allocated beside the slot (benchmarks/gpu_preflight.py)
    from benchmarks.gpu_preflight import conv_slots

    assert conv_slots(torch.device("cuda")) == []
