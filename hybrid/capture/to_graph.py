"""Traced FX graph -> `hybrid-graph/1`: storages become tensors, real kernels become ops, views fold away.

The mapping (docs/capture.md has the full encoding):
- placeholders -> persistent tensors: `param:NAME` (kind param), `buffer:NAME`
  (other), `input:I` and `target:I` (input); optimizer state `state:NAME:KEY`
  (optimizer_state); `rng`, a 0-byte tensor (other) that every random op reads
  and updates, so random ops keep their relative order in any valid schedule.
- every other storage -> one tensor named after the value that allocated it,
  kind activation (forward) or gradient (backward), bytes = storage bytes.
- every call of a real kernel -> one op, with `aten` (how to replay it),
  `phase` and `cost`; view ops are folded into their consumers' arguments.
- in-place updates of persistent tensors (buffer `copy_`s, batch-norm running
  statistics, the optimizer) list them in `updates`.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from torch.utils.flop_counter import flop_registry

from hybrid.capture import costs
from hybrid.capture.encoding import Ref, dtype_name, encode_ref, encode_value, target_name
from hybrid.capture.optimizers import OptimizerSpec
from hybrid.capture.storage import StorageTable, storage_bytes, storage_key, tensor_meta, view_bytes
from hybrid.capture.trace import BUFFER, FROZEN, INPUT, TARGET, TRAINABLE, Traced
from hybrid.device import Device
from hybrid.errors import HybridError
from hybrid.graph import Graph, Op, Tensor

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


class _Box:
    """An FX node's tensor reference inside an argument structure being encoded."""

    __slots__ = ("ref",)

    def __init__(self, ref: Ref) -> None:
        self.ref = ref


def _box_ref(x: Any) -> Ref | None:
    return x.ref if isinstance(x, _Box) else None


@dataclass
class _OpRec:
    op: Op
    key: tuple[int, int, int]


@dataclass
class _Builder:
    traced: Traced
    model: costs.CostModel
    table: StorageTable = field(default_factory=StorageTable)
    refs: dict[fx.Node, Any] = field(default_factory=dict)
    tensors: dict[str, Tensor] = field(default_factory=dict)
    ops: list[_OpRec] = field(default_factory=list)
    producer: dict[str, int] = field(default_factory=dict)     # tensor id -> index in self.ops
    readers: dict[str, list[int]] = field(default_factory=dict)
    bindings: dict[str, Any] = field(default_factory=dict)

    # ---- helpers ----------------------------------------------------------------
    def add_tensor(self, t: Tensor) -> None:
        self.tensors[t.id] = t

    def boxed(self, a: Any) -> Any:
        def box(n: fx.Node) -> Any:
            r = self.refs.get(n)
            if r is None:
                return None
            if not isinstance(r, tuple):
                raise HybridError(f"capture: node {n.name!r} yields several values where one tensor was expected")
            return _Box(r)

        return fx.node.map_arg(a, box)

    def encode(self, a: Any) -> Any:
        return encode_value(self.boxed(a), _box_ref)

    def ref(self, n: Any) -> Ref:
        r = self.refs.get(n)
        if not isinstance(r, tuple):
            raise HybridError(f"capture: value {getattr(n, 'name', n)!r} is not a tensor")
        return r

    def add_op(self, op: Op) -> None:
        i = len(self.ops)
        self.ops.append(_OpRec(op, (i, 0, 0)))
        for t in op.outputs:
            self.producer[t] = i
        for t in op.inputs:
            self.readers.setdefault(t, []).append(i)


@dataclass(frozen=True)
class _InPlace:
    """Replay a functional op in place, as eager runs it: its new value of a buffer is written into the buffer."""

    target: str                     # the in-place overload replayed instead
    written: tuple[fx.Node, ...]    # the placeholders it updates
    aliases: dict[int, fx.Node]     # output index -> placeholder that holds that value after the op
    n_returns: int                  # values the in-place overload returns


