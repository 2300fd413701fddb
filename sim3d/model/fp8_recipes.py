"""What an FP8 linear launches besides its GEMMs, by recipe (`training.kernels.fp8`,
scenario/kernels.py): the kernels that scale and cast its three operands -- the input (E_in =
tokens x k elements), the weight (E_w = k x n per expert) and the output gradient (E_out =
tokens x n) -- as bytes per kernel, forward and backward, and how its GEMMs run.

* `te`, Transformer Engine: one cast-transpose per activation operand (read 16-bit, write the
  8-bit value and its 8-bit transpose: 4 bytes an element; `cast_transpose`), the input in
  forward and the output gradient in backward; the weights are cast once per step and cached
  across micro-batches (`is_first_microbatch`), so nothing per micro-batch.
* torchao.float8 under `compiled`, as torchao prices its own overhead
  (torchao/testing/training/roofline_utils.py, get_tensor_memory_traffic_ovhd_s, pytorch/ao
  @36027d8): the absolute maximum of an activation is fused into the op that writes it (its
  benchmarks/float8/float8_roofline.py, assumption 2), the weight's is a kernel of its own.
  - `tensorwise`: the input and the output gradient each one kernel writing both layouts
    (2 + 1 + 1 bytes); the weight an absolute-maximum pass (2) and a cast for each pass
    (2 + 1, forward and backward).
  - `rowwise`: a row's scale cannot cover its column, so each activation is cast twice, once
    per layout, through a 16-bit transpose (3 + 2, then 3 bytes); the weight's forward cast
    (3), its transpose (4) and its second cast (3).
  - `rowwise_with_gw_hp`: one cast per activation (the amax fused: the 1-byte write), the
    weight as rowwise's but its transpose; the weight gradient a 16-bit GEMM.
* torchao.float8 under `eager`, every step an ATen kernel (torchao/float8/float8_utils.py and
  float8_training_tensor.py): `torch.max(torch.abs(x))` (read 2, write 2; read 2), three scalar
  kernels for the scale, then `x.to(float32)` (2, 4), `* scale` (4, 4), `clamp` (4, 4) and
  `.to(float8)` (4, 1): 33 bytes an element in nine kernels, for each of the six casts
  matmul_with_hp_or_float8_args makes per linear (input and weight forward; output gradient
  twice, weight and input again in backward), and the row- or column-major copies
  float8_ops.preprocess_addmm makes for torch._scaled_mm (1 + 1 bytes).

Rowwise GEMMs (torchao/float8/float8_ops.py, addmm_float8_unwrapped): the forward, with fast
accumulation, is PyTorch's CUTLASS row-wise kernel, "most shapes within 90-100% of tensor-wise
efficiency" (pytorch/pytorch#147971; 0.95 here, the band's middle); the backward GEMMs (slow
accumulation) run cuBLAS's tensor-wise kernel and then scale their output in place (read 2,
write 2 bytes an element).

With `training.fp8_param_gather` (torchao's enable_fsdp_float8_all_gather, tensorwise only)
the weight is cast on the local shard before the all-gather (float8/fsdp_utils.py,
fsdp_pre_all_gather; its scale precomputed once per step) and arrives in FP8: the backward
only lays it out column-major for torch._scaled_mm (1 + 1 bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

SCALAR_BYTES = 4.0  # a kernel over a scale (or a row of scales): its launch is its cost
ROWWISE_FORWARD_GEMM_RATE = 0.95  # pytorch/pytorch#147971: most shapes at 90-100% of tensor-wise
_EAGER_CAST = (4.0, 2.0, 0.0, 0.0, 0.0, 6.0, 8.0, 8.0, 5.0)  # per element; 0: a scalar kernel
_LAYOUT_COPY = 2.0  # read and write one byte an element


@dataclass(frozen=True)
class Fp8Linear:
    """One FP8 linear's extra kernels (bytes each, forward and backward) and GEMM terms."""
    fwd_kernels: tuple[float, ...]
    bwd_kernels: tuple[float, ...]
    weight_grad_fp8: bool = True  # the weight-gradient GEMM on FP8 tensor cores
    fwd_gemm_rate: float = 1.0  # the forward GEMM kernel's speed relative to tensor-wise cuBLAS


def _scaled(per_element: tuple[float, ...], elements: float) -> tuple[float, ...]:
    return tuple(b * elements if b else SCALAR_BYTES for b in per_element)


def fp8_linear(recipe: str, stack: str, tokens: float, k: float, n: float, groups: int = 1,
               weight_shards: int = 0) -> Fp8Linear:
    """`weight_shards`: the FSDP shards a weight is cast on before an FP8 all-gather (0: the
    weight is gathered in 16 bits, or not sharded)."""
    e_in, e_out, e_w = tokens * k, tokens * n, groups * k * n
    if recipe == "te":
        return Fp8Linear((4.0 * e_in,), (4.0 * e_out,))
    if recipe not in ("tensorwise", "rowwise", "rowwise_with_gw_hp"):
        raise ValueError(f"unknown FP8 recipe {recipe!r}")
    rowwise = recipe == "rowwise"
    post_scale = (4.0 * e_in, 4.0 * e_w) if rowwise else ()
    rate = ROWWISE_FORWARD_GEMM_RATE if recipe != "tensorwise" else 1.0
    gathered = weight_shards > 0 and recipe == "tensorwise"
    if stack == "eager":
        cast = lambda e: _scaled(_EAGER_CAST, e)  # noqa: E731
        weight_fwd = cast(e_w / weight_shards) if gathered else cast(e_w)
        weight_bwd = (_LAYOUT_COPY * e_w,) if gathered else cast(e_w) + (_LAYOUT_COPY * e_w,)
        if recipe == "rowwise_with_gw_hp":
            return Fp8Linear(cast(e_in) + weight_fwd, cast(e_out) + weight_bwd, weight_grad_fp8=False,
                             fwd_gemm_rate=rate)
        return Fp8Linear(cast(e_in) + weight_fwd,
                         cast(e_out) + weight_bwd + cast(e_out) + cast(e_in)
                         + (_LAYOUT_COPY * e_out, _LAYOUT_COPY * e_in) + post_scale, fwd_gemm_rate=rate)
    if recipe == "tensorwise":
        weight_fwd = (3.0 * e_w / weight_shards,) if gathered else (2.0 * e_w, SCALAR_BYTES, 3.0 * e_w)
        weight_bwd = (_LAYOUT_COPY * e_w,) if gathered else (3.0 * e_w,)
        return Fp8Linear((SCALAR_BYTES, 4.0 * e_in) + weight_fwd, (SCALAR_BYTES, 4.0 * e_out) + weight_bwd)
    if rowwise:
        return Fp8Linear((3.0 * e_in, 3.0 * e_in, 3.0 * e_w),
                         (4.0 * e_w, 3.0 * e_w, 3.0 * e_out, 3.0 * e_out) + post_scale, fwd_gemm_rate=rate)
    return Fp8Linear((1.0 * e_in, 3.0 * e_w), (SCALAR_BYTES, 3.0 * e_w, 1.0 * e_out), weight_grad_fp8=False,
                     fwd_gemm_rate=rate)
