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


def write_table(df: pd.DataFrame, stem: str, title: str, notes: str = "", graphs=(), paper: str = "",
                parquet: bool = False) -> Path:
    """results/<stem>.csv and .md, the .md carrying the command that regenerated it, the code's commit, and
    (given `graphs`, the graph files read) each graph's sha256 and capture settings; `paper` names the paper
    figure or table the result stands beside. `parquet` also writes <stem>.parquet (with every column)."""
    RESULTS.mkdir(exist_ok=True)
    df.to_csv(RESULTS / f"{stem}.csv", index=False)
    if parquet:
        df.to_parquet(RESULTS / f"{stem}.parquet", index=False)
    df = df.drop(columns=["plan"], errors="ignore")  # plan paths point into out/, not part of the table
    script = Path(sys.argv[0])
    module = f"benchmarks.{script.stem}" if script.parent.name == "benchmarks" else script.stem
    cmd = "python -m " + " ".join(shlex.quote(a) for a in [module, *sys.argv[1:]])
    md = [f"# {title}", "",
          f"Regenerate: `{cmd}` (from the repository root; {time.strftime('%Y-%m-%d')}; code {commit()}).", ""]
    prov = provenance(graphs, paper)
    if prov:
        md += [prov, ""]
    if notes:
        md += [notes.strip(), ""]
    md.append(df.to_markdown(index=False, floatfmt=".4g"))
    path = RESULTS / f"{stem}.md"
    path.write_text("\n".join(md) + "\n")
    return path


def commit() -> str:
    """The code's commit (with '+dirty' when the work tree differs), for a table's provenance line."""
    import subprocess

    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "hybrid", "milp", "ga",
                                "executor", "benchmarks"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def graph_provenance(paths) -> str:
    """One markdown line per graph file: name, sha256 (first 12 hex digits) and how it was made (the capture's
    model, batch, training flag and cost model, or 'imported' for files without a `capture` block)."""
    import hashlib
    import json

    lines = []
    for p in sorted({Path(p) for p in paths}):
        data = p.read_bytes()
        sha = hashlib.sha256(data).hexdigest()[:12]
        try:
            d = json.loads(data)
        except ValueError:
            lines.append(f"- `{p.name}` sha256 {sha} (not JSON)")
            continue
        cap = (d.get("capture") or {}) if isinstance(d, dict) else {}
        model = (d.get("model") or {}) if isinstance(d, dict) else {}
        if cap:
            costs = cap.get("costs") or {}
            how = (f"hybrid capture --model {model.get('name', '?')} batch {model.get('batch', '?')}, "
                   f"{'training' if cap.get('training') else 'inference'}, costs {costs.get('model', '?')} on "
                   f"{costs.get('device', '?')}, torch {cap.get('torch', '?')}")
        elif CHECKMATE in p.resolve().parents:
            how = "a Checkmate graph from shared/benchmarks/checkmate-graphs, imported by benchmarks.common"
        else:
            how = "imported or synthetic (no capture block)"
        name = f" ({d['name']})" if isinstance(d, dict) and "name" in d else ""
        lines.append(f"- `{p.name}`{name}: sha256 {sha}, {how}")
    return "\n".join(lines)


def provenance(graphs=(), paper: str = "") -> str:
    """The lines a table carries about where it stands in the paper and which graph files it read."""
    out = []
    if paper:
        out.append(f"Stands beside: {paper}.")
    if graphs:
        out += ["", "Graphs read:", "", graph_provenance(graphs)] if out else ["Graphs read:", "", graph_provenance(graphs)]
    return "\n".join(out)
