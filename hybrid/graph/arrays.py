"""Array form of a graph for the hot loops (planner, simulator, GA): CSR lists, no Python objects.

Ordering edges between ops come from two sources:
- data: the producer of a tensor runs before every op that reads it;
- in-place updates: an op that updates tensor W is ordered against every other
  op touching W by their position in the graph's `ops` list (program order),
  so readers listed before the update see the old value and readers listed
  after it see the new one. A schedule that moved a read across the update
  would compute something else, so it is not a valid order.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

import numpy as np

if TYPE_CHECKING:
    from hybrid.graph import Graph

KIND_CODES = {"param": 0, "input": 1, "activation": 2, "gradient": 3, "optimizer_state": 4, "other": 5}


def dependency_edges(g: "Graph") -> Iterator[tuple[int, int, str]]:
    """(before, after, reason) op-index pairs; duplicates possible."""
    producer = {}
    for i, o in enumerate(g.ops):
        for t in o.outputs:
            producer[t] = i
    users: dict[str, list[int]] = {}
    for i, o in enumerate(g.ops):
        for t in dict.fromkeys(o.inputs):
            if t in producer:
                yield producer[t], i, "data"
            users.setdefault(t, []).append(i)
    for u, o in enumerate(g.ops):
        for t in o.updates:
            for r in users.get(t, ()):
                if r < u:
                    yield r, u, "update"
                elif r > u:
                    yield u, r, "update"


def _csr(lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(x) for x in lists])
    idx = np.fromiter((v for x in lists for v in x), dtype=np.int32, count=int(ptr[-1]))
    return ptr, idx


@dataclass(frozen=True)
class GraphArrays:
    """Per-graph arrays. Tensor and op indices follow the graph's list order."""

    n_tensors: int
    n_ops: int
    t_bytes: np.ndarray          # int64 [T]
    t_persistent: np.ndarray     # bool [T]
    t_kind: np.ndarray           # int8 [T], KIND_CODES
    t_producer: np.ndarray       # int32 [T], -1 for persistent tensors
    in_ptr: np.ndarray           # int64 [O+1]; inputs deduplicated, first-appearance order
    in_idx: np.ndarray           # int32
    out_ptr: np.ndarray
    out_idx: np.ndarray
    upd_ptr: np.ndarray
    upd_idx: np.ndarray
    op_time: np.ndarray          # float64 [O], default impl
    op_ws: np.ndarray            # int64 [O], default impl
    default_impl: np.ndarray     # int32 [O]
    impl_ptr: np.ndarray         # int64 [O+1]
    impl_time: np.ndarray        # float64
    impl_ws: np.ndarray          # int64
    pred_ptr: np.ndarray         # op predecessors (data + update ordering), deduplicated
    pred_idx: np.ndarray
    succ_ptr: np.ndarray
    succ_idx: np.ndarray

    @staticmethod
    def build(g: "Graph") -> "GraphArrays":
        ti = g.tensor_index
        ins = [[ti[t] for t in dict.fromkeys(o.inputs)] for o in g.ops]
        outs = [[ti[t] for t in o.outputs] for o in g.ops]
        upds = [[ti[t] for t in dict.fromkeys(o.updates)] for o in g.ops]
        producer = np.full(len(g.tensors), -1, dtype=np.int32)
        for i, o in enumerate(outs):
            producer[o] = i
        impls = [[(im.time_s, im.workspace_bytes) for im in o.implementations] for o in g.ops]
        impl_ptr = np.zeros(len(g.ops) + 1, dtype=np.int64)
        impl_ptr[1:] = np.cumsum([len(x) for x in impls])
        flat = [x for lst in impls for x in lst]
        preds: list[set[int]] = [set() for _ in g.ops]
        for a, b, _ in dependency_edges(g):
            preds[b].add(a)
        succs: list[list[int]] = [[] for _ in g.ops]
        for b, ps in enumerate(preds):
            for a in ps:
                succs[a].append(b)
        pred_ptr, pred_idx = _csr([sorted(p) for p in preds])
        succ_ptr, succ_idx = _csr([sorted(s) for s in succs])
        in_ptr, in_idx = _csr(ins)
        out_ptr, out_idx = _csr(outs)
        upd_ptr, upd_idx = _csr(upds)
        return GraphArrays(
            n_tensors=len(g.tensors),
            n_ops=len(g.ops),
            t_bytes=np.array([t.bytes for t in g.tensors], dtype=np.int64),
            t_persistent=np.array([t.persistent for t in g.tensors], dtype=np.bool_),
            t_kind=np.array([KIND_CODES[t.kind] for t in g.tensors], dtype=np.int8),
            t_producer=producer,
            in_ptr=in_ptr, in_idx=in_idx, out_ptr=out_ptr, out_idx=out_idx, upd_ptr=upd_ptr, upd_idx=upd_idx,
            op_time=np.array([o.time_s for o in g.ops], dtype=np.float64),
            op_ws=np.array([o.workspace_bytes for o in g.ops], dtype=np.int64),
            default_impl=np.array([o.default_impl for o in g.ops], dtype=np.int32),
            impl_ptr=impl_ptr,
            impl_time=np.array([x[0] for x in flat], dtype=np.float64),
            impl_ws=np.array([x[1] for x in flat], dtype=np.int64),
            pred_ptr=pred_ptr, pred_idx=pred_idx, succ_ptr=succ_ptr, succ_idx=succ_idx,
        )

    def impl_arrays(self, choice: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """(time, workspace) per op for an impl choice (index within each op's impls); None = defaults."""
        if choice is None:
            return self.op_time, self.op_ws
        flat = self.impl_ptr[:-1] + np.asarray(choice, dtype=np.int64)
        return self.impl_time[flat], self.impl_ws[flat]

    def fastest_impl_times(self) -> np.ndarray:
        """Per-op minimum over impls: what a lower bound may assume."""
        return np.minimum.reduceat(self.impl_time, self.impl_ptr[:-1]) if self.n_ops else np.zeros(0)
