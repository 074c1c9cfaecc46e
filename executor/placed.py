"""Run a placement plan (an inference split across the host CPU and a GPU, docs/formats.md's `cpu` stream).

Parameters are uploaded once (`resident_at_start`) and kept on both sides. Per inference, the plan's events
are issued in time order: a `cpu` compute runs on the host thread, on host tensors; a `compute` event runs
on the GPU's compute stream; `swap_in` / `swap_out` copy activations on their own streams, each waiting for
the event of what it reads (CUDA events), and a host op waits for the device-to-host copies it reads. GPU
work is issued asynchronously, so host ops run while the GPU computes. Where no GPU exists, the "GPU" side is
the CPU and the same code runs with streams that do nothing: a check against eager inference.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from hybrid.capture.encoding import DecodeContext, decode_value
from hybrid.capture.interpreter import bind
from hybrid.capture.trace import output_tensors, portable_kernels
from hybrid.errors import HybridError
from hybrid.graph import Graph
from hybrid.graph.info import bindings
from hybrid.plan import Plan

from executor.ops import INPLACE, OpRunner


@dataclass
class PlacedResult:
    outputs: list[torch.Tensor]              # the graph's outputs (bindings), on the host
    wall_s: list[float] = field(default_factory=list)   # per inference, host clock, after a final synchronize
    plan_latency_s: float = float("nan")     # what the simulator predicted: beside wall_s for the user


class _Streams:
    """CUDA streams and events, or no-ops on the CPU stand-in."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        if self.cuda:
            self.compute, self.h2d, self.d2h = (torch.cuda.Stream(device) for _ in range(3))

    def on(self, name: str) -> Any:
        from contextlib import nullcontext

        return torch.cuda.stream(getattr(self, name)) if self.cuda else nullcontext()

    def record(self, name: str) -> Any:
        if not self.cuda:
            return None
        ev = torch.cuda.Event()
        ev.record(getattr(self, name))
        return ev

    def wait(self, name: str, ev: Any) -> None:
        if ev is not None:
            getattr(self, name).wait_event(ev)

    def synchronize(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


class PlacedExecutor:
    """A placement plan made runnable: `load` a module and a batch, then `run` inferences."""

    def __init__(self, graph: Graph, plan: Plan, device: str = "cpu", validate: bool = True) -> None:
        if validate:   # exit 1 on an invalid plan, as `hybrid validate`
            from hybrid.validator import require_valid

            require_valid(graph, plan, "the plan")
        if not any(e.kind == "compute" for e in plan.events):
            raise HybridError("plan has no compute events")
        if device == "cuda" and not torch.cuda.is_available():
            raise HybridError("--device cuda: no CUDA device here; use --device cpu (the GPU parts then run on "
                              "the CPU through the same code, a check against eager)")
        self.graph = graph
        self.plan = plan
        self.device = torch.device(device)
        self.streams = _Streams(self.device)
        self.cpu_ops = OpRunner(graph, torch.device("cpu"))
        self.gpu_ops = OpRunner(graph, self.device)
        self.events = sorted(plan.events, key=lambda e: (e.start_s, e.kind == "free", e.end_s))
        self.host: dict[str, torch.Tensor] = {}
        self.resident: dict[str, torch.Tensor] = {}

    def load(self, module: torch.nn.Module, args: Any, target: Any = None, kwargs: dict | None = None) -> None:
        env, _ = bind(self.graph, module, args, target, kwargs, device="cpu")
        pin = self.device.type == "cuda"
        self.host = {k: (v.pin_memory() if pin else v) for k, v in env.items()}
        self.resident = {t: self.host[t].to(self.device, copy=True) for t in self.plan.resident_at_start}
        self.streams.synchronize()

    def _run(self, runner: OpRunner, o: int, env: dict[str, torch.Tensor]) -> None:
        call = runner.calls[o]
        for new, old in call.versions:    # an in-place op on an intermediate (relu_, +=) writes a new version:
            env[new] = env[old].clone()   # it starts as the old one's values, as the pool's copy does
        if call.mode == INPLACE:          # results are its arguments, updated (no tensor of its own)
            runner.run_direct(o, env, 1)
            return
        res = runner.compute(o, env)
        for t, r in zip(call.out_ids, res):
            if t is not None:
                env[t] = r

    def run(self) -> tuple[dict[str, torch.Tensor], float]:
        """One inference; returns the host tensors by id and its wall time."""
        g = self.graph
        s = self.streams
        host = dict(self.host)
        dev: dict[str, torch.Tensor] = dict(self.resident)
        done: dict[str, Any] = {}         # tensor -> CUDA event after which its device copy is complete
        saved: dict[str, Any] = {}        # tensor -> CUDA event after which its host copy is complete
        s.synchronize()
        t0 = time.perf_counter()
        with torch.no_grad(), portable_kernels():
            for ev in self.events:
                if ev.kind == "compute":
                    o = g.op_index[ev.op]
                    op = g.ops[o]
                    if ev.on_cpu:
                        for t in op.inputs:
                            if t in saved and saved[t] is not None:
                                saved.pop(t).synchronize()
                        self._run(self.cpu_ops, o, host)
                    else:
                        for t in op.inputs:
                            s.wait("compute", done.get(t))
                        with s.on("compute"):
                            self._run(self.gpu_ops, o, dev)
                        mark = s.record("compute")
                        for t in op.outputs:
                            done[t] = mark
                elif ev.kind == "swap_in":
                    s.wait("h2d", done.get(ev.tensor))
                    s.wait("h2d", saved.get(ev.tensor))   # a host copy this run made: its d2h copy has ended
                    with s.on("h2d"):
                        dev[ev.tensor] = host[ev.tensor].to(self.device, non_blocking=True, copy=True)
                    done[ev.tensor] = s.record("h2d")
                elif ev.kind == "swap_out":
                    s.wait("d2h", done.get(ev.tensor))
                    with s.on("d2h"):
                        src = dev.pop(ev.tensor)
                        if self.device.type == "cuda":
                            dst = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
                            dst.copy_(src, non_blocking=True)
                            src.record_stream(s.d2h)
                            src.record_stream(s.compute)   # allocated on h2d (a swap-in), read by compute ops
                        else:
                            dst = src.clone()
                        host[ev.tensor] = dst
                    saved[ev.tensor] = s.record("d2h")
                else:  # free: the device copy goes back to the caching allocator once its users are done
                    t = dev.pop(ev.tensor, None)
                    if t is not None and s.cuda:
                        t.record_stream(s.compute)
        s.synchronize()
        return host, time.perf_counter() - t0

    def outputs(self, host: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        refs = list(bindings(self.graph).get("outputs") or [])
        ctx = DecodeContext(host, torch.device("cpu"))
        return [decode_value(r, ctx) for r in refs]


def run_placed(graph: Graph, plan: Plan, module: torch.nn.Module, args: Any, target: Any = None,
               device: str = "cpu", iters: int = 1, kwargs: dict | None = None) -> PlacedResult:
    """Run `iters` inferences of a placement plan; the outputs of the last one, and every wall time."""
    ex = PlacedExecutor(graph, plan, device)
    ex.load(module, args, target, kwargs)
    walls = []
    host: dict[str, torch.Tensor] = {}
    for _ in range(max(1, iters)):
        host, wall = ex.run()
        walls.append(wall)
    return PlacedResult(ex.outputs(host), walls, plan.makespan_s)


def eager_outputs(module: torch.nn.Module, args: Any, kwargs: dict | None = None) -> list[torch.Tensor]:
    """Eager inference under the kernels a replay uses (`portable_kernels`), so a CPU run compares bitwise; its
    tensor outputs in the order the graph binds them (`output_tensors`)."""
    args = args if isinstance(args, tuple) else (args,)
    with torch.no_grad(), portable_kernels():
        return output_tensors(module(*args, **(kwargs or {})))
