"""Which transformer layers are MoE layers: the one rule the ops, the parameter counts, the
memory model and the scenario checks read."""

from __future__ import annotations


def moe_at(layer: int, every: int, first_dense: int) -> bool:
    """Megatron `moe_layer_freq=N`: layer i (0-based) is MoE when i % N == 0
    (megatron/core/transformer/moe: `[1 if i % freq == 0 else 0 for i in range(num_layers)]`),
    after the first `first_dense` layers, which stay dense (DeepSeek-V3's first_k_dense_replace,
    Megatron's list form `[0]*k + [1]*(L-k)`); every = 0: no MoE layer."""
    return every > 0 and layer >= first_dense and layer % every == 0
