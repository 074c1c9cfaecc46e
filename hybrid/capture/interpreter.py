"""Reference interpreter: replay a captured graph op by op on real tensors.

`run_op` is the reusable core (the executor calls it with tensors it has
swapped in): it decodes an op's recorded aten call against `env` (graph tensor
id -> the torch.Tensor owning that storage), runs it, and stores fresh outputs
in `env`; in-place updates (optimizer, buffers) write into `env`'s tensors.

`replay_step` binds a module's real parameters, buffers, optimizer state and
a batch to the graph's persistent tensors, runs every op (in the graph's order
or a given valid schedule) and reads back loss, gradients and updated state.
With the same seed it reproduces an eager PyTorch step bitwise, provided the
eager step runs under `portable_kernels()` and uses torch.optim with
`foreach=False` (the default on CPU).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import torch
from torch.utils import _pytree as pytree

from hybrid.capture.conv_impls import is_default, run_impl
from hybrid.capture.encoding import DecodeContext, decode_value, dtype_from_name, resolve_target
from hybrid.capture.trace import portable_kernels
from hybrid.errors import HybridError
from hybrid.graph import Graph, Op
from hybrid.graph.info import bindings


@dataclass
class ReplayContext:
    """What an op needs besides its tensors."""

    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    step: int = 1          # the optimizer step being taken, 1-based (Adam's bias correction, SGD's first step)
    check: bool = True     # compare each output's shape, dtype and stride with the graph


def _check_output(op: Op, tid: str, t: Any, graph: Graph | None) -> None:
    if not isinstance(t, torch.Tensor):
        raise HybridError(f"op {op.id!r} returned {type(t).__name__} for tensor {tid!r}, expected a tensor")
    if graph is None:
        return
    meta = graph.tensor(tid).extra
    if "shape" not in meta:
        return
    if list(t.shape) != meta["shape"] or t.dtype != dtype_from_name(meta["dtype"]):
        raise HybridError(f"op {op.id!r} produced {tid!r} as {t.dtype} {list(t.shape)}, but the graph records "
                          f"{meta['dtype']} {meta['shape']}")
    if t.numel() > 1 and list(t.stride()) != meta["stride"]:
        raise HybridError(f"op {op.id!r} produced {tid!r} with strides {list(t.stride())}, but the graph records "
                          f"{meta['stride']}; views recorded against it would read the wrong elements")


def _copy_storage(t: torch.Tensor) -> torch.Tensor:
    """A copy of the whole storage behind `t`, seen with `t`'s geometry (views of it stay valid)."""
    storage = t.untyped_storage().clone()
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(storage, t.storage_offset(), t.size(), t.stride())


def run_op(op: Op, env: dict[str, torch.Tensor], ctx: ReplayContext | None = None, graph: Graph | None = None,
           versions_ready: bool = False, impl: str | None = None) -> None:
    """Run one captured op on the tensors in `env`; fresh outputs are added to `env`.

    An in-place op on an intermediate tensor writes into `env[new version]`,
    made as a copy of the old version; with `versions_ready` the caller has
    put that tensor in `env` already (an executor that renames a dead old
    storage, or a profiler). Pass `graph` to check outputs against the
    recorded shapes, dtypes and strides. `impl` names one of the op's `impls`
    (hybrid.capture.conv_impls); None or the default runs the recorded call.
    """
    ctx = ctx or ReplayContext()
    rec = op.extra.get("aten")
    if not isinstance(rec, dict) or "target" not in rec:
        raise HybridError(f"op {op.id!r} has no 'aten' record; only graphs from hybrid capture can be replayed")
    if not versions_ready:
        for new, old in rec.get("versions", {}).items():
            env[new] = _copy_storage(env[old])   # an in-place op writes a new version of an intermediate tensor
    dctx = DecodeContext(env, ctx.device)
    fn = resolve_target(rec["target"])
    args = decode_value(rec.get("args", []), dctx)
    kwargs = {k: decode_value(v, dctx) for k, v in rec.get("kwargs", {}).items()}
    if rec["target"].startswith("hybrid."):
        fn(*args, step=ctx.step, **kwargs)
        return
    if is_default(op, impl):
        out = fn(*args, **kwargs)
    else:
        if impl not in {im.name for im in op.impls}:
            raise HybridError(f"op {op.id!r} has no implementation {impl!r}")
        out = run_impl(op.kind, str(impl), args, kwargs)
    ret = rec.get("returns")
    if isinstance(ret, list):
        for tid, t in zip(ret, out):
            if tid is not None:
                if ctx.check:
                    _check_output(op, tid, t, graph)
                env[tid] = t
    elif ret is not None:
        if ctx.check:
            _check_output(op, ret, out, graph)
        env[ret] = out


