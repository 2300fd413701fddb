"""The number formats of an executed run, as the scenario's `training.precision` says and as
Megatron-LM keeps them (mixed precision: Micikevicius et al. 2018, "Mixed Precision
Training", arXiv:1710.03740, section 3; Megatron's Float16OptimizerWithFloat16Params and its
DDP gradient buffer, `param.main_grad`):

| precision | weights, activations, p2p | gradient buffer (main_grad), dp reduce | master weights | loss scale |
|-----------|---------------------------|-----------------------------------------|----------------|------------|
| fp32      | fp32 (float64 under --check) | the same                             | the weights    | none       |
| bf16      | bf16                      | fp32 (bf16 if grad_reduce_in_fp32: false) | fp32        | none       |
| fp16      | fp16                      | fp16 (fp32 if grad_reduce_in_fp32: true)  | fp32        | dynamic    |
| fp8       | refused: the executor has no FP8 linears (torchao.float8 or Transformer Engine) |

`grad_reduce_in_fp32` unset means Megatron's default, as sim3d.model.ops.grad_bytes prices it:
fp32 buffers for bf16 (arguments.py: "bfloat16 requires gradient accumulation and all-reduce
to be done in fp32"), 16-bit for fp16. The cross-entropy, softmax and norms compute in fp32
whatever the format (attention.compute_dtype).

This module is torch-free at import (the launcher resolves a run's precision before any
process starts); `LossScaler` and the dtype lookups import torch where they run.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

# torch dtype names, as `--json` reports them
WIDTH = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class Precision:
    """What one run computes in. `name` is the scenario's word ("fp32", "bf16", "fp16"), or
    "float64" for a checked fp32 run (the reference's own format)."""

    name: str
    param: str  # weights, activations and pipeline messages
    grad: str  # main_grad: accumulation over micro-batches and the data-parallel reduction
    main: str  # master weights the optimizer updates
    loss_scaling: bool = False

    @property
    def mixed(self) -> bool:
        return self.param != self.main

    def dtype(self, which: str):
        import torch
        return getattr(torch, getattr(self, which))

    def describe(self) -> str:
        if not self.mixed:
            return self.param
        text = f"{self.param} ({self.main} master weights, {self.grad} gradients"
        return text + (", dynamic loss scaling)" if self.loss_scaling else ")")


def fp8_refusal() -> str:
    """Why `training.precision: fp8` does not run here (one line, for exit code 2)."""
    try:
        found = importlib.util.find_spec("torchao.float8") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return ("training.precision=fp8: the executor's FP8 linears need torchao.float8, which is not "
                "importable here; execute with --set training.precision=bf16 (sim3d run still prices fp8)")
    return ("training.precision=fp8: torchao.float8 is installed, but the executor does not route its "
            "tensor-parallel linears through it yet; execute with --set training.precision=bf16")


def resolve_precision(training, check: bool) -> Precision:
    """The formats of a run of a scenario's `training` section (ValueError for fp8)."""
    name = training.precision
    if name == "fp8":
        raise ValueError(fp8_refusal())
    if name == "fp32":
        wide = "float64" if check else "float32"  # --check of an fp32 run: the reference's format
        return Precision("float64" if check else "fp32", wide, wide, wide)
    half = {"bf16": "bfloat16", "fp16": "float16"}[name]
    in_fp32 = training.grad_reduce_in_fp32
    if in_fp32 is None:
        in_fp32 = name != "fp16"
    return Precision(name, half, "float32" if in_fp32 else half, "float32", loss_scaling=name == "fp16")


class LossScaler:
    """Dynamic loss scaling for fp16 (Micikevicius et al. 2018, section 3.2), with
    torch.amp.GradScaler's defaults: start at 2^16, halve the scale and skip the step when a
    gradient is not finite, double it after 2000 steps in a row without overflow."""

    def __init__(self, scale: float = 2.0 ** 16, growth: float = 2.0, backoff: float = 0.5,
                 interval: int = 2000):
        self.scale, self.growth, self.backoff, self.interval = scale, growth, backoff, interval
        self.good_steps = 0

    def update(self, overflow: bool) -> None:
        if overflow:
            self.scale *= self.backoff
            self.good_steps = 0
            return
        self.good_steps += 1
        if self.good_steps == self.interval:
            self.scale *= self.growth
            self.good_steps = 0
