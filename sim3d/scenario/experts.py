"""`model.moe`: a mixture-of-experts model's experts and routing (Megatron-Core's names accepted
beside sim3d's), as the scenario states them; which layers are MoE is moe_layers.py's."""

from __future__ import annotations

from .bounds import Experts, Factor, Ffn, Layers
from .strict import Strict, alias


class MoE(Strict):
    experts: Experts = alias("experts", "num_experts")
    top_k: Experts = alias("top_k", "moe_router_topk", default=2)
    expert_ffn_hidden: Ffn | None = alias("expert_ffn_hidden", "moe_ffn_hidden_size", default=None)
    # the total ffn width of experts every token runs besides its routed ones (Megatron
    # --moe-shared-expert-intermediate-size; DeepSeek-V3, arXiv:2412.19437 sec. 2.1.2: 2048); None: none
    shared_expert_ffn: Ffn | None = alias("shared_expert_ffn", "moe_shared_expert_intermediate_size", default=None)
    every: Layers = 1  # an MoE layer every `every` layers (1 = all layers)
    # the first layers stay dense (DeepSeek-V3 config first_k_dense_replace: 3; model/ops.py moe_at)
    first_dense_layers: int = alias("first_dense_layers", "first_k_dense_replace", default=0, ge=0, le=1 << 20)
    capacity_factor: Factor | None = alias("capacity_factor", "moe_expert_capacity_factor", default=None)
    # group-limited routing (DeepSeek-V3, arXiv:2412.19437 sec. 2.1.2; Megatron --moe-router-num-groups,
    # --moe-router-group-topk): the experts in `router_groups` groups, each token's among `router_group_topk`
    router_groups: Experts | None = alias("router_groups", "moe_router_num_groups", default=None)
    router_group_topk: Experts | None = alias("router_group_topk", "moe_router_group_topk", default=None)
