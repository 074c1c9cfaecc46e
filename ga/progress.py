"""Progress: a live line per generation, and the convergence log (CSV, DataFrame, a plot like Figure 9)."""
from __future__ import annotations

import csv
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TextIO

import numpy as np

from hybrid.units import format_seconds

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class GenerationStats:
    """One row of the convergence log: the population alive after a generation's selection."""

    time_s: float          # search time so far (continues across a resume)
    generation: int        # 0 = the initial population
    evaluations: int       # total so far
    best_s: float          # best / mean / worst makespan of the population (feasible ones)
    mean_s: float
    worst_s: float
    best_ever_s: float     # best makespan seen so far on this row's memory (also among children that did not survive)
    infeasible: int        # population members with no feasible pool
    evals_per_s: float     # this generation's evaluation rate
    # the device memory these makespans are scored on: a headroom search's is less than the device's, and one
    # re-calibrated halfway goes on with less still, where its best starts over (0: a log written before this)
    memory_bytes: int = 0

    @staticmethod
    def of(times: np.ndarray, **kw: float) -> "GenerationStats":
        ok = times[np.isfinite(times)]
        best, mean, worst = (float(ok.min()), float(ok.mean()), float(ok.max())) if len(ok) else (np.inf,) * 3
        return GenerationStats(best_s=best, mean_s=mean, worst_s=worst, infeasible=int(len(times) - len(ok)), **kw)


COLUMNS = [f.name for f in fields(GenerationStats)]
_INTS = ("generation", "evaluations", "infeasible", "memory_bytes")


def format_duration(seconds: float) -> str:
    """Time left as 1h02m, 4m05s or 12s."""
    s = int(round(max(0.0, seconds)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class ConvergenceLog:
    def __init__(self, rows: list[GenerationStats] | None = None) -> None:
        self.rows: list[GenerationStats] = list(rows or [])

    def append(self, row: GenerationStats) -> None:
        self.rows.append(row)

    def to_frame(self) -> "pd.DataFrame":
        import pandas as pd

        return pd.DataFrame([asdict(r) for r in self.rows], columns=COLUMNS)

    def to_csv(self, path: str | Path) -> None:
        from hybrid.files import atomic_open

        with atomic_open(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(COLUMNS)
            for r in self.rows:
                w.writerow([repr(v) if isinstance(v, float) else v for v in asdict(r).values()])

    @staticmethod
    def read_csv(path: str | Path) -> "ConvergenceLog":
        with open(path, newline="") as f:
            rows = [GenerationStats(**{k: (int(v) if k in _INTS else float(v)) for k, v in r.items()})
                    for r in csv.DictReader(f)]
        return ConvergenceLog(rows)

    def plot(self, path: str | Path, title: str = "", ideal_s: float | None = None,
             lower_bound_s: float | None = None) -> None:
        """Best, mean and worst of the population against search time (the paper's Figure 9)."""
        from matplotlib.figure import Figure   # not pyplot: the caller's backend (Jupyter's inline) stays as it was

        df = self.to_frame()
        fig = Figure(figsize=(6.4, 4.0))
        ax = fig.subplots()
        finite = df["best_s"][np.isfinite(df["best_s"])]
        typical = float(finite.median()) if len(finite) else 1.0
        unit, scale = ("us", 1e6) if typical < 1e-3 else ("ms", 1e3) if typical < 1.0 else ("s", 1.0)
        for col, label, style in (("worst_s", "worst", ":"), ("mean_s", "mean", "--"), ("best_s", "best", "-")):
            ax.plot(df["time_s"], df[col] * scale, style, label=label)
        if ideal_s is not None:
            ax.axhline(ideal_s * scale, color="grey", lw=0.8, label="ideal (infinite memory)")
        if lower_bound_s is not None and (ideal_s is None or lower_bound_s > ideal_s * (1 + 1e-9)):
            ax.axhline(lower_bound_s * scale, color="grey", lw=0.8, ls="-.", label="lower bound (graph_bound)")
        _mark_memory_changes(ax, df)
        ax.set_xlabel("search time (s)")
        ax.set_ylabel(f"time per iteration ({unit})")
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        from hybrid.files import save_figure

        save_figure(fig, path)


def _mark_memory_changes(ax, df: "pd.DataFrame") -> None:  # noqa: ANN001 - a matplotlib Axes
    """A vertical line where the search went on with less memory (a headroom re-calibrated halfway): the
    makespans after it are on the smaller memory, so the curves may rise there."""
    from hybrid.units import format_bytes

    mem = df["memory_bytes"].to_numpy()
    for k in np.nonzero((mem[1:] != mem[:-1]) & (mem[:-1] > 0) & (mem[1:] > 0))[0] + 1:
        ax.axvline(df["time_s"].iloc[k], color="tab:red", lw=0.8, ls="--",
                   label=f"searched on {format_bytes(int(mem[k]))} from here (was {format_bytes(int(mem[k - 1]))})")


class ProgressLine:
    """Prints a generation's line: overwritten in place on a terminal, every `interval` seconds otherwise."""

    def __init__(self, stream: TextIO | None = None, interval_s: float = 5.0,
                 time_left: Callable[[], float | None] | None = None) -> None:
        self.stream = stream or sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval_s = interval_s
        self.time_left = time_left
        self._last = -np.inf
        self._width = 0

    def __call__(self, s: GenerationStats, force: bool = False) -> None:
        now = time.monotonic()
        if not (self.live or force or now - self._last >= self.interval_s):
            return
        self._last = now
        left = self.time_left() if self.time_left else None
        line = (f"gen {s.generation:4d}  best {format_seconds(s.best_ever_s)}  pop best {format_seconds(s.best_s)}"
                f" mean {format_seconds(s.mean_s)} worst {format_seconds(s.worst_s)}  {s.evals_per_s:.0f} evals/s"
                + (f"  {format_duration(left)} left" if left is not None else ""))
        if self.live:
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.live and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0
