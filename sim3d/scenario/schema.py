"""The scenario as typed data (docs/contracts.md#scenario-file): one pydantic model per section, the
derived layout values; the physical range of every number is bounds.py's, reading files and
applying overrides load.py's."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator, model_validator

from ..cluster.gpus import GPU_FIELDS, GpuSpec, gpu_preset
from ..cluster.placement import Placement
from ..errors import ScenarioError
from .bounds import (Batch, DomainNodes, Degree, Ffn, Gbps, Gib, GpusPerNode, HeadDim, Heads, Hidden, LatencyUs, Layers,
                     Nics, Nodes, SeqLen, Tbps, Tflops, Vocab, Watts, shown)
from .pipeline_split import layout_stage_mtp, megatron_stage_layers, middle_heavy_layers
from .kernels import Kernels
from .experts import MoE
from .faults import Fault
from .latent_attention import LatentAttention
from .recompute_modules import RecomputeModules
from .sharding import SHARDING_SPELLINGS, zero_stages_of
from .strict import Strict, alias
from .variability import Variability


class Model(Strict):
    layers: Layers = alias("layers", "num_layers")
    hidden: Hidden = alias("hidden", "hidden_size")
    heads: Heads = alias("heads", "num_attention_heads")
    kv_heads: Heads | None = Field(None, validation_alias=AliasChoices("kv_heads", "num_query_groups"))
    ffn_hidden: Ffn | None = Field(None, validation_alias=AliasChoices("ffn_hidden", "ffn_hidden_size"))
    vocab: Vocab = alias("vocab", "padded_vocab_size", "vocab_size")
    seq_len: SeqLen = alias("seq_len", "seq_length")
    # gelu: GPT (biases, LayerNorm); swiglu: LLaMA (gated, RMSNorm, no biases);
    # squared-relu: Nemotron-4 (non-gated relu(x)^2, LayerNorm, no biases; arXiv:2402.16819 sec. 2)
    activation: Literal["gelu", "swiglu", "squared-relu"] = "gelu"
    kv_channels: HeadDim | None = None  # head dim when it is not hidden/heads (Megatron --kv-channels)
    # Megatron's defaults (megatron/training/arguments.py: --hidden-dropout 0.1, --attention-dropout 0.1);
    # 0 removes the dropout kernels and their masks from time and memory.
    hidden_dropout: float = Field(0.1, ge=0.0, lt=1.0)
    attention_dropout: float = Field(0.1, ge=0.0, lt=1.0)
    moe: MoE | None = None
    mla: LatentAttention | None = None  # multi-head latent attention (scenario/latent_attention.py)
    # multi-token prediction modules after the last layer (Megatron --mtp-num-layers; DeepSeek-V3,
    # arXiv:2412.19437 sec. 2.2: one), each an embedding, two norms, a 2h -> h projection, one
    # transformer layer and the LM head with its loss (model/ops.py mtp_dims_ops)
    mtp_layers: int = alias("mtp_layers", "mtp_num_layers", default=0, ge=0, le=64)

    @model_validator(mode="before")
    @classmethod
    def _megatron_activation_flags(cls, raw):
        """Megatron's boolean flags --swiglu / --squared-relu name the activation."""
        if isinstance(raw, dict):
            for flag, name in (("swiglu", "swiglu"), ("squared_relu", "squared-relu")):
                if flag in raw:
                    raw = dict(raw)
                    value = raw.pop(flag)
                    if not isinstance(value, bool):
                        raise ValueError(f"{flag} must be true or false, got {value!r}")
                    if value:
                        raw["activation"] = name
        return raw

    @property
    def num_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden or 4 * self.hidden

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden // self.heads


