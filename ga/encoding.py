"""The chromosome (SwapAdvisor §5.2-5.3): a schedule plus a size-class allocation (CLS, CNT).

- schedule: int32 [n_ops], a topological order of the graph's op DAG (data
  edges and in-place update ordering edges, `graph.arrays.pred_*`).
- cls: int64 [n_sizes], the class of each distinct tensor size TS[i] (sorted).
  Kept canonical: cls[0] = 0 and each step is 0 or 1, so classes are numbered
  0..C-1 without gaps. That is the paper's monotone restriction (O(2^N)
  mappings instead of O(N^N)); a class's object size is its largest member.
  `GAConfig.class_mapping = "free"` lifts it (the paper's Figure 9c): any size
  in any class, numbered by first appearance (`canonical_free`).
- cnt: int64 [C], objects per class.
- by_bytes: when set, the individual's pool is the plain byte budget (the
  `unconstrained` allocation, as the Belady baseline uses) and CLS/CNT are
  carried along unused, so crossover can hand them back to a size-class child.
- planner: the swap planner's settings, one small int (`PlannerGene`): the
  eviction policy (`POLICIES`: Belady = farthest next use, LRU as ODSwap, or
  Belady with persistent tensors pinned on the device as vDNN), the recency
  window (victims used within that many ops are skipped) and the lookahead
  (how many ranked victims are compared), and whether persistent tensors not
  resident at the start are written back right after their last use
  (`PlannerOptions.write_back`), and how readily a victim without a host copy
  is dropped and recomputed instead of swapped (`RECOMPUTE`: the ratio of a
  rerun's compute time to the copies' time below which it drops, 0 swapping
  only, and how many producers one rerun chain may include). No setting wins everywhere, so the search picks it too. A cost-ratio
  threshold and a chain depth rather than a per-tensor or per-op-kind
  permission: one small int keeps crossover and the planner gene's packing as
  they were, and on NasNet-25 the depth, not the ratio, decides how much of
  the link traffic goes (outputs of ReLU, add and concat reached through
  batch norms).

`SearchSpace` holds what every operator needs about the graph, built once.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numba import njit

from hybrid.device import Device
from hybrid.graph import Graph
from hybrid.graph.liveness import distinct_sizes, size_index
from hybrid.swap.augmented import PlannerOptions
from hybrid.swap.pools import PoolArrays, byte_pool, class_pool
from hybrid.units import round_up

POLICIES = ("belady", "lru", "pinned")
RECENCY = (0, 1, 2, 4, 8)
LOOKAHEAD = (1, 2, 4)
# (PlannerOptions.recompute_ratio, .recompute_depth), in order of how much they recompute; used only where the
# base options allow recompute. On NasNet-25's program order the depth moves the Belady plan from 0.53 (2) to
# 0.72 (6) of ideal and back to 0.68 (8): no one setting wins, so the search picks it. A transformer block
# needs longer chains (a dropout output reached through mask, softmax, scores and the q/k/v split): on
# benchmarks/vs_torch's transformer-lm at the checkpointed step's peak the program order's best walk goes from
# 69.2 ms (depth 12) to 58.1 ms (depth 14 and up); on a held-out GPT (SDPA with dropout) depth 32 at ratio 3 is
# best. Appended, so the packed genes before them keep their meaning; drawn, seeded and stepped to only with
# PlannerOptions.long_chains (without it the gene takes the first SHORT_CHAINS, and the search's random draws
# are those it made before the longer ones existed).
RECOMPUTE = ((0.0, 0), (0.3, 2), (1.0, 2), (1.0, 4), (1.0, 6), (3.0, 6), (1.0, 8), (1.0, 12),
             (1.0, 16), (1.0, 24), (3.0, 32))
SHORT_CHAINS = 8


def recompute_settings(base: PlannerOptions) -> int:
    """How many of RECOMPUTE's settings the gene takes under `base`: the longer chains' too with long_chains."""
    return len(RECOMPUTE) if base.long_chains else SHORT_CHAINS


@dataclass(frozen=True)
class PlannerGene:
    """Indices into POLICIES, RECENCY, LOOKAHEAD and RECOMPUTE, and the write-back switch; packed into one int."""

    policy: int
    recency: int
    lookahead: int
    write_back: int = 1
    recompute: int = 0

    def pack(self) -> int:
        return self.policy + len(POLICIES) * (self.recency + len(RECENCY) * (self.lookahead + len(LOOKAHEAD)
                                              * (self.write_back + 2 * self.recompute)))

    @staticmethod
    def unpack(code: int) -> "PlannerGene":
        p, rest = code % len(POLICIES), code // len(POLICIES)
        r, rest = rest % len(RECENCY), rest // len(RECENCY)
        la, rest = rest % len(LOOKAHEAD), rest // len(LOOKAHEAD)
        return PlannerGene(p, r, la, rest % 2, rest // 2)

    @staticmethod
    def of(base: PlannerOptions, policy: int, recompute: int | None = None) -> "PlannerGene":
        """`policy` with the base options' recency, lookahead, recompute ratio (their nearest table values)
        and write-back; `recompute` overrides the ratio's index."""
        r = min(range(len(RECENCY)), key=lambda i: abs(RECENCY[i] - base.recency))
        la = min(range(len(LOOKAHEAD)), key=lambda i: abs(LOOKAHEAD[i] - base.lookahead))
        want = (base.recompute_ratio, base.recompute_depth) if base.recomputes else (0.0, 0)
        rc = min(range(recompute_settings(base)),
                 key=lambda i: (abs(RECOMPUTE[i][0] - want[0]), abs(RECOMPUTE[i][1] - want[1])))
        return PlannerGene(policy, r, la, int(base.write_back), rc if recompute is None else recompute)

    def options(self, base: PlannerOptions) -> PlannerOptions:
        name = POLICIES[self.policy]
        ratio, depth = RECOMPUTE[min(self.recompute, len(RECOMPUTE) - 1)] if base.recomputes else (0.0, 0)
        return replace(base, victim="lru" if name == "lru" else "belady", keep_persistent=name == "pinned",
                       recency=RECENCY[self.recency], lookahead=LOOKAHEAD[self.lookahead],
                       write_back=bool(self.write_back), recompute_ratio=ratio,
                       recompute_depth=depth if base.recomputes else base.recompute_depth)

    def describe(self) -> str:
        wb = ", write-back" if self.write_back else ""
        ratio, depth = RECOMPUTE[self.recompute]
        rc = f", recompute (ratio {ratio:g}, depth {depth})" if self.recompute else ""
        return f"{POLICIES[self.policy]}, recency {RECENCY[self.recency]}, lookahead {LOOKAHEAD[self.lookahead]}{wb}{rc}"


