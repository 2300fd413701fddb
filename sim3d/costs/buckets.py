"""Gradient buckets: which data-parallel reductions a bucket makes (dense parameters, an MoE
model's experts), with which collective, and how many bytes each moves."""

from __future__ import annotations

from functools import cached_property

from ..cluster.placement import EXPERT_GRADIENT_AXIS, GRADIENT_AXIS, REPLICA_AXIS, Placement
from ..model.params import stage_params
from ..model.ops import ACT_BYTES, grad_bytes


class GradientBuckets:
    """The shape of the data-parallel traffic of a scenario on its placement (no timing)."""

    def __init__(self, scenario, placement: Placement):
        self.s = scenario
        self.placement = placement

    @cached_property
    def sharded_in_compute(self) -> bool:
        """Gradients are reduce-scattered unit by unit inside every backward (ZeRO-2, and ZeRO-3
        resharding after the forward, which also gathers each unit's parameters inside every
        forward and backward: sharded_dp.py), not in buckets after the last backward. ZeRO-3
        keeping its parameters gathered (pipelines) gathers once and reduces once per step, in
        buckets, as the distributed optimizer does."""
        zero = self.s.parallel.zero
        return zero == 2 or (zero == 3 and self.s.reshard_after_forward)

    @cached_property
    def gradient_axes(self) -> tuple[tuple[str, bool], ...]:
        """(group axis, expert?) of each gradient reduction a bucket makes: the dense
        parameters over dp x cp, and an MoE model's experts over their own replicas; with
        reduce-scatters inside the backward, only HSDP's all-reduce of each shard over its
        replicas (a group of one, costing nothing, without replicas)."""
        if self.sharded_in_compute:
            return ((REPLICA_AXIS, False),)
        if self.s.model.moe is None:
            return ((GRADIENT_AXIS, False),)
        return (GRADIENT_AXIS, False), (EXPERT_GRADIENT_AXIS, True)

    def gradient_op(self, what: str) -> str:
        """The collective of a bucket's "reduce" or "gather"."""
        if what == "gather":
            return "all-gather"
        sharded = self.s.parallel.distributed_optimizer and not self.sharded_in_compute
        return "reduce-scatter" if sharded else "all-reduce"

    def bucket_bytes(self, op: str, stage: int, buckets: int, expert: bool) -> float:
        """The buffer of one bucket's collective: its share of the stage's dense (or expert)
        parameters at the collective's width; of the rank's shard alone where the gradients
        were reduce-scattered inside the backward (HSDP's all-reduce over replicas)."""
        params = stage_params(self.s, (stage,))
        shard = self.placement.shard_group_size if self.sharded_in_compute else 1
        return (params.expert if expert else params.dense) / buckets / shard * self.dp_width(op)

    def dp_width(self, op: str) -> int:
        """Bytes per element of a data-parallel collective: gradients go at their buffer's
        width (`grad_bytes`: fp32 in Megatron's default), gathered parameters at theirs."""
        return ACT_BYTES[self.s.training.precision] if op == "all-gather" else grad_bytes(self.s.training)
