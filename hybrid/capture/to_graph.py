"""Traced FX graph -> `hybrid-graph/1`: storages become tensors, real kernels become ops, views fold away.

The mapping (docs/capture.md has the full encoding):
- placeholders -> persistent tensors: `param:NAME` (kind param), `buffer:NAME`
  (other), `input:I` and `target:I` (input); optimizer state `state:NAME:KEY`
  (optimizer_state); `rng`, a 0-byte tensor (other) that every random op reads
  and updates, so random ops keep their relative order in any valid schedule;
  a checkpointed region's generator fork is `hybrid_rng` save/restore ops on it
  (hybrid.capture.rng), the states saved are tensors of kind other.
- every other storage -> one tensor named after the value that allocated it,
  kind activation (forward, and a checkpointed region's recomputation: hybrid.capture.recomputation) or
  gradient (backward), bytes = storage bytes.
- every call of a real kernel -> one op, with `aten` (how to replay it),
  `phase` and `cost`; view ops are folded into their consumers' arguments.
- an in-place op on a persistent tensor (batch-norm statistics, the
  optimizer) lists it in `updates`; an in-place op on an intermediate tensor
  writes a new version of its storage, a new graph tensor (the format's
  intermediate tensors are written once), which replay makes by copying the
  old version first (`aten.versions`).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.utils.flop_counter import flop_registry

from hybrid.capture import costs, rng
from hybrid.capture.encoding import (AS_STRIDED, OFFSET_FROM_ROOT, Ref, dtype_name, encode_ref, encode_value,
                                     target_name)
from hybrid.capture.optimizers import OptimizerSpec
from hybrid.capture.recomputation import RECOMPUTES
from hybrid.capture.storage import StorageTable, storage_bytes, storage_key, tensor_meta, view_bytes
from hybrid.capture.trace import BUFFER, FROZEN, INPUT, TARGET, TRAINABLE, Traced
from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph, Impl, Op, Tensor

RNG_ID = "rng"
_aten = torch.ops.aten
# Kernels that update running statistics in place although their schema does not say so:
# op -> (index of the `training` argument, indices of the updated arguments).
_HIDDEN_WRITES = {
    _aten.native_batch_norm.default: (5, (3, 4)),
    _aten.cudnn_batch_norm.default: (5, (3, 4)),
    _aten.miopen_batch_norm.default: (5, (3, 4)),
}
_CONST_LIMIT = 1 << 16  # elements a tensor constant may have to be stored in the graph file

SRef = tuple[Any, tuple[dict[str, Any], ...]]   # (storage key, view chain): resolved to a tensor id when used


class _Box:
    """A tensor reference inside an argument structure being encoded."""

    __slots__ = ("ref",)

    def __init__(self, ref: Ref) -> None:
        self.ref = ref


def _box_ref(x: Any) -> Ref | None:
    return x.ref if isinstance(x, _Box) else None


@dataclass
class _Builder:
    model: costs.CostModel
    table: StorageTable = field(default_factory=StorageTable)
    refs: dict[fx.Node, Any] = field(default_factory=dict)     # node -> SRef, list of SRef | None, or None
    tensors: dict[str, Tensor] = field(default_factory=dict)
    ops: list[Op] = field(default_factory=list)
    keys: list[tuple[int, int, int]] = field(default_factory=list)   # sort key per op (moves optimizer ops)
    producer: dict[str, int] = field(default_factory=dict)     # tensor id -> index in self.ops
    readers: dict[str, list[int]] = field(default_factory=dict)

    def add_tensor(self, t: Tensor) -> None:
        self.tensors[t.id] = t

    def ref(self, n: Any) -> Ref:
        """The current tensor id of a node's storage (its latest version) and the node's view chain."""
        r = self.refs.get(n)
        if not isinstance(r, tuple):
            raise HybridError(f"capture: value {getattr(n, 'name', n)!r} is not a tensor")
        return self.table.owners[r[0]], r[1]

    def boxed(self, a: Any) -> Any:
        """FX args with tensor nodes replaced by references to their storages' current versions."""
        def box(n: fx.Node) -> Any:
            r = self.refs.get(n)
            if r is None:
                return None
            if not isinstance(r, tuple):
                raise HybridError(f"capture: node {n.name!r} yields several values where one tensor was expected")
            return _Box(self.ref(n))

        return fx.node.map_arg(a, box)

    def add_op(self, op: Op, key: tuple[int, int, int] | None = None) -> None:
        i = len(self.ops)
        self.ops.append(op)
        self.keys.append(key or (i, 0, 0))
        for t in op.outputs:
            self.producer[t] = i
        for t in op.inputs:
            self.readers.setdefault(t, []).append(i)


