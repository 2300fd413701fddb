"""Figures drawn without pyplot or a layout engine, for the plots `sim3d run` writes.

Matplotlib's constrained and tight layouts find margins by laying out every tick label
several times; on the flagship's Gantt chart that was half of the plotting time. Our plots
know what sits in their margins (tick labels, a title, a legend), so they measure those few
texts once with the Agg renderer and place the axes in inches (`place_axes`), then draw once.
No pyplot also means no global figure registry to leak into long sessions.

The charts other commands draw (sweep, goodput, the schedule comparison) keep matplotlib's
constrained layout; they share the fonts and titles here, scaled to the width `--size` picks.
"""

from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path
from typing import Iterable, Sequence

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.font_manager import FontProperties

from .gantt_sizes import SIZES

# PNGs: matplotlib renders the pixels (savefig's raw RGBA) and they are encoded here, not by
# Pillow, which tries five filters on every row: on the flagship's Gantt chart (2200 x 2550 px)
# that took 0.14 s, a quarter of the chart. Every row here takes the "Up" filter (minus the row
# above: charts repeat rows) and zlib level 3, files ~15% larger than Pillow's level 3. Rows are
# filtered and compressed a block at a time into one reused buffer: a filtered copy of the whole
# image (22 MB) cost more in fresh pages than in arithmetic.
PNG_COMPRESS_LEVEL = 3
PNG_ROWS_PER_BLOCK = 128
LINE_SPACING = 1.2  # matplotlib's default for multi-line text


