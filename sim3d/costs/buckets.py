"""Gradient buckets: which data-parallel reductions a bucket makes (dense parameters, an MoE
model's experts), with which collective, and how many bytes each moves."""

from __future__ import annotations

from functools import cached_property

from ..cluster.placement import EXPERT_GRADIENT_AXIS, GRADIENT_AXIS, REPLICA_AXIS, Placement
from ..model.params import stage_params
from ..scenario.sharding import ShardingPlan


class GradientBuckets:
    """The shape of the data-parallel traffic of a scenario on its placement (no timing)."""

    def __init__(self, scenario, placement: Placement):
        self.s = scenario
        self.placement = placement

    @cached_property
    def sharding(self) -> ShardingPlan:
        return ShardingPlan.of(self.s)

    @cached_property
    def gradient_axes(self) -> tuple[tuple[str, bool], ...]:
        """(group axis, expert?) of each gradient reduction a bucket makes: the dense
        parameters over dp x cp, and an MoE model's experts over their own replicas; with
        reduce-scatters inside the backward, only HSDP's all-reduce of each shard over its
        replicas (a group of one, costing nothing, without replicas)."""
        if self.sharding.reduces_in_compute:
            return ((REPLICA_AXIS, False),)
        if self.s.model.moe is None:
            return ((GRADIENT_AXIS, False),)
        return (GRADIENT_AXIS, False), (EXPERT_GRADIENT_AXIS, True)

    def gradient_op(self, what: str) -> str:
        """The collective of a bucket's "reduce" or "gather"."""
        return "all-gather" if what == "gather" else self.sharding.bucket_reduction

    def bucket_bytes(self, op: str, stage: int, buckets: int, expert: bool) -> float:
        """The buffer of one bucket's collective: its share of the stage's dense (or expert)
        parameters at the collective's width; of the rank's shard alone where the gradients
        were reduce-scattered inside the backward (HSDP's all-reduce over replicas)."""
        params = stage_params(self.s, (stage,))
        shard = self.placement.shard_group_size if self.sharding.reduces_in_compute else 1
        return (params.expert if expert else params.dense) / buckets / shard * self.dp_width(op)

    def dp_width(self, op: str) -> int:
        """Bytes per element of a data-parallel collective: gradients go at their buffer's
        width (fp32 in Megatron's default), gathered parameters at theirs (one byte in FP8)."""
        return self.sharding.gather_bytes if op == "all-gather" else self.sharding.grad_bytes
