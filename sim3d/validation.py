"""Predicted vs published: every row of a published-runs CSV that sim3d can express.

    python -m sim3d.validation [CSV] [--out reports/validation.csv]

Defaults for what the sources leave unknown are Megatron-LM's documented defaults, applied
to every row alike (never tuned per row): vocabulary 51200 (GPT-2 BPE padded), bf16 on A100
(fp16 has the same peak), the 1F1B schedule, or interleaved 1F1B when the row gives a
virtual-pipeline degree, the A100 cluster of the source (Selene: DGX A100, 8x HDR 200 Gb/s;
Jean Zay for BLOOM: 4x Omni-Path 100 Gb/s per node, from the row's notes).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .scenario import ScenarioError, scenario_from_dict

DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared" / "validation" / "published_dev.csv"
GPUS = {"A100-SXM4-80GB": "a100-80gb", "A100-SXM4-40GB": "a100-40gb", "H100-SXM5-80GB": "h100-sxm"}
GIB = 2**30


@dataclass
class Row:
    id: str
    metric: str
    published: float
    predicted: float | None
    note: str = ""

    @property
    def error(self) -> float | None:
        if self.predicted is None:
            return None
        return (self.predicted - self.published) / self.published


def _int(value, default=None):
    return default if value is None or (isinstance(value, float) and math.isnan(value)) or value == "" else int(value)


def scenario_of(row: dict, layer_only: bool = False):
    """A Scenario for one CSV row, or raise ScenarioError saying what is missing."""
    gbs, mb = _int(row.get("global_batch")), _int(row.get("micro_batch"))
    if layer_only and mb is not None and gbs is None:  # one layer's timing: the batch size is moot
        gbs = mb * _int(row["dp"])
    if gbs is None or mb is None:
        raise ScenarioError("micro_batch / global_batch not published")
    tp, pp, dp = _int(row["tp"]), _int(row["pp"]), _int(row["dp"])
    vpp = _int(row.get("vp"), 1) or 1
    nodes = max(1, row_gpus := _int(row["num_gpus"])) // 8
    recompute = row.get("recompute") if isinstance(row.get("recompute"), str) else "none"
    notes = str(row.get("notes", ""))
    jean_zay = "Omni-Path" in notes
    raw = {
        "name": row["id"],
        "model": {"layers": _int(row["layers"]), "hidden": _int(row["hidden"]), "heads": _int(row["heads"]),
                  "ffn_hidden": _int(row.get("ffn_hidden")), "vocab": _int(row.get("vocab"), 51200),
                  "seq_len": _int(row["seq_len"])},
        "parallel": {"tp": tp, "pp": pp, "dp": dp, "cp": _int(row.get("cp"), 1), "vpp": vpp,
                     "sequence_parallel": str(row.get("sequence_parallel")).lower() == "true",
                     "distributed_optimizer": str(row.get("distributed_optimizer")).lower() in ("true", "zero1")},
        "training": {"micro_batch": mb, "global_batch": gbs, "recompute": recompute, "precision": "bf16"},
        "schedule": "interleaved-1f1b" if vpp > 1 else "1f1b",
        "cluster": {"gpu": GPUS.get(row["gpu"], row["gpu"]), "nodes": max(1, nodes),
                    "gpus_per_node": min(8, row_gpus),
                    "inter_node": ({"fabric": "fat-tree", "nic_gbps": 100, "nics_per_node": 4} if jean_zay
                                   else {"fabric": "rail-optimized", "nic_gbps": 200, "nics_per_node": 8})},
    }
    if layer_only:
        raw["parallel"]["pp"] = 1
        raw["parallel"]["vpp"] = 1
    return scenario_from_dict(raw)


def _predict(row: dict) -> tuple[float | None, str]:
    from .costs.model import CostModel
    from .engine import simulate
    from .model.memory import memory_report
    from .model.ops import layer_ops
    from .report.summary import summarize

    metric = row["metric"]
    if metric.startswith("layer_"):
        s = scenario_of(row, layer_only=True)
        costs = CostModel(s)
        ops = layer_ops(s)
        fwd = costs.ops_cost(ops, "F").seconds
        bwd = costs.ops_cost(ops, "B").seconds
        value = {"layer_fwd_ms": fwd, "layer_bwd_ms": bwd, "layer_fwd_bwd_ms": fwd + bwd}[metric] * 1e3
        return value, "one transformer layer, its TP collectives included"
    s = scenario_of(row)
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
    summary = summarize(simulate(s))
    if metric == "step_time_s":
        return summary["step_time_s"], ""
    if metric == "mfu":
        return summary["mfu"], "model FLOPs / dense peak"
    if metric == "tflops_per_gpu":
        return summary["hardware_tflops_per_gpu"], "hardware FLOPs (recompute counted)"
    return None, f"metric {metric} not predicted"


def validate_rows(csv_path: Path = DEFAULT_CSV, progress=None) -> list[Row]:
    table = pd.read_csv(csv_path)
    rows = []
    for record in table.to_dict("records"):
        if progress:
            progress(record["id"])
        try:
            predicted, note = _predict(record)
        except ScenarioError as e:
            predicted, note = None, f"not expressible: {str(e).splitlines()[0]}"
        rows.append(Row(record["id"], record["metric"], float(record["value"]), predicted, note))
    return rows


def mape(rows: list[Row], metric: str) -> float | None:
    errors = [abs(r.error) for r in rows if r.metric == metric and r.error is not None]
    return sum(errors) / len(errors) if errors else None


def render(rows: list[Row]):
    from rich.table import Table
    table = Table(title="sim3d vs published runs", title_justify="left")
    for col, justify in (("id", "left"), ("metric", "left"), ("published", "right"), ("sim3d", "right"),
                         ("error", "right"), ("note", "left")):
        table.add_column(col, justify=justify)
    for r in rows:
        predicted = "-" if r.predicted is None else f"{r.predicted:.4g}"
        error = "-" if r.error is None else f"{r.error:+.1%}"
        table.add_row(r.id, r.metric, f"{r.published:.4g}", predicted, error, r.note)
    return table


def markdown(rows: list[Row]) -> str:
    lines = ["| row | metric | published | sim3d | error |", "|---|---|---:|---:|---:|"]
    for r in rows:
        predicted = "-" if r.predicted is None else f"{r.predicted:.4g}"
        error = "-" if r.error is None else f"{r.error:+.1%}"
        lines.append(f"| {r.id} | {r.metric} | {r.published:.4g} | {predicted} | {error} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    parser = argparse.ArgumentParser(prog="python -m sim3d.validation", description=__doc__.splitlines()[0])
    parser.add_argument("csv", nargs="?", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--out", type=Path, help="also write the comparison as CSV")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table (for the README)")
    args = parser.parse_args(argv)
    console = Console(width=200)
    if not args.csv.is_file():
        console.print(f"[red]error:[/red] no such file {args.csv}")
        return 2
    with console.status("simulating published runs ...") as status:
        rows = validate_rows(args.csv, progress=lambda rid: status.update(f"simulating {rid} ..."))
    console.print(markdown(rows) if args.markdown else render(rows), highlight=False)
    for metric in sorted({r.metric for r in rows}):
        value = mape(rows, metric)
        n = sum(1 for r in rows if r.metric == metric and r.error is not None)
        if value is not None:
            console.print(f"mean absolute percentage error, {metric}: {value:.1%} over {n} rows")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame([{**r.__dict__, "error": r.error} for r in rows]).to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
