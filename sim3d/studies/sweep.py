"""What-if grids: every combination of the given scenario overrides, one step each.

Keys zipped together (`--zip schedule,parallel.vpp`) are one axis of the grid: their i-th
values go together, so values that only make sense in pairs are not crossed with one another.
Results land in OUT/results.csv as they complete (append-only and crash-safe: an interrupted
sweep loses nothing and `--resume` skips finished points); `sim3d sweep` then draws OUT/sweep.png
from them (sim3d/report/sweep_plot.py).
"""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Callable

from .. import __version__
from ..scenario.safe_yaml import YamlInputError, read_yaml_text
from ..scenario.limits import SWEEP_POINTS
from ..scenario.load import canonical_key, load_scenario, parse_override
from ..errors import ScenarioError
from ..scenario.comma_items import comma_items
from ..util.safe_files import folder_lock
from .results_log import META_NAME, ResultsLog, file_digest
from .runner import run_jobs

# summary keys (docs/contracts.md) each point's row holds; optimizer_shards says why a point's
# optimizer step is cheap (ZeRO, FSDP, the distributed optimizer shard it)
RESULT_KEYS = ("step_time_s", "tokens_per_s", "mfu", "bubble_fraction", "comm_exposed_s", "peak_memory_gib",
               "fits_in_memory", "model_tflops_per_gpu", "optimizer_shards", "error")


GRID_FORM = "KEY=V1,V2,... e.g. cluster.inter_node.nic_gbps=100,200"


ZIP_FORM = "KEY,KEY,... naming --grid keys, e.g. schedule,parallel.vpp"


def parse_zip(items: list[str]) -> list[list[str]]:
    """Groups of grid keys (aliases resolved) whose values go together; a key in one group only."""
    groups: list[list[str]] = []
    seen: set[str] = set()
    for item in items:
        keys = [canonical_key(k) for k in comma_items(item, "--zip")]
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
        return comma_items(values, "--grid", item)
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


def point_count(grid: dict[str, list[str]], zips: list[list[str]] = ()) -> int:
    """How many points `points` would list, counted without listing them (10^8 points listed
    took 5.5 GB before the bound on them was checked)."""
    return math.prod(len(values) for _, values in axes(grid, zips))


def check_grid_size(grid: dict[str, list[str]], zips: list[list[str]] = ()) -> None:
    """WorkLimitExceeded (bad input) when the grid has more points than the documented limit."""
    SWEEP_POINTS.check(point_count(grid, zips), grid_shape(grid, zips))


def grid_shape(grid: dict[str, list[str]], zips: list[list[str]] = ()) -> str:
    """'3 schedule+parallel.vpp x 2 training.micro_batch': what the point count is made of."""
    return " x ".join(f"{len(values)} {'+'.join(keys)}" for keys, values in axes(grid, zips))


def label(point: dict[str, str]) -> str:
    return ";".join(f"{k}={v}" for k, v in point.items())


def check_inputs(scenario: Path, grid: dict[str, list[str]], sets: tuple[str, ...] = ()) -> None:
    """Bad input stops the sweep before it starts (exit 2): an invalid base scenario (with its
    `--set` texts), or a calibration profile in the grid that the scenario check rejects. A
    layout that does not fit the cluster is a result (an error row), not bad input."""
    load_scenario(scenario, list(sets))
    for key, values in grid.items():
        if canonical_key(key) == "costs.profile":
            for value in values:
                load_scenario(scenario, [*sets, f"{key}={value}"])


def input_digests(scenario: Path, grid: dict[str, list[str]], sets: tuple[str, ...] = ()) -> dict[str, str]:
    """SHA-256 of every file besides the scenario that a point's answer is read from: the
    calibration profile the scenario names and each one the grid sets, with the provenance JSON
    beside it (it can flag the profile unstable). A resumed sweep whose inputs changed would
    mix two cost models in one table."""
    profiles = [load_scenario(scenario, list(sets)).costs.profile]
    for key, values in grid.items():
        if canonical_key(key) == "costs.profile":
            profiles += values
    files = {}
    for profile in filter(None, profiles):
        for path in (Path(profile), Path(profile).with_suffix(".json")):
            if path.is_file():
                files[str(path)] = file_digest(path)
    return files


def _refuse_changed_inputs(scenario: Path, grid: dict, sets: tuple, meta: dict, results: Path) -> None:
    """The scenario or a profile edited while the points ran: the table holds answers of two
    cost models, which no exit 0 may hand on."""
    now = {"scenario_sha256": file_digest(scenario), "inputs_sha256": input_digests(scenario, grid, sets)}
    changed = [str(scenario)] if now["scenario_sha256"] != meta["scenario_sha256"] else []
    changed += sorted(path for path in {*now["inputs_sha256"], *meta["inputs_sha256"]}
                      if now["inputs_sha256"].get(path) != meta["inputs_sha256"].get(path))
    if changed:
        raise ScenarioError(f"{', '.join(changed)} changed while the sweep ran: {results} mixes the answers of "
                            "two versions of it; sweep again into a new --out")


def run_sweep(scenario: Path, grid: dict[str, list[str]], out: Path, workers: int | None = None,
              backend: str = "local", resume: bool = False,
              progress: Callable[[int, int], None] | None = None, zips: list[list[str]] = (),
              plot: Callable[[Path], object] | None = None, sets: tuple[str, ...] = ()) -> Path:
    """Run every grid point not yet in OUT/results.csv; rows are appended as points finish
    (see results_log). A point that fails, for any reason, is an error row. `zips`: groups of
    grid keys whose values go together (parse_zip). `sets`: `--set` texts applied to the base
    scenario before each point's. `plot(results.csv)` runs once every point is in, still under
    the folder's lock (the caller's drawing: studies do not plot)."""
    sets = tuple(sets)
    check_grid_size(grid, zips)
    check_inputs(scenario, grid, sets)
    columns = ["label", *grid, *RESULT_KEYS]
    # the zip is part of the study: resumed with another (or none) the folder would hold two
    # grids' points in one table. None, not [], when there is none, as a record written before
    # --zip existed reads (its resume without a zip goes on).
    meta = {"scenario_sha256": file_digest(scenario), "inputs_sha256": input_digests(scenario, grid, sets),
            "grid": grid, "zip": [list(group) for group in zips] or None, "sim3d_version": __version__,
            "set": list(sets) or None}  # None without, as a record written before --set existed reads
    out.mkdir(parents=True, exist_ok=True)
    with folder_lock(out, "sweep"):  # held until the plot is written too: it reads the whole table
        with ResultsLog.open(out, columns, meta, resume) as log:
            todo = [p for p in points(grid, zips) if label(p) not in log.done]
            jobs = [(label(p), str(scenario), sets + tuple(f"{k}={v}" for k, v in p.items())) for p in todo]
            by_label = {label(p): p for p in todo}
            for count, (name, summary) in enumerate(run_jobs(jobs, workers, backend), start=1):
                log.append({"label": name, **by_label[name], **{k: summary.get(k, "") for k in RESULT_KEYS}})
                if progress:
                    progress(count, len(jobs))
        _refuse_changed_inputs(scenario, grid, sets, meta, log.path)
        if plot:
            plot(log.path)
    return log.path


def planned_outputs(out: Path) -> list[Path]:
    """The files a sweep writes into `out` besides its plot, to be checked before it starts."""
    return [out / "results.csv", out / META_NAME]
