"""goodput.png: the share of wall time that trains, and the checkpoint interval that gets it,
against the job's GPU count, with the Llama 3 report's own figure beside the model's."""

from __future__ import annotations

from pathlib import Path


def goodput_figure(rows: list[dict], chosen: dict, reported: tuple[int, float] | None, title: str):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), layout="constrained")
    FigureCanvasAgg(fig)
    share, interval = fig.subplots(1, 2)
    gpus = [r["gpus"] for r in rows]
    share.plot(gpus, [100 * r["effective_fraction"] for r in rows], marker="o", color="tab:blue",
               label="effective training time (model)")
    share.plot([chosen["gpus"]], [100 * chosen["effective_fraction"]], marker="*", markersize=14, color="tab:red",
               linestyle="none", label=f"this run, {chosen['gpus']:,} GPUs")
    if reported:
        share.plot([reported[0]], [100 * reported[1]], marker="^", markersize=9, color="black", linestyle="none",
                   label=f"Llama 3 405B report: above {reported[1]:.0%} at {reported[0]:,} GPUs")
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
        ax.legend(fontsize=8, loc="lower left")
    fig.suptitle(title, fontsize=11)
    return fig


def plot_goodput(rows: list[dict], chosen: dict, reported: tuple[int, float] | None, title: str,
                 path: Path) -> Path:
    from ..util.safe_files import write_with
    fig = goodput_figure(rows, chosen, reported, title)
    return write_with(path, lambda temp: fig.savefig(temp, dpi=130, format="png"))
