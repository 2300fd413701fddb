"""The ops of multi-head latent attention (model.mla; scenario/latent_attention.py) on one rank
for one micro-batch, in the conventions of ops.py, built from op_parts.py; `d` is an ops.Dims."""

from __future__ import annotations

from .op import Op
from .op_parts import (LSE_BYTES, _cp_ring, _elementwise, _gemm, _linear_input_bytes, _norm, _quantized_copy_bytes,
                       _residual, _tp_boundary)


def latent_attention(d) -> list[Op]:
    """Multi-head latent attention (scenario/latent_attention.py): the duplicated down
    projections run on the rank's own tokens (its sequence shard under SP), and the tensor-
    parallel boundary moves to their output, the latent, which SP all-gathers (and reduce-
    scatters back) and which without SP is all-reduced backward; the latents are normalised and
    expanded per head (column-parallel), the rotary part applied to the queries' and the shared
    key's, and the fused kernel attends with keys of nope + rope and values of v per head (its
    FLOPs 2 s_q s_k (qk + v) per head, priced at their mean head size)."""
    q_lora, kv_lora, nope, rope, v = d.mla
    b, sl, h, t, ab = d.b, d.sl, d.h, d.tp, d.ab
    heads, tokens = d.heads / t, b * sl
    latent = q_lora + kv_lora + rope
    rep = tokens * h / (t if d.sp else 1)
    if q_lora or t == 1:
        own = tokens / (t if d.sp else 1)  # tokens the duplicated down projections see
        entry, boundary = {}, ({} if t == 1 else dict(
            comm="all-gather" if d.sp else None, bwd_comm="reduce-scatter" if d.sp else "all-reduce",
            comm_bytes=tokens * latent * ab, group="tp"))
    else:  # queries projected column-parallel from the layer's input: that input enters the TP region
        own, entry, boundary = tokens, _tp_boundary(d, True), {}
    q_width, k_width, v_width = heads * (nope + rope), heads * (nope + rope), heads * v
    ops = [
        _elementwise("input_norm", d, rep, act=ab * rep, kernels=_norm(d), **entry),
        # query and key-value down projections, one GEMM of their widths side by side; keeps its
        # input; its output, the latents, is what crosses the TP boundary
        _gemm("mla_down", d, own, h, latent, act=_linear_input_bytes(d) * own * h / (t if d.sp and not q_lora else 1),
              **boundary),
        # the two latents' RMSNorms (keep their inputs)
        _elementwise("mla_latent_norm", d, tokens * (q_lora + kv_lora), act=ab * tokens * (q_lora + kv_lora),
                     kernels=("rmsnorm",)),
    ]
    if q_lora:
        ops.append(_gemm("mla_q_up", d, tokens, q_lora, q_width, act=_linear_input_bytes(d) * tokens * q_lora))
    else:  # queries projected from the layer's input (which the down projection keeps)
        ops.append(_gemm("mla_q", d, tokens, h, q_width))
    ops += [
        _gemm("mla_kv_up", d, tokens, kv_lora, heads * nope + v_width, act=_linear_input_bytes(d) * tokens * kv_lora,
              **(_cp_ring(d) if d.cp > 1 else {})),
        # rotary positions on the queries' and the shared key's rope parts; the key's copied to
        # every head (Q, K and V kept for the kernel's backward, as for standard attention)
        _elementwise("rope", d, tokens * (heads * rope + rope), kernels=("rope",),
                     act=ab * tokens * (q_width + k_width + v_width)),
    ]
    scores = heads * b * sl * d.s
    mean_head = (nope + rope + v) / 2
    lse = LSE_BYTES * heads * b * sl
    io = ab * tokens * (q_width + k_width + v_width + v_width) + lse  # read Q, K, V; write O and the LSE
    ops += [
        Op("core_attention", 4.0 * scores * mean_head, 8.0 * scores * mean_head, 0.0, io, lse,
           recompute_selective=True, attention=(round(b * heads), sl, d.s, round(mean_head))),
        _gemm("out_proj", d, tokens, v_width, h, act=(ab + _quantized_copy_bytes(d)) * tokens * v_width,
              **_tp_boundary(d, False)),
        _residual("attn_residual", d, b * sl * h / (t if d.sp else 1)),
    ]
    return ops