class Parallel(Strict):
    tp: Degree = Field(1, validation_alias=AliasChoices("tp", "tensor_model_parallel_size"))
    pp: Degree = Field(1, validation_alias=AliasChoices("pp", "pipeline_model_parallel_size"))
    dp: Degree | None = Field(None, validation_alias=AliasChoices("dp", "data_parallel_size"))
    cp: Degree = Field(1, validation_alias=AliasChoices("cp", "context_parallel_size"))
    ep: Degree = Field(1, validation_alias=AliasChoices("ep", "expert_model_parallel_size"))
    # expert tensor parallelism; None follows tp (Megatron's default). With MoE parallel folding (arXiv:2504.14960)
    # the experts take their own grid etp x ep x edp over a stage's tp*cp*dp ranks: ep may span TP ranks.
    etp: Degree | None = Field(None, validation_alias=AliasChoices("etp", "expert_tensor_parallel_size"))
    vpp: Layers = Field(1, validation_alias=AliasChoices("vpp", "virtual_pipeline_model_parallel_size"))
    sequence_parallel: bool = False
    # What data parallelism shards, as ZeRO's stages (Rajbhandari et al. 2020, arXiv:1910.02054):
    # 0 replicas (DDP: all-reduce), 1 optimizer state (Megatron's distributed optimizer),
    # 2 + gradients (reduce-scatter, no full gradient buffer), 3 + parameters (FSDP / ZeRO-3:
    # each unit all-gathered before use). Other stacks' spellings are read by `_sharding`.
    zero: int = Field(0, ge=0, le=3)
    # Ranks of the dp x cp grid that one shard group spans (default all: FSDP's FULL_SHARD);
    # fewer is HSDP: groups of dp_shard ranks shard, their replicas all-reduce across groups.
    # `dp_replicate` (torchtitan's data_parallel_replicate_degree) says the same from the other side.
    dp_shard: Degree | None = None
    dp_replicate: Degree | None = alias("dp_replicate", "data_parallel_replicate_degree", default=None)
    # ZeRO-3: free a unit's gathered parameters after its forward and gather them again for its
    # backward (FSDP2's reshard_after_forward). Unset: torchtitan's default, true without
    # pipeline parallelism and false with it (torchtitan/models/llama3/infra/parallelize.py).
    reshard_after_forward: bool | None = None
    order: str = "tp-cp-ep-dp-pp"
    # Megatron's uneven pipeline splits (megatron/core/transformer/transformer_block.py,
    # get_num_layers_to_build): layers of the first / last pipeline rank, the rest even.
    decoder_first_pipeline_num_layers: Layers | None = Field(
        None, validation_alias=AliasChoices("decoder_first_pipeline_num_layers", "num_layers_in_first_pipeline_stage"))
    decoder_last_pipeline_num_layers: Layers | None = Field(
        None, validation_alias=AliasChoices("decoder_last_pipeline_num_layers", "num_layers_in_last_pipeline_stage"))
    # count the embedding / the loss as one layer when splitting (the first / last stage builds one layer fewer)
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False
    # Megatron-Core's --pipeline-model-parallel-layout ("Et|(tt|)*7,t|L"): each stage's layers
    pipeline_layout: str | None = alias("pipeline_layout", "pipeline_model_parallel_layout", default=None)

    @property
    def distributed_optimizer(self) -> bool:
        """The optimizer state is sharded (Megatron's --use-distributed-optimizer: zero >= 1)."""
        return self.zero >= 1

    @model_validator(mode="before")
    @classmethod
    def _sharding(cls, raw):
        """Every spelling of the ZeRO stage becomes `zero`; spellings that disagree are refused
        with each named."""
        if not isinstance(raw, dict):
            return raw
        raw = dict(raw)
        given = {key: raw.pop(key) for key in SHARDING_SPELLINGS if key in raw}
        stages = set(range(4))
        for key, value in given.items():
            allowed = zero_stages_of(key, value)
            if not allowed:
                raise ValueError(f"{key}: {shown(value)} is not a sharding setting ({SHARDING_SPELLINGS[key]})")
            stages &= allowed
        if not stages:
            said = ", ".join(f"{key}: {value!r}" for key, value in given.items())
            raise ValueError(f"sharding settings disagree ({said}): give one ZeRO stage (parallel.zero 0-3)")
        if given:
            raw["zero"] = min(stages)
        return raw