def _written(node: fx.Node) -> list[tuple[int | str, Any]]:
    """(position or kwarg name, FX value) of each argument an op writes in place."""
    target = node.target
    out: list[tuple[int | str, Any]] = []
    for i, a in enumerate(target._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            if i < len(node.args):
                v, where = node.args[i], i
            else:
                v, where = node.kwargs.get(a.name), a.name
            if v is not None:
                out.append((where, v))
    hidden = _HIDDEN_WRITES.get(target)
    if hidden is not None:
        train_i, idx = hidden
        if len(node.args) > train_i and node.args[train_i]:
            out.extend((i, node.args[i]) for i in idx if i < len(node.args) and node.args[i] is not None)
    return out


def _is_random(target: Any) -> bool:
    return torch.Tag.nondeterministic_seeded in getattr(target, "tags", ())


def _val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, fx.Node) else n


def _live(nodes: list[fx.Node], roots: list[fx.Node]) -> set[fx.Node]:
    """Nodes whose values reach a root, plus ops with side effects (random, in-place) and what they read."""
    live: set[fx.Node] = set()
    root_set = set(roots)
    for n in reversed(nodes):
        if n.op in ("placeholder", "get_attr"):
            live.add(n)
            continue
        if n.op != "call_function":
            continue
        side = isinstance(n.target, torch._ops.OpOverload) and (_is_random(n.target) or n.target is rng.RESTORE
                                                                or bool(_written(n)))
        if n in root_set or side or any(u in live for u in n.users):
            live.add(n)
    return live


def _numel(v: Any) -> int:
    return v.numel() if isinstance(v, torch.Tensor) else 0


def _first_float_dtype(vals: list[Any]) -> str:
    for v in vals:
        if isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex()):
            return dtype_name(v.dtype)
    return "float32"


def _flops(node: fx.Node, kind: str, in_vals: list[Any], outs: list[Any]) -> int:
    f = flop_registry.get(node.target.overloadpacket)
    if f is not None:
        args = fx.node.map_arg(node.args, _val)
        kwargs = fx.node.map_arg(node.kwargs, _val)
        try:
            return int(f(*args, out_val=node.meta.get("val"), **kwargs))
        except Exception:  # noqa: BLE001 - a formula that does not fit this overload; fall back below
            pass
    if costs.op_class(kind) == "alloc":
        return 0
    # Element-wise ops and reductions: one FLOP per element of the larger side.
    return max([_numel(v) for v in outs] + [_numel(v) for v in in_vals] + [0])


def _cost(flops: int, nbytes: int, dtype: str, cls: str) -> dict[str, Any]:
    return {"flops": flops, "io_bytes": nbytes, "dtype": dtype, "class": cls, "time_s_source": "roofline",
            "cpu_time_s_source": "roofline"}


