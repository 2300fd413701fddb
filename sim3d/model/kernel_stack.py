"""The memory-bound kernels a layer launches under each `training.kernels.stack`, as the bytes
each kernel moves through HBM (the cost model prices every kernel as its bytes over the
achievable bandwidth plus a launch; costs/compute.py).

`te` (the default) keeps ops.py's counts: one fused kernel per op, its backward moving twice
its forward (Transformer Engine's LayerNormLinear, bias-GeLU and bias-dropout-add fusions).
`compiled` keeps them too: Inductor fuses each pointwise chain into one kernel that reads its
inputs and writes its outputs once, which is what those counts are.

`eager` is plain PyTorch: one ATen kernel per operator, and autograd's own kernels
(`eager_ops`). E is the elements of the op's main tensor, `ab` bytes each (2 in bf16):

* LayerNorm (aten/src/ATen/native/cuda/layer_norm_kernel.cu): forward one kernel, read x write
  y (2E); backward two: the input gradient reads dy and x and writes dx (3E), the weight and
  bias gradients read dy and x again (2E). RMSNorm is priced the same way (an assumption: its
  eager form is a chain of pointwise ops at least this long).
* residual add: forward reads both operands and writes the sum (3E); its backward passes the
  gradient through, but the residual stream that fed both the branch and the add receives two
  gradients, which autograd sums (torch/csrc/autograd/input_buffer.cpp, InputBuffer::add):
  read 2E, write E.
* dropout then add: two kernels forward (native_dropout: read E, write E and a 1-byte mask;
  then the add), and backward the gradient sum and the dropout's masked scale.
* GeLU / squared ReLU: forward read x write y (2F); backward gelu_backward reads dy and x and
  writes dx (3F).
* SwiGLU, silu(gate) * up: forward silu (2F) then mul (3F); backward two products for the two
  factors (3F each) and silu_backward (3F).
* rotary embedding as torchtitan writes it (models/llama3/model.py, apply_rotary_emb):
  `x.float()` (read 2, write 4 bytes per element), a complex multiply in fp32 (read 4, write
  4), `.type_as(x)` (read 4, write 2); the backward runs the same three.
* around a flash attention fed by one QKV GEMM: the forward splits Q, K, V as views, so the
  backward's SplitBackward concatenates dQ, dK, dV into the QKV gradient (read and write
  them once); Transformer Engine's fused attention writes the packed gradient itself.
* biased linears (GPT-style blocks): the bias gradient is a reduction over the tokens of the
  output gradient (tools/autograd/derivatives.yaml, addmm: the bias's gradient summed to its
  shape), one kernel reading it per linear; Transformer Engine takes it from the GEMM's
  epilogue. The forward bias rides in cuBLASLt's epilogue in both (aten/src/ATen/native/cuda/
  Blas.cpp, addmm with a 1-D bias), so it costs no kernel here.
"""

from __future__ import annotations

from dataclasses import replace

from .op import Op

MASK = 1  # dropout's mask: one byte per element (ops.MASK_BYTES)
ROPE_FP32 = 4  # apply_rotary_emb computes in fp32 (`.float()`)
BIASED = ("qkv", "out_proj", "mlp_up", "mlp_down")  # the linears of a GPT-style block


def _eager_sequence(op, ab: int) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """(forward, backward) bytes of each eager kernel of a memory-bound op, or None when eager
    PyTorch runs it as ops.py counts it (softmax, embedding, cross-entropy, MoE dispatch)."""
    e, kinds = op.numel, op.kernels
    if kinds in (("layernorm",), ("rmsnorm",)):
        return (2 * e * ab,), (3 * e * ab, 2 * e * ab)
    if kinds == ("add",):
        return (3 * e * ab,), (3 * e * ab,)
    if kinds == ("dropout", "add"):
        return (2 * e * ab + MASK * e, 3 * e * ab), (3 * e * ab, 2 * e * ab + MASK * e)
    if kinds in (("gelu",), ("squared_relu",)):
        return (2 * e * ab,), (3 * e * ab,)
    if kinds == ("swiglu",):
        f = e / 2  # the op counts gate and up together
        return (2 * f * ab, 3 * f * ab), (3 * f * ab, 3 * f * ab, 3 * f * ab)
    if kinds == ("rope",):
        cast = e * (ab + ROPE_FP32)
        rotate = 2 * e * ROPE_FP32
        return (cast, rotate, cast), (cast, rotate, cast)
    return None


def _backward_only(name: str, kernels: tuple[float, ...], numel: float):
    return Op(name, kernels=(name,), numel=numel, kernel_bytes=((), kernels))


def eager_ops(ops: list, d) -> list:
    """The layer's ops as eager PyTorch runs them: memory-bound ops carry their kernels' bytes,
    and autograd's extra kernels (the QKV split's concatenation, the bias gradients) follow
    the op whose backward launches them."""
    out = []
    for op in ops:
        if op.fwd_flops == 0 and op.attention is None and (seq := _eager_sequence(op, d.ab)) is not None:
            op = replace(op, kernel_bytes=seq)
        out.append(op)
        if op.attention is not None and op.name == "core_attention":
            qkv = d.b * d.sl * (d.q_dim + 2 * d.kv_dim) / d.tp
            out.append(_backward_only("qkv_split_grad", (2 * qkv * d.ab,), qkv))
        if d.gpt_style and op.name in BIASED and op.gemm is not None:
            m, n, _ = op.gemm
            out.append(_backward_only(f"{op.name}_bias_grad", (m * n * d.ab,), m * n))
    return out
