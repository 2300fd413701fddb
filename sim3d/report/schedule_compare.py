"""Several pipeline schedules in one time unit: stacked unit-cost Gantt charts on one shared
time axis, a bar chart of their bubbles and their peak in-flight activations per rank
(`sim3d schedule --compare`, issue 34).

Why one unit: each schedule's own Gantt scales its axis to its own step, and an interleaved
schedule, whose chunks each hold 1/vpp of a rank's layers, looked slower than 1F1B for it.
Here the unit is one forward of a rank's whole share of the layers (schedules.md section 7,
uniform stages, no communication): a forward costs 1, a backward 2, an input- or weight-
gradient half 1, and a chunk's pass 1/vpp of that. Bubbles are unit-free, so the closed forms
of section 7 hold whatever the unit; the step lengths become comparable.

matplotlib is imported only to draw (the table and --json need none of it); the Gantt's
colours are gantt.py's own, imported, so both charts read alike.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schedule import Schedule, build, lower, prove
from ..schedule.evaluate import Timeline, evaluate, uniform_costs

FORWARD, BACKWARD = 1.0, 2.0  # per micro-batch on a rank's whole share of the layers
UNIT = "one forward of a rank's layers = 1, backward = 2 (its input- and weight-gradient halves 1 each)"


@dataclass(frozen=True)
class ComparedSchedule:
    name: str
    vpp: int
    schedule: Schedule  # compute only
    timeline: Timeline  # in UNIT
    peak_inflight: tuple[int, ...]  # chunk-activations per rank, as schedule.proof reports them

    @property
    def peak_activations(self) -> tuple[float, ...]:
        """Peak in-flight activations per rank in micro-batches of a rank's whole share of the
        layers: a chunk's activations are 1/vpp of that, so schedules of any vpp compare."""
        return tuple(n / self.vpp for n in self.peak_inflight)

    def as_json(self) -> dict:
        return {"schedule": self.name, "vpp": self.vpp, "step_units": self.timeline.step_time,
                "bubble_fraction": self.timeline.bubble_fraction, "peak_inflight": list(self.peak_inflight),
                "peak_activations": list(self.peak_activations)}


def compare_schedules(layouts: list[tuple[str, int]], pp: int, microbatches: int) -> list[ComparedSchedule]:
    """Each (name, vpp) built, proved and timed in UNIT; the caller has checked the layouts
    against the registry (a generator still refuses what it cannot build)."""
    compared = []
    for name, vpp in layouts:
        schedule = build(name, pp, microbatches, vpp)
        timeline = evaluate(schedule, uniform_costs(FORWARD / vpp, BACKWARD / vpp))
        compared.append(ComparedSchedule(name, vpp, schedule, timeline, prove(lower(schedule)).peak_inflight))
    return compared


def compare_figure(compared: list[ComparedSchedule], title: str | None = None, size: str = "screen"):
    """One Gantt axes per schedule (same x limits, rank 0 on top), then a bar chart of the
    bubbles (%) and the peak in-flight activations per rank: beside the Gantt charts, or under
    them in a paper's column. `size`: a key of SIZES; `title` "" draws none. Returns the Figure."""
    from .figure import figure_title, font_scale, fit_text, new_figure
    from .gantt_sizes import SIZES

    width, font_k, stacked = SIZES[size][0], font_scale(size), size == "column"
    pp = compared[0].schedule.pp
    row_in = max(1.0, 0.26 * pp + 0.55) * font_k
    gantts_in = row_in * len(compared)
    if stacked:  # the bubbles and peaks side by side under the Gantt charts
        side_in = 2.4 * font_k
        fig = new_figure(width, gantts_in + side_in + 2.0 * font_k)
        grid = fig.add_gridspec(len(compared) + 1, 1, height_ratios=(*[row_in] * len(compared), side_in))
        right = grid[-1, 0].subgridspec(1, 2, wspace=0.15)
    else:  # beside them, one above the other
        fig = new_figure(width, max(5.0 * font_k, gantts_in + 1.6 * font_k))
        side_in = (fig.get_figheight() - 1.6 * font_k) / 2
        grid = fig.add_gridspec(len(compared), 2, width_ratios=(3.3, 1.0))
        right = grid[:, 1].subgridspec(2, 1)
    fig.set_layout_engine("constrained")
    gantts = [fig.add_subplot(grid[i, 0]) for i in range(len(compared))]
    bubble_ax, memory_ax = fig.add_subplot(right[0]), fig.add_subplot(right[1])
    end = max(c.timeline.step_time for c in compared)
    gantt_width = (0.85 if stacked else 0.7) * width  # the Gantt column's share of the figure
    for ax, c in zip(gantts, compared):
        _draw_gantt(ax, c, end, gantt_width, font_k)
        ax.tick_params(axis="x", labelbottom=ax is gantts[-1], labelsize=10 * font_k)
    gantts[-1].set_xlabel(fit_text(fig, f"time ({UNIT})", 10 * font_k, gantt_width), fontsize=10 * font_k)
    label_in = 0.6 * side_in  # a y label runs up its axes' side, which tick labels shorten
    _draw_bubbles(bubble_ax, compared, font_k)
    _draw_memory(memory_ax, compared, font_k)
    for ax in (bubble_ax, memory_ax):
        ax.set_ylabel(fit_text(fig, ax.get_ylabel(), 8 * font_k, label_in))
    _legend(fig, compared, font_k)
    figure_title(fig, f"pp={pp}, m={compared[0].schedule.num_microbatches}, one time unit" if title is None
                 else title, size)
    return fig


