"""hybrid against PyTorch's own memory tools at the same bytes (issue 32): results/vs_torch.{md,csv,png}.

Per model, PyTorch's alternatives and hybrid planned at exactly each alternative's peak:
- eager (the reference: its peak and time);
- full checkpointing per block (`torch.utils.checkpoint`, use_reentrant=False, around every residual/transformer
  block, VGG stage, UNet block);
- torch.compile with activation_memory_budget 0.5 and 0.2, save_on_cpu, checkpoint + save_on_cpu.

Without a GPU (this path, CI) the table runs in simulation with one cost model (the graph's roofline times):
the checkpointed module is captured (hybrid.capture represents its recomputation, reading the parameters and
the forward's generator state), its time is the program-order plan of that graph at its own unswapped peak,
and hybrid's plan of the plain graph at exactly that peak comes from `run_optimize` within --time-limit
(ratio column: checkpoint time / hybrid time). Eager is the plain graph's program order at its own peak.
torch.compile's partitioned graph and saved-tensor hooks (save_on_cpu) are not captured: those rows say so
and wait for a GPU. With a GPU (`torch.cuda.is_available()`), every alternative is also run and measured (peak
from torch.cuda.max_memory_allocated, median step time), and hybrid is planned at those peaks and executed:
results/vs_torch_measured.md (benchmarks/vs_torch_measured.py).

    python -m benchmarks.vs_torch                 # the full table
    python -m benchmarks.vs_torch --quick         # small models where memory still binds: results/vs_torch_quick.*
    python -m benchmarks.vs_torch --only resnet-50 --part 1   # one model (the parts are joined by --join)
    python -m benchmarks.vs_torch --measured-only     # on a GPU: the measured table only
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import pandas as pd
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

from benchmarks.common import RESULTS, is_quick, quick_stem, write_table
from hybrid.capture import capture
from hybrid.device import Device, preset
from hybrid.errors import InfeasibleError
from hybrid.graph import Graph
from hybrid.graph.info import unswapped_peak
from hybrid.swap.baselines import run_baseline
from hybrid.units import format_seconds
from hybrid.validator import validate

if TYPE_CHECKING:
    from hybrid.pipeline import OptimizeOptions

DEVICE = "v100-16gb"     # the cost model (roofline times) and the link the plans are made for
MiB = 1 << 20
NOT_CAPTURED = {
    "compile_budget_0.5": "torch.compile's partitioned graph is not captured; GPU only",
    "compile_budget_0.2": "torch.compile's partitioned graph is not captured; GPU only",
    "save_on_cpu": "capture refuses saved-tensor hooks (host copies are hybrid's to plan); GPU only",
    "checkpoint+save_on_cpu": "capture refuses saved-tensor hooks (host copies are hybrid's to plan); GPU only",
}


class Checkpoint(nn.Module):
    """`block` run under torch.utils.checkpoint (non-reentrant), as a user wraps a block."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return checkpoint(self.block, *args, use_reentrant=False, **kwargs)


def checkpoint_forward(block: nn.Module) -> nn.Module:
    """`block` (modified) whose forward runs under torch.utils.checkpoint; its attributes stay where its
    container looks for them (nn.TransformerEncoder reads its layers' `self_attn`)."""
    inner = block.forward

    def forward(*args: Any, **kwargs: Any) -> Any:
        return checkpoint(inner, *args, use_reentrant=False, **kwargs)

    block.forward = forward  # type: ignore[method-assign]
    return block


def checkpoint_blocks(module: nn.Module, is_block: Callable[[nn.Module], bool]) -> nn.Module:
    """`module` (modified) with every submodule `is_block` accepts checkpointed (`checkpoint_forward`)."""
    for child in module.children():
        if is_block(child):
            checkpoint_forward(child)
        else:
            checkpoint_blocks(child, is_block)
    return module


def checkpoint_vgg(m: nn.Module) -> nn.Module:
    """VGG's features as one checkpointed segment per stage (the layers up to each max pool)."""
    stages, cur = [], []
    for layer in m.features:
        cur.append(layer)
        if isinstance(layer, nn.MaxPool2d):
            stages.append(Checkpoint(nn.Sequential(*cur)))
            cur = []
    m.features = nn.Sequential(*stages, *cur)
    return m


def checkpoint_unet(m: nn.Module) -> nn.Module:
    for lst in (m.down, m.merge):
        for i in range(len(lst)):
            lst[i] = Checkpoint(lst[i])
    m.bottom = Checkpoint(m.bottom)
    return m


