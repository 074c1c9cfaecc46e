"""Generator state as graph ops, so a checkpointed step's recomputation draws the forward's random numbers.

`torch.utils.checkpoint` (reentrant or not, selective or not) stashes the
generator state when a checkpointed region runs forward
(`torch.get_rng_state()`), and when it recomputes the region in the backward
it forks the generator (`torch.random.fork_rng`), sets the stashed state, runs
the region again and restores the state it forked from: dropout in the
recomputation draws the forward's mask and the generator continues as if the
recomputation had not drawn. Under capture those calls would act on the real
generator, outside the trace. `rng_ops()` routes them to two ops that the trace
records and that replay on the executor's device:

- `hybrid_rng.save_state(device) -> Tensor`: the device generator's state as
  `STATE_BYTES` bytes (the CPU generator's state; CUDA's 16 bytes, zero padded);
- `hybrid_rng.restore_state(state, device)`: sets the generator to it.

hybrid.capture.to_graph makes both read the graph's `rng` tensor (and restore
update it), so they keep their order against every random op; `prune_forks`
drops the pairs that guard no draw (a checkpointed region without dropout).
"""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.fx as fx

from hybrid.errors import HybridError

NAMESPACE = "hybrid_rng"
STATE_BYTES = 5056          # torch.get_rng_state().numel(): the CPU (mt19937) generator's state

_lib = torch.library.Library(NAMESPACE, "DEF")
_lib.define("save_state(Device device) -> Tensor")
_lib.define("restore_state(Tensor state, Device device) -> ()")


def _save_state(device: torch.device) -> torch.Tensor:
    if device.type == "cuda":
        s = torch.cuda.get_rng_state(device)
        if s.numel() > STATE_BYTES:
            raise HybridError(f"the CUDA generator's state has {s.numel()} bytes, more than the graph's "
                              f"{STATE_BYTES}; capture again with this torch")
        out = torch.zeros(STATE_BYTES, dtype=torch.uint8)
        out[:s.numel()] = s
        return out.to(device)
    if device.type != "cpu":
        raise HybridError(f"generator state of device {device.type!r} cannot be saved; run on cpu or cuda")
    return torch.default_generator.get_state().to(device)


def _restore_state(state: torch.Tensor, device: torch.device) -> None:
    if device.type == "cuda":
        n = torch.cuda.get_rng_state(device).numel()
        torch.cuda.set_rng_state(state[:n].cpu(), device)
    else:
        torch.default_generator.set_state(state.to("cpu", copy=True))   # a tensor of its own, not a pool view


def _fake_save(device: torch.device) -> torch.Tensor:
    return torch.empty(STATE_BYTES, dtype=torch.uint8, device=device)


def _fake_restore(state: torch.Tensor, device: torch.device) -> None:
    return None


# save_state has no tensor argument to dispatch on: one kernel for every backend, which picks by `device`.
_lib.impl("save_state", _save_state, "CompositeExplicitAutograd")
_lib.impl("restore_state", _restore_state, "CompositeExplicitAutograd")
torch.library.register_fake(f"{NAMESPACE}::save_state", _fake_save, lib=_lib)
torch.library.register_fake(f"{NAMESPACE}::restore_state", _fake_restore, lib=_lib)

SAVE = torch.ops.hybrid_rng.save_state.default
RESTORE = torch.ops.hybrid_rng.restore_state.default


def is_rng_op(target: object) -> bool:
    return target is SAVE or target is RESTORE


# Saved-tensor hooks that checkpointing itself installs (it stashes nothing, or recomputes): represented.
_CHECKPOINT_HOOKS = ("_checkpoint_hook", "_recomputation_hook", "_NoopSaveInputs")


@contextlib.contextmanager
def _eager_checkpointing() -> Iterator[None]:
    """torch.utils.checkpoint with eager semantics while make_fx traces the step.

    PyTorch 2.13 has a flag for it, under which checkpoint's `_is_compiling` answers False. Before it (2.11),
    `_is_compiling` answers True whenever a proxy mode is active, which make_fx always has: selective checkpointing
    would then cache every output, and the traced backward fails ("cached ... has been mutated") or differs from
    eager. Without the flag, `_is_compiling` answers for the trace what it answers under the flag."""
    flag = getattr(torch.compiler, "_non_strict_tracing_context", None)
    if flag is not None:
        with flag():
            yield
        return
    import torch.utils.checkpoint as ckpt

    saved = getattr(ckpt, "_is_compiling", None)
    if saved is None:
        yield
        return

    def not_compiling(func: object, args: object, kwargs: object) -> bool:
        return False

    ckpt._is_compiling = not_compiling
    try:
        yield
    finally:
        ckpt._is_compiling = saved