def _draw_gantt(ax, c: ComparedSchedule, end: float, gantt_width: float, font_k: float) -> None:
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_rgb

    from .gantt import KIND_COLORS, OTHER_COLOR, _shade

    boxes, faces, labels = [], [], []
    for (rank, index), (start, stop) in c.timeline.spans.items():
        action = c.schedule.ranks[rank][index]
        kind = str(action.kind)
        faces.append(_shade(to_rgb(KIND_COLORS.get(kind, OTHER_COLOR)), action.chunk, c.vpp))
        y0, y1 = rank - 0.4, rank + 0.4
        boxes.append([(start, y0), (stop, y0), (stop, y1), (start, y1)])
        labels.append((start, stop, rank, action.mb))
    points_per_unit = gantt_width * 72.0 / end
    narrow = min(stop - start for start, stop, _, _ in labels) * points_per_unit < 3.0
    # white separators between boxes narrower than a few points would stripe the chart (moire)
    ax.add_collection(PolyCollection(boxes, facecolors=faces, edgecolors="white", linewidths=0.0 if narrow else 0.4))
    # micro-batch numbers where they fit
    for (start, stop, rank, mb), face in zip(labels, faces):
        if (stop - start) * points_per_unit >= font_k * 3.6 * len(str(mb)) + 1.5:
            dark = 0.2126 * face[0] + 0.7152 * face[1] + 0.0722 * face[2] < 0.45
            ax.text((start + stop) / 2, rank, str(mb), ha="center", va="center", fontsize=6 * font_k,
                    color="white" if dark else "black")
    pp = c.schedule.pp
    ax.set_xlim(0.0, end * 1.005)
    ax.set_ylim(pp - 0.5, -0.5)
    ax.set_yticks(range(pp), labels=[f"rank {r}" for r in range(pp)], fontsize=7 * font_k)
    ax.set_title(f"{c.name} (vpp {c.vpp}): step {c.timeline.step_time:g}, bubble {c.timeline.bubble_fraction:.1%}",
                 loc="left", fontsize=9 * font_k)
    ax.set_label(f"gantt {c.name}")
    ax.grid(axis="x", color="#E4E4E4", linewidth=0.6)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


def _draw_bubbles(ax, compared: list[ComparedSchedule], font_k: float) -> None:
    heights = [100.0 * c.timeline.bubble_fraction for c in compared]
    bars = ax.bar(range(len(compared)), heights, color="#6E6E6E")
    ax.bar_label(bars, labels=[f"{h:.1f}%" for h in heights], fontsize=7 * font_k, padding=2)
    ax.set_xticks(range(len(compared)), labels=[c.name for c in compared], rotation=30, ha="right", fontsize=8 * font_k)
    ax.tick_params(axis="y", labelsize=10 * font_k)
    ax.set_ylabel("bubble (%)\nidle share of the least busy rank", fontsize=8 * font_k)
    ax.set_ylim(0, max(heights + [1.0]) * 1.18)
    ax.set_label("bubble")
    ax.grid(axis="y", alpha=0.3)


def _draw_memory(ax, compared: list[ComparedSchedule], font_k: float) -> None:
    """Per rank, not only the worst: zero-bubble schedules keep their first rank's peak but
    raise the others' (ZB-H1 holds p on every rank), which a single number would hide."""
    from .sweep_plot import series_style

    nudge = 0.45 / max(1, len(compared) - 1)  # equal peaks (ZB-H1's and ZB-V's) side by side, not hidden
    for i, c in enumerate(compared):
        at = [rank + (i - (len(compared) - 1) / 2) * nudge for rank in range(c.schedule.pp)]
        ax.plot(at, c.peak_activations, label=c.name, markersize=4 * font_k, linewidth=1.5 * font_k, **series_style(i))
    ax.set_xlabel("pipeline rank", fontsize=8 * font_k)
    ax.set_ylabel("peak in-flight activations\n(micro-batches of a rank's layers)", fontsize=8 * font_k)
    ax.set_xticks(range(compared[0].schedule.pp))
    ax.set_ylim(bottom=0)
    ax.set_label("peak in-flight")
    ax.tick_params(labelsize=7 * font_k)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7 * font_k)


def _legend(fig, compared: list[ComparedSchedule], font_k: float) -> None:
    from matplotlib.colors import to_rgb
    from matplotlib.patches import Patch

    from .figure import text_inches
    from .gantt import KIND_COLORS, _shade

    names = {"F": "forward", "B": "backward", "BI": "input grad", "BW": "weight grad"}
    present = {str(a.kind) for c in compared for actions in c.schedule.ranks for a in actions}
    handles = [Patch(facecolor=KIND_COLORS[kind], label=f"{kind}: {names[kind]}") for kind in KIND_COLORS
               if kind in present]
    if any(c.vpp > 1 for c in compared):
        handles.append(Patch(facecolor=_shade(to_rgb(KIND_COLORS["F"]), 1, 2), label="lighter: later chunk"))
    handles.append(Patch(facecolor="white", edgecolor="#999999", label="idle (bubble)"))
    # one row where the entries fit the width (a screen's or a page's), else as many columns as fit
    handle_in = 3.2 * 8 * font_k / 72.0  # the patch and the gaps beside it, about three characters
    entries = [text_inches(fig, h.get_label(), 8 * font_k)[0] + handle_in for h in handles]
    room = 0.95 * fig.get_figwidth()
    ncols = len(handles) if sum(entries) <= room else max(1, int(room / max(entries)))
    fig.legend(handles=handles, loc="outside lower center", ncols=ncols, frameon=False, fontsize=8 * font_k)
