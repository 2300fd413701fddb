"""Scenarios from the configurations people already have: a Megatron-LM command line
(`pretrain_gpt.py` arguments), or a NeMo training YAML read as the Megatron arguments it names
(nemo_import.py).

Neither names the cluster, so the caller gives the GPU preset and the GPU count (or
nodes); what is not in the arguments takes Megatron-LM's documented default. Every import
says what it could not map and what it assumed, so nothing is silently dropped.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from ..schedule.specs import megatron_schedule
from . import megatron_fsdp
from .megatron_model_args import (DISPATCH_FLAGS, MLA_FLAGS, is_moe_pattern, read_dispatcher, read_latent_attention,
                                  read_moe_pattern)
from .pipeline_split import layout_stages

# Megatron-LM argument (megatron/training/arguments.py, dashes as underscores) -> scenario path.
def _misspelled(flag: str) -> str | None:
    """The argument sim3d reads that `flag` is a near miss of, or None for an argument of
    Megatron's that sim3d simply does not map. A near miss is up to one edit (a letter dropped,
    added or changed) per eight letters of the argument, three at most: --tensr-model-paralel-siz
    is one, --num-layer is, --num-experts is not --num-layers; a longer real argument of
    Megatron's that extends one sim3d reads (--tp-comm-overlap-rs) is no typo (Megatron's parser
    takes no abbreviations, so a shorter one is)."""
    known = [*VALUE_FLAGS, *SWITCH_FLAGS, *megatron_fsdp.FLAGS, *WITHOUT_EFFECT, "fp8_format",
             "num_layers_per_virtual_pipeline_stage"]
    if flag in known:
        return None
    cut = [name for name in known if name.startswith(flag)]  # --tensor-model-parallel: an argument cut short
    if len(cut) == 1 and len(flag) >= 8:
        return cut[0]
    near = [(_edits(flag, name), name) for name in known if not flag.startswith(name)]
    near = [(d, name) for d, name in near if 1 <= d <= min(3, len(name) // 8)]
    return min(near)[1] if near else None


def _edits(a: str, b: str) -> int:
    """Levenshtein distance: letters inserted, deleted or substituted to turn `a` into `b`."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


