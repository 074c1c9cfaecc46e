"""Synthetic graphs with the shape of training iterations, for tests and benchmarks.

`training_graph` mimics a layered network's forward pass, the mirrored
backward pass and an SGD step (parameters updated in place), optionally with
skip connections and parameters shared across layers (as unrolled RNNs do).
`random_dag` is a less structured DAG for property tests.
"""
from __future__ import annotations

import numpy as np

from hybrid.device import Device
from hybrid.graph import Graph, Impl, Op, Tensor


def training_graph(
    n_layers: int,
    seed: int = 0,
    act_sizes: tuple[int, ...] = (1 << 20, 2 << 20, 4 << 20),
    param_sizes: tuple[int, ...] = (1 << 19, 1 << 20),
    skip_prob: float = 0.2,
    share_params: int = 0,
    workspace_prob: float = 0.0,
    impls_prob: float = 0.0,
    device: Device | None = None,
    time_per_mb: float = 1e-4,
    name: str | None = None,
) -> Graph:
    """About 3 ops per layer: forward, backward, update (fewer updates when parameters are shared)."""
    rng = np.random.default_rng(seed)
    tensors: list[Tensor] = []
    ops: list[Op] = []
    n_params = n_layers if share_params <= 0 else min(share_params, n_layers)
    for i in range(n_params):
        tensors.append(Tensor(f"w{i}", int(rng.choice(param_sizes)), "param", True))
    tensors.append(Tensor("x", int(act_sizes[0]), "input", True))
    size_of = {t.id: t.bytes for t in tensors}

    def op(oid: str, kind: str, ins: list[str], outs: list[Tensor], work: float, updates: tuple[str, ...] = ()) -> None:
        t = work * (0.5 + rng.random())
        ws = int(rng.choice(act_sizes)) if rng.random() < workspace_prob else 0
        impls: tuple[Impl, ...] = ()
        if rng.random() < impls_prob:
            impls = (Impl("fast", t * 0.6, ws + int(act_sizes[-1])), Impl("lean", t, ws))
        for o in outs:
            tensors.append(o)
            size_of[o.id] = o.bytes
        ops.append(Op(oid, kind, tuple(ins), tuple(o.id for o in outs), t, ws, impls, updates))

    acts = ["x"]
    for i in range(n_layers):
        w = f"w{i % n_params}"
        ins = [acts[-1], w]
        if len(acts) > 2 and rng.random() < skip_prob:
            ins.append(acts[int(rng.integers(0, len(acts) - 2))])
        out = Tensor(f"a{i}", int(rng.choice(act_sizes)), "activation")
        op(f"fwd{i}", "forward", ins, [out], time_per_mb * (out.bytes + size_of[w]) / (1 << 20))
        acts.append(out.id)
    op("loss", "loss", [acts[-1]], [Tensor("g_out", size_of[acts[-1]], "gradient")], time_per_mb)
    grad = "g_out"
    for i in reversed(range(n_layers)):
        w = f"w{i % n_params}"
        gin = Tensor(f"g{i}", size_of[acts[i]], "gradient")
        gw = Tensor(f"gw{i}", size_of[w], "gradient")
        op(f"bwd{i}", "backward", [grad, acts[i], w], [gin, gw], 2 * time_per_mb * (gin.bytes + gw.bytes) / (1 << 20))
        grad = gin.id
    # SGD step: one update per parameter, summing the gradients of layers that share it.
    for j in range(n_params):
        gws = [f"gw{i}" for i in range(n_layers) if i % n_params == j]
        op(f"sgd{j}", "optimizer", [f"w{j}", *gws], [], time_per_mb * size_of[f"w{j}"] / (1 << 20), updates=(f"w{j}",))
    dev = device or Device("synthetic", 64 << 20, 12e9, 12e9, 0.0)
    return Graph(name or f"synthetic-{n_layers}-{seed}", tensors, ops, dev)


def random_dag(n_ops: int, seed: int = 0, n_sizes: int = 4, max_inputs: int = 3, n_params: int = 4,
               update_prob: float = 0.3, workspace_prob: float = 0.2, impls_prob: float = 0.2,
               zero_size_prob: float = 0.05, device: Device | None = None) -> Graph:
    """A random DAG: each op reads up to `max_inputs` earlier tensors (biased to recent ones) and parameters."""
    rng = np.random.default_rng(seed)
    sizes = [int(s) for s in rng.integers(1, 64, size=n_sizes) * 1024]
    tensors = [Tensor(f"p{i}", int(rng.choice(sizes)), "param", True) for i in range(n_params)]
    ops: list[Op] = []
    produced: list[str] = []
    updated: set[str] = set()
    for i in range(n_ops):
        ins: list[str] = []
        k = int(rng.integers(0, max_inputs + 1))
        for _ in range(k):
            if produced and rng.random() < 0.8:
                back = min(len(produced), int(rng.geometric(0.3)))
                ins.append(produced[-back])
            elif n_params:
                ins.append(f"p{int(rng.integers(n_params))}")
        ins = list(dict.fromkeys(ins))
        params_in = [t for t in ins if t.startswith("p")]
        upd: tuple[str, ...] = ()
        if params_in and rng.random() < update_prob:
            upd = (params_in[0],)
            updated.add(params_in[0])
        n_out = int(rng.integers(0 if upd else 1, 3))
        outs = []
        for j in range(n_out):
            b = 0 if rng.random() < zero_size_prob else int(rng.choice(sizes))
            outs.append(Tensor(f"t{i}_{j}", b, "activation"))
        tensors.extend(outs)
        produced.extend(o.id for o in outs)
        t = float(rng.uniform(0.5, 2.0)) * 1e-3
        ws = int(rng.choice(sizes)) if rng.random() < workspace_prob else 0
        impls: tuple[Impl, ...] = ()
        if rng.random() < impls_prob:
            impls = (Impl("a", t, ws), Impl("b", t * 0.7, ws + int(rng.choice(sizes))))
        ops.append(Op(f"op{i}", "random", tuple(ins), tuple(o.id for o in outs), t, ws, impls, upd))
    dev = device or Device("synthetic", 1 << 20, 1e9, 1e9, 0.0)
    return Graph(f"random-{n_ops}-{seed}", tensors, ops, dev)
