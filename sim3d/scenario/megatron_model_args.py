"""Megatron-LM arguments that describe the model's structure beyond its sizes, read for
`importers.from_megatron` (which sets what these return): multi-latent attention, the MoE
layer pattern and the MoE token dispatcher."""

from __future__ import annotations

import re

# Megatron-Core's multi-latent-attention arguments (arguments.py _add_mla_args) -> model.mla
MLA_FLAGS = {"q_lora_rank": "q_lora_rank", "kv_lora_rank": "kv_lora_rank", "qk_head_dim": "qk_nope_head_dim",
             "qk_pos_emb_head_dim": "qk_rope_head_dim", "v_head_dim": "v_head_dim"}


def read_latent_attention(given: dict) -> tuple[dict | None, list[str]]:
    """--multi-latent-attention with its ranks -> (model.mla, notes of what is not mapped): the
    ranks without the switch build no latent attention in Megatron."""
    ranks = {flag: value for flag, value in given.items() if flag in MLA_FLAGS}
    if given.get("multi_latent_attention") is None:
        return None, [f"--{flag.replace('_', '-')} {value} (without --multi-latent-attention)"
                      for flag, value in ranks.items()]
    if given["multi_latent_attention"] is not True:
        raise ValueError("--multi-latent-attention is a switch and takes no value")
    mla = {}
    for flag, value in ranks.items():
        if value is True or isinstance(value, list):
            raise ValueError(f"--{flag.replace('_', '-')} needs one value, got {value!r}")
        if str(value).lower() == "none":
            continue
        if not str(value).isdigit():
            raise ValueError(f"--{flag.replace('_', '-')} {value!r}: expected a whole number")
        mla[MLA_FLAGS[flag]] = int(value)
    return mla, []


def read_moe_pattern(text: str) -> tuple[int, int]:
    """--moe-layer-freq as the Python list Megatron evaluates (moe_freq_type): a 0/1 per layer,
    written out or as `([0]*k+[1]*n)` -> (an MoE layer every N, dense first layers)."""
    compact = text.replace(" ", "")
    if (m := re.fullmatch(r"\(?\[0\]\*(\d+)\+\[1\]\*(\d+)\)?", compact)) is not None:
        pattern = [0] * int(m[1]) + [1] * int(m[2])
    elif re.fullmatch(r"\[[01](,[01])*\]", compact):
        pattern = [int(c) for c in compact[1:-1].split(",")]
    else:
        raise ValueError(f"--moe-layer-freq {text!r}: sim3d reads a number, `[0,0,1,...]` or `([0]*k+[1]*n)`")
    first = pattern.index(1) if 1 in pattern else len(pattern)
    moe = [i for i, v in enumerate(pattern) if v]
    every = moe[1] - moe[0] if len(moe) > 1 else 1
    if pattern != [1 if i >= first and (i - first) % every == 0 else 0 for i in range(len(pattern))] or first % every:
        raise ValueError(f"--moe-layer-freq {text!r}: sim3d expresses dense first layers then an MoE layer every N "
                         "(model.moe.first_dense_layers, model.moe.every), not this pattern")
    return every, first


def is_moe_pattern(value) -> bool:
    """A --moe-layer-freq value written as a list rather than a number."""
    return isinstance(value, str) and not value.strip().isdigit() and value.lstrip("( ").startswith("[")


DISPATCH_FLAGS = ("moe_token_dispatcher_type", "moe_flex_dispatcher_backend", "moe_enable_deepep")


def read_dispatcher(given: dict) -> tuple[str | None, list[str]]:
    """--moe-token-dispatcher-type with its flex backend -> (training.moe_dispatcher or None for
    the default, notes of what is not priced). Megatron-Core reads the backend under `flex` only
    and defaults it to deepep (transformer_config.py: moe_flex_dispatcher_backend); the older
    --moe-enable-deepep asserts `flex`."""
    kind, backend = given.get("moe_token_dispatcher_type"), given.get("moe_flex_dispatcher_backend")
    if given.get("moe_enable_deepep") is not None:
        if kind != "flex":
            raise ValueError("--moe-enable-deepep needs --moe-token-dispatcher-type flex (Megatron-Core asserts it)")
        backend = backend or "deepep"
    if kind == "flex":
        if (backend or "deepep") == "deepep":
            return "deepep", []
        return None, [f"--moe-flex-dispatcher-backend {backend} (priced as NCCL's all-to-all)"]
    if kind in (None, "alltoall", "allgather"):
        return kind, []
    return None, [f"--moe-token-dispatcher-type {kind} (priced as NCCL's all-to-all)"]
