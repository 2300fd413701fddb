"""The sweep figure: series in numeric order, each one distinguishable, categories as categories,
a bubble panel beside step time and MFU."""

import pandas as pd
import pytest

from sim3d.report.sweep_plot import plot_sweep, series_style, sweep_figure

BATCHES = ["1024", "128", "2048", "256", "512", "64", "32", "16", "8", "4", "2", "1"]


def _table(xs, series):
    return pd.DataFrame([{"x": x, "s": s, "step_time_s": 10.0 + i, "mfu": 0.4, "bubble_fraction": 0.01 * (i + j)}
                         for i, s in enumerate(series) for j, x in enumerate(xs)])


def test_series_are_in_numeric_order_and_all_distinguishable():
    fig = sweep_figure(_table(["400", "100"], BATCHES), ["x", "s"])
    step_ax, mfu_ax, bubble_ax = fig.axes
    labels = [t.get_text() for t in bubble_ax.get_legend().get_texts()]
    assert labels == [f"s={b}" for b in sorted(BATCHES, key=int)]
    for ax in (step_ax, mfu_ax, bubble_ax):
        styles = {(line.get_color(), line.get_marker()) for line in ax.get_lines()}
        assert len(styles) == len(BATCHES)
        assert [t.get_text() for t in ax.get_xticklabels()] == ["100", "400"]
        assert ax.get_ylim()[0] == 0  # from zero: a small change must not look large
        assert all(line.get_linestyle() != "None" for line in ax.get_lines())  # numbers: joined
    # no two series share colour, marker and line style for far longer than a grid is wide
    assert len({tuple(series_style(i).values()) for i in range(256)}) == 256
    assert len({(series_style(i)["color"], series_style(i)["marker"]) for i in range(64)}) == 64


def test_text_values_are_categories_not_a_line():
    fig = sweep_figure(_table(["zbv", "1f1b", "gpipe"], ["2", "4"]), ["x", "s"])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1f1b", "gpipe", "zbv"]
    lines = ax.get_lines()
    assert all(line.get_linestyle() == "None" for line in lines)
    # side by side, not on top of one another
    first, second = (list(line.get_xdata()) for line in lines)
    assert all(a < b for a, b in zip(first, second)) and all(abs(b - a) < 0.5 for a, b in zip(first, second))


def test_plot_sweep_writes_the_figure(tmp_path):
    results = tmp_path / "results.csv"
    _table(["100", "400"], BATCHES[:3]).assign(error="").to_csv(results, index=False)
    assert plot_sweep(results, ["x", "s"], tmp_path / "sweep.png") == tmp_path / "sweep.png"
    assert (tmp_path / "sweep.png").stat().st_size > 0


def test_the_bubble_panel_plots_each_points_bubble_in_percent_from_zero():
    table = _table(["100", "400"], ["1", "2"])
    fig = sweep_figure(table, ["x", "s"])
    assert len(fig.axes) == 3
    bubble_ax = fig.axes[2]
    assert bubble_ax.get_ylabel().startswith("bubble (%)") and "least busy rank" in bubble_ax.get_ylabel()
    assert bubble_ax.get_ylim()[0] == 0
    plotted = sorted(y for line in bubble_ax.get_lines() for y in line.get_ydata())
    assert plotted == pytest.approx(sorted(100 * table["bubble_fraction"]))


def test_keys_zipped_with_x_name_its_ticks_instead_of_splitting_series():
    table = pd.DataFrame([{"schedule": sc, "vpp": v, "mb": mb, "step_time_s": 1.0, "mfu": 0.4, "bubble_fraction": 0.1}
                          for sc, v in (("1f1b", "1"), ("interleaved-1f1b", "2"), ("zbv", "2")) for mb in "12"])
    fig = sweep_figure(table, ["schedule", "vpp", "mb"], zips=[["schedule", "vpp"]])
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1f1b\nvpp=1", "interleaved-1f1b\nvpp=2", "zbv\nvpp=2"]
    assert len(ax.get_lines()) == 2  # one series per micro-batch size, each with every schedule
    assert all(len(line.get_xdata()) == 3 for line in ax.get_lines())
    assert [t.get_text() for t in fig.axes[2].get_legend().get_texts()] == ["mb=1", "mb=2"]
