"""Pipeline Gantt charts from a trace (schedules.md section 6.2), and the unit-cost bridge
from the reference evaluator's `Timeline` to a trace.

Imported only when plotting: it pulls in matplotlib (Agg canvas, no display needed), not
pandas: the chart reads the trace as numpy columns (`sim3d.trace.trace_columns`), so the
process that draws it is ready a fifth of a second sooner.
Boxes of one colour are one compound path instead of one Rectangle per action; past ten
thousand rows, or where most boxes are a few points wide, all boxes are one image drawn
on the saved chart's pixel grid instead (gantt_raster.py: what legibly shows hundreds of
micro-batches, without moiré). Labels are the only per-action artists and are emitted only
where they fit. The margins are measured, not found by a layout engine (figure.py), so the
chart is drawn exactly once.
"""

from __future__ import annotations

import colorsys
from pathlib import Path as FilePath
from typing import Literal, Mapping, Sequence

import matplotlib
import numpy as np
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_rgb
from matplotlib.patches import Patch, PathPatch
from matplotlib.path import Path
from matplotlib.transforms import blended_transform_factory, offset_copy

from ..trace import TRACE_COLUMNS, TraceRow, canonical, empty_trace, trace_columns
from .bubbles import bubble_fractions
from .figure import artist_inches, fit_text, new_figure, place_axes, save, text_inches, widest
from .gantt_raster import PixelImage, coverage, stack_bands
from .gantt_sizes import SIZES

# Colour-blind-safe (Okabe-Ito blue/orange, Tol "muted" teal/green): teal and green differ
# strongly in lightness, so BI and BW stay apart even in greyscale.
KIND_COLORS = {"F": "#0072B2", "B": "#E69F00", "BI": "#44AA99", "BW": "#117733"}
OTHER_COLOR = "#9A9A9A"
_BACKWARD = ("B", "BI")
LANE_ORDER = ("tp", "cp", "ep", "pp", "dp")
LANE_GREYS = ("#4D4D4D", "#6E6E6E", "#8F8F8F", "#A8A8A8", "#C4C4C4")
_MAX_LABELS = 6000  # text artists dominate render time; beyond this the boxes speak alone
_COMPUTE_H = 0.78  # box height of the compute lane, in row units
_LANE_H = 0.16  # height of one communication lane
_LANE_GAP = 0.04
# Above this many trace rows the boxes are one image (gantt_raster.py), in PDF and SVG too:
# one vector path per box makes multi-megabyte files that viewers crawl through, and
# aliases in a PNG; text and axes stay vector.
_RASTER_ABOVE = 10000
_DPI = 200  # of the saved chart, and so of its boxes' image
_SEPARATED_PX = 4  # narrower boxes of the image get no white line after them: it would hide them
_LANE_MARK = 0.4  # least opacity of a lane's pixel that a transfer touches (_draw_image)
# The right-hand column: each rank's idle share of its compute stream over the whole step
# (bubbles.py), not the summary's bubble_fraction (the least busy rank's) nor the
# breakdown's pipeline wait, so it is not called a bubble.
IDLE_HEADER = "idle"
IDLE_LEGEND = "idle (compute stream)"


def timeline_to_trace(schedule, timeline):
    """Trace rows (stream `compute`) for every compute action the reference evaluator timed.

    `timeline.spans[(rank, index)]` holds (start, end) of `schedule.ranks[rank][index]`;
    ranks here are pipeline ranks, which are the global ranks of a pp-only layout.
    """
    import pandas as pd
    rows = []
    for (rank, index), (start, end) in sorted(timeline.spans.items(), key=lambda kv: (kv[1][0], kv[0])):
        action = schedule.ranks[rank][index]
        rows.append(TraceRow(rank, schedule.stage_of(rank, action), action.chunk,
                             -1 if action.mb is None else action.mb, str(action.kind), "compute",
                             float(start), float(end), 0, -1))
    return canonical(pd.DataFrame(rows, columns=list(TRACE_COLUMNS))) if rows else empty_trace()


def _shade(rgb, chunk: int, num_chunks: int) -> tuple[float, float, float]:
    """Chunk 0 keeps the pass colour; later chunks get lighter (Megatron's dark/light)."""
    if chunk <= 0 or num_chunks <= 1:
        return tuple(rgb)
    t = 0.5 * chunk / (num_chunks - 1)
    return tuple(c + (1.0 - c) * t for c in rgb)