VALUE_FLAGS = {
    "num_layers": "model.layers", "hidden_size": "model.hidden", "num_attention_heads": "model.heads",
    "num_query_groups": "model.kv_heads", "ffn_hidden_size": "model.ffn_hidden", "seq_length": "model.seq_len",
    "kv_channels": "model.kv_channels", "hidden_dropout": "model.hidden_dropout",
    "attention_dropout": "model.attention_dropout", "vocab_size": "model.vocab",
    "num_experts": "model.moe.experts", "moe_router_topk": "model.moe.top_k",
    "moe_ffn_hidden_size": "model.moe.expert_ffn_hidden", "mtp_num_layers": "model.mtp_layers",
    "moe_shared_expert_intermediate_size": "model.moe.shared_expert_ffn",
    "moe_expert_capacity_factor": "model.moe.capacity_factor", "moe_layer_freq": "model.moe.every",
    "moe_router_num_groups": "model.moe.router_groups", "moe_router_group_topk": "model.moe.router_group_topk",
    "tensor_model_parallel_size": "parallel.tp", "pipeline_model_parallel_size": "parallel.pp",
    "context_parallel_size": "parallel.cp", "expert_model_parallel_size": "parallel.ep",
    "expert_tensor_parallel_size": "parallel.etp",
    "decoder_first_pipeline_num_layers": "parallel.decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers": "parallel.decoder_last_pipeline_num_layers",
    "num_layers_in_first_pipeline_stage": "parallel.decoder_first_pipeline_num_layers",
    "num_layers_in_last_pipeline_stage": "parallel.decoder_last_pipeline_num_layers",
    "micro_batch_size": "training.micro_batch", "global_batch_size": "training.global_batch",
    # Megatron-Core's newer spelling of the interleaved schedule's depth (model chunks per rank)
    "num_virtual_stages_per_pipeline_rank": "parallel.vpp",
    # the vocabulary Megatron really builds (its args namespace: vocab_size padded for tp)
    "padded_vocab_size": "model.vocab",
    "attention_backend": "training.attention_backend", "recompute_granularity": "training.recompute",
    "recompute_modules": "training.recompute_modules",  # a list (NeMo) or Megatron's several values
}
SWITCH_FLAGS = {  # flags without a value
    "sequence_parallel": ("parallel.sequence_parallel", True),
    "use_distributed_optimizer": ("parallel.distributed_optimizer", True),
    "swiglu": ("model.activation", "swiglu"), "squared_relu": ("model.activation", "squared-relu"),
    "bf16": ("training.precision", "bf16"), "fp16": ("training.precision", "fp16"),
    "overlap_grad_reduce": ("training.overlap_grad_reduce", True),

    "accumulate_allreduce_grads_in_fp32": ("training.grad_reduce_in_fp32", True),
    "grad_reduce_in_bf16": ("training.grad_reduce_in_fp32", False),
    "overlap_param_gather": ("training.overlap_param_gather", True),
    "tp_comm_overlap": ("training.tp_comm_overlap", True),
    "overlap_moe_expert_parallel_comm": ("training.moe_a2a_overlap", True),
    "use_flash_attn": ("training.attention_backend", "flash"),
    "recompute_activations": ("training.recompute", "selective"),  # Megatron: selective recomputation
    "checkpoint_activations": ("training.recompute", "full"),  # 2021 name of full recomputation
    "no_async_tensor_model_parallel_allreduce": ("training.async_tensor_model_parallel_allreduce", False),
    "no_gradient_accumulation_fusion": ("training.kernels.grad_accumulation", "main_grad"),
    "overlap_p2p_comm": ("training.overlap_p2p", True),
    # 2020-22's pipeline scatter/gather: its off switch; the args namespace's true says no era (WITHOUT_EFFECT)
    "no_scatter_gather_tensors_in_pipeline": ("training.p2p_scatter_gather", False),
    "fp8": ("training.precision", "fp8"),  # NeMo's model.fp8: true (Transformer Engine FP8)
    "account_for_embedding_in_pipeline_split": ("parallel.account_for_embedding_in_pipeline_split", True),
    "account_for_loss_in_pipeline_split": ("parallel.account_for_loss_in_pipeline_split", True),
    # Megatron-LM arguments.py: initialise ranks in tp-cp-ep-pp-dp order instead of tp-cp-ep-dp-pp
    "use_tp_pp_dp_mapping": ("parallel.order", "tp-cp-ep-pp-dp"),
}
# Arguments that do not change a step's time or memory: accepted without a note.
IRRELEVANT = {
    "lr", "min_lr", "lr_decay_style", "lr_decay_iters", "lr_decay_samples", "lr_warmup_fraction",
    "lr_warmup_iters", "lr_warmup_samples", "weight_decay", "clip_grad", "adam_beta1", "adam_beta2", "adam_eps",
    "init_method_std", "train_iters", "train_samples", "log_interval", "eval_iters", "eval_interval",
    "save_interval", "save", "load", "data_path", "split", "vocab_file", "merge_file", "tokenizer_type",
    "seed", "tensorboard_dir", "wandb_project", "exit_interval", "distributed_backend",
    "max_position_embeddings", "position_embedding_type", "normalization", "untie_embeddings_and_output_weights",
    "disable_bias_linear", "no_masked_softmax_fusion", "no_bias_gelu_fusion", "no_bias_dropout_fusion",
    "use_mcore_models", "transformer_impl", "rotary_base", "rotary_percent", "use_rotary_position_embeddings",
    "rampup_batch_size", "data_cache_path", "num_workers", "log_throughput", "timing_log_level",
    "log_timers_to_tensorboard", "tensorboard_log_interval", "make_vocab_size_divisible_by", "group_query_attention",
    # NeMo model keys of the same kind (numerics, fusions, checkpointing, data)
    "mcore_gpt", "bias", "layernorm_epsilon", "share_embeddings_and_output_weights", "persist_layer_norm",
    "masked_softmax_fusion", "bias_activation_fusion", "bias_dropout_add_fusion", "apply_query_key_layer_scaling",
    "gradient_as_bucket_view", "use_cpu_initialization", "onnx_safe", "apply_rope_fusion", "seq_len_interpolation_factor",
    "pre_process", "post_process", "headscale", "transformer_block_type", "openai_gelu", "normalize_attention_scores",
    "resume_from_checkpoint", "native_amp_init_scale", "native_amp_growth_interval", "hysteresis", "fp32_residual_connection",
    "fp16_lm_cross_entropy", "megatron_amp_O2", "grad_allreduce_chunk_size_mb", "grad_div_ar_fusion", "gradient_accumulation_fusion",
    "get_attention_mask_from_fusion", "sync_batch_comm", "use_flash_attention", "deterministic_mode", "cross_entropy_loss_fusion",
    "nsys_profile", "seed", "precision", "num_micro_batches_with_partial_activation_checkpoints",
    "activations_checkpoint_layers_per_pipeline", "fp8_margin", "fp8_interval", "fp8_amax_history_len",
    "fp8_amax_compute_algo", "reduce_amax", "use_emha", "ub_tp_comm_overlap_cfg", "tp_comm_overlap_ag",
    "tp_comm_overlap_rs", "defer_embedding_wgrad_compute", "wgrad_deferral_limit", "batch_p2p_comm"}