def _is_class(*names: str) -> Callable[[nn.Module], bool]:
    return lambda mod: type(mod).__name__ in names


@dataclass(frozen=True)
class Model:
    """A training step: build() -> (module, args, target, loss_fn); checkpointed(module) wraps its blocks."""

    name: str
    build: Callable[[], tuple[nn.Module, tuple, Any, Any]]
    checkpointed: Callable[[nn.Module], nn.Module]
    optimizer: str = "sgd"


def zoo(name: str, batch: int, overrides: dict[str, Any]) -> Callable[..., tuple[nn.Module, tuple, Any, Any]]:
    def build(device: str = "meta") -> tuple[nn.Module, tuple, Any, Any]:
        """On "meta" for capture (no memory); on "cpu" with real weights to run it."""
        from hybrid.zoo import get_model

        spec = get_model(name, **overrides)
        with torch.device(device):
            m = spec.build()
        args, target = spec.make_inputs(batch, torch.device(device), torch.float32)
        return m, args, target, spec.loss
    build.model_info = {"name": name, "batch": batch, "config": dict(overrides)}  # type: ignore[attr-defined]
    return build


def transformer(layers: int, d: int, batch: int, seq: int, vocab: int) -> Callable[..., tuple]:
    """A GPT-style LM (examples.transformer_lm): the stand-in for the zoo's gpt2/llama where Hugging Face
    transformers is not installed."""
    def build(device: str = "meta") -> tuple[nn.Module, tuple, Any, Any]:
        from examples.transformer_lm import TransformerLM, lm_loss

        with torch.device(device):
            m = TransformerLM(vocab, d, layers)
        tokens = torch.zeros(batch, seq, dtype=torch.long, device=device)
        return m, (tokens,), tokens, lm_loss
    build.model_info = {"name": "examples.transformer_lm", "batch": batch,  # type: ignore[attr-defined]
                        "config": {"layers": layers, "d": d, "seq": seq, "vocab": vocab}}
    return build


def _has_transformers() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


def models(quick: bool, smoke: bool = False) -> list[Model]:
    """Sizes where memory binds: activations many times the weights (full). For --quick, small models at
    inputs where checkpointing still halves the peak on resnet-50 and the transformers and memory binds a plan
    of the plain step there (its bound 2-6% above eager's time: a planner regression shows as hybrid's time
    moving away from it); vgg16's and unet's checkpointing saves less (0.74 and 0.82 of the peak) and hybrid
    reaches eager's time there. `smoke`: tiny inputs, for a run that trains them on the CPU (`--measured-only
    --measure-on cpu`, a test of the code, not figures)."""
    res = _is_class("Bottleneck", "BasicBlock")
    enc = _is_class("TransformerEncoderLayer")
    hf = _is_class("GPT2Block", "LlamaDecoderLayer")
    # per size: (batch, zoo overrides) of resnet-50, vgg16 and unet; transformer-lm's (layers, d, batch, seq, vocab)
    size = "smoke" if smoke else "quick" if quick else "full"
    cnn = {"smoke": {"resnet-50": (2, {"image_size": 32, "num_classes": 10}),
                     "vgg16": (2, {"image_size": 32, "num_classes": 10}), "unet": (2, {"image_size": 32, "base": 8})},
           "quick": {"resnet-50": (16, {"image_size": 96, "num_classes": 10}),
                     "vgg16": (16, {"image_size": 128, "num_classes": 10}), "unet": (4, {"image_size": 128, "base": 8})},
           "full": {"resnet-50": (32, {}), "vgg16": (32, {}), "unet": (8, {})}}[size]
    lm = {"smoke": (2, 64, 4, 64, 100), "quick": (2, 64, 4, 512, 100), "full": (6, 512, 8, 512, 8000)}[size]
    wrap = {"resnet-50": lambda m: checkpoint_blocks(m, res), "vgg16": checkpoint_vgg, "unet": checkpoint_unet}
    out = [Model(name, zoo(name, batch, dict(over)), wrap[name]) for name, (batch, over) in cnn.items()]
    out.append(Model("transformer-lm", transformer(*lm), lambda m: checkpoint_blocks(m, enc)))
    if _has_transformers():   # the optional extra (pip install 'hybrid-offload[transformers]')
        # 6 blocks of width 512 over 512 tokens, an 8,000-token vocabulary (as transformer-lm): activations
        # about 20x the weights
        seq = 64 if smoke else 512
        gpt2 = {"n_layer": 2, "seq_len": seq, "vocab_size": 500} if quick or smoke else {
            "n_layer": 6, "n_embd": 512, "n_head": 8, "seq_len": 512, "vocab_size": 8000}
        llama = {"num_hidden_layers": 2, "seq_len": seq, "vocab_size": 500} if quick or smoke else {
            "num_hidden_layers": 6, "hidden_size": 512, "num_attention_heads": 8, "intermediate_size": 1376,
            "seq_len": 512, "vocab_size": 8000}
        batch = 2 if smoke else 4 if quick else 8
        out += [Model("gpt2", zoo("gpt2", batch, gpt2), lambda m: checkpoint_blocks(m, hf)),
                Model("llama", zoo("llama", batch, llama), lambda m: checkpoint_blocks(m, hf))]
    return out