def _order(graph: Graph, schedule: Sequence[str] | None) -> list[Op]:
    if schedule is None:
        return list(graph.ops)
    idx = []
    for oid in schedule:
        if oid not in graph.op_index:
            raise HybridError(f"schedule names unknown op {oid!r}")
        idx.append(graph.op_index[oid])
    if len(set(idx)) != len(graph.ops) or len(idx) != len(graph.ops):
        raise HybridError(f"schedule must list each of the {len(graph.ops)} ops exactly once, got {len(idx)} entries")
    pos = {i: k for k, i in enumerate(idx)}
    ga = graph.arrays
    for i in idx:
        for j in ga.pred_idx[ga.pred_ptr[i]:ga.pred_ptr[i + 1]]:
            if pos[int(j)] > pos[i]:
                raise HybridError(f"schedule runs op {graph.ops[i].id!r} before {graph.ops[int(j)].id!r}, "
                                  "which it depends on; give a topological order")
    return [graph.ops[i] for i in idx]


def run_graph(graph: Graph, env: dict[str, torch.Tensor], schedule: Sequence[str] | None = None,
              ctx: ReplayContext | None = None, keep: Iterable[str] = (),
              impls: Mapping[str, str] | None = None) -> dict[str, torch.Tensor]:
    """Run every op in order; intermediate tensors are dropped after their last use unless kept. `impls`: op id
    -> the implementation to run (the default where absent)."""
    impls = impls or {}
    ctx = ctx or ReplayContext()
    ops = _order(graph, schedule)
    keep_set = set(keep)
    last: dict[str, int] = {}
    for k, op in enumerate(ops):
        for t in op.inputs:
            last[t] = k
    missing = [t.id for t in graph.tensors if t.persistent and t.id not in env]
    if missing:
        raise HybridError(f"replay needs a value for persistent tensor {missing[0]!r} ({len(missing)} missing)")
    with torch.no_grad(), portable_kernels():
        for k, op in enumerate(ops):
            run_op(op, env, ctx, graph, impl=impls.get(op.id))
            for t in op.inputs:
                if last.get(t) == k and t not in keep_set and not graph.tensor(t).persistent:
                    env.pop(t, None)
    return env


# ---- binding a module to a graph --------------------------------------------------------

@dataclass
class StepResult:
    loss: torch.Tensor | None
    grads: dict[str, torch.Tensor | None]
    params: dict[str, torch.Tensor]
    buffers: dict[str, torch.Tensor]
    state: dict[str, dict[str, torch.Tensor]]
    outputs: list[torch.Tensor | None]


def _place(graph: Graph, tid: str, value: torch.Tensor, device: torch.device, what: str) -> torch.Tensor:
    if value.is_meta:     # capture runs on fake tensors and takes meta modules; a run needs the numbers
        real = ("real weights (build the module on cpu or cuda, or load a checkpoint into it)"
                if what.startswith(("parameter", "buffer", "optimizer")) else "real inputs (make them on cpu or cuda)")
        raise HybridError(f"{what} is on the meta device and has no data: executing a graph needs {real}")
    meta = graph.tensor(tid).extra
    if list(value.shape) != meta["shape"]:
        raise HybridError(f"{what} has shape {list(value.shape)}, but the graph's {tid!r} is {meta['shape']}")
    dt = dtype_from_name(meta["dtype"])
    if value.dtype != dt and not (value.is_floating_point() and dt.is_floating_point):
        raise HybridError(f"{what} is {value.dtype}, but the graph's {tid!r} is {meta['dtype']}")
    # Floating tensors are cast to the captured dtype, as capture(dtype=...) did.
    out = torch.empty_strided(meta["shape"], meta["stride"], dtype=dt, device=device)
    out.copy_(value.detach())
    return out


