"""plan.png: the layout space at a glance. Left, every layout that fits: estimated step
against peak memory, by schedule, the finalists ringed at their simulated step. Right,
estimate against simulation over the finalists, so the first tier's error is seen."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

PLOT_NAME = "plan.png"


def plot_plan(candidates: pd.DataFrame, finalists: pd.DataFrame, hbm_gib: float, path: Path) -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fitting = candidates[candidates["fits"].fillna(False)]
    fig, (space, tiers) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [3, 2]})
    for schedule, rows in fitting.groupby("schedule"):
        space.scatter(rows["peak_gib"], rows["est_step_s"], s=4, alpha=0.35, label=schedule, rasterized=True)
    done = finalists.dropna(subset=["step_time_s"]) if not finalists.empty else finalists
    if not done.empty:
        space.scatter(done["peak_gib"], done["step_time_s"], s=28, facecolors="none", edgecolors="black",
                      linewidths=0.8, label="finalists (simulated)")
        best = done.iloc[0]
        space.annotate("best", (best["peak_gib"], best["step_time_s"]), xytext=(-40, -14), textcoords="offset points",
                       arrowprops={"arrowstyle": "-", "linewidth": 0.6})
        low, high = done["step_time_s"].min(), done["est_step_s"].max()
        tiers.scatter(done["step_time_s"], done["est_step_s"], s=14, color="tab:blue")
        tiers.plot([low, high], [low, high], color="grey", linewidth=0.8, label="estimate = simulation")
        tiers.legend(loc="upper left", fontsize=8)
    space.axvline(hbm_gib, color="grey", linestyle=":", linewidth=0.8)
    space.set_xlabel("peak memory per GPU (GiB)")
    space.set_ylabel("step time (s): estimate, or simulated for finalists")
    if not fitting.empty:  # the slowest layouts would squash the ones worth reading
        fastest = fitting["est_step_s"].min()
        space.set_ylim(fastest * 0.95, min(fitting["est_step_s"].max(), 3 * fastest) * 1.02)
    unpriced = int(candidates["fits"].isna().sum())  # a bounded search's: slower than every finalist
    space.set_title(f"{len(fitting):,} layouts that fit, of {len(candidates):,}"
                    + (f" ({unpriced:,} unpriced)" if unpriced else "") + " (up to 3x the fastest shown)", fontsize=10)
    space.legend(fontsize=7, markerscale=2, loc="upper left")
    tiers.set_xlabel("simulated step (s)")
    tiers.set_ylabel("tier-one estimate (s)")
    tiers.set_title(f"{len(done)} finalists", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