def _darken(rgb, amount: float) -> tuple[float, float, float]:
    return tuple(c * (1.0 - amount) for c in rgb)


def _luminance(rgb) -> float:
    return 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]


def _mb_color(mb: int) -> tuple[float, float, float]:
    """Distinct hues for neighbouring micro-batches (golden-angle walk round the wheel)."""
    if mb < 0:
        return to_rgb(OTHER_COLOR)
    hue = (mb * 0.381966) % 1.0
    return colorsys.hls_to_rgb(hue, 0.55, 0.65)


def _time_unit(span: float) -> tuple[float, str]:
    if span >= 2.0:
        return 1.0, "s"
    if span >= 2e-3:
        return 1e3, "ms"
    return 1e6, "µs"


def _one_per_stage(t: dict, ranks: list[int]) -> list[int]:
    """The lowest rank of each pipeline position (ranks grouped by the stages they compute):
    at full fidelity the tensor- and data-parallel peers of a stage draw near-identical rows,
    so a paper figure wants one row per stage, not the first and last 32 GPUs."""
    compute = t["stream"] == "compute"
    stages: dict[int, list[int]] = {}
    for rank, stage in np.unique(np.stack([t["rank"][compute], t["stage"][compute]], 1), axis=0).tolist():
        stages.setdefault(rank, []).append(stage)  # np.unique sorted them
    first: dict[tuple, int] = {}
    for rank in ranks:
        first.setdefault(tuple(stages.get(rank, ())), rank)
    return sorted(first.values())


def _rows(t: dict, keep) -> dict:
    return {name: column[keep] for name, column in t.items()}


def _gaps_before(shown: list[int], order: list[int]) -> dict[int, int]:
    """{shown rank: how many ranks of `order` were left out just before it} (a gap row is
    drawn there)."""
    at = {r: i for i, r in enumerate(order)}
    return {b: at[b] - at[a] - 1 for a, b in zip(shown, shown[1:]) if at[b] - at[a] > 1}


def _pick_ranks(ranks: list[int], max_ranks: int) -> list[int]:
    """The first and last ranks, `max_ranks` in all."""
    if len(ranks) <= max_ranks:
        return ranks
    head = max_ranks // 2
    return ranks[:head] + ranks[-(max_ranks - head):]


def _boxes(x0, x1, y0, y1) -> np.ndarray:
    return np.stack([np.stack([x0, y0], 1), np.stack([x1, y0], 1), np.stack([x1, y1], 1), np.stack([x0, y1], 1)], 1)


def _add_boxes(ax, verts: np.ndarray, **style) -> PathPatch:
    """Boxes of one colour as one compound path: one artist instead of a Path object per box
    (building those was a third of the flagship chart's plotting time). Added as a plain
    artist because `add_patch` walks every segment for data limits, which are set by hand."""
    closed = np.concatenate([verts, verts[:, :1]], axis=1).reshape(-1, 2)
    codes = np.tile(np.array([Path.MOVETO] + [Path.LINETO] * 3 + [Path.CLOSEPOLY], dtype=Path.code_type), len(verts))
    patch = PathPatch(Path(closed, codes), transform=ax.transData, zorder=3, snap=True, **style)
    ax.add_artist(patch)
    patch.set_clip_path(ax.patch)
    return patch


