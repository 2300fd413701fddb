"""torchtitan's train config (TOML) as a scenario: `sim3d import torchtitan CONFIG.toml`.

Field names and defaults are those of torchtitan's `torchtitan/config/job_config.py` and its
Llama 3 model flavors (`torchtitan/models/llama3/__init__.py`, `model/args.py`), read at
pytorch/torchtitan @9810191bb^ (2026-02), the last version whose train configs are TOML
(`torchtitan/models/llama3/train_configs/*.toml`). What a config leaves to torchtitan's
defaults is filled with those defaults and named in `assumed`; what sim3d does not represent
is named in `unmapped`.
"""

from __future__ import annotations

import math

from .importers import Imported
from ..schedule.specs import SCHEDULES

# torchtitan/models/llama3/__init__.py: TransformerModelArgs of each flavor; vocab_size 128256
# is model/args.py's default (the Llama 3 tokenizer).
LLAMA3_FLAVORS = {
    "8B": {"dim": 4096, "n_layers": 32, "n_heads": 32, "n_kv_heads": 8, "ffn_dim_multiplier": 1.3, "multiple_of": 1024},
    "70B": {"dim": 8192, "n_layers": 80, "n_heads": 64, "n_kv_heads": 8, "ffn_dim_multiplier": 1.3, "multiple_of": 4096},
    "405B": {"dim": 16384, "n_layers": 126, "n_heads": 128, "n_kv_heads": 8, "ffn_dim_multiplier": 1.2,
             "multiple_of": 4096},
}
LLAMA3_VOCAB = 128256


def pytorch_schedules() -> dict[str, tuple[str, int]]:
    """torch.distributed.pipelining's schedule names (pipeline_parallel_schedule) -> sim3d's,
    with the model chunks each rank holds (multi-stage schedules: torchtitan puts two stages on
    a rank unless pipeline_parallel_layers_per_stage says otherwise): each ScheduleSpec's
    `pytorch_name`, read from the registry."""
    return {spec.pytorch_name: (name, spec.default_vpp) for name, spec in SCHEDULES.items() if spec.pytorch_name}
# sections that do not change the time or memory of a step
IRRELEVANT = {"job", "profiling", "metrics", "optimizer", "lr_scheduler", "checkpoint", "validation", "comm",
              "fault_tolerance", "experimental", "memory_estimation"}
