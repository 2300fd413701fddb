"""What sim3d's executor spends on the host around a step's kernels, measured whole by the
calibration harness (calibrate/blocks.py): its optimizer step and the copies around each
data-parallel all-reduce (sim3d/executor/optimizer.py: flatten the bucket's gradients into one
buffer, copy the average back). The executor steps and copies every parameter tensor on its
own, so on a CPU a tensor costs a dispatch, which the bytes an optimizer kernel moves
(optimizer_step.py) do not count. A profile holds these rows per block (a layer, the
embedding, the head) at one shape key; a rank's cost is the sum over the blocks of its stages,
or None where any block was not measured, and the byte model prices it instead."""

from __future__ import annotations

from .compute import block_shape
from .provenance import PROFILE


def stage_blocks(scenario, stage: int) -> list[tuple[str, int]]:
    """(measured block, how many) that global `stage` holds."""
    out = [("block", scenario.stage_layers[stage])]
    if stage == 0:
        out.append(("embedding_block", 1))
    if stage == scenario.num_stages - 1:
        out.append(("head_block", 1))
    return [(block, n) for block, n in out if n]


def measured_host_seconds(profile, scenario, shape: str, dtype: str, stages, what: str) -> float | None:
    """Seconds of the executor's `what` ("step" or "grad_copies") over the blocks of `stages`,
    or None where the profile lacks one of them."""
    if profile is None:
        return None
    total = 0.0
    for stage in stages:
        for block, count in stage_blocks(scenario, stage):
            seconds = profile.executor_host_seconds(block, what, shape, dtype)
            if seconds is None:
                return None
            total += count * seconds
    return total


def host_seconds(costs, stages, what: str) -> float | None:
    """`measured_host_seconds` for a cost model's scenario and profile (the key of its
    parameters: context parallelism does not split them), named in its provenance."""
    seconds = measured_host_seconds(costs.profile, costs.s, block_shape(costs.s, with_cp=False),
                                    costs.compute_model.dtype, stages, what)
    if seconds is not None:
        costs.provenance.record(f"executor {what.replace('_', ' ')} (measured per block)", PROFILE)
    return seconds


def gradient_copies(costs, stage: int, buckets: int) -> float:
    """Seconds of the executor's copies around one of a stage's `buckets` all-reduces: only
    where the gradients are all-reduced over dp x cp (a sharded optimizer reduce-scatters)."""
    if costs.s.dp * costs.s.cp < 2 or costs.sharding.shards_optimizer:
        return 0.0
    return (host_seconds(costs, (stage,), "grad_copies") or 0.0) / buckets
