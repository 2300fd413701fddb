"""What one rank computes for one micro-batch: the ops of a transformer layer, the embedding
and the LM head, each with its FLOPs, HBM bytes, saved activations and TP/CP/EP collective.

Conventions (shared by flops.py, memory.py and the cost model):

* FLOPs are matmul FLOPs only, 2 per multiply-add, as in Narayanan et al. 2021
  (arXiv:2104.04473, section 5.1) and Korthikanti et al. 2022 (arXiv:2205.05198, section 6):
  norms, softmax, dropout, activation functions and residual adds have `fwd_flops = 0` and
  are costed by the bytes they move (`fwd_bytes`). This is what makes the closed forms of
  those papers hold exactly (tests/test_model_flops.py).
* Backward of a GEMM with weights = one GEMM for the input gradient + one for the weight
  gradient, each equal to the forward; the attention score GEMMs (QK^T, AV) have no weights,
  so their whole 2x backward is input gradient. Every op thus totals 3x its forward.
* Core attention is counted without causal halving (4*b*s^2*h forward), following the
  papers above, for both backends: `flash` computes the same model FLOPs as `unfused`. How
  much of that a kernel actually executes (FlashAttention skips fully masked tiles, the
  unfused path does not) is the cost model's business (costs/compute.py).
* `act_bytes` is what the op saves for its backward, broken down term by term as in
  Korthikanti et al. section 4.1 (16-bit activations, 1-byte dropout masks); summing it over
  a layer gives their equations (memory.py and tests/test_memory.py rely on that).
* Collectives sit at an op's *output boundary*: `comm` runs after the op's forward,
  `bwd_comm` runs at the same boundary in the backward pass, i.e. before the op's backward
  (Megatron's f/g conjugate operators, Shoeybi et al. 2019 section 3; for sequence
  parallelism all-gather <-> reduce-scatter, Korthikanti section 4.2.2).
  `comm_bytes` is the size of the buffer the collective works on (the full, gathered or
  unreduced tensor, NCCL's count x type size); the cost model applies the algorithm factors
  such as (n-1)/n. For the CP ring it is what each rank sends over all cp-1 steps.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..scenario.moe_layers import moe_at
from ..scenario.recompute_modules import DEFAULT_MODULES
from ..scenario.sharding import ShardingPlan
from .expert_dispatch import expert_collectives
from .op import Op
from .loss_kernels import loss_kernel_bytes
from .op_parts import (LOGIT_BYTES, LSE_BYTES, MASK_BYTES, _activation, _cp_ring, _elementwise, _gemm,
                       _linear_input_bytes, _norm, _quantized_copy_bytes, _residual, _tp_boundary)

# Bytes per stored activation element: Korthikanti section 4.1 assumes 16-bit activations.
# fp8 training (Transformer Engine) keeps 16-bit activations between ops and casts the
# operands of its linear layers to 8 bits; what a TE linear saves for its backward is that
# FP8 copy of its input (`_linear_input_bytes`).
ACT_BYTES = {"bf16": 2, "fp16": 2, "fp8": 2, "fp32": 4}
@dataclass(frozen=True)
class Dims:
    """Sizes the op formulas need. `unsharded()` gives the same model with tp=cp=ep=1."""

    b: int  # micro-batch
    s: int  # full sequence length
    h: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    activation: str  # gelu (GPT: biases, LayerNorm) | swiglu (LLaMA) | squared-relu (Nemotron-4)
    precision: str
    tp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1  # expert tensor parallelism: 1 or tp (scenario_checks)
    sp: bool = False
    experts: int = 0
    top_k: int = 1
    expert_ffn: int = 0
    shared_ffn: int = 0  # the shared experts' total ffn width (0: none)
    capacity: float = 1.0
    dispatcher: str = "alltoall"  # training.moe_dispatcher (deepep: alltoall's bytes, costs/moe_dispatch.py)
    flash: bool = False  # fused attention (FlashAttention / cuDNN / TE) instead of materialised scores
    hidden_dropout: bool = True  # dropout after attention, MLP and embedding (keeps 1-byte masks)
    attention_dropout: bool = True  # dropout on the attention probabilities (unfused: an s^2 mask)
    stack: str = "te"  # training.kernels.stack: te | compiled | eager (model/kernel_stack.py)
    norm: str = "fused"  # training.kernels.norm: fused | composite (an eager RMSNorm's chain of ops)
    mask: str = "causal"  # training.kernels.mask: causal | materialized (a 4-D mask tensor handed to SDPA)
    fp8_recipe: str = "te"  # training.kernels.fp8 as it applies (model/fp8_recipes.py)
    loss: str = "fused"  # training.kernels.loss as it applies: fused | vocab_parallel | torch
    fp8_weight_shards: int = 0  # FSDP shards a weight is cast on before an FP8 all-gather (0: none)
    # multi-head latent attention (model.mla): (q_lora_rank or 0, kv_lora_rank, qk_nope_head_dim,
    # qk_rope_head_dim, v_head_dim); None: standard attention
    mla: tuple[int, int, int, int, int] | None = None
    # what selective recomputation runs again (training.recompute_modules; model/recompute.py)
    recompute_modules: tuple[str, ...] = ("core_attn",)

    @classmethod
    def of(cls, s, capacity: float | None = None) -> "Dims":
        m, moe, tr = s.model, s.model.moe, s.training
        cf = capacity if capacity is not None else (moe.capacity_factor or 1.0) if moe else 1.0
        return cls(b=tr.micro_batch, s=m.seq_len, h=m.hidden, heads=m.heads,
                   kv_heads=m.num_kv_heads, head_dim=m.head_dim, ffn=m.ffn, vocab=m.vocab,
                   activation=m.activation, precision=tr.precision,
                   tp=s.tp, cp=s.cp, ep=s.ep, etp=s.etp, sp=s.parallel.sequence_parallel and s.tp > 1,
                   experts=moe.experts if moe else 0, top_k=moe.top_k if moe else 1,
                   expert_ffn=(moe.expert_ffn_hidden or m.ffn) if moe else 0,
                   shared_ffn=(moe.shared_expert_ffn or 0) if moe else 0, capacity=cf, dispatcher=tr.moe_dispatcher,
                   flash=tr.attention_backend == "flash", hidden_dropout=m.hidden_dropout > 0,
                   attention_dropout=m.attention_dropout > 0, stack=tr.kernels.stack, norm=tr.kernels.norm_kernels,
                   mask=tr.kernels.mask, fp8_recipe=tr.kernels.fp8_recipe, loss=tr.kernels.loss_kernels,
                   fp8_weight_shards=ShardingPlan.of(s).fp8_weight_shards,
                   recompute_modules=tuple(tr.recompute_modules or DEFAULT_MODULES),
                   mla=None if m.mla is None else (m.mla.q_lora_rank or 0, m.mla.kv_lora_rank, m.mla.qk_nope_head_dim,
                                                   m.mla.qk_rope_head_dim, m.mla.v_head_dim))

    def unsharded(self) -> "Dims":
        return replace(self, tp=1, cp=1, ep=1, etp=1, sp=False)

    @property
    def sl(self) -> int:
        """Local sequence length: context parallelism splits the sequence (Megatron CP)."""
        return self.s // self.cp

    @property
    def ab(self) -> int:
        return ACT_BYTES[self.precision]

    @property
    def gpt_style(self) -> bool:
        """GPT-2/3 block: biases, LayerNorm, learned positions, tied embedding."""
        return self.activation == "gelu"

    @property
    def gated(self) -> bool:
        return self.activation == "swiglu"

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def kv_widths(self) -> tuple[int, int]:
        """(key, value) width per token over all heads: the grouped heads', or under latent
        attention every head's key (nope and rotary parts) and value."""
        if self.mla is None:
            return self.kv_dim, self.kv_dim
        _, _, nope, rope, v = self.mla
        return self.heads * (nope + rope), self.heads * v