MAPPED = {
    "model": {"name", "flavor", "converters", "hf_assets_path", "tokenizer_path"},
    "training": {"local_batch_size", "global_batch_size", "seq_len", "mixed_precision_param", "mixed_precision_reduce",
                 "dataset", "dataset_path", "max_norm", "steps", "gc_freq", "seed"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
                    "pipeline_parallel_degree", "context_parallel_degree", "pipeline_parallel_schedule",
                    "pipeline_parallel_microbatch_size", "pipeline_parallel_layers_per_stage",
                    "fsdp_reshard_after_forward", "expert_parallel_degree"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
    "quantize": {"linear"},
    "float8": {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp", "filter_fqns",
               "recipe_name"},
}


# torchtitan's train configs are 2-4 kB; the limit matches a scenario file's (scenario/load.py)
MAX_CONFIG_BYTES = 1_000_000


# A train config nests a few levels ([parallelism], quantize.linear.float8); the TOML reader's
# work grows with the square of a dotted key's depth (30,000 levels: 5.2 GB) and recurses once per
# nested array, so deeper text is refused before it is parsed.
MAX_TOML_DEPTH = 32


def _structure(text: str):
    """The characters of `text` outside strings and comments (TOML's basic, literal and
    multi-line strings; a comment runs from # to the end of its line)."""
    i, n = 0, len(text)
    while i < n:
        char = text[i]
        if char == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if char in "\"'":
            quote = text[i:i + 3] if text[i:i + 3] in ('"""', "'''") else char
            j = i + len(quote)
            while j < n and text[j:j + len(quote)] != quote:
                j += 2 if char == '"' and text[j] == "\\" else 1
            i = j + len(quote)
            continue
        yield char
        i += 1


def _check_nesting(text: str) -> None:
    """ValueError for a dotted key or a nesting of arrays / inline tables deeper than
    MAX_TOML_DEPTH (brackets in strings and comments do not count)."""
    depth = deepest = 0
    for char in _structure(text):
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth = max(0, depth - 1)
    dots = max((line.split("=", 1)[0].count(".") for line in text.splitlines()), default=0)
    if deepest > MAX_TOML_DEPTH or dots >= MAX_TOML_DEPTH:
        raise ValueError(f"nested {max(deepest, dots + 1):,} levels deep; a train config nests a few (the limit is "
                         f"{MAX_TOML_DEPTH})")


def read_toml(path) -> dict:
    """A TOML file as a dict; ValueError (with the file's problem) if it is not one."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    import os
    import stat
    try:
        # a FIFO or a device would block or stream forever: a config is a small regular file
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ValueError("not a regular file, expected a TOML file")
            if info.st_size > MAX_CONFIG_BYTES:
                raise ValueError(f"{info.st_size:,} bytes; a train config is a few kB (the limit is "
                                 f"{MAX_CONFIG_BYTES:,} bytes)")
            text = handle.read(MAX_CONFIG_BYTES + 1).decode("utf-8")
        _check_nesting(text)
        return tomllib.loads(text)
    except OSError as e:
        raise ValueError(f"cannot read it ({e.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"not TOML: {e}") from None


def llama3_ffn_hidden(dim: int, multiplier: float, multiple_of: int) -> int:
    """The SwiGLU hidden size of a Llama 3 flavor: two thirds of 4 x dim, times the flavor's
    multiplier, rounded up to its multiple (torchtitan's FeedForward, as Meta's reference)."""
    hidden = int(multiplier * int(2 * 4 * dim / 3))
    return multiple_of * math.ceil(hidden / multiple_of)


def _get(config: dict, section: str, key: str, default):
    value = config.get(section, {})
    return value.get(key, default) if isinstance(value, dict) else default


def _degrees(config: dict, gpus: int | None) -> tuple[dict[str, int], int]:
    """(tp, pp, cp, ep, replicate, shard) and the GPU count; torchtitan's -1 shard degree takes the ranks left."""
    names = {"tp": "tensor_parallel_degree", "pp": "pipeline_parallel_degree", "cp": "context_parallel_degree",
             "ep": "expert_parallel_degree", "replicate": "data_parallel_replicate_degree",
             "shard": "data_parallel_shard_degree"}
    d = {key: _get(config, "parallelism", name, -1 if key == "shard" else 1) for key, name in names.items()}
    for key, value in d.items():
        if not isinstance(value, int) or isinstance(value, bool) or (value < 1 and not (key == "shard" and value == -1)):
            raise ValueError(f"parallelism.{names[key]}: {value!r} is not a degree (a positive integer"
                             f"{', or -1' if key == 'shard' else ''})")
    if d["ep"] > 1:
        raise ValueError("parallelism.expert_parallel_degree: the Llama 3 flavors have no experts")
    others = d["tp"] * d["pp"] * d["cp"] * d["replicate"]
    if d["shard"] == -1:
        if gpus is None:
            raise ValueError("data_parallel_shard_degree = -1 takes the GPUs left over: give --gpus")
        if gpus % others:
            raise ValueError(f"{gpus} GPUs are not a multiple of tp*pp*cp*replicate = {others}")
        d["shard"] = gpus // others
    world = others * d["shard"]
    if gpus is not None and gpus != world:
        raise ValueError(f"the degrees make {world} GPUs (tp*pp*cp*replicate*shard), not --gpus {gpus}")
    return d, world


def from_torchtitan(config: dict, *, name: str, gpu: str, gpus: int | None = None,
                    gpus_per_node: int = 8) -> Imported:
    out = Imported({"name": name})
    model_name, flavor = _get(config, "model", "name", "llama3"), str(_get(config, "model", "flavor", "debugmodel"))
    if model_name != "llama3" or flavor not in LLAMA3_FLAVORS:
        raise ValueError(f"model {model_name} {flavor}: sim3d knows torchtitan's llama3 flavors "
                         f"{', '.join(LLAMA3_FLAVORS)}")
    f = LLAMA3_FLAVORS[flavor]
    seq = _get(config, "training", "seq_len", 2048)
    out.scenario["model"] = {"layers": f["n_layers"], "hidden": f["dim"], "heads": f["n_heads"],
                             "kv_heads": f["n_kv_heads"], "vocab": LLAMA3_VOCAB, "seq_len": seq,
                             "ffn_hidden": llama3_ffn_hidden(f["dim"], f["ffn_dim_multiplier"], f["multiple_of"]),
                             "activation": "swiglu", "hidden_dropout": 0.0, "attention_dropout": 0.0}
    d, world = _degrees(config, gpus)
    dp = d["replicate"] * d["shard"]
    # torchtitan shards with FSDP over dp_shard x cp whenever either exceeds 1, replicating over
    # dp_replicate (HSDP, or DDP when nothing is sharded): parallel_dims.py, fsdp_enabled
    sharded = d["shard"] > 1 or d["cp"] > 1
    parallel = {"tp": d["tp"], "pp": d["pp"], "cp": d["cp"], "dp": dp, "zero": 3 if sharded else 0,
                "sequence_parallel": d["tp"] > 1}  # torchtitan's TP plan shards norms' sequence (SequenceParallel)
    if sharded and d["replicate"] > 1:
        parallel["dp_replicate"] = d["replicate"]
    reshard = _get(config, "parallelism", "fsdp_reshard_after_forward", "default")
    if sharded and reshard in ("always", "never"):
        parallel["reshard_after_forward"] = reshard == "always"
    schedule_name = _get(config, "parallelism", "pipeline_parallel_schedule", "1F1B")
    if d["pp"] > 1:
        known = pytorch_schedules()
        if schedule_name not in known:
            raise ValueError(f"parallelism.pipeline_parallel_schedule {schedule_name!r}: sim3d runs "
                             f"{', '.join(known)}")
        schedule, vpp = known[schedule_name]
        per_stage = _get(config, "parallelism", "pipeline_parallel_layers_per_stage", None)
        if per_stage and schedule == "interleaved-1f1b":
            vpp = max(1, f["n_layers"] // (d["pp"] * per_stage))
        elif vpp > 1:
            out.assumed.append(f"parallel.vpp {vpp}: {schedule_name} with torchtitan's two stages per rank")
        parallel["vpp"] = vpp
        out.scenario["schedule"] = schedule
    out.scenario["parallel"] = parallel
    stage_layers = f["n_layers"] // (d["pp"] * parallel.get("vpp", 1))
    out.scenario["training"] = _training(config, d, dp, sharded, out, stage_layers)
    per_node = min(gpus_per_node, world)
    if world % per_node:
        raise ValueError(f"{world} GPUs do not fill nodes of {per_node}")
    out.scenario["cluster"] = {"gpu": gpu, "nodes": world // per_node, "gpus_per_node": per_node}
    out.unmapped += _unmapped(config)
    return out


# torchtitan's float8 linear converter, by its registered names: "float8" (2025 TOML configs),
# "quantize.linear.float8" (components/quantization, 2025-26); MX formats and others are not priced
FLOAT8_CONVERTERS = ("float8", "quantize.linear.float8")


def _training(config: dict, d: dict, dp: int, sharded: bool, out: Imported, stage_layers: int) -> dict:
    local = _get(config, "training", "local_batch_size", 8)
    global_batch = _get(config, "training", "global_batch_size", -1)
    global_batch = global_batch if global_batch and global_batch > 0 else local * dp
    micro = _get(config, "parallelism", "pipeline_parallel_microbatch_size", 1) if d["pp"] > 1 else local
    converters = _get(config, "model", "converters", [])
    if not isinstance(converters, list):
        raise ValueError(f"model.converters {converters!r}: torchtitan takes a list of converter names "
                         "(converters = [\"quantize.linear.float8\"])")
    fp8 = any(str(c) in FLOAT8_CONVERTERS for c in converters)
    out.unmapped += [f"model.converters: {c} (not priced: the run is priced without it)" for c in converters
                     if str(c) not in FLOAT8_CONVERTERS]
    param_dtype = _get(config, "training", "mixed_precision_param", "bfloat16")
    # torchtitan runs plain PyTorch modules, compiled or not; its RMSNorm is torch.nn.RMSNorm,
    # one fused kernel on CUDA (scenario/kernels.py)
    stack = "compiled" if _get(config, "compile", "enable", False) else "eager"
    training = {"micro_batch": micro, "global_batch": global_batch,
                "precision": "fp8" if fp8 else ("bf16" if param_dtype == "bfloat16" else "fp32"),
                "attention_backend": "flash", "kernels": {"stack": stack, "norm": "fused"},
                "grad_reduce_in_fp32": _get(config, "training", "mixed_precision_reduce", "float32") == "float32"}
    out.assumed.append("training.attention_backend flash, the GPU's own kernel: torchtitan's SDPA ran "
                       "FlashAttention-2 on H100 with torch 2.5.1-2.8 (set training.kernels.attention: fa2 for "
                       "such a run) and cuDNN once torchtitan put it first (2025-10)")
    float8 = config.get("quantize", {}).get("linear", {}).get("float8", config.get("float8", {}))
    if fp8 and sharded and isinstance(float8, dict) and float8.get("enable_fsdp_float8_all_gather"):
        training["fp8_param_gather"] = True
    if fp8:
        # a TOML-era torchtitan without recipe_name builds torchao's default Float8LinearConfig(),
        # tensorwise (torchtitan config/job_config.py before the 2026 config refactor)
        recipe = float8.get("recipe_name") if isinstance(float8, dict) else None
        if recipe not in (None, "tensorwise", "rowwise", "rowwise_with_gw_hp"):
            raise ValueError(f"float8.recipe_name {recipe!r}: sim3d prices tensorwise, rowwise and rowwise_with_gw_hp")
        if recipe is not None and float8.get("enable_fsdp_float8_all_gather"):
            # torchtitan's float8 converter asserts it (components/quantization/float8.py)
            raise ValueError("float8.recipe_name with enable_fsdp_float8_all_gather: torchtitan refuses the pair "
                             "(drop recipe_name for tensorwise, torchao's default)")
        training["kernels"]["fp8"] = recipe or "tensorwise"
    mode = _get(config, "activation_checkpoint", "mode", "selective")
    if mode not in ("none", "full", "selective"):
        raise ValueError(f"activation_checkpoint.mode {mode!r}: sim3d prices none, selective or full")
    training["recompute"] = mode
    if mode == "selective":
        option = str(_get(config, "activation_checkpoint", "selective_ac_option", "2"))
        if option == "op":  # per-op: every second matmul and all but the compute ops run again
            training["recompute"] = "op"
        elif option == "0":  # torchtitan: `if not ac_freq or ...`, every block checkpointed whole
            training["recompute"] = "full"
        elif option.isdigit() and int(option) >= 1:  # every n-th block checkpointed whole
            training["recompute"] = "full"
            training["recompute_num_layers"] = stage_layers // int(option)
            if not training["recompute_num_layers"]:
                training["recompute"] = "none"
                del training["recompute_num_layers"]
            out.assumed.append(f"training.recompute_num_layers: selective_ac_option {option!r} checkpoints every "
                               f"{option}-th block whole, {stage_layers // int(option)} of a stage's {stage_layers}")
        else:
            raise ValueError(f"activation_checkpoint.selective_ac_option {option!r}: torchtitan takes \"op\" or a "
                             "whole number n (every n-th block)")
    if "activation_checkpoint" not in config:
        out.assumed.append("activation_checkpoint.mode selective: torchtitan's default")
    return training


def _unmapped(config: dict) -> list[str]:
    """Settings of the config that change a step but that sim3d does not represent."""
    out = []
    if _get(config, "training", "dtype", "float32") == "bfloat16":
        out.append("training.dtype bfloat16: pure bf16 model states are held as mixed precision's")
    if _get(config, "parallelism", "enable_async_tensor_parallel", False):
        out.append("parallelism.enable_async_tensor_parallel: micro-pipelined TP is priced as synchronous TP")
    if _get(config, "training", "enable_cpu_offload", False):
        out.append("training.enable_cpu_offload: FSDP's CPU offload")
    for section, body in config.items():
        if section in IRRELEVANT or section == "compile" or not isinstance(body, dict):
            continue
        known = MAPPED.get(section, set()) | {"dtype", "enable_async_tensor_parallel", "enable_cpu_offload"}
        out += [f"{section}.{key}" for key in body if key not in known]
    return out


def _not_carried(s) -> list[str]:
    """What the scenario prices that a torchtitan config of these sections cannot say."""
    out = []
    if s.training.kernels.stack == "te":
        out.append("training.kernels.stack te (torchtitan runs PyTorch modules, eager or with [compile])")
    if s.training.kernels.loss_kernels == "vocab_parallel":
        out.append("training.kernels.loss vocab_parallel (Megatron's loss; torchtitan's is torch's cross_entropy "
                   "on the fp32 upcast, training.kernels.loss: torch)")
    if len(set(s.stage_layers)) > 1:
        out.append("the pipeline's uneven stages (Megatron's split options or parallel.pipeline_layout): "
                   "pipeline_parallel_layers_per_stage says one count for every stage")
    if s.training.precision == "fp8" and s.training.kernels.fp8_recipe == "te":
        out.append("training.kernels.fp8 te (torchtitan scales FP8 with torchao.float8; recipe_name picks one)")
    if s.training.recompute == "selective":
        out.append("training.recompute selective (the attention core alone: Korthikanti et al.); torchtitan's "
                   "nearest, written here, is its per-op policy (training.recompute: op)")
    if s.training.tp_comm_overlap:
        out.append("training.tp_comm_overlap (Transformer Engine's userbuffers; torchtitan's nearest is "
                   "parallelism.enable_async_tensor_parallel)")
    if s.model.mtp_layers:
        out.append("model.mtp_layers (a torchtitan dense model trains no multi-token-prediction module)")
    return out


def to_torchtitan_toml(s) -> str:
    """The scenario's layout as the sections of a torchtitan train config that set it (the rest of
    a config, its model and data, stays the user's). ValueError for what torchtitan cannot run:
    it shards data parallelism with FSDP (zero 3) or replicates it (zero 0), nothing between."""
    sharded = s.parallel.zero == 3
    if s.parallel.zero in (1, 2) and s.dp * s.cp > 1:
        raise ValueError(f"parallel.zero={s.parallel.zero}: torchtitan shards everything (FSDP, zero 3) or "
                         "nothing (DDP, zero 0)")
    if s.model.moe is not None:
        raise ValueError("model.moe: sim3d exports torchtitan configs of dense models only")
    schedule = SCHEDULES[s.schedule].pytorch_name
    if s.pp > 1 and schedule is None:
        raise ValueError(f"schedule {s.schedule}: torchtitan names none of its pipeline schedules so")
    shard = s.shard_group // s.cp if sharded else 1
    replicate = s.dp * s.cp // s.shard_group if sharded else s.dp
    lines = [f"# not carried: {what}" for what in _not_carried(s)]
    # torchtitan's local batch is what one data-parallel rank runs at once, its global batch
    # accumulated over local batches; a pipeline splits the local batch into its micro-batches
    local = s.training.global_batch // s.dp if s.pp > 1 else s.training.micro_batch
    lines += ["[training]", f"local_batch_size = {local}", f"global_batch_size = "
             f"{s.training.global_batch}", f"seq_len = {s.model.seq_len}", "",
             "[parallelism]", f"data_parallel_replicate_degree = {replicate}",
             f"data_parallel_shard_degree = {shard}", f"tensor_parallel_degree = {s.tp}",
             f"pipeline_parallel_degree = {s.pp}", f"context_parallel_degree = {s.cp}"]
    if s.pp > 1:
        lines += [f'pipeline_parallel_schedule = "{schedule}"',
                  f"pipeline_parallel_microbatch_size = {s.training.micro_batch}"]
        if s.vpp > 1:
            lines.append(f"pipeline_parallel_layers_per_stage = {s.model.layers // (s.pp * s.vpp)}")
    if sharded and s.parallel.reshard_after_forward is not None:
        lines.append(f'fsdp_reshard_after_forward = "{"always" if s.parallel.reshard_after_forward else "never"}"')
    recompute, some = s.training.recompute, s.training.recompute_num_layers
    if some is not None:  # torchtitan's every-n-th block: the same count on every stage
        counts = set(s.stage_layers)
        every = next(iter(counts)) // some if len(counts) == 1 and some else 0
        if recompute != "full" or not every or next(iter(counts)) // every != some:
            raise ValueError(f"training.recompute {recompute} on {some} layers of each stage: torchtitan "
                             "checkpoints every n-th block whole, n dividing the stage's layers (recompute full, "
                             "recompute_num_layers = layers per stage / n)")
        lines += ["", "[activation_checkpoint]", 'mode = "selective"', f'selective_ac_option = "{every}"']
    else:
        lines += ["", "[activation_checkpoint]",
                  f'mode = "{"selective" if recompute in ("op", "selective") else recompute}"']
    if some is None and recompute in ("op", "selective"):  # torchtitan's per-op policy; no attention-only one
        lines.append('selective_ac_option = "op"')
    if s.training.kernels.stack == "compiled":
        lines += ["", "[compile]", "enable = true"]
    if s.training.precision == "fp8":
        lines += ["", "[model]", 'converters = ["quantize.linear.float8"]', "",
                  "[quantize.linear.float8]",
                  f"enable_fsdp_float8_all_gather = {'true' if s.training.fp8_param_gather else 'false'}"]
        if s.training.kernels.fp8_recipe not in ("te", "tensorwise"):  # tensorwise: torchao's default config
            lines.append(f'recipe_name = "{s.training.kernels.fp8_recipe}"')
    return "\n".join(lines) + "\n"
