"""The pieces every op list of ops.py is built from (a GEMM, a memory-bound op, a residual, a
tensor-parallel boundary, the CP ring's exchange) and the byte widths they keep, in ops.py's
conventions; `d` is an ops.Dims."""

from __future__ import annotations

from .fp8_recipes import fp8_linear
from .op import Op

FP8_BYTES = 1
MASK_BYTES = 1  # dropout masks are stored as one byte per element (Korthikanti section 4.1)
LOGIT_BYTES = 4  # the vocab-parallel cross-entropy keeps fp32 logits (Korthikanti section 4.3)
LSE_BYTES = 4  # FlashAttention keeps one fp32 log-sum-exp per query and head for its backward


def _gemm(name: str, d, tokens: float, k: float, n: float, *, act: float = 0.0, te_linear: bool = True,
          comm=None, comm_bytes=0.0, group=None, bwd_comm=None, bwd_comm_bytes=None, groups: int = 1) -> Op:
    """[tokens x k] @ [k x n] with a weight: forward 2*tokens*k*n, BI and BW the same.
    `te_linear`: a linear of the transformer layer, the only GEMMs that run in FP8 (the LM head
    and the router stay 16-bit, outside TE's fp8_autocast and torchtitan's converted modules).
    `groups`: the tokens are spread over that many [k x n] weights (experts), each read once."""
    f = 2.0 * tokens * k * n
    # torchao converts nn.Linear modules only (torchtitan's float8 converter): a rank's experts,
    # one grouped GEMM, stay 16-bit under its recipes; Transformer Engine's GroupedLinear is FP8
    fp8 = te_linear and d.precision == "fp8" and (groups == 1 or d.fp8_recipe == "te")
    operand = FP8_BYTES if fp8 else d.ab
    traffic = operand * (tokens * k + groups * k * n) + d.ab * tokens * n
    recipe = fp8_linear(d.fp8_recipe, d.stack, tokens, k, n, groups, d.fp8_weight_shards) if fp8 else None
    return Op(name, f, f, f, traffic, act, comm, comm_bytes, group, False, bwd_comm,
              comm_bytes if bwd_comm_bytes is None else bwd_comm_bytes, gemm=(round(tokens), round(n), round(k)),
              gemm_groups=groups, fp8=fp8,
              fp8_kernels=(recipe.fwd_kernels, recipe.bwd_kernels) if recipe else ((), ()),
              fp8_weight_grad=recipe.weight_grad_fp8 if recipe else True,
              fp8_fwd_rate=recipe.fwd_gemm_rate if recipe else 1.0)


def _elementwise(name: str, d, elems: float, *, act: float = 0.0, passes: int = 2,
                 selective=False, comm=None, comm_bytes=0.0, group=None, bwd_comm=None,
                 kernels: tuple[str, ...] = ()) -> Op:
    """Memory-bound op reading and writing `elems` 16-bit values (`passes` tensors)."""
    return Op(name, 0.0, 0.0, 0.0, passes * elems * d.ab, act, comm, comm_bytes, group,
              selective, bwd_comm, comm_bytes, kernels=kernels, numel=elems)


def _norm(d) -> tuple[str, ...]:
    return ("rmsnorm",) if d.gated else ("layernorm",)


def _activation(d) -> tuple[str, ...]:
    return ("squared_relu",) if d.activation == "squared-relu" else ("swiglu",) if d.gated else ("gelu",)


def _residual(name: str, d, elems: float) -> Op:
    """Residual add, with the hidden dropout before it when enabled (keeps its 1-byte mask)."""
    if d.hidden_dropout:
        return _elementwise(name, d, elems, act=MASK_BYTES * elems, passes=3, kernels=("dropout", "add"))
    return _elementwise(name, d, elems, passes=3, kernels=("add",))


def _tp_boundary(d, into_parallel: bool) -> dict:
    """Collective where a replicated/sequence-sharded region meets a TP region.

    Entering a column-parallel GEMM: without SP forward is identity and backward all-reduces
    the input gradient (Megatron's f); with SP forward all-gathers the sequence and backward
    reduce-scatters. Leaving a row-parallel GEMM: without SP forward all-reduces (g); with SP
    forward reduce-scatters and backward all-gathers. Bytes = the full b*s*h activation.
    """
    if d.tp == 1:
        return {}
    full = d.b * d.sl * d.h * d.ab
    if d.sp:
        fwd, bwd = ("all-gather", "reduce-scatter") if into_parallel else ("reduce-scatter", "all-gather")
    else:
        fwd, bwd = (None, "all-reduce") if into_parallel else ("all-reduce", None)
    return dict(comm=fwd, bwd_comm=bwd, comm_bytes=full, group="tp")


def _linear_input_bytes(d) -> int:
    """Bytes per element a transformer layer's linear keeps of its input for the backward:
    under Transformer Engine's FP8 the quantized copy it ran on (TransformerEngine v2.9
    pytorch/module/linear.py saves `inputmat` after quantizing it; layernorm_mlp.py its FP8
    ln_out and act_out), else the 16-bit tensor (torchao's Float8Linear saves `input_hp`:
    float8/float8_linear.py, matmul_with_hp_or_float8_args)."""
    return _quantized_copy_bytes(d) or d.ab


def _quantized_copy_bytes(d) -> int:
    """Bytes per element of the FP8 copy a Transformer Engine linear keeps of its input (0
    without one: 16-bit training, or torchao, which keeps the 16-bit input)."""
    return FP8_BYTES if d.precision == "fp8" and d.fp8_recipe == "te" else 0


def _cp_ring(d) -> dict:
    """Ring attention (Megatron/TE context parallelism): each of the cp-1 steps passes the
    local K and V chunk to the next rank; backward passes K, V and their gradients (2x)."""
    kv = d.b * d.sl * sum(d.kv_widths) / d.tp * d.ab * (d.cp - 1)
    return dict(comm="ring", comm_bytes=kv, group="cp", bwd_comm="ring", bwd_comm_bytes=2 * kv)