def _attention(d: Dims) -> list[Op]:
    if d.mla is not None:
        from .latent_ops import latent_attention  # its own module: it builds on this one's helpers
        return latent_attention(d)
    b, sl, h, t, ab = d.b, d.sl, d.h, d.tp, d.ab
    rep = b * sl * h / (t if d.sp else 1)  # elements of a replicated (or SP-sharded) activation
    q_dim, kv_dim = d.q_dim / t, d.kv_dim / t  # local query / key-value widths
    ops = [
        # LayerNorm keeps its input (2sbh); replicated across TP unless SP shards it.
        _elementwise("input_norm", d, rep, act=ab * rep, kernels=_norm(d), **_tp_boundary(d, True)),
        # QKV keeps its input: 2sbh without SP; with SP the sharded input (re-gathered in
        # backward), Korthikanti section 4.2.2. Its outputs Q, K, V are kept too (for QK^T and
        # AV backward): they are booked here because selective recomputation keeps them.
        _gemm("qkv", d, b * sl, h, q_dim + 2 * kv_dim, act=_linear_input_bytes(d) * rep + ab * b * sl * (q_dim + 2 * kv_dim),
              **(_cp_ring(d) if d.cp > 1 else {})),
    ]
    if not d.gpt_style:
        # rotary position embedding on Q and K (LLaMA, Nemotron; Su et al. 2021,
        # arXiv:2104.09864): one memory-bound pass each way, nothing kept for backward
        ops.append(_elementwise("rope", d, b * sl * (q_dim + kv_dim), kernels=("rope",)))
    ops += _flash_core(d) if d.flash else _unfused_core(d)
    ops += [
        # the attention output: kept 16-bit for the fused attention's backward, and under FP8
        # once more as the projection's quantized input
        _gemm("out_proj", d, b * sl, q_dim, h, act=(ab + _quantized_copy_bytes(d)) * b * sl * q_dim,
              **_tp_boundary(d, False)),
        _residual("attn_residual", d, rep),
    ]
    return ops


