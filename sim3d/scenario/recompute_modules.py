"""`training.recompute_modules`: the parts of a layer that selective recomputation runs again,
by Megatron-Core's names (--recompute-modules; megatron/core/transformer/transformer_config.py,
`recompute_modules`, default ["core_attn"]). Two kinds (model/recompute.py prices both):

* checkpointed whole, keeping only their input: `core_attn` (the attention core, Korthikanti
  et al. 2022 section 5), `mlp` (a dense layer's MLP), `moe` (an MoE layer's MLP: router,
  dispatch, experts, combine), `shared_experts` (an MoE layer's shared experts);
* run again for their output, which is not kept (Megatron-Core's CheckpointWithoutOutput):
  `layernorm` (the input and pre-MLP norms), `moe_act` (the experts' activation function),
  `mla_up_proj` (multi-head latent attention's up projections and rotary embedding).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BeforeValidator

RecomputeModule = Literal["core_attn", "mlp", "moe", "shared_experts", "layernorm", "moe_act", "mla_up_proj"]
# a YAML list is read as the tuple a frozen scenario holds, one name (Megatron's
# --recompute-modules with one value) as a tuple of one
RecomputeModules = Annotated[tuple[RecomputeModule, ...], BeforeValidator(
    lambda value: tuple(value) if isinstance(value, list) else (value,) if isinstance(value, str) else value)]
DEFAULT_MODULES = ("core_attn",)