def convert(traced: Traced, optimizer: OptimizerSpec | None, model: costs.CostModel, name: str,
            device: Device | None) -> Graph:
    b = _Builder(model)
    gm = traced.gm
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    if len(placeholders) != len(traced.roles):
        raise HybridError(f"capture: traced {len(placeholders)} inputs but expected {len(traced.roles)}")
    trainable = [r.name for r in traced.roles if r.kind == TRAINABLE]
    roots = [n for n in [traced.loss, *traced.grads.values(), *traced.outputs] if isinstance(n, fx.Node)]
    live = _live(nodes, roots)
    loss_pos = nodes.index(traced.loss) if (traced.training and isinstance(traced.loss, fx.Node)) else len(nodes)

    # Names for the outputs of multi-output ops: the getitem node that reads each.
    item_name: dict[tuple[fx.Node, int], str] = {}
    for n in nodes:
        if n.op == "call_function" and n.target is operator.getitem and isinstance(n.args[0], fx.Node):
            item_name.setdefault((n.args[0], n.args[1]), n.name)

    # ---- persistent tensors --------------------------------------------------------
    ids = {TRAINABLE: "param:{}", FROZEN: "param:{}", BUFFER: "buffer:{}", INPUT: "input:{}", TARGET: "target:{}"}
    kinds = {TRAINABLE: "param", FROZEN: "param", BUFFER: "other", INPUT: "input", TARGET: "input"}
    bind_params: dict[str, str] = {}
    bind_buffers: dict[str, str] = {}
    bind_inputs: list[str] = []
    bind_targets: list[str] = []
    for role, ph in zip(traced.roles, placeholders):
        v = ph.meta["val"]
        tid = ids[role.kind].format(role.name)
        b.add_tensor(Tensor(tid, storage_bytes(v), kinds[role.kind], True, tensor_meta(v)))
        b.table.add(v, tid)
        b.refs[ph] = (storage_key(v), ())
        if role.kind in (TRAINABLE, FROZEN):
            bind_params[role.name] = tid
        elif role.kind == BUFFER:
            bind_buffers[role.name] = tid
        elif role.kind == INPUT:
            bind_inputs.append(tid)
        else:
            bind_targets.append(tid)

    constants: dict[str, str] = {}
    uses_rng = False

    # ---- walk the trace ------------------------------------------------------------
    for pos, n in enumerate(nodes):
        if n.op == "get_attr":
            _constant(b, gm, n, constants)
            continue
        if n.op != "call_function":
            continue
        if n.target is operator.getitem:
            if n in live:
                parent = b.refs.get(n.args[0])
                b.refs[n] = parent[n.args[1]] if isinstance(parent, list) else None
            continue
        if not isinstance(n.target, torch._ops.OpOverload):
            raise HybridError(f"capture: unsupported call {n.target!r} in the traced step (node {n.name!r})")
        if n not in live:
            continue
        val = n.meta.get("val")
        multi = isinstance(val, (tuple, list))
        items = list(val) if multi else [val]
        if _changes_shape_in_place(n.target):
            _fold_shape_change(b, n, items, multi)
            continue
        written = _written(n)
        out_tensors = [t for t in items if isinstance(t, torch.Tensor)]
        fresh = [t for t in out_tensors if b.table.owner(t) is None]
        if out_tensors and not fresh and not written:
            _fold_view(b, n, target_name(n.target), items, multi)
            continue
        uses_rng |= _add_op(b, n, pos, loss_pos, items, multi, written, item_name)

    # ---- optimizer ------------------------------------------------------------------
    grad_refs: dict[str, Ref] = {p: b.ref(g) for p, g in traced.grads.items()}
    opt_state: dict[str, dict[str, str]] = {}
    if traced.training and optimizer is not None:
        for pname in trainable:
            if pname in grad_refs and pname in optimizer.hyper:
                opt_state[pname] = _add_update(b, optimizer, pname, bind_params[pname], grad_refs[pname])

    if uses_rng:
        b.add_tensor(Tensor(RNG_ID, 0, "other", True, {"rng": "the default generator of the replay device"}))

    ordered = [op for _, op in sorted(zip(b.keys, b.ops), key=lambda ko: ko[0])]
    persistent = [t for t in b.tensors.values() if t.persistent]
    others = [t for t in b.tensors.values() if not t.persistent]

    loss_ref = encode_ref(b.ref(traced.loss)) if isinstance(traced.loss, fx.Node) else None
    bindings: dict[str, Any] = {
        "params": bind_params, "trainable": [p for p in trainable if p in grad_refs], "buffers": bind_buffers,
        "inputs": bind_inputs, "targets": bind_targets, "constants": constants,
        "loss": loss_ref,
        "grads": {p: (encode_ref(grad_refs[p]) if p in grad_refs else None) for p in trainable},
        "outputs": [encode_ref(b.ref(n)) if isinstance(n, fx.Node) else None for n in traced.outputs],
        "optimizer": ({**optimizer.to_json(), "state": opt_state} if traced.training and optimizer else None),
        "rng": RNG_ID if uses_rng else None,
    }
    extra = {"capture": {"tool": "hybrid.capture", "torch": torch.__version__, "training": traced.training,
                         "costs": model.to_json()},
             "bindings": bindings}
    return Graph(name, persistent + others, ordered, device, extra)