def _unfused_core(d: Dims) -> list[Op]:
    """Megatron 2020-22 core attention: the s_q x s_k scores are written to HBM, softmax
    (and dropout) run over them, and the backward reads what the forward kept."""
    b, sl, ab = d.b, d.sl, d.ab
    q_dim, kv_dim, heads = d.q_dim / d.tp, d.kv_dim / d.tp, d.heads / d.tp
    scores = heads * b * sl * d.s  # local queries x all keys (CP: the ring brings the rest)
    ops = [
        # QK^T: 2*b*s_q*s_k*head_dim per head.
        Op("attn_qk", 2.0 * scores * d.head_dim, 4.0 * scores * d.head_dim, 0.0,
           ab * (b * sl * (q_dim + kv_dim) + scores), 0.0, recompute_selective=True,
           gemm=(round(heads * b * sl), d.s, d.head_dim)),  # batched over heads, flattened
        replace(_elementwise("attn_softmax", d, scores, act=ab * scores, selective=True, kernels=("softmax",)),
                kernel_bytes=_score_softmax_bytes(d, scores)),  # keeps its output
    ]
    if d.attention_dropout:
        # torch's fused dropout (aten/src/ATen/native/cuda/Dropout.cu): forward reads the
        # probabilities and writes them dropped with a 1-byte mask; backward reads the gradient
        # and the mask and writes the input gradient
        dropout = (ab + ab + MASK_BYTES) * scores
        ops.append(replace(_elementwise("attn_dropout", d, scores, act=MASK_BYTES * scores, selective=True,
                                        kernels=("dropout",)), kernel_bytes=((dropout,), (dropout,))))  # mask
    # AV keeps the dropped-out probabilities (without dropout: the softmax output, already
    # kept above); V is booked on qkv.
    kept = ab * scores if d.attention_dropout else 0.0
    ops.append(Op("attn_av", 2.0 * scores * d.head_dim, 4.0 * scores * d.head_dim, 0.0,
                  ab * (scores + b * sl * (kv_dim + q_dim)), kept, recompute_selective=True,
                  gemm=(round(heads * b * sl), d.head_dim, d.s)))
    return ops


