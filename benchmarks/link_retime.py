"""What host link explains a GPU session's measured step times: its plans made again here and re-timed.

`benchmarks/executor_gpu.py` plans every row on a device whose host link it measured (bandwidth each way, a
latency per copy), runs the plans, and compares measured with simulated time (issue 31: within 5% on every row
not host-bound). On the H200 (results/executor_gpu_h200.md, 2026-11-30) the naive rows ran 0.836x and 0.850x
their simulated time and size classes 0.940x. This makes the baselines' plans of that table again from the same
inputs (the model captured here, the card's op-time profile, the measured link and reserve: `simulated_ms` must
equal the table's, column `same_plan`) and re-times each with other link terms:

- `implied_latency_us`: for a plan that runs on one stream (naive: every copy on the critical path), the
  latency per copy at which its simulated time equals the measured one: (simulated - measured) / copies less
  than the link's;
- `retimed_ms`: the plan re-timed at the measured link, each node started as soon as its dependencies and
  its stream allow (`executor.measure`'s re-timing, as the executor issues it): where it is below
  `simulated_ms` the plan's own timeline leaves gaps (Belady's), and the ratios below carry that offset;
- `m/s <latency>, <rate>`: measured / re-timed, every copy taking bytes / (rate x the measured one-way rate) +
  latency, stream orders and dependencies as the plan has them. The latency is fitted to the one-stream rows
  (their `implied_latency_us`, so they are 1.000x there by construction) and the rates are tried: a fit to
  these rows of one card, not a measurement.

The written plan's rows (a 15 s search on the GPU's machine) are not made again: a search's plan depends on the
machine's speed. Read: the link's latency was timed as one synchronized copy from the host (launch and
synchronize), while the replayed CUDA graphs copy back to back; `measure_link` now times chains of copies recorded
as CUDA graphs, and the rates with both directions copying at once (the next GPU session measures them).

    python -m benchmarks.link_retime          # results/link_retime.md (about 2 minutes)
"""
from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

import numpy as np
import pandas as pd

from benchmarks.common import ROOT, write_table
from benchmarks.executor_gpu import FULL, make_plans
from benchmarks.vs_torch_replay import PROFILE, gpu_graph
from hybrid.swap.augmented import serialized
from hybrid.capture.api import capture_model
from hybrid.capture.profile import Profile
from hybrid.device import Device
from hybrid.graph.info import unswapped_peak
from hybrid.plan import Plan
from hybrid.simulator import resimulate
from hybrid.swap import kernel as K
from hybrid.swap.from_plan import from_plan

MiB = 2 ** 20
TABLE = "results/executor_gpu_h200.json"
RESERVE_MIB = 33.0   # what cuBLAS kept on that H200 (gpu_preflight's line, 2026-11-30)


def retimed_s(aug: Any, latency_s: float, rate: float) -> float:
    """The makespan of a plan's augmented graph (`from_plan`) with every copy re-timed: bytes / (rate x its
    device's rate) + latency_s."""
    dur = aug.durations().copy()
    copy = (aug.kind == K.SWAP_IN) | (aug.kind == K.SWAP_OUT)
    dur[copy] = (dur[copy] - aug.device.transfer_latency_s) / rate + latency_s
    _, end = resimulate(aug, durations=dur)
    return float(end.max()) if len(end) else 0.0


