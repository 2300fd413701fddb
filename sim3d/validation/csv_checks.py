"""What a published-runs CSV must be before any of its rows is scored: every line as many
fields as the header (an unquoted comma would shift a row's cells into the wrong columns),
every row id once (a repeated row would count twice in the means), and each published value
one its metric can take.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

from ..errors import ScenarioError

# metric -> (lowest, highest) published value that can be a measurement of a training run.
# The bounds are generous, orders of magnitude beyond any run in validation/, so that they
# catch a typo or a unit slip (an mfu of 1e-300, a step time in ms under step_time_s)
# rather than judge a run; they also keep every relative error finite and printable.
METRIC_RANGES: dict[str, tuple[float, float]] = {
    # a fraction of the GPU's peak: more than 1 is more than the GPU can do; below 1e-4 the
    # GPUs would be idle
    "mfu": (1e-4, 1.0), "hfu": (1e-4, 1.0),
    # 0.1 ms, shorter than one kernel launch per layer, to about a day
    "step_time_s": (1e-4, 1e5), "step_time_ms": (0.1, 1e8),
    # one layer: a microsecond to a quarter of an hour
    "layer_fwd_ms": (1e-3, 1e6), "layer_bwd_ms": (1e-3, 1e6), "layer_fwd_bwd_ms": (1e-3, 1e6),
    # 1e8 tokens/s on one GPU is a thousand times what a tiny model reaches; 1e12 for a cluster
    "tokens_per_s": (1e-3, 1e12), "tokens_per_s_per_gpu": (1e-3, 1e8), "tokens_per_gpu_per_s": (1e-3, 1e8),
    "samples_per_s": (1e-6, 1e10),
    # 100 PFLOP/s per GPU: ten times the densest fp4 peak of any GPU sim3d knows
    "tflops_per_gpu": (1e-3, 1e5), "model_tflops_per_gpu": (1e-3, 1e5), "hardware_tflops_per_gpu": (1e-3, 1e5),
    # Korthikanti's Figure 1 shows what layouts that do not fit would need, so more than a
    # GPU has, but not 100 TiB
    "activation_mem_gib_per_gpu": (1e-6, 1e5), "param_grad_opt_mem_gib_per_gpu": (1e-6, 1e5),
}


def value_problem(metric: str, value: float) -> str | None:
    """Why a published value cannot be scored, or None. A metric sim3d does not know has no
    range, but it must still be a positive number."""
    if not math.isfinite(value):
        return "is not a finite number"
    if value == 0:
        return "is zero: no relative error"
    if value < 0:
        return "is not positive"
    if metric in METRIC_RANGES:
        low, high = METRIC_RANGES[metric]
        if not low <= value <= high:
            return f"is outside {metric}'s range [{low:g}, {high:g}]"
    return None


def check_structure(csv_path: Path, id_column: str = "id") -> None:
    """ScenarioError naming the line of the first row whose field count differs from the
    header's, or every row id given more than once with its lines. Blank lines are skipped,
    as pandas skips them."""
    lines_of: dict[str, list[int]] = {}
    try:
        with open(csv_path, newline="", encoding="utf-8-sig") as f:
            reader = csv.reader(f)
            header = next(reader, None)
            if header is None:
                return  # empty: pandas says so
            key = header.index(id_column) if id_column in header else None
            start = reader.line_num + 1
            for fields in reader:
                if fields:
                    if len(fields) != len(header):
                        raise ScenarioError(
                            f"{csv_path}: line {start} has {len(fields)} fields where the header has "
                            f"{len(header)} (an unquoted comma, or a missing cell?); quote cells that hold commas")
                    if key is not None:
                        lines_of.setdefault(fields[key].strip(), []).append(start)
                start = reader.line_num + 1
    except (UnicodeDecodeError, csv.Error) as e:
        raise ScenarioError(f"{csv_path}: not a readable CSV ({str(e).splitlines()[0]})") from None
    repeated = {rid: lines for rid, lines in lines_of.items() if len(lines) > 1}
    if repeated:
        listed = "; ".join(f"{rid!r} on lines {', '.join(map(str, lines))}" for rid, lines in repeated.items())
        raise ScenarioError(f"{csv_path}: row ids must be unique (a repeated row counts twice in the means): {listed}")
