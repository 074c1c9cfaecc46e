"""The swap planner's output type: ops plus swap nodes with control edges and times, and the options that
made it. Its own module so that the planner, the re-walk and the conversions to and from plans all import it
without importing each other."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np

from hybrid.device import Device
from hybrid.graph.types import Graph
from hybrid.plan.events import COMPUTE, EVENT_KINDS
from hybrid.swap.pools import PoolArrays



@dataclass(frozen=True)
class PlannerOptions:
    victim: Literal["belady", "lru"] = "belady"
    recency: int = 2             # skip victims used within this many ops (0: no skipping); 2 measured best
    overlap: bool = True         # False: one stream for everything, copies on demand (the naive baseline)
    keep_persistent: bool = False  # vDNN-style: persistent tensors resident throughout, never evicted
    passes: int = 2              # 1: nothing resident at start; 2: the periodic two-pass scan; 3: one more
    keep: Literal["best", "last"] = "best"  # which pass's plan to return ("last": ODSwap reports its 2nd iteration)
    lookahead: int = 1           # compare this many policy-ranked victims, evict the one whose memory frees first
    rebind: bool = True          # re-bind memory in time order after the walk (hybrid.swap.rewalk); overlap only
    write_back: bool = True      # from pass 2: a persistent tensor not resident at the start leaves after its last use
    recompute_ratio: float = 0.0  # drop a victim, rerun its producer when that costs <= ratio x its copies (0: no)
    recompute_depth: int = 6      # producers one rerun chain may hold (hybrid.swap.recompute); 6 best on NasNet-25
    recompute_only: bool = False  # activations are rerun or kept, never swapped (the Checkmate-style baseline)
    addresses: bool = False       # a byte pool is planned as an arena (hybrid.swap.addresses): the plan comes out
    #                               with one offset per tensor, laid out as planned; False: the byte budget (a
    #                               relaxation: memory that never fragments)
    rebind_reruns: bool = False   # also re-bind plans that rerun ops (hybrid.swap.rewalk reads reruns; kept when
    #                               faster: Belady on ResNet-18 at 64 MiB 13.16 -> 11.36 ms). On in `hybrid optimize`
    #                               (run_optimize); off by default here, which the planner's own tables were made with
    long_chains: bool = False     # rerun chains of 14 and more producers (a transformer block): each chain
    #                               intermediate freed after its last rerun reader (hybrid.swap.recompute.place_frees),
    #                               a copy priced with its wait behind the d2h queue, and the GA's longer RECOMPUTE
    #                               settings seeded and drawn. On in `hybrid optimize` (run_optimize); off by default
    #                               here, which the planner's own tables were made with

    def describe(self) -> dict:
        return {"victim": self.victim, "recency": self.recency, "overlap": self.overlap,
                "keep_persistent": self.keep_persistent, "passes": self.passes, "keep": self.keep,
                "lookahead": self.lookahead, "rebind": self.rebind, "write_back": self.write_back,
                "recompute_ratio": self.recompute_ratio, "recompute_depth": self.recompute_depth,
                "recompute_only": self.recompute_only, "addresses": self.addresses,
                "rebind_reruns": self.rebind_reruns, "long_chains": self.long_chains}

    @classmethod
    def from_describe(cls, d: object) -> "PlannerOptions | None":
        """The options `describe` wrote (a plan's `planner.planner_options`), or None where `d` is not such a
        record: a plan file may come from anywhere, so a foreign or edited record is not trusted."""
        if not isinstance(d, dict) or "victim" not in d:   # every record the planners write names its victim
            return None
        defaults = cls()
        known = {f.name for f in fields(cls)}
        kw = {}
        for k, v in d.items():
            if k not in known:
                continue
            want = type(getattr(defaults, k))
            if want is float and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            if type(v) is not want:
                return None
            kw[k] = v
        try:
            opt = cls(**kw)
        except (TypeError, ValueError):
            return None
        big = 2**31 - 1   # the kernel's integers
        ok = (opt.victim in ("belady", "lru") and opt.keep in ("best", "last") and 0 <= opt.recency <= big
              and 1 <= opt.passes <= 3 and 1 <= opt.lookahead <= big and 0 <= opt.recompute_depth <= big
              and 0.0 <= opt.recompute_ratio < float("inf"))
        return opt if ok else None

    @classmethod
    def of_plan(cls, plan: object) -> "PlannerOptions | None":
        """The options a plan records it was planned with (`planner.planner_options`; plans written before
        this name said `options`), or None."""
        info = getattr(plan, "planner", None)
        if not isinstance(info, dict):
            return None
        return cls.from_describe(info.get("planner_options", info.get("options")))

    @property
    def recomputes(self) -> bool:
        return (self.recompute_ratio > 0 or self.recompute_only) and self.recompute_depth > 0


def serialized(plan: object) -> bool:
    """Plans made without overlap (the naive baseline) promise one stream: copies never run beside compute. The
    executor runs them so and `hybrid.simulator.resimulate` re-times them so (`from_plan` records it)."""
    opts = PlannerOptions.of_plan(plan)
    return opts is not None and not opts.overlap


@dataclass
class AugmentedGraph:
    """Ops plus swap nodes with their control edges, timed. Node i: kind, ref (op or tensor index), start, end."""

    graph: Graph
    device: Device
    pool: PoolArrays
    schedule: np.ndarray
    op_time: np.ndarray
    op_ws: np.ndarray
    impl_choice: np.ndarray | None
    options: PlannerOptions
    kind: np.ndarray
    ref: np.ndarray
    start: np.ndarray
    end: np.ndarray
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    resident_at_start: np.ndarray
    stats: dict = field(default_factory=dict)
    recompute: np.ndarray | None = None  # bool per node: a compute node re-running an op (plans from files)
    impl: np.ndarray | None = None       # int per node: the impl a compute event names (index into the op's
    #                                      implementations; plans from files, where a rerun may name another)
    offsets: np.ndarray | None = None    # int64 per tensor: its arena offset (-1: never on the device); arena pools

    @property
    def makespan(self) -> float:
        return float(self.end.max()) if len(self.end) else 0.0

    @property
    def n_nodes(self) -> int:
        return len(self.kind)

    def label(self, i: int) -> str:
        k = int(self.kind[i])
        if k == COMPUTE:
            return self.graph.ops[int(self.ref[i])].id
        return f"{EVENT_KINDS[k]}:{self.graph.tensors[int(self.ref[i])].id}"

    def deps(self, i: int) -> np.ndarray:
        return self.dep_idx[self.dep_ptr[i]:self.dep_ptr[i + 1]]

    def edges(self) -> list[tuple[str, str]]:
        """Control and data edges as labels (stream order is implicit: FIFO in node order)."""
        return [(self.label(int(d)), self.label(i)) for i in range(self.n_nodes) for d in self.deps(i)]

    def durations(self) -> np.ndarray:
        return self.end - self.start