def module_state_mismatch(graph: Any, module: Any) -> str | None:
    """The first parameter or buffer of `module` the graph's bindings do not match, said in a phrase of the module
    ("it has no parameter ..."): one the module lacks, one the graph does not bind (the module has more), or one
    of another shape; None when the names and shapes agree (or the graph has no bindings: not from `hybrid
    capture`)."""
    b = bindings(graph)
    if not b:
        return None
    shape_of = {t.id: t.extra.get("shape") for t in graph.tensors}
    for what, bound, have in (("parameter", b.get("params") or {}, dict(module.named_parameters())),
                              ("buffer", b.get("buffers") or {}, dict(module.named_buffers()))):
        for name, tid in bound.items():
            if name not in have:
                return f"it has no {what} {name!r}, which the graph binds"
            want, got = shape_of.get(tid), list(have[name].shape)
            if want is not None and list(want) != got:
                return f"its {what} {name!r} has shape {got} but the graph recorded {list(want)}"
        for name, v in have.items():
            if name not in bound:
                return f"it has a {what} {name!r} (shape {list(v.shape)}) that the graph does not bind"
    return None


def check_module_state(graph: Any, module: Any, what: str = "the module") -> None:
    """Refuse, in one line, a module whose parameters and buffers are not the ones the graph was captured with
    (names and shapes; `module_state_mismatch`): run anyway, a parameter the graph does not bind would not
    train, and --check would compare values present on one side only."""
    why = module_state_mismatch(graph, module)
    if why is not None:
        raise HybridError(f"{what} does not match the graph: {why}; run the module the graph was captured from, or "
                          "capture it again")


def bind(graph: Graph, module: torch.nn.Module, args: Any, target: Any = None, kwargs: dict | None = None,
         optimizer: Any = None, device: str | torch.device = "cpu") -> tuple[dict[str, torch.Tensor], int]:
    """Copies of the module's parameters, buffers, the batch and optimizer state, keyed by graph tensor id.

    Returns (env, step): `step` is the optimizer step this replay takes (1 for
    a fresh optimizer, state['step'] + 1 for a used Adam).
    """
    b = bindings(graph, "replayed")
    check_module_state(graph, module)
    dev = torch.device(device)
    env: dict[str, torch.Tensor] = {}
    named = dict(module.named_parameters())
    for name, tid in b["params"].items():
        env[tid] = _place(graph, tid, named[name], dev, f"parameter {name!r}")
    bufs = dict(module.named_buffers())
    for name, tid in b["buffers"].items():
        env[tid] = _place(graph, tid, bufs[name], dev, f"buffer {name!r}")
    if not isinstance(args, tuple):
        args = (args,)
    leaves = [x for x in pytree.tree_leaves((args, dict(kwargs or {}))) if isinstance(x, torch.Tensor)]
    if len(leaves) != len(b["inputs"]):
        raise HybridError(f"the graph takes {len(b['inputs'])} input tensors, the batch given has {len(leaves)}")
    for i, (tid, x) in enumerate(zip(b["inputs"], leaves)):
        env[tid] = _place(graph, tid, x, dev, f"input tensor {i}")
    tleaves = [x for x in pytree.tree_leaves(target) if isinstance(x, torch.Tensor)]
    if len(tleaves) != len(b["targets"]):
        raise HybridError(f"the graph takes {len(b['targets'])} target tensors, {len(tleaves)} given")
    for i, (tid, x) in enumerate(zip(b["targets"], tleaves)):
        env[tid] = _place(graph, tid, x, dev, f"target tensor {i}")
    for tid in b.get("constants", {}):
        meta = graph.tensor(tid).extra
        env[tid] = torch.tensor(meta["value"], dtype=dtype_from_name(meta["dtype"]), device=dev).reshape(meta["shape"])
    if b.get("rng"):
        env[b["rng"]] = torch.empty(0, device=dev)
    step = 1
    opt = b.get("optimizer")
    if opt:
        state = optimizer.state if optimizer is not None else {}
        steps = set()
        for name, keys in opt["state"].items():
            st = state.get(named[name], {}) if state else {}
            for key, tid in keys.items():
                if key in st:
                    env[tid] = _place(graph, tid, st[key], dev, f"optimizer state {key!r} of {name!r}")
                else:
                    meta = graph.tensor(tid).extra
                    env[tid] = torch.zeros_like(torch.empty_strided(meta["shape"], meta["stride"],
                                                                    dtype=dtype_from_name(meta["dtype"]), device=dev))
            if "step" in st:                  # Adam counts its steps
                steps.add(int(st["step"]) + 1)
            else:                             # SGD: a momentum buffer exists after the first step
                steps.add(2 if st.get("momentum_buffer") is not None else 1)
        if len(steps) > 1:
            raise HybridError("the optimizer's parameters are at different steps; replay needs one step count")
        step = steps.pop() if steps else 1
    return env, step