class Training(Strict):
    micro_batch: Batch = Field(1, validation_alias=AliasChoices("micro_batch", "micro_batch_size"))
    global_batch: Batch = Field(validation_alias=AliasChoices("global_batch", "global_batch_size"))
    recompute: Literal["none", "selective", "op", "full"] = "none"  # model/recompute.py
    # The first N layers of each pipeline stage (model chunk) recompute, the rest keep everything:
    # Megatron's --recompute-method block --recompute-num-layers N, torchtitan's every-n-th block.
    recompute_num_layers: Layers | None = None
    # under selective: the parts recomputed (Megatron-Core --recompute-modules; model/recompute.py)
    recompute_modules: RecomputeModules | None = None
    precision: Literal["bf16", "fp16", "fp8", "fp32"] = "bf16"
    # flash: FlashAttention-2/3, cuDNN or Transformer Engine fused attention (Megatron-Core's --attention-backend
    # flash|fused|auto); unfused: scores in HBM (Megatron 2020-22, local|unfused). `use_flash_attn: true` = flash.
    attention_backend: Literal["flash", "unfused"] = "flash"
    kernels: Kernels = Kernels()  # te | compiled | eager, and the flash kernel family (kernels.py)
    overlap_grad_reduce: bool = Field(True, validation_alias=AliasChoices("overlap_grad_reduce", "overlap_grad_sync"))
    # Gradients kept and reduced in an fp32 buffer (Megatron's accumulate_allreduce_grads_in_fp32,
    # NeMo's grad_reduce_in_fp32). Unset: Megatron's default, true for bf16 and fp8 (arguments.py
    # forces it: "bfloat16 requires gradient accumulation and all-reduce to be done in fp32";
    # --grad-reduce-in-bf16 turns it off), false for fp16 (an opt-in flag there).
    grad_reduce_in_fp32: bool | None = Field(
        None, validation_alias=AliasChoices("grad_reduce_in_fp32", "accumulate_allreduce_grads_in_fp32"))
    overlap_param_gather: bool = Field(
        False, validation_alias=AliasChoices("overlap_param_gather", "overlap_param_sync"))
    tp_comm_overlap: bool = Field(False, validation_alias=AliasChoices("tp_comm_overlap", "ub_tp_comm_overlap"))
    # The optimizer's state: fp32 master weights and Adam moments (Megatron, PyTorch), or bf16
    # moments on the bf16 weights themselves (Apex DistributedFusedAdam's `dtype: bf16`, as
    # NeMo 1.x recipes set optim.dtype; it then stores no fp32 copy of the parameters).
    optimizer_dtype: Literal["fp32", "bf16"] = "fp32"
    # FP8 parameters gathered as FP8 (Megatron's --fp8-param-gather; torchao's
    # enable_fsdp_float8_all_gather): half the bytes of a 16-bit parameter all-gather.
    fp8_param_gather: bool = Field(False, validation_alias=AliasChoices("fp8_param_gather",
                                                                       "enable_fsdp_float8_all_gather"))
    # Megatron's default since late 2021 (--no-async-tensor-model-parallel-allreduce turns it
    # off): the backward input-gradient all-reduce overlaps the weight-gradient GEMM.
    async_tensor_model_parallel_allreduce: bool = True
    overlap_p2p: bool = Field(True, validation_alias=AliasChoices("overlap_p2p", "overlap_p2p_comm"))
    # Megatron-LM 2020-22 without SP: each TP rank sends 1/tp of a pipeline message and the
    # receiver all-gathers it over TP (p2p_communication.py, --scatter-gather-tensors-in-pipeline)
    p2p_scatter_gather: bool = alias("p2p_scatter_gather", "scatter_gather_tensors_in_pipeline", default=False)
    # the expert dispatch: NCCL's all-to-all (Megatron's alltoall dispatcher), DeepEP's, which sends
    # a token once per node it goes to (--moe-flex-dispatcher-backend deepep; costs/moe_dispatch.py),
    # or Megatron's allgather dispatcher, every rank gathering its group's tokens (model/expert_dispatch.py)
    moe_dispatcher: Literal["alltoall", "allgather", "deepep"] = alias("moe_dispatcher", "moe_flex_dispatcher_backend",
                                                           default="alltoall")
    # Megatron-Core's EP all-to-all overlap (--overlap-moe-expert-parallel-comm --delay-wgrad-compute):
    # an MoE layer's forward beside another micro-batch's backward (costs/a2a_overlap.py)
    moe_a2a_overlap: bool = alias("moe_a2a_overlap", "overlap_moe_expert_parallel_comm", default=False)

    @field_validator("attention_backend", mode="before")
    @classmethod
    def _megatron_backend_names(cls, value):
        return {"fused": "flash", "auto": "flash", "local": "unfused"}.get(value, value)

    @model_validator(mode="before")
    @classmethod
    def _use_flash_attn(cls, raw):
        if isinstance(raw, dict) and "use_flash_attn" in raw:
            raw = dict(raw)
            flag = raw.pop("use_flash_attn")
            if not isinstance(flag, bool):
                raise ValueError(f"use_flash_attn must be true or false, got {flag!r}")
            if flag and raw.get("attention_backend", "flash") not in ("flash", "fused", "auto"):
                raise ValueError(f"use_flash_attn: true contradicts attention_backend: {raw['attention_backend']}")
            raw.setdefault("attention_backend", "flash" if flag else "unfused")
        return raw