def graphs(model: Model) -> tuple[Graph, Graph]:
    """The plain step's graph and the checkpointed step's (the same weights and batch)."""
    m, args, target, loss = model.build()
    plain = capture(m, args, loss, target, optimizer=model.optimizer, lr=0.01, device=DEVICE, name=model.name)
    ck = capture(model.checkpointed(copy.deepcopy(m)), args, loss, target, optimizer=model.optimizer, lr=0.01,
                 device=DEVICE, name=f"{model.name}-checkpoint")
    info = getattr(model.build, "model_info", {"name": model.name})
    plain.extra["model"] = dict(info)
    ck.extra["model"] = {**info, "checkpoint": "torch.utils.checkpoint per block (benchmarks.vs_torch)"}
    return plain, ck


def at_memory(base: Device, nbytes: int) -> Device:
    """`base` with exactly `nbytes` for the plan (no reserve: the bytes the alternative used)."""
    return dataclasses.replace(base, memory_bytes=int(nbytes), reserve_bytes=0)


def own_time(g: Graph, dev: Device) -> tuple[int, float]:
    """(peak, time): the program-order plan of `g` at its own unswapped peak."""
    peak = unswapped_peak(g)
    plan = run_baseline(g, at_memory(dev, peak), "belady")
    if not validate(g, plan).valid:
        raise AssertionError(f"{g.name}: the program-order plan does not validate")
    return peak, plan.makespan_s


# hybrid's planner settings tried at each memory, the time limit split evenly: changes to `hybrid optimize`'s own
# planner options (OptimizeOptions.planner_options: swap and recompute, plans with reruns re-bound in time order,
# the long rerun chains a transformer block needs; its first generation walks the program order with every
# recompute chain setting, ga.population). As they are, and recompute only (Checkmate-style: activations rerun or
# kept, never swapped; the faster on resnet-50 and vgg16).
VARIANTS: dict[str, dict[str, Any]] = {
    "swap+recompute": {},
    "recompute-only": {"recompute_only": True},
}


def variant_options(name: str) -> "OptimizeOptions":
    """`hybrid optimize`'s options (seed 1, one worker) with VARIANTS[name]'s planner changes."""
    from ga import GAConfig
    from hybrid.pipeline import OptimizeOptions

    base = OptimizeOptions(config=GAConfig(seed=1), workers=1)
    return dataclasses.replace(base, planner=dataclasses.replace(base.planner_options(), **VARIANTS[name]))


def hybrid_at(g: Graph, dev: Device, memory: int, seconds: float,
              generations: int | None) -> tuple[float, str, str]:
    """hybrid's best plan of `g` at exactly `memory` bytes over VARIANTS, `seconds` in all: (makespan, the
    variant, note). Every plan is validated."""
    from hybrid.pipeline import run_optimize

    best, which, notes = float("nan"), "", []
    for name in VARIANTS:
        opts = dataclasses.replace(variant_options(name), generations=generations)
        try:
            plan = run_optimize(g, at_memory(dev, memory), seconds / len(VARIANTS), opts).plan
        except InfeasibleError as e:
            notes.append(f"{name} infeasible: {str(e)[:60]}")
            continue
        if not validate(g, plan).valid:
            raise AssertionError(f"{g.name}: hybrid's plan ({name}) does not validate")
        if plan.allocation.kind == "unconstrained":   # no layout found: not the plan that runs (it would compact)
            notes.append(f"{name} not laid out ({format_seconds(plan.makespan_s)} as a byte budget): not counted")
            continue
        if not plan.makespan_s >= best:    # the first, or a faster one
            best, which = plan.makespan_s, name
    return best, which, "; ".join(notes)


