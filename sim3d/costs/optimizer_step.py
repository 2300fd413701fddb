"""The bytes the optimizer step moves, kernel by kernel, as Megatron runs it
(megatron/core/optimizer/optimizer.py, MixedPrecisionOptimizer.step; distrib_optimizer.py).
The step is memory-bound, so the cost model prices these bytes at the HBM roofline.

Per parameter of the rank's optimizer shard:
* cast of half-precision gradients into the fp32 main grads (`_copy_model_grads_to_main_grads`,
  `.float()`: read 2, write 4), only where the gradient buffer is half precision;
* unscale + inf check of the fp32 main grads (fp16 loss scaling only: read + write 4);
* grad-norm clipping's multi_tensor_l2norm (read 4);
* fused Adam (read fp32 param, grad, exp_avg, exp_avg_sq; write param, exp_avg, exp_avg_sq: 28);
* copy of the fp32 master weights to the 16-bit model weights (read 4, write 2).
With a bf16 optimizer state (`training.optimizer_dtype: bf16`, Apex DistributedFusedAdam's
dtype) Adam reads the bf16 parameter, gradient and two moments and writes three of them (14),
on the weights themselves: no cast into fp32 grads and no master copy.
Per local parameter: zero_grad_buffer rewrites the whole gradient buffer (its width).
"""

from __future__ import annotations

from collections import defaultdict

from ..model.params import stage_params
from ..scenario.sharding import grad_bytes
from .executor_host import host_seconds

GRAD_CAST_BYTES = 6
UNSCALE_BYTES = 8
GRAD_NORM_BYTES = 4
ADAM_BYTES = 28
BF16_ADAM_BYTES = 14
MASTER_COPY_BYTES = 6


def step_bytes(training) -> dict[str, tuple[int, str]]:
    """{kernel: (bytes per parameter, "shard" or "local")} of one optimizer step."""
    bf16_state = training.optimizer_dtype == "bf16" and training.precision != "fp32"
    kernels = {"grad cast": (GRAD_CAST_BYTES, "shard")} if grad_bytes(training) == 2 and not bf16_state else {}
    if training.precision == "fp16":
        kernels["unscale"] = (UNSCALE_BYTES, "shard")
    kernels |= {"grad-norm": (GRAD_NORM_BYTES, "shard"), "Adam": (BF16_ADAM_BYTES if bf16_state else ADAM_BYTES, "shard")}
    if training.precision != "fp32" and not bf16_state:
        kernels["master copy"] = (MASTER_COPY_BYTES, "shard")
    kernels["zero-grad"] = (grad_bytes(training), "local")
    return kernels


def optimizer_seconds(costs, stages) -> float:
    """One optimizer step of a rank holding `stages` under a cost model: the executor's own,
    where the profile measured it per block (executor_host.py; not for a sharded optimizer,
    whose shards it did not measure), else these bytes at the HBM roofline."""
    sharded = costs.sharding.shards_optimizer
    measured = None if sharded else host_seconds(costs, tuple(stages), "step")
    if measured is not None:
        return measured
    held = [stage_params(costs.s, (stage,)) for stage in stages]
    count = {"local": sum(p.total for p in held), "shard": sum(p.total for p in held)}
    if sharded:
        p = costs.placement
        count["shard"] = sum(h.dense / p.shard_group_size + h.expert / p.expert_data_parallel for h in held)
    moved = defaultdict(float)
    for nbytes, per in step_bytes(costs.s.training).values():
        moved[per] += nbytes * count[per]
    return sum(costs.compute_model.memory_time(moved[per]) for per in ("shard", "local"))
