"""FLOP totals, all obtained by summing the op lists of ops.py (never a separate formula), so
that the closed forms of Narayanan et al. 2021 (arXiv:2104.04473, eq. 3) checked in
tests/test_model_flops.py are an independent check of the op lists.

Units: FLOPs (2 per multiply-add), matmul FLOPs only. MoE layers count the useful top-k work
(capacity factor 1): padding or dropping is a per-rank timing effect (ops.py), not model work.
"""

from __future__ import annotations

from .recompute import mtp_policy, recompute_flops, stage_policies
from .ops import (Dims, Op, embedding_dims_ops, head_dims_ops, is_moe_layer, mtp_dims_ops, mtp_is_moe, ops_for,
                  stage_layer_range, stage_ops)


def _unsharded(s) -> Dims:
    return Dims.of(s, capacity=1.0).unsharded()


def forward_flops(ops: list[Op]) -> float:
    return sum(op.fwd_flops for op in ops)


def train_flops(ops: list[Op]) -> float:
    """Forward + backward (input and weight gradients) of the ops."""
    return sum(op.flops for op in ops)


def layer_forward_flops(s, moe_layer: bool = False) -> float:
    """Forward FLOPs of one whole transformer layer for one micro-batch (no parallel split)."""
    return forward_flops(ops_for(_unsharded(s), moe_layer))


def head_forward_flops(s) -> float:
    """Forward FLOPs of the final norm + LM head + loss for one micro-batch (2*b*s*h*V)."""
    return forward_flops(head_dims_ops(_unsharded(s)))


def _per_microbatch(s, with_recompute: bool) -> float:
    d = _unsharded(s)
    dense = ops_for(d, False)
    moe = ops_for(d, True) if s.model.moe else dense
    total = train_flops(embedding_dims_ops(d)) + train_flops(head_dims_ops(d))
    for stage in range(s.num_stages):
        for layer, policy in stage_policies(s, stage_layer_range(s, stage)):
            ops = moe if is_moe_layer(s, layer) else dense
            total += train_flops(ops)
            if with_recompute:
                total += recompute_flops(ops, policy, d)
    return total + s.model.mtp_layers * _mtp_flops(s, d, with_recompute)


def _mtp_flops(s, d: Dims, with_recompute: bool) -> float:
    """One multi-token-prediction module and its head, counted as Megatron counts them
    (training.py num_floating_point_operations adds mtp_num_layers transformer layers and LM heads)."""
    ops = mtp_dims_ops(d, mtp_is_moe(s))
    redo = recompute_flops(ops, mtp_policy(s.training.recompute, s.training.recompute_num_layers), d)
    return train_flops(ops) + train_flops(head_dims_ops(d)) + (redo if with_recompute else 0.0)


def _microbatches_per_step(s) -> float:
    """Micro-batches over all data-parallel replicas in one step."""
    return s.training.global_batch / s.training.micro_batch


def model_flops_per_step(s) -> float:
    """FLOPs of one optimizer step for the global batch, without recomputation (for MFU).

    GPT (ffn 4h, MHA): 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) (Narayanan eq. 3 with 3 passes).
    """
    return _per_microbatch(s, False) * _microbatches_per_step(s)


def hardware_flops_per_step(s) -> float:
    """FLOPs actually executed in one step, including recomputation (for HFU).

    Full recompute on a GPT: 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) (Narayanan eq. 3).
    """
    return _per_microbatch(s, True) * _microbatches_per_step(s)


def stage_flops(s, stage: int, with_recompute: bool = True) -> float:
    """Per-RANK FLOPs of one micro-batch through a global stage (forward + backward, plus
    recomputation when asked): what one TP/CP/EP rank of that stage executes."""
    ops = stage_ops(s, stage)
    total = train_flops(ops)
    if with_recompute:
        d = Dims.of(s)
        for layer, policy in stage_policies(s, stage_layer_range(s, stage)):
            total += recompute_flops(ops_for(d, is_moe_layer(s, layer)), policy, d)
        if s.model.mtp_layers and s.stage_mtp[stage]:
            policy = mtp_policy(s.training.recompute, s.training.recompute_num_layers)
            total += s.stage_mtp[stage] * recompute_flops(mtp_dims_ops(d, mtp_is_moe(s)), policy, d)
    return total
