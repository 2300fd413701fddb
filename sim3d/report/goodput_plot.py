"""goodput.png: the share of wall time that trains, and the checkpoint interval that gets it,
against the job's GPU count, with the Llama 3 report's own figure beside the model's."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

DPI = 200  # the other figures' (sweep, schedule comparison, Gantt chart)


def goodput_figure(rows: list[dict], chosen: dict, reported: tuple[int, float] | None, title: str,
                   size: str = "screen"):
    """The two panels side by side, or stacked in a paper's column; `size`: a key of SIZES,
    `title` "" draws none."""
    import matplotlib

    from .figure import figure_style, figure_title, font_scale, new_figure
    from .gantt_sizes import SIZES

    width, stacked, font_k = SIZES[size][0], size == "column", font_scale(size)
    panel_height = 0.62 * width if stacked else 0.33 * width
    with matplotlib.rc_context(figure_style(size)):
        fig = new_figure(width, (2 if stacked else 1) * panel_height + 0.5)
        fig.set_layout_engine("constrained")
        share, interval = fig.subplots(2, 1) if stacked else fig.subplots(1, 2)
        gpus = [r["gpus"] for r in rows]
        share.plot(gpus, [100 * r["effective_fraction"] for r in rows], marker="o", color="tab:blue",
                   label="effective training time (model)")
        share.plot([chosen["gpus"]], [100 * chosen["effective_fraction"]], marker="*", markersize=14 * font_k,
                   color="tab:red", linestyle="none", label=f"this run, {chosen['gpus']:,} GPUs")
        if reported:
            share.plot([reported[0]], [100 * reported[1]], marker="^", markersize=9 * font_k, color="black",
                       linestyle="none", label=f"Llama 3 405B report: above {reported[1]:.0%} at {reported[0]:,} GPUs")
        share.set_ylabel("effective training time (%)")
        share.set_ylim(0, 100)
        interval.plot(gpus, [r["interval_min"] for r in rows], marker="o", color="tab:green",
                      label="optimal checkpoint interval (min)")
        interval.plot(gpus, [r["mtbf_h"] * 60 for r in rows], marker="s", color="tab:grey",
                      label="mean time between interruptions (min)")
        interval.set_yscale("log")
        interval.set_ylabel("minutes")
        for ax in (share, interval):
            ax.set_xscale("log", base=2)
            ax.set_xticks(gpus, labels=[f"{n // 1024}k" if n >= 1024 else str(n) for n in gpus])
            ax.set_xlabel("GPUs in the job")
            ax.grid(alpha=0.3, which="both")
        share.legend(loc="lower left")  # where the share, near 100% at first, leaves room
        interval.legend(loc="upper right")  # above the intervals, right of the falling time between failures
        figure_title(fig, title, size)
    return fig


def plot_goodput(rows: list[dict], chosen: dict, reported: tuple[int, float] | None, title: str,
                 paths: Sequence[Path], size: str = "screen") -> list[Path]:
    """The figure written to every path (PNG, PDF, SVG by suffix), each replacing its file whole."""
    from ..util.safe_files import replacing
    from .figure import save
    fig = goodput_figure(rows, chosen, reported, title, size)
    with replacing(*paths) as temps:
        save(fig, temps, DPI)
    return [Path(p) for p in paths]
