"""How busy the cluster's links were over the step (`Result.links`), as a picture: the busiest
link directions, and for each kind of link (NVLink, PCIe, NIC to leaf, leaf to spine, spine to
core) how its busy fractions spread. It reads `links` as columns (a DataFrame or a dict of
arrays), so the plotting process needs no pandas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.transforms import blended_transform_factory, offset_copy

from .figure import new_figure, place_axes, save, text_inches, widest

KIND_COLORS = {"nvlink": "#4c72b0", "pcie": "#8172b2", "ib": "#dd8452", "uplink": "#c44e52", "core": "#8c1c13"}
DPI = 120
TICK_GAP_IN = 7 / 72  # where matplotlib puts a tick label: tick length + pad, 3.5 pt each
KIND_NAMES = {"nvlink": "NVLink", "pcie": "GPU-NIC (PCIe)", "ib": "NIC-leaf (IB)", "uplink": "leaf-spine",
              "core": "spine-core"}


def plot_links(links, paths: list[Path] | Path, title: str = "", top: int = 16) -> list[Path]:
    """`links` in `Result.links`'s order (busiest first)."""
    paths = [paths] if isinstance(paths, Path) else list(paths)
    links = {name: np.asarray(links[name]) for name in ("src", "dst", "kind", "bytes", "busy_fraction")}
    link_kind = links["kind"]
    fig = new_figure(12, 5, DPI)
    left, right = fig.add_axes((0.1, 0.1, 0.4, 0.8)), fig.add_axes((0.6, 0.1, 0.3, 0.8))
    present = set(link_kind.tolist())
    kinds = [k for k in KIND_NAMES if k in present] + sorted(present - set(KIND_NAMES))
    per_kind = max(1, top // max(1, len(kinds)))  # the busiest of every kind, so no kind hides another
    counts: dict[str, int] = {}
    picked = []  # the first per_kind rows of each kind: its busiest
    for i, k in enumerate(link_kind.tolist()):
        counts[k] = counts.get(k, 0) + 1
        if counts[k] <= per_kind:
            picked.append(i)
    picked = np.array(picked, dtype=int)
    picked = picked[np.argsort(links["busy_fraction"][picked], kind="stable")]
    busiest = {name: column[picked] for name, column in links.items()}
    labels = [f"{src} → {dst}" for src, dst in zip(busiest["src"], busiest["dst"])]
    left.barh(range(len(labels)), busiest["busy_fraction"] * 100,
              color=[KIND_COLORS.get(k, "grey") for k in busiest["kind"]])
    # The bars' names are plain texts where tick labels would sit, not y ticks: a tick builds
    # lines, markers and a copy of its properties (a third of this plot's time for 16 bars).
    left.set_yticks([])
    beside = offset_copy(blended_transform_factory(left.transAxes, left.transData), fig=fig, x=-TICK_GAP_IN,
                         units="inches")
    for y, (label, frac, nbytes) in enumerate(zip(labels, busiest["busy_fraction"], busiest["bytes"])):
        left.text(0, y, label, transform=beside, ha="right", va="center", fontsize=7)
        left.text(frac * 100, y, f" {nbytes / 1e9:,.1f} GB", va="center", fontsize=7)
    left.set_xlabel("busy (% of the step, mean utilisation of that direction)")
    left.set_title(f"busiest {per_kind} link directions of each kind (of {len(link_kind)})", fontsize=10, y=1.01)
    kinds = [k for k in kinds if k in KIND_NAMES]
    _box_plot(right, [links["busy_fraction"][link_kind == k] * 100 for k in kinds], [KIND_COLORS[k] for k in kinds])
    right.set_xticks(range(1, len(kinds) + 1), [KIND_NAMES[k] for k in kinds], rotation=15, fontsize=8)
    right.set_ylabel("busy (%)")
    totals = [links["bytes"][link_kind == k].sum() / 1e12 for k in kinds]
    right.set_title("by kind of link; TB moved: " + ", ".join(f"{t:,.1f}" for t in totals), fontsize=10, y=1.01)
    if title:
        fig.suptitle(title, fontsize=11)
    _place(fig, left, right, labels, [KIND_NAMES[k] for k in kinds], title)
    return save(fig, paths, dpi=DPI)


def _box_plot(ax, data: list[np.ndarray], colors: list[str]) -> None:
    """Box and whiskers as `Axes.boxplot(data, patch_artist=True)` draws them (quartiles,
    median, whiskers to the furthest point within 1.5 IQR, the points beyond as rings), as
    four artists in all: boxplot builds each part of each box through `Axes.plot`, reads
    every rcParam while doing so, and with that imports pyplot (a quarter of this plot)."""
    from matplotlib.cbook import boxplot_stats
    from matplotlib.collections import LineCollection, PolyCollection
    from matplotlib.lines import Line2D

    stats = boxplot_stats(data) if data else []
    half = float(np.clip(0.15 * max(len(data) - 1, 0), 0.15, 0.5)) / 2  # boxplot's default widths
    boxes, whiskers, medians, flier_x, flier_y = [], [], [], [], []
    for x, s in enumerate(stats, start=1):
        boxes.append([(x - half, s["q1"]), (x + half, s["q1"]), (x + half, s["q3"]), (x - half, s["q3"])])
        whiskers += [[(x, s["q1"]), (x, s["whislo"])], [(x, s["q3"]), (x, s["whishi"])],
                     [(x - half / 2, s["whislo"]), (x + half / 2, s["whislo"])],
                     [(x - half / 2, s["whishi"]), (x + half / 2, s["whishi"])]]
        medians.append([(x - half, s["med"]), (x + half, s["med"])])
        flier_x += [x] * len(s["fliers"])
        flier_y += list(s["fliers"])
    ax.add_collection(PolyCollection(boxes, facecolors=colors, edgecolors="black", linewidths=1.0, zorder=2))
    ax.add_collection(LineCollection(whiskers, colors="black", linewidths=1.0, zorder=2))
    ax.add_collection(LineCollection(medians, colors="C1", linewidths=1.0, zorder=2.1))
    ax.add_line(Line2D(flier_x, flier_y, linestyle="none", marker="o", markersize=6, markerfacecolor="none",
                       markeredgecolor="black", zorder=2))
    ax.autoscale_view()  # matplotlib < 3.11 does not rescale for added collections by itself
    ax.set_xlim(0.5, len(data) + 0.5)


def _place(fig, left, right, bar_labels: list[str], kind_names: list[str], title: str) -> None:
    """Both panels side by side, margins measured from their labels (figure.py): the bar
    labels on the left, the rotated kind names and axis labels below, the titles on top."""
    top = (text_inches(fig, title, 11)[1] if title else 0) + text_inches(fig, "busiest", 10)[1] + 0.35
    bottom = text_inches(fig, "busy", 10)[1] + max(0.3, 0.3 * widest(fig, kind_names, 8)) + 0.25
    label_w = widest(fig, bar_labels, 7) + 0.25
    width = fig.get_figwidth()
    gap, y_label = 0.35, text_inches(fig, "busy (%)", 10)[1] + widest(fig, ["100"], 10) + 0.15
    usable = width - label_w - gap - y_label - 0.2
    place_axes(fig, left, left=label_w, right=width - label_w - 0.6 * usable, top=top, bottom=bottom)
    place_axes(fig, right, left=label_w + 0.6 * usable + gap + y_label, right=0.2, top=top, bottom=bottom)
