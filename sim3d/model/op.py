"""One op's record: the work of one rank for one micro-batch (ops.py builds a layer's ops;
kernel_stack.py adds the kernels eager PyTorch launches)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Op:
    """Per-RANK work of one op for one micro-batch (bytes and FLOPs, SI units).

    fwd_flops / bwd_input_flops / bwd_weight_flops: matmul FLOPs of the forward, the
    input-gradient (BI) and weight-gradient (BW) halves of the backward.
    fwd_bytes: HBM traffic of the forward (operands read + result written), for a roofline.
    act_bytes: bytes this op keeps alive from its forward to its backward.
    comm / bwd_comm: collective at the op's output boundary in forward / backward
      ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "ring") or None.
    comm_bytes / bwd_comm_bytes: buffer size of those collectives; group: "tp", "cp" or "ep".
    recompute_selective: recomputed under selective recomputation (Korthikanti section 5:
      the core attention, QK^T through AV).
    gemm: (m, n, k) of the op's matrix product, [m x k] @ [k x n] (batched products are
      flattened into m), so a calibration profile can look the shape up.
    gemm_groups: the product is that many independent GEMMs, each with its own [k x n] weight
      and m / groups of the rows: a rank's local experts (one grouped-GEMM kernel).
    kernels / numel: the elementwise kernels the op launches (calibration profile names:
      layernorm, rmsnorm, softmax, dropout, add, gelu, swiglu, embedding, cross_entropy) and
      the elements of their main tensor.
    attention: a fused (flash) attention kernel's shape; its backward recomputes the scores.
    """

    name: str
    fwd_flops: float = 0.0
    bwd_input_flops: float = 0.0
    bwd_weight_flops: float = 0.0
    fwd_bytes: float = 0.0
    act_bytes: float = 0.0
    comm: str | None = None
    comm_bytes: float = 0.0
    group: str | None = None
    recompute_selective: bool = False
    bwd_comm: str | None = None
    bwd_comm_bytes: float = 0.0
    gemm: tuple[int, int, int] | None = None
    gemm_groups: int = 1
    kernels: tuple[str, ...] = ()
    numel: float = 0.0
    fp8: bool = False  # a linear whose GEMMs run on FP8 tensor cores (training.precision: fp8)
    # (forward, backward) bytes of each kernel its FP8 recipe scales and casts operands with
    # (model/fp8_recipes.py), whether its weight-gradient GEMM is FP8 too, and its forward GEMM
    # kernel's speed relative to cuBLAS's tensor-wise one
    fp8_kernels: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    fp8_weight_grad: bool = True
    fp8_fwd_rate: float = 1.0
    attention: tuple[int, int, int, int] | None = None  # fused attention kernel: (batch*heads, s_q, s_k, head_dim)
    causal: bool = True  # the attention kernel skips the key blocks a causal mask hides (training.kernels.mask)
    # (forward, backward) bytes of each kernel the op launches, when the kernel stack prices it
    # kernel by kernel (model/kernel_stack.py: eager PyTorch); None: one kernel each way, the
    # backward moving twice the forward's bytes
    kernel_bytes: tuple[tuple[float, ...], tuple[float, ...]] | None = None

    @property
    def flops(self) -> float:
        return self.fwd_flops + self.bwd_input_flops + self.bwd_weight_flops