# Read on a command line; in a flat argument dict they change no step (full recomputation: every layer).
WITHOUT_EFFECT = {"recompute_method", "recompute_num_layers", "tokenizer_model", "make_vocab_size_divisible_by",
                  "scatter_gather_tensors_in_pipeline"}
# Vocabulary of well-known tokenizers, by a name fragment of NeMo's `tokenizer.type` / `.model`:
# Llama 3 / 3.1: 128,256 (arXiv:2407.21783 sec. 3.1.1 "128K tokens"; the HF config's vocab_size),
# Llama 2: 32,000 (arXiv:2307.09288), Nemotron-4: 256,000 (arXiv:2402.16819), GPT-2 BPE: 50,257.
TOKENIZER_VOCAB = {"llama-3": 128256, "llama3": 128256, "meta-llama-3": 128256, "llama-2": 32000, "nemotron": 256000, "gpt2": 50257}
GPT2_VOCAB = 50257  # GPT-2 BPE, padded as Megatron pads it (--make-vocab-size-divisible-by 128 x tp)


@dataclass
class Imported:
    scenario: dict
    unmapped: list[str] = field(default_factory=list)  # arguments read but not represented
    assumed: list[str] = field(default_factory=list)  # values the arguments did not give


def _set(tree: dict, path: str, value) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        tree = tree.setdefault(part, {})
    tree[leaf] = value


