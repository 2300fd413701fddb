"""The summary of one simulated step (docs/contracts.md#summary-keys, SI units) and its table."""

from __future__ import annotations

import json
import math
from pathlib import Path

from .. import __version__
from ..model.flops import hardware_flops_per_step, model_flops_per_step
from ..model.memory import memory_report
from ..scenario.sharding import ShardingPlan

SUMMARY_KEYS = ("name", "num_gpus", "tp", "pp", "dp", "cp", "ep", "etp", "vpp", "schedule", "micro_batch",
                "global_batch", "num_microbatches", "step_time_s", "tokens_per_s", "model_tflops_per_gpu",
                "hardware_tflops_per_gpu", "mfu", "bubble_fraction", "comm_exposed_s", "peak_memory_gib",
                "fits_in_memory", "sim_events", "sim_wall_s", "hfu", "breakdown", "optimizer_shards", "memory_note",
                "warnings", "sim3d_version")


def summarize(run, memory=None) -> dict:
    """`memory`: the scenario's memory report when the caller has it already."""
    s, r = run.scenario, run.result
    step = r.step_time
    peak = s.gpu.peak_tflops(s.training.precision)
    model_tflops = model_flops_per_step(s) / step / s.num_gpus / 1e12
    hardware_tflops = hardware_flops_per_step(s) / step / s.num_gpus / 1e12
    if memory is None:
        memory = memory_report(s, check_schedule=False)  # the run's schedule is already validated
    summary = {
        "name": s.name, "num_gpus": s.num_gpus, "tp": s.tp, "pp": s.pp, "dp": s.dp, "cp": s.cp, "ep": s.ep,
        "etp": s.etp, "vpp": s.vpp, "schedule": s.schedule, "micro_batch": s.training.micro_batch,
        "global_batch": s.training.global_batch, "num_microbatches": s.num_microbatches,
        "step_time_s": step,
        "tokens_per_s": s.training.global_batch * s.model.seq_len / step,
        "model_tflops_per_gpu": model_tflops,
        "hardware_tflops_per_gpu": hardware_tflops,
        "mfu": model_tflops / peak,
        "bubble_fraction": r.bubble_fraction,
        "comm_exposed_s": r.comm_exposed_s,
        "peak_memory_gib": memory.peak_gib,
        "fits_in_memory": memory.fits,
        "sim_events": r.events,
        "sim_wall_s": r.wall_s,
    }
    summary["hfu"] = hardware_tflops / peak
    summary["breakdown"] = r.breakdown()  # the critical rank's step, part by part
    sharding = ShardingPlan.of(s)
    summary["optimizer_shards"] = sharding.dense_group if sharding.shards_optimizer else 1
    if r.network is not None:  # costs.network: flow
        n = r.network
        summary["network"] = {"model": "flow", "flows": n.flows, "rate_updates": n.rate_updates,
                              "slowed_s": n.slowed_s, "most_slowed": n.most_slowed}
    summary["memory_note"] = memory.reason
    summary["warnings"] = s.warnings()
    summary["sim3d_version"] = __version__
    _require_finite(summary)
    return summary


def _require_finite(summary: dict) -> None:
    """A prediction of inf or nan is never an answer (and is not valid JSON). Inputs are bounded
    far below overflow, so it is a bug: raised as one, naming the values, never printed."""
    bad = [f"{k} = {v}" for k, v in summary.items() if isinstance(v, float) and not math.isfinite(v)]
    bad += [f"breakdown.{k} = {v}" for k, v in summary["breakdown"].items() if not math.isfinite(v)]
    if bad:
        from ..errors import NonFiniteResult
        raise NonFiniteResult(f"the prediction for {summary['name']!r} came out non-finite ({', '.join(bad)}) "
                              "although every input is within its bounds; please report it with the scenario")


def write_summary(summary: dict, path: Path) -> None:
    path.write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")


def summary_table(summary: dict):
    from rich.table import Table
    from rich.text import Text

    table = Table(title=f"sim3d: {summary['name']}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", justify="right")
    etp = f", etp {summary['etp']}" if summary.get("etp", summary["tp"]) != summary["tp"] else ""
    layout = (f"tp {summary['tp']} x pp {summary['pp']} x dp {summary['dp']} x cp {summary['cp']}"
              f" (ep {summary['ep']}{etp}, vpp {summary['vpp']})")
    rows = [
        ("GPUs", f"{summary['num_gpus']}"),
        ("layout", layout),
        ("schedule", f"{summary['schedule']}, {summary['num_microbatches']} micro-batches of {summary['micro_batch']}"),
        ("step time", f"{summary['step_time_s']:.3f} s"),
        ("tokens / s", f"{summary['tokens_per_s']:,.0f}"),
        ("model TFLOP/s per GPU (MFU)", f"{summary['model_tflops_per_gpu']:.1f} ({summary['mfu']:.1%})"),
        ("hardware TFLOP/s per GPU (HFU)", f"{summary['hardware_tflops_per_gpu']:.1f} ({summary['hfu']:.1%})"),
        # bubble_fraction is (step - least busy rank's compute) / step; the breakdown's
        # "waiting for another stage" is another number (the critical rank's), so each says which
        ("bubble (idle share of the least busy rank)", f"{summary['bubble_fraction']:.1%}"),
        ("exposed communication", f"{summary['comm_exposed_s']:.3f} s"),
        ("peak memory per GPU", Text(f"{summary['peak_memory_gib']:.1f} GiB")
         + ("" if summary["fits_in_memory"] else Text("  does not fit", style="red"))),
        ("simulated", f"{summary['sim_events']:,} actions in {summary['sim_wall_s']:.2f} s"),
    ]
    if "network" in summary:
        n = summary["network"]
        rows.append(("flows on the network", f"{n['flows']:,}; sharing links cost them {n['slowed_s']:.3f} s "
                     f"in all (worst {n['most_slowed']:.2f}x its time alone)"))
    for what, value in rows:
        table.add_row(what, value)
    return table


BREAKDOWN_LABELS = {"compute": "compute", "recompute": "recompute", "tp": "exposed TP communication",
                    "cp": "exposed CP communication", "ep": "exposed EP communication",
                    "tp_sync": "waiting for TP peers",
                    "pipeline_wait": "waiting for another stage (bubble on this rank)",
                    "pipeline_p2p": "pipeline transfers", "dp": "exposed DP communication",
                    "embedding_sync": "embedding gradient all-reduce", "optimizer": "optimizer step"}


def breakdown_table(summary: dict):
    """Where the critical rank's step goes: one row per non-zero part, seconds and share."""
    from rich.table import Table

    parts = summary.get("breakdown", {})
    total = sum(parts.values()) or 1.0
    table = Table(title="where the step goes (critical rank)", title_justify="left")
    table.add_column("part")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    shards = summary.get("optimizer_shards", 1)
    labels = {**BREAKDOWN_LABELS, "optimizer": f"optimizer step (its state sharded over {shards:,} ranks)"
              if shards > 1 else BREAKDOWN_LABELS["optimizer"]}
    for part, seconds in parts.items():
        if seconds > 0:
            table.add_row(labels.get(part, part), f"{seconds:.3f}", f"{seconds / total:.1%}")
    table.add_row("step", f"{sum(parts.values()):.3f}", "100%", style="bold")
    return table
