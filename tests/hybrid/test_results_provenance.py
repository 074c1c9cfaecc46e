"""Tables a reader can rerun: no machine path in results/, every table names its commit, and the benchmark
helpers write repository-relative paths and keep quick runs beside full ones."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd
import pytest

from benchmarks import common

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
# an absolute path on some machine: /work/..., /tmp/..., /home/..., C:\..., ~/...
MACHINE_PATH = re.compile(r"(?<![\w.:/~-])(?:/(?:work|tmp|home|Users|root|mnt|scratch|var|opt|data|private)/|"
                          r"[A-Za-z]:\\|~/)")


def machine_paths(text: str) -> list[str]:
    return [text[max(0, m.start() - 20):m.end() + 30] for m in MACHINE_PATH.finditer(text)]


def result_files() -> list[Path]:
    return sorted(p for p in RESULTS.rglob("*") if p.is_file())


def test_no_file_under_results_names_a_machine_path() -> None:
    found = {}
    for p in result_files():
        if p.suffix == ".parquet":
            df = pd.read_parquet(p)
            text = "\n".join(df[c].astype(str).str.cat(sep="\n") for c in df.columns
                             if df[c].dtype == object or pd.api.types.is_string_dtype(df[c]))
        elif p.suffix in (".png", ".pdf", ".svg"):
            continue
        else:
            text = p.read_text(errors="replace")
        if machine_paths(text):
            found[str(p.relative_to(ROOT))] = machine_paths(text)[0]
    assert not found, f"absolute machine paths (write them repository-relative): {found}"


def test_every_table_names_its_commit() -> None:
    missing = [p.name for p in RESULTS.glob("*.md")
               if not re.search(r"\b(code|commit|parent) [0-9a-f]{7,}", p.read_text())]
    assert not missing, f"tables that name no commit: {missing}"


def test_the_pattern_finds_machine_paths_and_passes_relative_ones() -> None:
    assert machine_paths("--graphs /work/main/out/graphs --quick")
    assert machine_paths("`/tmp/milp2/graphs2`")
    assert not machine_paths("--graphs out/graphs/milp, ../shared/benchmarks, 12 GB/s, 1/2, results/x.md")


def test_write_table_writes_repository_relative_paths_and_quick_tables_beside_full_ones(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    monkeypatch.delenv(common.QUICK_ENV, raising=False)
    graphs = common.ROOT / "out" / "graphs"
    df = pd.DataFrame({"graph": ["g"], "plan": [str(graphs / "g.plan.json")], "ms": [1.5]})
    monkeypatch.setattr(sys, "argv", ["benchmarks/x.py", "--graphs", str(graphs), "--quick"])
    md = common.write_table(df, "x", "X", notes=f"plans under {graphs}")
    assert md.name == "x_quick.md" and not (tmp_path / "x.md").exists()      # a quick run never writes x.md
    text = md.read_text() + (tmp_path / "x_quick.csv").read_text()
    assert not machine_paths(text) and str(common.ROOT) not in text
    assert "--graphs out/graphs --quick" in text and "out/graphs/g.plan.json" in text
    monkeypatch.setattr(sys, "argv", ["benchmarks/x.py", "--graphs", "/tmp/elsewhere/graphs"])
    monkeypatch.setenv(common.QUICK_ENV, "1")                                # regenerate --quick's children
    md = common.write_table(df, "x", "X")
    assert md.name == "x_quick.md" and "HYBRID_QUICK=1 python -m benchmarks.x" in md.read_text()
    assert not machine_paths(md.read_text())
    monkeypatch.setenv(common.QUICK_ENV, "0")
    assert common.write_table(df, "x", "X").name == "x.md"
    assert common.quick_stem("milp_scale_vgg_quick") == "milp_scale_vgg_quick"


def test_a_table_made_in_parts_names_the_earlier_commands_first(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(common, "RESULTS", tmp_path)
    monkeypatch.delenv(common.QUICK_ENV, raising=False)
    df = pd.DataFrame({"graph": ["g"], "ms": [1.5]})
    assert common.regenerate_commands("x") == []
    monkeypatch.setattr(sys, "argv", ["benchmarks/x.py", "--models", "vgg19"])
    common.write_table(df, "x", "X")
    first = common.regenerate_commands("x")
    assert first == ["python -m benchmarks.x --models vgg19"]
    monkeypatch.setattr(sys, "argv", ["benchmarks/x.py", "--models", "unet", "--merge", "vgg19"])
    text = common.write_table(df, "x", "X", before=first).read_text()
    assert ("Regenerate: `python -m benchmarks.x --models vgg19` then `python -m benchmarks.x --models unet "
            "--merge vgg19` (from the repository root") in text
    # a third part keeps naming every run before it
    monkeypatch.setattr(sys, "argv", ["benchmarks/x.py", "--models", "bert", "--merge", "vgg19,unet"])
    common.write_table(df, "x", "X", before=common.regenerate_commands("x"))
    assert common.regenerate_commands("x") == ["python -m benchmarks.x --models vgg19",
                                               "python -m benchmarks.x --models unet --merge vgg19",
                                               "python -m benchmarks.x --models bert --merge vgg19,unet"]


def test_repo_relative_rewrites_paths_but_not_ratio_column_names() -> None:
    text = "Columns `<heuristic> /peak` and `repair /peak`; plans under /tmp/elsewhere/plans"
    out = common.repo_relative(text)
    assert "`<heuristic> /peak` and `repair /peak`" in out and not machine_paths(out)
    assert "<elsewhere>/elsewhere/plans" in out


@pytest.mark.parametrize("quick", [False, True])
def test_regenerate_names_each_quick_output_beside_the_full_one(quick: bool) -> None:
    from benchmarks.regenerate import JOBS

    for j in JOBS:
        written = j.written(quick)
        if quick:
            assert all(Path(w).stem.endswith("_quick") for w in written), (j.name, written)
            assert not set(written) & set(j.outputs), j.name
        else:
            assert written == j.outputs


def test_data_files_read_are_named_under_shared_with_their_sha256(tmp_path, monkeypatch) -> None:
    """arena_cpsat named neither its MiniMalloc instance nor its sha256 (a reproducibility audit, helper-98)."""
    import hashlib

    shared = tmp_path / "shared"
    f = shared / "benchmarks" / "memplan" / "B.csv"
    f.parent.mkdir(parents=True)
    f.write_text("id,lower,upper,size\n0,0,1,8\n")
    monkeypatch.setattr(common, "SHARED", shared)
    monkeypatch.setattr(common, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(sys, "argv", ["benchmarks/x.py"])
    monkeypatch.delenv(common.QUICK_ENV, raising=False)
    md = common.write_table(pd.DataFrame({"a": [1]}), "x", "X", data=[f]).read_text()
    sha = hashlib.sha256(f.read_bytes()).hexdigest()[:12]
    assert f"Data read:\n\n- `shared/benchmarks/memplan/B.csv`: sha256 {sha}" in md
    assert not machine_paths(md)
