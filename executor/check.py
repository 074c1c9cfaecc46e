"""The reference: train the same module eagerly from the same seed and compare with the executor.

Eager steps run as `hybrid.capture.interpreter.eager_step` does (under
`portable_kernels()`, torch.optim with `foreach=False`, the optimizer the graph
was captured with), and iteration `k` seeds torch with `seed + k` right before
its forward, as the executor does before its first node. On CPU the executor
must reproduce eager training bitwise; on CUDA within a tolerance.
"""
from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from hybrid.capture.interpreter import StepResult, eager_step
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.graph.info import binds_loss, bindings, is_inference
from hybrid.units import counted

# iteration -> (forward args, target) or (forward args, target, forward kwargs): without kwargs, the kwargs the
# run was given stay (their tensors, a mask say, are fed again)
Batches = Callable[[int], tuple[Any, ...]]


def unpack_batch(got: Any, kwargs: dict | None) -> tuple[Any, Any, dict | None]:
    """A `Batches` callable's (args, target[, kwargs]), with `kwargs` where it gives none."""
    if not isinstance(got, (tuple, list)) or len(got) not in (2, 3) or \
            (len(got) == 3 and not isinstance(got[2], dict)):
        what = f"a {type(got).__name__} of {len(got)}" if isinstance(got, (tuple, list)) else type(got).__name__
        raise HybridError(f"batches(k) returned {what}; return (args, target) or (args, target, kwargs) with "
                          "kwargs a dict")
    return got[0], got[1], (got[2] if len(got) == 3 else kwargs)


def iteration_seed(seed: int, iteration: int) -> int:
    return int(seed) + int(iteration)


def torch_optimizer(graph: Graph, module: torch.nn.Module) -> torch.optim.Optimizer | None:
    """The torch.optim optimizer (single-tensor path) matching the graph's optimizer ops, for `module`."""
    b = bindings(graph)
    spec = b.get("optimizer")
    if not spec:
        return None
    classes = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
    if spec["name"] not in classes:
        raise HybridError(f"graph uses optimizer {spec['name']!r}; the eager reference knows {', '.join(classes)}")
    named = dict(module.named_parameters())
    groups = []
    for grp in spec["groups"]:
        hyper = {k: (tuple(v) if k == "betas" else v) for k, v in grp["hyper"].items()}
        params = [named[n] for n in grp["params"] if n in named]
        if params:
            groups.append({"params": params, **hyper})
    return classes[spec["name"]](groups, foreach=False)


@dataclass
class EagerRun:
    losses: list[torch.Tensor]
    final: StepResult
    outputs: list[list[torch.Tensor | None]] = field(default_factory=list)   # per iteration, a forward-only graph's


def train_eager(graph: Graph, module: torch.nn.Module, args: Any, target: Any, loss_fn: Any, iters: int,
                seed: int = 0, kwargs: dict | None = None, batches: Batches | None = None) -> EagerRun:
    """`iters` eager training steps of `module` (modified in place; pass a copy); for a forward-only graph,
    `iters` eager forward passes (`infer_eager`)."""
    if is_inference(graph):   # its check compares eager forward passes' outputs and buffers
        return infer_eager(graph, module, args, target, loss_fn, iters, seed, kwargs, batches)
    opt = torch_optimizer(graph, module)
    losses: list[torch.Tensor] = []
    res: StepResult | None = None
    for k in range(iters):
        a, t, kw = unpack_batch(batches(k), kwargs) if batches is not None else (args, target, kwargs)
        res = eager_step(module, a, t, loss_fn, kw, opt, seed=iteration_seed(seed, k))
        losses.append(res.loss.detach().clone())
    if res is None:
        raise HybridError("iterations must be at least 1")
    return EagerRun(losses, res)


