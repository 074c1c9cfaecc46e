"""The public API: run a captured training step under a plan, N times, and optionally check it.

    from executor import execute
    result = execute(graph, plan, module, x, y, loss_fn=F.cross_entropy, iters=20, device="cuda", check=True)
    print(result.summary.makespan_s, result.comparison.max_abs_diff)

`Executor` is the lower-level handle (load once, run, read state).
"""
from __future__ import annotations

import copy
import functools
import types
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from hybrid.capture.conv_impls import STEP_ATOL, STEP_RTOL
from hybrid.capture.encoding import DecodeContext, decode_value
from hybrid.capture.interpreter import (StepResult, batch_as_captured, bind, captured_casts, cast_as_captured,
                                        check_module_state)
from hybrid.capture.trace import mode_layers
from hybrid.errors import HybridError, require_instance
from hybrid.graph import Graph
from hybrid.graph.info import bindings, is_inference
from hybrid.plan import Plan
from hybrid.units import counted, format_seconds

from executor.check import (Batches, Comparison, OutputCheck, compare, compare_outputs, iteration_seed,
                           same_bits, train_eager, unpack_batch)
from executor.device_pool import PoolStats
from executor.measure import Summary, summarize
from executor.preflight import storage_fits
from executor.program import Program, compile_program
from executor.runtime import IterationRecord, Runtime
from executor.streams import make_backend


GRAPH_AFTER = 2   # iterations issued node by node before a CUDA graph records (warm-up, optimizer's first step)