def _constant(b: _Builder, gm: fx.GraphModule, n: fx.Node, constants: dict[str, str]) -> None:
    value = getattr(gm, n.target)
    if isinstance(value, torch.Generator):   # make_fx keeps an explicit generator= as an opaque constant
        raise HybridError("the step draws random numbers from its own torch.Generator (generator=...); capture "
                          "supports only the global generator: draw without generator= and seed with "
                          "torch.manual_seed")
    if not isinstance(value, torch.Tensor):
        raise HybridError(f"capture: module attribute {n.target!r} used in the step is not a tensor")
    if value.device.type == "meta" or value.numel() > _CONST_LIMIT or getattr(value, "fake_mode", None) is not None:
        raise HybridError(f"the module uses a tensor {tuple(value.shape)} that is neither a parameter nor a buffer "
                          f"({n.target}); register it with module.register_buffer(...)")
    tid = f"const:{n.target}"
    fake = n.meta.get("val", value)
    meta = tensor_meta(value)
    meta["value"] = value.detach().cpu().flatten().tolist()
    b.add_tensor(Tensor(tid, storage_bytes(value), "other", True, meta))
    key_of = fake if isinstance(fake, torch.Tensor) else value
    b.table.add(key_of, tid)
    b.refs[n] = (storage_key(key_of), ())
    constants[tid] = str(n.target)


def _fold_view(b: _Builder, n: fx.Node, tname: str, items: list[Any], multi: bool) -> None:
    base = n.args[0] if n.args else None
    base_val = _val(base)
    if not isinstance(base_val, torch.Tensor):
        raise HybridError(f"capture: {tname} (node {n.name!r}) returns an alias but its first argument is not a tensor")
    key = storage_key(base_val)
    for t in items:
        if isinstance(t, torch.Tensor) and storage_key(t) != key:
            raise HybridError(f"capture: {tname} (node {n.name!r}) returns a view of a tensor other than its first argument")
    rest = b.boxed((tuple(n.args[1:]), dict(n.kwargs)))
    if any(isinstance(x, _Box) for x in torch.utils._pytree.tree_leaves(rest)):
        raise HybridError(f"capture: view op {tname} (node {n.name!r}) takes a second tensor; cannot fold it")
    step: dict[str, Any] = {"op": tname}
    if n.args[1:]:
        step["args"] = encode_value(list(n.args[1:]), _box_ref)
    if n.kwargs:
        step["kwargs"] = {k: encode_value(v, _box_ref) for k, v in n.kwargs.items()}
    skey, chain = b.refs[base]
    if tname == AS_STRIDED:
        _offset_from_root(step, b.tensors[b.table.owners[skey]])
    if multi:
        b.refs[n] = [(skey, chain + ({**step, "index": i},)) if isinstance(t, torch.Tensor) else None
                     for i, t in enumerate(items)]
    else:
        b.refs[n] = (skey, chain + (step,))


# In-place ops that change a tensor's shape or strides, not its data (`transpose_`, `unsqueeze_`, ...: the
# inplace_view tag, and the few the tag misses). Recorded as ops writing a new version, the version kept the
# shape from before the op, and a plan that swapped it rebuilt it so: nn.GRU(batch_first=True), which calls
# transpose_, crashed or trained wrongly once its output was swapped. They are views of the tensor instead.
_SHAPE_ONLY = ("squeeze_", "swapdims_", "swapaxes_")
_STORAGE_CHANGES = ("set_", "resize_", "resize_as_")   # these re-point or grow the storage itself


def _changes_shape_in_place(target: Any) -> bool:
    name = target._opname if isinstance(target, torch._ops.OpOverload) else ""
    return name in _STORAGE_CHANGES or name in _SHAPE_ONLY or torch.Tag.inplace_view in getattr(target, "tags", ())


def _out_of_place(target: torch._ops.OpOverload) -> torch._ops.OpOverload | None:
    """The view op that gives what an in-place shape change (`transpose_.default`) makes of its tensor
    (`transpose.int`): the overload of the name without the underscore taking the same arguments."""
    packet = getattr(torch.ops.aten, target._opname.rstrip("_"), None)
    want = [(a.name, str(a.type)) for a in target._schema.arguments]
    for name in packet.overloads() if packet is not None else ():
        twin = getattr(packet, name)
        if [(a.name, str(a.type)) for a in twin._schema.arguments] == want:
            return twin
    return None


