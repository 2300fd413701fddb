"""How long one fused attention kernel takes (FlashAttention-2/3, cuDNN's fused attention that
Transformer Engine runs), analytically, the way those kernels are built (Dao 2023,
arXiv:2307.08691 sections 3.1-3.3; Shah et al. 2024, arXiv:2407.08608 section 3):

* the forward gives each CTA one block of `BLOCK` queries of one head; it walks the key
  blocks, skipping the fully masked ones under a causal mask (query block i visits i + 1 key
  blocks, the diagonal one computed in full); the backward gives each CTA one key block and
  walks the query blocks (the same triangle), recomputing the scores;
* a key block costs 4 * BLOCK^2 * head_dim FLOPs forward (QK^T and PV) and 2.5x that backward
  (five GEMMs: the scores again, dP, dV, dK, dQ);
* every CTA pays a fixed cost of a few blocks (loading its queries, the softmax rescaling, its
  epilogue; in block units, `AttentionKernels.*_cta_blocks`);
* the CTAs run over the SMs longest first; the last one ends on average half a CTA after the
  others (`TAIL`), which is what makes few heads at a short sequence slow;
* the backward runs two more kernels over memory: the preprocessing rowsum(dO * O) and the
  conversion of the fp32 dQ accumulator (FA2/FA3 flash_bwd_preprocess / convert_dQ).

GQA changes the bytes, not the work. Context parallelism runs one causal s x s block per ring
step on average (the caller passes the steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .gemm import KERNEL_OVERHEAD_S, MEMORY_EFFICIENCY

BLOCK = 128  # query / key rows per block: FA2, FA3 and cuDNN for head dim 128 (FA3 hopper/tile_size.h)
BACKWARD_WORK = 2.5  # the backward's matmul work over the forward's (FA2 benchmarks/benchmark_flash_attention.py)
TAIL = 0.5  # the last CTA ends half a CTA after the average: its start is uniform over a CTA's length
# Head dim 64 reaches ~0.69x the TFLOP/s of head dim 128 (FA3 figures, cuDNN forward 413 vs 595
# at 16k): the softmax's exponentials, one per score, are twice the share of the work; linear in
# between, no gain above 128.
HEAD_DIM_64_FACTOR = 0.69
LSE_BYTES = 4


@dataclass(frozen=True)
class AttentionKernels:
    """Fused attention of one kernel family at the GPU's burst clock (the preset's sustained
    clock is applied on top): best fraction of the 16-bit dense peak per direction, and each
    CTA's fixed cost in key blocks."""
    fwd_efficiency: float
    bwd_efficiency: float
    fwd_cta_blocks: float
    bwd_cta_blocks: float
    source: str
    # (forward, backward) TFLOP/s at head dim 64 over head dim 128 (linear in between)
    head_dim_64: tuple[float, float] = (HEAD_DIM_64_FACTOR, HEAD_DIM_64_FACTOR)


# Hopper (cuDNN fused attention, what Transformer Engine and torch SDPA run on H100): the four
# constants are calibrated on the committed H100 profile's causal attention rows
# (calibrate/profiles/h100-sxm5-80gb.csv, op "attention": cuDNN 9.19, torch 2.11; 8 shapes x 2
# directions, head dim 64 and 128, sequence 1k-8k, GQA), with the profile's clock transient
# undone (costs/harness.py) and divided by the H100's sustained clock; cross-validated error:
# `python benchmarks/kernel_truth.py --fit`. cuDNN 9.19 is faster than the cuDNN of the FA3 paper's figures
# (2024: 539 / 516 TFLOP/s forward / backward at 16k; here 632 / 500 at 8k).
HOPPER = AttentionKernels(0.802, 0.689, 4.50, 3.92, "calibrated on the H100 profile's cuDNN rows (cuDNN 9.19)")
# Ampere: FlashAttention-2 reaches up to 73% of peak forward and 63% backward on A100 (Dao 2023,
# arXiv:2307.08691, sections 1 and 4.1); the per-CTA cost of the same algorithm is taken as Hopper's.
AMPERE = AttentionKernels(0.73, 0.63, HOPPER.fwd_cta_blocks, HOPPER.bwd_cta_blocks,
                          "FlashAttention-2 paper (A100 peak fractions), Hopper's per-CTA cost")