def _in_place_rewrites(nodes: list[fx.Node], traced: Traced) -> tuple[dict[fx.Node, _InPlace], set[fx.Node]]:
    """Batch-norm statistics and `num_batches_tracked += 1` back in place (saves two copies per batch norm).

    AOTAutograd computes them functionally and returns the new values; eager
    updates them inside the batch-norm kernel. Rewritten only when nothing
    reads the old value after the op. Returns the rewrites and the new-value
    nodes whose write-back copy is no longer needed.
    """
    pos = {n: i for i, n in enumerate(nodes)}
    upd_of = {new: ph for ph, new in traced.state_updates}

    def old_value_dead_after(ph: fx.Node, n: fx.Node) -> bool:
        return all(u is n or pos[u] < pos[n] for u in ph.users)

    rewrites: dict[fx.Node, _InPlace] = {}
    done: set[fx.Node] = set()
    for n in nodes:
        if n.op != "call_function":
            continue
        if n.target is _aten._native_batch_norm_legit_functional.default:
            items = {u.args[1]: u for u in n.users if u.target is operator.getitem}
            rm, rv = n.args[3], n.args[4]
            if (3 in items and 4 in items and upd_of.get(items[3]) is rm and upd_of.get(items[4]) is rv
                    and old_value_dead_after(rm, n) and old_value_dead_after(rv, n)):
                rewrites[n] = _InPlace("aten._native_batch_norm_legit.default", (rm, rv), {3: rm, 4: rv}, 3)
                done |= {items[3], items[4]}
        elif (n.target is _aten.add.Tensor and isinstance(n.args[0], fx.Node) and n.args[0].op == "placeholder"
              and upd_of.get(n) is n.args[0] and all(u.op == "output" for u in n.users)
              and old_value_dead_after(n.args[0], n)):
            rewrites[n] = _InPlace("aten.add_.Tensor", (n.args[0],), {0: n.args[0]}, 1)
            done.add(n)
    return rewrites, done


