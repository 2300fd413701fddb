"""How long one op takes on one GPU: a measured profile when it has the op, else an analytical
model: a roofline whose GEMM efficiency depends on the shape, and fused attention priced
from the throughput its kernels are published to reach.

    time = max(FLOPs / (peak * efficiency), bytes / (HBM bandwidth * memory efficiency)) + overhead

Every constant below is physical, per GPU generation, and stated with its source; nothing
is fitted to a validation row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# ---- GEMMs ----------------------------------------------------------------------------------
# Each GPU's best-shape burst efficiency and sustained-clock factor are facts of its preset
# record, cited there (cluster/gpus.py).
# Shape effects (NVIDIA "Matrix Multiplication Background" user's guide, tile and wave
# quantization): the output is cut into tiles, one per SM at a time; a last partial wave of
# tiles leaves SMs idle. cuBLAS's large-GEMM tiles on Ampere / Hopper are 128x256 (either
# orientation; CUTLASS's default bf16 tile shapes for sm80 / sm90).
GEMM_TILE = (128, 256)
# Each output tile pays a pipeline fill and an epilogue, about two 64-deep k-blocks of the
# main loop (CUTLASS multistage mainloop with BK=64): efficiency k / (k + 128).
GEMM_K_OVERHEAD = 128
GEMM_MAX_SPLIT_K = 4

# ---- fused attention ------------------------------------------------------------------------
# Causal attention kernels skip fully masked tiles (FlashAttention-2 csrc/flash_attn/src/
# flash_fwd_kernel.h clips n_block_max at the diagonal; FA3 hopper/block.h likewise), so they
# execute half of the model's 4*b*s^2*h forward FLOPs; the papers' causal TFLOP/s count that
# half. Backward = 2.5x forward matmul work (it recomputes the scores; FA2
# benchmarks/benchmark_flash_attention.py).
CAUSAL_EXECUTED = 0.5
FLASH_BACKWARD_WORK = 2.5
# Achieved TFLOP/s of cuDNN fused attention (what Transformer Engine runs on Hopper), BF16,
# head dim 128, causal forward and backward, by sequence length 512..16k: Shah et al. 2024
# (FlashAttention-3, arXiv:2407.08608), benchmark figures, cuDNN series, H100 SXM5.
_SEQ = (512, 1024, 2048, 4096, 8192, 16384)
_HOPPER_FWD = (315, 410, 484, 518, 529, 539)
_HOPPER_BWD = (305, 408, 465, 499, 518, 516)
# Ampere: FlashAttention-2 reaches up to 73% of peak forward and 63% backward on A100 (Dao
# 2023, arXiv:2307.08691, sections 1 and 4.1); the sequence-length dependence is taken as
# Hopper's (no per-length A100 table was found).
_AMPERE_PEAK = {"fwd": 0.73, "bwd": 0.63}
# Head dim 64 reaches ~0.69x the TFLOP/s of head dim 128 (FA3 figures, cuDNN forward 413 vs 595
# at 16k); linear in between, no gain assumed above 128.
HEAD_DIM_64_FACTOR = 0.69
# Blackwell: Hopper's fractions of the dense peak are kept. FlashAttention-4's authors report up to
# 1613 TFLOP/s bf16 on a B200 (71% of 2250) at up to 1.3x cuDNN 9.13, i.e. cuDNN near 1240
# (0.55 of peak), where Hopper's cuDNN figures above stand at 0.52-0.54 for long sequences;
# Transformer Engine runs cuDNN's kernel.

# ---- memory-bound kernels -------------------------------------------------------------------
# Fraction of the HBM datasheet bandwidth that elementwise / norm / softmax kernels reach.
# Assumption: streaming kernels reach ~90% of peak (STREAM-like copy), multi-operand PyTorch
# kernels less; 0.80 in between.
MEMORY_EFFICIENCY = 0.80
# Per-kernel fixed cost: launch latency and the ramp/tail of a kernel, a few microseconds
# on current GPUs (CUDA launch overhead is ~3-5 us when not hidden by the stream queue).
KERNEL_OVERHEAD_S = 3e-6


def gemm_peak_efficiency(gpu, precision: str) -> float:
    """Best-shape GEMM efficiency of a GpuSpec under sustained load: MAMF's burst figure x the
    clock the GPU holds at its power limit."""
    return gpu.gemm_burst_efficiency(precision) * gpu.sustained_clock(precision)


def gemm_shape_efficiency(m: int, n: int, k: int, sms: int, groups: int = 1) -> float:
    """Tile and wave quantization of the output (best tile orientation, and split-K up to
    `GEMM_MAX_SPLIT_K` ways when too few tiles fill the SMs, as cuBLAS's heuristics and
    Hopper's stream-K kernels do) times the k-loop's fixed cost per tile; 1.0 for a GEMM that
    fills every SM in whole waves with a deep k. `groups` GEMMs of this (m, n, k) in one
    grouped kernel: each pads its own tiles, all share the waves."""
    best = 0.0
    for tm, tn in (GEMM_TILE, GEMM_TILE[::-1]):
        tiles = groups * math.ceil(m / tm) * math.ceil(n / tn)
        useful = groups * (m * n) / (tiles * tm * tn)  # a tile that sticks out of the matrix computes padding
        for split in range(1, GEMM_MAX_SPLIT_K + 1):
            depth = k / split
            if split > 1 and depth < 2 * GEMM_K_OVERHEAD:
                break
            work = tiles * split
            waves = math.ceil(work / sms)
            best = max(best, useful * work / (waves * sms) * depth / (depth + GEMM_K_OVERHEAD))
    return best


def attention_efficiency(gpu, direction: str, seq: int, head_dim: int) -> float:
    """Fraction of the 16-bit dense peak a fused causal attention kernel reaches, for a
    kernel over `seq` queries and keys (per context-parallel step)."""
    table = _HOPPER_FWD if direction == "fwd" else _HOPPER_BWD
    hopper = np.interp(math.log2(max(seq, 1)), np.log2(_SEQ), table) / 989.4
    if gpu.attention_family == "ampere":
        hopper *= _AMPERE_PEAK[direction] / (table[-1] / 989.4)
    factor = HEAD_DIM_64_FACTOR + (1 - HEAD_DIM_64_FACTOR) * (min(max(head_dim, 64), 128) - 64) / 64
    return float(hopper * factor * gpu.sustained_clock("bf16"))


def _part_shapes(op) -> dict[str, tuple[int, int, int] | None]:
    """The shape each part of a GEMM op tiles, per group: forward [m x k] @ [k x n], dgrad
    [m x n] @ [n x k], wgrad [k x m] @ [m x n]; a group owns m / groups of the rows (the
    reduction depth of its wgrad)."""
    if op.gemm is None:
        return {"fwd": None, "bwd_input": None, "bwd_weight": None}
    m, n, k = op.gemm
    rows = max(1, round(m / op.gemm_groups))
    return {"fwd": (rows, n, k), "bwd_input": (rows, k, n), "bwd_weight": (k, n, rows)}


def block_shape(scenario) -> str:
    """Key of a measured block (calibrate/blocks.py): every dimension its time depends on."""
    m = scenario.model
    return (f"b={scenario.training.micro_batch},s={m.seq_len},h={m.hidden},heads={m.heads},kv={m.num_kv_heads},"
            f"ffn={m.ffn},vocab={m.vocab},act={m.activation},tp={scenario.tp}")


@dataclass(frozen=True)
class OpTime:
    fwd: float
    bwd_input: float
    bwd_weight: float
    source: str  # "profile" or "analytical"


class ComputeModel:
    def __init__(self, scenario, profile=None):
        gpu = scenario.gpu
        self.gpu = gpu
        self.precision = scenario.training.precision
        # GEMMs outside Transformer Engine's FP8 linears, and attention, run 16-bit
        self.precision16 = "bf16" if self.precision == "fp8" else self.precision
        self.peak = gpu.peak_tflops(self.precision16) * 1e12
        self.peak_fp8 = gpu.peak_tflops("fp8") * 1e12 if self.precision == "fp8" else None
        self.hbm = gpu.hbm_tbps * 1e12
        self.gemm_eff = gemm_peak_efficiency(gpu, self.precision16)
        self.gemm_eff_fp8 = gemm_peak_efficiency(gpu, "fp8") if self.peak_fp8 else None
        self.profile = profile
        # profile rows: FP8 only for Transformer Engine's linears, 16-bit for everything else
        self.dtype = self.precision16

    def memory_time(self, nbytes: float) -> float:
        return nbytes / (self.hbm * MEMORY_EFFICIENCY) + KERNEL_OVERHEAD_S if nbytes > 0 else 0.0

    def roofline(self, flops: float, nbytes: float, gemm: tuple[int, int, int] | None = None,
                 fp8: bool = False, groups: int = 1) -> float:
        """`gemm`: the shape of one of `groups` GEMMs that share a kernel."""
        if flops <= 0 and nbytes <= 0:
            return 0.0
        peak, eff = (self.peak_fp8, self.gemm_eff_fp8) if fp8 else (self.peak, self.gemm_eff)
        if gemm is not None:
            eff *= gemm_shape_efficiency(*gemm, self.gpu.sms, groups)
        return max(flops / (peak * eff), nbytes / (self.hbm * MEMORY_EFFICIENCY)) + KERNEL_OVERHEAD_S

    def op_time(self, op) -> OpTime:
        measured = self._from_profile(op)
        if measured is not None:
            return measured
        if op.attention is not None:
            return self._fused_attention(op)
        # Backward of a GEMM reads about what its forward read (the other operand and the
        # output gradient) per half; a memory-bound op's backward reads the saved input and
        # the output gradient and writes the input gradient: twice the forward traffic.
        if op.fwd_flops > 0:
            shapes = _part_shapes(op)
            g = op.gemm_groups
            fwd = self.roofline(op.fwd_flops, op.fwd_bytes, shapes["fwd"], op.fp8, g)
            bi = self.roofline(op.bwd_input_flops, op.fwd_bytes, shapes["bwd_input"], op.fp8, g) \
                if op.bwd_input_flops else 0.0
            bw = self.roofline(op.bwd_weight_flops, op.fwd_bytes, shapes["bwd_weight"], op.fp8, g) \
                if op.bwd_weight_flops else 0.0
            cast_fwd, cast_bi = self._fp8_casts(op)
            fwd, bi = fwd + cast_fwd, bi + cast_bi
        else:
            fwd = self.roofline(0.0, op.fwd_bytes)
            bi, bw = self.roofline(0.0, 2 * op.fwd_bytes), 0.0
        return OpTime(fwd, bi, bw, "analytical")

    def _fp8_casts(self, op) -> tuple[float, float]:
        """Cast (and transpose) of an FP8 linear's input in forward and of its output gradient
        in backward; (0, 0) for a 16-bit op."""
        if not op.fp8_cast_bytes:
            return 0.0, 0.0
        _, n, k = op.gemm
        return self.memory_time(op.fp8_cast_bytes), self.memory_time(op.fp8_cast_bytes * (n / k if k else 1.0))

    def gemm_part_seconds(self, op, part: str, splits: int = 1) -> float:
        """One part ("fwd", "bwd_input", "bwd_weight") of a GEMM op run as `splits` GEMMs
        over slices of its rows, as Transformer Engine's userbuffer overlap runs it: each slice
        pays its own wave quantization."""
        shape = _part_shapes(op)[part]
        flops = {"fwd": op.fwd_flops, "bwd_input": op.bwd_input_flops, "bwd_weight": op.bwd_weight_flops}[part]
        rows, cols, depth = shape
        if part == "bwd_weight":  # wgrad slices its reduction dimension (the tokens)
            piece = (rows, cols, max(1, round(depth / splits)))
        else:
            piece = (max(1, round(rows / splits)), cols, depth)
        return splits * self.roofline(flops / splits, op.fwd_bytes / splits, piece, op.fp8, op.gemm_groups)

    def _fused_attention(self, op) -> OpTime:
        _, sq, _, head_dim = op.attention
        executed = op.fwd_flops * CAUSAL_EXECUTED
        io = op.fwd_bytes / (self.hbm * MEMORY_EFFICIENCY)
        fwd = max(executed / (self.peak * attention_efficiency(self.gpu, "fwd", sq, head_dim)), io)
        bwd = max(FLASH_BACKWARD_WORK * executed / (self.peak * attention_efficiency(self.gpu, "bwd", sq, head_dim)),
                  2 * io)
        return OpTime(fwd + KERNEL_OVERHEAD_S, bwd + KERNEL_OVERHEAD_S, 0.0, "analytical")

    def _from_profile(self, op) -> OpTime | None:
        """The op's time from the measured profile, or None when the profile lacks any part
        of it (then the whole op falls back to the roofline, never a mix)."""
        if self.profile is None:
            return None
        if op.attention is not None:
            bh, sq, sk, head_dim = op.attention
            fwd = self.profile.attention_seconds(1, bh, sq, head_dim, self.dtype, "fwd")
            bwd = self.profile.attention_seconds(1, bh, sq, head_dim, self.dtype, "bwd")
            if fwd is None or bwd is None:
                return None
            steps = sk / sq  # context parallelism: one causal sq x sq block per ring step on average
            return OpTime(fwd * steps, bwd * steps, 0.0, "profile")
        if op.gemm is not None and op.fwd_flops > 0:
            if op.gemm_groups > 1:
                return None  # profiles time single GEMMs, not a grouped kernel: the roofline prices it
            m, n, k = op.gemm
            dtype = "fp8" if op.fp8 else self.dtype
            fwd = self.profile.gemm_seconds(m, n, k, dtype, "fwd")
            if fwd is None:
                return None
            bwd = self.profile.gemm_seconds(m, n, k, dtype, "bwd")
            bwd = 2 * fwd if bwd is None else bwd
            # split the measured backward as its FLOPs split (input grad vs weight grad)
            total = op.bwd_input_flops + op.bwd_weight_flops
            share = op.bwd_input_flops / total if total else 1.0
            cast_fwd, cast_bi = self._fp8_casts(op)  # FP8 rows time the GEMMs alone
            return OpTime(fwd + cast_fwd, bwd * share + cast_bi, bwd * (1 - share), "profile")
        if op.kernels and op.numel > 0:
            fwd = bwd = 0.0
            for kernel in op.kernels:
                f = self.profile.op_seconds(kernel, int(op.numel), self.dtype, "fwd")
                if f is None:
                    return None
                b = self.profile.op_seconds(kernel, int(op.numel), self.dtype, "bwd")
                fwd += f
                bwd += f if b is None else b  # e.g. a residual add: one pass of the gradient
            return OpTime(fwd, bwd, 0.0, "profile")
        return None

    def describe(self, op_class: str = "compute: GEMMs") -> str:
        memory = f"memory-bound: {self.hbm / 1e12:.2f} TB/s x {MEMORY_EFFICIENCY:.2f} + {KERNEL_OVERHEAD_S * 1e6:.0f} us"
        if "flash" in op_class:
            return (f"fused causal attention: {CAUSAL_EXECUTED:.0%} of the model FLOPs executed (masked tiles "
                    f"skipped), backward {FLASH_BACKWARD_WORK}x; achieved TFLOP/s by sequence and head dim from "
                    f"FlashAttention-3 (arXiv:2407.08608) cuDNN figures{', scaled to FA2 on A100' if self.gpu.attention_family == 'ampere' else ''}"
                    f" x {self.gpu.sustained_clock('bf16'):.3f} sustained clock")
        if "FP8" in op_class:
            return (f"FP8 GEMMs: {self.peak_fp8 / 1e12:.0f} TFLOP/s x {self.gemm_eff_fp8:.3f} best-shape efficiency "
                    f"(MAMF burst x {self.gpu.sustained_clock('fp8'):.3f} sustained clock) x "
                    f"shape; + cast/transpose kernels ({memory}); LM head, attention and norms stay 16-bit")
        if "GEMMs" in op_class or "score matmuls" in op_class:
            return (f"roofline: {self.peak / 1e12:.0f} TFLOP/s x {self.gemm_eff:.3f} best-shape efficiency (MAMF "
                    f"burst x {self.gpu.sustained_clock(self.precision16):.3f} sustained clock) "
                    f"x wave/tile quantization over {self.gpu.sms} SMs (split-K <= {GEMM_MAX_SPLIT_K}) "
                    f"x k/(k+{GEMM_K_OVERHEAD})")
        return memory
