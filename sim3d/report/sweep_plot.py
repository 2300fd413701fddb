"""sweep.png: step time, MFU and bubble against a sweep's first grid key, one series per
combination of the others, read from the sweep's results table (sim3d/studies/sweep.py).

Drawn for a paper, as the schedule comparison is: at one of the SIZES widths (`--size`), with
the axes and the legend in words rather than scenario keys and values, and a small effect
drawn as a change in percent (`SMALL_EFFECT`). matplotlib is imported only to draw."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

from .gantt_sizes import SIZES

PLOT_NAME = "sweep.png"
PDF_NAME = "sweep.pdf"
DPI = 200  # the Gantt chart's and the schedule comparison's


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


# The keys sweeps vary most, in words; any other key is named by its last part (key_name).
KEY_NAMES = {
    "cluster.inter_node.nic_gbps": "NIC bandwidth (Gb/s)",
    "cluster.inter_node.oversubscription": "leaf oversubscription (down:up)",
    "cluster.inter_node.fabric": "network fabric",
    "cluster.inter_node.latency_us": "network latency (µs)",
    "cluster.intra_node.gbps": "NVLink bandwidth (Gb/s)",
    "cluster.gpu": "GPU",
    "cluster.nodes": "nodes",
    "model.seq_len": "sequence length (tokens)",
    "training.micro_batch": "micro-batch size",
    "training.global_batch": "global batch (sequences)",
    "training.recompute": "activation recomputation",
    "training.precision": "precision",
    "parallel.tp": "tensor parallel (tp)",
    "parallel.pp": "pipeline parallel (pp)",
    "parallel.dp": "data parallel (dp)",
    "parallel.cp": "context parallel (cp)",
    "parallel.ep": "expert parallel (ep)",
    "parallel.vpp": "virtual stages per rank (vpp)",
    "schedule": "pipeline schedule",
    "straggler.rank": "straggler rank",
    "straggler.slowdown": "straggler slowdown (x)",
    "faults": "faults",
}
LONGEST_VALUE = 32  # characters of a value in a tick or the legend; longer ones end in an ellipsis


def key_name(key: str) -> str:
    """A grid key in words: KEY_NAMES', else its last part with spaces for underscores."""
    return KEY_NAMES.get(key) or key.rpartition(".")[2].replace("_", " ")


def value_text(key: str, value: str) -> str:
    """A grid value as a reader says it: null as "default", a faults list in words ("no
    faults", "straggler rank 17 x1.3"), any other list or mapping as YAML-like flow text
    without quotes; cut to LONGEST_VALUE characters with an ellipsis."""
    text = value
    if value == "null":
        text = "default"
    elif value.startswith(("[", "{")):
        try:
            parsed = json.loads(value)  # the sweep wrote bracketed grid values as JSON
        except ValueError:
            parsed = value
        text = _faults_text(parsed) if key == "faults" and isinstance(parsed, list) else _flow(parsed)
    return text if len(text) <= LONGEST_VALUE else text[:LONGEST_VALUE - 1].rstrip() + "…"


# One fault of the scenario's `faults:` list in words, by its kind (schema.py's Fault).
FAULT_WORDS = {
    "straggler": lambda f: f"straggler rank {f['rank']} x{f['slowdown']:g}",
    "link": lambda f: f"node {f['node']} NICs at {f['nic_gbps']:g} Gb/s",
    "nic": lambda f: f"node {f['node']} NIC {f['nic']} " + ("down" if f["gbps"] == 0 else f"at {f['gbps']:g} Gb/s"),
    "uplink": lambda f: f"leaf {f['leaf']} uplinks at {f['gbps']:g} Gb/s",
    "leaf": lambda f: f"leaf {f['leaf']} down",
}


def _faults_text(faults: list) -> str:
    if not faults:
        return "no faults"
    parts = []
    for fault in faults:
        kind = next(iter(fault), None) if isinstance(fault, dict) and len(fault) == 1 else None
        try:
            parts.append(FAULT_WORDS[kind](fault[kind]))
        except (KeyError, TypeError, ValueError):  # not a fault the schema knows: shown as written
            parts.append(_flow(fault))
    return "; ".join(parts)


def _flow(value) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(", ", ": ")).replace('"', "")


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


def plot_sweep(results: Path, keys: list[str], paths: Sequence[Path], title: str | None = None,
               zips: list[list[str]] = (), size: str = "screen", xlabel: str | None = None) -> list[Path]:
    """The figure of the results table's successful points, written to every path (PNG, PDF,
    SVG by suffix), each replacing its file whole; none when no point succeeded."""
    import pandas as pd

    from ..util.safe_files import replacing
    from .figure import save
    table = pd.read_csv(results, dtype={key: str for key in keys})
    table[keys] = table[keys].fillna("null")  # a grid value of null (the default) is a point too
    table = table[table["error"].isna() | (table["error"] == "")]
    if table.empty:
        return []
    fig = sweep_figure(table, keys, title, zips, size, xlabel)
    with replacing(*paths) as temps:
        save(fig, temps, DPI)
    return [Path(p) for p in paths]