def _written_args(node: fx.Node) -> list[Any]:
    """The FX values an op writes in place: annotated (a!) arguments and the hidden batch-norm ones."""
    target = node.target
    out: list[Any] = []
    for i, a in enumerate(target._schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            v = node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
            if v is not None:
                out.append(v)
    hidden = _HIDDEN_WRITES.get(target)
    if hidden is not None:
        train_i, idx = hidden
        if len(node.args) > train_i and node.args[train_i]:
            out.extend(node.args[i] for i in idx if i < len(node.args) and node.args[i] is not None)
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
        side = (isinstance(n.target, torch._ops.OpOverload)
                and (_is_random(n.target) or bool(_written_args(n))))
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


def convert(traced: Traced, optimizer: OptimizerSpec | None, model: costs.CostModel, name: str,
            device: Device | None) -> Graph:
    b = _Builder(traced, model)
    gm = traced.gm
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    trainable = [r.name for r in traced.roles if r.kind == TRAINABLE and r.name not in traced.ties]
    loss_node = traced.loss
    grads = traced.grads
    roots = [n for n in [loss_node, *grads.values(), *(new for _, new in traced.state_updates), *traced.outputs]
             if isinstance(n, fx.Node)]
    live = _live(nodes, roots)
    rewrites, rewritten = _in_place_rewrites(nodes, traced)
    loss_pos = nodes.index(loss_node) if (traced.training and isinstance(loss_node, fx.Node)) else len(nodes)

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
    pairs = list(zip(traced.roles, placeholders))
    canonical = {r.name: ph for r, ph in pairs if r.name not in traced.ties}
    for role, ph in sorted(pairs, key=lambda rp: rp[0].name in traced.ties):
        v = ph.meta["val"]
        if role.name in traced.ties:
            # A tied parameter (or buffer): one tensor, read under another name.
            b.refs[ph] = b.refs[canonical[traced.ties[role.name]]]
            b.table.add(v, b.refs[ph][0])
            continue
        tid = ids[role.kind].format(role.name)
        b.add_tensor(Tensor(tid, storage_bytes(v), kinds[role.kind], True, tensor_meta(v)))
        b.table.add(v, tid)
        b.refs[ph] = (tid, ())
        {TRAINABLE: bind_params, FROZEN: bind_params, BUFFER: bind_buffers}.get(role.kind, {})[role.name] = tid
        if role.kind == INPUT:
            bind_inputs.append(tid)
        elif role.kind == TARGET:
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
        written = _written_args(n)
        out_tensors = [(i, t) for i, t in enumerate(items) if isinstance(t, torch.Tensor)]
        fresh = [i for i, t in out_tensors if b.table.owner(t) is None]
        tname = target_name(n.target)
        if out_tensors and not fresh and not written:
            _fold_view(b, n, tname, items, multi)
            continue
        uses_rng |= _add_op(b, n, pos, loss_pos, tname, items, multi, written, item_name, rewrites.get(n))

    # ---- in-place state updates (batch-norm statistics, inputs the forward modifies) -----------
    for ph, new in traced.state_updates:
        if new not in rewritten:
            _add_copy(b, b.ref(ph)[0], b.ref(new))

    # ---- gradients: a tied parameter's is the sum of its names' ----------------------------
    grad_refs: dict[str, Ref] = {p: b.ref(n) for p, n in grads.items() if p not in traced.ties}
    for alias, name in traced.ties.items():
        if alias in grads and name in grad_refs:
            grad_refs[name] = _add_sum(b, bind_params[name], grad_refs[name], b.ref(grads[alias]), alias)

    # ---- optimizer ------------------------------------------------------------------
    opt_state: dict[str, dict[str, str]] = {}
    if traced.training and optimizer is not None:
        for pname in trainable:
            if pname not in grad_refs or pname not in optimizer.hyper:
                continue
            opt_state[pname] = _add_update(b, optimizer, pname, bind_params[pname], grad_refs[pname])

    if uses_rng:
        b.add_tensor(Tensor(RNG_ID, 0, "other", True, {"rng": "the default generator of the replay device"}))

    _reorder_state_copies(b)
    ordered = [r.op for r in sorted(b.ops, key=lambda r: r.key)]
    persistent = [t for t in b.tensors.values() if t.persistent]
    others = [t for t in b.tensors.values() if not t.persistent]

    bind_grads = {p: (encode_ref(grad_refs[p]) if p in grad_refs else None) for p in trainable}
    loss_ref = encode_ref(b.ref(loss_node)) if isinstance(loss_node, fx.Node) else None
    bindings: dict[str, Any] = {
        "params": bind_params, "trainable": [p for p in trainable if p in grad_refs], "buffers": bind_buffers,
        "inputs": bind_inputs, "targets": bind_targets, "constants": constants,
        "loss": loss_ref, "grads": bind_grads if traced.training else {},
        "outputs": [] if traced.training else [encode_ref(b.ref(n)) if isinstance(n, fx.Node) else None
                                                for n in traced.outputs],
        "optimizer": ({**optimizer.to_json(), "state": opt_state} if traced.training and optimizer else None),
        "rng": RNG_ID if uses_rng else None,
    }
    extra = {"capture": {"tool": "hybrid.capture", "torch": torch.__version__, "training": traced.training,
                         "costs": model.to_json()},
             "bindings": bindings}
    return Graph(name, persistent + others, ordered, device, extra)


def _constant(b: _Builder, gm: fx.GraphModule, n: fx.Node, constants: dict[str, str]) -> None:
    value = getattr(gm, n.target)
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
    b.table.add(fake if isinstance(fake, torch.Tensor) else value, tid)
    b.refs[n] = (tid, ())
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
    tid, chain = b.ref(base)
    if multi:
        b.refs[n] = [(tid, chain + ({**step, "index": i},)) if isinstance(t, torch.Tensor) else None
                     for i, t in enumerate(items)]
    else:
        b.refs[n] = (tid, chain + (step,))


def _add_op(b: _Builder, n: fx.Node, pos: int, loss_pos: int, tname: str, items: list[Any], multi: bool,
            written: list[Any], item_name: dict[tuple[fx.Node, int], str], inplace: _InPlace | None = None) -> bool:
    """Record one kernel call; returns whether it draws random numbers."""
    if inplace is not None:
        tname, written = inplace.target, list(inplace.written)
    persistent_write = bool(written) and all(b.tensors[b.ref(w)[0]].persistent for w in written)
    phase = "forward" if pos <= loss_pos or (n.target is _aten.copy_.default and persistent_write) else "backward"
    kind = tname.split(".")[1] if inplace is not None else n.target._opname
    out_ids: list[str] = []
    out_refs: list[Any] = []
    new_keys = set()
    for i, t in enumerate(items):
        if not isinstance(t, torch.Tensor):
            out_refs.append(None)
            continue
        if inplace is not None and i in inplace.aliases:
            ref = b.ref(inplace.aliases[i])
            b.table.add(t, ref[0])
            out_refs.append(ref)
            continue
        owner = b.table.owner(t)
        if owner is None:
            tid = item_name.get((n, i), f"{n.name}_{i}") if multi else n.name
            b.table.add(t, tid)
            new_keys.add(storage_key(t))
            b.add_tensor(Tensor(tid, storage_bytes(t), "activation" if phase == "forward" else "gradient", False,
                                tensor_meta(t)))
            out_ids.append(tid)
            out_refs.append((tid, ()))
        elif storage_key(t) in new_keys:
            raise HybridError(f"capture: {tname} (node {n.name!r}) returns two tensors sharing one new storage")
        else:
            # The return value of an in-place op is the tensor it wrote.
            match = [w for w in written if storage_key(_val(w)) == storage_key(t)]
            if not match:
                raise HybridError(f"capture: {tname} (node {n.name!r}) returns a tensor aliasing an input it does not "
                                  "write; this op cannot be represented")
            out_refs.append(b.ref(match[0]))
    b.refs[n] = out_refs if multi else out_refs[0]

    args_enc = b.encode(list(n.args))
    kwargs_enc = {k: b.encode(v) for k, v in n.kwargs.items()}
    in_nodes = list(dict.fromkeys(x for x in n.all_input_nodes if isinstance(_val(x), torch.Tensor)))
    inputs = list(dict.fromkeys(b.ref(x)[0] for x in in_nodes))
    updates = list(dict.fromkeys(b.ref(w)[0] for w in written))
    for u in updates:
        if not b.tensors[u].persistent:
            raise HybridError(f"capture: {tname} (node {n.name!r}) updates the intermediate tensor {u!r} in place; "
                              "only parameters, buffers and inputs may be updated")
    random = _is_random(n.target)
    if random:
        inputs.append(RNG_ID)
        updates.append(RNG_ID)

    in_vals = [_val(x) for x in in_nodes]
    outs = [t for t in items if isinstance(t, torch.Tensor)]
    nbytes = (sum(view_bytes(v) for v in in_vals) + sum(b.tensors[t].bytes for t in out_ids)
              + sum(view_bytes(_val(w)) for w in written))
    flops = _flops(n, kind, in_vals, outs)
    dtype = _first_float_dtype(in_vals + outs)
    cls = costs.op_class(kind)
    returns: Any = [r[0] if (r is not None and r[0] in out_ids) else None for r in out_refs] if multi else \
        (out_refs[0][0] if out_refs[0] is not None and out_refs[0][0] in out_ids else None)
    if inplace is not None and multi:
        returns = returns[:inplace.n_returns]
    extra = {
        "phase": phase,
        "aten": {"target": tname, "args": args_enc, "kwargs": kwargs_enc, "returns": returns},
        "cost": {"flops": flops, "io_bytes": nbytes, "dtype": dtype, "class": cls, "time_s_source": "roofline",
                 "cpu_time_s_source": "roofline"},
    }
    b.add_op(Op(n.name, kind, tuple(inputs), tuple(out_ids),
                costs.roofline_s(flops, nbytes, dtype, cls, b.model.gpu), 0, (), tuple(updates),
                costs.roofline_s(flops, nbytes, dtype, cls, b.model.cpu), extra))
    return random


def _add_copy(b: _Builder, dst: str, src: Ref) -> None:
    """`dst.copy_(src)`: a functionalized in-place update of a persistent tensor, done in place again."""
    t = b.tensors[dst]
    nbytes = 2 * t.bytes
    dtype = t.extra.get("dtype", "float32")
    extra = {
        "phase": "forward",
        "aten": {"target": "aten.copy_.default", "args": [{"t": dst}, encode_ref(src)], "kwargs": {}, "returns": None},
        "cost": {"flops": 0, "io_bytes": nbytes, "dtype": dtype, "class": "vector", "time_s_source": "roofline",
                 "cpu_time_s_source": "roofline"},
    }
    b.add_op(Op(f"update:{dst}", "copy_", tuple(dict.fromkeys([dst, src[0]])), (),
                costs.roofline_s(0, nbytes, dtype, "vector", b.model.gpu), 0, (), (dst,),
                costs.roofline_s(0, nbytes, dtype, "vector", b.model.cpu), extra))


def _add_sum(b: _Builder, ptid: str, a: Ref, c: Ref, alias: str) -> Ref:
    """The gradient of a tied parameter: what flowed through its first name plus what flowed through `alias`."""
    p = b.tensors[ptid]
    shape = p.extra["shape"]
    stride, acc = [], 1
    for s in reversed(shape):
        stride.insert(0, acc)
        acc *= s
    tid = f"grad_sum:{alias}"
    b.add_tensor(Tensor(tid, p.bytes, "gradient", False, {"dtype": p.extra["dtype"], "shape": list(shape),
                                                          "stride": stride, "storage_offset": 0}))
    nbytes = 3 * p.bytes
    numel = acc
    dtype = p.extra["dtype"]
    extra = {
        "phase": "backward",
        "aten": {"target": "aten.add.Tensor", "args": [encode_ref(a), encode_ref(c)], "kwargs": {}, "returns": tid},
        "cost": {"flops": numel, "io_bytes": nbytes, "dtype": dtype, "class": "vector", "time_s_source": "roofline",
                 "cpu_time_s_source": "roofline"},
    }
    b.add_op(Op(tid, "add", tuple(dict.fromkeys([a[0], c[0]])), (tid,),
                costs.roofline_s(numel, nbytes, dtype, "vector", b.model.gpu), 0, (), (),
                costs.roofline_s(numel, nbytes, dtype, "vector", b.model.cpu), extra))
    return (tid, ())


def _add_update(b: _Builder, opt: OptimizerSpec, pname: str, ptid: str, gref: Ref) -> dict[str, str]:
    p = b.tensors[ptid]
    state: dict[str, str] = {}
    for key in opt.state_keys(pname):
        sid = f"state:{pname}:{key}"
        b.add_tensor(Tensor(sid, p.bytes, "optimizer_state", True, {k: p.extra[k] for k in
                                                                   ("dtype", "shape", "stride", "storage_offset")}))
        state[key] = sid
    inputs = [ptid, gref[0], *state.values()]
    updates = [ptid, *state.values()]
    flops_el, rw = opt.cost_per_element(pname)
    numel = 1
    for s in p.extra["shape"]:
        numel *= s
    itemsize = p.bytes // max(numel, 1) if numel else 0
    flops, nbytes = flops_el * numel, rw * numel * itemsize
    dtype = p.extra["dtype"]
    target = f"hybrid.{opt.name}"
    extra = {
        "phase": "optimizer",
        "aten": {"target": target, "args": [{"t": ptid}, encode_ref(gref), *({"t": s} for s in state.values())],
                 "kwargs": opt.op_kwargs(pname), "returns": None},
        "cost": {"flops": flops, "io_bytes": nbytes, "dtype": dtype, "class": "vector", "time_s_source": "roofline",
                 "cpu_time_s_source": "roofline"},
    }
    op = Op(f"{opt.name}:{pname}", opt.name, tuple(dict.fromkeys(inputs)), (),
            costs.roofline_s(flops, nbytes, dtype, "vector", b.model.gpu), 0, (), tuple(updates),
            costs.roofline_s(flops, nbytes, dtype, "vector", b.model.cpu), extra)
    # Right after the gradient exists and the last op that reads the old parameter.
    after = max([b.producer.get(gref[0], -1)] + b.readers.get(ptid, []))
    b.add_op(op)
    b.ops[-1].key = (after, 1, len(b.ops))
    return state


def _reorder_state_copies(b: _Builder) -> None:
    """Move functionalization's trailing `copy_`s into buffers up to where their value is ready.

    A copy must stay after every op that reads the old value (program order of
    updates), so it goes right after the later of its source's producer and
    the buffer's last other reader; the new value then dies early.
    """
    for i, rec in enumerate(b.ops):
        op = rec.op
        if op.extra["aten"]["target"] != "aten.copy_.default" or not op.updates:
            continue
        (dst,) = op.updates
        srcs = [t for t in op.inputs if t != dst]
        after = max([b.producer.get(t, -1) for t in srcs] + [r for r in b.readers.get(dst, []) if r != i])
        if after < i:
            rec.key = (after, 1, i)
