"""The stage problem the MILP sees: nodes in a fixed topological order, each one op or a segment of ops.

MO-SOS and Checkmate give stage t to node t of a topological order. On the fine graph a node is
one op and its implementations are the op's `impls`. Big graphs are coarsened: a node is a run of
consecutive ops of the order, so the model has one stage per segment (docs/milp.md, "Coarsening"). Only
tensors that cross a node boundary are managed by the model (kept, freed, offloaded, prefetched,
regenerated); tensors born and dead inside a segment are freed inside it, and their peak is charged to the
segment as workspace. Persistent tensors (parameters, optimizer state, inputs) stay resident for the whole
iteration (the paper's fixed M_input + M_param + M_grad) unless `manage_persistent`: then each read one is
managed too, with no producer (`producer == START`, a host copy valid at the start) and the stages that update
it in place (`updated_at`): it may start on the device or not, be dropped while its host copy is current,
offloaded after its last update and prefetched (docs/milp.md, "Persistent tensors").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.graph.order import program_order
from hybrid.graph.rerun import own_updates_exempt, why_not_rerunnable


@dataclass(frozen=True)
class NodeImpl:
    """One way to run a node: an impl index per op, the summed time and the peak bytes beyond the node's
    managed inputs and outputs (op workspace plus, for a segment, its internal tensors)."""

    choice: tuple[int, ...]
    time_s: float
    workspace: int


@dataclass(frozen=True)
class Node:
    ops: tuple[int, ...]              # op indices, in order
    impls: tuple[NodeImpl, ...]
    inputs: tuple[int, ...]           # managed tensors read (produced by earlier nodes)
    outputs: tuple[int, ...]          # managed tensors produced (read by later nodes, or dead)
    rerunnable: bool                  # every op may rerun (hybrid.graph.rerun)
    rerun_until: int                  # last stage a rerun may run in (an in-place update of what it reads follows)

    @property
    def fastest(self) -> int:
        return int(np.argmin([im.time_s for im in self.impls]))

    @property
    def leanest(self) -> int:
        """The impl a workspace-blind planner runs: least workspace, then fastest."""
        return min(range(len(self.impls)), key=lambda v: (self.impls[v].workspace, self.impls[v].time_s))

    @property
    def default(self) -> int:
        return 0


@dataclass(frozen=True)
class StageProblem:
    graph: Graph
    device: Device
    order: np.ndarray                 # op indices, topological
    nodes: tuple[Node, ...]
    managed: tuple[int, ...]          # tensor indices the model decides about
    mem: dict[int, int]               # occupied bytes per managed tensor
    producer: dict[int, int]          # managed tensor -> node
    readers: dict[int, tuple[int, ...]]  # managed tensor -> reader nodes (ascending)
    need: dict[int, int]              # managed tensor -> last stage that may read it (reruns included)
    offloadable: frozenset[int]       # managed tensors with a host copy possible (bytes > 0, never updated)
    fixed_bytes: int                  # persistent tensors not managed, resident throughout
    persistent: frozenset[int] = frozenset()   # managed persistent tensors (producer START, need n)
    updated_at: dict[int, tuple[int, ...]] | None = None  # managed persistent tensor -> stages updating it
    resident: frozenset[int] = frozenset()     # persistent tensors not managed that stay on the device

    def is_persistent(self, j: int) -> bool:
        return j in self.persistent

    def updates(self, j: int) -> tuple[int, ...]:
        return (self.updated_at or {}).get(j, ())

    @property
    def n(self) -> int:
        return len(self.nodes)


START = -1  # the producer of a managed persistent tensor: it exists before stage 0


def segments_even(n_ops: int, n_stages: int) -> list[tuple[int, int]]:
    """[lo, hi) positions of `n_stages` runs of nearly equal length over an order of `n_ops` ops."""
    k = max(1, min(n_stages, n_ops))
    cuts = np.linspace(0, n_ops, k + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a]


def readers_of(g: Graph) -> list[list[int]]:
    """Ops reading each tensor."""
    a = g.arrays
    out: list[list[int]] = [[] for _ in range(a.n_tensors)]
    for o in range(a.n_ops):
        for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]:
            out[int(t)].append(o)
    return out


def segment_footprint(g: Graph, device: Device, ops: tuple[int, ...], readers: list[list[int]]) -> int:
    """Bytes the model charges a segment while it runs (leanest impls): every tensor it reads from outside
    and every tensor it makes that leaves it, for the whole segment, plus its internal peak and workspace."""
    a = g.arrays
    inside = set(ops)
    produced = {int(t) for o in ops for t in a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]]}
    boundary: set[int] = set()
    for o in ops:
        for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]:
            if int(t) not in produced and not a.t_persistent[t]:
                boundary.add(int(t))
    for t in produced:
        if any(r not in inside for r in readers[t]) or not readers[t]:
            boundary.add(t)
    occ = [device.occupied(int(b)) for b in a.t_bytes]
    lean = _node_impls(g, device, ops, boundary, occ)[-1]
    return sum(occ[t] for t in boundary) + lean.workspace


def segments_by_footprint(g: Graph, device: Device, order: np.ndarray, n_stages: int) -> list[tuple[int, int]]:
    """Merge neighbouring segments, smallest merged footprint first, until `n_stages` remain.

    Even op counts put two big ops in one segment, and the model charges a segment all its boundary tensors at
    once: such a segment can need more memory than any single op. Merging the cheapest neighbours first keeps
    every segment's footprint near its largest op's (small ops, optimizer steps, pools merge first)."""
    segs = [(i, i + 1) for i in range(len(order))]
    foot: dict[tuple[int, int], int] = {}
    rd = readers_of(g)

    def fp(lo: int, hi: int) -> int:
        if (lo, hi) not in foot:
            foot[lo, hi] = segment_footprint(g, device, tuple(int(o) for o in order[lo:hi]), rd)
        return foot[lo, hi]

    cap = max(1, -(-len(order) // max(1, n_stages)) * 2)  # no segment longer than twice the even length
    while len(segs) > max(1, n_stages):
        best = None
        for k in range(len(segs) - 1):
            lo, hi = segs[k][0], segs[k + 1][1]
            if hi - lo > cap:
                continue
            cost = (fp(lo, hi), hi - lo)
            if best is None or cost < best[0]:
                best = (cost, k)
        if best is None:
            cap *= 2
            continue
        k = best[1]
        segs[k:k + 2] = [(segs[k][0], segs[k + 1][1])]
    return segs


def build_problem(graph: Graph, device: Device, stages: int | None = None,
                  order: np.ndarray | None = None, segmentation: str = "footprint",
                  manage_persistent: bool = False) -> StageProblem:
    """The stage problem of `graph` in `order` (default: program order); `stages` < #ops coarsens into that
    many segments of consecutive ops (`segmentation`: "footprint", see segments_by_footprint, or "even").
    `manage_persistent`: persistent tensors that an op reads are managed too (module docstring)."""
    g = graph
    a = g.arrays
    if order is None:
        order = program_order(g)
    else:
        from hybrid.graph.order import is_topological

        order = np.asarray(order)
        if len(order) != len(g.ops) or not is_topological(g, order):
            raise HybridError("milp: the stage order must be a topological order of all the graph's ops")
    n_ops = len(order)
    if not stages or stages >= n_ops:
        segs = [(i, i + 1) for i in range(n_ops)]
    elif segmentation == "even":
        segs = segments_even(n_ops, stages)
    else:
        segs = segments_by_footprint(g, device, order, stages)
    node_of_op = np.empty(a.n_ops, np.int64)
    for q, (lo, hi) in enumerate(segs):
        node_of_op[order[lo:hi]] = q
    persistent = a.t_persistent
    occ = [device.occupied(int(b)) for b in a.t_bytes]
    reader_nodes: dict[int, set[int]] = {}
    for o in range(a.n_ops):
        for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]:
            if not persistent[t] or manage_persistent:
                reader_nodes.setdefault(int(t), set()).add(int(node_of_op[o]))
    updated = {int(t) for t in a.upd_idx}
    # A tensor crossing no node boundary (read only in its own segment, or dead in a segment of several ops)
    # stays inside; a dead output of a single-op node is managed (the op allocates it; the model frees it).
    managed: list[int] = []
    producer: dict[int, int] = {}
    pers: set[int] = set()
    for t in range(a.n_tensors):
        if persistent[t]:
            if manage_persistent and t in reader_nodes:
                managed.append(t)
                producer[t] = START
                pers.add(t)
            continue
        p = int(node_of_op[a.t_producer[t]])
        rs = reader_nodes.get(t, set())
        if any(r != p for r in rs) or (not rs and segs[p][1] - segs[p][0] == 1):
            managed.append(t)
            producer[t] = p
    managed_set = set(managed)
    # The stages that update each tensor in place (a rerun after such an update computes another value).
    upd_at: dict[int, list[tuple[int, int]]] = {}
    for o in range(a.n_ops):
        for t in a.upd_idx[a.upd_ptr[o]:a.upd_ptr[o + 1]]:
            upd_at.setdefault(int(t), []).append((int(node_of_op[o]), o))
    nodes: list[Node] = []
    for q, (lo, hi) in enumerate(segs):
        ops = tuple(int(o) for o in order[lo:hi])
        ins: dict[int, None] = {}
        outs: dict[int, None] = {}
        rerunnable = True
        until = len(segs) - 1
        for o in ops:
            op = g.ops[o]
            if why_not_rerunnable(g, op):
                rerunnable = False
            touched = list(a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]) + list(a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]])
            for t in touched:
                for s, o_upd in upd_at.get(int(t), ()):
                    if o_upd == o and len(ops) == 1 and own_updates_exempt(g, op):
                        continue  # batch norm's statistics, a generator's state: the rerun redoes them on copies
                    if s >= q:
                        until = min(until, s)
            for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]:
                if int(t) in managed_set and producer[int(t)] != q:
                    ins[int(t)] = None
            for t in a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]]:
                if int(t) in managed_set:
                    outs[int(t)] = None
        impls = _node_impls(g, device, ops, set(outs) | set(ins), occ)
        nodes.append(Node(ops, impls, tuple(ins), tuple(outs), rerunnable, until if rerunnable else q))
    readers = {t: tuple(sorted(r for r in reader_nodes.get(t, ()) if r != producer[t])) for t in managed}
    updated_at = {t: tuple(sorted({s for s, _ in upd_at.get(t, ())})) for t in pers}
    # need[t]: the last stage a read of t may happen in, counting reads by reruns of its readers.
    need: dict[int, int] = {}
    node_need = [q for q in range(len(nodes))]
    for t in pers:
        need[t] = len(nodes)  # through the end: whether it is resident then is part of the plan
    for q in reversed(range(len(nodes))):
        nd = nodes[q]
        for t in nd.outputs:  # readers come later: their needs are known
            need[t] = max([producer[t]] + [node_need[r] for r in readers[t]])
        if nd.rerunnable:
            node_need[q] = max([q] + [min(need[t], nd.rerun_until) for t in nd.outputs])
    # A persistent tensor's host copy is current after an update only once it is copied back: offloadable.
    offloadable = frozenset(t for t in managed if a.t_bytes[t] > 0 and (t not in updated or t in pers))
    # Not managed: resident throughout; with manage_persistent only the ones no op reads, which stay on the host.
    resident = frozenset(t for t in range(a.n_tensors) if persistent[t] and not manage_persistent)
    fixed = sum(occ[t] for t in resident)
    return StageProblem(g, device, order, tuple(nodes), tuple(managed), {t: occ[t] for t in managed}, producer,
                        readers, need, offloadable, int(fixed), frozenset(pers), updated_at, resident)


def _node_impls(g: Graph, device: Device, ops: tuple[int, ...], boundary: set[int],
                occ: list[int]) -> tuple[NodeImpl, ...]:
    """A single op: its impls. A segment: every op on its default, on its fastest, or on its leanest impl
    (per-op choice inside a segment would multiply the variables; docs/milp.md)."""
    a = g.arrays
    if len(ops) == 1:
        o = ops[0]
        lo, hi = a.impl_ptr[o], a.impl_ptr[o + 1]
        return tuple(NodeImpl((v,), float(a.impl_time[lo + v]), int(a.impl_ws[lo + v])) for v in range(hi - lo))
    choices: dict[tuple[int, ...], None] = {}
    for pick in ("default", "fastest", "leanest"):
        c = []
        for o in ops:
            lo, hi = int(a.impl_ptr[o]), int(a.impl_ptr[o + 1])
            if pick == "default":
                c.append(int(a.default_impl[o]))
            elif pick == "fastest":
                c.append(int(np.argmin(a.impl_time[lo:hi])))
            else:
                c.append(min(range(hi - lo), key=lambda v: (a.impl_ws[lo + v], a.impl_time[lo + v])))
        choices[tuple(c)] = None
    out = []
    for c in choices:
        time = 0.0
        internal_live = 0
        peak = 0
        last_use: dict[int, int] = {}
        for k, o in enumerate(ops):
            for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]:
                last_use[int(t)] = k
        for k, o in enumerate(ops):
            lo = int(a.impl_ptr[o])
            time += float(a.impl_time[lo + c[k]])
            born = [int(t) for t in a.out_idx[a.out_ptr[o]:a.out_ptr[o + 1]] if int(t) not in boundary]
            internal_live += sum(occ[t] for t in born)
            peak = max(peak, internal_live + int(a.impl_ws[lo + c[k]]))
            for t in born:
                if last_use.get(t, k) <= k:
                    internal_live -= occ[t]
            for t in a.in_idx[a.in_ptr[o]:a.in_ptr[o + 1]]:
                t = int(t)
                if t not in boundary and not g.tensors[t].persistent and last_use[t] == k and \
                        int(a.t_producer[t]) in ops and ops.index(int(a.t_producer[t])) < k:
                    internal_live -= occ[t]
        out.append(NodeImpl(c, time, peak))
    return tuple(out)


def stage_needs(pb: StageProblem) -> list[int]:
    """Bytes node q's first run needs at once in any plan of the model: the resident persistent tensors, its
    managed inputs and outputs, and its leanest implementation's workspace (no plan of these stages has less)."""
    return [pb.fixed_bytes + sum(pb.mem[j] for j in dict.fromkeys(nd.inputs + nd.outputs)) +
            nd.impls[nd.leanest].workspace for nd in pb.nodes]