def _fold_shape_change(b: _Builder, n: fx.Node, items: list[Any], multi: bool) -> None:
    """An in-place shape change, folded as its out-of-place view; the tensor it changed is that view from now
    on, under its own node too (eager's object is the one changed)."""
    tname = target_name(n.target)
    base = n.args[0] if n.args else None
    if n.target._opname in _STORAGE_CHANGES:
        raise HybridError(f"the step calls {tname} (node {n.name!r}), which makes a tensor point at other or "
                          "larger memory in place; hybrid captures tensors whose storage stays as allocated: "
                          "use a new tensor (torch.empty, .expand, .reshape) instead")
    if isinstance(base, fx.Node) and base.op == "placeholder":
        raise HybridError(f"the step changes the shape of its input or parameter {base.name!r} in place "
                          f"({tname}), which would outlast the step; use the out-of-place "
                          f"{n.target._opname.rstrip('_')} (x = x.{n.target._opname.rstrip('_')}(...))")
    twin = _out_of_place(n.target)
    if twin is None:
        raise HybridError(f"capture: {tname} (node {n.name!r}) changes a tensor's shape in place and has no "
                          f"out-of-place twin to record it by; use the out-of-place view")
    _fold_view(b, n, target_name(twin), items, multi)
    if isinstance(base, fx.Node):
        b.refs[base] = b.refs[n]


def _offset_from_root(step: dict[str, Any], root: Tensor) -> None:
    """An `as_strided` view's storage offset counts elements from the start of the storage it was traced in;
    replay holds the tensor at some offset in the executor's pool, so the step records it from the root
    tensor's own start (`OFFSET_FROM_ROOT`: apply_chain adds the root's offset back). Read as recorded, a
    `fill_diagonal_` or a user's `as_strided(..., 1)` wrote and read at the pool's start: wrong losses."""
    args, kwargs = step.get("args", []), step.get("kwargs", {})
    if len(args) > 2 and args[2] is not None:
        args[2] = int(args[2]) - int(root.extra.get("storage_offset", 0))
    elif kwargs.get("storage_offset") is not None:
        kwargs["storage_offset"] = int(kwargs["storage_offset"]) - int(root.extra.get("storage_offset", 0))
    else:
        return   # no offset given: as_strided keeps its input's, which replay places as capture did
    step[OFFSET_FROM_ROOT] = True