N_PLANNER_GENES = len(POLICIES) * len(RECENCY) * len(LOOKAHEAD) * 2 * len(RECOMPUTE)


def planner_options(base: PlannerOptions, code: int) -> PlannerOptions:
    return PlannerGene.unpack(code).options(base)


@dataclass
class Individual:
    """One candidate. `makespan` is NaN until evaluated, inf when the pool cannot run the graph."""

    schedule: np.ndarray
    cls: np.ndarray
    cnt: np.ndarray
    by_bytes: bool = False
    planner: int = 0             # PlannerGene.pack()
    makespan: float = float("nan")

    @property
    def n_classes(self) -> int:
        return len(self.cnt)

    def copy(self) -> "Individual":
        return Individual(self.schedule.copy(), self.cls.copy(), self.cnt.copy(), self.by_bytes, self.planner,
                          self.makespan)


@dataclass(frozen=True, eq=False)
class SearchSpace:
    """A graph on a device, seen by the GA: sizes, per-op object needs, the pool budget, the DAG."""

    graph: Graph
    device: Device
    options: PlannerOptions
    ts: np.ndarray            # int64 [N]: sorted distinct tensor sizes
    ts_mem: np.ndarray        # int64 [N]: the bytes each size occupies on the device (aligned): what pools cost
    size_idx: np.ndarray      # int32 [T]: index into ts of each tensor's size
    budget: int               # bytes a pool may take: memory - the largest workspace
    use_ptr: np.ndarray       # int64 [O+1]: per op, the distinct sizes it touches ...
    use_size: np.ndarray      # int32: ... (index into ts) ...
    use_count: np.ndarray     # int64: ... and how many of its tensors have that size
    pred_count: np.ndarray    # int64 [O]
    succ_ptr: np.ndarray
    succ_idx: np.ndarray

    @staticmethod
    def build(graph: Graph, device: Device, options: PlannerOptions = PlannerOptions()) -> "SearchSpace":
        a = graph.arrays
        ts = distinct_sizes(graph).astype(np.int64)
        sidx = size_index(graph)
        ptr, size, count = _op_size_uses(a.in_ptr, a.in_idx, a.out_ptr, a.out_idx, sidx, len(ts))
        return SearchSpace(
            graph=graph, device=device, options=options, ts=ts, ts_mem=round_up(ts, device.alignment_bytes),
            size_idx=sidx, budget=int(device.usable_bytes) - int(a.op_ws.max(initial=0)),
            use_ptr=ptr, use_size=size, use_count=count,
            pred_count=np.diff(a.pred_ptr).astype(np.int64),
            succ_ptr=a.succ_ptr.astype(np.int64), succ_idx=a.succ_idx.astype(np.int32),
        )

    @property
    def n_ops(self) -> int:
        return int(self.graph.arrays.n_ops)

    @property
    def n_sizes(self) -> int:
        return len(self.ts)

    def class_bytes(self, cls: np.ndarray) -> np.ndarray:
        """Object size per class: the largest size mapped to it, aligned (any mapping, monotone or free)."""
        n = int(cls.max()) + 1 if len(cls) else 0
        out = np.zeros(n, dtype=np.int64)
        np.maximum.at(out, cls, self.ts_mem)
        return out

    def class_need(self, cls: np.ndarray) -> np.ndarray:
        """Per class, the most objects of it one op holds at once (inputs and outputs): a smaller count cannot run."""
        n = int(cls.max()) + 1 if len(cls) else 0
        return _class_need(self.use_ptr, self.use_size, self.use_count, np.ascontiguousarray(cls, dtype=np.int64), n)

    def options_for(self, ind: Individual) -> PlannerOptions:
        return planner_options(self.options, ind.planner)

    def pool(self, ind: Individual) -> PoolArrays:
        if ind.by_bytes:
            return byte_pool(self.graph, self.device)
        return class_pool(self.graph, ind.cls, ind.cnt, self.ts, align=self.device.alignment_bytes)

    def pool_bytes(self, cls: np.ndarray, cnt: np.ndarray) -> int:
        return int((self.class_bytes(cls) * cnt).sum())


