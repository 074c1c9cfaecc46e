"""SwapAdvisor's Figure 8 picture: p99 latency against throughput, for `hybrid serve --plot` and benchmarks/fig8."""
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
