"""One row of a published-runs CSV as a scenario: the layout the row states, the cluster its
GPU comes in, and the software of its era for what the row leaves unsaid.

Defaults for what the sources leave unknown are Megatron-LM's documented defaults, applied
to every row alike (never tuned per row): vocabulary 51200 (GPT-2 BPE padded), bf16 unless
the notes say fp16 or fp8 (on A100 and H100 fp16 has the same peak), the 1F1B schedule, or
interleaved 1F1B when the row gives a virtual-pipeline degree, the servers its GPU ships in
(Selene: DGX A100, 8x HDR 200 Gb/s; DGX H100/H200/B200: 8x ConnectX-7 400 Gb/s; Jean Zay for
BLOOM: 4x Omni-Path 100 Gb/s per node; GB200: NVL72 racks).

Each row family (the id's prefix before the first `_`) runs the software of its era, the same
for every row of the family (`ERA_RULES` in era_rules.py, validation/README.md). A family sim3d has no rule
for gets its era from the row itself (`_inferred_era`).
"""

from __future__ import annotations

import math
import re

from ..cluster.gpus import PRESETS, preset_named_in
from ..scenario.load import scenario_from_dict
from ..scenario.megatron_model_args import MLA_FLAGS, is_moe_pattern, read_moe_pattern
from ..errors import ScenarioError
from .era_rules import ERA_RULES, _inferred_era
from .row_notes import _recompute_modules, _text, _truth, note_settings, precision_of
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


def family_of(row_id: str) -> str:
    """The row family: the id's prefix before the first underscore (kor22, bloom176b, dgxc2411)."""
    return str(row_id).split("_", 1)[0]


# ---- one rule per question, each the same for every row it applies to --------------------


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
                     "precision": precision_of(settings, preset_named_in(_text(row.get("gpu"))))},
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
