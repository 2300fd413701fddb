"""Predicted vs published: every row of a published-runs CSV that sim3d can express.

    python -m sim3d.validation [CSV] [--out reports/validation.csv]

How a row becomes a scenario (its cluster, its era's software, the defaults for what the
source leaves unknown) is `sim3d.validation.published_row`; this module predicts each row's metric,
compares and reports.
"""

from __future__ import annotations

import argparse
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .csv_checks import check_structure, value_problem
from .published_row import family_of, note_settings, read_row, scenario_dict_of
from ..scenario.load import scenario_from_dict
from ..errors import ScenarioError

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CSV = REPO_ROOT / "validation" / "published_dev.csv"  # copied from shared/validation, see its README
GIB = 2**30


@dataclass
class Row:
    id: str
    metric: str
    published: float
    predicted: float | None
    note: str = ""
    # the memory model's verdict on the row's layout (None: a layer's timing, or not expressible);
    # a row with a whole-run metric is a run that trained, so it must fit
    fits: bool | None = None
    peak_gib: float | None = None
    # the published value is one no run can have (see csv_checks): shown, never scored
    invalid: bool = False

    @property
    def ran(self) -> bool:
        """The row reports a whole training run (not one layer's timing or one memory figure)."""
        return self.metric not in LAYER_METRICS + MEMORY_METRICS

    @property
    def error(self) -> float | None:
        if self.predicted is None or not self.published:
            return None
        return (self.predicted - self.published) / self.published


LAYER_METRICS = ("layer_fwd_ms", "layer_bwd_ms", "layer_fwd_bwd_ms")
# parts of a memory profile; Korthikanti's Figure 1 gives them for layouts that need more than
# the GPU has (the no-recompute bars), so such a row is a measurement, not a run that trained
MEMORY_METRICS = ("activation_mem_gib_per_gpu", "param_grad_opt_mem_gib_per_gpu")


def _predict(row: dict) -> tuple[float | None, str, bool | None, float | None]:
    """The row's metric as sim3d predicts it, a note (how it was read and the defaults the
    row's empty cells took), and whether its layout fits in memory, with its peak in GiB."""
    from ..model.memory import memory_report
    metric = row["metric"]
    raw, said = read_row(row, layer_only=metric in LAYER_METRICS)
    scenario = scenario_from_dict(raw)
    value, note = _metric(metric, scenario, row)
    fits = peak = None
    if metric not in LAYER_METRICS:
        report = memory_report(scenario, check_schedule=False)
        fits, peak = report.fits, report.peak_gib
    return value, "; ".join(filter(None, [note, *said])), fits, peak


