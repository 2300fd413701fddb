"""Predicted vs published: every row of a published-runs CSV that sim3d can express.

    python -m sim3d.validation [CSV] [--out reports/validation.csv]

Defaults for what the sources leave unknown are Megatron-LM's documented defaults, applied
to every row alike (never tuned per row): vocabulary 51200 (GPT-2 BPE padded), bf16 unless
the notes say fp16 (on A100 and H100 fp16 has the same peak), the 1F1B schedule, or
interleaved 1F1B when the row gives a virtual-pipeline degree, the cluster of the source
(Selene: DGX A100, 8x HDR 200 Gb/s; Jean Zay for BLOOM: 4x Omni-Path 100 Gb/s per node, from
the row's notes or its model; DGX H100: 8x ConnectX-7 400 Gb/s).

Each row family (the id's prefix before the first `_`) runs the software of its era, the same
for every row of the family: see `ERA_RULES` and validation/README.md.
"""

from __future__ import annotations

import argparse
import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from .scenario import ScenarioError, scenario_from_dict

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CSV = REPO_ROOT / "validation" / "published_dev.csv"  # copied from shared/validation, see its README
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


# ---- what a row's notes say ------------------------------------------------------------
# `key=value` tokens (num_query_groups=8, ub_tp_comm_overlap=true, precision=bf16, ...); a value
# ends at white space, `;`, `,` or a parenthesis. Keys sim3d does not know are ignored.
_SETTING = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)=([^\s;,()]+)")


def note_settings(notes: str) -> dict[str, str]:
    """The `key=value` tokens of a notes cell, keys lower-cased (the first of a repeated key wins)."""
    out: dict[str, str] = {}
    for key, value in _SETTING.findall(notes or ""):
        out.setdefault(key.lower(), value)
    return out


def _flag(notes: str, settings: dict[str, str], key: str, mentioned: bool = False) -> bool | None:
    """A boolean setting: `key=true|false|1|0` decides; otherwise, with `mentioned`, the bare
    word (e.g. "... with overlap_grad_sync/overlap_param_sync") means on; else None (unknown)."""
    value = {"true": True, "false": False, "1": True, "0": False}.get(settings.get(key.lower(), "").lower())
    if value is None and mentioned and re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", notes or ""):
        return True
    return value


def family_of(row_id: str) -> str:
    """The row family: the id's prefix before the first underscore (kor22, bloom176b, dgxc2411)."""
    return str(row_id).split("_", 1)[0]


# ---- one rule per question, each the same for every row it applies to --------------------
def _precision(settings: dict[str, str]) -> str:
    """`precision=` of the notes when it names bf16 or fp16. "fp16/bf16-mixed" (not stated in
    the sources) and missing values give bf16: both have the same tensor-core peak on A100
    and H100, and bf16 needs no loss scaling."""
    value = settings.get("precision", "").lower()
    return "fp16" if value == "fp16" else "bf16"


# trained on Jean Zay and nowhere else (bigscience train/tr11-176B-ml/README.md, "Hardware"): a
# row of this model runs there whether or not its notes repeat it
JEAN_ZAY_MODELS = ("BLOOM-176B",)