def plot_gantt(trace, paths: Sequence[str | FilePath], title: str,
               color_by: Literal["kind", "microbatch"] = "kind",
               rank_labels: Mapping[int, str] | None = None, max_ranks: int = 64,
               ranks: Sequence[int] | None = None, time_unit: str | None = None, size: str = "screen",
               window: tuple[float, float] | None = None, always: Sequence[int] = ()) -> list[FilePath]:
    """Draw one row per rank (rank 0 on top) and write it to every path (.png/.pdf/.svg).
    `trace`: a trace DataFrame, the engine's rows or their columns (`trace_columns`).
    `ranks` picks the rows; by default every rank, or, past `max_ranks`, one rank per
    pipeline stage, and besides those the `always` ranks the trace has (a straggler's).
    `time_unit` names a time axis that is not in seconds (e.g. "F = 1" for
    unit-cost schedules), drawn unscaled. `size`: "screen", or "page" / "column" for a paper's
    text and column width (SIZES). `window`: (start, end) in seconds from the trace's start,
    to zoom in (the idle column still reports the whole step).

    Compute actions are boxes labelled with their micro-batch; communication streams, when
    the trace has them, are thin grey lanes under each rank; idle time stays white; the
    idle share of each rank's compute stream is printed at the right margin.
    """
    if color_by not in ("kind", "microbatch"):
        raise ValueError(f"color_by must be 'kind' or 'microbatch', got {color_by!r}")
    t = trace_columns(trace)
    if not len(t["rank"]):
        raise ValueError("plot_gantt: the trace has no rows")
    if size not in SIZES:
        raise ValueError(f"plot_gantt: size {size!r}, expected one of {', '.join(SIZES)}")
    width, font_k = SIZES[size]
    idle = bubble_fractions(t)
    t0 = float(t["start_s"].min())
    span = float(t["end_s"].max()) - t0
    if window is not None:
        start, end = window
        if not 0 <= start < end:
            raise ValueError(f"plot_gantt: window {window}: expected 0 <= start < end (seconds from the trace start)")
        t = _rows(t, (t["end_s"] > t0 + start) & (t["start_s"] < t0 + end))
        if not len(t["rank"]):
            raise ValueError(f"plot_gantt: nothing runs in the window {window} (the step lasts {span:g} s)")
        t0, span = t0 + start, end - start
    scale, unit = (1.0, time_unit) if time_unit else _time_unit(span)
    all_ranks = np.unique(t["rank"]).tolist()
    max_ranks = max(2, int(max_ranks))
    if ranks is not None:
        missing = sorted(set(ranks) - set(all_ranks))
        if missing:
            raise ValueError(f"plot_gantt: rank(s) {missing[:8]} are not in the trace")
        if not ranks:
            raise ValueError("plot_gantt: ranks=[] picks no rank to draw (None draws them all)")
        shown, gaps = sorted(set(ranks)), {}
    else:
        candidates = _one_per_stage(t, all_ranks) if len(all_ranks) > max_ranks else all_ranks
        picked = _pick_ranks(candidates, max_ranks)
        shown = sorted(set(picked) | (set(always) & set(all_ranks)))
        gaps = _gaps_before(shown, sorted(set(candidates) | set(shown)))
        if len(candidates) < len(all_ranks):
            title = f"{title}\none rank per pipeline stage of {len(all_ranks)} simulated"
    t = _rows(t, np.isin(t["rank"], shown))

    streams = set(np.unique(t["stream"]).tolist())
    lanes = [s for s in LANE_ORDER if s in streams]
    lanes += sorted(streams - set(LANE_ORDER) - {"compute"})
    row_h = _COMPUTE_H + len(lanes) * (_LANE_H + _LANE_GAP) + 0.22
    # Row position of each shown rank; a gap row marks where ranks were left out.
    row_of, y = {}, 0.0
    for r in shown:
        if r in gaps:
            y += row_h
        row_of[r] = y
        y += row_h
    total_h = y

    n_rows = len(shown) + len(gaps)
    fig_h = min(2.0 + 0.42 * n_rows * row_h, 24.0) * (0.5 + 0.5 * width / SIZES["screen"][0])
    fig = new_figure(width, max(fig_h, 2.8 * font_k), _DPI)
    ax = fig.add_axes((0.1, 0.1, 0.8, 0.8))  # placed once the margins are measured
    ax.set_xlim(0.0, span * scale * 1.002 if span > 0 else 1.0)
    ax.set_ylim(total_h - 0.1, -0.15)

    shown_ranks = np.array(shown)
    row_y = np.array([row_of[r] for r in shown])
    comp = _rows(t, t["stream"] == "compute")
    x0 = (comp["start_s"] - t0) * scale
    x1 = (comp["end_s"] - t0) * scale
    top = row_y[np.searchsorted(shown_ranks, comp["rank"])]
    kinds = comp["kind"]
    chunks = comp["chunk"]
    mbs = comp["microbatch"]
    num_chunks = int(t["chunk"].max()) + 1

    # Dense: too many boxes to draw one by one, or most of them narrower than a few points at
    # the figure's width (the axes get most of it): drawn as an image on the pixel grid
    # (gantt_raster.py), where edges and hatching would only alias.
    points_per_x = 0.85 * width * 72.0 / ax.get_xlim()[1]
    dense = len(t["rank"]) > _RASTER_ABOVE or bool(len(x0) and np.median(x1 - x0) * points_per_x < 4.0)
    faces = _faces(kinds, chunks, mbs, color_by, num_chunks)
    # Weight-grad boxes (colour by micro-batch): pale fill hatched in the micro-batch hue, so
    # the label stays readable (an image has no hatching: there they are pale alone)
    hatched = (kinds == "BW") if color_by == "microbatch" else np.zeros(len(x0), dtype=bool)
    for i in np.flatnonzero(hatched):
        faces[i] = _shade(faces[i], 1, 2)
    hatched &= not dense

    # Communication lanes under each rank's compute lane.
    lane_boxes, lane_handles = [], []
    for j, stream in enumerate(lanes):
        sub = _rows(t, t["stream"] == stream)
        ly = row_y[np.searchsorted(shown_ranks, sub["rank"])] + _COMPUTE_H + _LANE_GAP + j * (_LANE_H + _LANE_GAP)
        grey = LANE_GREYS[j % len(LANE_GREYS)]
        lane_boxes.append(((sub["start_s"] - t0) * scale, (sub["end_s"] - t0) * scale, ly, ly + _LANE_H, to_rgb(grey)))
        lane_handles.append(Patch(facecolor=grey, label=f"{stream} comm."))

    # Axes furniture.
    labels = dict(rank_labels or {})
    rank_names = [f"rank {r}" + (f"\n{labels[r]}" if labels.get(r) else "") for r in shown]
    rank_size = font_k * (8 if len(shown) <= 16 else 6)
    # Row names are plain texts, not y ticks: a tick builds lines and markers it never shows.
    ax.set_yticks([])
    beside = offset_copy(blended_transform_factory(ax.transAxes, ax.transData), fig=fig, x=-0.05, units="inches")
    names = [ax.text(0, row_of[r] + _COMPUTE_H / 2, name, transform=beside, ha="right", va="center",
                     fontsize=rank_size, clip_on=False) for r, name in zip(shown, rank_names)]
    # measured as drawn (the renderer keeps their layout for the draw), once for title and margin
    names_w = max(artist_inches(fig, name)[0] for name in names)
    if lanes and len(shown) <= 16:  # name the thin lanes where there is room to
        # under the first rank only: every rank has them in the same order (and the legend
        # names their greys); named under each, they were half of the chart's texts
        for j, stream in enumerate(lanes):
            ax.text(0, row_of[shown[0]] + _COMPUTE_H + _LANE_GAP + j * (_LANE_H + _LANE_GAP) + _LANE_H / 2, stream,
                    transform=beside, ha="right", va="center", fontsize=font_k * 5.5, color="#666666",
                    clip_on=False)
    ax.tick_params(axis="x", labelsize=font_k * 9)
    ax.set_xlabel(f"time ({unit})", fontsize=font_k * 10)
    ax.grid(axis="x", color="#E4E4E4", linewidth=0.6, zorder=0)
    ax.set_axisbelow(True)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    right = blended_transform_factory(ax.transAxes, ax.transData)
    idle_texts = [IDLE_HEADER] + [f"{100.0 * idle.get(r, 0.0):.1f}%" for r in shown]
    ax.text(1.01, -0.1, idle_texts[0], transform=right, ha="left", va="bottom", fontsize=font_k * 8, fontweight="bold",
            clip_on=False)
    for r, text in zip(shown, idle_texts[1:]):
        ax.text(1.01, row_of[r] + _COMPUTE_H / 2, text, transform=right,
                ha="left", va="center", fontsize=font_k * (8 if len(shown) <= 16 else 6), clip_on=False)
    for r, left_out in gaps.items():
        ax.text(0.5, row_of[r] - row_h / 2, f"⋯ {left_out} ranks not shown ⋯", transform=right, ha="center",
                va="center", fontsize=font_k * 8, color="#555555", style="italic")
    if gaps:
        title = f"{title} (showing {len(shown)} of {len(all_ranks)} ranks)"
    title = fit_text(fig, title, font_k * 11, fig.get_figwidth() - names_w - 0.3)
    ax.set_title(title, fontsize=font_k * 11, loc="left", y=1.0)

    present = set(kinds)
    handles = []
    if color_by == "kind":
        names = {"F": "forward", "B": "backward", "BI": "input grad", "BW": "weight grad"}
        for k, col in KIND_COLORS.items():
            for c in range(num_chunks) if k in present else ():
                suffix = f", chunk {c}" if num_chunks > 1 else ""
                handles.append(Patch(facecolor=_shade(to_rgb(col), c, num_chunks), label=f"{k}: {names[k]}{suffix}"))
    else:
        handles.append(Patch(facecolor=_mb_color(0), label="forward (hue = micro-batch)"))
        if present & set(_BACKWARD):
            handles.append(Patch(facecolor=_darken(_mb_color(0), 0.35), label="backward: darker"))
        if "BW" in present:
            handles.append(Patch(facecolor=_shade(_mb_color(0), 1, 2), label="weight grad: paler") if dense else
                           Patch(facecolor=_shade(_mb_color(0), 1, 2), hatch="///", edgecolor=_mb_color(0),
                                 label="weight grad: hatched"))
        if num_chunks > 1:
            handles.append(Patch(facecolor=_shade(_mb_color(0), 1, num_chunks), label="chunk 1+: lighter"))
    if present - set(KIND_COLORS):
        handles.append(Patch(facecolor=OTHER_COLOR, label="other compute"))
    handles += lane_handles
    handles.append(Patch(facecolor="white", edgecolor="#999999", linewidth=0.6, label=IDLE_LEGEND))
    ncol = -(-len(handles) // -(-len(handles) // 6))
    while True:  # as many columns as the figure's width holds
        legend = fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.0), frameon=False,
                            ncol=ncol, fontsize=font_k * 8, handlelength=1.6)
        if ncol == 1 or artist_inches(fig, legend)[0] <= 0.98 * fig.get_figwidth():
            break
        legend.remove()
        ncol -= 1
    _place(fig, ax, legend, font_k, names_w=names_w, lane_names=lanes if lanes and len(shown) <= 16 else [],
           right_texts=idle_texts, title=title)
    if dense:
        _draw_image(fig, ax, (x0, x1, top, top + _COMPUTE_H, np.array(faces).reshape(-1, 3)), lane_boxes)
    else:
        _draw_boxes(ax, x0, x1, top, faces, hatched, mbs, lane_boxes)

    # Micro-batch labels where the box is wide and tall enough for the text: the axes are
    # placed, so data units convert to points without a draw.
    bbox = ax.get_window_extent()
    pt_per_x = bbox.width * 72.0 / fig.dpi / (ax.get_xlim()[1] - ax.get_xlim()[0])
    pt_per_y = bbox.height * 72.0 / fig.dpi / total_h
    fontsize = float(np.clip(pt_per_y * _COMPUTE_H * 0.55, 4.0, 9.0))
    if pt_per_y * _COMPUTE_H >= 5.0:
        texts = [str(int(m)) for m in mbs]
        width_pt = (x1 - x0) * pt_per_x
        need_pt = np.array([0.62 * fontsize * len(text) + 2.0 for text in texts]) if texts else np.zeros(0)
        ok = np.flatnonzero((mbs >= 0) & (width_pt >= need_pt))
        if len(ok) <= _MAX_LABELS:
            for i in ok:
                rgb = faces[i]
                ax.text((x0[i] + x1[i]) / 2, top[i] + _COMPUTE_H / 2, texts[i], ha="center", va="center_baseline",
                        fontsize=fontsize, color="white" if _luminance(rgb) < 0.45 else "black", zorder=4,
                        clip_on=True)

    return save(fig, paths, dpi=_DPI)