def _metric(metric: str, s, row: dict) -> tuple[float | None, str]:
    from ..costs.cost_model import CostModel
    from ..api import simulate
    from ..model.memory import memory_report
    from ..model.ops import layer_ops

    if metric in LAYER_METRICS:
        costs = CostModel(s)
        ops = layer_ops(s)
        fwd = costs.ops_cost(ops, "F").seconds
        bwd = costs.ops_cost(ops, "B").seconds
        value = {"layer_fwd_ms": fwd, "layer_bwd_ms": bwd, "layer_fwd_bwd_ms": fwd + bwd}[metric] * 1e3
        return value, "one transformer layer, its TP collectives included"
    if metric in ("activation_mem_gib_per_gpu", "param_grad_opt_mem_gib_per_gpu"):
        report = memory_report(s, check_schedule=False)
        worst = report.worst
        if metric == "activation_mem_gib_per_gpu":
            return (worst.activations + worst.other) / GIB, f"pipeline rank {worst.rank}, no reserve"
        # Korthikanti's Figure 1 counts the transformer layers' states: compare a middle
        # pipeline rank (the first and last also hold the embedding / LM head, shown apart)
        middle = report.rows[len(report.rows) // 2]
        return middle.model_states / GIB, (f"pipeline rank {middle.rank}; first rank with embedding: "
                                           f"{report.rows[0].model_states / GIB:.1f}")
    return _whole_run_metric(metric, simulate(s).summary, s, row)


# metric -> (summary key, factor); per-GPU figures divide by the GPUs
_SUMMARY_METRICS = {"step_time_s": ("step_time_s", 1.0), "step_time_ms": ("step_time_s", 1e3),
                    "tokens_per_s": ("tokens_per_s", 1.0), "model_tflops_per_gpu": ("model_tflops_per_gpu", 1.0),
                    "hardware_tflops_per_gpu": ("hardware_tflops_per_gpu", 1.0)}
# the notes say the source counts model FLOPs (and do not say it does not)
_MODEL_FLOPS = re.compile(r"(?<!not )(?<!no )\bmodel[ _](t?flop)", re.I)


def _whole_run_metric(metric: str, summary: dict, s, row: dict) -> tuple[float | None, str]:
    """A whole-run metric from the simulated summary. FLOP rates follow the row's source:
    `tflops_per_gpu` is hardware FLOPs (recompute counted, as Narayanan et al. and BLOOM
    count) unless the notes say model FLOPs (NeMo, Llama 3). MFU / HFU divide by the dense
    peak of the run's precision, but fp8 runs by the bf16 peak unless the notes say
    `mfu_peak=fp8` (Llama 3 and NeMo quote BF16 MFU)."""
    notes = row.get("notes") if isinstance(row.get("notes"), str) else ""  # pandas gives NaN for empty
    if metric in _SUMMARY_METRICS:
        key, factor = _SUMMARY_METRICS[metric]
        return summary[key] * factor, ""
    if metric in ("tokens_per_s_per_gpu", "tokens_per_gpu_per_s"):
        return summary["tokens_per_s"] / summary["num_gpus"], ""
    if metric == "samples_per_s":
        return summary["global_batch"] / summary["step_time_s"], ""
    if metric == "tflops_per_gpu":
        if _MODEL_FLOPS.search(notes):
            return summary["model_tflops_per_gpu"], "model FLOPs (no recompute)"
        return summary["hardware_tflops_per_gpu"], "hardware FLOPs (recompute counted)"
    if metric in ("mfu", "hfu"):
        precision = s.training.precision
        basis = note_settings(notes).get("mfu_peak", "bf16" if precision == "fp8" else precision).lower()
        try:
            peak = s.gpu.peak_tflops(basis)
        except (KeyError, ValueError):
            return None, f"no {basis} peak for {s.gpu.name}"
        tflops = summary["model_tflops_per_gpu" if metric == "mfu" else "hardware_tflops_per_gpu"]
        return tflops / peak, f"{'model' if metric == 'mfu' else 'hardware'} FLOPs / dense {basis} peak"
    return None, f"metric {metric} not predicted"


COLUMNS = ("id", "metric", "value")  # the least a row needs to be compared


def read_rows(csv_path: Path) -> pd.DataFrame:
    """The CSV's rows, or ScenarioError saying why it cannot be read."""
    check_structure(csv_path)
    try:
        table = pd.read_csv(csv_path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ScenarioError(f"{csv_path}: not a readable CSV ({str(e).splitlines()[0]})") from None
    missing = [c for c in COLUMNS if c not in table.columns]
    if missing:
        raise ScenarioError(f"{csv_path}: no column {', '.join(missing)} (see validation/README.md for the columns)")
    return table


def validate_rows(csv_path: Path = DEFAULT_CSV, progress=None) -> list[Row]:
    rows = []
    for record in read_rows(csv_path).to_dict("records"):
        rid = str(record["id"])
        metric = record["metric"].strip() if isinstance(record["metric"], str) else ""
        record = {**record, "metric": metric}
        if progress:
            progress(rid)
        try:
            published = float(record["value"])
        except (TypeError, ValueError):
            published = math.nan
        problem = value_problem(metric, published)
        if problem:
            rows.append(Row(rid, metric, published, None, f"{INVALID}: column value, {record['value']!r} {problem}",
                            invalid=True))
            continue
        if not metric:
            rows.append(Row(rid, metric, published, None, "no metric named"))
            continue
        try:
            predicted, note, fits, peak = _predict(record)
        except ScenarioError as e:
            predicted, note, fits, peak = None, f"not expressible: {str(e).splitlines()[0]}", None, None
        rows.append(Row(rid, metric, published, predicted, note, fits, peak))
    return rows


INVALID = "invalid, left out of every mean"


def percent(fraction: float, sign: bool = True) -> str:
    """A relative error as a percentage; past 10,000% in powers of ten, since a 300-digit
    error says no more than its exponent."""
    if math.isfinite(fraction) and abs(fraction) < 100:
        return f"{fraction:{'+' if sign else ''}.1%}"
    return f"{100 * fraction:{'+' if sign else ''}.2e}%"


def mape(rows: list[Row], metric: str) -> float | None:
    errors = [abs(r.error) for r in rows if r.metric == metric and r.error is not None]
    return sum(errors) / len(errors) if errors else None


def mape_by_family(rows: list[Row]) -> dict[str, dict[str, tuple[float, int]]]:
    """family -> metric -> (mean absolute percentage error, rows counted); rows without a
    prediction are left out, and so are families / metrics with no predicted row."""
    errors: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.error is not None:
            errors[family_of(r.id)][r.metric].append(abs(r.error))
    return {family: {metric: (sum(e) / len(e), len(e)) for metric, e in sorted(by_metric.items())}
            for family, by_metric in sorted(errors.items())}


def render(rows: list[Row]):
    from rich.table import Table
    table = Table(title="sim3d vs published runs", title_justify="left")
    for col, justify in (("id", "left"), ("metric", "left"), ("published", "right"), ("sim3d", "right"),
                         ("error", "right"), ("fits", "left"), ("note", "left")):
        table.add_column(col, justify=justify)
    for r in rows:
        predicted, error = _cells(r)
        table.add_row(r.id, r.metric, f"{r.published:.4g}", predicted, error, _fits_cell(r), r.note)
    return table


def _cells(r: Row) -> tuple[str, str]:
    """The sim3d and error cells of a row."""
    if r.invalid:
        return "-", "invalid"
    return ("-" if r.predicted is None else f"{r.predicted:.4g}"), ("-" if r.error is None else percent(r.error))


def _fits_cell(r: Row) -> str:
    if r.fits is None:
        return "-"
    peak = f"{r.peak_gib:.0f}" if r.peak_gib < 1e6 else f"{r.peak_gib:.3g}"
    return f"{'yes' if r.fits else 'NO'} {peak} GiB"


def markdown(rows: list[Row]) -> str:
    lines = ["| row | metric | published | sim3d | error |", "|---|---|---:|---:|---:|"]
    for r in rows:
        predicted, error = _cells(r)
        lines.append(f"| {r.id} | {r.metric} | {r.published:.4g} | {predicted} | {error} |")
    return "\n".join(lines)


def _write_scenarios(csv_path: Path, ids: list[str], out: Path, console) -> int:
    import yaml
    by_id = {str(record["id"]): record for record in read_rows(csv_path).to_dict("records")}
    missing = [i for i in ids if i not in by_id]
    if missing or not ids:
        console.print(f"error: unknown row ids: {missing}" if missing else "error: name rows with --row", markup=False)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for rid in ids:
        raw = scenario_dict_of(by_id[rid])
        path = out / f"{rid}.yaml"
        path.write_text(f"# the scenario sim3d.validation.published builds for row {rid} of {csv_path.name}\n"
                        + yaml.safe_dump(raw, sort_keys=False))
        console.print(str(path), markup=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    parser = argparse.ArgumentParser(prog="python -m sim3d.validation", description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--out", type=Path, help="also write the comparison as CSV")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table (for the README)")
    parser.add_argument("--write-scenarios", type=Path, metavar="DIR",
                        help="write the scenario of each row given with --row into DIR and stop")
    parser.add_argument("--row", action="append", default=[], help="a row id (with --write-scenarios)")
    args = parser.parse_args(argv)
    console = Console(width=200, markup=False)
    if not args.csv.is_file():
        console.print(f"error: no such file {args.csv}")
        return 2
    try:
        if args.write_scenarios:
            return _write_scenarios(args.csv, args.row, args.write_scenarios, console)
        with console.status("simulating published runs ...") as status:
            rows = validate_rows(args.csv, progress=lambda rid: status.update(f"simulating {rid} ..."))
    except ScenarioError as e:
        console.print(f"error: {e}")
        return 2
    console.print(markdown(rows) if args.markdown else render(rows), highlight=False)
    for metric in sorted({r.metric for r in rows}):
        value = mape(rows, metric)
        n = sum(1 for r in rows if r.metric == metric and r.error is not None)
        if value is not None:
            console.print(f"mean absolute percentage error, {metric}: {percent(value, sign=False)} over {n} rows")
    for family, by_metric in mape_by_family(rows).items():
        for metric, (value, n) in by_metric.items():
            console.print(f"mean absolute percentage error, {family}_*, {metric}: {percent(value, sign=False)} "
                          f"over {n} rows", highlight=False)
    invalid = [r.id for r in rows if r.invalid]
    if invalid:
        console.print(f"{len(invalid)} rows {INVALID} (their notes say why): {', '.join(invalid)}", highlight=False)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame([{**r.__dict__, "error": r.error, "ran": r.ran} for r in rows]).to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
