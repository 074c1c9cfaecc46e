"""Cut an inference graph into parts where a single tensor crosses (the CPU/GPU partitioning paper's "key operators").

In program order, a boundary between positions k-1 and k is a cut when exactly one non-persistent tensor
is live across it — written before, read after. Parameters are uploaded once, not per inference, so they
never count. At a cut the parts before and after exchange only that tensor: placing them on different
devices costs one copy of it. Key-operator cuts are the cuts right after a pooling or concatenation op
(the paper's VGG16 blocks end at max-pools); every cut is a candidate for the exact schedulers, which may
keep adjacent parts on one device, so fine cuts lose nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.graph.info import bindings
from hybrid.graph.order import program_order

KEY_KINDS = ("max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool", "cat", "concat")


@dataclass(frozen=True)
class Part:
    """Ops `ops` (indices, program order); their GPU (`time_s`) and CPU (`cpu_time_s`) times; the bytes of
    the one tensor crossing the cut after it (`out_bytes`, 0 for the last part) and of its parameters."""

    index: int
    ops: tuple[int, ...]
    gpu_s: float
    cpu_s: float
    out_tensor: str
    out_bytes: int
    param_bytes: int


def cuts(graph: Graph, order: np.ndarray | None = None) -> list[tuple[int, int]]:
    """(position k, tensor index) of every boundary before position k that one live tensor alone crosses."""
    a = graph.arrays
    order = program_order(graph) if order is None else np.asarray(order)
    n = len(order)
    pos = np.empty(a.n_ops, np.int64)
    pos[order] = np.arange(n)
    first = np.full(a.n_tensors, n, np.int64)
    last = np.full(a.n_tensors, -1, np.int64)
    prod = a.t_producer
    has = prod >= 0
    first[has] = pos[prod[has]]
    readers = np.repeat(np.arange(a.n_ops), np.diff(a.in_ptr))
    np.maximum.at(last, a.in_idx, pos[readers])
    live = ~a.t_persistent & has & (last > first)
    delta = np.zeros(n + 1, np.int64)
    np.add.at(delta, first[live] + 1, 1)   # crosses boundaries first+1 .. last
    np.add.at(delta, last[live] + 1, -1)
    crossing = np.cumsum(delta)[:n]
    out = []
    for k in range(1, n):
        if crossing[k] == 1:
            t = np.nonzero(live & (first < k) & (last >= k))[0]
            out.append((k, int(t[0])))
    return out


def key_cuts(graph: Graph, order: np.ndarray | None = None) -> list[tuple[int, int]]:
    """The cuts right after a pooling or concatenation op."""
    order = program_order(graph) if order is None else np.asarray(order)
    return [(k, t) for k, t in cuts(graph, order) if graph.ops[int(order[k - 1])].kind.startswith(KEY_KINDS)]


def parts(graph: Graph, at: list[tuple[int, int]], order: np.ndarray | None = None) -> list[Part]:
    """The parts between consecutive cuts `at` (from `cuts` or `key_cuts`)."""
    a = graph.arrays
    order = program_order(graph) if order is None else np.asarray(order)
    bounds = [0] + [k for k, _ in at] + [len(order)]
    out_t = [t for _, t in at] + [-1]
    cpu = np.array([op.cpu_time_s if op.cpu_time_s is not None else np.nan for op in graph.ops])
    result = []
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        ops = tuple(int(o) for o in order[lo:hi])
        params = {int(t) for o in ops for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]] if a.t_persistent[t]}
        t = out_t[i]
        result.append(Part(i, ops, float(a.op_time[list(ops)].sum()), float(cpu[list(ops)].sum()),
                           graph.tensors[t].id if t >= 0 else "", int(a.t_bytes[t]) if t >= 0 else 0,
                           int(sum(int(a.t_bytes[p]) for p in params))))
    return result


# ---- the part graph: chains of parts, and branch stages (fork / branches / join) ---------------------------

CHAIN, BRANCH, JOIN = "chain", "branch", "join"
HOST = -1   # the source of a graph input and the destination of a graph output: host memory


@dataclass(frozen=True)
class Edge:
    """A tensor crossing parts: made by part `src` (HOST for a graph input), read by parts `dst`; `out` when
    it is a graph output, which must end in host memory."""

    tensor: int
    src: int
    dst: tuple[int, ...]
    bytes: int
    out: bool = False


def graph_outputs(graph: Graph) -> set[int]:
    """What an inference returns: the captured outputs and loss (`bindings`), else every tensor no op reads."""
    b = bindings(graph)
    ti = graph.tensor_index
    if b:
        refs = list(b.get("outputs") or []) + ([b["loss"]] if isinstance(b.get("loss"), dict) else [])
        found = {ti[r["t"]] for r in refs if isinstance(r, dict) and r.get("t") in ti}
        if found:
            return found
    read = {t for op in graph.ops for t in op.inputs}
    return {ti[t] for op in graph.ops for t in op.outputs if t not in read}


@dataclass(frozen=True)
class PartGraph:
    """Parts (op indices in program order, each run whole on one device) and the tensors between them.

    Parameters and other persistent tensors that are not inputs are uploaded once, before any inference, so
    they are not edges. Every edge's readers are mutually independent (no reader part depends on another), so
    a device-to-host copy that waits for the device readers of its tensor can never wait for a host reader
    (`part_graph` merges parts until this holds)."""

    graph: Graph
    ops: tuple[tuple[int, ...], ...]
    kind: tuple[str, ...]            # CHAIN, BRANCH or JOIN
    gpu_s: np.ndarray
    cpu_s: np.ndarray
    edges: tuple[Edge, ...]

    @property
    def n(self) -> int:
        return len(self.ops)

    @cached_property
    def part_of(self) -> np.ndarray:
        """Per op: the index of its part."""
        out = np.full(len(self.graph.ops), -1, np.int64)
        for p, ops in enumerate(self.ops):
            out[list(ops)] = p
        return out

    @property
    def is_chain(self) -> bool:
        """Parts in a line, as `chain.ChainCosts` models them: the inputs read by the first part only, one
        tensor from each part to the next, outputs from the last part only."""
        between = [e.src for e in self.edges if e.src != HOST and e.dst]
        return (all(e.dst == (0,) and not e.out for e in self.edges if e.src == HOST)
                and all(e.dst == (e.src + 1,) and not e.out for e in self.edges if e.src != HOST and e.dst)
                and all(e.src == self.n - 1 for e in self.edges if e.out)
                and sorted(between) == list(range(self.n - 1)))

    def predecessors(self) -> list[set[int]]:
        pred: list[set[int]] = [set() for _ in range(self.n)]
        for e in self.edges:
            if e.src != HOST:
                for d in e.dst:
                    pred[d].add(e.src)
        return pred

    def describe(self) -> str:
        """`0-4 5-9 [10-12|13-15]>16`: op position ranges; a branch stage in brackets, then its join. A part
        whose positions are not one run lists its runs (`11,27-29`: a branch that the other branches interleave
        in program order read `11-29`)."""
        out: list[str] = []
        for p, ops in enumerate(self.ops):
            rng = _runs(ops)
            if self.kind[p] == BRANCH:
                if p == 0 or self.kind[p - 1] != BRANCH:
                    out.append("[" + rng)
                else:
                    out[-1] += "|" + rng
            elif self.kind[p] == JOIN:
                out[-1] += "]>" + rng
            else:
                out.append(rng)
        return " ".join(out)


def _runs(positions: list[int]) -> str:
    """`11,27-29` for [11, 27, 28, 29]: runs of consecutive positions, in order."""
    xs = sorted(int(x) for x in positions)
    runs: list[str] = []
    i = 0
    while i < len(xs):
        j = i
        while j + 1 < len(xs) and xs[j + 1] == xs[j] + 1:
            j += 1
        runs.append(f"{xs[i]}-{xs[j]}" if j > i else f"{xs[i]}")
        i = j + 1
    return ",".join(runs)


def _branches(graph: Graph, seg: list[int], entry: int) -> tuple[list[list[int]], list[int]] | None:
    """Split a segment (op indices, program order) into independent branches and the join after them, or None
    when it has fewer than two branches or the join also reads the segment's entry tensor.

    A branch grows from each op that reads nothing made inside the segment; an op reading from two or more
    branches, and every op after it that reads the join, belongs to the join."""
    a = graph.arrays
    inside = set(seg)
    label: dict[int, int] = {}
    join: list[int] = []
    joined: set[int] = set()
    roots = 0
    for o in seg:
        srcs = {int(a.t_producer[t]) for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]}
        srcs = {p for p in srcs if p in inside}
        if srcs & joined or len({label[p] for p in srcs if p in label}) > 1:
            join.append(o)
            joined.add(o)
        elif srcs:
            label[o] = label[next(iter(srcs))]
        else:
            label[o] = roots
            roots += 1
    if roots < 2 or not join:
        return None
    if entry >= 0 and any(entry in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]] for o in join):
        return None
    groups: list[list[int]] = [[] for _ in range(roots)]
    for o in seg:
        if o in label:
            groups[label[o]].append(o)
    return [g for g in groups if g], join


def require_inference(graph: Graph, where: str) -> None:
    """Refuse a training graph (`hybrid.graph.info.training_reason`, the definition `hybrid serve` uses too),
    and an inference graph with an op that draws random numbers (it updates its generator state in place, which
    the host's cpu stream cannot do): an all-CPU row would time a placement no plan can hold, and the plan
    would fail validation only when written. `where` names the graph for the message (`--graph FILE`)."""
    from hybrid.graph.info import training_reason

    why = training_reason(graph)
    if why is not None:
        cap = graph.extra.get("capture")
        training = not (isinstance(cap, dict) and cap.get("training") is False)   # else a forward that updates
        how = ("capture one with `hybrid capture --optimizer none`" if training
               else "capture the module in eval mode, with a forward that changes no buffer")
        raise HybridError(f"{where}: {'a training graph' if training else 'not an inference graph'} ({why}); place "
                          f"cuts an inference graph: {how}")
    drawing = next((op for op in graph.ops if op.updates), None)
    if drawing is not None:
        raise HybridError(f"{where}: op {drawing.id!r} draws random numbers (it updates "
                          f"{', '.join(drawing.updates)} in place), which an op on the host cannot; capture the "
                          "module in eval mode (dropout off)")


def part_graph(graph: Graph, order: np.ndarray | None = None, key_only: bool = True,
               branches: bool = True) -> PartGraph:
    """The parts of an inference graph.

    Cuts are where one tensor alone crosses (`cuts`); with `key_only` the chain is cut only after pooling and
    concatenation (`key_cuts`, the paper's key operators), otherwise at every such cut. With `branches`, a
    stretch between two cuts whose ops form independent branches (an Inception module, a ResNet block with a
    downsample path) becomes a branch stage: one part per branch and one for the join — the fork is the op
    before the stretch, whose one output every branch reads. A cut whose tensor an earlier cut already carried
    is dropped (the parts between would both read it; merged, each edge has independent readers). A graph
    with an op that updates a tensor (training, a buffer the forward changes, a random draw) is refused
    (`require_inference`): an op on the host cannot update one."""
    require_inference(graph, f"graph {graph.name!r}")
    a = graph.arrays
    order = program_order(graph) if order is None else np.asarray(order)
    seen: set[int] = set()
    fine: list[tuple[int, int]] = []
    for k, t in cuts(graph, order):
        if t not in seen:
            seen.add(t)
            fine.append((k, t))
    key = {k for k, _ in fine if graph.ops[int(order[k - 1])].kind.startswith(KEY_KINDS)}
    bounds = [0] + [k for k, _ in fine] + [len(order)]
    entry = [-1] + [t for _, t in fine]
    parts_ops: list[list[int]] = []
    kinds: list[str] = []
    open_chain = False
    for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        seg = [int(o) for o in order[lo:hi]]
        split = _branches(graph, seg, entry[i]) if branches else None
        if split is not None:
            for b in split[0]:
                parts_ops.append(b)
                kinds.append(BRANCH)
            parts_ops.append(split[1])
            kinds.append(JOIN)
            open_chain = False
        elif open_chain and key_only:
            parts_ops[-1].extend(seg)
        else:
            parts_ops.append(seg)
            kinds.append(CHAIN)
            open_chain = True
        if hi in key:
            open_chain = False
    part_of = np.full(a.n_ops, -1, np.int64)
    for p, ops in enumerate(parts_ops):
        part_of[ops] = p
    edges: list[Edge] = []
    outs = graph_outputs(graph)
    readers: dict[int, set[int]] = {}
    for o in range(a.n_ops):
        for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]:
            readers.setdefault(int(t), set()).add(int(part_of[o]))
    input_kind = {i for i, t in enumerate(graph.tensors) if t.kind == "input"}
    for t in range(a.n_tensors):
        prod = int(a.t_producer[t])
        if prod < 0:
            if t in input_kind and t in readers:
                edges.append(Edge(t, HOST, tuple(sorted(readers[t])), int(a.t_bytes[t])))
            continue
        src = int(part_of[prod])
        dst = tuple(sorted(readers.get(t, set()) - {src}))
        if dst or t in outs:
            edges.append(Edge(t, src, dst, int(a.t_bytes[t]), t in outs))
    gpu = np.array([float(a.op_time[ops].sum()) for ops in parts_ops])
    cpu_t = np.array([op.cpu_time_s if op.cpu_time_s is not None else np.nan for op in graph.ops])
    cpu = np.array([float(cpu_t[ops].sum()) for ops in parts_ops])
    return PartGraph(graph, tuple(tuple(p) for p in parts_ops), tuple(kinds), gpu, cpu, tuple(edges))


def parts_table(pg: PartGraph) -> "pd.DataFrame":  # noqa: F821 - pandas is a core dependency
    """One row a part: its kind, op range, FLOPs, parameter bytes (uploaded once), GPU and CPU time, and the
    activation bytes it sends to other parts or to the host (what a device change at its end costs)."""
    import pandas as pd

    g = pg.graph
    a = g.arrays
    rows = []
    for p, ops in enumerate(pg.ops):
        params = {int(t) for o in ops for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]
                  if a.t_persistent[t] and g.tensors[int(t)].kind != "input"}
        flops = sum(float((g.ops[o].extra.get("cost") or {}).get("flops", 0.0)) for o in ops)
        sent = [e for e in pg.edges if e.src == p]
        rows.append({"part": p, "kind": pg.kind[p], "ops": len(ops),
                     "first_op": g.ops[ops[0]].id, "last_op": g.ops[ops[-1]].id, "gflops": flops / 1e9,
                     "param_bytes": int(sum(int(a.t_bytes[t]) for t in params)),
                     "gpu_ms": float(pg.gpu_s[p]) * 1e3, "cpu_ms": float(pg.cpu_s[p]) * 1e3,
                     "out_bytes": int(sum(e.bytes for e in sent)),
                     "out_tensors": " ".join(g.tensors[e.tensor].id for e in sent)})
    return pd.DataFrame(rows)
