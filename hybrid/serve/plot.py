"""Figures of simulated results: SwapAdvisor's Figure 8 (`hybrid serve --plot`, benchmarks/fig8) and the memory-time
frontier (`hybrid frontier`)."""
from __future__ import annotations

from pathlib import Path


def plot_latency(df, path: Path, title: str, notes: dict[str, str] | None = None,  # noqa: ANN001 - a DataFrame
                 footnote: str | None = None) -> None:
    """p99 latency against throughput, a line per policy (and model count), like the paper's Figure 8.
    `notes` adds a few words to a policy's legend entry (not-shared: "the ideal, ..."), `footnote` a line of
    small text under the axes (what the times leave out)."""
    from matplotlib.figure import Figure   # not pyplot: the caller's backend (Jupyter's inline) stays as it was

    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    for (policy, n), part in df.groupby(["policy", "models"], sort=False):
        part = part.sort_values("throughput")
        note = (notes or {}).get(policy)
        ax.plot(part["throughput"], part["p99_s"] * 1e3, marker="o",
                label=f"{policy} ({n})" + (f": {note}" if note else ""))
    ax.set_xlabel("throughput (requests/s)")
    ax.set_ylabel("p99 latency (ms)")
    ax.set_yscale("log")
    # plain numbers on the log axis: matplotlib's minor labels read "9x10^-1" where the range is under a decade
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    plain = FuncFormatter(lambda v, _pos: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
    lo, hi = ax.get_ylim()
    # minor labels where the range is under two decades (else the decades say it and they crowd the axis)
    ax.yaxis.set_minor_formatter(plain if lo > 0 and hi / lo < 100 else NullFormatter())
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8 if notes else None)
    if footnote:
        fig.text(0.01, 0.01, footnote, fontsize=7, ha="left", va="bottom", wrap=True)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
    else:
        fig.tight_layout()
    from hybrid.files import save_figure

    save_figure(fig, path)


def plot_frontier(df, path: Path, title: str) -> None:  # noqa: ANN001 - hybrid.report.frontier's DataFrame
    """Step time against memory (`hybrid frontier`): each memory's plan (markers: hollow where written without
    arena offsets, `laid_out` false; labelled where its search was interrupted), the fastest plan that fits each
    memory (a line), the lower bounds (dashed, from `bound_s`) and other graphs' points (labelled)."""
    from matplotlib.figure import Figure   # not pyplot: the caller's backend (Jupyter's inline) stays as it was

    def laid(part):  # noqa: ANN001, ANN202 - a graph given as a point has no laid_out (None): drawn filled
        return [v is None or v != v or bool(v) for v in part["laid_out"]]

    fig = Figure(figsize=(7, 4.5))
    ax = fig.subplots()
    plans = df[df["kind"] == "plan"].sort_values("usable_bytes")
    ok = plans[plans["makespan_s"].notna()]
    if len(ok):
        ax.plot(ok["usable_MiB"], ok["best_s"] * 1e3, drawstyle="steps-post", color="C0", label="fastest plan that fits")
        mask = laid(ok)
        full = ok[mask]
        bare = ok[[not m for m in mask]]
        if len(full):
            ax.plot(full["usable_MiB"], full["makespan_s"] * 1e3, "o", color="C0", label="hybrid optimize at this memory")
        if len(bare):
            ax.plot(bare["usable_MiB"], bare["makespan_s"] * 1e3, "o", color="C0", markerfacecolor="none",
                    label="no arena offsets: compacts at run time")
        stopped = ok[ok["interrupted"].astype(bool)]
        if len(stopped):
            ax.plot(stopped["usable_MiB"], stopped["makespan_s"] * 1e3, "x", color="C3", ms=9,
                    label="interrupted: best plan before the stop")
            for _, r in stopped.iterrows():
                ax.annotate("interrupted", (r["usable_MiB"], r["makespan_s"] * 1e3), textcoords="offset points",
                            xytext=(4, 6), fontsize=7, color="C3")
    for i, (label, part) in enumerate(df[df["kind"] == "bound"].groupby("label", sort=False)):
        part = part.sort_values("usable_bytes")
        ax.plot(part["usable_MiB"], part["bound_s"] * 1e3, "--", color=f"C{i + 1}", label=label)
    ideal = df.loc[df["kind"] != "point", "ideal_s"].dropna()
    if len(ideal):
        ax.axhline(float(ideal.iloc[0]) * 1e3, color="grey", lw=0.8, ls=":", label="ideal (compute only)")
    points = df[df["kind"] == "point"]
    for i, ((_, r), full) in enumerate(zip(points.iterrows(), laid(points))):
        ax.plot([r["usable_MiB"]], [r["makespan_s"] * 1e3], marker="s", ls="", color=f"C{i + 4}",
                markerfacecolor=None if full else "none",
                label=r["label"] if full else f"{r['label']} (no arena offsets)")
    ax.set_xlabel("device memory a plan may fill (MiB)")
    ax.set_ylabel("step time (ms)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    from hybrid.files import save_figure

    save_figure(fig, path)
