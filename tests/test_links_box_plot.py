"""The link plot's box plot is drawn by hand (links_plot._box_plot, four artists instead of
Axes.boxplot's dozens): it must show what Axes.boxplot shows."""

from __future__ import annotations

import numpy as np


def test_boxes_whiskers_medians_and_outliers_are_boxplots():
    from sim3d.report.figure import new_figure
    from sim3d.report.links_plot import _box_plot
    rng = np.random.default_rng(3)
    data = [rng.gamma(2.0, 2.0, 150), rng.normal(30.0, 5.0, 90), np.full(12, 7.5), rng.uniform(0, 50, 40)]
    fig = new_figure(6, 4)
    ours, theirs = fig.add_axes((0.1, 0.1, 0.35, 0.8)), fig.add_axes((0.55, 0.1, 0.35, 0.8))
    _box_plot(ours, data, ["C0", "C1", "C2", "C3"])
    drawn = theirs.boxplot(data, patch_artist=True)
    boxes, whiskers, medians = ours.collections
    for ours_box, their_box in zip(boxes.get_paths(), drawn["boxes"]):
        assert np.allclose(ours_box.vertices[:4], their_box.get_path().vertices[:4])
    their_lines = [line.get_xydata() for pair in zip(drawn["whiskers"][::2], drawn["whiskers"][1::2],
                                                      drawn["caps"][::2], drawn["caps"][1::2]) for line in pair]
    assert np.allclose([segment for segment in whiskers.get_segments()], their_lines)
    assert np.allclose(medians.get_segments(), [line.get_xydata() for line in drawn["medians"]])
    (fliers,) = ours.lines
    assert np.allclose(fliers.get_xydata(), np.concatenate([line.get_xydata() for line in drawn["fliers"]]))
    assert ours.get_xlim() == theirs.get_xlim()
    fig.canvas.draw()
    assert np.allclose(ours.get_ylim(), theirs.get_ylim())
