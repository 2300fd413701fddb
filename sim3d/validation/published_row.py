"""One row of a published-runs CSV as a scenario: the layout the row states, the cluster its
GPU comes in, and the software of its era for what the row leaves unsaid.

Defaults for what the sources leave unknown are Megatron-LM's documented defaults, applied
to every row alike (never tuned per row): vocabulary 51200 (GPT-2 BPE padded), bf16 unless
the notes say fp16 or fp8 (on A100 and H100 fp16 has the same peak), the 1F1B schedule, or
interleaved 1F1B when the row gives a virtual-pipeline degree, the servers its GPU ships in
(Selene: DGX A100, 8x HDR 200 Gb/s; DGX H100/H200/B200: 8x ConnectX-7 400 Gb/s; Jean Zay for
BLOOM: 4x Omni-Path 100 Gb/s per node; GB200: NVL72 racks).

Each row family (the id's prefix before the first `_`) runs the software of its era, the same
for every row of the family (`ERA_RULES`, validation/README.md). A family sim3d has no rule
for gets its era from the row itself (`_inferred_era`).
"""

from __future__ import annotations

import math
import re

from ..cluster.gpus import PRESETS, preset_named_in
from ..scenario.load import scenario_from_dict
from ..scenario.megatron_model_args import MLA_FLAGS, is_moe_pattern, read_moe_pattern
from ..errors import ScenarioError
from ..schedule.specs import megatron_schedule


def _blank(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value == ""


# cells a row cannot do without; every other one has a default
REQUIRED = ("layers", "hidden", "heads", "seq_len", "num_gpus", "tp", "pp", "dp")


def _int(row: dict, key: str, default=None):
    """A whole-number cell: its default when empty, ScenarioError naming the column when it
    is required and empty or holds something else."""
    value = row.get(key)
    if _blank(value):
        if key in REQUIRED:
            raise ScenarioError(f"{key} not published")
        return default
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if not number.is_integer():
        raise ScenarioError(f"{key}: {value!r} is not a whole number")
    return int(number)


def _text(value) -> str:
    return value if isinstance(value, str) else ""


# ---- what a row's notes say ------------------------------------------------------------
# `key=value` tokens (num_query_groups=8, ub_tp_comm_overlap=true, precision=bf16, ...); a value
# ends at white space, `;`, `,` or a parenthesis. Keys sim3d does not know are ignored.
_SETTING = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)=([^\s;,()]+)")


# what a note says of other runs than the row's ("later recipe ... uses recompute_modules=...",
# "... not pinned to this run"): from "later recipe", or the sentence saying "not pinned to this
# run", to the end of its clause
_OTHER_RUNS = re.compile(r"\blater recipe\b[^;]*|[^;.]*\bnot pinned to this run\b[^;]*", re.I)


def this_runs_notes(notes: str) -> str:
    """A notes cell without what it says of other runs."""
    return _OTHER_RUNS.sub("", notes or "")


def note_settings(notes: str) -> dict[str, str]:
    """The `key=value` tokens of a notes cell, keys lower-cased (the first of a repeated key
    wins), leaving out those said of other runs."""
    out: dict[str, str] = {}
    for key, value in _SETTING.findall(this_runs_notes(notes)):
        out.setdefault(key.lower(), value)
    return out


# recompute_modules=[mla_up_proj,mlp] (Megatron's names; dgxc-benchmarking's tables spell the key
# RecomputeModule), a bracketed list or one name
_MODULES = re.compile(r"(?<![\w.-])(?:recompute_modules|recomputemodule)=(\[[^\]]*\]|[^\s;,()]+)", re.I)


def _recompute_modules(notes: str) -> list[str] | None:
    found = _MODULES.search(this_runs_notes(notes))
    return [m for m in re.split(r"[\s,+/|]+", found[1].strip("[]")) if m] if found else None


_TRUE, _FALSE = ("true", "1", "1.0", "yes", "on"), ("false", "0", "0.0", "no", "off")


