"""Megatron-style tensor-parallel communication as autograd functions.

Each operator is paired with its conjugate in backward (Shoeybi et al. 2019, "Megatron-LM",
section 3, operators f and g; Korthikanti et al. 2022, "Reducing Activation Recomputation",
section 4.2.2, for the sequence-parallel all-gather / reduce-scatter pair):

| function               | forward                    | backward                  |
|------------------------|----------------------------|---------------------------|
| copy_to_tp             | identity                   | all-reduce                |
| reduce_from_tp         | all-reduce                 | identity                  |
| gather_seq             | all-gather along dim 0     | reduce-scatter along dim 0|
| reduce_scatter_seq     | reduce-scatter along dim 0 | all-gather along dim 0    |

Activations are laid out [sequence, batch, hidden] so the sequence-parallel shards are
contiguous slices of dim 0. `vocab_parallel_cross_entropy` computes the loss of logits that
are split over the vocabulary without gathering them (max, sum-exp and target logit are
all-reduced; the gradient softmax - onehot is local).

`TPContext.sabotage` is a test-only hook: when it is "tp_allreduce" the forward all-reduce
of `reduce_from_tp` (and the reduce-scatter of `reduce_scatter_seq`) is skipped, so a
`--check` run must fail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


@dataclass
class TPContext:
    """The tensor-parallel group of one rank. `group=None` with size 1 means no TP."""

    size: int = 1
    rank: int = 0
    group: Any = None
    sequence_parallel: bool = False
    sabotage: str | None = None

    @property
    def sp(self) -> bool:
        return self.sequence_parallel and self.size > 1


def all_reduce(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    if tp.size > 1:
        x = x.contiguous()
        dist.all_reduce(x, group=tp.group)
    return x


def all_gather_dim0(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    if tp.size == 1:
        return x
    out = torch.empty((x.shape[0] * tp.size, *x.shape[1:]), dtype=x.dtype, device=x.device)
    _all_gather(out, x.contiguous(), group=tp.group)
    return out


def reduce_scatter_dim0(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    if tp.size == 1:
        return x
    if x.shape[0] % tp.size:
        raise ValueError(f"sequence length {x.shape[0]} is not divisible by tp={tp.size}")
    out = torch.empty((x.shape[0] // tp.size, *x.shape[1:]), dtype=x.dtype, device=x.device)
    _reduce_scatter(out, x.contiguous(), group=tp.group)
    return out


def split_dim0(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    if tp.size == 1:
        return x
    return x.chunk(tp.size, dim=0)[tp.rank].contiguous()


class _CopyToTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad.clone(), ctx.tp), None


class _ReduceFromTP(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp):
        if tp.sabotage == "tp_allreduce":
            return x.clone()
        return all_reduce(x.clone(), tp)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _GatherSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        return all_gather_dim0(x, tp)

    @staticmethod
    def backward(ctx, grad):
        return reduce_scatter_dim0(grad, ctx.tp), None


class _ReduceScatterSeq(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tp):
        ctx.tp = tp
        if tp.sabotage == "tp_allreduce":
            return split_dim0(x, tp)
        return reduce_scatter_dim0(x, tp)

    @staticmethod
    def backward(ctx, grad):
        return all_gather_dim0(grad, ctx.tp), None


def copy_to_tp(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    return _CopyToTP.apply(x, tp) if tp.size > 1 else x


def reduce_from_tp(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    return _ReduceFromTP.apply(x, tp) if tp.size > 1 else x


def gather_seq(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    return _GatherSeq.apply(x, tp) if tp.size > 1 else x


def reduce_scatter_seq(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    return _ReduceScatterSeq.apply(x, tp) if tp.size > 1 else x


def enter_tp_region(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    """Input of a column-parallel linear: all-gather the sequence (SP) or copy ("f")."""
    return gather_seq(x, tp) if tp.sp else copy_to_tp(x, tp)


def exit_tp_region(x: torch.Tensor, tp: TPContext) -> torch.Tensor:
    """Output of a row-parallel linear: reduce-scatter the sequence (SP) or all-reduce ("g")."""
    return reduce_scatter_seq(x, tp) if tp.sp else reduce_from_tp(x, tp)


class _VocabParallelCE(torch.autograd.Function):
    """Per-token cross-entropy of logits split over the vocabulary (last dim)."""

    @staticmethod
    def forward(ctx, logits, target, vocab_start, tp):
        logits_max = logits.max(dim=-1).values
        if tp.size > 1:
            dist.all_reduce(logits_max, op=dist.ReduceOp.MAX, group=tp.group)
        shifted = logits - logits_max.unsqueeze(-1)
        exp = shifted.exp()
        sum_exp = all_reduce(exp.sum(dim=-1), tp)
        vocab_local = logits.shape[-1]
        outside = (target < vocab_start) | (target >= vocab_start + vocab_local)
        local_target = (target - vocab_start).masked_fill(outside, 0)
        picked = shifted.gather(-1, local_target.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        picked = all_reduce(picked, tp)
        softmax = exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, local_target, outside)
        return sum_exp.log() - picked

    @staticmethod
    def backward(ctx, grad):
        softmax, local_target, outside = ctx.saved_tensors
        out = softmax.clone()
        onehot = (~outside).to(out.dtype).unsqueeze(-1)
        out.scatter_add_(-1, local_target.unsqueeze(-1), -onehot)
        return out * grad.unsqueeze(-1), None, None, None


def vocab_parallel_cross_entropy(logits: torch.Tensor, target: torch.Tensor, tp: TPContext) -> torch.Tensor:
    """Per-token loss; `logits` [..., vocab/tp] hold this rank's slice of the vocabulary."""
    return _VocabParallelCE.apply(logits, target, tp.rank * logits.shape[-1], tp)