class IntraNode(Strict):
    fabric: Literal["nvswitch", "nvlink-mesh", "pcie"] = "nvswitch"
    gbps: Gbps | None = None  # None: the GPU preset's NVLink speed
    latency_us: LatencyUs = 2.0
    # Nodes whose GPUs share one NVLink switch domain: 1 for a server; a GB200 NVL72 rack is
    # 18 compute trays of 4 GPUs behind its NVLink switch trays (domain_nodes: 18).
    domain_nodes: DomainNodes = 1


class InterNode(Strict):
    fabric: Literal["rail-optimized", "fat-tree"] = "rail-optimized"
    nic_gbps: Gbps | None = None  # None: the GPU preset's NIC speed
    nics_per_node: Nics | None = None
    oversubscription: float = Field(1.0, ge=1.0, le=1e3)  # of a leaf's ports: down / up
    latency_us: LatencyUs = 5.0
    # servers under one leaf (None: 16 on a fat tree; every server on its rail's leaf on a
    # rail-optimized fabric); with nodes_per_pod, a third tier: pods of that many servers
    # joined by a core at pod_oversubscription (fabric.py)
    nodes_per_leaf: Nodes | None = None
    nodes_per_pod: Nodes | None = None
    pod_oversubscription: float = Field(1.0, ge=1.0, le=1e3)
    # how a leaf spreads traffic over its uplinks: evenly (adaptive routing, packet spraying),
    # or per flow by a hash of its endpoints onto one uplink (ECMP), where flows can collide
    routing: Literal["adaptive", "ecmp"] = "adaptive"


class Cluster(Strict):
    gpu: str = "a100-80gb"
    nodes: Nodes = 1
    gpus_per_node: GpusPerNode | None = None
    intra_node: IntraNode = IntraNode()
    inter_node: InterNode = InterNode()
    # Any GpuSpec field may be overridden here (e.g. hbm_gib: 96 for a what-if).
    bf16_tflops: Tflops | None = None
    fp16_tflops: Tflops | None = None
    fp8_tflops: Tflops | None = None
    fp32_tflops: Tflops | None = None
    tf32_tflops: Tflops | None = None
    hbm_gib: Gib | None = None
    hbm_tbps: Tbps | None = None
    power_limit_w: Watts | None = None  # nvidia-smi -pl; the preset's rated limit when unset