def copies(plan: Plan) -> int:
    return sum(1 for e in plan.events if e.kind in ("swap_in", "swap_out"))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--table", default=TABLE, help="a GPU session's executor_gpu .json (rows, link)")
    ap.add_argument("--profile", default=PROFILE, help="that card's op-time profile (benchmarks/profiles/)")
    ap.add_argument("--reserve-mib", type=float, default=RESERVE_MIB, help="cuBLAS's kept bytes on that card (MiB)")
    ap.add_argument("--rates", default="1,0.95,0.92", help="one-way rate factors to re-time with, comma-separated")
    a = ap.parse_args(argv)
    data = json.loads((ROOT / a.table).read_text())
    link, measured = data["link"], data["rows"]
    profile = Profile.load(ROOT / a.profile)
    lat0 = float(link["latency_s"])
    rates = [float(x) for x in a.rates.split(",")]
    made: list[tuple[dict, Any, Plan]] = []
    for info in data["infos"]:
        case = next(c for c in FULL if c[0] == info["model"] and c[1] == info["batch"])
        name, batch, ov, opt, options = case
        print(f"{name}: capture (batch {batch})", flush=True)
        roof = capture_model(name, batch, optimizer=opt, lr=0.01, optimizer_options=options or None, overrides=ov,
                             device="h100-80gb")
        g = gpu_graph(roof, profile)
        peak = unswapped_peak(g)
        for mem in dict.fromkeys(r["memory"] for r in measured if r["model"] == name):
            frac = float(mem.rstrip("%")) / 100
            d = Device("h200-measured", int(peak * frac), link["h2d_bytes_per_s"], link["d2h_bytes_per_s"], lat0,
                       reserve_bytes=int(a.reserve_mib * MiB))
            plans = make_plans(g, g, d, 0)
            for r in measured:
                if r["model"] == name and r["memory"] == mem and r["plan"] in plans and "measured_s" in r \
                        and "roofline" not in r["plan"]:
                    made.append((r, g, plans[r["plan"]]))
    implied = []
    rows: list[dict] = []
    augs = [from_plan(g, p) for _, g, p in made]
    for (r, g, p), aug in zip(made, augs):
        n = copies(p)
        row = {"model": r["model"], "memory": r["memory"], "plan": r["plan"], "copies": n,
               "one_stream": serialized(p), "measured_ms": r["measured_s"] * 1e3,
               "simulated_ms": p.makespan_s * 1e3, "retimed_ms": retimed_s(aug, lat0, 1.0) * 1e3,
               "same_plan": bool(np.isclose(p.makespan_s, r["simulated_s"], rtol=1e-6))}
        if serialized(p) and n:
            row["implied_latency_us"] = (lat0 - (p.makespan_s - r["measured_s"]) / n) * 1e6
            implied.append(row["implied_latency_us"])
        rows.append(row)
    fit = statistics.mean(implied) * 1e-6 if implied else lat0
    settings = [(lat0, 1.0)] + [(fit, f) for f in rates]
    label = lambda lat, f: f"m/s {lat * 1e6:.1f} us, {f:g}x"   # noqa: E731
    for row, (r, _, p), aug in zip(rows, made, augs):
        for lat, f in settings:
            row[label(lat, f)] = r["measured_s"] / retimed_s(aug, lat, f)
    df = pd.DataFrame(rows)
    within = {label(lat, f): int(((df[label(lat, f)] - 1).abs() <= 0.05).sum()) for lat, f in settings}
    text = (f"Latency per copy implied by the one-stream rows: {', '.join(f'{x:.2f}' for x in implied)} us "
            f"(the link measured {lat0 * 1e6:.1f} us). Rows within 5% of measured: " +
            "; ".join(f"{k.removeprefix('m/s ')}: {v} of {len(df)}" for k, v in within.items()) +
            f". Every plan the table's: {bool(df['same_plan'].all())}.")
    notes = (f"{__doc__.split(chr(10) + chr(10), 1)[1].split('    python')[0].strip()}\n\nRe-timed: `{a.table}` "
             f"(h2d {link['h2d_bytes_per_s'] / 1e9:.1f} GB/s, d2h {link['d2h_bytes_per_s'] / 1e9:.1f} GB/s, latency "
             f"{lat0 * 1e6:.1f} us) with `{a.profile}`, reserve {a.reserve_mib:g} MiB.\n\n{text}")
    path = write_table(df, "link_retime", "The host link a GPU session's step times imply", notes)
    print(f"wrote {path.relative_to(ROOT)}: {text}")


if __name__ == "__main__":
    main()
