"""What-if grids: every combination of the given scenario overrides, one step each.

Keys zipped together (`--zip schedule,parallel.vpp`) are one axis of the grid: their i-th
values go together, so values that only make sense in pairs are not crossed with one another.
Results land in OUT/results.csv as they complete (append-only and crash-safe: an interrupted
sweep loses nothing and `--resume` skips finished points), then OUT/sweep.png plots step time,
MFU and bubble against the first grid key, one series per combination of the others.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Callable

from .. import __version__
from ..scenario.safe_yaml import YamlInputError, read_yaml_text
from ..scenario.load import canonical_key, load_scenario, parse_override
from ..errors import ScenarioError
from ..report.safe_files import folder_lock, write_with
from .results_log import META_NAME, ResultsLog, file_digest
from .runner import run_jobs

RESULT_KEYS = ("step_time_s", "tokens_per_s", "mfu", "bubble_fraction", "comm_exposed_s", "peak_memory_gib",
               "fits_in_memory", "model_tflops_per_gpu", "error")


GRID_FORM = "KEY=V1,V2,... e.g. cluster.inter_node.nic_gbps=100,200"


ZIP_FORM = "KEY,KEY,... naming --grid keys, e.g. schedule,parallel.vpp"


def parse_zip(items: list[str]) -> list[list[str]]:
    """Groups of grid keys (aliases resolved) whose values go together; a key in one group only."""
    groups: list[list[str]] = []
    seen: set[str] = set()
    for item in items:
        keys = [canonical_key(k.strip()) for k in item.split(",") if k.strip()]
        if len(keys) < 2:
            raise ScenarioError(f"--zip {item!r}: expected {ZIP_FORM}")
        for key in keys:
            if key in seen:
                raise ScenarioError(f"--zip: {key} is zipped twice (put the keys that go together in one --zip)")
            seen.add(key)
        groups.append(keys)
    return groups


def parse_grid(items: list[str], zips: list[list[str]] = ()) -> dict[str, list[str]]:
    """KEY=V1,V2,... per item; a value list in brackets is read as YAML, so values may hold
    commas: KEY=["a,b", c] or KEY=[[1, 2], [3, 4]]. `zips` (parse_zip) must name grid keys of
    equal lengths; a zipped key may repeat a value (vpp=1,2,2 beside three schedules), a
    zipped tuple may not."""
    zipped = {key for group in zips for key in group}
    grid = {}
    for item in items:
        key, values = canonical_key(parse_override(item, "--grid", GRID_FORM)[0]), item.partition("=")[2]
        choices = _choices(item, values)
        if not choices:
            raise ScenarioError(f"--grid {item!r}: expected {GRID_FORM}")
        if key in grid:
            raise ScenarioError(f"--grid: {key} given twice")
        if len(set(choices)) != len(choices) and key not in zipped:
            raise ScenarioError(f"--grid {item!r}: a value is given twice")
        grid[key] = choices
    if not grid:
        raise ScenarioError("--grid: give at least one KEY=V1,V2,...")
    for group in zips:
        _check_zip(grid, group)
    return grid


def _check_zip(grid: dict[str, list[str]], group: list[str]) -> None:
    named = ",".join(group)
    for key in group:
        if key not in grid:
            raise ScenarioError(f"--zip {named}: {key} is not a --grid key (the grid has {', '.join(grid)})")
    lengths = [len(grid[key]) for key in group]
    if len(set(lengths)) > 1:
        raise ScenarioError(f"--zip {named}: zipped keys pair their values in order, so each needs as many; got "
                            + ", ".join(f"{n} for {key}" for key, n in zip(group, lengths)))
    tuples = list(zip(*(grid[key] for key in group)))
    repeated = next((t for i, t in enumerate(tuples) if t in tuples[:i]), None)
    if repeated:
        raise ScenarioError(f"--zip {named}: the values ({', '.join(repeated)}) are given twice")


def _choices(item: str, values: str) -> list[str]:
    if not values.strip().startswith("["):
        return [v.strip() for v in values.split(",") if v.strip()]
    try:
        parsed = read_yaml_text(values)
    except YamlInputError as e:
        raise ScenarioError(f"--grid {item!r}: {e}") from None
    if not isinstance(parsed, list):
        raise ScenarioError(f"--grid {item!r}: expected a list of values in brackets")
    return [v if isinstance(v, str) else json.dumps(v) for v in parsed]


def axes(grid: dict[str, list[str]], zips: list[list[str]] = ()) -> list[tuple[list[str], list[tuple[str, ...]]]]:
    """The grid's independent axes in the order of their first key: (keys, value tuples); a
    zipped group is one axis of paired values, every other key an axis of its own."""
    group_of = {key: group for group in zips for key in group}
    result, placed = [], set()
    for key in grid:
        if key not in placed:
            keys = group_of.get(key, [key])
            placed.update(keys)
            result.append((keys, list(zip(*(grid[k] for k in keys)))))
    return result


def points(grid: dict[str, list[str]], zips: list[list[str]] = ()) -> list[dict[str, str]]:
    """Every combination of the axes, each point's keys in the grid's order (its label too)."""
    grid_axes = axes(grid, zips)
    found = []
    for combo in itertools.product(*(values for _, values in grid_axes)):
        point = {k: v for (keys, _), values in zip(grid_axes, combo) for k, v in zip(keys, values)}
        found.append({k: point[k] for k in grid})
    return found


def grid_shape(grid: dict[str, list[str]], zips: list[list[str]] = ()) -> str:
    """'3 schedule+parallel.vpp x 2 training.micro_batch': what the point count is made of."""
    return " x ".join(f"{len(values)} {'+'.join(keys)}" for keys, values in axes(grid, zips))


def label(point: dict[str, str]) -> str:
    return ";".join(f"{k}={v}" for k, v in point.items())


def check_inputs(scenario: Path, grid: dict[str, list[str]]) -> None:
    """Bad input stops the sweep before it starts (exit 2): an invalid base scenario, or a
    calibration profile in the grid that the scenario check rejects. A layout that does not
    fit the cluster is a result (an error row), not bad input."""
    load_scenario(scenario)
    for key, values in grid.items():
        if canonical_key(key) == "costs.profile":
            for value in values:
                load_scenario(scenario, [f"{key}={value}"])


def input_digests(scenario: Path, grid: dict[str, list[str]]) -> dict[str, str]:
    """SHA-256 of every file besides the scenario that a point's answer is read from: the
    calibration profile the scenario names and each one the grid sets, with the provenance JSON
    beside it (it can flag the profile unstable). A resumed sweep whose inputs changed would
    mix two cost models in one table."""
    profiles = [load_scenario(scenario).costs.profile]
    for key, values in grid.items():
        if canonical_key(key) == "costs.profile":
            profiles += values
    files = {}
    for profile in filter(None, profiles):
        for path in (Path(profile), Path(profile).with_suffix(".json")):
            if path.is_file():
                files[str(path)] = file_digest(path)
    return files


def run_sweep(scenario: Path, grid: dict[str, list[str]], out: Path, workers: int | None = None,
              backend: str = "local", resume: bool = False,
              progress: Callable[[int, int], None] | None = None, zips: list[list[str]] = ()) -> Path:
    """Run every grid point not yet in OUT/results.csv; rows are appended as points finish
    (see results_log). A point that fails, for any reason, is an error row. `zips`: groups of
    grid keys whose values go together (parse_zip)."""
    check_inputs(scenario, grid)
    columns = ["label", *grid, *RESULT_KEYS]
    # the zip is part of the study: resumed with another (or none) the folder would hold two
    # grids' points in one table. None, not [], when there is none, as a record written before
    # --zip existed reads (its resume without a zip goes on).
    meta = {"scenario_sha256": file_digest(scenario), "inputs_sha256": input_digests(scenario, grid),
            "grid": grid, "zip": [list(group) for group in zips] or None, "sim3d_version": __version__}
    out.mkdir(parents=True, exist_ok=True)
    with folder_lock(out, "sweep"):  # held until the plot is written too: it reads the whole table
        with ResultsLog.open(out, columns, meta, resume) as log:
            todo = [p for p in points(grid, zips) if label(p) not in log.done]
            jobs = [(label(p), str(scenario), tuple(f"{k}={v}" for k, v in p.items())) for p in todo]
            by_label = {label(p): p for p in todo}
            for count, (name, summary) in enumerate(run_jobs(jobs, workers, backend), start=1):
                log.append({"label": name, **by_label[name], **{k: summary.get(k, "") for k in RESULT_KEYS}})
                if progress:
                    progress(count, len(jobs))
        plot_sweep(log.path, list(grid), out / "sweep.png", title=f"{Path(str(scenario)).name}: sweep over "
                   + ", ".join(grid), zips=zips)
    return log.path


def planned_outputs(out: Path) -> list[Path]:
    """The files a sweep writes into `out`, to be checked before it starts."""
    return [out / "results.csv", out / META_NAME, out / "sweep.png"]


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