class Executor:
    """A plan made runnable: pools allocated, program compiled. Load a module's state, then run iterations."""

    def __init__(self, graph: Graph, plan: Plan, device: str = "cpu", *, validate: bool = True,
                 timing: bool = True, sanitize: bool = False, cuda_graph: bool = False,
                 random: str | None = None, count_outside: bool = True) -> None:
        """`random` (executor.random_state): "replay" draws eager's numbers (the CPU's default: bitwise equal to
        eager); "op_seeds" gives each random op its own seed per step, graph-safe (the default with
        `cuda_graph`, so plans with dropout are recorded too). `count_outside`: count the bytes allocated outside
        the pool (executor.outside; on the CPU a dispatch mode, 1.5-2.5x slower per iteration)."""
        if validate:   # an invalid plan: InvalidPlanError naming the first violation, exit 1 as `hybrid validate`
            from hybrid.validator import require_valid

            require_valid(graph, plan, "the plan")
        bindings(graph, "executed")
        storage_fits(graph)    # a tensor's bytes short of its shape would overlap the next one's, silently
        self.graph = graph
        self.plan = plan
        self.backend = make_backend(device, poison=sanitize)
        # what was allocated on the device before this executor's pool: its own peak is measured above it
        self._allocated_before = (int(torch.cuda.memory_allocated(self.backend.device))
                                  if self.backend.name == "cuda" else 0)
        if cuda_graph and self.backend.name != "cuda":    # before the pools are allocated and the program built
            raise HybridError("--cuda-graph needs --device cuda (a CUDA graph replays device work)")
        self.runtime = Runtime(graph, plan, self.backend, compile_program(graph, plan), timing=timing,
                               check_races=sanitize, random=random or ("op_seeds" if cuda_graph else "replay"))
        self.runtime.count_outside = count_outside
        self.cuda_graph = cuda_graph     # from the third iteration on, replay one recorded CUDA graph
        self.records: list[IterationRecord] = []
        self.losses: list[torch.Tensor] = []
        # an inference graph's outputs, every iteration's (CPU copies), once `keep_outputs` asked for them
        self.outputs: list[list[torch.Tensor | None]] = []
        self._module: torch.nn.Module | None = None
        self._kwargs: dict | None = None
        b = bindings(graph, "executed")
        if isinstance(b.get("loss"), dict):
            self.runtime.watch("loss", b["loss"])
        self._outputs: list[Any] = []   # the bindings' outputs, once kept

    @property
    def device(self) -> torch.device:
        return self.backend.device

    def keep_grads(self) -> None:
        """Also snapshot every gradient of the last iteration (copied to the host: for checks, not for speed)."""
        for name, ref in bindings(self.graph, "executed").get("grads", {}).items():
            if isinstance(ref, dict):
                self.runtime.watch(f"grad:{name}", ref)

    def keep_outputs(self) -> None:
        """Also copy every iteration's outputs (an inference graph's) to the host, as they are made: for checks
        and for users who want them, not for speed (on CUDA each copy waits for its output mid-iteration)."""
        self._outputs = list(bindings(self.graph, "executed").get("outputs") or [])
        for i, ref in enumerate(self._outputs):
            if isinstance(ref, dict) and not self.graph.tensor(ref["t"]).persistent:   # persistent: read after
                self.runtime.watch(f"output:{i}", ref)

    def _read_outputs(self) -> list[torch.Tensor | None]:
        """This iteration's outputs, as the graph's bindings list them (CPU copies)."""
        out: list[torch.Tensor | None] = []
        for i, ref in enumerate(self._outputs):
            if not isinstance(ref, dict):
                out.append(None)
            elif self.graph.tensor(ref["t"]).persistent:
                out.append(decode_value(ref, DecodeContext({ref["t"]: self.runtime.value(ref["t"])},
                                                           torch.device("cpu"))).clone())
            else:
                out.append(self.runtime.snapshots[f"output:{i}"].detach().to("cpu", copy=True))
        return out

    def load(self, module: torch.nn.Module, args: Any, target: Any = None, kwargs: dict | None = None,
             optimizer: Any = None) -> None:
        """Start from `module`'s parameters and buffers (and `optimizer`'s state, if given) and this batch: the
        ones the graph was captured with, by name and shape (bind refuses others: check_module_state)."""
        env, step = bind(self.graph, module, args, target, kwargs, optimizer, device="cpu")
        self.runtime.load(env, step)
        self._module = module
        self._kwargs = kwargs

    def set_batch(self, args: Any, target: Any = None, kwargs: dict | None = None) -> None:
        """Feed the next iteration another batch (same shapes as captured)."""
        b = bindings(self.graph, "executed")
        if not isinstance(args, tuple):
            args = (args,)
        leaves = [x for x in pytree.tree_leaves((args, dict(kwargs or {}))) if isinstance(x, torch.Tensor)]
        tleaves = [x for x in pytree.tree_leaves(target) if isinstance(x, torch.Tensor)]
        if len(leaves) != len(b["inputs"]) or len(tleaves) != len(b["targets"]):
            raise HybridError(f"the graph takes {len(b['inputs'])} input and {len(b['targets'])} target tensors; "
                              f"the batch has {len(leaves)} and {len(tleaves)}")
        for tid, x in zip(b["inputs"] + b["targets"], leaves + tleaves):
            self.runtime.set_value(tid, x)

    def run(self, iters: int, seed: int | None = 0, batches: Batches | None = None,
            on_iteration: Callable[[IterationRecord], None] | None = None) -> list[IterationRecord]:
        """Run `iters` iterations; iteration k seeds torch with seed + k (None: no seeding). `on_iteration` is
        called after each (progress for long runs). `batches(k)` gives iteration k's batch: (args, target), or
        (args, target, kwargs) for keyword tensor inputs (without, the kwargs given to `load` are fed again)."""
        if iters < 1:
            raise HybridError(f"--iters (iters) must be at least 1, got {iters}")
        out = []
        for _ in range(iters):
            k = len(self.records)
            if batches is not None:
                self.set_batch(*unpack_batch(batches(k), self._kwargs))
            rec = self.runtime.run_iteration(None if seed is None else iteration_seed(seed, k),
                                             graph=self.cuda_graph and k >= GRAPH_AFTER)
            loss = self.runtime.snapshots.get("loss")
            if loss is not None:
                loss = loss.detach().to("cpu", copy=True)
                rec.loss = float(loss)
                self.losses.append(loss)
            if self._outputs:
                self.outputs.append(self._read_outputs())
            self.records.append(rec)
            out.append(rec)
            if on_iteration is not None:
                on_iteration(rec)
        return out

    def state(self) -> StepResult:
        """Parameters, buffers and optimizer state now (CPU copies), and the last gradients if kept."""
        b = bindings(self.graph, "executed")
        rt = self.runtime
        params = {n: rt.value(t) for n, t in b["params"].items()}
        buffers = {n: rt.value(t) for n, t in b["buffers"].items()}
        state: dict[str, dict[str, torch.Tensor]] = {}
        if b.get("optimizer"):
            state = {n: {k: rt.value(t) for k, t in keys.items()} for n, keys in b["optimizer"]["state"].items()}
        grads = {n[5:]: v for n, v in rt.snapshots.items() if n.startswith("grad:")}
        loss = self.losses[-1] if self.losses else None
        return StepResult(loss, grads, params, buffers, state, list(self.outputs[-1]) if self.outputs else [])

    def write_back(self, module: torch.nn.Module) -> None:
        """Copy the trained parameters and buffers into `module` (e.g. to save or evaluate it)."""
        st = self.state()
        with torch.no_grad():
            for n, p in module.named_parameters():
                if n in st.params:
                    p.copy_(st.params[n])
            for n, buf in module.named_buffers():
                if n in st.buffers:
                    buf.copy_(st.buffers[n])

    def memory(self) -> dict[str, Any]:
        p: PoolStats = self.runtime.pool.stats
        out: dict[str, Any] = {"plan_memory_bytes": self.plan.device.memory_bytes,
                               "plan_usable_bytes": self.plan.device.usable_bytes, "pool": p.to_json(),
                               "host_pool_bytes": self.runtime.host.nbytes, "pinned": self.runtime.host.pinned}
        if self.backend.name == "cuda":
            allocated = self.runtime.allocator.max_allocated if self.runtime.allocator is not None else 0
            out["cuda_max_allocated_bytes"] = max(allocated, int(torch.cuda.max_memory_allocated(self.backend.device)))
            # Allocated before this executor (other tensors of the process, cuBLAS's workspaces kept since the
            # compute stream's first product: `cuda_kernel_state_bytes`, outside any plan, for good): the
            # executor's own peak is the max above it, which a plan's memory (with its reserve) should bound.
            out["cuda_allocated_before_bytes"] = self._allocated_before
            out["cuda_kernel_state_bytes"] = getattr(self.backend, "kernel_state_bytes", 0)
            out["cuda_peak_above_before_bytes"] = out["cuda_max_allocated_bytes"] - self._allocated_before
            # this run's own: what a plan's memory bounds
            out["cuda_own_peak_bytes"] = out["cuda_peak_above_before_bytes"] + out["cuda_kernel_state_bytes"]
        return out

    def summary(self) -> Summary:
        return summarize(self.runtime.program, self.records, self.memory())


