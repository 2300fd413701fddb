"""The PNG files of `sim3d run`'s plots are encoded by report/figure.py, not by Pillow: they
must hold exactly the pixels matplotlib renders, with its density and Software chunks."""

from __future__ import annotations

import io

import numpy as np


def test_saved_png_has_matplotlibs_pixels_and_metadata(tmp_path):
    from PIL import Image
    from sim3d.report.figure import new_figure, save
    fig = new_figure(3.1, 1.7)  # sizes that are no whole number of pixels at this dpi
    ax = fig.add_axes((0.15, 0.2, 0.8, 0.7))
    ax.plot([0, 1, 2], [2, 0, 1], color="#E69F00")
    ax.fill_between([0, 1], [0, 1], alpha=0.4)  # translucent: the alpha channel is kept too
    ax.set_title("pixels ≠ vectors")
    fig.patch.set_alpha(0.5)
    (path,) = save(fig, [tmp_path / "f.png"], dpi=137)
    reference = io.BytesIO()
    fig.savefig(reference, format="png", dpi=137)  # matplotlib's own PNG writer
    ours, theirs = Image.open(path), Image.open(reference)
    assert ours.mode == theirs.mode == "RGBA" and ours.size == theirs.size == (int(3.1 * 137), int(1.7 * 137))
    assert (np.asarray(ours) == np.asarray(theirs)).all()
    assert ours.info["Software"] == theirs.info["Software"] and ours.info["dpi"] == theirs.info["dpi"]
