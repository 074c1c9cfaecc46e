"""Long rerun chains (hybrid.swap.recompute.place_frees): a chain's dead intermediates are freed after their last
rerun reader, so regenerating a tensor deep in a block needs a few tensors' room, not the whole chain's."""
from __future__ import annotations

import numpy as np
import pytest

from hybrid.device import Device
from hybrid.graph import Graph, Op, Tensor
from hybrid.graph.order import program_order
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.planner import SwapPlanner
from hybrid.swap.pools import byte_pool
from hybrid.swap.recompute import A_ALLOC, A_FREE, A_RC, A_RCBEGIN, place_frees
from hybrid.swap.to_plan import to_plan
from hybrid.validator import validate

MiB = 1 << 20


def _chain(n: int) -> Graph:
    """x -> a1 -> ... -> an (1 MiB each, cheap), then an op needing 7 of the 8 MiB (an must leave), then one
    reading an again: only an's rerun chain through a1..a(n-1), all dead by then, brings it back."""
    tensors = [Tensor("x", MiB, "input", True), Tensor("h", 7 * MiB), Tensor("o", MiB)]
    tensors += [Tensor(f"a{i}", MiB) for i in range(1, n + 1)]
    ops = [Op(f"f{i}", "relu", ("x" if i == 1 else f"a{i - 1}",), (f"a{i}",), 1e-6) for i in range(1, n + 1)]
    ops += [Op("big", "mul", ("x",), ("h",), 1e-6), Op("end", "add", (f"a{n}", "x"), ("o",), 1e-6)]
    # a slow link: copies cost far more than reruns
    return Graph("chain", tuple(tensors), tuple(ops), Device("d", 8 * MiB, 1e8, 1e8, 0.0, alignment_bytes=256))


def test_free_goes_right_after_the_last_rerun_reader():
    # ops: 0 makes t1 from t0, 1 makes t2 from t1, 2 makes t3 from t2 and t1; need list regenerates t3
    in_ptr = np.array([0, 1, 2, 4]); in_idx = np.array([0, 1, 2, 1])
    out_ptr = np.array([0, 1, 2, 3]); out_idx = np.array([1, 2, 3])
    t_prod = np.array([-1, 0, 1, 2])
    nd_t = np.zeros(16, np.int64); nd_a = np.zeros(16, np.int64)
    seq = [(1, A_RCBEGIN), (1, A_RC), (2, A_RCBEGIN), (2, A_RC), (3, A_RCBEGIN), (3, A_RC), (3, A_ALLOC)]
    for i, (t, a) in enumerate(seq):
        nd_t[i], nd_a[i] = t, a
    tr = np.array([2, 1] + [0] * 6)   # both dead after the chain: t2 read last by op 2, t1 too
    n = place_frees(nd_t, nd_a, len(seq), tr, 2, t_prod, in_ptr, in_idx, out_ptr, out_idx, np.zeros(8, np.int64))
    got = list(zip(nd_t[:n].tolist(), nd_a[:n].tolist()))
    assert got == seq[:6] + [(2, A_FREE), (1, A_FREE), seq[6]]
    # a transient read by no rerun after the one that makes it: freed right after that one
    tr2 = np.array([1] + [0] * 7)
    seq2 = [(1, A_RCBEGIN), (1, A_RC), (5, A_ALLOC)]
    for i, (t, a) in enumerate(seq2):
        nd_t[i], nd_a[i] = t, a
    n = place_frees(nd_t, nd_a, 3, tr2, 1, t_prod, in_ptr, in_idx, out_ptr, out_idx, np.zeros(8, np.int64))
    assert list(zip(nd_t[:n].tolist(), nd_a[:n].tolist())) == [seq2[0], seq2[1], (1, A_FREE), seq2[2]]


@pytest.mark.parametrize("n", [12, 24])
def test_a_chain_longer_than_memory_is_regenerated_in_a_few_tensors_room(n):
    g = _chain(n)
    sp = SwapPlanner(g, g.device)
    aug = sp.plan(program_order(g), byte_pool(g, g.device),
                  PlannerOptions(recompute_ratio=1.0, recompute_depth=n + 1, recompute_only=True))
    plan = to_plan(aug, {"name": "test"})
    report = validate(g, plan)
    assert report.valid, report.violations[0].message
    assert report.peak_bytes <= g.device.usable_bytes < n * MiB   # the chain never fits at once
    assert sum(1 for e in plan.events if e.kind == "compute" and e.recompute) == n
    assert not any(e.kind == "swap_out" and not g.tensor(e.tensor).persistent for e in plan.events)
