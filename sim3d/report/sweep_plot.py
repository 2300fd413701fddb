"""sweep.png: step time, MFU and bubble against a sweep's first grid key, one series per
combination of the others, read from the sweep's results table (sim3d/studies/sweep.py)."""

from __future__ import annotations

from pathlib import Path

from ..util.safe_files import write_with

PLOT_NAME = "sweep.png"


# Okabe & Ito (2008, "Color Universal Design"): distinguishable with every common colour-vision
# deficiency; markers differ too, so lines stay apart in greyscale print.
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
LINESTYLES = ("-", "--", ":", "-.")


def series_style(i: int) -> dict:
    """Colour, marker and line style of the i-th series. The marker steps one further each time
    the colours wrap, so no (colour, marker) pair repeats within len(PALETTE) x len(MARKERS) = 64
    series, and the first eight still differ in both; past 64 the line style tells them apart."""
    colours, markers = len(PALETTE), len(MARKERS)
    return {"color": PALETTE[i % colours], "marker": MARKERS[(i + i // colours) % markers],
            "linestyle": LINESTYLES[i // (colours * markers) % len(LINESTYLES)]}


def _numbers_first(values):
    """Sort key of grid values read as text: numerically where they are numbers (512 before
    1024), "null" after them; text grids alphabetically."""
    import pandas as pd
    numbers = pd.to_numeric(values, errors="coerce")
    return numbers if numbers.notna().any() else values


def _in_order(column) -> list[str]:
    import pandas as pd
    return pd.Series(column.unique()).sort_values(key=_numbers_first, na_position="last", kind="stable").tolist()


def _series(table, others: list[str]) -> list[tuple[tuple, object]]:
    """(values of the other keys, rows) per series, in the order of those values (numbers as
    numbers: 128 before 1024), first key first; groupby alone would order them as text."""
    if not others:
        return [((), table)]
    rank = {k: {v: i for i, v in enumerate(_in_order(table[k]))} for k in others}
    groups = [(name if isinstance(name, tuple) else (name,), group)
              for name, group in table.groupby(others, sort=False)]
    return sorted(groups, key=lambda item: tuple(rank[k][v] for k, v in zip(others, item[0])))


def plot_sweep(results: Path, keys: list[str], path: Path, title: str | None = None,
               zips: list[list[str]] = ()) -> Path | None:
    import pandas as pd
    table = pd.read_csv(results, dtype={key: str for key in keys})
    table[keys] = table[keys].fillna("null")  # a grid value of null (the default) is a point too
    table = table[table["error"].isna() | (table["error"] == "")]
    if table.empty:
        return None
    fig = sweep_figure(table, keys, title, zips)
    return write_with(path, lambda temp: fig.savefig(temp, dpi=150))


# (column, axis label, scale): each panel from zero, the bubble named as the summary names it
PANELS = (("step_time_s", "step time (s)", 1.0), ("mfu", "MFU (%)", 100.0),
          ("bubble_fraction", "bubble (%)\nidle share of the least busy rank", 100.0))


def _categories(table, columns: list[str]) -> list[tuple]:
    """The x positions: distinct values of the x key (with the keys zipped to it), in order."""
    rank = {k: {v: i for i, v in enumerate(_in_order(table[k]))} for k in columns}
    seen = dict.fromkeys(map(tuple, table[columns].itertuples(index=False)))
    return sorted(seen, key=lambda values: tuple(rank[k][v] for k, v in zip(columns, values)))


def sweep_figure(table, keys: list[str], title: str | None = None, zips: list[list[str]] = ()):
    """Step time, MFU and bubble against the first key, one series per combination of the
    others. Numeric x values are joined by lines in numeric order; text values (schedule names)
    are categories with nothing between them to interpolate, so their points stand alone, each
    series nudged sideways so that equal values do not hide one another. Keys zipped with the
    first go with it: they name its tick ("interleaved-1f1b / vpp=2") instead of splitting the
    series into one point each."""
    import pandas as pd
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    x = keys[0]
    companions = [k for group in zips if x in group for k in group if k != x]
    others = [k for k in keys[1:] if k not in companions]
    fig = Figure(figsize=(14, 4), layout="constrained")
    FigureCanvasAgg(fig)  # no pyplot: nothing left in a global registry of figures
    axes = fig.subplots(1, len(PANELS))
    categories = _categories(table, [x, *companions])
    position = {values: i for i, values in enumerate(categories)}
    categorical = not pd.to_numeric(table[x], errors="coerce").notna().any()
    series = _series(table, others)
    width = 0.6 / len(series) if categorical else 0.0
    for i, (name, group) in enumerate(series):
        slot = pd.Series([position[tuple(v)] for v in group[[x, *companions]].itertuples(index=False)],
                         index=group.index).sort_values(kind="stable")
        group = group.loc[slot.index]  # in x order, so a numeric series' line runs left to right
        at = slot + (i - (len(series) - 1) / 2) * width
        tag = ", ".join(f"{k}={v}" for k, v in zip(others, name))
        style = {**series_style(i), "label": tag or None}
        if categorical:
            style["linestyle"] = "none"
        for ax, (column, _, scale) in zip(axes, PANELS):
            ax.plot(at, scale * group[column], **style)
    ticks = ["\n".join([values[0], *(f"{k.rpartition('.')[2]}={v}" for k, v in zip(companions, values[1:]))])
             for values in categories]
    for ax, (_, ylabel, _) in zip(axes, PANELS):
        ax.set_ylabel(ylabel)
        ax.set_xlabel(", ".join([x, *companions]))
        ax.set_xticks(range(len(categories)), labels=ticks)
        ax.grid(alpha=0.3)
        # from zero and in plain numbers: a 35 us change of a 27.8 s step must not fill the
        # axis as if it mattered
        ax.ticklabel_format(axis="y", useOffset=False, style="plain")
        ax.set_ylim(bottom=0)
    if others:
        axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1), ncols=1 + (len(series) - 1) // 20)
    fig.suptitle(title or f"sweep over {', '.join(keys)}", fontsize=11)
    return fig
