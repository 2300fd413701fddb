"""Per pipeline-stage memory: a stacked-bar figure (matplotlib) and a rich table for the CLI.

`rows` are `sim3d.model.RankMemory` objects (bytes); everything shown is in GiB (2**30 B).
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

GIB = 2**30
PARTS = ("weights", "grads", "optimizer", "activations", "other", "reserve")
# Colour-blind-safe palette (Okabe & Ito 2008), one colour per component.
COLORS = ("#0072B2", "#56B4E9", "#009E73", "#E69F00", "#CC79A7", "#999999")


def plain_rows(report) -> tuple[list[SimpleNamespace], float]:
    """What the plot reads of a MemoryReport, as plain objects, and its capacity in GiB: the
    plotting process unpickles them without importing the memory model."""
    fields = ("rank", "stages", *PARTS)
    return [SimpleNamespace(**{f: getattr(r, f) for f in fields}) for r in report.rows], report.hbm_bytes / GIB


DPI = 150
BAR_HALF = 0.375  # half a bar's width, in ranks
TICK_GAP_IN = 7 / 72  # where matplotlib puts a tick label: tick length + pad, 3.5 pt each


def plot_memory(rows, path_png: str | Path, title: str, hbm_gib: float | None = None) -> Path:
    """Stacked bars of each pipeline rank's memory with the HBM capacity as a dashed line.
    `rows` is a list of RankMemory (or of `plain_rows`) or a MemoryReport (which also
    supplies the capacity). The file format follows the suffix of `path_png` (png, pdf, svg)."""
    from .figure import save
    return save(memory_figure(rows, title, hbm_gib), [path_png], dpi=DPI)[0]


def memory_figure(rows, title: str, hbm_gib: float | None = None):
    """`plot_memory`'s figure, not yet drawn (matplotlib.figure.Figure)."""
    if hasattr(rows, "rows"):
        hbm_gib = hbm_gib or rows.hbm_bytes / GIB
        rows = list(rows.rows)
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch
    from matplotlib.transforms import blended_transform_factory, offset_copy

    from .figure import artist_inches, new_figure, place_axes, text_inches, widest

    n = len(rows)
    fig = new_figure(max(6.0, 0.45 * n + 3), 4.5, DPI)
    ax = fig.add_axes((0.1, 0.1, 0.8, 0.8))  # placed once the margins are measured
    xs = list(range(n))
    bottom = [0.0] * n
    # Each part's bars are one collection, not a Rectangle per bar and part (ax.bar updates the
    # data limits patch by patch: a third of this plot's time at 16 ranks).
    handles = []
    for part, color in zip(PARTS, COLORS):
        vals = [getattr(r, part) / GIB for r in rows]
        ax.add_collection(PolyCollection([[(x - BAR_HALF, b), (x + BAR_HALF, b), (x + BAR_HALF, b + v),
                                           (x - BAR_HALF, b + v)] for x, b, v in zip(xs, bottom, vals)],
                                         facecolors=color, edgecolors="white", linewidths=0.4))
        handles.append(Patch(facecolor=color, edgecolor="white", linewidth=0.4, label=part))
        bottom = [b + v for b, v in zip(bottom, vals)]
    span = n - 1 + 2 * BAR_HALF
    ax.set_xlim(-BAR_HALF - 0.05 * span, n - 1 + BAR_HALF + 0.05 * span)  # the margins ax.bar had
    if hbm_gib:
        handles.insert(0, ax.axhline(hbm_gib, color="#D55E00", linestyle="--", linewidth=1.5,
                                     label=f"HBM {hbm_gib:g} GiB"))
    for x, total in zip(xs, bottom):
        if n <= 32:
            ax.text(x, total, f"{total:.0f}", ha="center", va="bottom", fontsize=7)
    labels, label_size = [_label(r) for r in rows], 8 if n <= 16 else 6
    # The ranks' names are plain texts where tick labels would sit, not x ticks: a tick builds
    # lines, markers and a copy of its properties (another third of the time).
    ax.set_xticks([])
    below = offset_copy(blended_transform_factory(ax.transData, ax.transAxes), fig=fig, y=-TICK_GAP_IN,
                        units="inches")
    for x, label in zip(xs, labels):
        ax.text(x, 0, label, transform=below, ha="center", va="top", fontsize=label_size,
                rotation=0 if n <= 16 else 90)
    tick_h = (max((text_inches(fig, t, label_size)[1] for t in labels), default=0.0) if n <= 16 else
              widest(fig, labels, label_size))  # rotated beyond 16 ranks: their width is their height
    ax.set_xlabel("pipeline rank (stages held)", labelpad=(TICK_GAP_IN + tick_h) * 72 + 4)
    ax.set_ylabel("memory per GPU [GiB]")
    ax.set_title(title, y=1.01)
    top = max(bottom + [hbm_gib or 0.0])
    ax.set_ylim(0, top * 1.12 if top else 1)
    ax.grid(axis="y", alpha=0.3)
    legend = fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), ncol=4, fontsize=8,
                        frameon=False)
    # margins from what sits in them (figure.py): no layout engine, one draw
    left = widest(fig, [f"{top * 1.12:.0f}"], 10) + text_inches(fig, "memory", 10)[1] + 0.3
    bottom = artist_inches(fig, legend)[1] + tick_h + text_inches(fig, "pipeline", 10)[1] + 0.3
    place_axes(fig, ax, left=left, right=0.15, top=text_inches(fig, title, 12)[1] + 0.25, bottom=bottom)
    return fig


def _label(row) -> str:
    stages = getattr(row, "stages", ())
    if len(stages) == 1 and stages[0] == row.rank:
        return str(row.rank)
    return f"{row.rank}\n({','.join(map(str, stages))})"


def memory_table(rows, hbm_gib: float):
    """rich Table: one line per pipeline rank, GiB columns, the worst rank highlighted."""
    from rich.table import Table

    table = Table(title=f"memory per GPU [GiB] (HBM {hbm_gib:g} GiB)", header_style="bold")
    table.add_column("pp rank", justify="right")
    table.add_column("stages")
    table.add_column("layers", justify="right")
    table.add_column("in-flight", justify="right")
    for part in PARTS:
        table.add_column(part, justify="right")
    table.add_column("total", justify="right")
    worst = max(rows, key=lambda r: r.total) if rows else None
    for r in rows:
        over = r.total / GIB > hbm_gib
        style = "bold red" if over else ("bold" if r is worst else None)
        table.add_row(str(r.rank), ",".join(map(str, r.stages)), str(r.layers), str(r.inflight),
                      *(f"{getattr(r, p) / GIB:.2f}" for p in PARTS), f"{r.total / GIB:.2f}", style=style)
    return table
