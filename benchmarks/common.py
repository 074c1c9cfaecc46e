"""Shared by the benchmark scripts: where the public data is, how graphs are imported, how tables are written."""
from __future__ import annotations

import os
import shlex
import sys
import time
from pathlib import Path

import pandas as pd

from hybrid.device import Device, preset
from hybrid.graph import Graph
from hybrid.graph.importers.checkmate import load_checkmate

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results"
SHARED = Path(os.environ.get("HYBRID_SHARED", ROOT.parent / "shared"))
CHECKMATE = SHARED / "benchmarks" / "checkmate-graphs"


def checkmate_train_files() -> list[Path]:
    files = sorted(CHECKMATE.glob("*_train_nx.json"))
    if not files:
        sys.exit(f"no Checkmate graphs under {CHECKMATE}; set HYBRID_SHARED to the folder holding benchmarks/")
    return files


def balanced_checkmate(path: Path, device: Device | None = None) -> Graph:
    """Import with the 'balanced' time scale: the iteration's compute equals moving all its tensor bytes
    once over the device's host link. The files' cost units are unstated and differ between graphs; this
    puts every graph in the regime where swapping can be partly, not fully, hidden."""
    dev = device or preset("v100-16gb")
    raw = load_checkmate(path, scale_to=1.0)
    total_bytes = sum(t.bytes for t in raw.tensors)
    return load_checkmate(path, scale_to=total_bytes / dev.h2d_bytes_per_s, name=short_name(path))


def short_name(path: Path) -> str:
    return path.name.replace("_nx.json", "").replace(".json", "")


def write_table(df: pd.DataFrame, stem: str, title: str, notes: str = "") -> Path:
    """results/<stem>.csv and .md, the .md carrying the command that regenerated it."""
    RESULTS.mkdir(exist_ok=True)
    df.to_csv(RESULTS / f"{stem}.csv", index=False)
    script = Path(sys.argv[0])
    module = f"benchmarks.{script.stem}" if script.parent.name == "benchmarks" else script.stem
    cmd = "python -m " + " ".join(shlex.quote(a) for a in [module, *sys.argv[1:]])
    md = [f"# {title}", "", f"Regenerate: `{cmd}` (from the repository root; {time.strftime('%Y-%m-%d')}).", ""]
    if notes:
        md += [notes.strip(), ""]
    md.append(df.to_markdown(index=False, floatfmt=".4g"))
    path = RESULTS / f"{stem}.md"
    path.write_text("\n".join(md) + "\n")
    return path
