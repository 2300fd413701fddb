"""Megatron-FSDP's command-line flags, both ways: what they shard as sim3d's ZeRO stage and HSDP
groups, and the flags a sharded scenario needs. Sources: NVIDIA/Megatron-LM
`examples/megatron_fsdp/README.md` (the flags a run needs), `megatron/training/arguments.py`
(`--data-parallel-sharding-strategy` defaults to optim_grads_params from Megatron-Core 0.18,
no_shard before; `--use-custom-fsdp` is the 0.12-0.13 name of `--use-megatron-fsdp`), and
`megatron/core/distributed/fsdp` (ZeRO-3 reshards the parameters after every forward;
`--num-distributed-optimizer-instances` R shards the states within dp x cp / R ranks and
replicates them R times, `--outer-dp-sharding-strategy no_shard`)."""

from __future__ import annotations

FLAGS = frozenset({"use_megatron_fsdp", "use_custom_fsdp", "data_parallel_sharding_strategy",
                   "num_distributed_optimizer_instances", "outer_dp_sharding_strategy", "ckpt_format"})
STRATEGY_OF_ZERO = {2: "optim_grads", 3: "optim_grads_params"}


def enabled(flags: dict) -> bool:
    return flags.get("use_megatron_fsdp") is True or flags.get("use_custom_fsdp") is True


def read(flags: dict) -> tuple[dict[str, object], list[str], list[str]]:
    """(scenario settings by dotted key, assumed notes, not-mapped notes) of the Megatron-FSDP
    flags among a command line's (`flags`: parse_megatron_args' form, these keys only)."""
    settings: dict[str, object] = {}
    assumed: list[str] = []
    unmapped: list[str] = []
    strategy = flags.get("data_parallel_sharding_strategy")
    if strategy is True or isinstance(strategy, list):
        raise ValueError(f"--data-parallel-sharding-strategy needs one value, got {strategy!r}")
    if enabled(flags):
        if strategy is None and flags.get("use_megatron_fsdp") is True:
            strategy = "optim_grads_params"
            assumed.append("--data-parallel-sharding-strategy optim_grads_params: Megatron-Core's default from 0.18 "
                           "(no_shard before it: give the flag)")
        elif strategy is None:  # --use-custom-fsdp: Megatron-Core 0.12-0.13, whose default shards nothing
            strategy = "no_shard"
            assumed.append("--data-parallel-sharding-strategy no_shard: Megatron-Core 0.12-0.13's default "
                           "(--use-custom-fsdp is their spelling)")
        settings["parallel.data_parallel_sharding_strategy"] = strategy
        if strategy == "optim_grads_params":  # Megatron-FSDP's ZeRO-3 always reshards after the forward
            settings["parallel.reshard_after_forward"] = True
    elif strategy is not None:
        assumed.append(f"--data-parallel-sharding-strategy {strategy}: ignored, as Megatron does without "
                       "--use-megatron-fsdp")
    instances = flags.get("num_distributed_optimizer_instances")
    if instances is not None:
        replicas = _whole(instances)
        if replicas is None or replicas < 1:
            raise ValueError(f"--num-distributed-optimizer-instances needs a positive whole number, got {instances!r}")
        if replicas > 1:
            settings["parallel.dp_replicate"] = replicas
    outer = flags.get("outer_dp_sharding_strategy")
    if outer not in (None, "no_shard"):
        unmapped.append(f"--outer-dp-sharding-strategy {outer} (sim3d keeps each replica group's states whole "
                        "across the replicas: HSDP's no_shard)")
    return settings, assumed, unmapped


def _whole(value) -> int | None:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


def args(s) -> list:
    """The flags that shard a scenario as it says: Megatron-FSDP for ZeRO-2 / 3 (with the flags
    its README requires; its example scripts also pass --no-gradient-accumulation-fusion, which
    Transformer Engine 2.10 made unnecessary (mcore_fsdp_adapter.py), so the export passes it only
    where the scenario says so), the distributed optimizer's instances for HSDP's replicas."""
    out: list = []
    zero = s.parallel.zero
    if zero >= 2:
        out += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", STRATEGY_OF_ZERO[zero],
                "--ckpt-format", "fsdp_dtensor"]
    replicas = s.dp * s.cp // s.shard_group
    if zero >= 1 and replicas > 1:
        out += ["--num-distributed-optimizer-instances", replicas]
    return out


def caveat(s) -> str | None:
    """What Megatron-FSDP would run otherwise than the scenario says, or None."""
    if s.parallel.zero == 3 and not s.reshard_after_forward:
        return ("Megatron-FSDP reshards the parameters after every forward; this layout keeps them gathered "
                "until the backward (parallel.reshard_after_forward: false)")
    return None
