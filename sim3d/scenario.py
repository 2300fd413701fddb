"""Scenario files: YAML -> typed, validated `Scenario` (DESIGN.md section 3).

Loading never shows a traceback to a user: every problem becomes a `ScenarioError` whose
lines each name the field path and the numbers involved.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    ValidationError,
    field_validator,
    model_validator,
)

from .hardware import GPU_FIELDS, GpuSpec, gpu_preset, suggest
from .pipeline_split import megatron_stage_layers, middle_heavy_layers
from .safe_yaml import UnboundedYaml, YamlInputError, read_yaml_text
from .scenario_checks import consistency_problems

MAX_SCENARIO_BYTES = 1_000_000

# Physical ranges, wide enough for any what-if (a 1 Mb/s link, a 10 Pb/s one) and narrow enough
# that no divisor drives a prediction to 1e300 s or to infinity.
Gbps = Annotated[float, Field(ge=1e-3, le=1e12)]  # 1e9+ reads as "a free network"
Tflops = Annotated[float, Field(ge=1e-3, le=1e12)]
Gib = Annotated[float, Field(ge=1e-3, le=1e7)]
Tbps = Annotated[float, Field(ge=1e-4, le=1e9)]
LatencyUs = Annotated[float, Field(ge=0, le=1e6)]
Factor = Annotated[float, Field(ge=1e-3, le=1e3)]



class ScenarioError(ValueError):
    """Bad user input; `str()` is the message to show (one problem per line)."""

    def __init__(self, problems: list[str] | str):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


def _alias(*names: str):
    return Field(validation_alias=AliasChoices(*names))


class _Strict(BaseModel):
    # strict: `tp: true` or `layers: 2.5` is an error, not 1 or 2; no inf/nan reaches a divisor.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True,
                              allow_inf_nan=False)


class MoE(_Strict):
    experts: PositiveInt = _alias("experts", "num_experts")
    top_k: PositiveInt = Field(2, validation_alias=AliasChoices("top_k", "moe_router_topk"))
    expert_ffn_hidden: PositiveInt | None = Field(
        None, validation_alias=AliasChoices("expert_ffn_hidden", "moe_ffn_hidden_size"))
    every: PositiveInt = 1  # an MoE layer every `every` layers (1 = all layers)
    capacity_factor: Factor | None = Field(
        None, validation_alias=AliasChoices("capacity_factor", "moe_expert_capacity_factor"))


class Model(_Strict):
    layers: PositiveInt = _alias("layers", "num_layers")
    hidden: PositiveInt = _alias("hidden", "hidden_size")
    heads: PositiveInt = _alias("heads", "num_attention_heads")
    kv_heads: PositiveInt | None = Field(None, validation_alias=AliasChoices("kv_heads", "num_query_groups"))
    ffn_hidden: PositiveInt | None = Field(None, validation_alias=AliasChoices("ffn_hidden", "ffn_hidden_size"))
    vocab: PositiveInt = _alias("vocab", "padded_vocab_size", "vocab_size")
    seq_len: PositiveInt = _alias("seq_len", "seq_length")
    # gelu: GPT (biases, LayerNorm); swiglu: LLaMA (gated, RMSNorm, no biases);
    # squared-relu: Nemotron-4 (non-gated relu(x)^2, LayerNorm, no biases; arXiv:2402.16819 sec. 2)
    activation: Literal["gelu", "swiglu", "squared-relu"] = "gelu"
    kv_channels: PositiveInt | None = None  # head dim when it is not hidden/heads (Megatron --kv-channels)
    # Megatron's defaults (megatron/training/arguments.py: --hidden-dropout 0.1, --attention-dropout 0.1);
    # 0 removes the dropout kernels and their masks from time and memory.
    hidden_dropout: float = Field(0.1, ge=0.0, lt=1.0)
    attention_dropout: float = Field(0.1, ge=0.0, lt=1.0)
    moe: MoE | None = None

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


class Parallel(_Strict):
    tp: PositiveInt = Field(1, validation_alias=AliasChoices("tp", "tensor_model_parallel_size"))
    pp: PositiveInt = Field(1, validation_alias=AliasChoices("pp", "pipeline_model_parallel_size"))
    dp: PositiveInt | None = Field(None, validation_alias=AliasChoices("dp", "data_parallel_size"))
    cp: PositiveInt = Field(1, validation_alias=AliasChoices("cp", "context_parallel_size"))
    ep: PositiveInt = Field(1, validation_alias=AliasChoices("ep", "expert_model_parallel_size"))
    vpp: PositiveInt = Field(1, validation_alias=AliasChoices("vpp", "virtual_pipeline_model_parallel_size"))
    sequence_parallel: bool = False
    distributed_optimizer: bool = Field(False, validation_alias=AliasChoices("distributed_optimizer", "use_distributed_optimizer"))
    order: str = "tp-cp-ep-dp-pp"
    # Megatron's uneven pipeline splits (megatron/core/transformer/transformer_block.py,
    # get_num_layers_to_build): layers of the first / last pipeline rank, the rest even.
    decoder_first_pipeline_num_layers: PositiveInt | None = Field(
        None, validation_alias=AliasChoices("decoder_first_pipeline_num_layers", "num_layers_in_first_pipeline_stage"))
    decoder_last_pipeline_num_layers: PositiveInt | None = Field(
        None, validation_alias=AliasChoices("decoder_last_pipeline_num_layers", "num_layers_in_last_pipeline_stage"))
    # count the embedding / the loss as one layer when splitting (the first / last stage builds one layer fewer)
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False


class Training(_Strict):
    micro_batch: PositiveInt = Field(1, validation_alias=AliasChoices("micro_batch", "micro_batch_size"))
    global_batch: PositiveInt = Field(validation_alias=AliasChoices("global_batch", "global_batch_size"))
    recompute: Literal["none", "selective", "full"] = "none"
    precision: Literal["bf16", "fp16", "fp8", "fp32"] = "bf16"
    # flash: FlashAttention-2/3, cuDNN or Transformer Engine fused attention (Megatron-Core's
    # --attention-backend flash|fused|auto); unfused: scores materialised in HBM (Megatron
    # 2020-22, --attention-backend local|unfused). `use_flash_attn: true` means flash.
    attention_backend: Literal["flash", "unfused"] = "flash"
    overlap_grad_reduce: bool = Field(True, validation_alias=AliasChoices("overlap_grad_reduce", "overlap_grad_sync"))
    overlap_param_gather: bool = Field(
        False, validation_alias=AliasChoices("overlap_param_gather", "overlap_param_sync"))
    tp_comm_overlap: bool = Field(False, validation_alias=AliasChoices("tp_comm_overlap", "ub_tp_comm_overlap"))
    # Megatron's default since late 2021 (--no-async-tensor-model-parallel-allreduce turns it
    # off): the backward input-gradient all-reduce overlaps the weight-gradient GEMM.
    async_tensor_model_parallel_allreduce: bool = True
    overlap_p2p: bool = Field(True, validation_alias=AliasChoices("overlap_p2p", "overlap_p2p_comm"))

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


class IntraNode(_Strict):
    fabric: Literal["nvswitch", "nvlink-mesh", "pcie"] = "nvswitch"
    gbps: Gbps | None = None  # None: the GPU preset's NVLink speed
    latency_us: LatencyUs = 2.0


class InterNode(_Strict):
    fabric: Literal["rail-optimized", "fat-tree"] = "rail-optimized"
    nic_gbps: Gbps | None = None  # None: the GPU preset's NIC speed
    nics_per_node: PositiveInt | None = None
    oversubscription: float = Field(1.0, ge=1.0, le=1e3)
    latency_us: LatencyUs = 5.0


class Cluster(_Strict):
    gpu: str = "a100-80gb"
    nodes: PositiveInt = 1
    gpus_per_node: PositiveInt | None = None
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


class Costs(_Strict):
    profile: str | None = None  # a calibration profile CSV (path relative to the working directory)
    network: Literal["analytical", "flow"] = "analytical"

    @field_validator("profile")
    @classmethod
    def _profile_exists(cls, value):
        if value is not None and not Path(value).is_file():
            raise ValueError(f"no such profile file {value}")
        return value


class Straggler(_Strict):
    rank: int = Field(ge=0)
    slowdown: Factor


class SlowLink(_Strict):
    node: int = Field(ge=0)
    nic_gbps: Gbps


class Fault(_Strict):
    straggler: Straggler | None = None
    link: SlowLink | None = None


class Scenario(_Strict):
    name: str = "scenario"
    model: Model
    parallel: Parallel = Parallel()
    training: Training
    schedule: str = "1f1b"
    cluster: Cluster = Cluster()
    costs: Costs = Costs()
    faults: list[Fault] = []

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
    def vpp(self) -> int:
        return self.parallel.vpp

    @property
    def dp(self) -> int:
        if self.parallel.dp is not None:
            return self.parallel.dp
        return max(1, self.num_gpus // (self.tp * self.pp * self.cp))

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
                or par.account_for_embedding_in_pipeline_split or par.account_for_loss_in_pipeline_split)

    @cached_property
    def stage_layers(self) -> tuple[int, ...]:
        """Transformer layers of each global stage (pipeline_split.py)."""
        if self.megatron_split:
            layers, problem = megatron_stage_layers(self)
            if problem:
                raise ScenarioError(problem)
            return layers
        return middle_heavy_layers(self.model.layers, self.num_stages)

    @property
    def nic_gbps(self) -> float:
        return self.cluster.inter_node.nic_gbps or self.gpu.nic_gbps

    @property
    def nics_per_node(self) -> int:
        return self.cluster.inter_node.nics_per_node or self.gpu.nics_per_node

    @property
    def nvlink_gbps(self) -> float:
        return self.cluster.intra_node.gbps or self.gpu.nvlink_gbps

    def warnings(self) -> list[str]:
        out = []
        if self.tp > self.gpus_per_node:
            out.append(
                f"parallel.tp={self.tp} exceeds the {self.gpus_per_node} GPUs of a node: "
                "tensor-parallel collectives will cross the inter-node network")
        if self.parallel.sequence_parallel and self.tp == 1:
            out.append("parallel.sequence_parallel has no effect with tp=1")
        if not self.megatron_split and len(set(self.stage_layers)) > 1:
            out.append(f"{self.model.layers} layers do not split evenly over {self.num_stages} stages: "
                       f"stages get {min(self.stage_layers)}-{max(self.stage_layers)} layers")
        if self.cluster.fp32_tflops is not None:
            out.append("cluster.fp32_tflops changes nothing: fp32 matmuls run on TF32 tensor cores (as torch and "
                       "Megatron run them); set cluster.tf32_tflops to change their speed")
        return out


# ---- loading ----------------------------------------------------------------------------

def _fmt_loc(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if not str(p).startswith("function-")) or "(top level)"


def _known_keys(model_cls: type[BaseModel]) -> list[str]:
    names = []
    for name, field in model_cls.model_fields.items():
        names.append(name)
        if isinstance(field.validation_alias, AliasChoices):
            names += [a for a in field.validation_alias.choices if isinstance(a, str)]
    return names


def _model_at(loc: tuple) -> type[BaseModel] | None:
    cls: Any = Scenario
    for part in loc:
        if isinstance(part, int):
            continue
        field = cls.model_fields.get(part) if isinstance(cls, type) and issubclass(cls, BaseModel) else None
        if field is None:
            for f in cls.model_fields.values():
                if isinstance(f.validation_alias, AliasChoices) and part in f.validation_alias.choices:
                    field = f
        if field is None:
            return None
        ann = field.annotation
        for cand in getattr(ann, "__args__", (ann,)):
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                cls = cand
                break
            inner = getattr(cand, "__args__", ())
            if inner and isinstance(inner[0], type) and issubclass(inner[0], BaseModel):
                cls = inner[0]
                break
        else:
            return None
    return cls


def _explain(err: ValidationError) -> list[str]:
    problems = []
    for e in err.errors():
        loc, kind = e["loc"], e["type"]
        path = _fmt_loc(loc)
        if kind == "extra_forbidden":
            parent = _model_at(loc[:-1])
            hint = suggest(str(loc[-1]), _known_keys(parent)) if parent else ""
            problems.append(f"{path}: unknown key{hint}")
        elif kind == "missing":
            problems.append(f"{path}: required but missing")
        elif isinstance(e.get("input"), dict):  # a section-level check: its message names the key
            problems.append(f"{path}: {e['msg']}")
        else:
            problems.append(f"{path}: {e['msg']} (got {e.get('input')!r})")
    return problems


def _set_path(raw: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ScenarioError(f"--set {dotted}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", typed value); the value is read as YAML (1, 2.5, true, null, [1,2])."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or any(not part.strip() for part in key.split(".")):
        raise ScenarioError(f"--set {text!r}: expected KEY=VALUE, e.g. parallel.tp=4")
    try:
        typed = read_yaml_text(value) if value.strip() else ""
    except UnboundedYaml as err:
        raise ScenarioError(f"--set {key.strip()}: {err}") from None
    except YamlInputError:
        typed = value  # not YAML: the text itself (e.g. a path with a colon)
    return key.strip(), typed


def scenario_from_dict(raw: dict, overrides: list[str] | tuple[str, ...] = (),
                       values: dict[str, Any] | None = None) -> Scenario:
    """`overrides`: "a.b=value" texts (the value read as YAML); `values`: {"a.b": value}
    already typed (the library API)."""
    if not isinstance(raw, dict):
        raise ScenarioError(f"(top level): a scenario is a mapping of sections, got {type(raw).__name__}")
    try:
        raw = _canonical(_deep_copy(raw), Scenario, "")
    except RecursionError:
        raise ScenarioError("(top level): the scenario contains itself (a self-referential dict or list)") from None
    for key, value in [parse_override(text) for text in overrides] + list((values or {}).items()):
        _set_path(raw, canonical_key(key), value)
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as err:
        raise ScenarioError(_explain(err)) from None
    problems = consistency_problems(scenario)
    if problems:
        raise ScenarioError(problems)
    return scenario


def _aliases(model_cls: type[BaseModel]) -> dict[str, str]:
    """alias -> field name, e.g. tensor_model_parallel_size -> tp."""
    out = {}
    for name, field in model_cls.model_fields.items():
        if isinstance(field.validation_alias, AliasChoices):
            out.update({a: name for a in field.validation_alias.choices if isinstance(a, str) and a != name})
    return out


def _canonical(raw, model_cls, path: str):
    """Rename Megatron aliases to sim3d's names, so that a file may use either and `--set`
    with either name overrides the same value. Both names at once is an error."""
    if not isinstance(raw, dict) or model_cls is None:
        return raw
    aliases, out = _aliases(model_cls), {}
    for key, value in raw.items():
        name = aliases.get(key, key)
        if name in out:
            raise ScenarioError(f"{path}{name}: given twice (as {name} and {key})")
        out[name] = _canonical(value, _model_at((*path.split(".")[:-1], name)) if path else _model_at((name,)),
                               f"{path}{name}.")
    return out


def canonical_key(dotted: str) -> str:
    """A dotted override key with Megatron aliases resolved (e.g. parallel.tensor_model_parallel_size -> parallel.tp)."""
    parts, cls = [], Scenario
    for part in dotted.split("."):
        name = _aliases(cls).get(part, part) if cls is not None else part
        parts.append(name)
        cls = _model_at(tuple(parts))
    return ".".join(parts)


def _deep_copy(obj):
    if isinstance(obj, dict):
        return {k: _deep_copy(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_deep_copy(v) for v in obj]
    return obj


def local_world_size(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> int:
    """tp*pp*dp*cp as written in the file and overrides (dp defaults to 1 here: a local run
    has no cluster to derive it from)."""
    raw = read_scenario_yaml(Path(path))
    raw = _canonical(_deep_copy(raw), Scenario, "") if isinstance(raw, dict) else {}
    for text in overrides:
        key, value = parse_override(text)
        _set_path(raw, canonical_key(key), value)
    par = raw.get("parallel") or {}
    if not isinstance(par, dict):
        return 1  # let the real validation report the bad section
    sizes = [par.get(axis, 1) or 1 for axis in ("tp", "pp", "dp", "cp")]
    if not all(isinstance(v, int) and v > 0 for v in sizes):
        return 1  # let the real validation report the bad value
    return sizes[0] * sizes[1] * sizes[2] * sizes[3]


def read_scenario_yaml(path: Path):
    if path.is_dir():
        raise ScenarioError(f"{path}: is a folder, expected a scenario YAML file")
    if not path.is_file():
        raise ScenarioError(f"{path}: no such scenario file" if not path.exists() else
                            f"{path}: not a regular file, expected a scenario YAML file")
    if path.stat().st_size > MAX_SCENARIO_BYTES:
        raise ScenarioError(f"{path}: {path.stat().st_size:,} bytes; a scenario is a few kB (the limit is "
                            f"{MAX_SCENARIO_BYTES:,} bytes)")
    try:
        raw = read_yaml_text(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ScenarioError(f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); "
                            "a scenario is a YAML file") from None
    except OSError as err:
        raise ScenarioError(f"{path}: cannot be read ({err.strerror})") from None
    except YamlInputError as err:
        raise ScenarioError(f"{path}: {err}") from None
    if raw is None:
        raise ScenarioError(f"{path}: the file is empty")
    return raw


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = (),
                  values: dict[str, Any] | None = None) -> Scenario:
    path = Path(path)
    raw = read_scenario_yaml(path)
    try:
        return scenario_from_dict(raw, overrides, values)
    except ScenarioError as err:
        raise ScenarioError([f"{path}: {line}" for line in err.problems]) from None
