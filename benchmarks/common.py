"""Shared by the benchmark scripts: where the public data is, how graphs are imported, how tables are written."""
from __future__ import annotations

import os
import re
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from typing import TYPE_CHECKING

import pandas as pd

from hybrid.device import Device, preset
from hybrid.graph import Graph
from hybrid.graph.importers.checkmate import load_checkmate

if TYPE_CHECKING:
    from hybrid.capture.profile import MeasureReport, Profile

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


QUICK_ENV = "HYBRID_QUICK"   # set to 1 by `regenerate --quick` for jobs whose quick budgets are flags, not --quick
_ABS_PATH = re.compile(r"(?<![\w.~$-])/[^\s,;:=|'\"`()\[\]]+")


def is_quick() -> bool:
    """This run is a quick one: the script got --quick, or regenerate --quick started it."""
    return "--quick" in sys.argv[1:] or os.environ.get(QUICK_ENV, "") not in ("", "0")


def quick_stem(stem: str) -> str:
    """`stem` as this run writes it: `<stem>_quick` in a quick run, so that a quick run never replaces a full
    run's table (nor its figures, parts or plots: name them with this too)."""
    return stem if not is_quick() or stem.endswith("_quick") else f"{stem}_quick"


def quick_name(filename: str) -> str:
    """A file name as this run writes it: `fig8.png` -> `fig8_quick.png` in a quick run (`quick_stem`)."""
    p = Path(filename)
    return str(p.with_name(quick_stem(p.stem) + p.suffix))


def repo_path(path: str | Path) -> str:
    """`path` as a table names it: relative to the repository root, shared data as `../shared/...`; a path
    elsewhere on this machine (a temporary folder) is named by its last two parts under `<elsewhere>/`, since a
    reader could not open it anyway. Never this machine's absolute path."""
    p = Path(os.path.abspath(path))
    for base, shown in ((ROOT, ""), (SHARED.resolve(), "../shared/"), (SHARED, "../shared/")):
        try:
            rel = p.relative_to(base)
        except ValueError:
            continue
        return (shown + rel.as_posix()) if str(rel) != "." else (shown.rstrip("/") or ".")
    return "<elsewhere>/" + "/".join(p.parts[-2:])


def repo_relative(text: str) -> str:
    """`text` (a command line, a cell) with every absolute path in it written by `repo_path`. A single
    component after a space is prose, not a path: a column named `greedy-size /peak` stays as it is."""
    return _ABS_PATH.sub(lambda m: repo_path(m.group(0)) if m.group(0).count("/") > 1 else m.group(0), text)


def relative_cells(df: pd.DataFrame) -> pd.DataFrame:
    """The frame with absolute paths in its text cells (plan files under out/, say) made repository-relative."""
    out = df.copy()
    for col in out.columns:
        if out[col].dtype == object or pd.api.types.is_string_dtype(out[col]):
            out[col] = out[col].map(lambda v: repo_relative(v) if isinstance(v, str) else v)
    return out


def command_line() -> str:
    """The command that ran this script, as a reader reruns it from the repository root."""
    script = Path(sys.argv[0])
    module = f"benchmarks.{script.stem}" if script.parent.name == "benchmarks" else script.stem
    cmd = "python -m " + " ".join(shlex.quote(repo_relative(a)) for a in [module, *sys.argv[1:]])
    if os.environ.get(QUICK_ENV, "") not in ("", "0") and "--quick" not in sys.argv[1:]:
        cmd = f"{QUICK_ENV}=1 {cmd}"
    return cmd


def regenerate_commands(stem: str) -> list[str]:
    """The commands on results/<stem>.md's Regenerate line, in order (what made that table; a table made in
    parts names each), or [] where there is none."""
    path = RESULTS / f"{stem}.md"
    if not path.exists():
        return []
    for line in path.read_text().splitlines():
        if line.startswith("Regenerate: `"):
            return line.split(" (from the repository root")[0].split("`")[1::2]
    return []


def write_table(df: pd.DataFrame, stem: str, title: str, notes: str = "", graphs=(), paper: str = "",
                parquet: bool = False, before: Sequence[str] = (), data=()) -> Path:
    """results/<stem>.csv and .md, the .md carrying the command that regenerated it, the code's commit, and
    (given `graphs`, the graph files read) each graph's sha256 and capture settings, (given `data`, other files
    read: allocation instances) each one's path and sha256; `paper` names the paper figure or table the result
    stands beside. `parquet` also writes <stem>.parquet (with every column).
    `before`: the commands that made the rows this run kept (a table made in parts), named first.
    A quick run writes <stem>_quick.* (`quick_stem`); every path is written repository-relative."""
    RESULTS.mkdir(exist_ok=True)
    stem = quick_stem(stem)
    df = relative_cells(df)
    df.to_csv(RESULTS / f"{stem}.csv", index=False)
    if parquet:
        df.to_parquet(RESULTS / f"{stem}.parquet", index=False)
    df = df.drop(columns=["plan"], errors="ignore")  # plan paths point into out/, not part of the table
    cmd = "` then `".join(dict.fromkeys([*before, command_line()]))   # each run once, in order
    md = [f"# {title}", "",
          f"Regenerate: `{cmd}` (from the repository root; {time.strftime('%Y-%m-%d')}; code {commit()}).", ""]
    prov = provenance(graphs, paper, data)
    if prov:
        md += [prov, ""]
    if notes:
        md += [repo_relative(notes.strip()), ""]
    md.append(df.to_markdown(index=False, floatfmt=".4g"))
    path = RESULTS / f"{stem}.md"
    path.write_text("\n".join(md) + "\n")
    return path