def _captured_dtype(graph: Graph, tid: str, value: torch.Tensor) -> torch.dtype | None:
    """The dtype `bind` casts `value` to for tensor `tid` (a floating value of another floating dtype), or
    None where it keeps it."""
    dt = dtype_from_name(graph.tensor(tid).extra["dtype"])
    return dt if value.is_floating_point() and dt.is_floating_point and value.dtype != dt else None


def captured_casts(graph: Graph, module: torch.nn.Module) -> dict[str, torch.dtype]:
    """The floating parameters and buffers of `module` (by name) that `bind` casts for a run, and to what."""
    b = bindings(graph)
    out: dict[str, torch.dtype] = {}
    for what, named in (("params", module.named_parameters()), ("buffers", module.named_buffers())):
        for name, v in named:
            tid = b.get(what, {}).get(name)
            dt = None if tid is None or v is None else _captured_dtype(graph, tid, v)
            if dt is not None:
                out[name] = dt
    return out


def cast_as_captured(graph: Graph, module: torch.nn.Module) -> list[str]:
    """Cast `module`'s floating parameters and buffers, in place, to the dtypes the graph records for them, as
    `bind` casts them for a run (a graph captured with dtype='bf16' from an fp32 module); an eager reference
    of the uncast module trains another model. Returns the names cast."""
    casts = captured_casts(graph, module)
    if not casts:
        return []
    params = dict(module.named_parameters())
    buffers = dict(module.named_buffers())
    with torch.no_grad():
        for name, dt in casts.items():
            if name in params:
                params[name].data = params[name].data.to(dt)
                continue
            old = buffers[name]
            new = old.to(dt)
            for m in module.modules():   # every owner of a shared buffer (named_buffers names it once)
                for key, v in m._buffers.items():
                    if v is old:
                        m._buffers[key] = new
    return list(casts)


def batch_as_captured(graph: Graph, args: Any, target: Any = None,
                      kwargs: dict | None = None) -> tuple[Any, Any, dict | None]:
    """The batch with its floating tensors cast to the dtypes the graph records, as `bind` casts them for a
    run (float64 data from NumPy, say): the eager reference then trains on the numbers the run trains on."""
    b = bindings(graph)

    def cast(tree: Any, tids: list[str]) -> Any:
        leaves, spec = pytree.tree_flatten(tree)
        tensors = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        if len(tensors) != len(tids):   # not this graph's batch: `bind` refuses it, in one line
            return tree
        for i, tid in zip(tensors, tids):
            dt = _captured_dtype(graph, tid, leaves[i])
            if dt is not None:
                leaves[i] = leaves[i].to(dt)
        return pytree.tree_unflatten(leaves, spec)

    one = not isinstance(args, tuple)
    new_args, new_kwargs = cast(((args,) if one else args, dict(kwargs or {})), list(b.get("inputs", [])))
    return (new_args[0] if one else new_args, cast(target, list(b.get("targets", []))),
            None if kwargs is None else new_kwargs)


def _resolve(ref: Any, env: dict[str, torch.Tensor], device: torch.device) -> torch.Tensor | None:
    if ref is None:
        return None
    return decode_value(ref, DecodeContext(env, device))


def results(graph: Graph, module: torch.nn.Module, env: dict[str, torch.Tensor],
            device: str | torch.device = "cpu") -> StepResult:
    b = bindings(graph, "replayed")
    dev = torch.device(device)
    state = {}
    if b.get("optimizer"):
        state = {n: {k: env[t] for k, t in keys.items()} for n, keys in b["optimizer"]["state"].items()}
    return StepResult(
        loss=_resolve(b.get("loss"), env, dev),
        grads={n: _resolve(r, env, dev) for n, r in b.get("grads", {}).items()},
        params={n: env[t] for n, t in b["params"].items()},
        buffers={n: env[t] for n, t in b["buffers"].items()},
        state=state,
        outputs=[_resolve(r, env, dev) for r in b.get("outputs", [])],
    )