@dataclass
class ExecutionResult:
    summary: Summary
    records: list[IterationRecord]
    losses: list[float]
    state: StepResult
    comparison: Comparison | None = None
    program: Program | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    outputs: list[list[torch.Tensor | None]] = field(default_factory=list)   # a forward-only graph's, per iteration

    def __repr__(self) -> str:
        """One line for a notebook (the dataclass default printed the program and every interval: 190 KB for a
        44-op graph)."""
        s = self.summary
        check = "" if self.comparison is None else f", check {'ok' if self.comparison.ok else 'MISMATCH'}"
        return (f"ExecutionResult({s.iterations} iterations, {format_seconds(s.wall_s)} wall per iteration, "
                f"losses {', '.join(f'{x:.6g}' for x in self.losses[:3])}{', ...' if len(self.losses) > 3 else ''}"
                f"{check})")

    def iterations_frame(self) -> "pd.DataFrame":  # noqa: F821 - pandas, a core dependency
        """One row per iteration measured: iteration, wall_s, makespan_s (the device's, or the host clock on the
        CPU), issue_s, loss, graphed (replayed as a CUDA graph), first_replay, and `counted`: whether the summary's
        medians count it (executor.measure.counted: not the warm-up iteration, nor a graph's first launch), so
        `df[df.counted].wall_s.median()` is `summary.wall_s`. For a notebook."""
        import pandas as pd

        from executor.measure import counted

        return pd.DataFrame([{"iteration": r.iteration, "wall_s": r.wall_s, "makespan_s": r.makespan_s,
                              "issue_s": r.issue_s, "loss": r.loss, "graphed": r.graphed,
                              "first_replay": r.first_replay, "counted": c}
                             for r, c in zip(self.records, counted(self.records))],
                            columns=["iteration", "wall_s", "makespan_s", "issue_s", "loss", "graphed",
                                     "first_replay", "counted"])


PEAK_SLACK = 0.01   # a run may hold this share more than its plan allows before it is flagged


class PlanMemoryWarning(UserWarning):
    """A run held more memory than its plan allows (`execute`); `hybrid execute` prints the same line."""


class CheckMismatchWarning(UserWarning):
    """`execute(check=True)` (or `execute_placement`) found the run beyond tolerance of eager: the result's
    `comparison.ok` is False; the warning is its one line (`hybrid execute --check` prints it and exits 1)."""


def peak_warning(mem: dict[str, Any], plan_memory: int, reserve: int = 0) -> str | None:
    """On CUDA, one line where the run held more device memory than its plan allows (its own peak, with what
    cuBLAS keeps for its stream), saying what to do; else None. `plan_memory` is the device's memory with its
    `reserve`: what the executor and cuBLAS hold beside the pool is the reserve's to cover."""
    from hybrid.units import format_bytes

    if "cuda_own_peak_bytes" not in mem:
        return None
    own = int(mem["cuda_own_peak_bytes"])
    if own <= (1.0 + PEAK_SLACK) * plan_memory:
        return None
    with_reserve = f" with its {format_bytes(reserve)} reserve" if reserve else ""
    return (f"this run held {format_bytes(own)} on the device, {format_bytes(own - plan_memory)} over the plan's "
            f"{format_bytes(plan_memory)}{with_reserve}: capture with --executor-workspaces and a cuda --profile "
            f"(what the executor allocates beside its pool) and plan with --reserve "
            f"{format_bytes(int(mem.get('cuda_kernel_state_bytes', 0)))} or more (what cuBLAS keeps)")


