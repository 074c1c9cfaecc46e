"""A 2-layer transformer LM with AdamW whose matmuls have two implementations, for MO-SOS's acceptance run
(docs/milp.md, "Measured: a transformer LM at 34% of its peak").

Capture gives matmuls one implementation; this module adds a second to every `mm`, `addmm` and `bmm`:
`direct` (the op's own time, no workspace: the default every other planner runs) and `packed` (0.6 of that
time, with a workspace the size of the op's operands and result: a packed copy of both and an output
buffer). Not a kernel anyone runs: a trade-off of the kind cuBLAS-Lt's workspace algorithms offer, so that
a planner has something to gain from choosing implementations on a transformer.

    cd out/lm && hybrid capture --module lm_graph:make --optimizer adamw --out lm-raw.json   # (copy this file there)
    python -m tests.milp.lm_graph out/lm/lm-raw.json out/lm/lm.json
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

MATMULS = ("mm", "addmm", "bmm")
FAST_TIME = 0.6  # packed's time / direct's


def make(vocab: int = 8000, d: int = 768, layers: int = 2, batch: int = 8, seq: int = 128):
    """(module, inputs, target, loss_fn) for `hybrid capture --module`: embedding, `layers` encoder layers
    (8 heads, feed-forward 4d, no dropout), a vocabulary head, next-token cross-entropy."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, d)
            layer = nn.TransformerEncoderLayer(d, nhead=8, dim_feedforward=4 * d, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, num_layers=layers, enable_nested_tensor=False)
            self.head = nn.Linear(d, vocab)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(self.embed(tokens)))

    def loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.flatten(0, 1), target.flatten())

    tokens = torch.randint(vocab, (batch, seq + 1), generator=torch.Generator().manual_seed(3))
    return LM(), (tokens[:, :-1].clone(),), tokens[:, 1:].clone(), loss


def with_matmul_impls(graph: dict) -> dict:
    """The graph (hybrid-graph/1 as a dict) with `direct` and `packed` on every matmul (module docstring)."""
    size = {t["id"]: int(t["bytes"]) for t in graph["tensors"]}
    for op in graph["ops"]:
        if op["kind"] not in MATMULS:
            continue
        t = float(op["time_s"])
        ws = sum(size[x] for x in dict.fromkeys(op["inputs"] + op["outputs"]))
        op["impls"] = [{"name": "direct", "time_s": t, "workspace_bytes": int(op.get("workspace_bytes", 0))},
                       {"name": "packed", "time_s": t * FAST_TIME, "workspace_bytes": ws}]
    graph["name"] = graph.get("name", "lm") + "+matmul-impls"
    return graph


if __name__ == "__main__":
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    dst.write_text(json.dumps(with_matmul_impls(json.loads(src.read_text())), indent=1))