def _get(tree: dict, path: str):
    for part in path.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def number_of(text: str):
    """An argument's value as Megatron's argparse types it: int, float, or the text itself."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_megatron_args(args: list[str] | str) -> tuple[dict[str, object], list[str]]:
    """`--flag value` / `--switch` tokens -> {flag_with_underscores: value or True}, and the
    tokens that are not arguments (a script name, stray values)."""
    tokens = shlex.split(args) if isinstance(args, str) else list(args)
    flags: dict[str, object] = {}
    stray = []
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--"):
            stray.append(token)
            i += 1
            continue
        name, _, inline = token[2:].partition("=")
        name = name.replace("-", "_")
        values = [inline] if inline else []
        while not inline and i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            values.append(tokens[i + 1])
            i += 1
        flags[name] = True if not values else (values[0] if len(values) == 1 else values)
        i += 1
    return flags, stray


def from_megatron(args: list[str] | str, *, name: str, gpu: str, gpus: int | None = None,
                  gpus_per_node: int = 8) -> Imported:
    """A scenario from Megatron-LM `pretrain_gpt.py` arguments on `gpus` GPUs of type `gpu`."""
    flags, stray = parse_megatron_args(args)
    out = Imported({"name": name, "schedule": "1f1b"})
    tree = out.scenario
    out.unmapped += [f"{token} (not an argument)" for token in stray if not token.endswith(".py")]
    switched: dict[str, str] = {}  # scenario path -> the switch that set it
    tokenizer: dict[str, str] = {}  # --tokenizer-model, --make-vocab-size-divisible-by
    fsdp: dict[str, object] = {}  # Megatron-FSDP's flags, read together
    recompute_how: dict[str, object] = {}  # --recompute-method and --recompute-num-layers, read together
    # --multi-latent-attention and its ranks; the MoE dispatcher's type and backend: each read together
    latent, dispatch = {}, {}
    fused_loss = False
    for flag, value in flags.items():
        option = "--" + flag.replace("_", "-")
        if flag in MLA_FLAGS or flag == "multi_latent_attention" or flag in DISPATCH_FLAGS:
            (dispatch if flag in DISPATCH_FLAGS else latent)[flag] = value
            continue
        if flag == "moe_layer_freq" and is_moe_pattern(value):
            every, first = read_moe_pattern(value)
            _set(tree, "model.moe.every", every)
            _set(tree, "model.moe.first_dense_layers", first)
            continue
        if flag == "cross_entropy_loss_fusion":  # the te stack's default loss; without it, see below
            if value is not True:
                raise ValueError(f"{option} is a switch and takes no value, got {value!r}")
            fused_loss = True
            continue
        if flag == "recompute_modules":  # Megatron's nargs='*': one name or several
            if value is True:
                raise ValueError(f"{option} needs at least one module name")
            _set(tree, "training.recompute_modules", value if isinstance(value, list) else [value])
            continue
        if flag == "pipeline_model_parallel_layout":
            if value is True or isinstance(value, list):
                raise ValueError(f"{option} needs one layout string, got {value!r}")
            _set(tree, "parallel.pipeline_layout", str(value))
            continue
        if flag in VALUE_FLAGS or flag == "num_layers_per_virtual_pipeline_stage":
            if value is True or isinstance(value, list):
                raise ValueError(f"{option} needs one value, got {value!r}")
        if flag in VALUE_FLAGS:
            _set(tree, VALUE_FLAGS[flag], number_of(value))
        elif flag in SWITCH_FLAGS:
            path, meaning = SWITCH_FLAGS[flag]
            if value is not True:
                raise ValueError(f"{option} is a switch and takes no value, got {value!r}")
            if path in switched and _get(tree, path) != meaning:
                raise ValueError(f"{switched[path]} and {option} contradict each other ({path})")
            _set(tree, path, meaning)
            switched[path] = option
        elif flag == "fp8_format":
            _set(tree, "training.precision", "fp8")
        elif flag == "num_layers_per_virtual_pipeline_stage":
            virtual = number_of(value)
            if not isinstance(virtual, int) or virtual < 1:
                raise ValueError(f"{option} {value}: expected a positive whole number of layers")
            out.scenario.setdefault("_virtual_layers", virtual)
        elif flag in ("tokenizer_model", "make_vocab_size_divisible_by"):
            if value is True or isinstance(value, list):
                raise ValueError(f"{option} needs one value, got {value!r}")
            tokenizer[flag] = value
        elif flag in megatron_fsdp.FLAGS:
            fsdp[flag] = value
        elif flag in ("recompute_method", "recompute_num_layers"):
            recompute_how[flag] = value
        elif flag not in IRRELEVANT:
            meant = _misspelled(flag)
            if meant:  # read as "not mapped", --tensor-model-paralel-size 8 imported as tp 1
                raise ValueError(f"{option}: not a Megatron-LM argument; did you mean --{meant.replace('_', '-')}?")
            out.unmapped.append(f"--{flag.replace('_', '-')}" + ("" if value is True else f" {value}"))
    _read_recompute_method(recompute_how, tree, out)
    mla, unmapped = read_latent_attention(latent)
    dispatcher, unpriced = read_dispatcher(dispatch)
    out.unmapped += unmapped + unpriced
    if "moe_token_dispatcher_type" not in dispatch and tree.get("model", {}).get("moe") \
            and tree.get("parallel", {}).get("ep", 1) > 1:  # a backend alone is read under flex only
        dispatcher = "allgather"
        out.assumed.append("training.moe_dispatcher allgather: no --moe-token-dispatcher-type given; Megatron-Core's "
                           "default (transformer_config.py), though most recipes name alltoall")
    if dispatcher is not None:
        _set(tree, "training.moe_dispatcher", dispatcher)
    if mla is not None:
        tree.setdefault("model", {})["mla"] = mla
    settings, assumed, unmapped = megatron_fsdp.read(fsdp)
    if megatron_fsdp.enabled(fsdp):  # it runs the distributed optimizer whatever: the strategy says what it shards
        tree.get("parallel", {}).pop("distributed_optimizer", None)
    for path, value in settings.items():
        _set(tree, path, value)
    out.assumed += assumed
    out.unmapped += unmapped
    if _get(tree, "training.overlap_grad_reduce") is None:  # an opt-in switch in Megatron-LM (2023 on)
        _set(tree, "training.overlap_grad_reduce", False)
    if not fused_loss:  # --cross-entropy-loss-fusion is opt-in too (megatron/training/arguments.py):
        # without it the loss is vocab_parallel_cross_entropy on fp32 logits, pass by pass
        _set(tree, "training.kernels.loss", "vocab_parallel")
    return _finish(out, gpu, gpus, gpus_per_node, vocab_from_gpt2="vocab_file" in flags, tokenizer=tokenizer)


def _read_recompute_method(how: dict, tree: dict, out: Imported) -> None:
    """--recompute-method block --recompute-num-layers N: the first N layers of each stage
    (model/recompute.py); uniform: every layer, N layers to a checkpoint (the same recomputation,
    priced with every layer's input kept)."""
    method, layers = how.get("recompute_method"), how.get("recompute_num_layers")
    for flag, value in how.items():
        if value is True or isinstance(value, list):
            raise ValueError(f"--{flag.replace('_', '-')} needs one value, got {value!r}")
    if method not in (None, "block", "uniform"):
        raise ValueError(f"--recompute-method {method!r}: Megatron-LM takes uniform or block")
    if layers is not None and (value := number_of(layers)) != int(value):
        raise ValueError(f"--recompute-num-layers {layers!r}: expected a whole number")
    full = _get(tree, "training.recompute") == "full"
    said = f"--recompute-method {method}" + (f" --recompute-num-layers {layers}" if layers is not None else "")
    if method is not None and not full:  # Megatron reads the method under full granularity alone
        out.assumed.append(f"{said}: without --recompute-granularity full it recomputes nothing more; ignored")
    elif method == "block" and layers is not None:
        if int(number_of(layers)) >= 1:
            _set(tree, "training.recompute_num_layers", int(number_of(layers)))
        else:  # block over no layer: nothing recomputed
            _set(tree, "training.recompute", "none")
            out.assumed.append(f"{said}: no layer recomputed (training.recompute none)")
    elif method is not None:
        out.assumed.append(f"{said}: every layer of a stage recomputed")


def _tokenizer_vocab(out: Imported, tokenizer: dict, pad: int) -> None:
    """model.vocab from --tokenizer-model where no vocabulary size was given: a tokenizer sim3d
    knows (TOKENIZER_VOCAB), padded to a multiple of `pad` as Megatron pads it
    (--make-vocab-size-divisible-by, 128 by default, x tp: megatron/training/tokenizer
    _vocab_size_with_padding)."""
    name = str(tokenizer.get("tokenizer_model") or "")
    if not name or _get(out.scenario, "model.vocab") is not None:
        return
    text = name.lower().replace("_", "-")
    known = next((v for k, v in TOKENIZER_VOCAB.items() if k in text), None)
    if known is None:
        out.unmapped.append(f"--tokenizer-model {name} (a tokenizer sim3d does not know: give --vocab-size)")
        return
    _set(out.scenario, "model.vocab", -(-known // pad) * pad)
    out.assumed.append(f"model.vocab {out.scenario['model']['vocab']}: --tokenizer-model {name} ({known:,} tokens) "
                       f"padded to a multiple of {pad}, as Megatron pads it")


def _finish(out: Imported, gpu: str, gpus: int | None, gpus_per_node: int, vocab_from_gpt2: bool,
            tokenizer: dict | None = None) -> Imported:
    tree = out.scenario
    parallel = tree.setdefault("parallel", {})
    tp, pp, cp = parallel.get("tp", 1), parallel.get("pp", 1), parallel.get("cp", 1)
    layers = _get(tree, "model.layers")
    virtual = tree.pop("_virtual_layers", None)
    if virtual and layers and pp > 1:  # Megatron counts the accounted embedding / loss as layers here
        accounted = bool(parallel.get("account_for_embedding_in_pipeline_split")) + bool(
            parallel.get("account_for_loss_in_pipeline_split"))
        if (layers + accounted) % (pp * virtual):  # Megatron asserts it
            raise ValueError(f"--num-layers-per-virtual-pipeline-stage {virtual}: {layers + accounted} layers do not "
                             f"split into pp={pp} stages of whole {virtual}-layer chunks")
        chunks = (layers + accounted) // (pp * virtual)
        if parallel.get("vpp", chunks) != chunks:
            raise ValueError(f"--num-layers-per-virtual-pipeline-stage {virtual} makes {chunks} chunks a rank, "
                             f"--num-virtual-stages-per-pipeline-rank says {parallel['vpp']}")
        parallel["vpp"] = chunks
    if isinstance(parallel.get("pipeline_layout"), str) and isinstance(pp, int) and pp >= 1:
        stages = len(layout_stages(parallel["pipeline_layout"]))  # Megatron takes vpp = stages / pp
        if stages % pp or parallel.get("vpp", stages // pp) != stages // pp:
            raise ValueError(f"--pipeline-model-parallel-layout: {stages} stages on pp={pp} ranks"
                             + (f" against vpp={parallel['vpp']}" if "vpp" in parallel else " (not a multiple)"))
        parallel["vpp"] = stages // pp
    if isinstance(parallel.get("vpp"), int) and parallel["vpp"] > 1:
        tree["schedule"] = megatron_schedule(parallel["vpp"])
    if not isinstance(tp, int) or tp < 1:
        raise ValueError(f"--tensor-model-parallel-size {tp}: expected a positive whole number")
    divisible = number_of((tokenizer or {}).get("make_vocab_size_divisible_by", 128))
    if not isinstance(divisible, int) or divisible < 1:
        raise ValueError(f"--make-vocab-size-divisible-by {divisible}: expected a positive whole number")
    _tokenizer_vocab(out, tokenizer or {}, tp * divisible)
    if _get(tree, "model.vocab") is None:
        tp_pad = divisible * tp
        vocab = -(-GPT2_VOCAB // tp_pad) * tp_pad
        _set(tree, "model.vocab", vocab)
        out.assumed.append(f"model.vocab {vocab}: GPT-2 BPE ({GPT2_VOCAB}) padded to a multiple of {divisible} x tp"
                           + ("" if vocab_from_gpt2 else " (no --vocab-size or --vocab-file given)"))
    if gpus is None:
        gpus = tp * pp * cp
        out.assumed.append(f"{gpus} GPUs (tp x pp x cp, data-parallel size 1): give --gpus for the real run")
    per_node = min(gpus_per_node, gpus)
    if gpus % per_node:
        raise ValueError(f"{gpus} GPUs do not fill nodes of {per_node}")
    tree["cluster"] = {"gpu": gpu, "nodes": gpus // per_node, "gpus_per_node": per_node}
    if _get(tree, "training.attention_backend") is None:
        out.assumed.append("training.attention_backend flash: Megatron-Core's default (--attention-backend auto); "
                           "Megatron of 2020-22 wrote attention scores to memory: add --attention-backend local")
    for path, default, source in (("training.precision", "fp32", "Megatron trains in fp32 without --bf16 / --fp16"),
                                  ("training.micro_batch", 1, "Megatron's default --micro-batch-size"),
                                  ("model.seq_len", None, None), ("training.global_batch", None, None)):
        if _get(tree, path) is None:
            if default is None:
                raise ValueError(f"the arguments give no {path.split('.')[-1].replace('_', ' ')} "
                                 f"(--{'seq-length' if 'seq' in path else 'global-batch-size'})")
            _set(tree, path, default)
            out.assumed.append(f"{path} {default}: {source}")
    out.scenario = {key: tree[key] for key in ("name", "schedule", "model", "parallel", "training", "cluster")
                    if key in tree}
    return out