def commit() -> str:
    """The code's commit (with '+dirty' when the work tree differs), for a table's provenance line; on a
    machine sent a copy of the work tree without git (a lent GPU), HYBRID_COMMIT names it."""
    import subprocess

    if os.environ.get("HYBRID_COMMIT"):
        return os.environ["HYBRID_COMMIT"]
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
        elif CHECKMATE.resolve() in p.resolve().parents:   # both resolved: ../shared may be a link
            how = "a Checkmate graph from shared/benchmarks/checkmate-graphs, imported by benchmarks.common"
        else:
            how = "imported or synthetic (no capture block)"
        name = f" ({d['name']})" if isinstance(d, dict) and "name" in d else ""
        lines.append(f"- `{p.name}`{name}: sha256 {sha}, {how}")
    return "\n".join(lines)


def data_provenance(paths) -> str:
    """One markdown line per data file read that is not a graph (an allocation instance): its path under the
    shared data folder (`shared/...`; else its name) and sha256 (first 12 hex digits)."""
    import hashlib

    lines = []
    for p in sorted({Path(p) for p in paths}):
        sha = hashlib.sha256(p.read_bytes()).hexdigest()[:12]
        try:
            name = f"shared/{p.resolve().relative_to(SHARED.resolve()).as_posix()}"
        except ValueError:
            name = p.name
        lines.append(f"- `{name}`: sha256 {sha}")
    return "\n".join(lines)


def provenance(graphs=(), paper: str = "", data=()) -> str:
    """The lines a table carries about where it stands in the paper and which graph (and other data) files it
    read."""
    out: list[str] = []
    if paper:
        out.append(f"Stands beside: {paper}.")
    for title, files, lines in (("Graphs read:", graphs, graph_provenance), ("Data read:", data, data_provenance)):
        if files:
            out += (["", title, "", lines(files)] if out else [title, "", lines(files)])
    return "\n".join(out)


PROFILE_CACHE_ENV = "HYBRID_PROFILE_CACHE"   # a folder of op-time profiles kept between GPU sessions
PROFILE_CACHE_VERSION = 1   # raised when the profiler's entries change meaning: older files are then not read


def profile_cache_path(folder: str | Path, backend: str, device_name: str, torch_version: str) -> Path:
    """The one file in `folder` for this device (a GPU's name; on the CPU, only the architecture: the smoke
    test's), torch and profiler version: a profile measured on another card or torch is never reused."""
    name = f"{backend}-{device_name}-torch{torch_version}-v{PROFILE_CACHE_VERSION}"
    return Path(folder) / f"{re.sub(r'[^A-Za-z0-9.]+', '-', name).strip('-').lower()}.json"


def profile_cache_file(folder: str | Path, backend: str) -> Path:
    """`profile_cache_path` for this machine's device of `backend` (cuda: the current GPU)."""
    import torch

    from hybrid.capture.profile import _device_name

    dev = torch.device("cuda" if backend == "cuda" else "cpu")
    return profile_cache_path(folder, backend, _device_name(dev), torch.__version__)


def measured_profile(graph: Graph, backend: str, cache: str | Path | None = None, **measure: object
                     ) -> tuple["Profile", "MeasureReport", str]:
    """`graph`'s op times measured on `backend` (hybrid.capture.profile.measure_profile), reusing the op
    signatures an earlier run measured on this device and torch (`cache`: a folder, default
    $HYBRID_PROFILE_CACHE; none: measure all) and saving the merged profile there. A lent GPU's minutes are
    few: a profile brought back from one session spares the next its measurement (ResNet-50's took 1.3 of its
    4.2 minutes on the H200). Returns (profile, report, note: what was reused, for the table)."""
    import torch

    from hybrid.capture.profile import Profile, _device_name, measure_profile

    folder = cache if cache is not None else os.environ.get(PROFILE_CACHE_ENV) or None
    if folder is None:
        prof, rep = measure_profile(graph, backend=backend, **measure)  # type: ignore[arg-type]
        return prof, rep, f"{rep.measured} op signatures measured"
    path = profile_cache_file(folder, backend)
    old = path.exists()
    prof = (Profile.load(path) if old else
            Profile(backend, _device_name(torch.device("cuda" if backend == "cuda" else "cpu")), {}, torch.__version__))
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = [len(prof.entries)]

    def save_as_it_goes(done: int, todo: int) -> None:   # a stage stopped at its cap keeps what it measured
        if len(prof.entries) >= saved[0] + 16:
            prof.save(path)
            saved[0] = len(prof.entries)

    prof, rep = measure_profile(graph, profile=prof, backend=backend, progress=save_as_it_goes,
                                **measure)  # type: ignore[arg-type]
    prof.save(path)
    return prof, rep, (f"{rep.measured} op signatures measured, {rep.reused} reused from {path.name}"
                       if old else f"{rep.measured} op signatures measured (saved as {path.name})")
