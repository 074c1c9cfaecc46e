"""Random inference graphs for placement tests: chains of stages, some of them branch stages."""
from __future__ import annotations

import random

from hybrid.graph import Graph


def random_inference_graph(seed: int, stages: int = 4, max_branches: int = 3, chain_only: bool = False) -> Graph:
    """x -> stage -> stage ... -> out. A stage is one op, or (unless `chain_only`) 2..max_branches branches of
    one or two ops reading the stage's input, joined by one op. Each op reads one parameter; GPU and CPU times
    and tensor sizes are random, so either device can win a part."""
    rnd = random.Random(seed)
    tensors = [{"id": "x", "bytes": rnd.randint(1, 10) * 10**5, "kind": "input", "persistent": True}]
    ops = []
    k = 0

    def op(inputs: list[str]) -> str:
        nonlocal k
        k += 1
        out, w = f"a{k}", f"w{k}"
        tensors.append({"id": w, "bytes": 4096, "kind": "param", "persistent": True})
        tensors.append({"id": out, "bytes": rnd.randint(1, 20) * 10**5, "kind": "activation"})
        ops.append({"id": f"op{k}", "kind": "conv", "inputs": inputs + [w], "outputs": [out],
                    "time_s": rnd.uniform(1e-5, 2e-3), "cpu_time_s": rnd.uniform(1e-5, 2e-3)})
        return out

    cur = "x"
    for _ in range(stages):
        if chain_only or rnd.random() < 0.5:
            cur = op([cur])
            continue
        ends = []
        for _ in range(rnd.randint(2, max_branches)):
            t = op([cur])
            if rnd.random() < 0.5:
                t = op([t])
            ends.append(t)
        cur = op(ends)
    d = {"format": "hybrid-graph/1", "name": f"random-{seed}",
         "device": {"name": "link", "memory_bytes": 1 << 34, "h2d_bytes_per_s": 2e9, "d2h_bytes_per_s": 2e9,
                    "transfer_latency_s": 1e-5},
         "tensors": tensors, "ops": ops}
    return Graph.from_json(d)