def _faces(kinds, chunks, mbs, color_by: str, num_chunks: int) -> list[tuple[float, float, float]]:
    """The fill of each compute box (computed once per distinct look, not per box)."""
    faces, known = [], {}
    for k, c, mb in zip(kinds.tolist(), chunks.tolist(), mbs.tolist()):
        key = (k, c, mb if color_by == "microbatch" else 0)
        if key not in known:
            if color_by == "kind":
                base = to_rgb(KIND_COLORS.get(k, OTHER_COLOR))
            else:
                base = _mb_color(mb) if k in KIND_COLORS else to_rgb(OTHER_COLOR)
                if k in _BACKWARD:
                    base = _darken(base, 0.35)
            known[key] = _shade(base, c, num_chunks)
        faces.append(known[key])
    return faces


def _draw_boxes(ax, x0, x1, top, faces, hatched, mbs, lane_boxes) -> None:
    """Every box as a vector shape: one compound path per fill colour, white edges between
    neighbours, hatched weight-grad boxes (colour by micro-batch), grey lanes."""
    verts = _boxes(x0, x1, top, top + _COMPUTE_H)
    by_face: dict[tuple, list[int]] = {}
    for i in np.flatnonzero(~hatched):
        by_face.setdefault(faces[i], []).append(i)
    for face, members in by_face.items():
        _add_boxes(ax, verts[members], facecolor=face, edgecolor="white", linewidth=0.4)
    # One collection per hue: older matplotlib takes a single hatch colour per collection,
    # read from rcParams when the collection is built.
    for mb in np.unique(mbs[hatched]):
        sel = hatched & (mbs == mb)
        hue = _mb_color(int(mb))
        with matplotlib.rc_context({"hatch.color": hue, "hatch.linewidth": 0.9}):
            ax.add_collection(PolyCollection(verts[sel], facecolors=[faces[i] for i in np.flatnonzero(sel)],
                                             hatch="///", edgecolors=hue, linewidths=0.4, zorder=3))
    for lx0, lx1, ly0, ly1, grey in lane_boxes:
        _add_boxes(ax, _boxes(lx0, lx1, ly0, ly1), facecolor=grey, edgecolor="none")


