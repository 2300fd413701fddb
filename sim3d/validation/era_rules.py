"""The software of each row family's era, for what a published row leaves unsaid: the
2021-22 Megatron stack, today's Megatron-Core / NeMo / Transformer Engine stack, llm-foundry's
eager PyTorch, and the era a row of a family without a rule states by its year, its GPU and its
words (`ERA_RULES`, `inferred_era`; validation/README.md)."""

from __future__ import annotations

import re

from ..cluster.gpus import PRESETS, preset_named_in
from .row_notes import _SETTING, _flag, _text, _truth, precision_of


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
    deepspeed = bool(_DEEPSPEED.search(f"{notes} {_text(row.get('source'))}"))
    training = {"attention_backend": "unfused", "tp_comm_overlap": False, "overlap_grad_reduce": False,
                "p2p_scatter_gather": not deepspeed,
                # every pipeline exchange waited for its batch_isend_irecv and then the device
                # (megatron/p2p_communication.py @de7dc40 _communicate: req.wait(), then
                # torch.cuda.synchronize()), under the interleaved schedule too; --overlap-p2p-comm
                # came with Megatron-Core
                "overlap_p2p": False,
                # the loss on the logits upcast to fp32, pass by pass (megatron/model/gpt_model.py
                # @de7dc40: vocab_parallel_cross_entropy(output.float()) unless
                # --fp16-lm-cross-entropy; Megatron-DeepSpeed's pipeline model calls the same)
                "kernels": {"loss": "vocab_parallel"}}
    year = _year_of(_text(row.get("source")))
    if year is not None and year <= 2021:
        # runs dated 2021 or earlier (Narayanan et al., arXiv:2104.04473) ran before Megatron-LM
        # overlapped the backward input-gradient all-reduce with the weight-gradient GEMM (its
        # default from late 2021, scenario/schema.py), as scenarios/gpt3.yaml states of the same
        # paper's run; and in fp16 where the row does not say: every example script of that
        # Megatron-LM passes --fp16 (examples/*.sh @a8d172b, pretrain_gpt3_175B.sh included), --bf16
        # being a month old (b4bc51b, 2021-03-08), so its gradients are reduced in fp16
        training["async_tensor_model_parallel_allreduce"] = False
        if "precision" not in settings:
            training["precision"] = "fp16"
    if deepspeed and "precision" not in settings and (_arxiv_month(_text(row.get("source"))) or (9999, 0)) < (2022, 4):
        # DeepSpeed's pipeline engine refused bf16 until 56c5223 (2022-04-19, "bf16+pipeline
        # parallelism"): a run published before then trained in fp16
        training["precision"] = "fp16"
    precision = training.get("precision") or precision_of(settings, preset_named_in(_text(row.get("gpu"))))
    if (accumulation := _accumulation(deepspeed, year, precision)):
        training["kernels"]["grad_accumulation"] = accumulation
    if settings.get("ddp-impl") == "torch":
        # --DDP-impl torch: PyTorch's DistributedDataParallel, whose reducer all-reduces each
        # bucket as the backward fills it; Megatron-LM ran every micro-batch but the last under
        # its no_sync (megatron/schedules.py @de7dc40, forward_backward_no_pipelining), so the
        # reduction overlaps the last backward, as --overlap-grad-reduce does today
        training["overlap_grad_reduce"] = True
    return {"model": {"hidden_dropout": 0.1, "attention_dropout": 0.1}, "training": training}


def _accumulation(deepspeed: bool, year: int | None, precision: str | None) -> str | None:
    """How a 2021-22 run accumulated its weight gradients, where not in the GEMMs
    (training.kernels.grad_accumulation; None: fused, or no date to tell). Megatron-LM fused
    it into the weight-gradient GEMMs from 83b1e42 (2022-02-13), for fp16 gradient buffers only
    from 07916bf (2022-09-27); before, its local DDP's hook added each gradient into the
    contiguous fp32 buffer bf16 forced, and fp16 runs of 2021, whose contiguous buffers were
    opt-in until e8fb052 (2021-08-18; --use-contiguous-buffers-in-ddp, not in examples/sc21),
    summed them in `.grad` through autograd. DeepSpeed's pipeline engine adds an fp32 copy of
    each bf16 gradient after every micro-batch (bf16_optimizer.py update_hp_grads @56c5223,
    BLOOM's year) and leaves fp16 gradients to autograd (ZeRO-1 hooks none). By year only: a
    late-2021 fp16 run (contiguous by default) or a 2022 run before 2022-02-13 is read as
    its year's majority."""
    bf16 = precision == "bf16"
    if deepspeed:
        return "upcast" if bf16 else "autograd"
    if year is None or year > 2022 or (year == 2022 and precision != "fp16"):
        return None
    return "main_grad" if bf16 or year == 2022 else "autograd"


_GATED = re.compile(r"(?<!non-)(?<!non )(?<!not )\b(geglu|swiglu|gated (mlp|linear unit))", re.I)


def _fused_stack(row: dict, notes: str, settings: dict[str, str]) -> dict:
    """Megatron-Core / NeMo / Transformer Engine from 2023 on: fused (flash / cuDNN)
    attention, the model family's activation and dropout, and the overlaps the notes record
    (ub_tp_comm_overlap, overlap_param_sync, overlap_grad_sync, overlap_p2p_comm,
    moe_a2a_overlap, num_query_groups, kv_channels)."""
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
    if _flag(notes, settings, "moe_a2a_overlap"):  # said as key=value of this run only
        training["moe_a2a_overlap"] = True
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
def _arxiv_month(source: str) -> tuple[int, int] | None:
    """(year, month) of the arXiv id a source names, or None."""
    found = _ARXIV_MONTH.search(source)
    return (2000 + int(found[1]), int(found[2])) if found else None


_ARXIV_MONTH = re.compile(r"arxiv(?:\.org/(?:abs|pdf)/|:)\s*(\d{2})(\d{2})\.\d{4,5}", re.I)
_YEAR = re.compile(r"(?<![\w@./-])(20(?:1[89]|2\d))(?![\w./-])(?!\s*(?:GPUs?|nodes?|servers?)\b)", re.I)
# GPUs older than Hopper (compute capability 9.0: the A100s and V100s) trained the unfused era's runs
FUSED_ERA_CAPABILITY = 9.0


def _year_of(source: str) -> int | None:
    """When a source's run happened: its arXiv id's year if it names one, else the earliest
    year it names (a later one is usually a transcription's or a re-run's), else None."""
    if (arxiv := _arxiv_month(source)) is not None:
        return arxiv[0]
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