def ceiling(plain: Graph, dev: Device, memory: int, alt_time: float, seconds: float) -> tuple[float, float]:
    """(bound, alt_time / bound): a lower bound on every plan of the plain step at exactly `memory` bytes (the
    larger of hybrid.bounds' graph_bound and chain_bound, which counts rerun chains; `seconds` of CP-SAT), and
    so the most any plan can be faster than the alternative there."""
    from hybrid.bounds import chain_bound, graph_bound

    d = at_memory(dev, memory)
    bound = max(graph_bound(plain, d), chain_bound(plain, d, seconds=seconds) or 0.0)
    return bound, alt_time / bound


def simulated_rows(name: str, plain: Graph, ck: Graph, seconds: float, generations: int | None,
                   bound_s: float = 60.0) -> list[dict]:
    """The simulated table's rows for one model (also the held-out check's entry point)."""
    dev = plain.device or preset(DEVICE)
    e_peak, e_time = own_time(plain, dev)
    rows = [{"model": name, "alternative": "eager", "source": "simulated", "peak_MiB": e_peak / MiB,
             "time_ms": e_time * 1e3,
             "peak/eager": 1.0, "hybrid_ms": float("nan"), "speedup": float("nan"), "bound_ms": float("nan"),
             "ceiling": float("nan"), "hybrid_variant": "", "ops": len(plain.ops), "note": ""}]
    c_peak, c_time = own_time(ck, dev)
    h_time, variant, note = hybrid_at(plain, dev, c_peak, seconds, generations)
    bound, most = ceiling(plain, dev, c_peak, c_time, bound_s)
    rows.append({"model": name, "alternative": "checkpoint", "source": "simulated", "peak_MiB": c_peak / MiB,
                 "time_ms": c_time * 1e3,
                 "peak/eager": c_peak / e_peak, "hybrid_ms": h_time * 1e3, "speedup": c_time / h_time,
                 "bound_ms": bound * 1e3, "ceiling": most, "hybrid_variant": variant, "ops": len(ck.ops),
                 "note": note})
    for alt, why in NOT_CAPTURED.items():
        rows.append({"model": name, "alternative": alt, "source": "simulated", "note": f"not simulated: {why}"})
    return rows


