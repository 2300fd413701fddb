"""Scenarios from a NeMo training YAML (the `trainer:` / `model:` layout of NeMo's
megatron_gpt_config.yaml and NeMo-Framework-Launcher's training configs): its model keys are
read as the Megatron-LM arguments they name (importers.py, from_megatron), with NeMo's own
spellings, trainer.precision and the tokenizer's vocabulary on top."""

from __future__ import annotations

from .importers import (IRRELEVANT, SWITCH_FLAGS, TOKENIZER_VOCAB, VALUE_FLAGS, Imported, _set, from_megatron,
                        number_of)
from .megatron_model_args import DISPATCH_FLAGS


def from_nemo(config: dict, *, name: str, gpu: str, gpus: int | None = None) -> Imported:
    """A scenario from a NeMo training config (`trainer:` and `model:` sections)."""
    if not isinstance(config, dict) or "model" not in config:
        raise ValueError("a NeMo config has a `model:` section (and usually `trainer:`); this one has neither")
    model, trainer = config["model"], config.get("trainer") or {}
    for section, body in (("model", model), ("trainer", trainer)):
        if not isinstance(body, dict):
            raise ValueError(f"{section}: expected a section (a mapping), got {type(body).__name__}")
    _refuse_interpolation(model, trainer)
    given = {key: model[key] for key in ("seq_length", "encoder_seq_length") if model.get(key) is not None}
    if len(set(map(str, given.values()))) > 1:
        raise ValueError(f"model.seq_length: {given['seq_length']!r} and model.encoder_seq_length: "
                         f"{given['encoder_seq_length']!r} disagree; both name the sequence length: give one")
    for section, body, key in (("trainer", trainer, "num_nodes"), ("trainer", trainer, "devices"),
                               ("model", model, "virtual_pipeline_model_parallel_size")):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"{section}.{key}: expected a whole number >= 1, got {value!r}")
    args: list[str] = []
    unmapped = []
    for key, value in _flatten(model):
        flag = NEMO_NAMES.get(key, key)
        if key == "virtual_pipeline_model_parallel_size" or (key == "use_flash_attention" and value is True):
            continue
        if key == "activation":
            value = str(value).replace("fast-", "")
            if value in ("swiglu", "squared-relu"):
                args.append(f"--{'swiglu' if value == 'swiglu' else 'squared-relu'}")
            elif value != "gelu":
                unmapped.append(f"model.activation: {value}")
            continue
        if key == "optim" or key.startswith("optim."):
            if key == "optim.name" and "distributed" in str(value):
                args.append("--use-distributed-optimizer")
                optim = model.get("optim") if isinstance(model.get("optim"), dict) else {}
                if value == "distributed_fused_adam" and "overlap_grad_sync" not in optim:
                    # Apex's DistributedFusedAdam overlaps unless told not to (overlap_grad_sync=True)
                    args.append("--overlap-grad-reduce")
            elif key in ("optim.overlap_grad_sync", "optim.overlap_param_sync") and value is True:
                args.append("--overlap-grad-reduce" if key.endswith("grad_sync") else "--overlap-param-gather")
            continue
        if key == "gradient_accumulation_fusion" and value is False:  # true is Megatron's default
            args.append("--no-gradient-accumulation-fusion")
            continue
        if key in ("fp8", "fp8_hybrid", "fp8_e4m3"):
            if value is True:
                args.append("--fp8-format=hybrid")
            continue
        if key == "recompute_modules" and isinstance(value, list) and value:  # Megatron-Core's list of names
            args += ["--recompute-modules", *map(str, value)]
            continue
        if value is True:
            args.append(f"--{flag}")
        elif value is False or value is None:
            continue
        elif isinstance(value, (int, float, str)) and (flag in VALUE_FLAGS or flag in DISPATCH_FLAGS or flag in (
                "recompute_granularity", "recompute_method", "recompute_num_layers")):
            args += [f"--{flag}", str(value)]
        elif flag not in IRRELEVANT:  # a switch with a value that is not true / false lands here too
            unmapped.append(f"model.{key}: {value}")
    if "cross_entropy_loss_fusion" not in model:  # NeMo's GPT configs fuse the loss unless told not to
        args.append("--cross-entropy-loss-fusion")
    precision_flag = _nemo_precision(trainer)
    args += [precision_flag] if precision_flag else []
    nodes, devices = trainer.get("num_nodes"), trainer.get("devices")
    if gpus is None and isinstance(nodes, int) and isinstance(devices, int):
        gpus = nodes * devices
    out = from_megatron(args, name=name, gpu=gpu, gpus=gpus, gpus_per_node=devices if isinstance(devices, int) else 8)
    if "precision" in trainer and precision_flag is None:  # 32-bit, as the config says: not assumed
        out.assumed = [a for a in out.assumed if not a.startswith("training.precision")]
    if "precision" not in trainer:
        out.assumed.append("training.precision bf16: trainer.precision not given; NeMo's recipes train in "
                           "bf16 (Lightning's own default is 32-bit)")
    tokenizer = model.get("tokenizer") if isinstance(model.get("tokenizer"), dict) else {}
    name_text = " ".join(str(tokenizer[k]) for k in ("type", "model") if tokenizer.get(k)).lower().replace("_", "-")
    known = next((v for k, v in TOKENIZER_VOCAB.items() if k in name_text), None)
    if known and any(a.startswith("model.vocab") for a in out.assumed):  # no vocabulary size was given
        tp = out.scenario["parallel"].get("tp", 1)
        pad = number_of(model.get("make_vocab_size_divisible_by", 128))
        if not isinstance(pad, int) or pad < 1 or not isinstance(tp, int) or tp < 1:
            raise ValueError(f"model.make_vocab_size_divisible_by {pad} x tensor_model_parallel_size {tp}: "
                             "expected positive whole numbers")
        pad *= tp
        _set(out.scenario, "model.vocab", -(-known // pad) * pad)
        out.assumed = [a for a in out.assumed if not a.startswith("model.vocab")]
        out.assumed.append(f"model.vocab {out.scenario['model']['vocab']}: the tokenizer {name_text!r} "
                           f"({known} tokens) padded to a multiple of {pad}")
    vpp = model.get("virtual_pipeline_model_parallel_size")
    if vpp:
        _set(out.scenario, "parallel.vpp", int(vpp))
        out.scenario["schedule"] = "interleaved-1f1b"
    out.unmapped = unmapped + out.unmapped
    return out


# NeMo's names of Megatron-LM arguments.
NEMO_NAMES = {"encoder_seq_length": "seq_length", "activations_checkpoint_granularity": "recompute_granularity",
              "activations_checkpoint_method": "recompute_method",
              "activations_checkpoint_num_layers": "recompute_num_layers", "ub_tp_comm_overlap": "tp_comm_overlap",
              "num_moe_experts": "num_experts"}  # Megatron-Core's TransformerConfig name of --num-experts
# Model keys from_nemo reads besides the Megatron arguments.
NEMO_READS = {"activation", "recompute_method", "recompute_num_layers", "virtual_pipeline_model_parallel_size",
              "make_vocab_size_divisible_by",
              "fp8", "fp8_hybrid", "fp8_e4m3"}


# Lightning's trainer.precision (lightning/fabric/connector.py, _PRECISION_INPUT): 16-bit and
# bf16 mixed precision, or 32-bit; NeMo's configs also write bf16 / 16 / 32 as numbers or text.
NEMO_PRECISION = {"16": "--fp16", "16-mixed": "--fp16", "fp16": "--fp16", "16-true": "--fp16",
                  "bf16": "--bf16", "bf16-mixed": "--bf16", "bf16-true": "--bf16",
                  "32": None, "32-true": None, "fp32": None}


def _nemo_precision(trainer: dict) -> str | None:
    """Megatron's precision flag for `trainer.precision` (None: fp32); bf16 where it is missing."""
    value = str(trainer.get("precision", "bf16")).lower()
    if value not in NEMO_PRECISION:
        raise ValueError(f"trainer.precision {trainer['precision']!r}: sim3d reads "
                         f"{', '.join(sorted(NEMO_PRECISION))}")
    return NEMO_PRECISION[value]


def _refuse_interpolation(model: dict, trainer: dict) -> None:
    """NeMo configs are OmegaConf documents, where `${model.encoder_seq_length}` refers to
    another value; read as plain YAML it is text, which no number field takes. Refused where
    the import reads it (a key it ignores may hold anything)."""
    tokenizer = model.get("tokenizer") if isinstance(model.get("tokenizer"), dict) else {}
    spots = [(f"trainer.{key}", trainer.get(key)) for key in ("num_nodes", "devices", "precision")]
    spots += [(f"model.tokenizer.{key}", tokenizer.get(key)) for key in ("type", "model")]
    spots += [(f"model.{key}", value) for key, value in _flatten(model)
              if NEMO_NAMES.get(key, key) in VALUE_FLAGS or NEMO_NAMES.get(key, key) in SWITCH_FLAGS
              or key in NEMO_READS or key.startswith("optim.")]
    for where, value in spots:
        if isinstance(value, str) and "${" in value:
            raise ValueError(f"{where}: {value!r}: interpolation is not supported: resolve it first "
                             "(OmegaConf.to_yaml(cfg, resolve=True)) or write the value")


def _flatten(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        if isinstance(value, dict):
            if key == "optim":
                for sub, inner in value.items():
                    if not isinstance(inner, dict):
                        yield f"optim.{sub}", inner
            continue  # nested sections (data, tokenizer, nsys_profile ...) do not time a step
        yield prefix + key, value
