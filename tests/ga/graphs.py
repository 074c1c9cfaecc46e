"""Small graphs and devices for the GA tests (kept here, not in a shared fixture)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ga.encoding import SearchSpace
from ga.repair import min_floor_cls
from hybrid.graph.liveness import peak_live_counts
from hybrid.device import Device
from hybrid.graph import Graph, Op, Tensor
from hybrid.graph.order import program_order
from hybrid.graph.synthetic import random_dag, training_graph

MB = 1 << 20


def tight_device(g: Graph, fraction: float = 0.3) -> Device:
    """A device holding `fraction` of the unswapped peak, but at least what the hungriest op and a size-class
    pool's minimum need (so every search has feasible pools)."""
    a = g.arrays
    _, peak = peak_live_counts(g, program_order(g))
    ws = int(a.op_ws.max(initial=0))
    op_need = max((int(a.t_bytes[a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]].sum())
                   + int(a.t_bytes[a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]]].sum()) + int(a.op_ws[o])
                   for o in range(a.n_ops)), default=0)
    base = Device("tight", max(1, peak), 1e9, 1e9, 0.0)
    _, floor = min_floor_cls(SearchSpace.build(g, base))
    mem = max(int(peak * fraction), op_need, floor + ws, 1)
    return replace(base, memory_bytes=mem)


def small_training(n_layers: int = 12, seed: int = 0, share: int = 0) -> tuple[Graph, Device]:
    g = training_graph(n_layers, seed=seed, share_params=share, workspace_prob=0.2, impls_prob=0.2)
    return g, tight_device(g)


def small_random(n_ops: int = 30, seed: int = 0) -> tuple[Graph, Device]:
    g = random_dag(n_ops, seed=seed)
    return g, tight_device(g)


def two_size_graph(memory: int = 12 * MB) -> Graph:
    """Tensors of 1 MB and 4 MB, each op touching one tensor: the paper's Figure 5 sizes (TS = [1 MB, 4 MB])."""
    tensors = [Tensor("a", MB, "activation"), Tensor("b", 4 * MB, "activation")]
    ops = [Op("make_a", "op", (), ("a",), 1.0), Op("make_b", "op", (), ("b",), 1.0),
           Op("use_a", "op", ("a",), (), 1.0), Op("use_b", "op", ("b",), (), 1.0)]
    return Graph("two-sizes", tensors, ops, Device("d", memory, 1e9, 1e9, 0.0))


def assert_topological(g: Graph, order: np.ndarray) -> None:
    from hybrid.graph.order import is_topological

    assert sorted(order.tolist()) == list(range(len(g.ops)))
    assert is_topological(g, order)