def _add_op(b: _Builder, n: fx.Node, pos: int, loss_pos: int, items: list[Any], multi: bool,
            written: list[tuple[int | str, Any]], item_name: dict[tuple[fx.Node, int], str]) -> bool:
    """Record one kernel call; returns whether it uses the generator (draws, saves or restores its state)."""
    tname = target_name(n.target)
    phase = "forward" if pos <= loss_pos else "backward"
    # a checkpointed region's recomputation runs in the backward but makes the forward's activations again;
    # a saved generator state is neither (kind other, as the generator's `rng` tensor)
    act_kind = ("other" if rng.is_rng_op(n.target) else
                "activation" if phase == "forward" or n.meta.get(RECOMPUTES) else "gradient")
    kind = n.target._opname

    # Inputs are read before the op writes anything: current versions.
    in_nodes = list(dict.fromkeys(x for x in n.all_input_nodes if isinstance(_val(x), torch.Tensor)))
    inputs = list(dict.fromkeys(b.ref(x)[0] for x in in_nodes))
    args_before = list(b.boxed(tuple(n.args)))
    kwargs_before = {k: b.boxed(v) for k, v in n.kwargs.items()}

    # Writes: a persistent tensor is updated in place; an intermediate one gets a new version.
    updates: list[str] = []
    versions: dict[str, str] = {}
    out_ids: list[str] = []
    for where, w in written:
        wkey = b.refs[w][0] if isinstance(b.refs.get(w), tuple) else None
        if wkey is None:
            raise HybridError(f"capture: {tname} (node {n.name!r}) writes a value that is not a tensor")
        old = b.table.owners[wkey]
        if b.tensors[old].persistent:
            updates.append(old)
        elif old not in versions.values():
            new = n.name if not versions else f"{n.name}_v{len(versions)}"
            t_old = b.tensors[old]
            b.add_tensor(Tensor(new, t_old.bytes, act_kind, False, dict(t_old.extra)))
            versions[new] = old
            b.table.owners[wkey] = new
            out_ids.append(new)
        # The written argument refers to the new version (or the updated persistent tensor).
        enc = _Box(b.ref(w))
        if isinstance(where, int):
            args_before[where] = enc
        else:
            kwargs_before[where] = enc
    updates = list(dict.fromkeys(updates))

    # Outputs: new storages become tensors; the return value of an in-place op is the tensor it wrote.
    out_refs: list[Any] = []
    returns: list[Any] = []
    new_keys = set()
    written_keys = {b.refs[w][0]: w for _, w in written}
    for i, t in enumerate(items):
        if not isinstance(t, torch.Tensor):
            out_refs.append(None)
            returns.append(None)
            continue
        key = storage_key(t)
        if b.table.owner(t) is None:
            tid = item_name.get((n, i), f"{n.name}_{i}") if multi else n.name
            if tid in b.tensors:
                tid = f"{tid}_out{i}"
            b.table.add(t, tid)
            new_keys.add(key)
            b.add_tensor(Tensor(tid, storage_bytes(t), act_kind, False, tensor_meta(t)))
            out_ids.append(tid)
            out_refs.append((key, ()))
            returns.append(tid)
        elif key in new_keys:
            raise HybridError(f"capture: {tname} (node {n.name!r}) returns two tensors sharing one new storage")
        elif key in written_keys:
            out_refs.append(b.refs[written_keys[key]])
            returns.append(None)
        else:
            raise HybridError(f"capture: {tname} (node {n.name!r}) returns a tensor aliasing an input it does not "
                              "write; this op cannot be represented")
    b.refs[n] = out_refs if multi else out_refs[0]

    random = _is_random(n.target) or n.target is rng.RESTORE
    if random:
        inputs.append(RNG_ID)
        updates.append(RNG_ID)
    elif n.target is rng.SAVE:   # reads the generator: ordered against every draw, never updates it
        inputs.append(RNG_ID)
        random = True

    in_vals = [_val(x) for x in in_nodes]
    outs = [t for t in items if isinstance(t, torch.Tensor)]
    nbytes = (sum(view_bytes(v) for v in in_vals) + sum(b.tensors[t].bytes for t in out_ids)
              + sum(b.tensors[u].bytes for u in updates if u != RNG_ID))
    flops = _flops(n, kind, in_vals, outs)
    dtype = _first_float_dtype(in_vals + outs)
    cls = costs.op_class(kind)
    rec: dict[str, Any] = {"target": tname, "args": encode_value(args_before, _box_ref),
                           "kwargs": {k: encode_value(v, _box_ref) for k, v in kwargs_before.items()},
                           "returns": returns if multi else returns[0]}
    if versions:
        rec["versions"] = versions
    extra = {"phase": phase, "aten": rec, "cost": _cost(flops, nbytes, dtype, cls)}
    time_s = costs.roofline_s(flops, nbytes, dtype, cls, b.model.gpu)
    impls = _conv_impls(n, kind, outs, dtype, time_s, b.model.gpu)
    b.add_op(Op(n.name, kind, tuple(inputs), tuple(out_ids), time_s, 0, impls, tuple(updates),
                costs.roofline_s(flops, nbytes, dtype, cls, b.model.cpu), extra))
    return random


def _conv_impls(n: fx.Node, kind: str, outs: list[Any], dtype: str, time_s: float,
                spec: costs.ComputeSpec) -> tuple[Impl, ...]:
    """The alternatives hybrid.capture.conv_impls can run for a 2-D forward convolution (none otherwise): the
    library call first, with the op's own time, then the rest with their rooflines (costs.conv_impls)."""
    def pair(v: Any) -> tuple[int, int]:
        v = list(v) if isinstance(v, (list, tuple)) else [v]
        return int(v[0]), int(v[-1])

    if kind == "convolution_backward":
        return _conv_backward_impls(n, dtype, time_s, spec, pair)
    if kind != "convolution" or len(outs) != 1:
        return ()
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "transposed", "output_padding", "groups")
    a = dict(zip(names, fx.node.map_arg(n.args, _val)))
    a.update(fx.node.map_arg(dict(n.kwargs), _val))
    x, w, out = a.get("input"), a.get("weight"), outs[0]
    if (a.get("transposed") or not isinstance(x, torch.Tensor) or not isinstance(w, torch.Tensor) or x.dim() != 4
            or w.dim() != 4 or not x.is_floating_point() or not out.is_contiguous()):
        return ()

    shape = costs.ConvShape(int(x.shape[0]), int(x.shape[1]), int(x.shape[2]), int(x.shape[3]), int(w.shape[0]),
                            int(w.shape[2]), int(w.shape[3]), pair(a["stride"]), pair(a["padding"]),
                            pair(a["dilation"]), int(a["groups"]), x.element_size(), a.get("bias") is not None)
    return tuple(Impl(name, t, ws) for name, t, ws in costs.conv_impls(shape, dtype, spec, time_s, 0))


