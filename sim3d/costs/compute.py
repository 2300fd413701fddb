"""How long one op takes on one GPU: a measured profile when it has the op, else the analytical
models of its kernels: GEMMs (costs/gemm.py: tile and wave quantization, k-loop overhead,
memory roofline), fused attention (costs/attention.py: CTAs over the SMs, causal triangle,
per-CTA cost) and memory-bound kernels (bytes over the HBM bandwidth).

Every constant is physical, per GPU generation, and stated with its source where it is
defined; nothing is fitted to a validation row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .attention import FAMILIES, attention_seconds, kernel_family
from .gemm import (GEMM_K_OVERHEAD, GEMM_K_OVERHEAD_FP8, GEMM_MAX_SPLIT_K, KERNEL_OVERHEAD_S, MEMORY_EFFICIENCY,
                   gemm_peak_efficiency, gemm_shape_efficiency)


# Transformer Engine's grouped linear (a rank's experts under Megatron's moe_grouped_gemm) runs
# one cuBLAS GEMM per expert, round-robin over 4 compute streams (TE v2.9
# common/gemm/cublaslt_gemm.cu, multi_stream_cublas_gemm, reached from nvte_multi_tensor_gemm
# except on Hopper with NVTE_USE_CUTLASS_GROUPED_GEMM set; common/util/multi_stream.cpp:
# num_compute_streams = 4): at most 4 experts' tiles share the SMs at a time, and every GEMM
# is a launch of its own. Other stacks (torch._grouped_mm) run the experts as one kernel.
TE_GEMM_STREAMS = 4
# `training.kernels.attention` -> the profile rows that time it (calibrate/kernels.py: SDPA's
# default dispatch, or one backend forced); fa3 and triton have none
PROFILE_ATTENTION_ROWS = {"default": "attention", "fa2": "attention.flash", "cudnn": "attention.cudnn"}


def _part_shapes(op) -> dict[str, tuple[int, int, int] | None]:
    """The shape each part of a GEMM op tiles, per group: forward [m x k] @ [k x n], dgrad
    [m x n] @ [n x k], wgrad [k x m] @ [m x n]; a group owns m / groups of the rows (the
    reduction depth of its wgrad)."""
    if op.gemm is None:
        return {"fwd": None, "bwd_input": None, "bwd_weight": None}
    m, n, k = op.gemm
    rows = max(1, round(m / op.gemm_groups))
    return {"fwd": (rows, n, k), "bwd_input": (rows, k, n), "bwd_weight": (k, n, rows)}


def memory_bytes(op) -> tuple[float, float]:
    """HBM bytes a memory-bound op moves forward and backward: its kernels' where the stack
    lists them (model/kernel_stack.py), else its forward's traffic and twice that backward (the
    saved input and the output gradient read, the input gradient written)."""
    if op.kernel_bytes is not None:
        return float(sum(op.kernel_bytes[0])), float(sum(op.kernel_bytes[1]))
    return op.fwd_bytes, 2 * op.fwd_bytes


def is_memory_bound(op) -> bool:
    return op.attention is None and op.fwd_flops <= 0 and any(memory_bytes(op))


def block_numel(ops) -> int:
    """The elements of a block's largest memory-bound op: the size a traced block's memory rate
    is looked up by (costs/trace_memory.py writes it, `ComputeModel.block_times` reads it)."""
    return int(max((op.numel for op in ops if is_memory_bound(op)), default=0))


def op_class(op) -> str:
    """The kind of price an op gets, as `--explain` lists it ("compute: " + this)."""
    if op.attention is not None:
        return "attention (flash: fused kernel)"
    if op.gemm is not None:
        if op.name.startswith("attn_"):
            return "attention (unfused: score matmuls)"
        return "GEMMs (FP8, Transformer Engine linears)" if op.fp8 else "GEMMs (16-bit)"
    return "+".join(op.kernels) if op.kernels else "other"


def block_shape(scenario, with_cp: bool = True) -> str:
    """Key of a measured block (calibrate/blocks.py): every dimension its time depends on.
    Without `with_cp`: the key of its parameters, which context parallelism does not split."""
    m = scenario.model
    return (f"b={scenario.training.micro_batch},s={m.seq_len},h={m.hidden},heads={m.heads},kv={m.num_kv_heads},"
            f"ffn={m.ffn},vocab={m.vocab},act={m.activation},tp={scenario.tp}"
            + (f",cp={scenario.cp}" if scenario.cp > 1 and with_cp else ""))


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
        self.gemm_streams = TE_GEMM_STREAMS if scenario.training.kernels.stack == "te" else None
        # the flash kernel: the GPU's own (FlashAttention-2 / cuDNN) or one named (attention.py)
        kernel = scenario.training.kernels.attention
        self.attention_family = kernel_family(gpu.attention_family, kernel)
        # the profile rows of that kernel: SDPA's default dispatch for the GPU's own, the
        # rows with a backend forced for one named (calibrate/kernels.py); none for the others
        self.attention_rows = PROFILE_ATTENTION_ROWS.get(kernel)
        # profile rows: FP8 only for Transformer Engine's linears, 16-bit for everything else
        self.dtype = self.precision16
        self.mask = scenario.training.kernels.mask
        # an op's time is asked for once per action kind (F, B, BI, BW) of each block it is in
        self._op_times: dict = {}

    def memory_time(self, nbytes: float) -> float:
        return nbytes / (self.hbm * MEMORY_EFFICIENCY) + KERNEL_OVERHEAD_S if nbytes > 0 else 0.0

    def roofline(self, flops: float, nbytes: float, gemm: tuple[int, int, int] | None = None,
                 fp8: bool = False, groups: int = 1, rate: float = 1.0) -> float:
        """`gemm`: the shape of one of `groups` GEMMs (a rank's experts): one grouped kernel, or
        under Transformer Engine one GEMM each, `gemm_streams` at a time (TE_GEMM_STREAMS)."""
        if flops <= 0 and nbytes <= 0:
            return 0.0
        peak, eff = (self.peak_fp8, self.gemm_eff_fp8 * rate) if fp8 else (self.peak, self.gemm_eff)
        together = min(groups, self.gemm_streams or groups)
        if gemm is not None:
            eff *= gemm_shape_efficiency(*gemm, self.gpu.sms, together, "fp8" if fp8 else self.precision16,
                                         tile=self.gpu.gemm_tile)
        launches = math.ceil(groups / together)  # each concurrent round pays one kernel's fixed cost
        return max(flops / (peak * eff), nbytes / (self.hbm * MEMORY_EFFICIENCY)) + KERNEL_OVERHEAD_S * launches

    def op_time(self, op) -> OpTime:
        known = self._op_times.get(op)
        if known is None:
            known = self._op_times[op] = self._op_time(op)
        return known

    def _op_time(self, op) -> OpTime:
        measured = self._from_profile(op)
        if measured is not None:
            return measured
        if op.attention is not None:
            return self._fused_attention(op)
        # Backward of a GEMM reads about what its forward read (the other operand and the
        # output gradient) per half; a memory-bound op's: memory_bytes.
        if op.fwd_flops > 0:
            shapes = _part_shapes(op)
            g = op.gemm_groups
            fwd = self.roofline(op.fwd_flops, op.fwd_bytes, shapes["fwd"], op.fp8, g, op.fp8_fwd_rate)
            bi = self.roofline(op.bwd_input_flops, op.fwd_bytes, shapes["bwd_input"], op.fp8, g) \
                if op.bwd_input_flops else 0.0
            bw = self.roofline(op.bwd_weight_flops, op.fwd_bytes, shapes["bwd_weight"], op.fp8 and op.fp8_weight_grad, g) \
                if op.bwd_weight_flops else 0.0
            cast_fwd, cast_bi = self.fp8_casts(op)
            fwd, bi = fwd + cast_fwd, bi + cast_bi
        elif op.kernel_bytes is not None:  # kernel by kernel, each paying its launch (model/kernel_stack.py)
            fwd_kernels, bwd_kernels = op.kernel_bytes
            fwd, bi, bw = sum(map(self.memory_time, fwd_kernels)), sum(map(self.memory_time, bwd_kernels)), 0.0
        else:
            fwd_bytes, bwd_bytes = memory_bytes(op)
            fwd, bi, bw = self.roofline(0.0, fwd_bytes), self.roofline(0.0, bwd_bytes), 0.0
        return OpTime(fwd, bi, bw, "analytical")

    def block_times(self, ops, block: str | None = None) -> tuple[list[OpTime], bool]:
        """Each op's time, and whether the block's memory-bound ops are at the rate a traced run
        of the stack moved their bytes (`Profile.block_memory_rate`, costs/trace_memory.py):
        where the profile has one for `block` ("layer" or "head")."""
        times = [self.op_time(op) for op in ops]
        if self.profile is None or block is None:
            return times, False
        numel = block_numel(ops)
        rates = [self.profile.block_memory_rate(block, numel, self.dtype, p) for p in ("fwd", "bwd")] if numel else []
        if not rates or None in rates:
            return times, False
        return [OpTime(*(b / r for b, r in zip(memory_bytes(op), rates)), 0.0, "profile") if is_memory_bound(op)
                else t for op, t in zip(ops, times)], True

    def fp8_casts(self, op) -> tuple[float, float]:
        """The kernels an FP8 linear's recipe scales and casts its operands with, forward and
        backward (model/fp8_recipes.py); (0, 0) for a 16-bit op."""
        fwd, bwd = op.fp8_kernels
        return sum(map(self.memory_time, fwd)), sum(map(self.memory_time, bwd))

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
        fp8 = op.fp8 and (part != "bwd_weight" or op.fp8_weight_grad)
        rate = op.fp8_fwd_rate if part == "fwd" else 1.0
        return splits * self.roofline(flops / splits, op.fwd_bytes / splits, piece, fp8, op.gemm_groups, rate)

    def _fused_attention(self, op) -> OpTime:
        """Context parallelism runs one causal sq x sq block per ring step on average, as the
        profile path prices it."""
        bh, sq, sk, head_dim = op.attention
        steps = sk / sq
        fwd, bwd = (attention_seconds(self.gpu, bh, sq, head_dim, direction, causal=op.causal,
                                      nbytes=op.fwd_bytes / steps, family=self.attention_family)
                    for direction in ("fwd", "bwd"))
        return OpTime(fwd * steps, bwd * steps, 0.0, "analytical")

    def _unmasked_over_causal(self, op, direction: str) -> float:
        """How much longer the kernel runs without its causal flag (a materialized mask) than
        with it: profiles time causal calls, so their rows are scaled by the analytical ratio."""
        if op.causal:
            return 1.0
        bh, sq, _, head_dim = op.attention
        causal, unmasked = (attention_seconds(self.gpu, bh, sq, head_dim, direction, causal=c,
                                              family=self.attention_family) for c in (True, False))
        return unmasked / causal

    def _from_profile(self, op) -> OpTime | None:
        """The op's time from the measured profile, or None when the profile lacks any part
        of it (then the whole op falls back to the roofline, never a mix)."""
        if self.profile is None:
            return None
        if op.attention is not None:
            if self.attention_rows is None:
                return None  # no profile rows time the kernel named (FA3, Triton)
            bh, sq, sk, head_dim = op.attention
            fwd = self.profile.attention_seconds(1, bh, sq, head_dim, self.dtype, "fwd", self.attention_rows)
            bwd = self.profile.attention_seconds(1, bh, sq, head_dim, self.dtype, "bwd", self.attention_rows)
            if fwd is None or bwd is None:
                return None
            steps = sk / sq  # context parallelism: one causal sq x sq block per ring step on average
            fwd, bwd = fwd * self._unmasked_over_causal(op, "fwd"), bwd * self._unmasked_over_causal(op, "bwd")
            return OpTime(fwd * steps, bwd * steps, 0.0, "profile")
        if op.gemm is not None and op.fwd_flops > 0:
            if op.gemm_groups > 1:
                return None  # profiles time single GEMMs, not a grouped kernel: the roofline prices it
            if op.fp8 and (op.fp8_fwd_rate != 1.0 or not op.fp8_weight_grad):
                return None  # FP8 rows time cuBLAS's tensor-wise GEMMs, not a row-wise recipe's mix
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
            cast_fwd, cast_bi = self.fp8_casts(op)  # FP8 rows time the GEMMs alone
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

    def _power_note(self) -> str:
        limit = self.gpu.power_limit_w
        return "" if limit is None else f" at a {limit:g} W power limit, x {self.gpu.power_clock_factor():.3f} of the rated"

    def describe(self, kind: str = "compute: GEMMs") -> str:
        memory = f"memory-bound: {self.hbm / 1e12:.2f} TB/s x {MEMORY_EFFICIENCY:.2f} + {KERNEL_OVERHEAD_S * 1e6:.0f} us"
        if "flash" in kind:
            family = self.attention_family
            masked = ("masked blocks skipped" if self.mask == "causal" else
                      "every block computed (a materialized mask: no causal flag), K and V repeated to every head")
            return (f"fused {'causal ' if self.mask == 'causal' else ''}attention: {self.gpu.sms} SMs run one CTA per "
                    f"128-query (forward) or 128-key (backward) block, {masked}; {family.fwd_efficiency:.3f} / "
                    f"{family.bwd_efficiency:.3f} of the peak inside a CTA (forward / backward, head dim 128), "
                    f"+ {family.fwd_cta_blocks:.1f} / {family.bwd_cta_blocks:.1f} blocks per CTA ({family.source})"
                    f" x {self.gpu.sustained_clock('bf16'):.3f} sustained clock{self._power_note()}")
        if "FP8" in kind:
            return (f"FP8 GEMMs: {self.peak_fp8 / 1e12:.0f} TFLOP/s x {self.gemm_eff_fp8:.3f} best-shape efficiency "
                    f"(MAMF burst x {self.gpu.sustained_clock('fp8'):.3f} sustained clock{self._power_note()}) x "
                    f"shape (k/(k+{GEMM_K_OVERHEAD_FP8})); + cast/transpose kernels ({memory}); LM head, attention "
                    f"and norms stay 16-bit")
        if "GEMMs" in kind or "score matmuls" in kind:
            return (f"roofline: {self.peak / 1e12:.0f} TFLOP/s x {self.gemm_eff:.3f} best-shape efficiency (MAMF "
                    f"burst x {self.gpu.sustained_clock(self.precision16):.3f} sustained clock{self._power_note()}) "
                    f"x wave/tile quantization over {self.gpu.sms} SMs (split-K <= {GEMM_MAX_SPLIT_K}) "
                    f"x k/(k+{GEMM_K_OVERHEAD})")
        return memory