def plot(df: pd.DataFrame, path: Path, title: str) -> None:
    """Step time against peak memory, per model: eager, checkpoint, and hybrid at checkpoint's peak."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from hybrid.files import save_figure

    names = list(dict.fromkeys(df["model"]))
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        part = df[(df["model"] == name) & df["time_ms"].notna()]
        for _, r in part.iterrows():
            ax.scatter(r["peak_MiB"], r["time_ms"], marker="o", label=r["alternative"])
        ck = part[part["alternative"] == "checkpoint"]
        if len(ck):
            ax.scatter(ck["peak_MiB"], ck["hybrid_ms"], marker="*", s=120, label="hybrid at checkpoint's peak")
        ax.set_title(name)
        ax.set_xlabel("peak (MiB)")
        ax.set_ylabel("simulated step (ms)")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def main() -> None:
    from benchmarks.executor_gpu import short
    from benchmarks.vs_torch_measured import ALTERNATIVES, measured_rows

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small models at inputs where the checkpointed peak still binds; writes results/vs_torch_quick.*")
    ap.add_argument("--time-limit", type=float, default=None, help="hybrid's seconds per model (60; quick 30)")
    ap.add_argument("--generations", type=int, default=None, help="GA generations instead of a time limit")
    ap.add_argument("--only", default="", help="comma-separated model names")
    ap.add_argument("--part", default="", help="write this model set to out/vs_torch_parts/PART.json only")
    ap.add_argument("--join", action="store_true", help="write the table from every saved part")
    ap.add_argument("--iters", type=int, default=10, help="measured steps per alternative and per hybrid plan")
    ap.add_argument("--bound-time", type=float, default=None,
                    help="CP-SAT seconds per model for the rerun-chain bound (60; quick 5)")
    ap.add_argument("--measured-only", action="store_true",
                    help="only the measured rows (results/vs_torch_measured.md), not the simulated table")
    ap.add_argument("--measure-on", choices=("cuda", "cpu"), default=None,
                    help="where the measured rows run (default: cuda when there is one, else none; cpu: a smoke "
                         "test of the code, not figures)")
    ap.add_argument("--alternatives", default=",".join(ALTERNATIVES),
                    help="the PyTorch alternatives measured (comma-separated; torch.compile's take a minute each)")
    ap.add_argument("--hybrid-at", choices=("some", "all"), default="some",
                    help="measured peaks hybrid is planned at and run: eager's, checkpoint's and the fastest other "
                         "memory-saving one's (some), or every one's (all)")
    ap.add_argument("--table", default="vs_torch_measured",
                    help="the measured table's name under results/ (e.g. vs_torch_measured_compile for the "
                         "torch.compile alternatives, run apart: a compile takes a minute)")
    ap.add_argument("--hybrid-seconds", type=float, default=None,
                    help="`hybrid optimize`'s time limit per measured peak (30; quick 10)")
    a = ap.parse_args()
    quick = a.quick or is_quick()
    if quick:
        import os

        os.environ["HYBRID_QUICK"] = "1"
    seconds = a.time_limit or (30.0 if quick else 60.0)   # quick: a bound; --generations is its budget
    bound_s = a.bound_time or (5.0 if quick else 60.0)
    measure = a.measure_on or ("cuda" if torch.cuda.is_available() else None)
    if measure == "cuda" and not torch.cuda.is_available():
        raise SystemExit("error: --measure-on cuda: no CUDA device here (--measure-on cpu runs a smoke test)")
    if a.measured_only and measure is None and not a.join:
        raise SystemExit("error: --measured-only needs a GPU, or --measure-on cpu for a smoke test of the code")
    alts = tuple(x for x in a.alternatives.split(",") if x)
    unknown = [x for x in alts if x not in ALTERNATIVES]
    if unknown:
        raise SystemExit(f"error: --alternatives: unknown {unknown[0]!r}; known: {', '.join(ALTERNATIVES)}")
    hybrid_s = a.hybrid_seconds or (10.0 if quick else 30.0)
    parts = Path("out") / quick_stem("vs_torch_parts")
    mparts = Path("out") / quick_stem("vs_torch_measured_parts")
    saved = Path("out") / quick_stem("vs_torch_graphs")     # the graphs compared, named in the table by sha256
    rows: list[dict] = []
    mrows: list[dict] = []
    if a.join:   # with --measured-only, the measured parts alone (the simulated table stays as it is)
        for p in (sorted(parts.glob("*.json")) if not a.measured_only else []):
            rows += json.loads(p.read_text())
        for p in sorted(mparts.glob("*.json")):
            mrows += json.loads(p.read_text())
    else:
        from hybrid.pipeline import warm_kernels

        # every kernel loaded (or compiled) before any run is timed: each model's run_optimize gets the same flow
        # whatever numba's cache held (its exact layout search is left out of a short run where it is not cached)
        warm_kernels()
        only = {s for s in a.only.split(",") if s}
        for model in models(quick, smoke=a.measured_only and measure == "cpu"):
            if only and model.name not in only:
                continue
            t0 = time.monotonic()
            try:
                plain, ck = graphs(model)
            except Exception as e:  # noqa: BLE001 - on a lent GPU's minutes, one model's failure spares the rest
                if not a.measured_only:
                    raise
                print(f"{model.name}: skipped: capture failed: {type(e).__name__}: {e}", flush=True)
                continue
            saved.mkdir(parents=True, exist_ok=True)
            plain.save(saved / f"{model.name}.json")
            ck.save(saved / f"{model.name}-checkpoint.json")
            if not a.measured_only:
                got = simulated_rows(model.name, plain, ck, seconds, a.generations, bound_s)
                rows += got
                print(f"{model.name}: {got[1].get('speedup', float('nan')):.3f}x over checkpoint, simulated "
                      f"({time.monotonic() - t0:.0f} s)", flush=True)
            if measure is not None:
                print(f"{model.name}: measured on {measure}", flush=True)
                try:
                    mrows += measured_rows(model, plain, ck, torch.device(measure), a.iters, hybrid_s, alts,
                                           a.hybrid_at == "all", log=lambda m: print(m, flush=True))
                except Exception as e:  # noqa: BLE001 - one model's failure (a profile, a planner process) is
                    # its row's note: the models after it still run within the GPU session's few minutes
                    print(f"{model.name}: measured rows failed: {short(e)}", flush=True)
                    mrows.append({"model": model.name, "alternative": "all", "source": f"measured ({measure})",
                                  "note": f"failed: {short(e)}"})
                # written after each model: a run stopped by its time limit keeps the models done
                if a.part:
                    mparts.mkdir(parents=True, exist_ok=True)
                    (mparts / f"{a.part}.json").write_text(json.dumps(mrows))
                else:
                    write_measured(mrows, measure, hybrid_s, saved, False, mparts, a.table)
        if a.part:
            for folder, got_rows in ((parts, rows), (mparts, mrows)):
                if got_rows:
                    folder.mkdir(parents=True, exist_ok=True)
                    (folder / f"{a.part}.json").write_text(json.dumps(got_rows))
            return
    if mrows and a.join:
        write_measured(mrows, measure, hybrid_s, saved, True, mparts, a.table)
    if not rows:
        return
    df = pd.DataFrame(rows)
    sim = df[df["alternative"] == "checkpoint"]
    worst = float(sim["speedup"].min()) if len(sim) else float("nan")
    notes = (f"Simulated: cost model {DEVICE}'s roofline times and link; hybrid = run_optimize (GA, "
             f"seed 1, one worker, no reserve) within {seconds:g} s per model at exactly the checkpointed step's "
             f"peak; its plan is the fastest of {len(VARIANTS)} planner settings ({', '.join(VARIANTS)}; "
             "benchmarks/vs_torch.py VARIANTS), the time limit split evenly. `speedup` = checkpoint's time / "
             f"hybrid's. Worst speedup over checkpoint: {worst:.3f}x. `bound_ms`: no plan of the plain step at "
             "that peak is faster (hybrid.bounds: the larger of graph_bound and chain_bound, which counts that a "
             f"rerun needs its producer's inputs back; {bound_s:g} s of CP-SAT); `ceiling` = checkpoint's time / "
             "bound_ms, the most any plan could gain over checkpointing there. "
             + ("" if _has_transformers() else "The zoo's gpt2 and llama need Hugging Face transformers, not "
                "installed here: transformer-lm (examples/transformer_lm.py, a GPT-style encoder LM) stands in. ")
             + "Rows 'not simulated' are measured on a GPU: `--measured-only` there writes "
             "results/vs_torch_measured.md (benchmarks/vs_torch_measured.py)."
             + (f" Joined from the parts under {parts} (each written by `--only MODELS --part N` in the timed slot)."
                if a.join else ""))
    write_table(df, "vs_torch", "hybrid against PyTorch's memory tools at the same peak", notes,
                graphs=graphs_read(saved, df))
    plot(df, RESULTS / f"{quick_stem('vs_torch')}.png", "simulated step time against peak")
    print(f"wrote results/{quick_stem('vs_torch')}.md (worst speedup over checkpoint {worst:.3f}x)")


def graphs_read(saved: Path, df: pd.DataFrame) -> list[Path]:
    """The saved graph files (plain and checkpointed) of the table's models, for its provenance lines."""
    names = set(df["model"])
    return sorted(p for p in saved.glob("*.json") if p.stem.removesuffix("-checkpoint") in names)


def write_measured(rows: list[dict], measure: str | None, hybrid_s: float, saved: Path, joined: bool,
                   mparts: Path, table: str = "vs_torch_measured") -> None:
    """results/<table>.md (vs_torch_measured): the rows measured on a device (benchmarks/vs_torch_measured.py)."""
    from benchmarks import vs_torch_measured

    summary = vs_torch_measured.summary(rows)

    where = (torch.cuda.get_device_name() if measure == "cuda" and torch.cuda.is_available()
             else "the CPU: a smoke test of the code, not figures" if measure == "cpu" else "parts joined")
    notes = (vs_torch_measured.__doc__.split("    python -m")[0].strip() + f"\n\nMeasured on {where}; torch "
             f"{torch.__version__}; hybrid: `hybrid optimize` within {hybrid_s:g} s per peak, seed 1. {summary}"
             + (f" Joined from the parts under {mparts}." if joined else ""))
    df = pd.DataFrame(rows)
    write_table(df, table, "hybrid against PyTorch's memory tools, measured on a device", notes,
                graphs=graphs_read(saved, df))
    print(f"wrote results/{quick_stem(table)}.md ({summary})")


if __name__ == "__main__":
    main()