# Megatron's causal softmax kernel (megatron/fused_kernels/scaled_upper_triang_masked_softmax.h
# @de7dc40) runs for 16-bit scores of 16 < s <= 2048 (megatron/model/fused_softmax.py @de7dc40),
# <= 4096 from 2022 (@55ba1f7): row i reads only its first i + 1 scores, forward and backward,
# and writes the whole row (zeros above the diagonal)
CAUSAL_SOFTMAX_MAX_SEQ = 4096


def _score_softmax_bytes(d: Dims, scores: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(forward, backward) bytes of the softmax over `scores` elements: Megatron's causal
    kernel where it runs (the `te` stack is Megatron's), else a full read and write forward and
    two reads and a write backward."""
    ab = d.ab
    if d.stack == "te" and ab == 2 and d.cp == 1 and 16 < d.s <= CAUSAL_SOFTMAX_MAX_SEQ:
        read = ab * (d.s + 1) / (2 * d.s)  # per element: the lower triangle's share of each row
        return ((read + ab) * scores,), ((2 * read + ab) * scores,)
    return (2 * ab * scores,), (3 * ab * scores,)


def _flash_core(d: Dims) -> list[Op]:
    """Fused attention (FlashAttention-2/3, cuDNN, TE DotProductAttention; Dao 2023,
    arXiv:2307.08691 section 3): the same model FLOPs as the unfused path (4*b*s_q*s_k*d
    forward, twice that backward), but scores live only in on-chip memory: HBM traffic is
    Q, K, V, O and one fp32 log-sum-exp per query and head, nothing of size s^2 is kept,
    dropout is fused (regenerated from the RNG state, no mask), and the backward recomputes
    the scores (2.5x the forward's matmul work; FA2 benchmarks/benchmark_flash_attention.py).

    With a materialized mask (`training.kernels.mask`, scenario/kernels.py) the kernel runs
    without its causal flag, so it visits every key block (costs/attention.py), reads the
    mask, broadcast over the heads, as an additive 16-bit bias, and is handed K and V repeated
    to every query head (`_repeat_kv`). The mask itself is built once per forward of the model
    (b x s^2 bytes, then cast to the bias), which is left out."""
    b, sl, ab = d.b, d.sl, d.ab
    q_dim, kv_dim, heads = d.q_dim / d.tp, d.kv_dim / d.tp, d.heads / d.tp
    scores = heads * b * sl * d.s
    lse = LSE_BYTES * heads * b * sl
    materialized = d.mask == "materialized"
    kv_width = q_dim if materialized else kv_dim
    io = ab * b * sl * (2 * q_dim + 2 * kv_width) + lse  # read Q, K, V; write O and the LSE
    if materialized:
        io += ab * b * sl * d.s  # the bias
    core = Op("core_attention", 4.0 * scores * d.head_dim, 8.0 * scores * d.head_dim, 0.0, io, lse,
              recompute_selective=True, attention=(round(b * heads), sl, d.s, d.head_dim), causal=not materialized)
    return ([_repeat_kv(d)] if materialized and d.kv_heads < d.heads else []) + [core]


def _repeat_kv(d: Dims) -> Op:
    """Hugging Face transformers' `repeat_kv` (integrations/sdpa_attention.py), run when a mask
    is handed to SDPA: K and V expanded from the key-value heads to every query head and made
    contiguous, one copy each (read the grouped tensor, write the repeated one); the backward
    sums each group's gradients back (the same bytes). SDPA keeps the repeated K and V for its
    backward in place of the grouped ones."""
    grouped, repeated = d.b * d.sl * d.kv_dim / d.tp, d.b * d.sl * d.q_dim / d.tp
    copy = d.ab * (grouped + repeated)
    return Op("repeat_kv", fwd_bytes=2 * copy, act_bytes=2 * d.ab * (repeated - grouped), recompute_selective=True,
              kernels=("repeat_kv",), numel=2 * repeated, kernel_bytes=((copy, copy), (copy, copy)))


def _dense_mlp(d: Dims) -> list[Op]:
    b, sl, h, t, ab = d.b, d.sl, d.h, d.tp, d.ab
    rep = b * sl * h / (t if d.sp else 1)
    f = d.ffn / t
    up_width = 2 * f if d.gated else f  # swiglu: gate and up GEMMs (fused here)
    return [
        _elementwise("post_norm", d, rep, act=ab * rep, kernels=_norm(d), **_tp_boundary(d, True)),
        _gemm("mlp_up", d, b * sl, h, up_width, act=_linear_input_bytes(d) * rep),
        # GeLU / squared ReLU keep their input (2*s*b*ffn); SwiGLU keeps gate and up outputs.
        _elementwise("mlp_act", d, b * sl * up_width, act=ab * b * sl * up_width,
                     passes=3 if d.gated else 2, kernels=_activation(d)),
        _gemm("mlp_down", d, b * sl, f, h, act=_linear_input_bytes(d) * b * sl * f, **_tp_boundary(d, False)),
        _residual("mlp_residual", d, rep),
    ]


def _moe_mlp(d: Dims) -> list[Op]:
    """Token-choice top-k MoE (Megatron `MoELayer` with the all-to-all token dispatcher, or the
    allgather one: `_dispatch`).

    Every rank routes its own tokens (sequence parallelism shards them over TP); the token
    copies of an expert group are spread over its experts, so when balanced each rank gets
    back as many copies as it sent. The capacity factor bounds the busiest rank at capacity x
    average (tokens beyond are dropped), so per-rank time uses that bound. Experts are
    tensor-parallel over etp ranks (Megatron's expert_tensor_parallel_size, default tp): with
    etp = tp > 1 the copies are gathered within TP after the all-to-all and scattered back
    before the combine; with etp 1 (MoE parallel folding) each rank computes its copies alone
    with whole experts. The rank's experts are separate weights: its copies split over them
    (tokens / local experts rows each), so each expert's GEMM tiles its own rows and its
    weight is read once per pass (Megatron's grouped GEMM, moe_grouped_gemm: one kernel for
    all local experts). Tokens are permuted twice each way: by destination before the
    all-to-all (moe_dispatch, moe_combine) and, with several local experts, by expert after it
    (`_permutation`).
    """
    b, sl, h, et, ab = d.b, d.sl, d.h, d.etp, d.ab
    own = b * sl / (d.tp if d.sp else 1)  # tokens this rank routes (SP shards them over TP)
    routed = own * d.top_k * d.capacity  # token copies this rank sends out / gets back
    tokens = routed * (et if d.sp else 1)  # token copies this rank's experts process
    f = d.expert_ffn / et
    up_width = 2 * f if d.gated else f
    a2a = routed * h * ab
    local = max(1, d.experts // d.ep)  # experts this rank holds
    ep_comm, combine_comm = expert_collectives(d.ep, d.dispatcher, a2a, own * h * ab)
    ops = [
        _elementwise("post_norm", d, own * h, act=ab * own * h, kernels=_norm(d), **({} if d.sp else _tp_boundary(d, True))),
        _gemm("router", d, own, h, d.experts, act=ab * own * (h + d.experts), te_linear=False),  # input + logits
        _elementwise("moe_dispatch", d, routed * h, **ep_comm),
    ]
    # expert TP is 1 or tp (scenario_checks), so its collectives run on the TP group; the allgather
    # dispatcher's one gather over TP x EP is priced as its EP gather, then this TP one, of every token
    tp_bytes = own * d.ep * et * h * ab if d.dispatcher == "allgather" else tokens * h * ab
    if et > 1 and d.sp:
        ops.append(_elementwise("moe_tp_gather", d, tokens * h, comm="all-gather", comm_bytes=tp_bytes,
                                group="tp", bwd_comm="reduce-scatter"))
    sort = local > 1 and d.dispatcher != "allgather"  # all-to-all copies arrive by source rank, not expert
    if sort:
        ops.append(_permutation("moe_sort_by_expert", d, tokens * h))
    ops += _shared_expert(d) if d.shared_ffn else []
    ops += [
        _gemm("expert_up", d, tokens, h, up_width, act=ab * tokens * h / (et if d.sp else 1), groups=local),
        _elementwise("expert_act", d, tokens * up_width, act=ab * tokens * up_width, passes=3 if d.gated else 2,
                     kernels=_activation(d)),
        _gemm("expert_down", d, tokens, f, h, act=ab * tokens * f, groups=local),
    ]
    if sort:
        ops.append(_permutation("moe_unsort_by_expert", d, tokens * h))
    if et > 1 and d.sp:
        ops.append(_elementwise("moe_tp_scatter", d, tokens * h, comm="reduce-scatter",
                                comm_bytes=tp_bytes, group="tp", bwd_comm="all-gather"))
    elif et > 1:
        ops.append(_elementwise("moe_tp_reduce", d, tokens * h, comm="all-reduce",
                                comm_bytes=tokens * h * ab, group="tp"))
    ops.append(_elementwise("moe_combine", d, routed * h, act=ab * routed, **combine_comm))  # keeps the gate probabilities
    if d.shared_ffn:  # the shared experts' output joins the routed experts' (MoELayer.combine)
        ops.append(_elementwise("shared_expert_add", d, own * h, passes=3, kernels=("add",)))
    ops.append(_residual("mlp_residual", d, own * h))
    return ops


def _permutation(name: str, d: Dims, elems: float) -> Op:
    """Megatron-Core's second token permutation (transformer/moe/token_dispatcher.py @core_v0.15.0,
    MoEAlltoAllTokenDispatcher.dispatch_postprocess / combine_preprocess: sort_chunks_by_idxs
    whenever a rank holds more than one expert): one kernel that reads and writes every token
    copy; its backward applies the inverse order to the gradient, the same bytes again."""
    moved = 2 * elems * d.ab
    return Op(name, fwd_bytes=moved, numel=elems, kernel_bytes=((moved,), (moved,)))


def _shared_expert(d: Dims) -> list[Op]:
    """Shared experts (Megatron-Core transformer/moe/shared_experts.py, SharedExpertMLP): a
    dense MLP of `shared_ffn` wide, no biases, that every token runs besides its routed
    experts; tensor-parallel like the dense MLP, so with sequence parallelism it gathers the
    rank's tokens over TP first and reduce-scatters its output (without SP the post-norm's
    boundary already enters the TP region). Megatron runs it between dispatch and the routed
    experts unless --moe-shared-expert-overlap moves it to a side stream."""
    b, sl, h, t, ab = d.b, d.sl, d.h, d.tp, d.ab
    rep = b * sl * h / (t if d.sp else 1)
    f = d.shared_ffn / t
    up_width = 2 * f if d.gated else f
    enter = [Op("shared_expert_gather", **_tp_boundary(d, True))] if d.sp else []
    return enter + [
        _gemm("shared_up", d, b * sl, h, up_width, act=_linear_input_bytes(d) * rep),
        _elementwise("shared_act", d, b * sl * up_width, act=ab * b * sl * up_width, passes=3 if d.gated else 2,
                     kernels=_activation(d)),
        _gemm("shared_down", d, b * sl, f, h, act=_linear_input_bytes(d) * b * sl * f, **_tp_boundary(d, False)),
    ]


def ops_for(d: Dims, moe_layer: bool = False) -> list[Op]:
    """The ops of one transformer layer for explicit sizes (see `layer_ops`)."""
    return _as_stack_runs(_attention(d) + (_moe_mlp(d) if moe_layer and d.experts else _dense_mlp(d)), d)


def layer_ops(s, moe_layer: bool = False) -> list[Op]:
    """Ops of one transformer layer on one rank for one micro-batch of scenario `s`, in
    forward order (pre-norm GPT block: norm, attention, residual, norm, MLP, residual)."""
    return ops_for(Dims.of(s), moe_layer)


def embedding_dims_ops(d: Dims) -> list[Op]:
    rep = d.b * d.sl * d.h / (d.tp if d.sp else 1)
    full = d.b * d.sl * d.h
    # Vocab-parallel lookup: each TP rank fills the rows of its vocabulary shard and zeros
    # elsewhere, then the partial embeddings are summed over TP (reduce-scatter with SP).
    lookup = Op("embedding", 0.0, 0.0, 0.0, 2 * full * d.ab, 0.0, kernels=("embedding",), numel=full,
                **(dict(comm="reduce-scatter" if d.sp else "all-reduce", bwd_comm="all-gather" if d.sp else None,
                        comm_bytes=full * d.ab, bwd_comm_bytes=full * d.ab, group="tp") if d.tp > 1 else {}))
    # + learned positions (GPT) and the embedding dropout: only the 1-byte mask is kept.
    if d.hidden_dropout:
        return _as_stack_runs([lookup, _elementwise("embedding_dropout", d, rep, act=MASK_BYTES * rep, passes=3,
                                                    kernels=("dropout", "add"))], d)
    if d.gpt_style:
        ops = [lookup, _elementwise("embedding_positions", d, rep, passes=3, kernels=("add",))]
    else:
        ops = [lookup]
    return _as_stack_runs(ops, d)


def head_dims_ops(d: Dims) -> list[Op]:
    rep = d.b * d.sl * d.h / (d.tp if d.sp else 1)
    tokens, v = d.b * d.sl, d.vocab / d.tp
    ops = [
        _elementwise("final_norm", d, rep, act=d.ab * rep, kernels=_norm(d), **_tp_boundary(d, True)),
        # Vocab-parallel LM head (column-parallel over the vocabulary): keeps its input.
        _gemm("lm_head", d, tokens, d.h, v, act=d.ab * rep, te_linear=False),
        # Vocab-parallel cross-entropy (Megatron `vocab_parallel_cross_entropy`): keeps fp32
        # logits / softmax; three small all-reduces over TP (max, target logit, sum of exp),
        # each one fp32 value per token.
        Op("cross_entropy", 0.0, 0.0, 0.0, tokens * v * (d.ab + LOGIT_BYTES), LOGIT_BYTES * tokens * v,
           kernels=("cross_entropy",), numel=tokens * v, kernel_bytes=loss_kernel_bytes(d.loss, tokens * v, d.ab),
           **(dict(comm="all-reduce", comm_bytes=3 * tokens * 4, group="tp") if d.tp > 1 else {})),
    ]
    return _as_stack_runs(ops, d)


def mtp_dims_ops(d: Dims, moe_layer: bool) -> list[Op]:
    """One multi-token-prediction module on the stage that holds it (Megatron-Core
    multi_token_prediction.py, MultiTokenPredictionLayer; DeepSeek-V3, arXiv:2412.19437 sec.
    2.2): the shifted tokens' embedding, a norm of it and of the decoder's output (each keeps its
    input), the two concatenated into the column-parallel eh_proj (2h -> h, its input gathered
    over TP under SP), the output all-gathered over TP (gather_from_tensor_model_parallel_region;
    with SP split again, its backward an all-gather), and one transformer layer of the model's
    kind. Its final norm, the LM head and the loss run on the loss stage (`head_dims_ops` once
    more per module: gpt_model.py computes every module's logits where post_process holds,
    process_mtp_loss). The embedding runs outside the recomputed part, the norms, the projection
    and the layer inside it (the module checkpoints `_proj_and_transformer_layer`)."""
    rep = d.b * d.sl * d.h / (d.tp if d.sp else 1)
    full = d.b * d.sl * d.h * d.ab
    gather_in = dict(comm="all-gather", bwd_comm="reduce-scatter", comm_bytes=2 * full, group="tp") if d.sp else (
        dict(bwd_comm="all-reduce", comm_bytes=2 * full, group="tp") if d.tp > 1 else {})
    gather_out = dict(comm="all-gather", bwd_comm="all-gather" if d.sp else None, comm_bytes=full,
                      group="tp") if d.tp > 1 else {}
    ops = [
        _elementwise("mtp_enorm", d, rep, act=d.ab * rep, kernels=_norm(d)),
        _elementwise("mtp_hnorm", d, rep, act=d.ab * rep, kernels=_norm(d)),
        _elementwise("mtp_concat", d, 2 * rep, kernels=("cat",), **gather_in),
        _gemm("mtp_eh_proj", d, d.b * d.sl, 2 * d.h, d.h / d.tp, act=_linear_input_bytes(d) * 2 * rep, **gather_out),
    ]
    return embedding_dims_ops(d) + _as_stack_runs(ops, d) + ops_for(d, moe_layer)


def _as_stack_runs(ops: list[Op], d: Dims) -> list[Op]:
    """`ops` (fused, one kernel each way) as the kernel stack launches them (kernel_stack.py)."""
    if d.stack == "eager":
        from .kernel_stack import eager_ops
        return eager_ops(ops, d)
    if d.stack == "compiled":
        from .kernel_stack import compiled_ops
        return compiled_ops(ops, d)
    return ops


def embedding_ops(s) -> list[Op]:
    """Ops of the first pipeline stage before its first layer (one micro-batch, one rank)."""
    return embedding_dims_ops(Dims.of(s))


def head_ops(s) -> list[Op]:
    """Ops of the last pipeline stage after its last layer: final norm, LM head, loss."""
    return head_dims_ops(Dims.of(s))


def mtp_ops(s) -> list[Op]:
    """Ops of one multi-token-prediction module (one micro-batch, one rank)."""
    return mtp_dims_ops(Dims.of(s), mtp_is_moe(s))


def is_moe_layer(s, layer: int) -> bool:
    moe = s.model.moe
    return moe is not None and moe_at(layer, moe.every, moe.first_dense_layers)


def mtp_is_moe(s) -> bool:
    """A module's layer is built from the decoder's last layer spec (Megatron-Core
    gpt_builders.py, decoder_layer_specs[-1]): MoE where the last layer is."""
    return is_moe_layer(s, s.model.layers - 1)


def stage_layer_range(s, stage: int) -> range:
    """Global indices of the transformer layers of a global pipeline stage."""
    start = sum(s.stage_layers[:stage])
    return range(start, start + s.stage_layers[stage])


def stage_ops(s, stage: int) -> list[Op]:
    """All ops one rank runs for one micro-batch of a global stage, in forward order."""
    d = Dims.of(s)
    ops = embedding_dims_ops(d) if stage == 0 else []
    for layer in stage_layer_range(s, stage):
        ops += ops_for(d, is_moe_layer(s, layer))
    for _ in range(s.stage_mtp[stage] if s.model.mtp_layers else 0):
        ops += mtp_dims_ops(d, mtp_is_moe(s))
    if stage == s.num_stages - 1:
        ops += head_dims_ops(d) * (1 + s.model.mtp_layers)  # the model's head, then each module's
    return ops