def new_figure(width_in: float, height_in: float, dpi: float | None = None) -> Figure:
    """A figure on an Agg canvas; `dpi`: the one it will be saved at, so that the texts
    measured for its margins are measured by the renderer that draws them, which keeps
    their layout (one renderer instead of two, each text laid out once, not twice)."""
    fig = Figure(figsize=(width_in, height_in), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


# A page or column figure is printed at its own width, so its text must stay readable there:
# its fonts shrink with the width (SIZES' factor) down to this share of a screen figure's, no
# further (a column's 0.62 would print 8 pt ticks at 5 pt).
SMALLEST_FONT_SCALE = 0.8
TITLE_POINTS = 11.0  # a screen figure's title


def font_scale(size: str) -> float:
    """The factor on a screen figure's font sizes for a figure `size` wide (a key of SIZES)."""
    return max(SIZES[size][1], SMALLEST_FONT_SCALE)


def figure_style(size: str) -> dict:
    """matplotlib settings (for `matplotlib.rc_context`) of a chart drawn `size` wide: the
    screen figure's 9 pt labels, 8 pt ticks and legends and 11 pt title, scaled by
    `font_scale`: a page or column figure prints them at 7.2 and 6.4 pt."""
    k = font_scale(size)
    return {"font.size": 9 * k, "axes.labelsize": 9 * k, "axes.titlesize": 9 * k, "xtick.labelsize": 8 * k,
            "ytick.labelsize": 8 * k, "legend.fontsize": 8 * k, "legend.title_fontsize": 8 * k,
            "figure.titlesize": TITLE_POINTS * k, "lines.markersize": 5 * k, "lines.linewidth": 1.5 * k}


def figure_title(fig: Figure, title: str, size: str) -> None:
    """`title` over the whole figure, broken into lines that fit its width; an empty title
    draws none (a paper's caption says it)."""
    if title:
        points = TITLE_POINTS * font_scale(size)
        fig.suptitle(fit_text(fig, title, points, 0.96 * fig.get_figwidth()), fontsize=points)


def text_inches(fig: Figure, text: str, fontsize: float, weight: str = "normal") -> tuple[float, float]:
    """Width and height of `text` (lines split on newlines) as the figure will draw it."""
    renderer = fig.canvas.get_renderer()
    prop = FontProperties(size=fontsize, weight=weight)
    widths, height = [], 0.0
    for line in text.split("\n"):
        w, h, _ = renderer.get_text_width_height_descent(line or " ", prop, ismath=False)
        widths.append(w)
        height += h
    lines = text.count("\n") + 1
    height = max(height, lines * fontsize * LINE_SPACING * fig.dpi / 72.0)
    return max(widths) / fig.dpi, height / fig.dpi


def widest(fig: Figure, texts: Iterable[str], fontsize: float, weight: str = "normal") -> float:
    return max((text_inches(fig, t, fontsize, weight)[0] for t in texts), default=0.0)


def fit_text(fig: Figure, text: str, fontsize: float, width_in: float) -> str:
    """`text` broken at spaces into lines no wider than `width_in` (existing breaks kept)."""
    lines = []
    for line in text.split("\n"):
        if text_inches(fig, line, fontsize)[0] <= width_in:  # the common case: one measure, not one per word
            lines.append(line)
            continue
        current = ""
        for word in line.split(" "):
            trial = f"{current} {word}" if current else word
            if current and text_inches(fig, trial, fontsize)[0] > width_in:
                lines.append(current)
                current = word
            else:
                current = trial
        lines.append(current)
    return "\n".join(lines)


def artist_inches(fig: Figure, artist) -> tuple[float, float]:
    box = artist.get_window_extent(fig.canvas.get_renderer())
    return box.width / fig.dpi, box.height / fig.dpi


def place_axes(fig: Figure, ax, left: float, right: float, top: float, bottom: float) -> None:
    """Margins in inches from the figure's edges."""
    w, h = fig.get_size_inches()
    ax.set_position([left / w, bottom / h, max(0.05, 1 - (left + right) / w), max(0.05, 1 - (top + bottom) / h)])


def png_bytes(fig: Figure, dpi: float) -> bytes:
    """The figure as a PNG file's bytes (RGBA, 8 bits), with the chunks matplotlib writes:
    the pixel density and the Software text."""
    width = int(fig.get_figwidth() * dpi)  # the Agg renderer's size, as matplotlib computes it
    rows = _UpFiltered(width)
    fig.savefig(rows, format="rgba", dpi=dpi)  # hands its pixel buffer to rows.write
    per_metre = int(dpi / 0.0254 + 0.5)
    return b"".join([b"\x89PNG\r\n\x1a\n",
                     _chunk(b"IHDR", struct.pack(">IIBBBBB", width, rows.height, 8, 6, 0, 0, 0)),
                     _chunk(b"pHYs", struct.pack(">IIB", per_metre, per_metre, 1)),
                     _chunk(b"tEXt", b"Software\0" + f"Matplotlib version{matplotlib.__version__}, "
                                                     f"https://matplotlib.org/".encode("latin-1")),
                     _chunk(b"IDAT", rows.idat),
                     _chunk(b"IEND", b"")])


class _UpFiltered(io.RawIOBase):
    """The file savefig(format="rgba") writes to: it takes the renderer's RGBA buffer and keeps
    it filtered and compressed (`idat`), never holding a filtered copy of the whole image."""

    def __init__(self, width: int):
        super().__init__()
        self.width = width
        self.height = 0
        self.idat = zlib.compress(b"", PNG_COMPRESS_LEVEL)

    def writable(self) -> bool:
        return True

    def write(self, buffer) -> int:
        pixels = np.frombuffer(buffer, dtype=np.uint8).reshape(-1, self.width, 4)
        self.height = len(pixels)
        packer = zlib.compressobj(PNG_COMPRESS_LEVEL)
        block = np.empty((min(PNG_ROWS_PER_BLOCK, len(pixels)), 1 + 4 * self.width), dtype=np.uint8)
        block[:, 0] = 2  # filter type Up: each byte minus the one above, wrapping as PNG wants
        parts = []
        for lo in range(0, len(pixels), PNG_ROWS_PER_BLOCK):
            rows = block[:min(PNG_ROWS_PER_BLOCK, len(pixels) - lo)]
            body = rows[:, 1:].reshape(len(rows), self.width, 4)
            above = pixels[max(lo - 1, 0):lo + len(rows) - 1]
            if lo == 0:  # the first row has none above: kept as it is
                body[0] = pixels[0]
                np.subtract(pixels[1:len(rows)], above, out=body[1:])
            else:
                np.subtract(pixels[lo:lo + len(rows)], above, out=body)
            parts.append(packer.compress(rows))
        parts.append(packer.flush())
        self.idat = b"".join(parts)
        return pixels.nbytes


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def save(fig: Figure, paths: Sequence[str | Path], dpi: float) -> list[Path]:
    """Write the figure to every path (format from the suffix). Vector formats keep text as
    text (TrueType in PDF, <text> in SVG), as journals ask; they use `dpi` only for
    rasterized layers."""
    written = []
    for p in paths:
        p = Path(p)
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.suffix.lower() == ".png":
            p.write_bytes(png_bytes(fig, dpi))
        else:
            with matplotlib.rc_context({"pdf.fonttype": 42, "svg.fonttype": "none"}):
                fig.savefig(p, dpi=dpi)
        written.append(p)
    return written
