"""Did two regenerate runs give the same figures? Compare every table of two results folders, timings aside.

    python -m benchmarks.compare_runs results/ /tmp/fresh/results/     # exit 1 if a figure differs

Issue 21 asks that running `python -m benchmarks.regenerate --quick` twice changes no figure except measured
timings. Each table's CSV twin is compared column by column (numbers to a relative 1e-9; paths inside either
checkout read as `<repo>`, and the `commit` column is provenance). A column is a
measured timing when its name says so (`TIMING`: wall, solve, search and layout seconds, evaluations per second,
...), and some tables measure this machine as a whole (`MEASURED`: capture speed, the executor's seconds per
iteration, placement's rows costed with this machine's profiled op times): their differences are listed but do
not fail. Anything else that differs is a figure that moved, named with its table, column and first row.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

# Columns whose values are measured wall-clock times or rates on this machine.
TIMING = re.compile(r"(^|[ _/])(seconds|wall_s|wall_1w_s|wall_2w_s|solve_s|build_s|search_s|refine_s|resume_s|"
                    r"layout s|cp-sat s|minimalloc search s|exact_solve_s|eval_ms|eval_ms_mean|ms_per_eval|"
                    r"evals_per_s\w*|pool_evals_per_s|operators_ms|operators_share|exec s/iter|eager s/iter|"
                    r"time_vs_swap_only|swap_plan_ms|setup_s|solve s|time_s)$")
# Tables (or rows of them) that measure this machine: every figure there is a measurement.
MEASURED: dict[str, str] = {
    "capture_scale": "capture time and memory of this machine",
    "planner_speed": "planner evaluations per second",
    "ga_evals_per_second": "evaluations per second",
    "ga_second_core": "generations reached in a wall-clock budget on one and two cores",
    "executor_cpu": "seconds per iteration of the CPU executor",
    "regenerate": "each job's run time",
    "eager_reproducibility": "whether eager PyTorch repeats bitwise on this machine",
}
MEASURED_ROWS: dict[str, tuple[str, str]] = {  # table -> (column, value): rows costed with measured op times
    "placement_latency": ("costs", "measured here"),
}


PROVENANCE = {"commit"}  # which code made a row: differs between two checkouts by design


def _same(a: pd.Series, b: pd.Series) -> bool:
    if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
        x, y = a.to_numpy(dtype=float), b.to_numpy(dtype=float)
        return bool(np.all((np.isnan(x) & np.isnan(y)) | np.isclose(x, y, rtol=1e-9, atol=0.0)))
    return bool((a.astype(str).fillna("") == b.astype(str).fillna("")).all())


def compare_table(a: pd.DataFrame, b: pd.DataFrame, name: str) -> tuple[list[str], list[str]]:
    """(figures that moved, timings that moved), each as 'column (first differing row)'."""
    if list(a.columns) != list(b.columns) or len(a) != len(b):
        return [f"shape: {len(a)}x{len(a.columns)} against {len(b)}x{len(b.columns)}"], []
    keep = np.ones(len(a), dtype=bool)
    if name in MEASURED_ROWS and MEASURED_ROWS[name][0] in a.columns:
        col, val = MEASURED_ROWS[name]
        keep = (a[col].astype(str) != val).to_numpy()
    moved, timed = [], []
    for c in a.columns:
        if _same(a[c], b[c]):
            continue
        rows = [i for i in range(len(a)) if not _same(a[c].iloc[i:i + 1], b[c].iloc[i:i + 1])]
        where = f"{c} (row {rows[0]}: {a[c].iloc[rows[0]]!r} against {b[c].iloc[rows[0]]!r})"
        if TIMING.search(str(c)) or c in PROVENANCE or name in MEASURED or not any(keep[i] for i in rows):
            timed.append(where)
        else:
            moved.append(where)
    return moved, timed


def _at(df: pd.DataFrame, results: Path) -> pd.DataFrame:
    """Paths under the checkout that made the table (plan files, commands) read the same from any clone."""
    root = str(results.resolve().parent)
    def fix(v: object) -> object:
        return v.replace(root, "<repo>") if isinstance(v, str) else v

    return df.apply(lambda col: col.map(fix) if not pd.api.types.is_numeric_dtype(col) else col)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path, help="a results folder")
    ap.add_argument("b", type=Path, help="another results folder (e.g. a second run's, in a fresh clone)")
    args = ap.parse_args()
    moved_any = False
    names = sorted({p.stem for p in args.a.glob("*.csv")} | {p.stem for p in args.b.glob("*.csv")})
    for name in names:
        pa, pb = args.a / f"{name}.csv", args.b / f"{name}.csv"
        if not (pa.exists() and pb.exists()):
            print(f"{name}: only in {args.a if pa.exists() else args.b}")
            continue
        moved, timed = compare_table(_at(pd.read_csv(pa), args.a), _at(pd.read_csv(pb), args.b), name)
        if moved:
            moved_any = True
            print(f"{name}: FIGURES MOVED: {'; '.join(moved)}")
        elif timed:
            why = MEASURED.get(name, "timings")
            print(f"{name}: same figures; measured ({why}) moved: {', '.join(t.split(' (')[0] for t in timed)}")
        else:
            print(f"{name}: identical")
    sys.exit(1 if moved_any else 0)


if __name__ == "__main__":
    main()
