"""Dense Gantt boxes as one image on the output's own pixel grid (gantt.py draws this way
once boxes are too many or too narrow to draw one by one).

Drawn as vector paths, thousands of boxes a few pixels wide are each snapped to the pixel
grid on their own: boxes of equal length come out 3 or 4 pixels wide, their edge strokes
come and go, and the flagship's 192 micro-batches showed as moiré bands across the step.
Here every pixel of a lane takes the colour of what covers it, weighted by how much of the
pixel each box covers (a box filter, which is what an exact renderer shows), with alpha =
covered share, so idle time stays transparent over the grid. The image has the axes' size
in pixels, so nothing is resampled on the way to a PNG; it is handed to the renderer as it
is (`PixelImage`), not through matplotlib's image pipeline, which resamples and masks a
chart-sized image in over a second.
"""

from __future__ import annotations

import numpy as np
from matplotlib.artist import Artist


def coverage(band: np.ndarray, x0: np.ndarray, x1: np.ndarray, rgb: np.ndarray, bands: int,
             width: int) -> np.ndarray:
    """(bands, width, 4) float RGBA: for each band (a lane of a rank) and pixel column, the
    coverage-weighted mean colour of the boxes [x0, x1) (in pixels, any real numbers) of that
    band, and the share of the pixel they cover (at most 1: boxes of one lane that overlap
    count once at most). `rgb`: (n, 3) colours in [0, 1], one per box."""
    x0 = np.clip(np.asarray(x0, dtype=float), 0.0, width)
    x1 = np.clip(np.asarray(x1, dtype=float), 0.0, width)
    keep = x1 > x0
    band, x0, x1, rgb = np.asarray(band)[keep], x0[keep], x1[keep], np.asarray(rgb, dtype=float)[keep]
    # A box adds 1 to the pixels from floor(x0) up to floor(x1) (a running sum of +1 / -1
    # steps), less the part of its first pixel before x0, plus the part of its last pixel
    # before x1; a box inside one pixel gets x1 - x0 there.
    i0, i1 = np.floor(x0).astype(np.int64), np.floor(x1).astype(np.int64)
    stride = width + 1  # one spare column for boxes that end on the right edge
    at0, at1 = band * stride + i0, band * stride + i1
    size = bands * stride
    weights = np.column_stack([rgb, np.ones(len(x0))])  # premultiplied colour, and coverage
    out = np.empty((bands, stride, 4))
    for c in range(4):
        w = weights[:, c]
        steps = np.bincount(at0, w, size) - np.bincount(at1, w, size)
        ends = np.bincount(at1, w * (x1 - i1), size) - np.bincount(at0, w * (x0 - i0), size)
        out[:, :, c] = np.cumsum(steps.reshape(bands, stride), axis=1) + ends.reshape(bands, stride)
    out = out[:, :width]
    covered = out[:, :, 3:]
    with np.errstate(invalid="ignore", divide="ignore"):
        colour = np.where(covered > 1e-9, out[:, :, :3] / covered, 1.0)
    return np.concatenate([np.clip(colour, 0.0, 1.0), np.clip(covered, 0.0, 1.0)], axis=2)


def stack_bands(rows: np.ndarray, spans: list[tuple[int, int]], height: int) -> np.ndarray:
    """(height, width, 4) uint8 image, bottom row first (as renderers take images): band b's
    row of `rows` repeated over the pixel rows spans[b] = [first, end), counted from the top;
    everything else transparent."""
    image = np.zeros((height, rows.shape[1], 4), dtype=np.uint8)
    pixels = np.rint(rows * 255.0).astype(np.uint8)
    for b, (first, end) in enumerate(spans):
        first, end = max(0, first), min(height, end)
        if end > first:
            image[height - end:height - first] = pixels[b]
    return image


class PixelImage(Artist):
    """An RGBA image (uint8, bottom row first: `stack_bands`) that fills its axes, made for
    savefig's dpi: an Agg canvas gets it pixel for pixel (at another size, nearest pixel), PDF
    and SVG embed it at that resolution (their `image_dpi`)."""

    def __init__(self, image: np.ndarray, zorder: float = 3):
        super().__init__()
        self.image = image
        self.set_zorder(zorder)

    def draw(self, renderer) -> None:
        if not self.get_visible():
            return
        box = self.axes.bbox
        image = self.image
        gc = renderer.new_gc()
        self._set_gc_clip(gc)
        if renderer.option_scale_image():  # vector output
            renderer.draw_image(gc, box.x0, box.y0, image)
        else:
            width, height = max(1, round(box.width)), max(1, round(box.height))
            if (height, width) != image.shape[:2]:
                rows = np.minimum((np.arange(height) + 0.5) * image.shape[0] / height, image.shape[0] - 1)
                cols = np.minimum((np.arange(width) + 0.5) * image.shape[1] / width, image.shape[1] - 1)
                image = image[rows.astype(int)][:, cols.astype(int)]
            renderer.draw_image(gc, round(box.x0), round(box.y0), image)
        gc.restore()
        self.stale = False