def _truth(value) -> bool | None:
    """A yes/no cell or setting however it is spelt (true, 1, yes, on, ...); None when it is
    neither (empty, "not stated")."""
    text = str(value).strip().lower()
    return True if text in _TRUE else False if text in _FALSE else None


def _flag(notes: str, settings: dict[str, str], key: str, mentioned: bool = False) -> bool | None:
    """A boolean setting: `key=true|false|1|0|yes|no|on|off` decides; otherwise, with
    `mentioned`, the bare word (e.g. "... with overlap_grad_sync/overlap_param_sync") means on;
    else None (unknown)."""
    value = _truth(settings.get(key.lower(), ""))
    if value is None and mentioned and re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", notes or ""):
        return True
    return value


def family_of(row_id: str) -> str:
    """The row family: the id's prefix before the first underscore (kor22, bloom176b, dgxc2411)."""
    return str(row_id).split("_", 1)[0]


# ---- one rule per question, each the same for every row it applies to --------------------
def _precision(settings: dict[str, str], gpu: str | None) -> str:
    """`precision=` of the notes: fp8 (Transformer Engine's recipes: "fp8", "fp8-mixed",
    "fp8_hybrid"), fp16, fp32, else bf16. "fp16/bf16-mixed" (not stated in the sources) and
    missing values give bf16: both have the same tensor-core peak on A100 and H100, and bf16
    needs no loss scaling; fp16 on a GPU without bf16 (V100), as those runs trained."""
    value = settings.get("precision", "").lower()
    if value.startswith("fp8"):
        return "fp8"
    unsaid = "fp16" if gpu in PRESETS and PRESETS[gpu].bf16_tflops is None else "bf16"
    return {"fp16": "fp16", "fp16-mixed": "fp16", "16-mixed": "fp16", "fp32": "fp32", "32": "fp32",
            "bf16": "bf16", "bf16-mixed": "bf16"}.get(value, unsaid)


# trained on Jean Zay and nowhere else (bigscience train/tr11-176B-ml/README.md, "Hardware"): a
# row of this model runs there whether or not its notes repeat it
JEAN_ZAY_MODELS = ("BLOOM-176B",)


