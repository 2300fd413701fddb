"""step_distribution.png: the sampled step times as a histogram and as a cumulative
distribution, with the deterministic step and the percentiles (and their intervals) marked."""

from __future__ import annotations

from pathlib import Path

MARKS = (("p50", "tab:blue"), ("p95", "tab:orange"), ("p99", "tab:red"))


def distribution_figure(steps, stats: dict, title: str):
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)
    hist, cdf = fig.subplots(1, 2, sharex=True)
    steps = np.sort(np.asarray(steps))
    hist.hist(steps, bins=min(60, max(20, len(steps) // 5)), color="tab:grey", alpha=0.7)
    hist.set_ylabel("samples")
    cdf.plot(steps, np.arange(1, len(steps) + 1) / len(steps), drawstyle="steps-post", color="black")
    cdf.set_ylabel("fraction of samples at or below")
    cdf.set_ylim(0, 1.02)
    deterministic = stats["deterministic_step_s"]
    for ax in (hist, cdf):
        ax.axvline(deterministic, color="black", linestyle="--", linewidth=1.2,
                   label=f"deterministic step {deterministic:.4g} s")
        for name, color in MARKS:
            low, high = stats["intervals_s"][name]
            known = low is not None and high is not None
            interval = (f"{stats['confidence']:.0%} CI {low:.4g}-{high:.4g}" if known
                        else "too few samples to bound it")
            value = stats[f"{name}_s"]
            ax.axvline(value, color=color, linewidth=1.2, label=f"{name} {value:.4g} s ({interval})")
            if known:
                ax.axvspan(low, high, color=color, alpha=0.12)
        ax.set_xlabel("step time (s)")
        ax.grid(alpha=0.3)
    cdf.legend(fontsize=8, loc="lower right")
    fig.suptitle(f"{title}: {stats['samples']:,} samples, seed {stats['seed']}; mean "
                 f"{stats['mean_s']:.4g} s ({stats['mean_s'] / deterministic - 1:+.1%} on the deterministic step)",
                 fontsize=11)
    return fig


def plot_distribution(steps, stats: dict, title: str, path: Path) -> Path:
    from ..util.safe_files import write_with
    fig = distribution_figure(steps, stats, title)
    return write_with(path, lambda temp: fig.savefig(temp, dpi=110, format="png"))