# Blackwell: Hopper's fractions of the dense peak are kept. FlashAttention-4's authors report up to
# 1613 TFLOP/s bf16 on a B200 (71% of 2250) at up to 1.3x cuDNN 9.13, i.e. cuDNN near 1240 (0.55
# of peak), where the Hopper figures above stand at 0.53-0.64 for long sequences; Transformer
# Engine runs cuDNN's kernel.
FAMILIES = {"hopper": HOPPER, "ampere": AMPERE}
# FlashAttention written in Triton (llm-foundry's `attn_impl: triton`: flash_attn_triton.py, which
# starts from Tillet's Triton kernel): FlashAttention-2 is "around 1.3-1.5x faster than
# FlashAttention in Triton in the forward pass and around 2x faster in the backward pass" on an
# A100 80GB SXM4 (Dao 2023, arXiv:2307.08691, section 4.1, Figs. 5-6). The middle of the
# forward range and the backward figure, as fractions of the GPU family's own FlashAttention
# rates; the same algorithm's per-CTA cost. The kernel's own docstring agrees in order: its
# forward + backward is "slightly slower" than FlashAttention-1's CUDA kernels, which
# FlashAttention-2 outruns about 2x (same section).
TRITON_FWD_SLOWDOWN = 1.4
TRITON_BWD_SLOWDOWN = 2.0


def triton_family(base: AttentionKernels) -> AttentionKernels:
    return replace(base, fwd_efficiency=base.fwd_efficiency / TRITON_FWD_SLOWDOWN,
                   bwd_efficiency=base.bwd_efficiency / TRITON_BWD_SLOWDOWN,
                   source=f"FlashAttention in Triton: {base.source} / {TRITON_FWD_SLOWDOWN} forward, "
                          f"/ {TRITON_BWD_SLOWDOWN} backward (FlashAttention-2 paper, section 4.1)")


# FlashAttention-2 and FlashAttention-3 on Hopper, named by `training.kernels.attention` (what
# torch SDPA ran on H100 in torch 2.5.1-2.8, and what FA3's users install): the four constants
# of each are fitted to the FA3 paper's H100 SXM5 figures (costs/attention_figures.py says which,
# and re-derives these; tests/test_attention_kernels.py checks they match and prints the fit).
# Head dim 64 loses less in these kernels than in cuDNN's: at 16k, FA2 299 / 335 forward (Fig. 5b
# over 5d) and 291 / 322 backward (Fig. 6a over 6b), FA3 473 / 616 and 474 / 561.
FA2_HOPPER = AttentionKernels(0.367, 0.341, 0.75, 1.05, "FlashAttention-2 on H100, FA3 paper Figs. 5-6",
                              head_dim_64=(299 / 335, 291 / 322))
FA3_HOPPER = AttentionKernels(0.684, 0.598, 1.5, 1.05, "FlashAttention-3 on H100, FA3 paper Figs. 5-6",
                              head_dim_64=(473 / 616, 474 / 561))


def kernel_family(attention_family: str, kernel: str) -> AttentionKernels:
    """The constants of `training.kernels.attention` = `kernel` on a GPU of `attention_family`:
    `default` is the GPU's own (cuDNN on Hopper and later, FlashAttention-2 on Ampere);
    scenario/checks.py refuses a kernel a GPU preset has no figures for (cluster/gpus.py
    attention_kernels_with_figures)."""
    default = FAMILIES[attention_family]
    if kernel in ("default", "cudnn") or (kernel == "fa2" and attention_family == "ampere"):
        return default
    if kernel == "triton":
        return triton_family(default)
    if kernel == "fa2":
        return FA2_HOPPER
    if kernel == "fa3":
        return FA3_HOPPER
    raise ValueError(f"unknown attention kernel {kernel!r}")


