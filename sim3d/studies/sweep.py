"""What-if grids: every combination of the given scenario overrides, one step each.

Results land in OUT/results.csv as they complete (so an interrupted sweep loses nothing and
`--resume` skips finished points), then OUT/sweep.png plots step time and MFU against the
first grid key, one line per combination of the others.
"""

from __future__ import annotations

import csv
import itertools
from pathlib import Path
from typing import Callable

from ..scenario import ScenarioError, canonical_key, load_scenario, parse_override
from .runner import run_jobs

RESULT_KEYS = ("step_time_s", "tokens_per_s", "mfu", "bubble_fraction", "comm_exposed_s", "peak_memory_gib",
               "fits_in_memory", "model_tflops_per_gpu", "error")


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    grid = {}
    for item in items:
        key, values = parse_override(item)[0], item.partition("=")[2]
        choices = [v.strip() for v in values.split(",") if v.strip()]
        if not choices:
            raise ScenarioError(f"--grid {item!r}: expected KEY=V1,V2,... e.g. cluster.inter_node.nic_gbps=100,200")
        if key in grid:
            raise ScenarioError(f"--grid: {key} given twice")
        grid[key] = choices
    if not grid:
        raise ScenarioError("--grid: give at least one KEY=V1,V2,...")
    return grid


def points(grid: dict[str, list[str]]) -> list[dict[str, str]]:
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


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


def run_sweep(scenario: Path, grid: dict[str, list[str]], out: Path, workers: int | None = None,
              backend: str = "local", resume: bool = False,
              progress: Callable[[int, int], None] | None = None) -> Path:
    check_inputs(scenario, grid)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.csv"
    columns = ["label", *grid, *RESULT_KEYS]
    done: set[str] = set()
    if results.exists() and resume:
        with results.open() as f:
            done = {row["label"] for row in csv.DictReader(f)}
    elif results.exists():
        raise ScenarioError(f"{results} exists: pass --resume to continue it, or choose another --out")
    todo = [p for p in points(grid) if label(p) not in done]
    jobs = [(label(p), str(scenario), tuple(f"{k}={v}" for k, v in p.items())) for p in todo]
    by_label = {label(p): p for p in todo}
    new_file = not results.exists()
    with results.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        if new_file:
            writer.writeheader()
        for count, (name, summary) in enumerate(run_jobs(jobs, workers, backend), start=1):
            writer.writerow({"label": name, **by_label[name], **{k: summary.get(k, "") for k in RESULT_KEYS}})
            f.flush()
            if progress:
                progress(count, len(jobs))
    plot_sweep(results, list(grid), out / "sweep.png")
    return results


def plot_sweep(results: Path, keys: list[str], path: Path) -> Path | None:
    import pandas as pd
    table = pd.read_csv(results)
    table = table[table["error"].isna() | (table["error"] == "")]
    if table.empty:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, others = keys[0], keys[1:]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    groups = table.groupby(others) if others else [((), table)]
    for name, group in groups:
        group = group.sort_values(x)
        tag = ", ".join(f"{k}={v}" for k, v in zip(others, name if isinstance(name, tuple) else (name,)))
        axes[0].plot(group[x].astype(str), group["step_time_s"], marker="o", label=tag or None)
        axes[1].plot(group[x].astype(str), 100 * group["mfu"], marker="o", label=tag or None)
    axes[0].set_ylabel("step time (s)")
    axes[1].set_ylabel("MFU (%)")
    for ax in axes:
        ax.set_xlabel(x)
        ax.grid(alpha=0.3)
    if others:
        axes[1].legend(fontsize=8)
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return path
