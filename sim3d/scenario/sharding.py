"""How a scenario shards its model states across data parallelism, stated once: the ZeRO stage,
the groups the shards spread over, the widths things are kept, gathered and reduced in, and
where the gathers and reductions run. Memory, costs, the planner, the checks and the executor
read this record, never `parallel.zero` itself."""

from __future__ import annotations

from dataclasses import dataclass

from .kernels import TORCH_STACKS


# How each stack spells the sharding of data parallelism, and what the spelling means.
SHARDING_SPELLINGS = {
    "zero": "0-3",
    "zero_stage": "0-3",
    "distributed_optimizer": "true or false",
    "use_distributed_optimizer": "true or false",
    # Megatron-FSDP (megatron/core/distributed/fsdp, --data-parallel-sharding-strategy)
    "data_parallel_sharding_strategy": "no_shard, optim, optim_grads or optim_grads_params",
    # DeepSpeed's config section: {stage: 0-3}
    "zero_optimization": "a mapping with stage: 0-3",
}
MEGATRON_FSDP_STRATEGY = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def zero_stages_of(key: str, value) -> set[int]:
    """The ZeRO stages a sharding spelling allows (empty: not a valid value)."""
    if key in ("zero", "zero_stage"):
        return {value} if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3 else set()
    if key in ("distributed_optimizer", "use_distributed_optimizer"):
        return ({1, 2, 3} if value else {0}) if isinstance(value, bool) else set()
    if key == "data_parallel_sharding_strategy":
        return {MEGATRON_FSDP_STRATEGY[value]} if value in MEGATRON_FSDP_STRATEGY else set()
    stage = value.get("stage") if isinstance(value, dict) and set(value) <= {"stage"} else None
    return zero_stages_of("zero", stage)


def grad_bytes(training) -> int:
    """Bytes per gradient element as Megatron keeps and reduces them (its gradient buffer):
    fp32 where `grad_reduce_in_fp32` holds, by default for every precision but fp16."""
    in_fp32 = training.grad_reduce_in_fp32
    if in_fp32 is None:
        in_fp32 = training.precision != "fp16"
    return 4 if training.precision == "fp32" or in_fp32 else 2


def gather_bytes(training) -> int:
    """Bytes per parameter element of a parameter all-gather: the weights' width, or one byte
    where parameters are gathered in FP8 (Megatron --fp8-param-gather, TE's Float8Tensor:
    param_and_grad_buffer.py keeps quantized parameters in a uint8 buffer)."""
    if training.fp8_param_gather:
        return 1
    return 4 if training.precision == "fp32" else 2




def defers_sync_to_last_backward(s) -> bool:
    """Whether gradients of sharded data parallelism wait for the step's last backward.
    torch.distributed.pipelining turns FSDP2's gradient synchronisation and its resharding
    after the backward off for every micro-batch (stage.py, backward_maybe_with_nosync:
    set_requires_gradient_sync(False), set_reshard_after_backward(False)) and reduces once
    after the last one (perform_reduce_grad); meanwhile FSDP2 accumulates the unsharded
    gradients at the reduce width (_fsdp_param.py, unsharded_accumulated_grad). Other
    pipelines with sharded gradients reduce-scatter each micro-batch's (Llama 3, Dubey et al.
    2024, section 3.3.2: FSDP shards gradients under pipeline parallelism)."""
    return s.pp > 1 and s.training.kernels.stack in TORCH_STACKS


@dataclass(frozen=True)
class ShardingPlan:
    """The data-parallel sharding of one scenario (hashable: memory caches key on it)."""

    zero: int  # 0 DDP | 1 optimizer state | 2 + gradients | 3 + parameters
    fp32: bool  # fp32 training: no separate master copy
    grad_bytes: int  # per gradient element, as kept and reduced
    gather_bytes: int  # per parameter element, as all-gathered (bucketed or per unit)
    dense_group: int  # ranks a dense parameter's states are sharded over (dp x cp, or an HSDP group)
    expert_group: int  # ... an expert parameter's (its expert-data-parallel replicas)
    reshard_after_forward: bool  # ZeRO-3 frees each unit's gathered parameters after its forward
    pipelined: bool  # pp > 1
    defers_sync: bool  # a torch.distributed.pipelining pipeline: see `defers_sync_to_last_backward`
    bf16_optimizer: bool = False  # Adam moments in bf16 on the bf16 weights, no fp32 master copy

    @classmethod
    def of(cls, s) -> "ShardingPlan":
        fp32 = s.training.precision == "fp32"
        expert_group = s.edp * s.shard_group // (s.dp * s.cp)  # HSDP narrows both groups alike
        return cls(s.parallel.zero, fp32, grad_bytes(s.training), gather_bytes(s.training), s.shard_group,
                   max(1, expert_group), s.reshard_after_forward, s.pp > 1, defers_sync_to_last_backward(s),
                   s.training.optimizer_dtype == "bf16" and not fp32)

    @property
    def fp8_weight_shards(self) -> int:
        """The ranks a dense weight is cast to FP8 on before every forward's all-gather (FSDP
        with FP8 gathers: torchao casts the local shard, float8/fsdp_utils.py); 0 where weights
        are not gathered in FP8 per unit."""
        return self.dense_group if self.zero == 3 and self.gather_bytes == 1 else 0

    @property
    def shards_optimizer(self) -> bool:
        """The optimizer state is sharded (ZeRO >= 1, Megatron's distributed optimizer)."""
        return self.zero >= 1

    @property
    def gathers_in_compute(self) -> bool:
        """Each unit's parameters are all-gathered inside every forward (ZeRO-3) and freed after
        the backward, or after the forward where it reshards then. A pipeline that does not
        reshard after the forward keeps them gathered across micro-batches until the last
        backward (torch.distributed.pipelining: set_reshard_after_backward(False) in stage.py;
        Llama 3, section 3.3.2: no resharding after the forward under pipeline parallelism),
        so its updated shards are gathered once per step, after the optimizer."""
        return self.zero == 3 and (self.reshard_after_forward or not self.pipelined)

    @property
    def regathers_in_backward(self) -> bool:
        """... and again inside the backward, having been freed after the forward."""
        return self.zero == 3 and self.reshard_after_forward

    @property
    def reduces_in_compute(self) -> bool:
        """Gradients are reduce-scattered unit by unit inside every backward, and so kept
        sharded (ZeRO-2/3), unless a torch pipeline defers them to one reduction per step."""
        return self.zero >= 2 and not self.defers_sync

    @property
    def collectives_in_compute(self) -> bool:
        """Compute actions carry per-unit gathers or reduce-scatters on the shard group."""
        return self.gathers_in_compute or self.reduces_in_compute

    @property
    def gathers_after_step(self) -> bool:
        """Updated parameter shards are all-gathered in buckets after the optimizer step (the
        distributed optimizer), unless every forward gathers its units anyway."""
        return self.shards_optimizer and not self.gathers_in_compute

    @property
    def bucket_reduction(self) -> str:
        """The collective of a gradient bucket after the last backward: a reduce-scatter into
        the optimizer's shards, an all-reduce where nothing is sharded or where the backward
        already reduce-scattered (HSDP's all-reduce of each shard over its replicas)."""
        return "reduce-scatter" if self.shards_optimizer and not self.reduces_in_compute else "all-reduce"
