"""Does a captured graph replay to exactly what eager PyTorch computes? Checked on every zoo family.

For each model (small configurations, so the check runs on a CPU in minutes):
capture it on the meta device, build the same model with real weights, run
one eager training step (loss.backward(), optimizer.step()) and replay the
graph op by op with the reference interpreter, both from the same weights and
seed; then compare loss, every gradient, every updated parameter, buffer and
optimizer-state tensor bitwise. A second replay runs a different valid
schedule (always the latest-listed ready op first) to show the RNG pinning.

    python -m benchmarks.capture_replay            # writes results/capture_replay.md
"""
from __future__ import annotations

import argparse
import copy
import hashlib
import time
from pathlib import Path

import torch

from benchmarks.common import command_line, commit, quick_name
from hybrid.capture.api import capture_model
from hybrid.capture.interpreter import eager_step, mismatches, replay_step
from hybrid.graph.order import ids, latest_first_order
from hybrid.zoo import get_model

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"image_size": 32, "num_classes": 10}
# (model, batch, overrides, optimizer, options)
CASES = [
    ("resnet-18", 2, SMALL, "adam", {}),
    ("resnet-50", 2, SMALL, "sgd", {"momentum": 0.9}),
    ("wresnet-50-2", 2, SMALL, "adam", {}),
    ("vgg11", 2, SMALL, "sgd", {"momentum": 0.9}),
    ("vgg19", 2, {**SMALL, "batch_norm": True}, "adam", {}),
    ("alexnet", 2, {"image_size": 63, "num_classes": 10}, "adam", {}),
    ("squeezenet", 2, {"image_size": 48, "num_classes": 10}, "sgd", {"momentum": 0.9}),
    ("googlenet", 2, SMALL, "adam", {}),
    ("mobilenet", 2, SMALL, "adam", {}),
    ("mobilenet-v2", 2, SMALL, "adamw", {}),
    ("inception-v4-1", 2, {"image_size": 75, "num_classes": 10}, "sgd", {}),
    ("nasnet-1", 2, {"filters": 8, "stem_multiplier": 1, "image_size": 64, "num_classes": 10}, "adam", {}),
    ("unet", 1, {"image_size": 32, "base": 8, "depth": 2}, "adam", {}),
    ("rnn-2-1k", 4, {"hidden": 32, "embed": 16, "seq_len": 6, "vocab": 50}, "adam", {"weight_decay": 0.01}),
    ("brnn-2-1k", 4, {"hidden": 32, "embed": 16, "seq_len": 6, "vocab": 50}, "sgd", {"momentum": 0.9}),
    ("gpt2", 2, {"n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 100, "seq_len": 16}, "adamw", {}),
    ("llama", 2, {"num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 2,
                  "intermediate_size": 64, "vocab_size": 100, "seq_len": 16}, "adamw", {}),
]


def torch_optimizer(name: str, params, options: dict) -> torch.optim.Optimizer:
    cls = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}[name]
    return cls(params, lr=0.01, **options)


def check(model: str, batch: int, overrides: dict, opt_name: str, options: dict) -> dict:
    row: dict = {"model": model, "batch": batch, "config": ", ".join(f"{k}={v}" for k, v in overrides.items()),
                 "optimizer": opt_name + "".join(f" {k}={v}" for k, v in options.items())}
    try:
        t0 = time.perf_counter()
        graph = capture_model(model, batch, optimizer=opt_name, lr=0.01, optimizer_options=options or None,
                              overrides=overrides)
        row["capture_s"] = time.perf_counter() - t0
        row["sha256"] = hashlib.sha256(graph.dumps().encode()).hexdigest()[:12]   # the file `capture --out` writes
        spec = get_model(model, **overrides)
        torch.manual_seed(0)
        module = spec.build()
        args, target = spec.make_inputs(batch, torch.device("cpu"), torch.float32)
        eager = copy.deepcopy(module)
        t0 = time.perf_counter()
        ref = eager_step(eager, args, target, spec.loss, optimizer=torch_optimizer(opt_name, eager.parameters(),
                                                                                   options), seed=1234)
        row["eager_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        rep = replay_step(graph, module, args, target, seed=1234)
        row["replay_s"] = time.perf_counter() - t0
        other = replay_step(graph, module, args, target, seed=1234, schedule=ids(graph, latest_first_order(graph)))
    except Exception as e:  # noqa: BLE001 - a benchmark reports every failure in its table
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
        return row
    n_values = 1 + sum(len(getattr(ref, g)) for g in ("grads", "params", "buffers")) + \
        sum(len(s) for s in ref.state.values())
    row.update(ops=len(graph.ops), random_ops=sum(1 for o in graph.ops if "rng" in o.inputs),
               params=len(ref.params), values=n_values, diff=mismatches(rep, ref), diff_other=mismatches(other, ref))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=None, help="only these model names")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / quick_name("capture_replay.md"))
    a = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rows = []
    for case in CASES:
        if a.models and case[0] not in a.models:
            continue
        r = check(*case)
        rows.append(r)
        status = r.get("error") or ("bitwise equal" if not r["diff"] and not r["diff_other"] else
                                    f"{len(r['diff'])} + {len(r['diff_other'])} mismatches")
        print(f"{r['model']}: {status}", flush=True)
    lines = [
        "# Reference interpreter vs eager PyTorch",
        "",
        f"Regenerate: `{command_line()}` (from the repository root; {time.strftime('%Y-%m-%d')}; code {commit()}).",
        "",
        f"torch {torch.__version__}, CPU. One training step from the same weights, batch and seed (dropout "
        "included): eager `loss.backward(); optimizer.step()` under `portable_kernels()` versus the captured "
        "graph replayed op by op, in the graph's order and in a different valid order (*other order*). "
        "*values* counts the tensors compared bitwise: loss, each gradient, each updated parameter, buffer "
        "and optimizer-state tensor. Learning rate 0.01. Each graph is captured in this process as `hybrid capture "
        "--model NAME --batch BATCH` with the config shown (roofline costs on the capture's default device); "
        "*graph sha256*: the first 12 hex digits of the file `capture --out` would write.",
        "",
        "| model | batch | config | optimizer | ops | random ops | values | graph order | other order | "
        "capture s | eager s | replay s | graph sha256 |",
        "|---|---:|---|---|---:|---:|---:|---|---|---:|---:|---:|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | {r['config']} | {r['optimizer']} | | | | "
                         f"not run: {r['error']} | | | | | |")
            continue

        def verdict(d: list[str]) -> str:
            return "bitwise equal" if not d else f"{len(d)} differ (e.g. {d[0]})"

        lines.append(f"| {r['model']} | {r['batch']} | {r['config']} | {r['optimizer']} | {r['ops']} | "
                     f"{r['random_ops']} | {r['values']} | {verdict(r['diff'])} | {verdict(r['diff_other'])} | "
                     f"{r['capture_s']:.1f} | {r['eager_s']:.2f} | {r['replay_s']:.2f} | {r.get('sha256', '')} |")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("\n".join(lines) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
