"""Gradients and the optimizer of one rank, as Megatron-LM keeps them (its DDP gradient buffer
and Float16OptimizerWithFloat16Params / DistributedOptimizer), in the formats of
precision.py:

* Every parameter owns `main_grad` (the gradient buffer's format). A post-accumulate hook
  adds each backward's `.grad` into it and drops `.grad`, so micro-batches accumulate in
  main_grad's format (fp32 under bf16), never in the 16-bit weights' format.
* `DP_REDUCE#b` (`reduce`): with sequence parallelism, the replicated parameters' partial
  gradients are all-reduced over tp first; then the bucket's main_grads are averaged over the
  gradient group `dp` (dp x cp ranks: each cp rank saw 1/cp of the tokens) with an all-reduce,
  or reduce-scattered with the distributed optimizer (ZeRO-1: each member keeps the gradient
  and the master weights of its share of the bucket).
* `OPT_STEP` (`step`): the gradients in the master weights' format, unscaled by the loss
  scale (fp16), checked for overflow (all ranks agree through an all-reduce over the world,
  as Megatron's found_inf is reduced over the model-parallel and data-parallel groups) and
  then plain SGD on the master weights, which are copied (rounded) into the model's weights.
  SGD rather than torch.optim: its first use imports torch._dynamo, seconds per process.
* `PARAM_GATHER#b` (`gather`): the updated shards, in the weights' format, all-gathered.

Master weights start from the model's weights as created (already rounded to bf16 / fp16),
as Megatron builds its fp32 main params from the 16-bit ones.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..costs.collectives import bus_factor
from .precision import LossScaler, Precision
from .tensor_parallel import TPContext, all_gather_dim0, reduce_scatter_dim0


def wire_bytes(op: str, buffer: torch.Tensor, group_size: int) -> int:
    """What the trace's `bytes` means for a collective row: the bytes one member sends in a
    ring over the whole buffer (sim3d.costs.collectives.bus_factor), as the simulator counts."""
    return round(bus_factor(op, group_size) * buffer.numel() * buffer.element_size()) if group_size > 1 else 0


def _accumulate_main_grad(p: torch.Tensor) -> None:
    p.main_grad.add_(p.grad)  # in main_grad's format: fp32 accumulation of 16-bit gradients
    p.grad = None


class GradientsAndOptimizer:
    """`buckets`: bucket id -> its parameters (the schedule's DP_REDUCE / PARAM_GATHER units)."""

    def __init__(self, buckets: dict[int, list], precision: Precision, tp: TPContext, dp: TPContext,
                 dist_opt: bool, lr: float, sabotage: str | None = None, expert_dp: TPContext | None = None):
        """`expert_dp`: the expert data-parallel group (the ranks holding the same experts)."""
        self.buckets, self.precision, self.tp, self.dp = buckets, precision, tp, dp
        self.expert_dp = expert_dp or TPContext()
        self.dist_opt, self.lr, self.sabotage = dist_opt, lr, sabotage
        self.params = [p for params in buckets.values() for p in params]
        self.main_dtype, self.param_dtype = precision.dtype("main"), precision.dtype("param")
        for p in self.params:
            p.main_grad = torch.zeros_like(p, dtype=precision.dtype("grad"))
            p.register_post_accumulate_grad_hook(_accumulate_main_grad)
        self.scaler = LossScaler() if precision.loss_scaling else None
        self.overflowed = False  # the last step's gradients were not finite (fp16): it was skipped
        self.master: dict = {}  # bucket (distributed optimizer) or global name -> master weights
        if dist_opt:
            for bucket, params in buckets.items():
                self.master[bucket] = self._own(self._flat([p.detach() for p in params])).to(self.main_dtype)
        else:
            for p in self.params:
                self.master[p.global_name] = p.detach().to(self.main_dtype).clone() if precision.mixed else p
        self.grad_shards: dict[int, torch.Tensor] = {}
        self.param_shards: dict[int, torch.Tensor] = {}
        self.grads: dict = {}  # the last step's optimizer gradients (master format, unscaled)

    @property
    def loss_scale(self) -> float:
        return self.scaler.scale if self.scaler else 1.0

    def zero_grad(self) -> None:
        for p in self.params:
            p.main_grad.zero_()
            p.grad = None

    # ---- flat buffers ----------------------------------------------------------------------
    def _flat(self, tensors) -> torch.Tensor:
        flat = torch.cat([t.reshape(-1) for t in tensors])
        pad = (-flat.numel()) % self.dp.size if self.dist_opt else 0
        return torch.cat([flat, flat.new_zeros(pad)]) if pad else flat

    def _own(self, flat: torch.Tensor) -> torch.Tensor:
        return flat.chunk(self.dp.size)[self.dp.rank].clone()

    @staticmethod
    def _unflatten(flat: torch.Tensor, params, target) -> None:
        offset = 0
        for p in params:
            target(p).copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()

    # ---- the schedule's actions -------------------------------------------------------------
    def reduce(self, bucket: int) -> int:
        everything = self.buckets[bucket]
        params = [p for p in everything if not getattr(p, "expert", False)]
        experts = [p for p in everything if getattr(p, "expert", False)]
        sp = [p for p in params if p.sequence_parallel]
        if sp and self.tp.size > 1:  # partial grads of replicated params fed by sequence shards
            flat = torch.cat([p.main_grad.reshape(-1) for p in sp])
            dist.all_reduce(flat, group=self.tp.group)
            self._unflatten(flat, sp, lambda p: p.main_grad)
        expert_bytes = self._reduce_experts(experts) if experts else 0
        if not params or (self.dp.size == 1 and not self.dist_opt):  # nothing to average
            return expert_bytes
        flat = self.flatten_grads(params)
        if self.dist_opt:
            if self.sabotage == "dp_reduce":
                self.grad_shards[bucket] = self._own(flat)
            else:
                self.grad_shards[bucket] = reduce_scatter_dim0(flat, self.dp) / self.dp.size
        elif self.sabotage != "dp_reduce":
            dist.all_reduce(flat, group=self.dp.group)
            self.average_back(flat, params)
        return wire_bytes("reduce_scatter" if self.dist_opt else "all_reduce", flat, self.dp.size) + expert_bytes

    # The host copies around a bucket's all-reduce; calibrate/blocks.py times them per block.
    def flatten_grads(self, params: list) -> torch.Tensor:
        return self._flat([p.main_grad for p in params])

    def average_back(self, flat: torch.Tensor, params: list) -> None:
        self._unflatten(flat / self.dp.size, params, lambda p: p.main_grad)

    def _reduce_experts(self, experts: list) -> int:
        """Experts' gradients: summed over the ranks holding the same experts (each saw the
        tokens routed to it from its expert-parallel group), then averaged like the dense
        ones over dp x cp, the replicas whose mean loss is the step's."""
        flat = torch.cat([p.main_grad.reshape(-1) for p in experts])
        if self.sabotage == "dp_reduce":
            return 0
        if self.expert_dp.size > 1:
            dist.all_reduce(flat, group=self.expert_dp.group)
        self._unflatten(flat / self.dp.size, experts, lambda p: p.main_grad)
        return wire_bytes("all_reduce", flat, self.expert_dp.size)

    def step(self) -> None:
        unscale = 1.0 / self.loss_scale  # a power of two: exact
        if self.dist_opt:
            self.grads = {b: shard.to(self.main_dtype) * unscale for b, shard in self.grad_shards.items()}
        else:
            self.grads = {p.global_name: p.main_grad.to(self.main_dtype) * unscale for p in self.params}
        self.overflowed = False
        if self.scaler is not None:
            bad = torch.tensor([float(any(not torch.isfinite(g).all() for g in self.grads.values()))],
                               device=self.params[0].device)  # NCCL reduces device tensors only
            if dist.is_initialized():  # a lone process (calibrate/blocks.py) has nobody to agree with
                dist.all_reduce(bad, op=dist.ReduceOp.MAX)  # every rank skips, or none does
            self.overflowed = bool(bad.item())
            self.scaler.update(self.overflowed)
        if self.dist_opt:
            for bucket, master in self.master.items():
                if not self.overflowed:
                    master.add_(self.grads[bucket], alpha=-self.lr)
                self.param_shards[bucket] = master.to(self.param_dtype)
            return
        if self.overflowed:
            return
        with torch.no_grad():
            for p in self.params:
                master = self.master[p.global_name]
                master.add_(self.grads[p.global_name], alpha=-self.lr)
                if master is not p:
                    p.copy_(master)  # rounded to the weights' format

    def gather(self, bucket: int) -> int:
        flat = all_gather_dim0(self.param_shards.pop(bucket), self.dp)
        with torch.no_grad():
            self._unflatten(flat, self.buckets[bucket], lambda p: p)
        return wire_bytes("all_gather", flat, self.dp.size)

    # ---- check ------------------------------------------------------------------------------
    def final_state(self) -> tuple[dict, dict]:
        """(master weights, the last step's dp-averaged unscaled gradients) by global name, full
        tensors of this rank's (tp-sharded) parameters, as numpy arrays."""
        weights, grads = {}, {}
        if self.dist_opt:
            for bucket, params in self.buckets.items():
                for table, shard in ((weights, self.master[bucket]), (grads, self.grads[bucket])):
                    flat, offset = all_gather_dim0(shard, self.dp), 0
                    for p in params:
                        table[p.global_name] = flat[offset:offset + p.numel()].view(p.shape)
                        offset += p.numel()
        else:
            weights = {p.global_name: self.master[p.global_name] for p in self.params}
            grads = self.grads
        to_numpy = lambda t: t.detach().cpu().numpy().copy()  # noqa: E731
        return ({k: to_numpy(v) for k, v in weights.items()}, {k: to_numpy(v) for k, v in grads.items()})