def _cluster(row: dict, notes: str) -> dict:
    """The servers of the row's GPU as its maker ships them (the preset's GPUs and NICs per
    node, and its NVLink domain), on a rail-optimized fabric; BLOOM on Jean Zay's Omni-Path fat
    tree."""
    name, row_gpus = _text(row.get("gpu")), _int(row, "num_gpus")
    if row_gpus < 1:
        raise ScenarioError(f"num_gpus: {row_gpus} GPUs")
    gpu = preset_named_in(name)
    if gpu is None:
        raise ScenarioError(f"no GPU preset for {name or 'an empty gpu cell'}")
    spec = PRESETS[gpu]
    per_node = min(spec.gpus_per_node, row_gpus)
    nodes = max(1, row_gpus // per_node)
    if "Omni-Path" in notes or row.get("model") in JEAN_ZAY_MODELS:  # 4 Omni-Path 100 Gb/s links per node
        inter = {"fabric": "fat-tree", "nic_gbps": 100, "nics_per_node": 4}
    else:  # DGX datasheets: one NIC per GPU (two GPUs per NIC on a DGX-2)
        inter = {"fabric": "rail-optimized", "nic_gbps": spec.nic_gbps, "nics_per_node": spec.nics_per_node}
    cluster = {"gpu": gpu, "nodes": nodes, "gpus_per_node": per_node, "inter_node": inter}
    if spec.nvlink_domain_nodes > 1:
        # a rack-scale system (GB200 NVL72): the job's nodes fill whole racks where they can, the
        # largest rack share that divides them
        rack = spec.nvlink_domain_nodes
        cluster["intra_node"] = {"domain_nodes": max(d for d in range(1, rack + 1) if nodes % d == 0)}
    return cluster


def _model_family(model_name: str) -> dict:
    """Architecture and dropout of a model family, from the `model` column."""
    name = model_name.lower()
    if any(family in name for family in ("llama", "mistral", "mixtral", "qwen", "deepseek", "olmo", "gemma")):
        # Llama (arXiv:2302.13971 sec. 2.2) and its descendants: SwiGLU, RMSNorm, no biases;
        # NeMo's LlamaConfig / MixtralConfig (nemo/collections/llm/gpt/model/) set
        # attention_dropout = hidden_dropout = 0.0. OLMo: SwiGLU, no dropout (arXiv:2402.00838);
        # Gemma: GeGLU (arXiv:2403.08295), gated as SwiGLU is.
        return {"activation": "swiglu", "hidden_dropout": 0.0, "attention_dropout": 0.0}
    if "gpt-oss" in name:
        # Megatron-Bridge's GPTOSSProvider (src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py
        # @v0.2.0): gated_linear_unit=True (a GLU of quick_gelu: three GEMMs of ffn_hidden, as
        # SwiGLU), normalization RMSNorm, hidden_dropout = attention_dropout = 0.0, untied
        # embeddings. Its linear biases (add_bias_linear=True) ride in the GEMM epilogues; sim3d
        # leaves them out, as its other gated families have none.
        return {"activation": "swiglu", "hidden_dropout": 0.0, "attention_dropout": 0.0}
    if "nemotron" in name:
        # dgxc-benchmarking nemotron/nemotron4-15b-synth.yaml: activation squared-relu,
        # hidden_dropout 0.0, attention_dropout 0.0 (Nemotron-4, arXiv:2402.16819 sec. 2)
        return {"activation": "squared-relu", "hidden_dropout": 0.0, "attention_dropout": 0.0}
    # GPT-3 175B: the run's own config, dgxc-benchmarking nemo_megatron/gpt3_175b_hydra.yaml
    # @35a9aec (v24.11.1), sets hidden_dropout 0.1 and attention_dropout 0.1 (NeMo 1.x hydra
    # path), as Megatron's own defaults do. GELU and LayerNorm as in GPT-3.
    return {"activation": "gelu", "hidden_dropout": 0.1, "attention_dropout": 0.1}


# Mixture-of-experts models by name, for rows whose notes do not give num_experts / topk:
# Mixtral 8x7B and 8x22B route each token to 2 of 8 experts (arXiv:2401.04088 sec. 2).
KNOWN_MOE = {"mixtral": {"experts": 8, "top_k": 2}}


def _latent_attention(settings: dict[str, str]) -> dict | None:
    """Multi-head latent attention, where the notes give its ranks in Megatron's names."""
    mla = {field: int(settings[key]) for key, field in MLA_FLAGS.items() if settings.get(key, "").isdigit()}
    return mla if "kv_lora_rank" in mla else None


# a DeepSeek-V3 run "with MTP" trains DeepSeek-V3's one multi-token-prediction module
# (arXiv:2412.19437 sec. 2.2: depth D = 1; its config.json num_nextn_predict_layers: 1)
_WITH_MTP = re.compile(r"(?<![\w/])(w/|with) MTP\b", re.I)


def _moe(row: dict, settings: dict[str, str]) -> dict | None:
    """The row's experts: notes keys (Megatron's names) first, then `KNOWN_MOE`."""
    moe = next((dict(v) for k, v in KNOWN_MOE.items() if k in _text(row.get("model")).lower()), {})
    for key, field in (("num_experts", "experts"), ("moe_router_topk", "top_k"),
                       ("moe_ffn_hidden_size", "expert_ffn_hidden"), ("moe_layer_freq", "every"),
                       ("moe_shared_expert_intermediate_size", "shared_expert_ffn")):
        if settings.get(key, "").isdigit():
            moe[field] = int(settings[key])
    if moe and is_moe_pattern(settings.get("moe_layer_freq")):  # ([0]*3+[1]*58): dense first layers
        try:
            moe["every"], moe["first_dense_layers"] = read_moe_pattern(settings["moe_layer_freq"])
        except ValueError as e:
            raise ScenarioError(str(e)) from None
    if not moe and _int(row, "ep", 1) > 1:
        raise ScenarioError("expert parallelism without experts: give num_experts= (and moe_router_topk=) in notes")
    return moe or None


# runs whose pipeline was DeepSpeed's: named so, or trained by the BigScience workshop, whose
# train/ scripts (bigscience-workshop/bigscience train/tr11-176B-ml/tr11-176B-ml.slurm) launch
# Megatron-DeepSpeed's pretrain_gpt.py with --deepspeed
_DEEPSPEED = re.compile(r"deepspeed|bigscience", re.I)


def _megatron_2022(row: dict, notes: str, settings: dict[str, str]) -> dict:
    """Megatron-LM / Megatron-DeepSpeed of 2021-22 (Narayanan et al.; Korthikanti et al.;
    BLOOM's train/tr11-176B-ml/tr11-176B-ml.slurm passes no dropout flags): attention scores
    materialised in HBM with a fused softmax kernel (Megatron's --use-flash-attn postdates
    these runs), Megatron's default dropout 0.1 (megatron/arguments.py --hidden-dropout /
    --attention-dropout), no tensor-parallel communication overlap (Transformer Engine's
    userbuffers overlap postdates them too), and the gradients all-reduced after the last
    micro-batch's backward: Megatron-LM's default local DDP did it in train_step once
    forward_backward_func had returned (megatron/training.py @a8d172b, 2021-04: "All-reduce if
    needed", --DDP-impl local; --overlap-grad-reduce arrived in 2d5220a, 2023-09), as DeepSpeed's
    pipeline engine reduces them after its schedule. Megatron-LM's own pipeline scattered a message
    without SP over TP and all-gathered it on arrival (p2p_communication.py,
    --scatter-gather-tensors-in-pipeline, on by default until Megatron-Core's p2p of 2023 left it
    unused); DeepSpeed's pipeline engine, which Megatron-DeepSpeed runs, sends it whole."""
    training = {"attention_backend": "unfused", "tp_comm_overlap": False, "overlap_grad_reduce": False,
                "p2p_scatter_gather": not _DEEPSPEED.search(f"{notes} {_text(row.get('source'))}"),
                # every pipeline exchange waited for its batch_isend_irecv and then the device
                # (megatron/p2p_communication.py @de7dc40 _communicate: req.wait(), then
                # torch.cuda.synchronize()), under the interleaved schedule too; --overlap-p2p-comm
                # came with Megatron-Core
                "overlap_p2p": False,
                # the loss on the logits upcast to fp32, pass by pass (megatron/model/gpt_model.py
                # @de7dc40: vocab_parallel_cross_entropy(output.float()) unless
                # --fp16-lm-cross-entropy; Megatron-DeepSpeed's pipeline model calls the same)
                "kernels": {"loss": "vocab_parallel"}}
    if (year := _year_of(_text(row.get("source")))) is not None and year <= 2021:
        # runs dated 2021 or earlier (Narayanan et al., arXiv:2104.04473) ran before Megatron-LM
        # overlapped the backward input-gradient all-reduce with the weight-gradient GEMM (its
        # default from late 2021, scenario/schema.py), as scenarios/gpt3.yaml states of the same
        # paper's run; and in fp16 where the row does not say: every example script of that
        # Megatron-LM passes --fp16 (examples/*.sh @a8d172b, pretrain_gpt3_175B.sh included), --bf16
        # being a month old (b4bc51b, 2021-03-08), so its gradients are reduced in fp16
        training["async_tensor_model_parallel_allreduce"] = False
        if "precision" not in settings:
            training["precision"] = "fp16"
    if settings.get("ddp-impl") == "torch":
        # --DDP-impl torch: PyTorch's DistributedDataParallel, whose reducer all-reduces each
        # bucket as the backward fills it; Megatron-LM ran every micro-batch but the last under
        # its no_sync (megatron/schedules.py @de7dc40, forward_backward_no_pipelining), so the
        # reduction overlaps the last backward, as --overlap-grad-reduce does today
        training["overlap_grad_reduce"] = True
    return {"model": {"hidden_dropout": 0.1, "attention_dropout": 0.1}, "training": training}


_GATED = re.compile(r"(?<!non-)(?<!non )(?<!not )\b(geglu|swiglu|gated (mlp|linear unit))", re.I)


def _fused_stack(row: dict, notes: str, settings: dict[str, str]) -> dict:
    """Megatron-Core / NeMo / Transformer Engine from 2023 on: fused (flash / cuDNN)
    attention, the model family's activation and dropout, and the overlaps the notes record
    (ub_tp_comm_overlap, overlap_param_sync, overlap_grad_sync, overlap_p2p_comm,
    num_query_groups, kv_channels)."""
    model = _model_family(_text(row.get("model")))
    if _GATED.search(notes):
        # a gated MLP the notes name (Grok-1's GeGLU): three GEMMs of ffn_hidden, as SwiGLU; the
        # nonlinearity differs only in an elementwise kernel of the same size
        model["activation"] = "swiglu"
    if (groups := settings.get("num_query_groups", "")).isdigit():
        model["kv_heads"] = int(groups)
    if (head_dim := settings.get("kv_channels", "")).isdigit():  # a head size other than hidden / heads
        model["kv_channels"] = int(head_dim)
    training = {"attention_backend": "flash",
                "tp_comm_overlap": bool(_flag(notes, settings, "ub_tp_comm_overlap")
                                        or _flag(notes, settings, "tp_comm_overlap")),
                "overlap_param_gather": bool(_flag(notes, settings, "overlap_param_sync", mentioned=True))}
    for key, field in (("overlap_grad_sync", "overlap_grad_reduce"), ("overlap_p2p_comm", "overlap_p2p")):
        if (value := _flag(notes, settings, key, mentioned=True)) is not None:  # else the scenario default
            training[field] = value
    if "megatron-bridge" in notes.lower():
        # Megatron-Bridge 25.11's performance configs reduce gradients in bf16
        # (scripts/performance/configs/llama3/llama3_llm_pretrain.py L46-47, llama31/ and qwen3/
        # alike @v0.2.0: cfg.ddp.grad_reduce_in_fp32 = False), and FP8 current scaling keeps FP8
        # parameters (training/mixed_precision.py, bf16_with_fp8_current_scaling_mixed:
        # fp8_param_gather=True)
        training["grad_reduce_in_fp32"] = False
        if "fp8-cs" in notes.lower() and settings.get("precision", "").startswith("fp8"):
            training["fp8_param_gather"] = True
    if settings.get("precision", "").startswith("fp8") and re.search(r"\bfp8_params\b", notes):
        # NeMo 1.x's +model.fp8_params: Transformer Engine keeps the weights in FP8
        training["fp8_param_gather"] = True
    # the loss: Megatron-Core fused it from 2024-06 (--cross-entropy-loss-fusion, Megatron-LM
    # 7b4a6d7, "Added cross entropy fusion"); a run dated 2023 or earlier ran Megatron's
    # vocab_parallel_cross_entropy on fp32 logits, as NeMo on Megatron-Core did
    fusion = _flag(notes, settings, "cross_entropy_loss_fusion", mentioned=True)
    year = _year_of(_text(row.get("source")))
    if fusion is False or (fusion is None and year is not None and year <= 2023):
        training["kernels"] = {"loss": "vocab_parallel"}
    if settings.get("optim_dtype") in ("bf16", "bfloat16"):
        training["optimizer_dtype"] = "bf16"
    if "distributed_fused_adam" in notes:
        # the NeMo 1.x path's optimizer, which those recipes set to reduce in bf16
        # (dgxc-benchmarking nemo_megatron/gpt3_175b_hydra.yaml @35a9aec: optim.grad_sync_dtype: bf16);
        # the NeMo 2.0 recipes keep MegatronMixedPrecision's grad_reduce_in_fp32=True
        training["grad_reduce_in_fp32"] = False
    return {"model": model, "training": training}


# what a source says of its attention kernels (key=value settings removed first: they are read
# as settings, and "flash_attention=not stated" says nothing)
_SAYS_UNFUSED = re.compile(r"\bunfused attention\b|\b(without|no) flash", re.I)
_SAYS_FUSED = re.compile(r"\bflash[ _-]?attn\b|\bflash ?attention|\bcudnn\b|\bfused attention\b", re.I)
# software of today's stack (NeMo dates from 2022, so these count only where no year is named)
_FUSED_SOFTWARE = re.compile(r"\b(transformer ?engine|megatron-core|mcore|megatron-bridge|torchtitan|nemo)\b", re.I)
# an arXiv id's yymm (arXiv:2104.04473, arxiv.org/abs/2201.11990), or a year standing alone
# (not in a hash, a version or a count such as "2016 GPUs")
_ARXIV = re.compile(r"arxiv(?:\.org/(?:abs|pdf)/|:)\s*(\d{2})\d{2}\.\d{4,5}", re.I)
_YEAR = re.compile(r"(?<![\w@./-])(20(?:1[89]|2\d))(?![\w./-])(?!\s*(?:GPUs?|nodes?|servers?)\b)", re.I)
# GPUs older than Hopper (compute capability 9.0: the A100s and V100s) trained the unfused era's runs
FUSED_ERA_CAPABILITY = 9.0


def _year_of(source: str) -> int | None:
    """When a source's run happened: its arXiv id's year if it names one, else the earliest
    year it names (a later one is usually a transcription's or a re-run's), else None."""
    if (arxiv := _ARXIV.search(source)) is not None:
        return 2000 + int(arxiv[1])
    years = [int(y) for y in _YEAR.findall(source)]
    return min(years) if years else None


def _unfused_era(row: dict, notes: str, settings: dict[str, str]) -> bool:
    """Whether a row of a family without a rule ran the 2021-22 Megatron stack. In order, the
    first that speaks decides: a flash_attention / use_flash_attn setting; words on the
    attention kernels; the source's year (FlashAttention reached Megatron-LM in 2023,
    --use-flash-attn); software of today's stack named; the GPU's generation (older than
    Hopper: A100, V100)."""
    for key in ("flash_attention", "use_flash_attn"):
        if (said := _truth(settings.get(key, ""))) is not None:
            return not said
    text = _SETTING.sub(" ", " ".join((notes, _text(row.get("source")))))
    if _SAYS_UNFUSED.search(text):
        return True
    if _SAYS_FUSED.search(text):
        return False
    if (year := _year_of(_text(row.get("source")))) is not None:
        return year < 2023
    if _FUSED_SOFTWARE.search(text):
        return False
    gpu = preset_named_in(_text(row.get("gpu")))
    return gpu is not None and PRESETS[gpu].predates(FUSED_ERA_CAPABILITY)


def _inferred_era(row: dict, notes: str, settings: dict[str, str]) -> dict:
    """A family sim3d has no rule for: the 2021-22 Megatron stack or today's fused one as
    `_unfused_era` reads the row; either way the model family's activation, the row's query
    groups and its experts."""
    era = _fused_stack(row, notes, settings)
    if _unfused_era(row, notes, settings):  # the family's dropout stays: GPT's 0.1 is Megatron's default
        era["training"].update(_megatron_2022(row, notes, settings)["training"])
    return era


def _llm_foundry(row: dict, notes: str, settings: dict[str, str]) -> dict:
    """MosaicML's llm-foundry on Composer with PyTorch FSDP (validation/README.md): MPT models,
    whose yamls (scripts/train/yamls/pretrain/mpt-*.yaml) set no dropout (attn_pdrop, resid_pdrop
    0) and a fused attention kernel (attn_impl triton/flash); no tensor parallelism, so no TP
    overlap. Composer's FSDP mixed precision (composer/distributed/mixed_precision.py): PURE
    reduces gradients in bf16, DEFAULT (amp_bf16) in fp32."""
    pure = "pure bf16" in notes.lower() or "mixed_precision PURE" in notes
    # Composer trains the model as plain PyTorch modules (no torch.compile unless asked; none of
    # the benchmark yamls asks), so every norm, activation, add and bias gradient is its own kernel.
    # The flash kernel is the row's attn_impl: `triton` runs FlashAttention written in Triton
    # (llmfoundry/models/layers/attention.py, triton_flash_attn_fn), `flash` the CUDA one.
    attn_impl = re.search(r"\battn_impl[ :=]+(\w+)", notes)
    attention = "triton" if attn_impl and attn_impl[1].lower() == "triton" else "default"
    return {"model": {"activation": "gelu", "hidden_dropout": 0.0, "attention_dropout": 0.0},
            "training": {"attention_backend": "flash", "tp_comm_overlap": False, "grad_reduce_in_fp32": not pure,
                         "kernels": {"stack": "eager", "attention": attention}}}


# row family -> the software of its era (validation/README.md)
ERA_RULES = {"kor22": _megatron_2022, "bloom176b": _megatron_2022, "dgxc2411": _fused_stack,
             "foundry": _llm_foundry}


def _recompute_that_fits(raw: dict) -> str:
    """Recomputation a run that does not say must have used: the least that fits in its GPUs'
    memory, since a run that trained fitted. On the 2021-22 Megatron stack (unfused attention)
    full recomputation was the only kind: none, else full; on today's stack none, selective
    (Megatron-Core's --recompute-granularity selective), else full."""
    from ..model.memory import fits_in_memory
    ladder = ("none", "full") if raw["training"].get("attention_backend") == "unfused" else ("none", "selective", "full")
    for recompute in ladder[:-1]:
        trial = {**raw, "training": {**raw["training"], "recompute": recompute}}
        if fits_in_memory(scenario_from_dict(trial), check_schedule=False)[0]:
            return recompute
    return ladder[-1]


# What a row that leaves a cell empty gets, and why (`read_row` names those a row used):
# micro-batch 1, as Megatron-LM's GPT-3 175B example (examples/gpt3/train_gpt3_175b_distributed.sh
# @157006d: --micro-batch-size 1) and NeMo's recipes (micro_batch_size: int = 1) run large models.
DEFAULT_MICRO_BATCH = 1
# GPT-2's BPE vocabulary padded to a multiple of 128 x 8 (Megatron-LM's README: "All models use a
# vocabulary size of 51,200")
DEFAULT_VOCAB = 51200
# The distributed_optimizer cell's spellings of sharded data parallelism, as ZeRO stages:
# Megatron's distributed optimizer and DeepSpeed ZeRO-1 shard the optimizer state; ZeRO-2 adds
# the gradients; FSDP (PyTorch's FULL_SHARD, Megatron-FSDP's optim_grads_params, and Llama 3's
# run, arXiv:2407.21783 sec. 3.3.2) shards the parameters too.
SHARDING_CELLS = {"zero1": 1, "zero-1": 1, "zero2": 2, "zero-2": 2, "shard_grad_op": 2,
                  "zero3": 3, "zero-3": 3, "fsdp": 3, "full_shard": 3}


def _zero_stage(cell) -> int:
    """The distributed_optimizer cell as a ZeRO stage: yes/no however spelt (1 / 0), or the kind
    of sharding."""
    return SHARDING_CELLS.get(str(cell).strip().lower(), 1 if _truth(cell) else 0)


def read_row(row: dict, layer_only: bool = False) -> tuple[dict, list[str]]:
    """The scenario file contents (a plain dict) for one CSV row, and the defaults its empty
    cells took, for the validation table's notes (a layer's timing needs no batch and no
    recomputation rule). ScenarioError says what is missing."""
    said = []
    gbs, mb = _int(row, "global_batch"), _int(row, "micro_batch")
    if layer_only and mb is not None and gbs is None:  # one layer's timing: the batch size is moot
        gbs = mb * _int(row, "dp")
    if gbs is None:
        raise ScenarioError("global_batch not published")
    if mb is None:
        mb = DEFAULT_MICRO_BATCH
        said += [] if layer_only else [f"micro-batch {DEFAULT_MICRO_BATCH} assumed"]
    if _blank(row.get("vocab")):
        said.append(f"vocab {DEFAULT_VOCAB} assumed")
    tp, pp, dp = _int(row, "tp"), _int(row, "pp"), _int(row, "dp")
    vpp = _int(row, "vp", 1) or 1
    recompute = row.get("recompute") if isinstance(row.get("recompute"), str) and row["recompute"] else None
    notes = _text(row.get("notes"))
    settings = note_settings(notes)
    era = ERA_RULES.get(family_of(row["id"]), _inferred_era)(row, notes, settings)
    sequence_parallel = _truth(row.get("sequence_parallel"))
    if sequence_parallel is None:
        # NeMo's and Megatron-Bridge's recipe default (sequence_parallelism: bool = True)
        # wherever tensor parallelism runs on today's fused stack; 2022 Megatron had none
        sequence_parallel = era["training"]["attention_backend"] == "flash" and tp > 1
        said += ["sequence parallelism assumed (recipe default)"] if sequence_parallel else []
    zero = _zero_stage(row.get("distributed_optimizer"))
    if _blank(row.get("distributed_optimizer")) and era["training"]["attention_backend"] == "flash":
        # NeMo's and Megatron-Bridge's recipes build their optimizer with
        # distributed_fused_adam_with_cosine_annealing, use_distributed_optimizer=True
        # (NVIDIA/NeMo nemo/collections/llm/recipes/optim/adam.py; NVIDIA-NeMo/Megatron-Bridge
        # src/megatron/bridge/recipes/utils/optimizer_utils.py @355cef4)
        zero = 1
        said.append("distributed optimizer assumed (recipe default)")
    raw = {
        "name": row["id"],
        "model": {"layers": _int(row, "layers"), "hidden": _int(row, "hidden"), "heads": _int(row, "heads"),
                  "ffn_hidden": _int(row, "ffn_hidden"), "vocab": _int(row, "vocab", DEFAULT_VOCAB),
                  "seq_len": _int(row, "seq_len")},
        "parallel": {"tp": tp, "pp": pp, "dp": dp, "cp": _int(row, "cp", 1), "ep": _int(row, "ep", 1),
                     "vpp": vpp, "sequence_parallel": sequence_parallel,
                     "zero": zero},
        "training": {"micro_batch": mb, "global_batch": gbs, "recompute": recompute or "none",
                     "precision": _precision(settings, preset_named_in(_text(row.get("gpu"))))},
        "schedule": megatron_schedule(vpp),
        "cluster": _cluster(row, notes),
    }
    if (mla := _latent_attention(settings)) is not None:
        raw["model"]["mla"] = mla
    # the modules selective recomputation runs again, the only granularity that reads them
    if (modules := _recompute_modules(notes)) and recompute in (None, "selective"):
        raw["training"]["recompute_modules"] = modules
        said += [] if recompute else [f"recompute selective of {', '.join(modules)} (its notes)"]
        recompute = raw["training"]["recompute"] = "selective"
    if settings.get("mtp_num_layers", "").isdigit():
        raw["model"]["mtp_layers"] = int(settings["mtp_num_layers"])
    elif "deepseek" in _text(row.get("model")).lower() and _WITH_MTP.search(notes):
        raw["model"]["mtp_layers"] = 1
    if (moe := _moe(row, settings)) is not None:
        raw["model"]["moe"] = moe
        etp = settings.get("expert_tensor_parallel_size", settings.get("etp", ""))
        if etp.isdigit():  # Megatron-Core's MoE parallel folding; absent, experts follow tp
            raw["parallel"]["etp"] = int(etp)
    for section, values in era.items():
        raw[section].update(values)
    if layer_only:
        raw["parallel"]["pp"] = 1
        raw["parallel"]["vpp"] = 1
    elif recompute is None:
        raw["training"]["recompute"] = _recompute_that_fits(raw)
        chosen = raw["training"]["recompute"]
        said += [f"recompute {chosen} assumed (less does not fit in memory)"] if chosen != "none" else []
    return raw, said


def scenario_dict_of(row: dict, layer_only: bool = False) -> dict:
    """The scenario file contents (a plain dict) for one CSV row."""
    return read_row(row, layer_only)[0]


def scenario_of(row: dict, layer_only: bool = False):
    """A Scenario for one CSV row, or raise ScenarioError saying what is missing."""
    return scenario_from_dict(scenario_dict_of(row, layer_only))
