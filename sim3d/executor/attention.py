"""Core attention of the executor's GPT: the kernel the scenario names, rotary positions and
grouped-query attention. Layout of q, k, v: [batch, heads, sequence, head_dim].

* `sdpa` (`training.attention_backend: flash`, Megatron's flash / fused / auto):
  `torch.nn.functional.scaled_dot_product_attention(..., is_causal=True)`. torch chooses the
  kernel: FlashAttention-2, cuDNN or memory-efficient attention on GPUs, its flash kernel or
  the math path on CPUs; none stores the [s, s] scores. Grouped-query attention reaches the
  kernel unexpanded (`enable_gqa`), as FlashAttention takes it.
  A kernel the scenario names (`training.kernels.attention`) is the one SDPA runs on a GPU in
  fp16 / bf16: `cudnn` its cuDNN backend, `fa2` its flash backend (FlashAttention-2); SDPA has
  no FlashAttention-3 or Triton kernel, so those are refused on a GPU. Elsewhere (a CPU, fp32,
  torch < 2.5) torch's own kernel runs, and the run says so (runtime.py `_attention_ran`).
* `unfused` (`attention_backend: unfused`, 2020-22 Megatron): the scores are materialised,
  masked and soft-maxed in at least fp32 (Megatron's FusedScaleMaskSoftmax computes in fp32
  whatever its input), then cast back before the product with the values. GQA repeats each
  kv head over its group of query heads first, as Megatron's local attention does.

Both compute softmax(q k^T / sqrt(d) + causal mask) v (Vaswani et al. 2017, eq. 1); the
single-process reference runs the same module, so `--check` compares like with like.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

# attention_backend (sim3d.scenario.schema.Training) -> the kernel the executor calls
KERNEL_OF_BACKEND = {"flash": "sdpa", "unfused": "unfused"}

ROPE_BASE = 10000.0  # Megatron's --rotary-base default, as in Su et al. 2021
# SDPA takes grouped-query attention unexpanded from torch 2.5 (`enable_gqa`); the executor
# supports torch >= 2.2 (pyproject), where the kv heads are repeated first
SDPA_GQA = torch.__version__ >= "2.5"


def attention_kernel(backend: str) -> str:
    try:
        return KERNEL_OF_BACKEND[backend]
    except KeyError:
        raise ValueError(f"training.attention_backend={backend!r}: the executor knows "
                         f"{sorted(KERNEL_OF_BACKEND)}") from None


# training.kernels.attention -> torch.nn.attention.SDPBackend's member
SDPA_BACKEND_OF_KERNEL = {"cudnn": "CUDNN_ATTENTION", "fa2": "FLASH_ATTENTION"}
# Holding SDPA to one backend: torch.nn.attention.sdpa_kernel exists from torch 2.3, and its
# cuDNN backend took training inputs (and needed no opt-in variable) from 2.5
SDPA_HOLDS = torch.__version__ >= "2.5"
SIXTEEN_BIT = (torch.float16, torch.bfloat16)  # what the flash and cuDNN backends take


def sdpa_backends(named: str, device_type: str, dtype: torch.dtype = torch.bfloat16) -> list | None:
    """The SDPA backends to hold a named attention kernel to, or None for torch's own choice:
    the `default` kernel, any device but a GPU, inputs in neither fp16 nor bf16 (an fp32
    scenario, a float64 check: the named kernels take none), or a torch before 2.5."""
    if named == "default" or device_type != "cuda" or dtype not in SIXTEEN_BIT or not SDPA_HOLDS:
        return None
    if named not in SDPA_BACKEND_OF_KERNEL:
        raise ValueError(f"training.kernels.attention={named!r}: torch SDPA has no such kernel; name default, "
                         f"{' or '.join(SDPA_BACKEND_OF_KERNEL)} to run it")
    from torch.nn.attention import SDPBackend
    return [getattr(SDPBackend, SDPA_BACKEND_OF_KERNEL[named])]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Where a reduction (softmax, loss, rotary angles) is carried out: fp32 for 16-bit
    inputs, the input's own type when it is already at least as wide."""
    return torch.promote_types(dtype, torch.float32)


def core_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel: str,
                   backends: list | None = None) -> torch.Tensor:
    """Causal attention of q [b, n, s, d] over k, v [b, n_kv, s, d] -> [b, n, s, d];
    `backends`: the SDPA backends to hold `sdpa` to (`sdpa_backends`)."""
    if kernel not in ("sdpa", "unfused"):
        raise ValueError(f"unknown attention kernel {kernel!r}")
    if kernel == "sdpa" and backends:
        from torch.nn.attention import sdpa_kernel
        with sdpa_kernel(backends):
            return _attend(q, k, v, kernel)
    return _attend(q, k, v, kernel)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel: str) -> torch.Tensor:
    groups = q.shape[1] // k.shape[1]
    if kernel == "sdpa" and SDPA_GQA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=groups > 1)
    if groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    if kernel == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    s = q.shape[-2]
    scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).to(compute_dtype(q.dtype))
    causal = torch.ones(s, s, dtype=torch.bool, device=q.device).triu(1)
    probs = scores.masked_fill(causal, float("-inf")).softmax(dim=-1).to(q.dtype)
    return probs @ v


def rotary(x: torch.Tensor, positions: torch.Tensor, base: float = ROPE_BASE) -> torch.Tensor:
    """Rotary position embedding (Su et al. 2021, "RoFormer", arXiv:2104.09864, eq. 34) of
    x [s, b, n, d] at integer `positions` [s], in the rotate-half layout of GPT-NeoX and
    Megatron-Core (dimension j is paired with j + d/2): x cos(p w_j) + rotate_half(x) sin(p w_j),
    w_j = base^(-2j/d). Angles are computed in fp32 at least, the product in x's type."""
    d = x.shape[-1]
    wide = compute_dtype(x.dtype)
    inv_freq = base ** -(torch.arange(0, d, 2, device=x.device, dtype=wide) / d)
    angles = positions.to(wide)[:, None] * inv_freq[None, :]  # [s, d/2]
    angles = torch.cat([angles, angles], dim=-1)[:, None, None, :]  # [s, 1, 1, d]
    first, second = x[..., : d // 2], x[..., d // 2:]
    rotated = torch.cat([-second, first], dim=-1)
    return x * angles.cos().to(x.dtype) + rotated * angles.sin().to(x.dtype)