class _TracedGenerator:
    """`torch.default_generator` while the step is traced: its state calls become the graph's ops, as
    torch.get_rng_state/set_rng_state do (the "same mask twice" trick saves and sets the generator's state
    directly); the rest of what would act on the real generator outside the trace is refused, naming it."""

    _READ_ONLY = ("device", "initial_seed")

    def __init__(self, real: torch.Generator, get_state, set_state, refuse_seed) -> None:  # noqa: ANN001
        self._real, self.get_state, self._set, self.manual_seed, self.seed = \
            real, get_state, set_state, refuse_seed, refuse_seed

    def set_state(self, state: torch.Tensor) -> "_TracedGenerator":
        self._set(state)
        return self

    def __getattr__(self, name: str) -> object:
        if name in self._READ_ONLY:
            return getattr(self._real, name)
        raise HybridError(f"the step uses torch.default_generator.{name}, which capture cannot represent (the "
                          "graph saves and sets the generator's state only: get_state, set_state, "
                          "torch.get_rng_state, torch.set_rng_state, torch.random.fork_rng)")


@contextlib.contextmanager
def rng_ops() -> Iterator[None]:
    """While the step is traced: generator save/restore become traced ops; constructs whose effect the graph
    cannot hold (re-seeding, host copies of saved tensors) are refused, naming them."""
    cpu = torch.device("cpu")
    saved = {name: getattr(torch, name) for name in ("get_rng_state", "set_rng_state", "manual_seed", "seed",
                                                      "default_generator")}
    saved_generator = saved["default_generator"]
    saved_random = {name: getattr(torch.random, name) for name in saved}
    hooks_enter = torch.autograd.graph.saved_tensors_hooks.__enter__

    def get_state() -> torch.Tensor:
        return SAVE(cpu)

    def set_state(state: torch.Tensor) -> None:
        RESTORE(state, cpu)

    def refuse_seed(*_a: object, **_k: object) -> None:
        raise HybridError("the step calls torch.manual_seed/torch.seed, which capture cannot represent (the graph "
                          "draws from one generator); seed before the step instead")

    def enter_hooks(self: torch.autograd.graph.saved_tensors_hooks) -> None:
        name = type(self).__name__
        if name not in _CHECKPOINT_HOOKS:
            raise HybridError(f"the step uses saved-tensor hooks ({name}, e.g. torch.autograd.graph.save_on_cpu), "
                              "which capture cannot represent (the graph keeps saved tensors on the device); "
                              "remove them: hybrid plans its own host copies")
        return hooks_enter(self)

    patched = {"get_rng_state": get_state, "set_rng_state": set_state, "manual_seed": refuse_seed,
               "seed": refuse_seed, "default_generator": _TracedGenerator(saved_generator, get_state, set_state,
                                                                          refuse_seed)}
    try:
        for name, fn in patched.items():
            setattr(torch, name, fn)
            setattr(torch.random, name, fn)
        torch.autograd.graph.saved_tensors_hooks.__enter__ = enter_hooks  # type: ignore[method-assign]
        # make_fx tracing of eager semantics: selective checkpointing then caches what its policy saves and
        # recomputes the rest, as eager does (under a compiler's tracing it would cache every output).
        with _eager_checkpointing():
            yield
    finally:
        for name, fn in saved.items():
            setattr(torch, name, fn)
        for name, fn in saved_random.items():
            setattr(torch.random, name, fn)
        torch.autograd.graph.saved_tensors_hooks.__enter__ = hooks_enter  # type: ignore[method-assign]


def _draws(n: fx.Node) -> bool:
    return (n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and not is_rng_op(n.target)
            and torch.Tag.nondeterministic_seeded in n.target.tags)


def prune_forks(gm: fx.GraphModule) -> None:
    """Remove save/restore ops whose removal leaves every draw and the final generator state unchanged.

    Two rules, to a fixpoint: a restore of a state saved with no draw or restore since (the generator holds
    it already) goes; a restore followed by another restore with no draw or save between (never observed)
    goes. Then unused saves go.
    """
    changed = True
    while changed:
        changed = False
        nodes = list(gm.graph.nodes)
        pos = {n: i for i, n in enumerate(nodes)}
        for i, n in enumerate(nodes):
            if n.op != "call_function" or n.target is not RESTORE:
                continue
            state = n.args[0]
            redundant = False
            if isinstance(state, fx.Node) and state.target is SAVE:
                between = nodes[pos[state] + 1:i]
                redundant = not any(_draws(m) or m.target is RESTORE for m in between)
            if not redundant:
                for m in nodes[i + 1:]:
                    if _draws(m) or m.target is SAVE:
                        break
                    if m.target is RESTORE:
                        redundant = True
                        break
            if redundant:
                gm.graph.erase_node(n)
                changed = True
                break
        for n in list(gm.graph.nodes):
            if n.op == "call_function" and n.target is SAVE and not n.users:
                gm.graph.erase_node(n)
                changed = True
    gm.recompile()