@dataclass(frozen=True)
class Panel:
    column: str     # of results.csv
    quantity: str   # in words, for the axis label
    unit: str       # of the plotted values, `scale` times the column's
    scale: float
    note: str = ""  # a second line of the axis label


# the bubble named as the summary names it
PANELS = (Panel("step_time_s", "step time", "s", 1.0), Panel("mfu", "MFU", "%", 100.0),
          Panel("bubble_fraction", "bubble", "%", 100.0, "\nidle share of the least busy rank"))

# A panel whose values spread by less than this share of their level shows every value's
# change from one baseline point (the first series at the first x value), in percent, about a
# marked zero line. Drawn from zero in its own units, a 0.5-3% effect is a flat line; zoomed off
# zero in its own units, it fills the panel and the eye reads the heights against a zero that is
# not there. In percent change the axis itself says how large the effect is, and the baseline is
# its zero. One baseline for all series, not one each: the plot stays the values' own shape
# (an affine map of them), so the series' differences from one another are kept too.
SMALL_EFFECT = 0.10
# percent: a relative axis spans at least this much, so that round-off (35 us of a 27.8 s step)
# is drawn flat, not blown up to fill the panel
SMALLEST_RELATIVE_SPAN = 1.0
BASELINE_LABEL = "_baseline"  # the zero line's (a leading underscore keeps it out of legends)


def _is_small_effect(values: list, baseline: float) -> bool:
    """`values`: one array per series."""
    import numpy as np
    every = np.concatenate(values)
    level, spread = np.nanmax(np.abs(every)), np.nanmax(every) - np.nanmin(every)
    return bool(0 < spread < SMALL_EFFECT * level) and baseline != 0


def _categories(table, columns: list[str]) -> list[tuple]:
    """The x positions: distinct values of the x key (with the keys zipped to it), in order."""
    rank = {k: {v: i for i, v in enumerate(_in_order(table[k]))} for k in columns}
    seen = dict.fromkeys(map(tuple, table[columns].itertuples(index=False)))
    return sorted(seen, key=lambda values: tuple(rank[k][v] for k, v in zip(columns, values)))


