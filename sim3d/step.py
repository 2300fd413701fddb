"""The schedule of one training step of a scenario: the one build-and-lower path that `run`,
`validate`, `execute`, sweep and plan all use, so each proves, replays or executes the same
actions.

Gradient buckets are decided here, from the model alone: Megatron-core's
DistributedDataParallelConfig sizes a bucket at max(40M, 1M * dp) parameters
(megatron/core/distributed/distributed_data_parallel.py), so a chunk holding P parameters
reduces in about P / bucket buckets (at least 1; at most 16, to keep schedules small).
"""

from __future__ import annotations

from .model.params import stage_params
from .scenario.sharding import ShardingPlan
from .schedule import Schedule, build, lower

BUCKET_PARAMS = 40_000_000
MAX_BUCKETS_PER_CHUNK = 16


def dp_buckets_per_chunk(scenario) -> int:
    biggest = max(stage_params(scenario, (stage,)).total for stage in range(scenario.num_stages))
    bucket = max(BUCKET_PARAMS, 1_000_000 * scenario.dp)
    return max(1, min(MAX_BUCKETS_PER_CHUNK, round(biggest / bucket)))


def step_schedule(scenario, buckets_per_chunk: int | None = None) -> Schedule:
    """Generate and lower the scenario's schedule (data-parallel reductions, and parameter
    gathers with the distributed optimizer, included). `buckets_per_chunk` overrides the
    Megatron bucket count (the executor's tests use it to exercise several buckets on tiny
    models). Not re-proved here: the generators are property-tested and `sim3d validate`
    proves a scenario's schedule; this is the hot path of `sim3d run`."""
    compute_only = build(scenario.schedule, scenario.pp, scenario.num_microbatches, scenario.vpp)
    buckets = dp_buckets_per_chunk(scenario) if buckets_per_chunk is None else buckets_per_chunk
    return lower(compute_only, buckets_per_chunk=buckets, param_gather=gathers_after_step(scenario))


def gathers_after_step(scenario) -> bool:
    """Whether updated parameter shards are all-gathered in buckets after the optimizer step
    (`ShardingPlan.gathers_after_step`), over more than one rank."""
    return ShardingPlan.of(scenario).gathers_after_step and max(scenario.dp * scenario.cp, scenario.edp) > 1