def infer_eager(graph: Graph, module: torch.nn.Module, args: Any, target: Any, loss_fn: Any, iters: int,
                seed: int = 0, kwargs: dict | None = None, batches: Batches | None = None) -> EagerRun:
    """`iters` eager forward passes of `module` in its own mode, without gradients, as an inference graph was
    captured: iteration k seeds torch with seed + k (dropout in train mode); batch norm in train mode updates
    the running statistics in place (pass a copy). The outputs are the forward's tensor leaves in order, as
    the graph's bindings list them; a loss only where the graph has one."""
    from hybrid.capture.trace import output_tensors, portable_kernels

    has_loss = binds_loss(graph)
    if has_loss and loss_fn is None:   # an inference graph captured with its loss (before the forward alone)
        raise HybridError("the graph computes a loss but no loss_fn was given: pass loss_fn=... as captured")
    losses: list[torch.Tensor] = []
    outputs: list[list[torch.Tensor | None]] = []
    for k in range(iters):
        a, t, kw = unpack_batch(batches(k), kwargs) if batches is not None else (args, target, kwargs)
        a = a if isinstance(a, tuple) else (a,)
        torch.manual_seed(iteration_seed(seed, k))
        with torch.no_grad(), portable_kernels():
            out = module(*a, **(kw or {}))
            if has_loss:
                losses.append((loss_fn(out) if t is None else loss_fn(out, t)).detach().clone())
        outputs.append([o.detach().clone() for o in output_tensors(out)])
    if not outputs:
        raise HybridError("iterations must be at least 1")
    final = StepResult(losses[-1] if losses else None, {}, {n: p.detach() for n, p in module.named_parameters()},
                       {n: b for n, b in module.named_buffers()}, {}, outputs[-1])
    return EagerRun(losses, final, outputs)


@dataclass
class Comparison:
    """Executor vs eager: every loss, parameter, buffer and optimizer state (and gradient when kept)."""

    values: int
    max_abs_diff: float
    worst: str
    mismatched: list[str] = field(default_factory=list)    # not bitwise equal
    beyond_tolerance: list[str] = field(default_factory=list)
    atol: float = 0.0
    rtol: float = 0.0
    notes: list[str] = field(default_factory=list)
    inference: bool = False     # a forward-only graph: outputs and buffers against eager forward passes
    losses: int = 0             # losses compared (an inference graph has one only if captured with its loss)
    # names present on one side only (a module with a parameter the graph does not bind): no value to compare,
    # a failed check all the same; not in `mismatched` (values that differ), nor in `values`'s compared pairs
    only_eager: list[str] = field(default_factory=list)
    only_run: list[str] = field(default_factory=list)

    @property
    def one_sided(self) -> list[str]:
        return self.only_eager + self.only_run

    @property
    def both_sides(self) -> int:
        """Values present on both sides, compared."""
        return self.values - len(self.one_sided)

    @property
    def compared(self) -> str:
        """What the values are, for a report line."""
        return (f"{'losses, ' if self.losses else ''}outputs, parameters, buffers" if self.inference
                else "losses, parameters, buffers, optimizer state")

    @property
    def bitwise(self) -> bool:
        return not self.mismatched and not self.one_sided

    @property
    def ok(self) -> bool:
        return not self.beyond_tolerance and not self.one_sided

    def line(self) -> str:
        """The verdict in one line (`hybrid execute --check` prints it; `execute` warns with it on a mismatch):
        values present on one side only (a parameter the graph does not bind) are named as such, not counted
        as values that differ."""
        if self.bitwise:
            one = self.values == 1
            return (f"check: {counted(self.values, 'value')} ({self.compared}) equal{'s' if one else ''} eager "
                    f"{'inference' if self.inference else 'training'} bitwise")
        verdict = "within tolerance" if self.ok else "MISMATCH"
        parts = []
        if self.one_sided:
            sides = [f"{', '.join(names[:3])}{f' and {len(names) - 3} more' if len(names) > 3 else ''} only in "
                     f"{where}" for names, where in ((self.only_eager, "eager's"), (self.only_run, "the run's"))
                     if names]
            parts.append(f"{counted(len(self.one_sided), 'value')} on one side only ({'; '.join(sides)})")
        both = self.both_sides
        if self.mismatched:
            parts.append(f"largest difference {self.max_abs_diff:.3g} ({self.worst}); {len(self.mismatched)} of "
                         f"{counted(both, 'value')}{' on both sides' if self.one_sided else ''} "
                         f"differ{'s' if len(self.mismatched) == 1 and both == 1 else ''}")
        else:
            parts.append(f"the {counted(both, 'value')} on both sides equal{'s' if both == 1 else ''} bitwise")
        return f"check: {'; '.join(parts)}; atol {self.atol:g}, rtol {self.rtol:g}: {verdict}"

    def to_json(self) -> dict[str, Any]:
        return {"values": self.values, "max_abs_diff": self.max_abs_diff, "worst": self.worst,
                "bitwise": self.bitwise, "ok": self.ok, "atol": self.atol, "rtol": self.rtol,
                "mismatched": self.mismatched[:50], "beyond_tolerance": self.beyond_tolerance[:50],
                "only_eager": self.only_eager[:50], "only_run": self.only_run[:50],
                "notes": list(self.notes), "inference": self.inference}


