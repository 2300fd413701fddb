"""Parameters one rank holds: per layer, embedding and head (with tensor and expert
parallelism), per pipeline stage, and for the whole model. The memory model and the cost
model's gradient buckets and sharded units count from here."""

from __future__ import annotations

from dataclasses import dataclass

from ..scenario.moe_layers import moe_at
from .ops import Dims, is_moe_layer, mtp_is_moe


@dataclass(frozen=True)
class Params:
    """Parameter counts held by ONE rank: `dense` are replicated over dp*cp, `expert` over
    the expert-data-parallel group tp*cp*dp/(etp*ep) (the distributed optimizer shards each
    over its group)."""

    dense: float = 0.0
    expert: float = 0.0

    def __add__(self, other: "Params") -> "Params":
        return Params(self.dense + other.dense, self.expert + other.expert)

    @property
    def total(self) -> float:
        return self.dense + self.expert


def _norm_params(d: Dims) -> int:
    return d.h if d.gated else 2 * d.h  # RMSNorm (weight) for LLaMA, LayerNorm (weight, bias) otherwise


def layer_params(d: Dims, moe_layer: bool) -> Params:
    """Parameters of one layer on one rank. GPT style (gelu) has biases and LayerNorm,
    LLaMA style (swiglu) neither. Column-parallel weights and biases are split by tp;
    row-parallel biases and norms are replicated (Shoeybi et al. 2019, section 3)."""
    h, t, bias = d.h, d.tp, d.gpt_style
    if d.mla is not None:
        attn = _latent_attention_params(d) + 2 * _norm_params(d)
    else:
        qkv_out = d.q_dim + 2 * d.kv_dim
        attn = (h * qkv_out + bias * qkv_out + d.q_dim * h) / t + bias * h + 2 * _norm_params(d)

    def mlp(ffn: int, t: int = t) -> float:
        if d.gated:
            return 3 * h * ffn / t
        return (2 * h * ffn + bias * ffn) / t + bias * h

    if moe_layer and d.experts:
        router = h * d.experts  # replicated on every rank
        # shared experts: a bias-free dense MLP over the TP ranks (ops._shared_expert)
        shared = (3 if d.gated else 2) * h * d.shared_ffn / t
        return Params(attn + router + shared, d.experts / d.ep * mlp(d.expert_ffn, d.etp))
    return Params(attn + mlp(d.ffn))


def _latent_attention_params(d: Dims) -> float:
    """Multi-head latent attention's weights on one rank (scenario/latent_attention.py): the
    down projections and the latents' norms on every rank, the up projections and the output
    projection split over tp."""
    q_lora, kv_lora, nope, rope, v = d.mla
    duplicated = d.h * (q_lora + kv_lora + rope) + q_lora + kv_lora
    queries = q_lora * d.heads * (nope + rope) if q_lora else d.h * d.heads * (nope + rope)
    split = queries + kv_lora * d.heads * (nope + v) + d.heads * v * d.h
    return duplicated + split / d.tp


def tied_embedding(d: Dims) -> bool:
    """Megatron GPT ties the LM head to the word embedding (share_embeddings_and_output_weights);
    LLaMA-style models untie them. With pp > 1 the last stage still keeps its own copy
    (synchronised through the embedding group), so tying only saves memory when the first
    and last stage share a rank."""
    return d.gpt_style


def embedding_params(d: Dims) -> float:
    return d.vocab * d.h / d.tp + (d.s * d.h if d.gpt_style else 0)  # vocab-parallel + learned positions


def head_params(d: Dims, with_embedding: bool) -> float:
    lm_head = 0 if (with_embedding and tied_embedding(d)) else d.vocab * d.h / d.tp
    return lm_head + _norm_params(d)


def mtp_params(d: Dims, moe_layer: bool, with_embedding: bool) -> Params:
    """One multi-token-prediction module on the rank that holds it (ops.mtp_dims_ops): its
    layer, eh_proj (2h x h, column-parallel) and its three norms, and a copy of the word
    embedding on a stage without it (Megatron-Core's GPTModel builds the embedding where
    pre_process or mtp_process holds; the output layer it shares only where post_process does)."""
    p = layer_params(d, moe_layer) + Params(2 * d.h * d.h / d.tp + 3 * _norm_params(d))
    return p if with_embedding else p + Params(embedding_params(d))


def layer_split(s) -> tuple:
    """(transformer layers of each global stage, MoE every, dense layers first, multi-token-
    prediction modules of each stage): what layer counts depend on (scenario/moe_layers.py
    moe_at)."""
    moe = s.model.moe
    mtp = s.stage_mtp if s.model.mtp_layers else ()
    return s.stage_layers, (moe.every if moe else 0), (moe.first_dense_layers if moe else 0), mtp


def split_mtp_is_moe(split: tuple) -> bool:
    """As ops.mtp_is_moe: the decoder's last layer's kind."""
    layers, every, first_dense, _ = split
    return bool(every) and moe_at(sum(layers) - 1, every, first_dense)


def layer_counts(split: tuple, stages: tuple[int, ...]) -> tuple[int, int]:
    """(dense, MoE) transformer layers of the given global stages (a multi-token-prediction
    module's layer not among them)."""
    layers, every, first_dense, _ = split
    dense = moe = 0
    for stage in stages:
        start = sum(layers[:stage])
        n_moe = sum(1 for i in range(start, start + layers[stage]) if moe_at(i, every, first_dense))
        dense += layers[stage] - n_moe
        moe += n_moe
    return dense, moe


def params_of(d: Dims, split: tuple, stages: tuple[int, ...]) -> Params:
    dense, moe = layer_counts(split, stages)
    one = {m: layer_params(d, m) for m in (False, True)} if moe else {False: layer_params(d, False)}
    p = Params(one[False].dense * dense, one[False].expert * dense)
    if moe:
        p = p + Params(one[True].dense * moe, one[True].expert * moe)
    if 0 in stages:
        p = p + Params(embedding_params(d))
    if len(split[0]) - 1 in stages:
        p = p + Params(head_params(d, 0 in stages))
    for stage in stages:
        for _ in range(split[3][stage] if split[3] else 0):
            p = p + mtp_params(d, split_mtp_is_moe(split), stage == 0)
    return p


def stage_params(s, stages: tuple[int, ...]) -> Params:
    """Parameters one rank holds for the given global stages (its chunks)."""
    return params_of(Dims.of(s), layer_split(s), stages)


def model_params(s) -> float:
    """Total parameters of the model (unsharded, tied embedding counted once)."""
    d = Dims.of(s).unsharded()
    total = sum(layer_params(d, is_moe_layer(s, i)).total for i in range(s.model.layers))
    # a module's shared embedding counted once, with the model's
    total += s.model.mtp_layers * mtp_params(d, mtp_is_moe(s), True).total
    return total + embedding_params(d) + head_params(d, True)


def block_params(s, d: Dims, block: str) -> Params:
    """Parameters of one block a cost model prices: the embedding, a dense or MoE layer, a
    multi-token-prediction module (its shared embedding counted once, on the first stage) or
    the head."""
    return {"embedding": lambda: Params(dense=embedding_params(d)),
            "layer": lambda: layer_params(d, False), "moe_layer": lambda: layer_params(d, True),
            "mtp": lambda: mtp_params(d, mtp_is_moe(s), True),
            "head": lambda: Params(dense=head_params(d, s.num_stages == 1))}[block]()
