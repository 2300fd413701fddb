"""The dense Gantt chart's image (report/gantt_raster.py): every pixel shows exactly the
share of it that boxes cover, and the image reaches the PNG without being resampled, so a
long periodic schedule cannot alias into bands."""

from __future__ import annotations

import io

import numpy as np
import pytest

from sim3d.report.gantt_raster import PixelImage, coverage, stack_bands
from sim3d.schedule import build
from sim3d.schedule.evaluate import evaluate, uniform_costs


def test_each_pixel_is_the_coverage_weighted_mean_of_the_boxes_over_it():
    rng = np.random.default_rng(7)
    width, bands, n = 23, 3, 40
    x0 = rng.uniform(-2, width + 2, n)
    x1 = x0 + rng.uniform(0, 4, n)
    band = rng.integers(0, bands, n)
    rgb = rng.uniform(0, 1, (n, 3))
    got = coverage(band, x0, x1, rgb, bands, width)
    for b in range(bands):
        for p in range(width):  # brute force: how much of [p, p + 1) each box covers
            share = np.clip(np.minimum(x1, p + 1) - np.maximum(x0, p), 0, None) * (band == b)
            assert got[b, p, 3] == pytest.approx(min(1.0, share.sum()), abs=1e-9)
            if share.sum() > 1e-9:
                assert got[b, p, :3] == pytest.approx(share @ rgb / share.sum(), abs=1e-9)


def test_stack_bands_puts_band_rows_where_asked_bottom_row_first():
    rows = np.zeros((2, 3, 4))
    rows[0, :, 0] = rows[1, :, 1] = rows[:, :, 3] = 1.0
    image = stack_bands(rows, [(0, 2), (3, 4)], height=5)  # rows 0-1 and 3 from the top
    from_top = image[::-1]
    assert (from_top[0:2, :, 0] == 255).all() and (from_top[3, :, 1] == 255).all()
    assert (from_top[2, :, 3] == 0).all() and (from_top[4, :, 3] == 0).all()  # transparent elsewhere


def test_a_dense_gantt_is_one_image_drawn_pixel_for_pixel(monkeypatch):
    """A 400-micro-batch 1F1B has boxes a pixel or two wide: they become one image whose
    opaque pixels land unchanged in the saved PNG (no resampling, no edge strokes), and the
    chart's right-hand column says it shows idle time, not the summary's bubble."""
    from PIL import Image
    from matplotlib.patches import PathPatch
    from sim3d.report import gantt
    schedule = build("1f1b", 4, 400)
    trace = gantt.timeline_to_trace(schedule, evaluate(schedule, uniform_costs(1.0, 2.0)))
    kept = []
    monkeypatch.setattr(gantt, "save", lambda fig, paths, dpi: kept.append(fig) or [])
    gantt.plot_gantt(trace, ["unused.png"], "dense", time_unit="F = 1")
    fig = kept[0]
    ax = fig.axes[0]
    (image,) = [a for a in ax.get_children() if isinstance(a, PixelImage)]
    assert not [a for a in ax.get_children() if isinstance(a, PathPatch)]  # no per-box vector shapes
    assert {"idle", "idle (compute stream)"} <= {t.get_text() for t in [*ax.texts, *fig.legends[0].get_texts()]}
    assert not any("bubble" in t.get_text() for t in [*ax.texts, *fig.legends[0].get_texts()])

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=gantt._DPI)
    png = np.asarray(Image.open(buffer).convert("RGBA"))
    box = ax.bbox  # savefig restored the figure's own dpi: scale the axes back to the PNG's
    k = gantt._DPI / fig.dpi
    left, top = round(box.x0 * k), png.shape[0] - round(box.y1 * k)
    drawn = image.image[::-1]  # top row first, as the PNG
    assert drawn.shape[:2] == (round(box.height * k), round(box.width * k))
    region = png[top:top + drawn.shape[0], left:left + drawn.shape[1]]
    opaque = drawn[:, :, 3] == 255
    assert opaque.sum() > 0.2 * opaque.size
    assert (region[opaque][:, :3] == drawn[opaque][:, :3]).all()
    # the steady state of the first rank is busy throughout: the image covers every pixel
    # of its compute lane there, a third of it in the forward colour (F = 1, B = 2)
    rank0 = drawn[np.flatnonzero(opaque.any(axis=1))[0]]
    middle = rank0[len(rank0) // 4: 3 * len(rank0) // 4]
    assert (middle[:, 3] == 255).all()
    forward, backward = np.array([0x00, 0x72, 0xB2]), np.array([0xE6, 0x9F, 0x00])
    share = (middle[:, 2].mean() - backward[2]) / (forward[2] - backward[2])
    assert share == pytest.approx(1 / 3, abs=0.01)