def _pairs(losses: list[torch.Tensor | float], final: StepResult, eager: EagerRun,
           grads: bool, outputs: list[list[torch.Tensor | None]] | None = None) -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    for k, (a, b) in enumerate(zip(losses, eager.losses)):
        out.append((f"loss[{k}]", a, b))
    for k, (mine_k, ref_k) in enumerate(zip(outputs or [], eager.outputs)):
        for i in range(max(len(mine_k), len(ref_k))):
            out.append((f"outputs[{k}][{i}]", mine_k[i] if i < len(mine_k) else None,
                        ref_k[i] if i < len(ref_k) else None))
    ref = eager.final

    def both(name: str, mine: dict[str, Any], theirs: dict[str, Any]) -> None:
        """Every key of either side, the eager reference's order first: a key on one side only pairs with None."""
        for n, v in theirs.items():
            out.append((f"{name}[{n}]", mine.get(n), v))
        for n, v in mine.items():
            if n not in theirs:
                out.append((f"{name}[{n}]", v, None))

    for group in ("params", "buffers"):
        both(group, getattr(final, group), getattr(ref, group))
    for n in list(ref.state) + [n for n in final.state if n not in ref.state]:
        both(f"state[{n}]", final.state.get(n, {}), ref.state.get(n, {}))
    if grads:
        both("grads", final.grads, ref.grads)
    return out


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (`torch.equal` calls two NaNs of the same bits different: fp16 Adam's 0/0 then reads as
    a mismatch where executor and eager agree bit for bit)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not (a.is_floating_point() or a.is_complex()):
        return torch.equal(a, b)
    return torch.equal(a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8))


def compare(losses: list[torch.Tensor | float], final: StepResult, eager: EagerRun, atol: float = 0.0,
            rtol: float = 0.0, grads: bool = False,
            outputs: list[list[torch.Tensor | None]] | None = None) -> Comparison:
    """`outputs`: a forward-only run's outputs per iteration, compared with `eager.outputs` (the iterations
    both have: the executor may keep the last only)."""
    worst, worst_name = 0.0, ""
    mismatched: list[str] = []
    beyond: list[str] = []
    only_eager: list[str] = []
    only_run: list[str] = []
    if outputs is not None and len(outputs) < len(eager.outputs):   # the last iterations
        eager = EagerRun(eager.losses, eager.final, eager.outputs[len(eager.outputs) - len(outputs):])
    pairs = _pairs(losses, final, eager, grads, outputs)
    if len(losses) != len(eager.losses):
        mismatched.append("losses (count)")
        beyond.append("losses (count)")
    for name, a, b in pairs:
        if a is None or b is None:      # present on one side only: no value to compare
            if b is not None:
                only_eager.append(name)
            elif a is not None:
                only_run.append(name)
            continue
        a = torch.as_tensor(a).detach().to("cpu")
        b = torch.as_tensor(b).detach().to("cpu")
        if a.shape != b.shape or a.dtype != b.dtype:
            mismatched.append(name)
            beyond.append(name)
            continue
        if same_bits(a, b):
            continue
        mismatched.append(name)
        if a.is_floating_point() or a.is_complex():
            nan_a, nan_b = torch.isnan(a), torch.isnan(b)
            if not torch.equal(nan_a, nan_b):
                d = float("inf")
            else:       # NaN where both have it (payloads apart) is no difference of value
                diff = (a.double() - b.double()).abs()[~nan_a]
                d = float(diff.max()) if diff.numel() else 0.0
                d = float("inf") if math.isnan(d) else d
        else:
            d = float((a.long() - b.long()).abs().max())
        if d > worst:
            worst, worst_name = d, name
        if not torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol, equal_nan=True):
            beyond.append(name)
    return Comparison(len(pairs), worst, worst_name, mismatched, beyond, atol, rtol, inference=outputs is not None,
                      losses=len(losses), only_eager=only_eager, only_run=only_run)


