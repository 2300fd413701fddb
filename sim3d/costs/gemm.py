"""How long one GEMM takes on one GPU, analytically, the way cuBLAS runs it: the output is cut
into CTA tiles, the tiles run in waves over the SMs, every tile pays a fixed cost besides its
k-loop, and a skinny GEMM is bounded by the bytes it moves.

    seconds = max(FLOPs / (peak * efficiency * shape efficiency), bytes / (HBM * MEMORY_EFFICIENCY))
              + KERNEL_OVERHEAD_S

`efficiency` is the GPU's best-shape efficiency at the clock a training step holds (its preset
record: a burst figure times a sustained-clock factor, both cited in cluster/gpus.py); `shape
efficiency` is 1.0 for a GEMM that fills every SM in whole waves of whole tiles with a deep k.
The three GEMMs of a linear layer are priced as three GEMMs of their own shapes (compute.py):
forward [m x k] @ [k x n], input gradient [m x n] @ [n x k], weight gradient [k x m] @ [m x n]
(reduction over the tokens).

Checked against every GEMM row of the committed H100 profile by benchmarks/kernel_truth.py
and tests/test_kernel_truth.py.
"""

from __future__ import annotations

import math

# Tile and wave quantization: NVIDIA, "Matrix Multiplication Background User's Guide"
# (docs.nvidia.com/deeplearning/performance/dl-performance-matrix-multiplication), sections
# "Tile Quantization" and "Wave Quantization". cuBLAS's large bf16 tiles on Ampere / Hopper are
# 128x256 in either orientation (CUTLASS's sm80 / sm90 default tile shapes; cuBLAS kernel
# names sm90_xmma_gemm_..._tilesize128x256x64).
GEMM_TILE = (128, 256)
# Every tile fills the software pipeline and runs its epilogue besides the k-loop: about two
# k-blocks of the main loop (CUTLASS multistage / TMA warp-specialized mainloops, k-block 64 deep
# for 16-bit operands), so efficiency k / (k + 128). FP8 k-blocks are 128 deep (the same bytes
# per stage: CUTLASS sm90 FP8 tile shapes are 128x256x128), so the same two blocks cost 256 of k.
# On the H100 profile 128 / 256 are also where the error is flattest (benchmarks/kernel_truth.py).
# The FP8 rows' remaining error (5.3% MAPE) is mostly the profile's own repeat noise (a perfect
# model would show ~3.7%, costs/truth.py noise_floor): a 128x128 FP8 tile (5.4%), stream-K
# without wave quantization for FP8 (5.0%) or efficiency and overhead fitted to the FP8 rows
# themselves (5.0% in sample) do not close it.
GEMM_K_OVERHEAD = 128
GEMM_K_OVERHEAD_FP8 = 256
# cuBLAS splits the k-loop of a GEMM whose tiles leave SMs idle (split-K; stream-K on Hopper),
# never below two overheads of depth per split.
GEMM_MAX_SPLIT_K = 4

# Fraction of the HBM datasheet bandwidth that a kernel streaming its operands reaches
# (elementwise, norms, softmax, a skinny GEMM's operands). Assumption: streaming kernels reach
# ~90% of peak (STREAM-like copy), multi-operand PyTorch kernels less; 0.80 in between.
MEMORY_EFFICIENCY = 0.80
# Per-kernel fixed cost on the GPU: launch latency and the ramp/tail of a kernel, a few
# microseconds on current GPUs (CUDA launch overhead is ~3-5 us when not hidden by the queue).
KERNEL_OVERHEAD_S = 3e-6


def k_overhead(precision: str, overhead_16: float | None = None) -> float:
    """The k-loop overhead of a tile in k units; `overhead_16` replaces the 16-bit constant
    (a fitted one), FP8 paying twice it as above."""
    base = GEMM_K_OVERHEAD if overhead_16 is None else overhead_16
    return base * GEMM_K_OVERHEAD_FP8 / GEMM_K_OVERHEAD if precision == "fp8" else base


def gemm_peak_efficiency(gpu, precision: str) -> float:
    """Best-shape GEMM efficiency of a GpuSpec under sustained load: the burst figure x the
    clock the GPU holds at its power limit."""
    return gpu.gemm_burst_efficiency(precision) * gpu.sustained_clock(precision)


def gemm_shape_efficiency(m: int, n: int, k: int, sms: int, groups: int = 1, precision: str = "bf16",
                          overhead_16: float | None = None, tile: tuple[int, int] | None = None) -> float:
    """Tile and wave quantization of the output (best tile orientation, and split-K up to
    `GEMM_MAX_SPLIT_K` ways when too few tiles fill the SMs) times the k-loop's fixed cost per
    tile; 1.0 for a GEMM that fills every SM in whole waves with a deep k. `groups` GEMMs of
    this (m, n, k) in one grouped kernel: each pads its own tiles, all share the waves. `tile`
    replaces GEMM_TILE (the GPU record's gemm_tile)."""
    overhead = k_overhead(precision, overhead_16)
    tile = tile or GEMM_TILE
    best = 0.0
    for tm, tn in (tile, tile[::-1]):
        tiles = groups * math.ceil(m / tm) * math.ceil(n / tn)
        useful = groups * (m * n) / (tiles * tm * tn)  # a tile that sticks out of the matrix computes padding
        for split in range(1, GEMM_MAX_SPLIT_K + 1):
            depth = k / split
            if split > 1 and depth < 2 * overhead:
                break
            work = tiles * split
            waves = math.ceil(work / sms)
            best = max(best, useful * work / (waves * sms) * depth / (depth + overhead))
    return best


def gemm_bytes(m: int, n: int, k: int, precision: str) -> float:
    """Operands read and output written once; FP8 GEMMs (Transformer Engine) write 16-bit."""
    operand = 1 if precision == "fp8" else (4 if precision == "fp32" else 2)
    out = 2 if precision == "fp8" else operand
    return (m * k + n * k) * operand + m * n * out


def gemm_seconds(gpu, m: int, n: int, k: int, precision: str = "bf16", groups: int = 1,
                 nbytes: float | None = None, overhead_16: float | None = None) -> float:
    """Seconds of `groups` (m, n, k) GEMMs in one kernel at the clock a training step holds;
    `nbytes` overrides the bytes it moves (default: `gemm_bytes`), `overhead_16` the k-loop
    overhead (costs/fit.py)."""
    flops = 2.0 * m * n * k * groups
    if flops <= 0:
        return 0.0
    rate = gpu.peak_tflops(precision) * 1e12 * gemm_peak_efficiency(gpu, precision) \
        * gemm_shape_efficiency(m, n, k, gpu.sms, groups, precision, overhead_16, gpu.gemm_tile)
    moved = gemm_bytes(m, n, k, precision) * groups if nbytes is None else nbytes
    return max(flops / rate, moved / (gpu.hbm_tbps * 1e12 * MEMORY_EFFICIENCY)) + KERNEL_OVERHEAD_S


def memory_seconds(gpu, nbytes: float) -> float:
    """A memory-bound kernel (elementwise, norm, softmax) that moves `nbytes`."""
    return nbytes / (gpu.hbm_tbps * 1e12 * MEMORY_EFFICIENCY) + KERNEL_OVERHEAD_S if nbytes > 0 else 0.0