class Costs(Strict):
    profile: str | None = None  # a calibration profile CSV (path relative to the working directory)
    network: Literal["analytical", "flow"] = "analytical"

    @field_validator("profile")
    @classmethod
    def _profile_exists(cls, value):
        if value is not None and not Path(value).is_file():  # a FIFO or a folder would block or fail the reader
            raise ValueError(f"{value} is not a regular file (a profile is a CSV file)" if Path(value).exists()
                             else f"no such profile file {value}")
        return value


class Scenario(Strict):
    name: str = "scenario"
    model: Model
    parallel: Parallel = Parallel()
    training: Training
    schedule: str = "1f1b"
    cluster: Cluster = Cluster()
    costs: Costs = Costs()
    faults: list[Fault] = []
    variability: Variability | None = None  # drawn per sample by `run --samples` (variability.py)

    @field_validator("name")
    @classmethod
    def _printable_name(cls, name: str) -> str:
        # printed in every table and figure: an escape sequence there would reach the terminal
        if bad := next((c for c in name if not c.isprintable()), None):
            raise ValueError(f"holds the control character {bad!r}; a name must be printable text")
        return name

    # ---- derived values -------------------------------------------------------------
    @cached_property
    def gpu(self) -> GpuSpec:
        overrides = {k: getattr(self.cluster, k) for k in GPU_FIELDS if k in Cluster.model_fields}
        return gpu_preset(self.cluster.gpu, **overrides)

    @property
    def gpus_per_node(self) -> int:
        return self.cluster.gpus_per_node or self.gpu.gpus_per_node

    @property
    def num_gpus(self) -> int:
        return self.cluster.nodes * self.gpus_per_node

    @property
    def tp(self) -> int:
        return self.parallel.tp

    @property
    def pp(self) -> int:
        return self.parallel.pp

    @property
    def cp(self) -> int:
        return self.parallel.cp

    @property
    def ep(self) -> int:
        return self.parallel.ep

    @property
    def etp(self) -> int:
        return self.parallel.etp if self.parallel.etp is not None else self.parallel.tp

    @property
    def edp(self) -> int:
        """Ranks holding the same expert shard (Megatron's expert data parallelism): a stage's
        tp*cp*dp ranks over etp x ep; 1 without experts."""
        return 1 if self.model.moe is None else Placement.of(self).expert_data_parallel

    @property
    def vpp(self) -> int:
        return self.parallel.vpp

    @property
    def dp(self) -> int:
        par = self.parallel
        return par.dp if par.dp is not None else max(1, self.num_gpus // (self.tp * self.pp * self.cp))

    @property
    def shard_group(self) -> int:
        """Ranks one shard of the sharded model states is spread over: all dp x cp ranks, or
        fewer under HSDP (`parallel.dp_shard`, or dp x cp / `parallel.dp_replicate`)."""
        par, ranks = self.parallel, self.dp * self.cp
        if par.dp_shard is not None:
            return par.dp_shard
        return ranks // par.dp_replicate if par.dp_replicate else ranks

    @property
    def reshard_after_forward(self) -> bool:
        par = self.parallel  # unset: resharding without a pipeline, keeping gathered under one (torchtitan's)
        return par.reshard_after_forward if par.reshard_after_forward is not None else par.pp == 1

    @property
    def world_size(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def num_microbatches(self) -> int:
        return self.training.global_batch // (self.training.micro_batch * self.dp)

    @property
    def num_stages(self) -> int:
        return self.pp * self.vpp

    @property
    def megatron_split(self) -> bool:
        par = self.parallel
        return (par.decoder_first_pipeline_num_layers is not None or par.decoder_last_pipeline_num_layers is not None
                or par.account_for_embedding_in_pipeline_split or par.account_for_loss_in_pipeline_split
                or par.pipeline_layout is not None)

    @cached_property
    def stage_layers(self) -> tuple[int, ...]:
        """Transformer layers of each global stage (pipeline_split.py)."""
        if self.megatron_split:
            layers, problem = megatron_stage_layers(self)
            if problem:
                raise ScenarioError(problem)
            return layers
        return middle_heavy_layers(self.model.layers, self.num_stages)

    @cached_property
    def stage_mtp(self) -> tuple[int, ...]:
        """Multi-token-prediction modules of each global stage: where the layout's `m`s stand,
        else all on the last stage, as Megatron-Core builds them (pipeline_split.py)."""
        if self.parallel.pipeline_layout is not None:
            return layout_stage_mtp(self.parallel.pipeline_layout)
        return (0,) * (self.num_stages - 1) + (self.model.mtp_layers,)

    @property
    def nic_gbps(self) -> float:
        return self.cluster.inter_node.nic_gbps or self.gpu.nic_gbps

    @property
    def nics_per_node(self) -> int:
        return self.cluster.inter_node.nics_per_node or self.gpu.nics_per_node

    @property
    def nvlink_gbps(self) -> float:
        return self.cluster.intra_node.gbps or self.gpu.nvlink_gbps

    @property
    def nvlink_domain_gpus(self) -> int:
        """GPUs that reach each other over NVLink: a node, or a multi-node NVLink domain."""
        return self.gpus_per_node * self.cluster.intra_node.domain_nodes

    @property
    def network_asymmetric(self) -> bool:
        """Ranks' groups and paths may differ: a fault on the fabric, or flows hashed onto
        uplinks (ECMP)."""
        return any(f.network for f in self.faults) or self.cluster.inter_node.routing == "ecmp"

    def full_fidelity(self, asked: bool = False) -> bool:
        """Every GPU simulated: when asked, or when a straggler makes ranks unlike their twins."""
        return asked or any(f.straggler for f in self.faults)

    def warnings(self) -> list[str]:
        out = []
        if self.tp > self.nvlink_domain_gpus:
            out.append(
                f"parallel.tp={self.tp} exceeds the {self.nvlink_domain_gpus} GPUs of an NVLink domain: "
                "tensor-parallel collectives will cross the inter-node network")
        if self.costs.network == "analytical" and any(f.nic or f.uplink or f.leaf for f in self.faults):
            out.append("faults on the fabric: the analytical network prices each pipeline message alone on its "
                       "path, so messages that now meet on the faulted NIC or uplink do not slow each other; "
                       "costs.network: flow makes them share it")
        if self.parallel.sequence_parallel and self.tp == 1:
            out.append("parallel.sequence_parallel has no effect with tp=1")
        if self.training.moe_dispatcher == "allgather" and (self.model.moe is None or self.ep == 1):
            out.append("training.moe_dispatcher: allgather changes only an expert-parallel dispatch (model.moe with "
                       "parallel.ep > 1); here it changes nothing")
        if self.training.moe_dispatcher == "deepep" and (self.model.moe is None or self.ep == 1 or len(
                {rank // self.gpus_per_node for rank in Placement.of(self).group("ep", 0)}) == 1):
            out.append("training.moe_dispatcher: deepep changes only an expert all-to-all (model.moe with "
                       "parallel.ep > 1) across nodes; here it changes nothing")
        if self.model.mtp_layers and not self.stage_mtp[-1]:
            out.append("parallel.pipeline_layout: the multi-token-prediction modules run before the loss stage, "
                       "to which Megatron sends (1 + modules) x b x s x h; sim3d sends b x s x h (one message size "
                       "per pipeline)")
        if not self.megatron_split and len(set(self.stage_layers)) > 1:
            out.append(f"{self.model.layers} layers do not split evenly over {self.num_stages} stages: "
                       f"stages get {min(self.stage_layers)}-{max(self.stage_layers)} layers")
        inter = self.cluster.inter_node
        if inter.nodes_per_pod is not None and inter.nodes_per_pod >= self.cluster.nodes:
            out.append(f"cluster.inter_node.nodes_per_pod={inter.nodes_per_pod} holds all {self.cluster.nodes} nodes: "
                       "one pod, no core, so pod_oversubscription changes nothing")
        if self.cluster.fp32_tflops is not None:
            out.append("cluster.fp32_tflops changes nothing: fp32 matmuls run on TF32 tensor cores (as torch and "
                       "Megatron run them); set cluster.tf32_tflops to change their speed")
        return out