def canonical_cls(cls: np.ndarray) -> np.ndarray:
    """The minimal increase that makes a class list monotone (§5.3), then gaps closed: cls[0]=0, steps 0 or 1."""
    c = np.maximum.accumulate(np.asarray(cls, dtype=np.int64))
    if len(c) == 0:
        return c
    steps = np.minimum(np.diff(c), 1)
    return np.concatenate([[0], np.cumsum(steps)]).astype(np.int64)


def canonical_free(cls: np.ndarray) -> np.ndarray:
    """An unrestricted class list (Figure 9c: any size in any class) numbered by first appearance, without gaps,
    so equal mappings compare equal. A class's object size is still its largest member."""
    c = np.asarray(cls, dtype=np.int64)
    if len(c) == 0:
        return c
    _, first, inverse = np.unique(c, return_index=True, return_inverse=True)
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[inverse].astype(np.int64)


def canonical(cls: np.ndarray, free: bool = False) -> np.ndarray:
    """`canonical_free` for the unrestricted mapping, else the paper's monotone `canonical_cls`."""
    return canonical_free(cls) if free else canonical_cls(cls)


def extend_cnt(cls: np.ndarray, cnt: np.ndarray) -> np.ndarray:
    """CNT_EXT: per distinct size, the object count of its class (same length as CLS and TS)."""
    return np.asarray(cnt, dtype=np.int64)[cls]


def collapse_cnt(cls: np.ndarray, cnt_ext: np.ndarray) -> np.ndarray:
    """Back from CNT_EXT to CNT: each class gets the mean of its sizes' counts, rounded to nearest."""
    n = int(cls.max()) + 1 if len(cls) else 0
    sums = np.bincount(cls, weights=cnt_ext.astype(np.float64), minlength=n)
    members = np.bincount(cls, minlength=n)
    return np.floor(sums / np.maximum(members, 1) + 0.5).astype(np.int64)


@njit(cache=True)
def _op_size_uses(in_ptr, in_idx, out_ptr, out_idx, sidx, n_sizes):  # pragma: no cover - compiled
    n_ops = len(in_ptr) - 1
    ptr = np.zeros(n_ops + 1, dtype=np.int64)
    cap = int(in_ptr[-1] + out_ptr[-1])
    size = np.empty(cap, dtype=np.int32)
    count = np.empty(cap, dtype=np.int64)
    acc = np.zeros(n_sizes, dtype=np.int64)
    k = 0
    for o in range(n_ops):
        start = k
        for j in range(in_ptr[o], in_ptr[o + 1]):
            s = sidx[in_idx[j]]
            if acc[s] == 0:
                size[k] = s
                k += 1
            acc[s] += 1
        for j in range(out_ptr[o], out_ptr[o + 1]):
            s = sidx[out_idx[j]]
            if acc[s] == 0:
                size[k] = s
                k += 1
            acc[s] += 1
        for j in range(start, k):
            count[j] = acc[size[j]]
            acc[size[j]] = 0
        ptr[o + 1] = k
    return ptr, size[:k].copy(), count[:k].copy()


@njit(cache=True)
def _class_need(use_ptr, use_size, use_count, cls, n_classes):  # pragma: no cover - compiled
    need = np.zeros(n_classes, dtype=np.int64)
    class_need_into(use_ptr, use_size, use_count, cls, need, np.zeros(n_classes, dtype=np.int64))
    return need


@njit(cache=True)
def class_need_into(use_ptr, use_size, use_count, cls, need, acc):  # pragma: no cover - compiled
    """Per class, the most objects one op needs at once, written into `need` (acc: zeroed scratch, left zeroed)."""
    for o in range(len(use_ptr) - 1):
        for j in range(use_ptr[o], use_ptr[o + 1]):
            acc[cls[use_size[j]]] += use_count[j]
        for j in range(use_ptr[o], use_ptr[o + 1]):
            c = cls[use_size[j]]
            if acc[c] > need[c]:
                need[c] = acc[c]
            acc[c] = 0
