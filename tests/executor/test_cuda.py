"""The CUDA backend (skipped without a GPU): real streams and events, within tolerance of eager training."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from executor.api import Executor, execute  # noqa: E402

from tests.executor.cases import ITERS, SEED, swap_plan, user_case, zoo_case  # noqa: E402

pytestmark = [pytest.mark.torch,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.mark.parametrize("kind", ["size_classes", "unconstrained"])
@pytest.mark.parametrize("name", ["resnet-18", "rnn-2-1k"])
def test_cuda_training_matches_eager_within_tolerance(name: str, kind: str) -> None:
    # Models without dropout: the graph's CPU-style dropout draws other masks than eager CUDA's fused kernel.
    case = zoo_case(name)
    plan = swap_plan(case.graph, kind)
    res = execute(case.graph, plan, case.module(), case.args, case.target, loss_fn=case.loss_fn, iters=ITERS,
                  device="cuda", seed=SEED, check=True, sanitize=True)
    c = res.comparison
    assert c is not None and c.ok, (c.max_abs_diff, c.worst, c.beyond_tolerance[:5])
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