def outside_warning(s: Summary, usable: int) -> str | None:
    """Where CUDA's own peak is not measured (the CPU), one line where the pool's level with what a node
    allocated outside it (Summary.peak_with_outside_bytes) exceeds the plan's usable memory (Device.usable_bytes:
    what the plan was made to fill); else None. Counted per node on the CPU: what the plan did not allow for.
    The advice follows the cause at that peak: its node's bytes beyond its op's stated workspace (the copy
    fallback's results, where the graph does not state them) are planned for once captured as workspaces; what
    is over with the workspaces kept to is the executor's own layout of a plan without offsets, which leaves
    too little room beside the tensors for the largest workspace, and a layout planned with the workspaces in
    view mends that (capturing with the workspaces again cannot)."""
    from hybrid.units import format_bytes

    if "cuda_own_peak_bytes" in s.memory or s.outside_counted_by != "dispatch":
        return None
    held, limit = int(s.peak_with_outside_bytes), (1.0 + PEAK_SLACK) * usable
    if held <= limit:
        return None
    head = (f"with what it allocated outside the pool this run held {format_bytes(held)}, "
            f"{format_bytes(held - usable)} over the plan's {format_bytes(usable)} usable: ")
    beyond = int(s.peak_beyond_workspace_bytes)
    if beyond and held - beyond <= limit:
        return head + ("capture with --executor-workspaces (executor.ops.with_copy_workspaces(graph) from Python: "
                       "the copy fallback's results stated as workspaces) and plan again")
    note = str((s.memory.get("pool") or {}).get("offsets", ""))
    if "workspace" not in note:   # pools with the plan's offsets or size classes keep the workspaces' room
        return head + "plan with more memory"
    cause = ("its nodes allocated outside the pool no more than their ops' workspaces, but" if not beyond else
             f"{format_bytes(beyond)} of it was a node's beyond its op's workspace, which capturing with "
             "--executor-workspaces plans for; for the rest,")
    return (head + f"{cause} the executor's layout of this plan, which has no offsets, left the workspaces too "
            f"little room beside its tensors ({note.partition('; ')[2]}): lay the plan out (hybrid arena --graph "
            "G --plan P, or plan without --no-arena), plan with --workspaces-aside, or plan with more memory")


def memory_warning(s: Summary, plan: Plan) -> str | None:
    """The one line `execute` warns with (PlanMemoryWarning) and `hybrid execute` prints, or None."""
    dev = plan.device
    return peak_warning(s.memory, dev.memory_bytes, dev.reserve_bytes) or outside_warning(s, dev.usable_bytes)


