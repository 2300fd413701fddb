"""The sweep figure: series in numeric order, each one distinguishable, categories as categories."""

import pandas as pd

from sim3d.studies.sweep import plot_sweep, series_style, sweep_figure

BATCHES = ["1024", "128", "2048", "256", "512", "64", "32", "16", "8", "4", "2", "1"]


def _table(xs, series):
    return pd.DataFrame([{"x": x, "s": s, "step_time_s": 10.0 + i, "mfu": 0.4}
                         for i, s in enumerate(series) for x in xs])


def test_series_are_in_numeric_order_and_all_distinguishable():
    fig = sweep_figure(_table(["400", "100"], BATCHES), ["x", "s"])
    step_ax, mfu_ax = fig.axes
    labels = [t.get_text() for t in mfu_ax.get_legend().get_texts()]
    assert labels == [f"s={b}" for b in sorted(BATCHES, key=int)]
    for ax in (step_ax, mfu_ax):
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
