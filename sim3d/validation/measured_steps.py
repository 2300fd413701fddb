"""Whole steps measured on one GPU (validation/h100_llama_steps.json, h200_llama_steps.json):
each step's scenario and sim3d's prediction beside the measured median, for each kernel stack
the file ran."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ..api import simulate


@dataclass(frozen=True)
class MeasuredStep:
    gpu: str  # the scenario's preset for the device the file measured
    mode: str  # the kernel stack the run used: eager | compiled
    micro_batch: int
    measured_s: float
    predicted_s: float
    te_s: float  # the same step priced as Megatron + Transformer Engine would launch it

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1


# What each file's model code hands SDPA under each mode (`training.kernels.mask`), as its
# "what" describes the code that ran. Hugging Face transformers' LlamaForCausalLM: no mask and
# is_causal in eager, but under torch.compile a materialized 4-D mask (masking_utils.py
# `_ignore_causal_mask_sdpa` is False while dynamo traces) and K, V repeated to every head
# (integrations/sdpa_attention.py `use_gqa_in_sdpa` is False with a mask). This project's
# plain-PyTorch block (benchmarks/gpu/llama_steps.py) passes is_causal in both modes.
MODEL_CODE_MASKS = {"h100_llama_steps.json": {"eager": "causal", "compiled": "materialized"},
                    "h200_llama_steps.json": {"eager": "causal", "compiled": "causal"}}


def step_scenario(record: dict, mode: str, micro_batch: int, mask: str = "causal") -> dict:
    """The file's scenario equivalent at one micro-batch size and stack. The run kept its
    parameters, gradients and AdamW state in bf16 (its note), so gradients are not reduced in
    fp32 and the optimizer's state is bf16."""
    eq = record["scenario_equivalent"]
    return {"name": "measured-step", "model": dict(eq["model"]), "parallel": {"tp": 1, "pp": 1, "dp": 1},
            "training": {**eq["training"], "micro_batch": micro_batch, "kernels": {"stack": mode, "mask": mask},
                         "optimizer_dtype": "bf16", "grad_reduce_in_fp32": False},
            "cluster": dict(eq["cluster"])}


def measured_steps(path: Path) -> list[MeasuredStep]:
    record = json.loads(Path(path).read_text())
    masks = MODEL_CODE_MASKS.get(Path(path).name, {})
    out = []
    for step in record["steps"]:
        def price(mode: str) -> float:
            mask = masks.get(mode, "causal")
            return simulate(step_scenario(record, mode, step["mbs"], mask)).summary["step_time_s"]
        out.append(MeasuredStep(record["scenario_equivalent"]["cluster"]["gpu"], step["mode"], step["mbs"],
                                step["median_s"], price(step["mode"]), price("te")))
    return out


def steps_markdown(steps: list[MeasuredStep]) -> str:
    lines = ["| GPU | stack | micro-batch | measured [s] | sim3d [s] | error | as `te` [s] |",
             "|---|---|---:|---:|---:|---:|---:|"]
    lines += [f"| {s.gpu} | {s.mode} | {s.micro_batch} | {s.measured_s:.3f} | {s.predicted_s:.3f} | {s.error:+.1%} | "
              f"{s.te_s:.3f} |" for s in steps]
    return "\n".join(lines)