def memory_refusal(graph: Graph, device: Device, options: "ModelOptions") -> str | None:  # noqa: F821
    """Why no plan of the model fits `device`, naming the stage, its tensors and the memory that would suffice
    (the refusal the swap planner gives for an op that cannot fit), or None when every stage fits on its own.
    Checked on the uncoarsened stages, before any model is built."""
    from hybrid.units import format_bytes, listed

    pb = build_problem(graph, device, None, manage_persistent=options.manages_persistent)
    needs = stage_needs(pb)
    if not needs or max(needs) <= device.usable_bytes:
        return None
    q = int(np.argmax(needs))
    nd = pb.nodes[q]
    g = pb.graph
    ts = sorted(dict.fromkeys(nd.inputs + nd.outputs), key=lambda j: -pb.mem[j])
    names = listed([f"{g.tensors[j].id} ({format_bytes(pb.mem[j])})" for j in ts], 6)
    ws = nd.impls[nd.leanest].workspace
    # persistent tensors stay resident where the model does not manage them: --activations-only, or --no-offload
    # (nothing is copied out); name the flag given
    why = ", ".join(f for f, on in (("--no-offload", not options.offload),
                                    ("--activations-only", not options.persistent)) if on)
    resident = f" on top of {format_bytes(pb.fixed_bytes)} of persistent tensors kept resident " \
               f"({why})" if pb.fixed_bytes else ""
    return (f"milp: stage {q} (op {g.ops[nd.ops[0]].id!r}) needs {format_bytes(needs[q])} at once: {names}"
            + (f", workspace {format_bytes(ws)}" if ws else "") + resident
            + f"; the device has {format_bytes(device.usable_bytes)}: give --memory of at least "
            f"{max(needs) + device.reserve_bytes}B ({format_bytes(max(needs) + device.reserve_bytes)})")