def _kept(graph: Graph) -> set[str]:
    b = bindings(graph, "replayed")
    refs = [b.get("loss"), *b.get("grads", {}).values(), *b.get("outputs", [])]
    return {r["t"] for r in refs if isinstance(r, dict)}


def eager_step(module: torch.nn.Module, args: Any, target: Any = None, loss_fn: Any = None,
               kwargs: dict | None = None, optimizer: Any = None, seed: int | None = None) -> StepResult:
    """One eager PyTorch training step, the reference a replay is compared with.

    Runs under `portable_kernels()` and modifies `module` and `optimizer` as
    training does (use copies). `seed` seeds torch right before the forward.
    """
    if not isinstance(args, tuple):
        args = (args,)
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    if seed is not None:
        torch.manual_seed(seed)
    with portable_kernels():
        out = module(*args, **(kwargs or {}))
        loss = out if loss_fn is None else (loss_fn(out) if target is None else loss_fn(out, target))
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            shape = f"a tensor of shape {list(loss.shape)}" if isinstance(loss, torch.Tensor) else type(loss).__name__
            raise HybridError(f"the module's output is {shape}, not a scalar loss: pass loss_fn=... as captured"
                              if loss_fn is None else
                              f"the loss function returned {shape}, not a scalar loss: pass the loss_fn captured")
        loss.backward()
    grads = {n: (None if p.grad is None else p.grad.detach().clone()) for n, p in module.named_parameters()}
    if optimizer is not None:
        optimizer.step()
    state: dict[str, dict[str, torch.Tensor]] = {}
    if optimizer is not None:
        for n, p in module.named_parameters():
            st = optimizer.state.get(p, {})
            state[n] = {k: v for k, v in st.items() if k != "step" and isinstance(v, torch.Tensor)}
    return StepResult(loss.detach(), grads, {n: p.detach() for n, p in module.named_parameters()},
                      {n: b for n, b in module.named_buffers()}, state, [])


def mismatches(replayed: StepResult, eager: StepResult, rtol: float = 0.0, atol: float = 0.0) -> list[str]:
    """Names of the values that differ (empty when the replay reproduces eager): bitwise by default, within
    torch.allclose(rtol, atol) when a tolerance is given (plans running non-default impls)."""
    bad: list[str] = []
    exact = rtol == 0.0 and atol == 0.0

    def same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
        if a is None or b is None:
            return a is None and b is None
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        return torch.equal(a, b) if exact else torch.allclose(a, b, rtol=rtol, atol=atol)

    if not same(replayed.loss, eager.loss):
        bad.append("loss")
    for group in ("grads", "params", "buffers"):
        mine, ref = getattr(replayed, group), getattr(eager, group)
        for n in ref:
            if not same(mine.get(n), ref[n]):
                bad.append(f"{group}[{n}]")
    for n, st in eager.state.items():
        for k, v in st.items():
            if not same(replayed.state.get(n, {}).get(k), v):
                bad.append(f"state[{n}][{k}]")
    return bad


def replay_step(graph: Graph, module: torch.nn.Module, args: Any, target: Any = None, kwargs: dict | None = None,
                optimizer: Any = None, schedule: Sequence[str] | None = None, seed: int | None = None,
                device: str | torch.device = "cpu", check: bool = True,
                impls: Mapping[str, str] | None = None) -> StepResult:
    """Replay one captured step for `module` on a batch; the module and optimizer are not modified.

    `impls` maps op ids to the implementation to run (hybrid.capture.conv_impls; default elsewhere).
    `seed` seeds torch's generator right before the first op (do the same
    before the eager forward to compare dropout). `optimizer` is the
    torch.optim instance whose state to start from (None: fresh state).
    """
    env, step = bind(graph, module, args, target, kwargs, optimizer, device)
    if seed is not None:
        torch.manual_seed(seed)
    ctx = ReplayContext(torch.device(device), step, check)
    run_graph(graph, env, schedule, ctx, keep=_kept(graph), impls=impls)
    return results(graph, module, env, device)
