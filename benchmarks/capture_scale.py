"""How long capture takes and how much RAM it needs for the papers' largest models.

Each model is captured in a fresh child process (so peak RSS is that
capture's alone, torch import included) by the same code path as
`hybrid capture --model NAME --batch N --out FILE`. The goal: the largest
suite model captures in under 2 minutes and 4 GB of RAM on a 2-core, 24 GB
machine, although its tensors add up to hundreds of GB.

    python -m benchmarks.capture_scale                       # all models below
    python -m benchmarks.capture_scale --models nasnet-25:64 # a subset, NAME:BATCH
Writes results/capture_scale.md (or --out).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import command_line, commit, quick_name

ROOT = Path(__file__).resolve().parents[1]
# SwapAdvisor's Table 1 models and ResNet-152 (ASPLOS'20 §6), MO-SOS's VGG19 and UNet, at the papers' batches.
MODELS = ["wresnet-152-10:64", "inception-v4-4:64", "nasnet-25:64", "rnn-8-8k:256", "brnn-4-8k:128",
          "resnet-152:64", "vgg19:144", "unet:120"]

CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
import torch
from hybrid.capture.api import capture_model
t1 = time.perf_counter()
g = capture_model(sys.argv[1], int(sys.argv[2]), optimizer=sys.argv[3])
t2 = time.perf_counter()
sha = g.save(sys.argv[4])
t3 = time.perf_counter()
tensors = g.tensors
print(json.dumps({
    "import_s": t1 - t0, "capture_s": t2 - t1, "save_s": t3 - t2,
    "ops": len(g.ops), "tensors": len(tensors), "sha256": sha[:12],
    "total_bytes": sum(t.bytes for t in tensors),
    "param_bytes": sum(t.bytes for t in tensors if t.kind == "param"),
    "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    "cpu_s": resource.getrusage(resource.RUSAGE_SELF).ru_utime + resource.getrusage(resource.RUSAGE_SELF).ru_stime,
}))
"""


def run_one(name: str, batch: int, optimizer: str, timeout: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "g.json"
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", CHILD, name, str(batch), optimizer, str(out)],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            err = (proc.stderr.strip().splitlines() or ["?"])[-1]
            return {"model": name, "batch": batch, "error": err}
        d = json.loads(proc.stdout.strip().splitlines()[-1])
        d.update(model=name, batch=batch, wall_s=wall, file_bytes=out.stat().st_size)
        return d


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f}"


def table(rows: list[dict], optimizer: str, command: str) -> str:
    import torch

    lines = [
        "# Capture at scale: time and peak RAM",
        "",
        f"Regenerate: `{command}` (from the repository root; {time.strftime('%Y-%m-%d')}; code {commit()}).",
        "",
        f"Machine: {os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, load average {os.getloadavg()[0]:.1f} at the end (the machine is shared). "
        f"Optimizer: {optimizer}. Each graph is `hybrid capture --model NAME --batch BATCH` with the capture's "
        "defaults (training step, roofline costs on its default device); *graph sha256* names the file it wrote "
        "(first 12 hex digits). Each capture runs in a fresh process; "
        "*process s* and *peak RSS* include starting Python and importing torch (*import s*); "
        "*process CPU s* is the CPU time the process used (capture is single-threaded), which is what the wall "
        "time would be on an idle machine.",
        "",
        "| model | batch | ops | tensors | sum of tensor bytes (GiB) | params (GiB) | import s | capture s | "
        "save s | process s | process CPU s | peak RSS (MiB) | graph file (MiB) | graph sha256 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['batch']} | error: {r['error']} |" + " |" * 11)
            continue
        lines.append(
            f"| {r['model']} | {r['batch']} | {r['ops']:,} | {r['tensors']:,} | {gib(r['total_bytes'])} | "
            f"{gib(r['param_bytes'])} | {r['import_s']:.1f} | {r['capture_s']:.1f} | {r['save_s']:.1f} | "
            f"{r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['maxrss_kib'] / 1024:,.0f} | {r['file_bytes'] / 2**20:,.1f} | {r.get('sha256', '')} |")
    ok = [r for r in rows if "error" not in r]
    if ok:
        worst_t = max(ok, key=lambda r: r["wall_s"])
        worst_m = max(ok, key=lambda r: r["maxrss_kib"])
        biggest = max(ok, key=lambda r: r["total_bytes"])
        lines += [
            "",
            f"Largest graph by tensor bytes: {biggest['model']} (batch {biggest['batch']}), "
            f"{gib(biggest['total_bytes'])} GiB summed over its tensors (every tensor's size once; the peak a "
            "planner must fit is smaller), captured in {:.1f} s with {:,.0f} MiB peak RSS.".format(
                biggest["wall_s"], biggest["maxrss_kib"] / 1024),
            f"Slowest: {worst_t['model']} at {worst_t['wall_s']:.1f} s for the whole process "
            f"({worst_t['cpu_s']:.1f} s of CPU time; wall time exceeds it when other work shares the 2 cores); "
            f"most RAM: {worst_m['model']} at {worst_m['maxrss_kib'] / 1024:,.0f} MiB. "
            "Goal: under 120 s and 4096 MiB each.",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", default=MODELS, help="NAME:BATCH entries")
    ap.add_argument("--optimizer", default="adam", choices=["adam", "sgd", "none"])
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / quick_name("capture_scale.md"))
    a = ap.parse_args()
    rows = []
    for item in a.models:
        name, _, batch = item.partition(":")
        r = run_one(name, int(batch or 1), a.optimizer, a.timeout)
        rows.append(r)
        if "error" in r:
            print(f"{name}: error: {r['error']}", flush=True)
        else:
            print(f"{name} b{r['batch']}: {r['ops']} ops, capture {r['capture_s']:.1f} s, process {r['wall_s']:.1f} s "
                  f"({r['cpu_s']:.1f} s CPU), peak RSS {r['maxrss_kib'] / 1024:.0f} MiB", flush=True)
    cmd = command_line()   # as run (with HYBRID_QUICK=1 where regenerate --quick set it)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(table(rows, a.optimizer, cmd))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