@contextlib.contextmanager
def exact_kernels() -> Iterator[None]:
    """float32 products and convolutions on CUDA (no TF32), deterministic kernels (cuDNN's, and torch's
    deterministic algorithms where it has them): a run that can be compared value for value with another."""
    import os

    mm = torch.backends.cuda.matmul.allow_tf32
    det, det_warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    # cuBLAS reads this when it makes its workspace; a process that has run cuBLAS already keeps its own.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)   # no atomics-based backward kernels where avoidable
    try:
        with torch.backends.cudnn.flags(enabled=True, benchmark=False, deterministic=True, allow_tf32=False):
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = mm
        torch.use_deterministic_algorithms(det, warn_only=det_warn)


def against_unlimited(graph: Graph, plan: Any, module: torch.nn.Module, args: Any, target: Any, iters: int,
                      device: str, seed: int = 0, cuda_graph: bool = False, atol: float = 1e-5,
                      rtol: float = 1e-4) -> Comparison:
    """`plan` against the graph run with no memory limit (the ideal plan: no copies, no recomputation, no
    reuse pressure), both by this executor on `device` from the same seed.

    On a GPU the graph's recorded aten kernels differ from eager PyTorch's
    module kernels (native against cuDNN batch norm, say), which
    ill-conditioned layers amplify; this reference runs the same kernels, so
    with deterministic ones any difference is the plan's copies, streams or
    pool, and none is expected.
    """
    from dataclasses import replace

    from executor.api import Executor
    from hybrid.graph.info import unswapped_peak
    from hybrid.swap.baselines import run_baseline

    peak = unswapped_peak(graph)
    ideal = run_baseline(graph, replace(plan.device, memory_bytes=int(peak * 1.05) + (1 << 20)), "ideal")
    runs = []
    for p in (ideal, plan):   # both recorded as CUDA graphs or neither: graphed Adam rounds differently
        ex = Executor(graph, p, device, validate=False, cuda_graph=cuda_graph)
        ex.load(copy.deepcopy(module), args, target)
        ex.run(iters, seed=seed)
        runs.append((ex.losses, ex.state()))
        del ex
    (ref_losses, ref_state), (losses, state) = runs
    return compare(losses, state, EagerRun(ref_losses, ref_state), atol=atol, rtol=rtol)


@dataclass
class OutputCheck:
    """An inference's outputs against eager inference's (a placement plan's check)."""

    ok: bool
    max_abs_diff: float
    atol: float
    rtol: float

    @property
    def bitwise(self) -> bool:
        return self.ok and self.max_abs_diff == 0

    def line(self) -> str:
        """The verdict in one line (`hybrid execute --check` prints it; `execute_placement` warns with it)."""
        verdict = "equal eager inference bitwise" if self.bitwise else "within tolerance" if self.ok else "MISMATCH"
        return f"check: outputs {verdict} (largest difference {self.max_abs_diff:.3g})"

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "max_abs_diff": self.max_abs_diff}


def compare_outputs(outputs: list[torch.Tensor], reference: list[torch.Tensor], device: str,
                    atol: float | None = None, rtol: float | None = None) -> OutputCheck:
    """Outputs against the reference: bitwise on cpu (atol = rtol = 0 by default), within atol=1e-5, rtol=1e-4
    elsewhere."""
    a = (0.0 if device == "cpu" else 1e-5) if atol is None else atol
    r = (0.0 if device == "cpu" else 1e-4) if rtol is None else rtol
    diff = max((float((o.float() - e.float()).abs().max()) for o, e in zip(outputs, reference)), default=0.0)
    ok = all(torch.allclose(o, e, atol=a, rtol=r, equal_nan=True) if (a or r) else same_bits(o, e)
             for o, e in zip(outputs, reference))
    return OutputCheck(ok, diff, a, r)
