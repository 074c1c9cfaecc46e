"""Which ops may run a second time (a recompute) and reproduce their outputs: one rule for the planner,
the validator and the executor.

A rerun must compute the same values as the first run. That fails for ops
whose outputs are not a function of their inputs (uninitialized memory), and
for ops that update tensors in place (the update would apply twice, and the
outputs may read the updated values). Two kinds of update are safe:

- batch norm in training mode updates its running statistics, which its
  outputs never read (they use the batch's own statistics): the executor
  reruns it on copies of the statistics and drops the copies;
- a random op updates only the generator state (zero-byte tensors of kind
  `other`): the executor records the generator state before the op's first
  run and replays it for the rerun, so the same mask comes out.

Inputs the op updates itself are therefore exempt from "no update since the
first run"; any other update of an input in between still forbids a rerun.
"""
from __future__ import annotations

from hybrid.graph.types import Graph, Op
from hybrid.units import shown_id

BATCH_NORM_KINDS = frozenset({"native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                              "cudnn_batch_norm", "miopen_batch_norm"})
RANDOM_KINDS = frozenset({"bernoulli", "bernoulli_", "native_dropout", "dropout", "rand", "rand_like", "randn",
                          "randn_like", "randint", "randint_like", "randperm", "normal", "normal_", "uniform_",
                          "multinomial", "exponential_", "random_"})
# ops that read the generator's state (hybrid.capture.rng: a checkpointed region's stash)
GENERATOR_STATE_KINDS = frozenset({"save_state"})
# ops that only allocate (capture costs them nothing)
UNINITIALIZED_KINDS = frozenset({"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided"})


# in-place ops that write every element of their first argument without reading it (dropout's mask draw)
OVERWRITE_KINDS = frozenset({"bernoulli_", "uniform_", "normal_", "random_", "exponential_", "fill_", "zero_"})


def overwritten_whole(graph: Graph, op: Op) -> bool:
    """An allocation (`empty_like`) whose every reader overwrites it whole, in place, as a new version (the
    aten record's `versions`): a rerun's uninitialized bytes are never read, so it reproduces what matters."""
    if len(op.outputs) != 1:
        return False
    out = op.outputs[0]
    readers = _readers(graph).get(out, ())
    return bool(readers) and all(_overwrites(r, out) for r in readers)


def _readers(graph: Graph) -> dict[str, list[Op]]:
    cached = graph.__dict__.get("_rerun_readers")
    if cached is None:
        cached = {}
        for o in graph.ops:
            for t in dict.fromkeys(o.inputs):
                cached.setdefault(t, []).append(o)
        graph.__dict__["_rerun_readers"] = cached
    return cached


def _overwrites(op: Op, tensor: str) -> bool:
    rec = op.extra.get("aten") if isinstance(op.extra.get("aten"), dict) else None
    if op.kind not in OVERWRITE_KINDS or rec is None:
        return False
    args = rec.get("args") or []
    first = args[0] if args else None
    # Its first argument is the new version of the tensor itself (no view: every element).
    versions = rec.get("versions") or {}
    return (isinstance(first, dict) and not first.get("view") and versions.get(first.get("t")) == tensor
            and list(op.inputs).count(tensor) == 1)


def _training_batch_norm(op: Op) -> bool:
    """Batch norm with training=True (the aten record's sixth argument; capture records every one)."""
    if op.kind not in BATCH_NORM_KINDS:
        return False
    args = (op.extra.get("aten") or {}).get("args") if isinstance(op.extra.get("aten"), dict) else None
    return isinstance(args, list) and len(args) > 5 and args[5] is True


def updates_generator_only(graph: Graph, op: Op) -> bool:
    """A random op whose only in-place updates are generator state (zero bytes, kind `other`)."""
    return bool(op.updates) and op.kind in RANDOM_KINDS and all(
        graph.tensor(t).bytes == 0 and graph.tensor(t).kind == "other" for t in op.updates)


def rerun_on_copies(op: Op) -> bool:
    """A rerun runs on copies of the tensors the op updates (batch norm's running statistics)."""
    return bool(op.updates) and _training_batch_norm(op)


def why_not_rerunnable(graph: Graph, op: Op) -> str:
    """'' when a rerun of `op` reproduces its outputs (see the module docstring), else why not."""
    if op.updates and not (rerun_on_copies(op) or updates_generator_only(graph, op)):
        return ("updates " + ", ".join(shown_id(t) for t in op.updates)
                + " in place (a rerun would apply the update twice)")
    if not op.outputs:
        return "has no outputs"
    if op.kind in GENERATOR_STATE_KINDS:
        return f"reads the generator's state ({op.kind}); a rerun would read a later one"
    if op.kind in UNINITIALIZED_KINDS and not overwritten_whole(graph, op):
        return f"returns uninitialized memory ({op.kind})"
    if any(graph.tensor(t).persistent for t in op.outputs):
        return "writes a persistent tensor"
    if op.kind in RANDOM_KINDS and not updates_generator_only(graph, op):
        return f"is random ({op.kind}) and records no generator state to replay"
    return ""


def own_updates_exempt(graph: Graph, op: Op) -> bool:
    """Whether the op's own updates do not stop a rerun (they are redone on copies or replayed)."""
    return rerun_on_copies(op) or updates_generator_only(graph, op)