def _add_update(b: _Builder, opt: OptimizerSpec, pname: str, ptid: str, gref: Ref) -> dict[str, str]:
    p = b.tensors[ptid]
    state: dict[str, str] = {}
    for key in opt.state_keys(pname):
        sid = f"state:{pname}:{key}"
        b.add_tensor(Tensor(sid, p.bytes, "optimizer_state", True,
                            {k: p.extra[k] for k in ("dtype", "shape", "stride", "storage_offset")}))
        state[key] = sid
    inputs = [ptid, gref[0], *state.values()]
    updates = [ptid, *state.values()]
    flops_el, rw = opt.cost_per_element(pname)
    numel = 1
    for s in p.extra["shape"]:
        numel *= s
    itemsize = p.bytes // numel if numel else 0
    flops, nbytes = flops_el * numel, rw * numel * itemsize
    dtype = p.extra["dtype"]
    extra = {
        "phase": "optimizer",
        "aten": {"target": f"hybrid.{opt.name}",
                 "args": [{"t": ptid}, encode_ref(gref), *({"t": s} for s in state.values())],
                 "kwargs": opt.op_kwargs(pname), "returns": None},
        "cost": _cost(flops, nbytes, dtype, "vector"),
    }
    # Right after the gradient exists and the last op that reads the old parameter.
    after = max([b.producer.get(gref[0], -1)] + b.readers.get(ptid, []))
    b.add_op(Op(f"{opt.name}:{pname}", opt.name, tuple(dict.fromkeys(inputs)), (),
                costs.roofline_s(flops, nbytes, dtype, "vector", b.model.gpu), 0, (), tuple(updates),
                costs.roofline_s(flops, nbytes, dtype, "vector", b.model.cpu), extra),
             key=(after, 1, len(b.ops)))
    return state


def _conv_backward_impls(n: fx.Node, dtype: str, time_s: float, spec: costs.ComputeSpec,
                         pair: Any) -> tuple[Impl, ...]:
    """A 2-D convolution's backward that computes the input gradient: the library call, or that gradient by
    Winograd (conv_impls.conv_backward) and the weight and bias gradients by the library call, whose roofline
    is that of half the backward's FLOPs (costs.conv_backward_impls)."""
    names = ("grad_output", "input", "weight", "bias_sizes", "stride", "padding", "dilation", "transposed",
             "output_padding", "groups", "output_mask")
    a = dict(zip(names, fx.node.map_arg(n.args, _val)))
    a.update(fx.node.map_arg(dict(n.kwargs), _val))
    g, x, w, mask = a.get("grad_output"), a.get("input"), a.get("weight"), list(a.get("output_mask") or [])
    if (a.get("transposed") or len(mask) != 3 or not mask[0] or not all(isinstance(t, torch.Tensor) for t in (g, x, w))
            or g.dim() != 4 or w.dim() != 4 or not g.is_floating_point() or tuple(w.shape[2:]) != (3, 3)):
        return ()
    p = pair(a["padding"])
    if max(p) > 2:
        return ()
    nb, co, oh, ow = (int(v) for v in g.shape)
    c = int(x.shape[1])
    it = g.element_size()
    gi = costs.ConvShape(nb, co, oh, ow, c, 3, 3, pair(a["stride"]), (2 - p[0], 2 - p[1]), pair(a["dilation"]),
                         int(a["groups"]), it, False)
    if not gi.winograd_ok:
        return ()
    rest_flops = 2 * nb * co * c * 9 * oh * ow + (nb * co * oh * ow if mask[2] else 0)
    rest_bytes = (g.numel() + x.numel() + w.numel() + (co if mask[2] else 0)) * it
    rest_t = costs.roofline_s(rest_flops, rest_bytes, dtype, "conv", spec)
    return tuple(Impl(name, t, ws) for name, t, ws in costs.conv_backward_impls(gi, dtype, spec, time_s, 0, rest_t))