def head_dim_factor(head_dim: int, at_64: float) -> float:
    return at_64 + (1 - at_64) * (min(max(head_dim, 64), 128) - 64) / 64


def attention_efficiency(gpu, direction: str, head_dim: int, family: AttentionKernels | None = None) -> float:
    """Fraction of the 16-bit dense peak a CTA reaches inside its k-loop, at the clock a
    training step holds."""
    family = family or FAMILIES[gpu.attention_family]
    best = family.fwd_efficiency if direction == "fwd" else family.bwd_efficiency
    at_64 = family.head_dim_64[0 if direction == "fwd" else 1]
    return best * head_dim_factor(head_dim, at_64) * gpu.sustained_clock("bf16")


def cta_blocks(seq_q: int, seq_k: int, causal: bool, overhead: float) -> tuple[float, float]:
    """(sum over one head's CTAs, longest CTA) of key blocks visited, fixed cost included."""
    nq, nk = math.ceil(seq_q / BLOCK), math.ceil(seq_k / BLOCK)
    if causal:  # query block i sees key blocks up to the diagonal (queries aligned to the keys' end)
        lengths = [min(nk, nk - nq + i + 1) for i in range(nq)]
    else:
        lengths = [nk] * nq
    return sum(lengths) + overhead * nq, max(lengths) + overhead


def attention_seconds(gpu, batch_heads: int, seq: int, head_dim: int, direction: str = "fwd",
                      causal: bool = True, kv_heads_ratio: float = 1.0, seq_k: int | None = None,
                      nbytes: float | None = None, family: AttentionKernels | None = None) -> float:
    """One fused attention kernel over `batch_heads` (batch x query heads) heads of `seq`
    queries (and `seq_k` keys, default `seq`), forward or backward (its memory-bound pre- and
    post-processing kernels included). `kv_heads_ratio`: key/value heads per query head (GQA);
    `nbytes` overrides the forward's HBM traffic (Q, K, V, O, log-sum-exp); `family` the GPU's
    kernel constants (a fitted set, costs/fit.py)."""
    if direction not in ("fwd", "bwd"):
        raise ValueError(f"direction must be 'fwd' or 'bwd', not {direction!r}")
    seq_k = seq if seq_k is None else seq_k
    family = family or FAMILIES[gpu.attention_family]
    overhead = family.fwd_cta_blocks if direction == "fwd" else family.bwd_cta_blocks
    total, longest = cta_blocks(seq, seq_k, causal, overhead)
    sms = gpu.sms
    makespan = batch_heads * total / sms + TAIL * longest
    work = 4.0 * BLOCK * BLOCK * head_dim * (BACKWARD_WORK if direction == "bwd" else 1.0)
    per_block = work / (gpu.peak_tflops("bf16") * 1e12 * attention_efficiency(gpu, direction, head_dim, family) / sms)
    hbm = gpu.hbm_tbps * 1e12 * MEMORY_EFFICIENCY
    q = batch_heads * seq * head_dim * 2  # 16-bit Q (and O, dO, dQ)
    kv = batch_heads * kv_heads_ratio * seq_k * head_dim * 2
    io = 2 * q + 2 * kv + batch_heads * seq * LSE_BYTES if nbytes is None else nbytes  # Q, K, V, O, LSE
    if direction == "fwd":
        return max(makespan * per_block, io / hbm) + KERNEL_OVERHEAD_S
    main = max(makespan * per_block, 2 * io / hbm)
    # rowsum(dO * O) reads O and dO; the fp32 dQ accumulator is converted to 16 bits
    side = (2 * q + batch_heads * seq * LSE_BYTES + 3 * q) / hbm
    return main + side + 3 * KERNEL_OVERHEAD_S