def _cluster(row: dict, notes: str) -> dict:
    """The inter-node network of the row's system."""
    row_gpus = _int(row["num_gpus"])
    if "Omni-Path" in notes or row.get("model") in JEAN_ZAY_MODELS:  # 4 Omni-Path 100 Gb/s links per node
        inter = {"fabric": "fat-tree", "nic_gbps": 100, "nics_per_node": 4}
    elif row["gpu"] == "H100-SXM5-80GB":  # DGX H100 datasheet: 8x ConnectX-7 400 Gb/s NDR, rail-optimized
        inter = {"fabric": "rail-optimized", "nic_gbps": 400, "nics_per_node": 8}
    else:  # Selene, DGX A100 datasheet: 8x ConnectX-6 HDR 200 Gb/s, rail-optimized
        inter = {"fabric": "rail-optimized", "nic_gbps": 200, "nics_per_node": 8}
    return {"gpu": GPUS.get(row["gpu"], row["gpu"]), "nodes": max(1, row_gpus // 8),
            "gpus_per_node": min(8, row_gpus), "inter_node": inter}


def _megatron_2022(row: dict, notes: str, settings: dict[str, str]) -> dict:
    """Megatron-LM / Megatron-DeepSpeed of 2022 (Korthikanti et al.; BLOOM's
    train/tr11-176B-ml/tr11-176B-ml.slurm passes no dropout flags): attention scores
    materialised in HBM with a fused softmax kernel (Megatron's --use-flash-attn postdates
    these runs), Megatron's default dropout 0.1 (megatron/arguments.py --hidden-dropout /
    --attention-dropout), no tensor-parallel communication overlap (Transformer Engine's
    userbuffers overlap postdates them too)."""
    return {"model": {"hidden_dropout": 0.1, "attention_dropout": 0.1},
            "training": {"attention_backend": "unfused", "tp_comm_overlap": False}}


def _nemo_model(model_name: str) -> dict:
    """Architecture and dropout of a NeMo model family, from the `model` column."""
    name = model_name.lower()
    if "llama" in name:
        # NeMo LlamaConfig (nemo/collections/llm/gpt/model/llama.py): SwiGLU, RMSNorm, no
        # biases, attention_dropout = hidden_dropout = 0.0 (Llama 3 trains without dropout)
        return {"activation": "swiglu", "hidden_dropout": 0.0, "attention_dropout": 0.0}
    if "nemotron" in name:
        # dgxc-benchmarking nemotron/nemotron4-15b-synth.yaml: activation squared-relu,
        # hidden_dropout 0.0, attention_dropout 0.0 (Nemotron-4, arXiv:2402.16819 sec. 2)
        return {"activation": "squared-relu", "hidden_dropout": 0.0, "attention_dropout": 0.0}
    # GPT-3 175B: the run's own config, dgxc-benchmarking nemo_megatron/gpt3_175b_hydra.yaml
    # @35a9aec (v24.11.1), sets hidden_dropout 0.1 and attention_dropout 0.1 (NeMo 1.x hydra
    # path). NeMo 2.0's GPTConfig175B (nemo/collections/llm/gpt/model/base.py) sets 0.0, but
    # that recipe is not what these rows ran. GELU and LayerNorm as in GPT-3.
    return {"activation": "gelu", "hidden_dropout": 0.1, "attention_dropout": 0.1}


def _nemo_2024(row: dict, notes: str, settings: dict[str, str]) -> dict:
    """NeMo 24.09-24.11 on Megatron-Core and Transformer Engine (DGX Cloud benchmarks):
    fused (flash / cuDNN) attention, and the overlaps the recipe's YAML switches on as
    recorded in the notes (ub_tp_comm_overlap, overlap_param_sync, overlap_p2p_comm,
    num_query_groups)."""
    model = _nemo_model(str(row.get("model", "")))
    if (groups := settings.get("num_query_groups", "")).isdigit():
        model["kv_heads"] = int(groups)
    training = {"attention_backend": "flash",
                "tp_comm_overlap": bool(_flag(notes, settings, "ub_tp_comm_overlap")),
                "overlap_param_gather": bool(_flag(notes, settings, "overlap_param_sync", mentioned=True))}
    for key, field in (("overlap_grad_sync", "overlap_grad_reduce"), ("overlap_p2p_comm", "overlap_p2p")):
        if (value := _flag(notes, settings, key, mentioned=True)) is not None:  # else the scenario default
            training[field] = value
    if "distributed_fused_adam" in notes:
        # the NeMo 1.x path's optimizer, which those recipes set to reduce in bf16
        # (dgxc-benchmarking nemo_megatron/gpt3_175b_hydra.yaml @35a9aec: optim.grad_sync_dtype: bf16);
        # the NeMo 2.0 recipes keep MegatronMixedPrecision's grad_reduce_in_fp32=True
        training["grad_reduce_in_fp32"] = False
    return {"model": model, "training": training}


# row family -> the software of its era (validation/README.md); families not listed keep
# the scenario defaults
ERA_RULES = {"kor22": _megatron_2022, "bloom176b": _megatron_2022, "dgxc2411": _nemo_2024}


def scenario_of(row: dict, layer_only: bool = False):
    """A Scenario for one CSV row, or raise ScenarioError saying what is missing."""
    return scenario_from_dict(scenario_dict_of(row, layer_only))


def scenario_dict_of(row: dict, layer_only: bool = False) -> dict:
    """The scenario file contents (a plain dict) for one CSV row."""
    gbs, mb = _int(row.get("global_batch")), _int(row.get("micro_batch"))
    if layer_only and mb is not None and gbs is None:  # one layer's timing: the batch size is moot
        gbs = mb * _int(row["dp"])
    if gbs is None or mb is None:
        raise ScenarioError("micro_batch / global_batch not published")
    tp, pp, dp = _int(row["tp"]), _int(row["pp"]), _int(row["dp"])
    vpp = _int(row.get("vp"), 1) or 1
    recompute = row.get("recompute") if isinstance(row.get("recompute"), str) else "none"
    notes = row.get("notes")
    notes = notes if isinstance(notes, str) else ""
    settings = note_settings(notes)
    raw = {
        "name": row["id"],
        "model": {"layers": _int(row["layers"]), "hidden": _int(row["hidden"]), "heads": _int(row["heads"]),
                  "ffn_hidden": _int(row.get("ffn_hidden")), "vocab": _int(row.get("vocab"), 51200),
                  "seq_len": _int(row["seq_len"])},
        "parallel": {"tp": tp, "pp": pp, "dp": dp, "cp": _int(row.get("cp"), 1), "vpp": vpp,
                     "sequence_parallel": str(row.get("sequence_parallel")).lower() == "true",
                     "distributed_optimizer": str(row.get("distributed_optimizer")).lower() in ("true", "zero1")},
        "training": {"micro_batch": mb, "global_batch": gbs, "recompute": recompute,
                     "precision": _precision(settings)},
        "schedule": "interleaved-1f1b" if vpp > 1 else "1f1b",
        "cluster": _cluster(row, notes),
    }
    era = ERA_RULES.get(family_of(row["id"]))
    if era is not None:
        for section, values in era(row, notes, settings).items():
            raw[section].update(values)
    if layer_only:
        raw["parallel"]["pp"] = 1
        raw["parallel"]["vpp"] = 1
    return raw


def _predict(row: dict) -> tuple[float | None, str]:
    from .costs.model import CostModel
    from .api import simulate
    from .model.memory import memory_report
    from .model.ops import layer_ops

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
    summary = simulate(s).summary
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


def _write_scenarios(csv_path: Path, ids: list[str], out: Path, console) -> int:
    import yaml
    table = pd.read_csv(csv_path).set_index("id", drop=False)
    missing = [i for i in ids if i not in table.index]
    if missing or not ids:
        console.print(f"error: unknown row ids: {missing}" if missing else "error: name rows with --row", markup=False)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for rid in ids:
        raw = scenario_dict_of(table.loc[rid].to_dict())
        path = out / f"{rid}.yaml"
        path.write_text(f"# the scenario sim3d.validation builds for row {rid} of {csv_path.name}\n"
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
    if args.write_scenarios:
        return _write_scenarios(args.csv, args.row, args.write_scenarios, console)
    with console.status("simulating published runs ...") as status:
        rows = validate_rows(args.csv, progress=lambda rid: status.update(f"simulating {rid} ..."))
    console.print(markdown(rows) if args.markdown else render(rows), highlight=False)
    for metric in sorted({r.metric for r in rows}):
        value = mape(rows, metric)
        n = sum(1 for r in rows if r.metric == metric and r.error is not None)
        if value is not None:
            console.print(f"mean absolute percentage error, {metric}: {value:.1%} over {n} rows")
    for family, by_metric in mape_by_family(rows).items():
        for metric, (value, n) in by_metric.items():
            console.print(f"mean absolute percentage error, {family}_*, {metric}: {value:.1%} over {n} rows",
                          highlight=False)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        pd.DataFrame([{**r.__dict__, "error": r.error} for r in rows]).to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