def _draw_image(fig, ax, compute: tuple, lanes: list[tuple]) -> None:
    """The compute boxes and the lanes' boxes, each (x0, x1, y_top, y_bottom, colour or
    colours) in data units, as one image with a pixel per pixel of the axes as saved
    (gantt_raster.py). The axes move to whole pixels first, so that the image maps onto them
    one to one. Compute boxes at least _SEPARATED_PX wide end a pixel early: the white line
    between neighbours that the vector chart draws as an edge. A lane's pixel that any
    transfer touches is at least _LANE_MARK opaque: a transfer of a few milliseconds covers a
    tenth of a pixel, and the lane would look idle where messages go."""
    w_in, h_in = fig.get_size_inches() * _DPI
    box = ax.get_position()
    left, bottom, right, top = round(box.x0 * w_in), round(box.y0 * h_in), round(box.x1 * w_in), round(box.y1 * h_in)
    ax.set_position([left / w_in, bottom / h_in, (right - left) / w_in, (top - bottom) / h_in])
    width, height = right - left, top - bottom
    (xa, xb), (yb, ya) = ax.get_xlim(), ax.get_ylim()  # inverted y: ya is the top edge
    parts = []
    for layer, (x0, x1, y0, y1, rgb) in enumerate([compute, *lanes]):
        n = len(x0)
        px0, px1 = (x0 - xa) / (xb - xa) * width, (x1 - xa) / (xb - xa) * width
        if layer == 0:
            px1 = np.where(px1 - px0 >= _SEPARATED_PX, px1 - 1.0, px1)
        parts.append((px0, px1, np.broadcast_to(y0, n), np.broadcast_to(y1, n), np.broadcast_to(rgb, (n, 3)),
                      np.full(n, layer > 0)))
    px0, px1, y0, y1, rgb, in_lane = (np.concatenate(column) for column in zip(*parts))
    tops, first, band = np.unique(y0, return_index=True, return_inverse=True)  # a lane is known by its top
    rows = coverage(band.ravel(), px0, px1, rgb, len(tops), width)
    lane_rows = rows[in_lane[first]]
    lane_rows[..., 3] = np.where(lane_rows[..., 3] > 0, np.maximum(lane_rows[..., 3], _LANE_MARK), 0.0)
    rows[in_lane[first]] = lane_rows
    edges = np.column_stack([tops, y1[first]])
    spans = np.rint((edges - ya) / (yb - ya) * height).astype(int).tolist()
    ax.add_artist(PixelImage(stack_bands(rows, spans, height)))


def _place(fig, ax, legend, font_k: float, names_w: float, lane_names: list[str], right_texts: list[str],
           title: str) -> None:
    """Margins in inches from what sits in them: rank labels (`names_w` wide) and the lanes'
    names on the left, the idle column on the right, the title on top, tick labels, axis label and legend
    below."""
    pad = 0.08
    left = max(names_w, widest(fig, lane_names, font_k * 5.5)) + 0.07 + pad
    right = widest(fig, right_texts, font_k * 8, weight="bold") + 0.02 * fig.get_figwidth() + pad
    top = text_inches(fig, title, font_k * 11)[1] + 0.12 + pad
    legend_h = artist_inches(fig, legend)[1]
    below = text_inches(fig, "0", font_k * 9)[1] + text_inches(fig, "time (s)", font_k * 10)[1] + 0.2
    place_axes(fig, ax, left=left, right=right, top=top, bottom=legend_h + below + pad)
