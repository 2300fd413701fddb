"""How long one op takes on one GPU: a measured profile when it has the op, else a roofline.

The analytical model is a roofline: time = max(FLOPs / (peak * GEMM efficiency),
bytes / (HBM bandwidth * memory efficiency)) + a per-kernel overhead. Its three constants
are physical, per GPU generation, and stated with their grounds below; nothing is fitted
to a validation row.
"""

from __future__ import annotations

from dataclasses import dataclass

# Fraction of the dense tensor-core peak that cuBLAS sustains on the large, well-aligned
# GEMMs of billion-parameter transformers. Assumption grounded in public measurements:
# Korthikanti et al. 2022 report 57% *model-wide* MFU (incl. communication, norms, softmax)
# on A100 for the 1T model, which bounds GEMM efficiency from below; large bf16 GEMMs on
# A100 are commonly benchmarked at 250-280 of 312 TFLOP/s (0.80-0.90). Hopper's larger
# peak is harder to saturate (H100 bf16 GEMMs run at ~650-750 of 989 TFLOP/s).
GEMM_EFFICIENCY = {"a100-40gb": 0.80, "a100-80gb": 0.80, "h100-sxm": 0.72, "h200": 0.72, "b200": 0.70}
DEFAULT_GEMM_EFFICIENCY = 0.75
# Fraction of the HBM datasheet bandwidth that unfused PyTorch elementwise / norm /
# softmax kernels reach. Assumption: streaming kernels reach ~90% of peak (STREAM-like
# copy), multi-operand PyTorch kernels less; 0.80 in between.
MEMORY_EFFICIENCY = 0.80
# Per-kernel fixed cost: launch latency and the ramp/tail of a kernel, a few microseconds
# on current GPUs (CUDA launch overhead is ~3-5 us when not hidden by the stream queue).
KERNEL_OVERHEAD_S = 3e-6


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
        self.precision = scenario.training.precision
        self.peak = gpu.peak_tflops(self.precision) * 1e12
        self.hbm = gpu.hbm_tbps * 1e12
        self.gemm_eff = GEMM_EFFICIENCY.get(gpu.name, DEFAULT_GEMM_EFFICIENCY)
        self.profile = profile
        self.dtype = {"bf16": "bfloat16", "fp16": "float16", "fp8": "float8", "fp32": "float32"}[self.precision]

    def roofline(self, flops: float, nbytes: float) -> float:
        if flops <= 0 and nbytes <= 0:
            return 0.0
        return max(flops / (self.peak * self.gemm_eff), nbytes / (self.hbm * MEMORY_EFFICIENCY)) + KERNEL_OVERHEAD_S

    def op_time(self, op) -> OpTime:
        measured = self._from_profile(op)
        if measured is not None:
            return measured
        # Backward of a GEMM reads about what its forward read (the other operand and the
        # output gradient) per half; a memory-bound op's backward reads the saved input and
        # the output gradient and writes the input gradient: twice the forward traffic.
        if op.fwd_flops > 0:
            fwd = self.roofline(op.fwd_flops, op.fwd_bytes)
            bi = self.roofline(op.bwd_input_flops, op.fwd_bytes) if op.bwd_input_flops else 0.0
            bw = self.roofline(op.bwd_weight_flops, op.fwd_bytes) if op.bwd_weight_flops else 0.0
        else:
            fwd = self.roofline(0.0, op.fwd_bytes)
            bi, bw = self.roofline(0.0, 2 * op.fwd_bytes), 0.0
        return OpTime(fwd, bi, bw, "analytical")

    def _from_profile(self, op) -> OpTime | None:
        """The op's time from the measured profile, or None when the profile lacks any part
        of it (then the whole op falls back to the roofline, never a mix)."""
        if self.profile is None:
            return None
        if op.gemm is not None and op.fwd_flops > 0:
            m, n, k = op.gemm
            fwd = self.profile.gemm_seconds(m, n, k, self.dtype, "fwd")
            if fwd is None:
                return None
            bwd = self.profile.gemm_seconds(m, n, k, self.dtype, "bwd")
            bwd = 2 * fwd if bwd is None else bwd
            # split the measured backward as its FLOPs split (input grad vs weight grad)
            total = op.bwd_input_flops + op.bwd_weight_flops
            share = op.bwd_input_flops / total if total else 1.0
            return OpTime(fwd, bwd * share, bwd * (1 - share), "profile")
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

    def describe(self) -> str:
        return (f"roofline: {self.peak / 1e12:.0f} TFLOP/s x {self.gemm_eff:.2f} GEMM efficiency, "
                f"{self.hbm / 1e12:.2f} TB/s x {MEMORY_EFFICIENCY:.2f}, {KERNEL_OVERHEAD_S * 1e6:.0f} us per kernel")
