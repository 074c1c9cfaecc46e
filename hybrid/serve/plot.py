"""Figures of simulated results: SwapAdvisor's Figure 8 (`hybrid serve --plot`, benchmarks/fig8) and the memory-time
frontier (`hybrid frontier`)."""
from __future__ import annotations

from pathlib import Path


def plot_latency(df, path: Path, title: str) -> None:  # noqa: ANN001 - a pandas DataFrame
    """p99 latency against throughput, a line per policy (and model count), like the paper's Figure 8."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for (policy, n), part in df.groupby(["policy", "models"], sort=False):
        part = part.sort_values("throughput")
        ax.plot(part["throughput"], part["p99_s"] * 1e3, marker="o", label=f"{policy} ({n})")
    ax.set_xlabel("throughput (requests/s)")
    ax.set_ylabel("p99 latency (ms)")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    from hybrid.files import save_figure

    save_figure(fig, path)
    plt.close(fig)


def plot_frontier(df, path: Path, title: str) -> None:  # noqa: ANN001 - hybrid.report.frontier's DataFrame
    """Step time against memory (`hybrid frontier`): each memory's plan (markers), the fastest plan that fits each
    memory (a line), the lower bounds (dashed) and other graphs' points (labelled)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    plans = df[df["kind"] == "plan"].sort_values("memory_bytes")
    ok = plans[plans["makespan_s"].notna()]
    if len(ok):
        ax.plot(ok["memory_MiB"], ok["best_s"] * 1e3, drawstyle="steps-post", color="C0", label="fastest plan that fits")
        ax.plot(ok["memory_MiB"], ok["makespan_s"] * 1e3, "o", color="C0", label="hybrid optimize at this memory")
    for i, (label, part) in enumerate(df[df["kind"] == "bound"].groupby("label", sort=False)):
        part = part.sort_values("memory_bytes")
        ax.plot(part["memory_MiB"], part["makespan_s"] * 1e3, "--", color=f"C{i + 1}", label=label)
    ideal = df.loc[df["kind"] != "point", "ideal_s"].dropna()
    if len(ideal):
        ax.axhline(float(ideal.iloc[0]) * 1e3, color="grey", lw=0.8, ls=":", label="ideal (compute only)")
    for i, (_, r) in enumerate(df[df["kind"] == "point"].iterrows()):
        ax.plot([r["memory_MiB"]], [r["makespan_s"] * 1e3], marker="s", ls="", color=f"C{i + 4}", label=r["label"])
    ax.set_xlabel("device memory a plan may fill (MiB)")
    ax.set_ylabel("step time (ms)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    from hybrid.files import save_figure

    save_figure(fig, path)
    plt.close(fig)
