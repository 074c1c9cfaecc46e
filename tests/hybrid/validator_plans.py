"""Tiny graphs and obviously-valid plans for the validator's tests (no planner involved).

`serial_plan` runs everything one event at a time on one clock: swap in what an
op lacks, run it, then release what no later op reads (persistent tensors that
an op updated are swapped out, resident ones stay). Nothing overlaps, so the
plan is valid whatever the graph; tests corrupt it one detail at a time.
"""
from __future__ import annotations

import random
from dataclasses import replace
from typing import Iterable

from hybrid.device import Device
from hybrid.graph import Graph, Impl, Op, Tensor
from hybrid.graph.arrays import dependency_edges
from hybrid.plan import (ArenaAllocation, Event, Plan, SizeClass, SizeClassAllocation,
                         UnconstrainedAllocation)

# Byte counts in these hand-written plans are exact: alignment 1, so rule 5 sums them as written.
DEVICE = Device("test", memory_bytes=1 << 30, h2d_bytes_per_s=1e9, d2h_bytes_per_s=1e9, transfer_latency_s=0.0,
                alignment_bytes=1)


def topo_order(g: Graph) -> list[int]:
    """Kahn's algorithm, smallest op index first (deterministic)."""
    import heapq

    succ: list[list[int]] = [[] for _ in g.ops]
    indeg = [0] * len(g.ops)
    for a, b, _ in set(dependency_edges(g)):
        succ[a].append(b)
        indeg[b] += 1
    heap = [i for i, d in enumerate(indeg) if d == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(heap, j)
    return order


def serial_plan(g: Graph, device: Device = DEVICE, resident: Iterable[str] = (), allocation: str = "unconstrained",
                impl_choice: dict[str, str] | None = None) -> Plan:
    resident = list(resident)
    order = topo_order(g)
    pos = {o: k for k, o in enumerate(order)}
    last_use: dict[str, int] = {}
    for o in order:
        for t in g.ops[o].inputs:
            last_use[t] = pos[o]
    updated: set[str] = set()
    on_device = set(resident)
    events: list[Event] = []
    now = 0.0
    ideal = 0.0
    for k, o in enumerate(order):
        op = g.ops[o]
        for t in dict.fromkeys(op.inputs):
            if t not in on_device:
                d = device.h2d_time(g.tensor(t).bytes)
                events.append(Event("swap_in", now, now + d, tensor=t))
                now += d
                on_device.add(t)
        impl = None
        im_time = op.time_s
        if op.impls:
            name = (impl_choice or {}).get(op.id)
            im = next(x for x in op.impls if x.name == name) if name else op.impls[op.default_impl]
            impl, im_time = im.name, im.time_s
        events.append(Event("compute", now, now + im_time, op=op.id, impl=impl))
        now += im_time
        ideal += im_time
        on_device.update(op.outputs)
        updated.update(op.updates)
        for t in list(dict.fromkeys(op.inputs)) + list(op.outputs):
            if last_use.get(t, -1) > k:
                continue
            tensor = g.tensor(t)
            if tensor.persistent and t in resident:
                continue
            if tensor.persistent and t in updated:
                d = device.d2h_time(tensor.bytes)
                events.append(Event("swap_out", now, now + d, tensor=t))
                now += d
            else:
                events.append(Event("free", now, now, tensor=t))
            on_device.discard(t)
    alloc = _allocation(g, allocation, {e.tensor for e in events if e.tensor} | set(resident)
                        | {t for o in g.ops for t in o.outputs})
    return Plan(graph=g.name, graph_sha256="", device=device, planner={"name": "serial-test"},
                schedule=[g.ops[o].id for o in order], allocation=alloc, resident_at_start=resident,
                events=events, makespan_s=now, metrics={"ideal_s": ideal})


def _allocation(g: Graph, kind: str, on_device: set[str]):
    """One object (or one arena slot) per tensor: never shared, so always valid if memory is large."""
    names = [t.id for t in g.tensors if t.id in on_device]
    if kind == "size_classes":
        return SizeClassAllocation(tuple(SizeClass(g.tensor(t).bytes, 1) for t in names),
                                   {t: k for k, t in enumerate(names)})
    if kind == "arena":
        offsets, at = {}, 0
        for t in names:
            offsets[t] = at
            at += g.tensor(t).bytes
        return ArenaAllocation(at, offsets)
    return UnconstrainedAllocation()


def mlp_graph() -> Graph:
    """x -> fc1 -> a1 -> fc2 -> y; a backward pass and an SGD step updating w1 in place."""
    tensors = [
        Tensor("x", 1000, "input", True), Tensor("w1", 2000, "param", True), Tensor("w2", 2000, "param", True),
        Tensor("a1", 4000), Tensor("y", 1000), Tensor("g1", 2000, "gradient"),
    ]
    ops = [
        Op("fc1", "matmul", ("x", "w1"), ("a1",), 1e-3, 0,
           (Impl("gemm", 1e-3, 0), Impl("gemm_ws", 5e-4, 3000))),
        Op("fc2", "matmul", ("a1", "w2"), ("y",), 2e-3, 500),
        Op("bwd", "matmul_grad", ("y", "a1", "x"), ("g1",), 3e-3, 0),
        Op("sgd", "sgd", ("w1", "g1"), (), 1e-4, 0, updates=("w1",)),
    ]
    return Graph("mlp", tensors, ops)


def random_graph(rng: random.Random, n_ops: int) -> Graph:
    """A random DAG in program order: params (some updated by later 'optimizer' ops), activations, impls."""
    n_params = rng.randint(1, 4)
    tensors = [Tensor(f"p{k}", rng.choice([0, 64, 1000, 4096]), "param", True) for k in range(n_params)]
    ops: list[Op] = []
    made: list[str] = []
    for k in range(n_ops):
        pool = [t.id for t in tensors if t.persistent] + made
        inputs = tuple(dict.fromkeys(rng.sample(pool, rng.randint(1, min(3, len(pool))))))
        outputs = tuple(f"t{k}_{j}" for j in range(rng.randint(0 if k == n_ops - 1 else 1, 2)))
        for t in outputs:
            tensors.append(Tensor(t, rng.choice([0, 8, 512, 3000]), "activation", False))
        made.extend(outputs)
        persistent_in = [t for t in inputs if t.startswith("p")]
        updates = (rng.choice(persistent_in),) if persistent_in and rng.random() < 0.2 else ()
        time_s = rng.choice([0.0, 1e-4, 2.5e-3, 0.01])
        impls: tuple[Impl, ...] = ()
        if rng.random() < 0.3:
            impls = (Impl("a", time_s, 0), Impl("b", time_s / 2, 256))
        ops.append(Op(f"op{k}", "x", inputs, outputs, time_s, 0 if impls else rng.choice([0, 0, 128]),
                      impls, updates))
    return Graph(f"random{n_ops}", tensors, ops)


def with_events(plan: Plan, events: list[Event], **changes) -> Plan:
    """A copy of `plan` with other events (makespan/metrics kept unless given)."""
    return replace(plan, events=list(events), **changes)
