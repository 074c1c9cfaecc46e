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


# Per transformer layer and sequence piece: 10 forward ops, 10 backward ops; per layer 12 parameter tensors, each
# with a gradient reduction over the pieces and its own optimizer step.
_LAYER_PARAMS = ("ln1_g", "ln1_b", "w_qkv", "b_qkv", "w_o", "b_o", "ln2_g", "ln2_b", "w_fc1", "b_fc1", "w_fc2", "b_fc2")


def transformer_ops(n_layers: int, pieces: int) -> int:
    """How many ops `transformer_training_graph(n_layers, pieces)` has (a reduction per parameter only with
    several pieces)."""
    per_param = 2 if pieces > 1 else 1
    return n_layers * (20 * pieces + per_param * len(_LAYER_PARAMS)) + 3 * pieces + 2


def transformer_training_graph(n_layers: int, pieces: int = 4, seed: int = 0, hidden: int = 1024,
                               tokens_per_piece: int = 512, heads: int = 16, flops: float = 100e12,
                               bytes_per_s: float = 1e12, device: Device | None = None,
                               memory_fraction: float = 0.5, name: str | None = None) -> Graph:
    """One training iteration of a pre-norm transformer (today's large models at scale, 10^5 ops at ~1,000
    layers), deterministic given `seed`:

    - the sequence split into `pieces` (sequence parallelism): every layer runs per piece, and a piece's
      attention reads the keys and values of every earlier piece (causal), so pieces are not independent;
    - the backward pass mirrors it, each piece making its own partial weight gradients, reduced per
      parameter tensor once the layer's backward is done (as gradient bucketing does);
    - per-tensor optimizer steps (Adam): each of the 12 parameter tensors of a layer is updated in place by its
      own op, with its two persistent fp32 moments, right after its gradient exists.

    bf16 activations and parameters; times from FLOPs (matmuls, attention) or bytes touched (the rest), each
    jittered by up to 10% by the seeded generator. Without `device`: an H100-like link (25 GB/s each way) and
    memory `memory_fraction` of the program order's unswapped peak, so that plans must swap."""
    rng = np.random.default_rng(seed)
    h, s = hidden, tokens_per_piece
    act = 2 * s * h
    tensors: list[Tensor] = []
    ops: list[Op] = []
    size: dict[str, int] = {}

    def tensor(tid: str, nbytes: int, kind: str = "activation", persistent: bool = False) -> str:
        tensors.append(Tensor(tid, int(nbytes), kind, persistent))
        size[tid] = int(nbytes)
        return tid

    def op(oid: str, kind: str, ins: list[str], outs: list[tuple[str, int, str]], flop: float = 0.0,
           updates: tuple[str, ...] = ()) -> list[str]:
        made = [tensor(t, b, k) for t, b, k in outs]
        touched = sum(size[t] for t in ins) + sum(size[t] for t in made)
        t = max(flop / flops, touched / bytes_per_s) * (0.9 + 0.2 * rng.random())
        ops.append(Op(oid, kind, tuple(dict.fromkeys(ins)), tuple(made), float(t), 0, (), updates))
        return made

    shapes = {"ln1_g": h, "ln1_b": h, "w_qkv": 3 * h * h, "b_qkv": 3 * h, "w_o": h * h, "b_o": h, "ln2_g": h,
              "ln2_b": h, "w_fc1": 4 * h * h, "b_fc1": 4 * h, "w_fc2": 4 * h * h, "b_fc2": h}
    for l_ in range(n_layers):
        for p in _LAYER_PARAMS:
            tensor(f"L{l_}.{p}", 2 * shapes[p], "param", True)
            tensor(f"L{l_}.{p}.m", 4 * shapes[p], "optimizer_state", True)
            tensor(f"L{l_}.{p}.v", 4 * shapes[p], "optimizer_state", True)
    emb = tensor("embedding", 2 * 32000 * h, "param", True)
    hs = []
    for p in range(pieces):
        tok = tensor(f"tokens.{p}", 4 * s, "input", True)
        hs.append(op(f"embed.{p}", "embedding", [tok, emb], [(f"h0.{p}", act, "activation")])[0])
    saved: list[list[dict[str, str]]] = []
    for l_ in range(n_layers):
        P = {p: f"L{l_}.{p}" for p in _LAYER_PARAMS}
        layer: list[dict[str, str]] = []
        for p in range(pieces):
            x, pre = hs[p], f"L{l_}.{p}"
            n1, = op(f"{pre}.ln1", "layernorm", [x, P["ln1_g"], P["ln1_b"]], [(f"{pre}.n1", act, "activation")])
            qkv, = op(f"{pre}.qkv", "matmul", [n1, P["w_qkv"], P["b_qkv"]], [(f"{pre}.qkv", 3 * act, "activation")],
                      2 * s * h * 3 * h)
            earlier = [layer[q]["qkv"] for q in range(p)]
            ctx, lse = op(f"{pre}.attn", "attention", [qkv, *earlier],
                          [(f"{pre}.ctx", act, "activation"), (f"{pre}.lse", 4 * s * heads, "activation")],
                          4 * s * s * (p + 1) * h)
            o, = op(f"{pre}.proj", "matmul", [ctx, P["w_o"], P["b_o"]], [(f"{pre}.o", act, "activation")],
                    2 * s * h * h)
            r1, = op(f"{pre}.add1", "add", [x, o], [(f"{pre}.r1", act, "activation")])
            n2, = op(f"{pre}.ln2", "layernorm", [r1, P["ln2_g"], P["ln2_b"]], [(f"{pre}.n2", act, "activation")])
            u, = op(f"{pre}.fc1", "matmul", [n2, P["w_fc1"], P["b_fc1"]], [(f"{pre}.u", 4 * act, "activation")],
                    2 * s * h * 4 * h)
            g, = op(f"{pre}.gelu", "gelu", [u], [(f"{pre}.g", 4 * act, "activation")])
            m, = op(f"{pre}.fc2", "matmul", [g, P["w_fc2"], P["b_fc2"]], [(f"{pre}.m", act, "activation")],
                    2 * s * h * 4 * h)
            y, = op(f"{pre}.add2", "add", [r1, m], [(f"h{l_ + 1}.{p}", act, "activation")])
            layer.append({"x": x, "n1": n1, "qkv": qkv, "ctx": ctx, "lse": lse, "r1": r1, "n2": n2, "u": u, "g": g})
            hs[p] = y
        saved.append(layer)
    grads = []
    for p in range(pieces):
        grads.append(op(f"loss.{p}", "loss", [hs[p], emb], [(f"dh{n_layers}.{p}", act, "gradient")],
                        2 * s * h * 32000)[0])
    for l_ in reversed(range(n_layers)):
        P = {p: f"L{l_}.{p}" for p in _LAYER_PARAMS}
        part: dict[str, list[str]] = {p: [] for p in _LAYER_PARAMS}
        d_qkv, d_kv, d_r1 = [], [], []
        for p in range(pieces):
            sv, pre, dy = saved[l_][p], f"L{l_}.{p}", grads[p]

            def bwd(name: str, ins: list[str], dx: tuple[str, int], params: tuple[str, ...], flop: float = 0.0
                    ) -> str:
                outs = [(f"{pre}.d{dx[0]}", dx[1], "gradient")]
                outs += [(f"{pre}.d{q}", size[P[q]], "gradient") for q in params]
                made = op(f"{pre}.{name}_bwd", "backward", ins, outs, flop)
                for q, t in zip(params, made[1:]):
                    part[q].append(t)
                return made[0]

            dg = bwd("fc2", [dy, sv["g"], P["w_fc2"]], ("g", 4 * act), ("w_fc2", "b_fc2"), 4 * s * h * 4 * h)
            du = bwd("gelu", [dg, sv["u"]], ("u", 4 * act), ())
            dn2 = bwd("fc1", [du, sv["n2"], P["w_fc1"]], ("n2", act), ("w_fc1", "b_fc1"), 4 * s * h * 4 * h)
            dr1a = bwd("ln2", [dn2, sv["r1"], P["ln2_g"]], ("r1a", act), ("ln2_g", "ln2_b"))
            dr1 = bwd("add2", [dr1a, dy], ("r1", act), ())
            dctx = bwd("proj", [dr1, sv["ctx"], P["w_o"]], ("ctx", act), ("w_o", "b_o"), 4 * s * h * h)
            earlier = [saved[l_][q]["qkv"] for q in range(p)]
            made = op(f"{pre}.attn_bwd", "backward", [dctx, sv["qkv"], sv["ctx"], sv["lse"], *earlier],
                      [(f"{pre}.dqkv", 3 * act, "gradient"), (f"{pre}.dkv", 2 * act * max(p, 1), "gradient")],
                      8 * s * s * (p + 1) * h)
            d_qkv.append(made[0])
            d_kv.append(made[1])
            d_r1.append(dr1)
        for p in range(pieces):
            sv, pre = saved[l_][p], f"L{l_}.{p}"
            later = d_kv[p + 1:]  # later pieces' attention sent key/value gradients back to this piece
            outs = [(f"{pre}.dn1", act, "gradient"), (f"{pre}.dw_qkv", size[P["w_qkv"]], "gradient"),
                    (f"{pre}.db_qkv", size[P["b_qkv"]], "gradient")]
            dn1, dwq, dbq = op(f"{pre}.qkv_bwd", "backward", [d_qkv[p], *later, sv["n1"], P["w_qkv"]], outs,
                               4 * s * h * 3 * h)
            part["w_qkv"].append(dwq)
            part["b_qkv"].append(dbq)
            outs = [(f"{pre}.dx1", act, "gradient"), (f"{pre}.dln1_g", size[P["ln1_g"]], "gradient"),
                    (f"{pre}.dln1_b", size[P["ln1_b"]], "gradient")]
            dx1, dg1, db1 = op(f"{pre}.ln1_bwd", "backward", [dn1, sv["x"], P["ln1_g"]], outs)
            part["ln1_g"].append(dg1)
            part["ln1_b"].append(db1)
            grads[p] = op(f"{pre}.add1_bwd", "backward", [dx1, d_r1[p]], [(f"dh{l_}.{p}", act, "gradient")])[0]
        for q in _LAYER_PARAMS:   # per-tensor optimizer step as soon as the layer's gradient is whole
            gq = part[q][0]
            if pieces > 1:
                gq, = op(f"L{l_}.{q}.reduce", "reduce", part[q], [(f"L{l_}.{q}.grad", size[P[q]], "gradient")])
            w = P[q]
            op(f"L{l_}.{q}.adam", "optimizer", [w, gq, f"{w}.m", f"{w}.v"], [],
               updates=(w, f"{w}.m", f"{w}.v"))
    for p in range(pieces):
        op(f"embed.{p}_bwd", "backward", [grads[p], f"tokens.{p}"], [(f"embed.{p}.d", size[emb], "gradient")])
    op("embed.reduce", "reduce", [f"embed.{p}.d" for p in range(pieces)],
       [("embed.grad", size[emb], "gradient")])
    op("embed.adam", "optimizer", [emb, "embed.grad"], [], updates=(emb,))
    name = name or f"transformer-{n_layers}x{pieces}-{seed}"
    if device is not None:
        return Graph(name, tensors, ops, device)
    from hybrid.graph.info import unswapped_peak

    g = Graph(name, tensors, ops, Device("synthetic", 1 << 40, 25e9, 25e9, 0.0))
    memory = max(int(unswapped_peak(g) * memory_fraction), 1 << 20)
    return Graph(name, g.tensors, g.ops, Device("synthetic", memory, 25e9, 25e9, 0.0))


def transformer_of_size(n_ops: int, pieces: int = 4, seed: int = 0, **kw) -> Graph:
    """The transformer training graph with the fewest layers giving at least `n_ops` ops."""
    n_layers = 1
    while transformer_ops(n_layers, pieces) < n_ops:
        n_layers = max(n_layers + 1, int(n_layers * n_ops / transformer_ops(n_layers, pieces)))
    return transformer_training_graph(n_layers, pieces, seed, **kw)