def sweep_figure(table, keys: list[str], title: str | None = None, zips: list[list[str]] = (),
                 size: str = "screen", xlabel: str | None = None):
    """Step time, MFU and bubble against the first key, one series per combination of the
    others, `size` wide (a key of SIZES: side by side, or stacked in a column). Numeric x
    values are joined by lines in numeric order; text values (schedule names) are categories
    with nothing between them to interpolate, so their points stand alone, each series nudged
    sideways so that equal values do not hide one another. Keys zipped with the first go with
    it: they name its tick ("interleaved-1f1b / vpp=2") instead of splitting the series into
    one point each. `title` "" draws none; `xlabel` replaces the keys' names under the axes."""
    import matplotlib
    import pandas as pd

    from .figure import figure_style, figure_title, fit_text, new_figure

    x = keys[0]
    companions = [k for group in zips if x in group for k in group if k != x]
    others = [k for k in keys[1:] if k not in companions]
    categories = _categories(table, [x, *companions])
    position = {values: i for i, values in enumerate(categories)}
    categorical = not pd.to_numeric(table[x], errors="coerce").notna().any()
    series = _series(table, others)
    width, stacked, style = SIZES[size][0], size == "column", figure_style(size)
    with matplotlib.rc_context(style):
        fig = new_figure(width, 1.0)  # its height is set once the ticks and the legend are measured
        fig.set_layout_engine("constrained")
        axes_width = 0.8 * (width if stacked else width / len(PANELS))  # the y axis' labels take the rest
        ticks = [fit_text(fig, _tick(values, x, companions), style["xtick.labelsize"], axes_width / len(categories))
                 for values in categories]
        named = xlabel if xlabel is not None else ", ".join(key_name(k) for k in [x, *companions])
        named = fit_text(fig, named, style["axes.labelsize"], axes_width)
        tags = [", ".join(value_text(k, v) for k, v in zip(others, name)) for name, _ in series]
        ncols = _legend_columns(fig, tags, style["legend.fontsize"]) if others else 0
        legend_rows = -(-len(tags) // ncols) if ncols else 0
        fig.set_size_inches(width, _height(width, stacked, style, ticks, named, legend_rows))
        label_width = 0.9 * _panel_height(width, stacked)  # a y label runs up the panel's side
        axes = fig.subplots(len(PANELS), 1, sharex=True) if stacked else fig.subplots(1, len(PANELS))
        nudge = 0.6 / len(series) if categorical else 0.0
        drawn = []
        for i, (name, group) in enumerate(series):
            slot = pd.Series([position[tuple(v)] for v in group[[x, *companions]].itertuples(index=False)],
                             index=group.index).sort_values(kind="stable")
            line = {**series_style(i), "label": tags[i]}
            if categorical:
                line["linestyle"] = "none"
            drawn.append(DrawnSeries(line, slot + (i - (len(series) - 1) / 2) * nudge, group.loc[slot.index]))
            if i == 0:  # the baseline point of a relative panel: the first series' at the first x value, if it ran
                baseline = group.loc[slot.index[0]] if slot.iloc[0] == 0 else None
        baseline_name = ", ".join(f"{k.rpartition('.')[2]}={value_text(k, v)}" for k, v in
                                  [*zip([x, *companions], categories[0]), *zip(others, series[0][0])])
        for ax, panel in zip(axes, PANELS):
            ylabel = _draw_panel(ax, panel, drawn, baseline, baseline_name)
            ax.set_ylabel(fit_text(fig, ylabel, style["axes.labelsize"], label_width))
            ax.set_xticks(range(len(categories)), labels=ticks)
            ax.grid(alpha=0.3)
        for ax in axes[-1:] if stacked else axes:
            ax.set_xlabel(named)
        if others:
            fig.legend(handles=axes[0].get_lines()[:len(series)], loc="outside lower center", ncols=ncols,
                       title=", ".join(key_name(k) for k in others), frameon=False)
        figure_title(fig, f"sweep over {', '.join(key_name(k) for k in keys)}" if title is None else title, size)
    return fig


def _tick(values: tuple, x: str, companions: list[str]) -> str:
    return "\n".join([value_text(x, values[0]),
                      *(f"{k.rpartition('.')[2]}={value_text(k, v)}" for k, v in zip(companions, values[1:]))])


class DrawnSeries(NamedTuple):
    line: dict    # ax.plot's style and label
    at: object    # x positions, in x order
    rows: object  # results.csv's rows, in the same order


def _draw_panel(ax, panel: Panel, drawn: list[DrawnSeries], baseline, baseline_name: str) -> str:
    """One quantity: in its units from zero or, where the effect is small, as each value's
    change in percent from the `baseline` row (SMALL_EFFECT; None: no baseline point ran).
    Returns the y axis' label."""
    values = [panel.scale * s.rows[panel.column].to_numpy(dtype=float) for s in drawn]
    base = None if baseline is None else panel.scale * float(baseline[panel.column])
    relative = base is not None and _is_small_effect(values, base)
    for s, v in zip(drawn, values):
        ax.plot(s.at, 100.0 * (v / base - 1.0) if relative else v, **s.line)
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    if relative:
        ax.axhline(0.0, color="#666666", linewidth=0.8, zorder=1, label=BASELINE_LABEL)
        low, high = ax.get_ylim()
        if high - low < SMALLEST_RELATIVE_SPAN:
            middle = (low + high) / 2
            ax.set_ylim(middle - SMALLEST_RELATIVE_SPAN / 2, middle + SMALLEST_RELATIVE_SPAN / 2)
        return f"{panel.quantity} change (%) vs {baseline_name}{panel.note}"
    ax.set_ylim(bottom=0)
    return f"{panel.quantity} ({panel.unit}){panel.note}"


def _legend_columns(fig, tags: list[str], points: float) -> int:
    """As many legend columns as fit the figure's width, each as wide as the widest entry
    and its marker (about three characters)."""
    from .figure import widest
    entry = widest(fig, tags, points) + 3.2 * points / 72.0
    return max(1, min(len(tags), int(0.95 * fig.get_figwidth() / entry)))


def _panel_height(width: float, stacked: bool) -> float:
    """Inches: side by side, about as tall as each panel is wide; stacked in a column, half
    as tall as wide, so that three fit a column's height comfortably."""
    return 0.5 * width if stacked else 0.3 * width


def _height(width: float, stacked: bool, style: dict, ticks: list[str], xlabel: str, legend_rows: int) -> float:
    """The figure's height in inches: the panels and what sits around them, the title, the
    tick labels, the x axis' label and the legend's rows."""
    line = 1.35 / 72.0  # a line of text per point of its size
    lines = (style["figure.titlesize"] + max(t.count("\n") + 1 for t in ticks) * style["xtick.labelsize"]
             + (xlabel.count("\n") + 1) * style["axes.labelsize"])
    around = lines * line + 0.25
    legend = (legend_rows + 1) * 1.2 * style["legend.fontsize"] * line if legend_rows else 0.0
    return (len(PANELS) if stacked else 1) * _panel_height(width, stacked) + around + legend
