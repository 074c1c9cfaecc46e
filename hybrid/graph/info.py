"""What a graph holds and what memory it needs: the figures `hybrid info` prints."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hybrid.units import format_ratio
from hybrid.graph.liveness import distinct_sizes, occupied_bytes, peak_live_counts
from hybrid.device import DEFAULT_ALIGNMENT, Device
from hybrid.graph import TENSOR_KINDS, Graph
from hybrid.graph.order import program_order


@dataclass(frozen=True)
class GraphInfo:
    name: str
    ops: int
    tensors: int
    distinct_sizes: int
    bytes_by_kind: dict[str, int]
    persistent_bytes: int
    unswapped_peak_bytes: int
    largest_op: str
    largest_op_bytes: int
    ideal_s: float
    persistent_bound_s: float        # persistent tensors only (parameters, optimizer state): persistent_bound
    memory_bytes: int                # the device's memory, as the graph and plan formats' device.memory_bytes
    usable_bytes: int                # what a plan may fill: the device's memory less its reserve (Device.usable_bytes)
    # What each bound bounds: every plan of its set is at least this slow. A set inside another takes the larger
    # of its own bound and the other's (a program-order plan is one of the any-order plans; a swap-only plan is
    # one of those that may recompute), so no figure is below that of a set holding its plans.
    # None: not computed (`graph_info` leaves them to `hybrid.bounds.with_bounds`), never a bound of zero seconds
    graph_bound_s: float | None = None       # plans in any order, with recompute (every plan): graph_bound
    graph_swap_bound_s: float | None = None  # plans in any order, swap only: graph_bound without reruns
    # plans in this (program) order, with recompute (activation_bound) / swap only; named apart from a plan
    # row's `recompute_bound_s` / `swap_bound_s` (hybrid.pipeline.rows), which bound plans in any order
    program_order_recompute_bound_s: float | None = None
    program_order_swap_bound_s: float | None = None
    # the ideal with each op's fastest implementation (convolution algorithms), which the bounds assume: below
    # `ideal_s` (the default implementations) where a graph offers a faster one
    fastest_ideal_s: float | None = None

    def rows(self) -> list[tuple[str, str]]:
        from hybrid.units import format_bytes, format_bytes_up
        from hybrid.units import format_seconds as _fs

        def format_seconds(v: float) -> str:
            return _fs(v) if v < float("inf") else "none of these plans fits the memory"

        out = [("graph", self.name), ("ops", str(self.ops)), ("tensors", str(self.tensors)),
               ("distinct tensor sizes", str(self.distinct_sizes))]
        out += [(f"bytes: {k}", format_bytes(v)) for k, v in self.bytes_by_kind.items() if v]
        out += [("bytes: persistent", format_bytes(self.persistent_bytes)),
                ("peak, unswapped program order", f"{format_bytes(self.unswapped_peak_bytes)} ({self.unswapped_peak_bytes} B)"),
                ("largest single op (ins+outs+workspace)",
                 f"{format_bytes_up(self.largest_op_bytes)} ({self.largest_op_bytes} B, {self.largest_op}): "
                 "no plan runs with less memory"),
                ("device memory a plan may fill", f"{format_bytes(self.usable_bytes)} "
                                  f"({_share_of_peak(self.usable_bytes, self.unswapped_peak_bytes)})"),
                *(([("ideal (compute only, default implementations)", format_seconds(self.ideal_s)),
                    ("ideal (compute only, fastest implementations)", format_seconds(self.fastest_ideal_s))])
                  if self.fastest_ideal_s is not None and self.fastest_ideal_s < self.ideal_s else
                  [("ideal (compute only)", format_seconds(self.ideal_s))]),
                ("lower bound, persistent tensors only", format_seconds(self.persistent_bound_s))]
        if self.graph_bound_s is not None:
            out += [("lower bound, plans in any order, with recompute", format_seconds(self.graph_bound_s))]
            if self.program_order_recompute_bound_s is not None:
                out += [("lower bound, plans in this (program) order, with recompute",
                         format_seconds(self.program_order_recompute_bound_s))]
            out += [("lower bound, plans in any order, swap only", format_seconds(self.graph_swap_bound_s))]
            if self.program_order_swap_bound_s is not None:
                out += [("lower bound, plans in this (program) order, swap only",
                         format_seconds(self.program_order_swap_bound_s))]
        return out


def graph_info(g: Graph, device: Device) -> GraphInfo:
    """The figures `hybrid info` prints, less the lower bounds that count activations (None here): those need
    the plan and recompute rules, so `hybrid.bounds.with_bounds` adds them."""
    a = g.arrays
    by_kind = {k: 0 for k in TENSOR_KINDS}
    for t in g.tensors:
        by_kind[t.kind] += t.bytes
    align = device.alignment_bytes
    order = program_order(g)
    _, peak = peak_live_counts(g, order, align)
    op_i, op_bytes = largest_op(g, align)
    lb = persistent_bound(g, device)
    return GraphInfo(g.name, a.n_ops, a.n_tensors, len(distinct_sizes(g)), by_kind,
                     int(a.t_bytes[a.t_persistent].sum()), peak, g.ops[op_i].id if a.n_ops else "", op_bytes,
                     ideal_time(g), lb, device.memory_bytes, device.usable_bytes,
                     fastest_ideal_s=float(a.fastest_impl_times().sum()))


def op_footprints(g: Graph, align: int = 1, op_ws: np.ndarray | None = None) -> np.ndarray:
    """Bytes each op needs at once with its default impl (or the workspaces `op_ws`, per op): distinct inputs,
    outputs (each rounded up to `align`), workspace."""
    a = g.arrays
    t_mem = occupied_bytes(g, align)
    op_of_in = np.repeat(np.arange(a.n_ops), np.diff(a.in_ptr))
    op_of_out = np.repeat(np.arange(a.n_ops), np.diff(a.out_ptr))
    ins = np.zeros(a.n_ops, np.int64)
    np.add.at(ins, op_of_in, t_mem[a.in_idx])
    np.add.at(ins, op_of_out, t_mem[a.out_idx])
    return ins + (a.op_ws if op_ws is None else op_ws)


def largest_op(g: Graph, align: int = 1, op_ws: np.ndarray | None = None) -> tuple[int, int]:
    """(op index, bytes) of the op with the largest footprint: a floor on the memory of any plan that runs the
    default implementations (or the workspaces `op_ws`); an op with a leaner implementation may need less
    (`hybrid.bounds` takes each op's least)."""
    fp = op_footprints(g, align, op_ws)
    if len(fp) == 0:
        return 0, 0
    i = int(np.argmax(fp))
    return i, int(fp[i])


def largest_workspace(g: Graph, default_only: bool = False) -> int:
    """The largest workspace of any op and any of its implementations (0 where none states one); with
    `default_only`, of what runs where a plan chooses no implementation: each op's own `workspace_bytes`, as the
    planners read it (`GraphArrays.impl_arrays(None)`), its default impl's."""
    if default_only:
        return int(g.arrays.op_ws.max(initial=0))
    return max((max([op.workspace_bytes] + [im.workspace_bytes for im in op.impls]) for op in g.ops), default=0)


def graph_alignment(g: Graph) -> int:
    """The alignment of the graph's own device (the default one when the file states none)."""
    return g.device.alignment_bytes if g.device is not None else DEFAULT_ALIGNMENT


def unswapped_peak(g: Graph, align: int | None = None) -> int:
    """Device bytes the program order needs without swapping, each copy at the device's alignment (default:
    the graph device's)."""
    return peak_live_counts(g, program_order(g), graph_alignment(g) if align is None else align)[1]


def fraction_of_peak(g: Graph, fraction: float) -> int:
    """Device memory equal to `fraction` of the unswapped peak (how benchmarks set memory)."""
    return int(np.floor(unswapped_peak(g) * fraction))


def ideal_time(graph: Graph, op_time: np.ndarray | None = None) -> float:
    """Sum of compute times (the chosen impls; default impls when not given): infinite memory, no copies."""
    return float((graph.arrays.op_time if op_time is None else op_time).sum())


def persistent_bound(graph: Graph, device: Device) -> float:
    """No plan on this device can be faster than this, counting persistent tensors only (activations:
    `hybrid.bounds.graph_bound`, which includes this figure). On every SwapAdvisor graph it equals the
    ideal: their parameters and optimizer state fit.

    max(compute with the fastest impls,
        (bytes of persistent tensors any op reads - memory) / h2d,
        (bytes of persistent tensors any op updates - memory) / d2h):
    at most `memory` bytes of persistent tensors can stay resident across
    iterations; every other one read must come in, and every other one
    updated must go back out, each iteration. Cost: O(T + r), linear in the tensors and their uses.
    """
    a = graph.arrays
    used = np.zeros(a.n_tensors, dtype=bool)
    used[a.in_idx] = True
    updated = np.zeros(a.n_tensors, dtype=bool)
    updated[a.upd_idx] = True
    m = device.usable_bytes
    b_in = int(a.t_bytes[used & a.t_persistent].sum())
    b_out = int(a.t_bytes[updated].sum())
    return max(float(a.fastest_impl_times().sum()), (b_in - m) / device.h2d_bytes_per_s, (b_out - m) / device.d2h_bytes_per_s)



def bindings(graph: Graph, needed_for: str | None = None) -> dict:
    """What `hybrid capture` bound the graph's tensors to (`extra["bindings"]`: inputs, parameters, buffers,
    optimizer state, gradients, outputs, loss), read in one place. A graph capture did not make (synthetic,
    imported) has none: {} — or, when `needed_for` says what needs them ("executed", "replayed"), one line."""
    from hybrid.errors import HybridError

    b = graph.extra.get("bindings")
    if isinstance(b, dict):
        return b
    if needed_for is not None:
        raise HybridError(f"graph {graph.name!r} has no 'bindings'; only graphs from hybrid capture can be "
                          f"{needed_for}")
    return {}


def binds_loss(graph: Graph) -> bool:
    """Whether the graph computes a loss (a training step, or an inference graph captured with its loss before
    inference graphs were the forward alone): a run then takes the batch's label and the loss function."""
    return bindings(graph).get("loss") is not None


def is_inference(graph: Graph) -> bool:
    """Whether `graph` was captured without a backward pass and optimizer step: its capture's `training`
    record, else its bindings (no optimizer state, no gradients). A graph that is neither captured nor bound
    (synthetic, imported) counts as inference here; `training_reason` also looks at its ops."""
    capture = graph.extra.get("capture")
    if isinstance(capture, dict) and isinstance(capture.get("training"), bool):
        return not capture["training"]
    b = bindings(graph)
    return not (b.get("optimizer") or b.get("grads"))


def training_reason(graph: Graph) -> str | None:
    """Why `graph` cannot be served or placed as inference, or None: it was captured for training
    (`is_inference`), or an op updates a tensor in place (an optimizer step, or batch norm's running
    statistics in train mode; random ops' generator state does not count). `hybrid place` and `hybrid serve`
    take inference graphs: a training step's backward pass and optimizer step are no request's work, and an
    op that updates a tensor cannot run on the host."""
    from hybrid.graph.rerun import updates_generator_only

    if not is_inference(graph):
        return "it was captured for training, with a backward pass and an optimizer step"
    for op in graph.ops:
        if op.updates and not updates_generator_only(graph, op):
            return f"op {op.id!r} updates {', '.join(op.updates)} in place"
    return None


def _share_of_peak(usable: int, peak: int) -> str:
    """The memory against the unswapped peak: a share below it, a multiple above (not "251437.0% of the peak")."""
    if usable <= peak:
        return f"{100 * usable / max(1, peak):.1f}% of the peak"
    return f"{format_ratio(usable / max(1, peak))}x the peak: nothing need swap"