def _keeps_callers_rng(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Runs `fn` with the caller's torch random state restored afterwards: the executor and the eager reference
    seed the global generators per iteration, which in a notebook silently changed every later draw."""
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        # torch.manual_seed reseeds every GPU, so every initialized one is saved, whatever device runs the plan
        gpu = str(kwargs.get("device", "cpu")).startswith("cuda") and torch.cuda.is_available()
        cuda = list(range(torch.cuda.device_count())) if gpu or torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=cuda):
            return fn(*args, **kwargs)
    return run


@_keeps_callers_rng
def execute(graph: Graph, plan: Plan, module: torch.nn.Module, args: Any, target: Any = None, *,
            loss_fn: Any = None, kwargs: dict | None = None, iters: int = 1, device: str = "cpu", seed: int = 0,
            check: bool = False, keep_grads: bool = False, batches: Batches | None = None, timing: bool = True,
            sanitize: bool = False, atol: float | None = None, rtol: float | None = None,
            validate: bool = True, on_iteration: Callable[[IterationRecord], None] | None = None,
            cuda_graph: bool = False, reference: str = "cpu", random: str | None = None,
            count_outside: bool = True, keep_outputs: bool = False,
            make_reference: Callable[[], tuple[torch.nn.Module, Any]] | None = None) -> ExecutionResult:
    """Train `module` for `iters` iterations under `plan`; `module` itself is not modified.

    The module must be in the mode it was captured in where the graph shows it
    (batch norm's training flag, dropout's random masks), and have the
    parameters and buffers the graph binds, by name and shape
    (hybrid.capture.interpreter.check_module_state): another is refused before anything
    is built. With `validate`, an invalid plan raises InvalidPlanError naming
    its first violation (exit 1 in the CLI, as `hybrid validate`).
    `batches(k)` gives iteration k's batch, (args, target) or (args, target,
    kwargs); without kwargs, `kwargs` is fed again. An inference graph runs
    its forward `iters` times; with `keep_outputs` (or `check`),
    `result.outputs` has every iteration's outputs, copied to the host as they
    are made (not for timing runs: on CUDA each copy waits for its output).

    With `check`, the same number of eager steps from the same seed train a
    copy of `module` (`loss_fn(output, target)` as captured) on the CPU, and
    every loss, parameter, buffer and optimizer state is compared: bitwise on
    CPU (atol = rtol = 0 by default), within atol=1e-5, rtol=1e-4 on CUDA; a
    plan whose compute events name non-default implementations (convolution
    impls, hybrid.capture.conv_impls) is compared within conv_impls.STEP_ATOL /
    STEP_RTOL on CPU. For a forward-only graph, eager forward passes without
    gradients (executor.check.infer_eager) are compared instead: every
    iteration's outputs, and the parameters and buffers (batch norm in train
    mode updates its running statistics even in inference).
    The copy is of the module and `loss_fn` together, so a loss that reads the
    module (a bound method such as `module.loss`, an nn.Module, a partial, a
    closure over the module or its parameters) reads the copy; a loss that
    reaches the module otherwise (a global) is refused, as it would train the
    caller's module. `make_reference()`, when given, builds the reference's
    (module, loss_fn) afresh instead (`hybrid execute --module` calls the
    factory again with the same seed); a module that differs from `module`
    falls back to the copy, with a note.
    The reference trains on the CPU even for a CUDA run: the models this tool
    is for do not fit the GPU without a plan, and host memory holds them;
    `reference="same"` trains it on the executor's device instead (a model
    that fits: the check then measures the executor, not TF32 against fp32).
    `sanitize`: check every node's accesses for stream races (executor.races)
    and, on CPU, poison released device memory so a stale read shows.
    `loss_fn` is the eager reference's (with `check`): the plan always runs the
    loss the graph was captured with.
    The caller's torch random state is as before afterwards (each iteration seeds `seed + k`). A run that held
    more memory than the plan allows warns (PlanMemoryWarning, `memory_warning`'s line).
    Ctrl-C raises KeyboardInterrupt, with no result: to keep what was
    measured, collect each iteration's record with `on_iteration` as it
    completes (`hybrid execute` writes those on a Ctrl-C).
    `cuda_graph`: after two iterations issued node by node, record one as a
    CUDA graph and replay it (no per-node host cost; no per-node times); random ops then draw from their own
    seed per step (`random="op_seeds"`, executor.random_state), so their numbers differ from eager's.
    """
    if reference not in ("cpu", "same"):
        raise HybridError(f"reference must be 'cpu' or 'same' (the executor's device), got {reference!r}")
    require_instance("graph", graph, Graph, "hybrid.graph.Graph (Graph.load(path))")
    require_instance("plan", plan, Plan, "hybrid.plan.Plan (Plan.load(path))")
    require_instance("module", module, torch.nn.Module, "torch.nn.Module (the one captured)")
    check_module_state(graph, module)     # before anything is built: another model's state, in one line
    refuse_other_mode(graph, module)
    ex = Executor(graph, plan, device, validate=validate, timing=timing, sanitize=sanitize, cuda_graph=cuda_graph,
                  random=random, count_outside=count_outside)
    if keep_grads:
        ex.keep_grads()
    if check or keep_outputs:
        ex.keep_outputs()
    if torch.cuda.is_available() and ex.backend.name == "cuda":
        torch.cuda.reset_peak_memory_stats(ex.device)
    ex.load(module, args, target, kwargs)
    ex.run(iters, seed, batches, on_iteration)
    state = ex.state()
    comparison = None
    if check:
        dev = torch.device("cpu") if reference == "cpu" else ex.device
        ref_module, ref_loss, ref_note = reference_pair(module, loss_fn, make_reference)
        ref_module = ref_module.to(dev)
        # The run binds floating values in the dtypes the graph records (bind): the reference trains on those too
        cast = cast_as_captured(graph, ref_module)

        def to_dev(x: Any) -> Any:
            return pytree.tree_map(lambda v: v.to(dev) if isinstance(v, torch.Tensor) else v, x)

        def ref_batch(a: Any, t: Any, kw: dict | None) -> tuple[Any, ...]:
            a, t, kw = to_dev(batch_as_captured(graph, a, t, kw))
            return (a, t) if kw is None else (a, t, kw)     # a `Batches` result

        eb = None if batches is None else (lambda k: ref_batch(*unpack_batch(batches(k), kwargs)))
        ref_args, ref_target, ref_kwargs = unpack_batch(ref_batch(args, target, kwargs), None)
        # The caller's gradients are set aside while the reference trains: one that appears then was made by a
        # loss reading the caller's module, not the reference's copy (a grad already there would only grow)
        params = list(module.parameters())
        grads_before = [p.grad for p in params]
        for p in params:
            p.grad = None
        try:
            eager = train_eager(graph, ref_module, ref_args, ref_target, ref_loss, iters, seed, ref_kwargs, eb)
            touched = any(p.grad is not None for p in params)
        finally:
            for p, g in zip(params, grads_before):
                p.grad = g
        if touched:
            raise HybridError("loss_fn reads the module given, not the eager reference's copy of it (a global, or "
                              "another object holding its parameters): pass make_reference=... returning a fresh "
                              "(module, loss_fn) pair built as the module was")
        cuda = ex.backend.name == "cuda"
        # Non-default implementations (hybrid.capture.conv_impls) sum in other orders: not bitwise, even on CPU.
        alt = bool(ex.runtime.node_impl)
        comparison = compare(ex.losses, state, eager,
                             atol=(1e-5 if cuda else STEP_ATOL if alt else 0.0) if atol is None else atol,
                             rtol=(1e-4 if cuda else STEP_RTOL if alt else 0.0) if rtol is None else rtol,
                             grads=keep_grads, outputs=ex.outputs if is_inference(graph) else None)
        if ref_note:
            comparison.notes.append(ref_note)
        if cast:
            comparison.notes.append(f"the graph was captured in other dtypes than the module's: the reference "
                                    f"trained a copy cast as the run binds it ({counted(len(cast), 'value')}, "
                                    f"{cast[0]} first)")
        if "loss[0]" in comparison.beyond_tolerance:   # before any update: the loss, the batch or the forward
            moves = any(e.kind == "swap_in" or e.recompute for e in plan.events)
            comparison.notes.append(
                "the first iteration's loss already differs, before any parameter was updated: the plan runs the "
                "loss the graph was captured with, the eager reference loss_fn; is loss_fn that one (and the "
                "batch the same)?" + (" If so, the plan's copies or reruns in the forward changed a value: where "
                                      "the program order without them (`hybrid simulate --memory` at the graph's "
                                      "peak) matches eager, please report the graph and plan" if moves else ""))
        if alt:
            names = sorted(set(ex.runtime.node_impl.values()))
            comparison.notes.append(f"the plan runs {len(ex.runtime.node_impl)} compute event(s) with non-default "
                                    f"implementations ({', '.join(names)}): compared within tolerance, not bitwise")
            adaptive = _adaptive_step(graph)
            if (adaptive is not None and comparison.beyond_tolerance and not cuda
                    and "loss[0]" not in comparison.beyond_tolerance):   # no step has run before the first loss
                name, lr = adaptive
                comparison.notes.append(
                    f"the optimizer is {name} (lr {lr:g}): its step divides each gradient by the gradient's own "
                    f"running size, so a rounding difference in a gradient near zero can move a parameter by up "
                    f"to about 2 x lr = {2 * lr:g} an iteration, so differences up to that size may be that rather "
                    f"than the plan. To check the plan itself, capture with --optimizer sgd, or give --atol "
                    f"{2 * lr * iters:g}")
        if (not cuda and not alt and comparison.beyond_tolerance and not (comparison.atol or comparison.rtol)
                and not comparison.inference and "loss[0]" not in comparison.beyond_tolerance   # (the note above)
                and comparison.max_abs_diff <= 1e-3):   # rounding's size: a larger difference is no rounding
            comparison.notes.append(
                "eager training on the CPU is not always bitwise reproducible from one process to the next (its "
                "kernels may split sums differently: results/eager_reproducibility.md found resnet-50's eager state "
                "in 3 versions over 24 processes, the executor's in 1): run the check again; a difference that "
                "does not repeat is not the plan's")
        if cuda and any("rng" in op.inputs for op in graph.ops):
            comparison.notes.append(
                "the graph draws random numbers (dropout): this run drew them from the CUDA generator, the eager "
                "reference on the CPU from the CPU generator, so their masks differ even from one seed; only "
                "--device cpu can check such a model exactly")
        if not comparison.bitwise and not _draws_masks(graph) and _dropout_modes(module) == {True}:
            comparison.notes.append("the graph draws no dropout masks, but the module's dropout layers are in "
                                    "training mode: if it was captured in eval mode, return the module in eval mode")
        if not comparison.ok:   # with what the notes say of why (a first loss that differs: another loss_fn?)
            warnings.warn("; ".join([comparison.line(), *comparison.notes]), CheckMismatchWarning, stacklevel=3)
    extra: dict[str, Any] = {}
    if ex.runtime.races is not None:   # a race raises RaceError: a run that ends found none
        extra["sanitize"] = {"races": 0, "nodes_checked": ex.runtime.races.total, "iterations": len(ex.records)}
    summary = ex.summary()
    over = memory_warning(summary, plan)
    if over is not None:
        warnings.warn(over, PlanMemoryWarning, stacklevel=3)
    return ExecutionResult(summary, ex.records, [float(x) for x in ex.losses], state, comparison,
                           ex.runtime.program, extra, outputs=list(ex.outputs))


# ---- the reference's module, and the mode the graph was captured in ----------------------

def reference_pair(module: torch.nn.Module, loss_fn: Any,
                   make_reference: Callable[[], tuple[torch.nn.Module, Any]] | None = None
                   ) -> tuple[torch.nn.Module, Any, str | None]:
    """The eager reference's (module, loss_fn) and a note: `make_reference()`'s where its module equals
    `module`, else copies of both together (one deepcopy memo, so the loss reads the module's copy)."""
    note = None
    if make_reference is not None:
        built, built_loss = make_reference()
        diff = _first_difference(module, built)
        if diff is None:
            return built, built_loss, None
        note = (f"the reference built afresh differs from the module run ({diff}): the check trains a copy of the "
                "module instead; make the factory deterministic under its seed")
        del built, built_loss    # one reference in memory at a time, as preflight's estimate counts
    memo: dict[int, Any] = {}
    copied = copy.deepcopy(module, memo)
    return copied, _copy_loss(loss_fn, memo), note


def _first_difference(a: torch.nn.Module, b: torch.nn.Module) -> str | None:
    """The first parameter or buffer whose name, shape, dtype or bits differ, or None."""
    for what, x, y in (("parameter", dict(a.named_parameters()), dict(b.named_parameters())),
                       ("buffer", dict(a.named_buffers()), dict(b.named_buffers()))):
        if x.keys() != y.keys():
            return f"{what}s {sorted(set(x) ^ set(y))[:3]}"
        for n, v in x.items():
            if not same_bits(v.detach().cpu(), y[n].detach().cpu()):
                return f"{what} {n!r}"
    return None


def _copy_loss(loss_fn: Any, memo: dict[int, Any]) -> Any:
    """`loss_fn` for the module's copy made with `memo`: deepcopy maps a bound method's `__self__`, an nn.Module
    loss or a partial's arguments to the copies; it copies a function as it is, so a closure's cells holding
    objects the module's copy covers (the module, its parameters) are rebound here."""
    if loss_fn is None:
        return None
    if isinstance(loss_fn, types.FunctionType):
        cells = loss_fn.__closure__ or ()
        contents = []
        for c in cells:
            try:
                contents.append(c.cell_contents)
            except ValueError:          # an empty cell (a name assigned later)
                contents.append(c)
        if not any(id(v) in memo for v in contents):
            return loss_fn
        new = types.FunctionType(loss_fn.__code__, loss_fn.__globals__, loss_fn.__name__, loss_fn.__defaults__,
                                 tuple(c if v is c else types.CellType(memo.get(id(v), v))
                                       for c, v in zip(cells, contents)))
        new.__kwdefaults__ = loss_fn.__kwdefaults__
        new.__qualname__ = loss_fn.__qualname__
        new.__dict__.update(loss_fn.__dict__)
        return new
    try:
        return copy.deepcopy(loss_fn, memo)
    except Exception:  # noqa: BLE001 - an object deepcopy cannot copy: the check then sees whether it reads the module
        return loss_fn


_BN_TRAINING_AT = 5    # the `training` argument of native_batch_norm, _native_batch_norm_legit, cudnn_batch_norm, ...


def _bn_flags(graph: Graph) -> list[tuple[str, bool]]:
    """(running mean's tensor id, training) for each batch norm op with running statistics: the mode it was
    captured in (without running statistics batch norm uses the batch's in either mode)."""
    out = []
    for op in graph.ops:
        rec = op.extra.get("aten")
        if not isinstance(rec, dict):
            continue
        target = str(rec.get("target", ""))
        if "batch_norm" not in target or "backward" in target:
            continue
        args = rec.get("args", [])
        rm = args[3] if len(args) > 3 else None
        if not (isinstance(rm, dict) and "t" in rm):
            continue
        if "no_training" in target or "no_update" in target:
            flag: Any = False
        elif "with_update" in target:
            flag = True
        else:
            flag = rec.get("kwargs", {}).get("training", args[_BN_TRAINING_AT] if len(args) > _BN_TRAINING_AT
                                             else None)
        if isinstance(flag, bool):
            out.append((rm["t"], flag))
    return out


def _draws_masks(graph: Graph) -> bool:
    """Whether the graph draws dropout's masks (bernoulli ops on the random state): dropout in training mode."""
    return any("rng" in op.inputs and "bernoulli" in str((op.extra.get("aten") or {}).get("target", ""))
               for op in graph.ops)


def _dropout_modes(module: torch.nn.Module) -> set[bool]:
    return {m.training for _, m in mode_layers(module)[0]}


def _mode(training: bool) -> str:
    return "training" if training else "eval"


def refuse_other_mode(graph: Graph, module: torch.nn.Module) -> None:
    """Refuse a module in another mode than the graph was captured in, where the graph shows it: batch norm's
    training flag (per layer, through its running mean), dropout's masks (drawn, against a module whose dropout
    layers are all in eval mode). Another mode runs the graph's step all the same, but not the module's."""
    buffers = {tid: name for name, tid in bindings(graph, "executed").get("buffers", {}).items()}
    norms = [m for _, m in mode_layers(module)[1]]
    for tid, flag in _bn_flags(graph):
        name = buffers.get(tid)
        owner: Any = None
        if name is not None:
            try:
                owner = module.get_submodule(name.rpartition(".")[0])
            except AttributeError:
                owner = None
        if owner is not None:
            training, where = owner.training, f" {name.rpartition('.')[0] or 'the module'!r}"
        elif len({m.training for m in norms}) == 1:
            training, where = norms[0].training, ""
        else:
            continue
        if training != flag:
            raise HybridError(f"graph captured with batch norm{where} in {_mode(flag)} mode; the module given has "
                              f"it in {_mode(training)} mode: return the module in the mode it was captured in "
                              f"(.{'train' if flag else 'eval'}())")
    if _draws_masks(graph) and not module.training and _dropout_modes(module) == {False}:
        raise HybridError("graph captured with dropout in training mode (it draws dropout masks); the module given "
                          "is in eval mode: return the module in the mode it was captured in (.train())")


@dataclass
class PlacementRun:
    """A placement plan's inferences (`hybrid place`): host ops on the CPU, the rest on the device."""
    wall_s: list[float]                     # per inference
    median_wall_s: float                    # after the first, when there are several
    host_ops: int                           # compute events on the host CPU
    device_ops: int                         # compute events on the device
    check: OutputCheck | None = None


def _adaptive_step(graph: Graph) -> tuple[str, float] | None:
    """(name, largest lr) where the graph's optimizer normalises each gradient by its running size (Adam,
    AdamW), else None."""
    opt = bindings(graph).get("optimizer")
    if not isinstance(opt, dict) or opt.get("name") not in ("adam", "adamw"):
        return None
    lrs = [g.get("hyper", {}).get("lr") for g in opt.get("groups", []) if isinstance(g, dict)]
    lrs = [float(x) for x in lrs if isinstance(x, (int, float)) and not isinstance(x, bool)]
    return (("Adam" if opt["name"] == "adam" else "AdamW"), max(lrs)) if lrs else None


def is_placement(plan: Plan) -> bool:
    """A placement plan (`hybrid place`): inference with compute events on the host's cpu stream."""
    return any(e.on_cpu for e in plan.events) or str(plan.planner.get("name", "")).startswith("place-")


@_keeps_callers_rng
def execute_placement(graph: Graph, plan: Plan, module: torch.nn.Module, args: Any, target: Any = None, *,
                      iters: int = 1, device: str = "cpu", check: bool = False, atol: float | None = None,
                      rtol: float | None = None, kwargs: dict | None = None) -> PlacementRun:
    """Run `iters` inferences of a placement plan (the module in eval mode); with `check`, compare the last
    one's outputs with eager inference (executor.check.compare_outputs)."""
    import statistics

    from executor.placed import eager_outputs, run_placed

    module = module.eval()
    res = run_placed(graph, plan, module, args, target, device=device, iters=iters, kwargs=kwargs)
    n_cpu = sum(1 for e in plan.events if e.on_cpu)
    n_dev = sum(1 for e in plan.events if e.kind == "compute" and not e.on_cpu)
    out = None
    if check:
        # The run binds floating values in the graph's dtypes: the reference runs a copy cast as it is, if any
        ref = module
        if captured_casts(graph, module):   # copied only to be cast: a large inference model held once otherwise
            ref = copy.deepcopy(module)
            cast_as_captured(graph, ref)
        ref_args, _, ref_kwargs = batch_as_captured(graph, args, None, kwargs)
        out = compare_outputs(res.outputs, eager_outputs(ref, ref_args, ref_kwargs), device, atol, rtol)
        if not out.ok:
            warnings.warn(out.line(), CheckMismatchWarning, stacklevel=3)
    return PlacementRun(res.wall_s, statistics.median(res.wall_s[1:] or res.wall_s), n_cpu, n_dev, out)
