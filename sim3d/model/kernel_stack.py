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
  bias gradients read dy and x again (2E).
* RMSNorm as Hugging Face transformers writes it (models/llama/modeling_llama.py,
  LlamaRMSNorm.forward): `x.to(float32)`, `pow(2)`, `mean(-1)`, `+ eps`, `rsqrt`, `x * r`,
  `.to(bf16)`, `weight * y`: eight kernels, four of them over fp32 tensors (`rmsnorm_chain`).
  Its backward is autograd's formula for each (tools/autograd/derivatives.yaml; pow_backward
  in FunctionsManual.cpp computes grad * (2 * x.pow(1)): a copy, a scale and a product), and
  the fp32 input's two gradients are summed (InputBuffer::add). torch.nn.RMSNorm runs one
  fused kernel each way on CUDA in recent PyTorch (pytorch/pytorch#153666; the 2.13 build's
  ATen has _fused_rms_norm_cuda and its backward), so a stack that uses it is priced as
  LayerNorm (`training.kernels.norm: fused`).
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
* the cross-entropy: as `training.kernels.loss` says, whatever the stack (model/loss_kernels.py).
* the embedding's backward (aten/src/ATen/native/cuda/Embedding.cu,
  embedding_dense_backward_cuda): a zero-filled gradient of the whole vocabulary shard, into
  which the tokens' gradients are summed by sorted segments (in fp32, written once). Under
  `compiled` Inductor decomposes it instead (torch/_decomp/decompositions.py,
  embedding_dense_backward, used on CUDA by torch/_inductor/decomposition.py): an fp32 zero
  gradient, the upcast token gradients added into it by atomic read-modify-writes, and a cast
  of the whole table back to the weights' width (`compiled_ops`).
* gradient accumulation: under torch autograd (eager and compiled alike: the graph ends at the
  parameters) each parameter's gradient of a micro-batch is handed to AccumulateGrad, which
  keeps the first and adds every later one into `.grad`: read both, write one
  (torch/csrc/autograd/functions/accumulate_grad.h). Megatron's weight-gradient GEMMs
  accumulate into main_grad in their epilogue instead (gradient_accumulation_fusion), so `te`
  pays nothing unless `kernels.grad_accumulation` names another way (`accumulation_bytes`).
* biased linears (GPT-style blocks): the bias gradient is a reduction over the tokens of the
  output gradient (tools/autograd/derivatives.yaml, addmm: the bias's gradient summed to its
  shape), one kernel reading it per linear; Transformer Engine takes it from the GEMM's
  epilogue. The forward bias rides in cuBLASLt's epilogue in both (aten/src/ATen/native/cuda/
  Blas.cpp, addmm with a 1-D bias), so it costs no kernel here.
* context parallelism as PyTorch runs it (torch/distributed/tensor/experimental/_attention.py,
  which torchtitan's `context_parallel_degree` uses: `_templated_ring_attention`, `_SDPAMerger`,
  `_templated_ring_attention_backward`, round-robin load balancing, fp32 merges): every ring
  step's attention output is merged into a running fp32 output in separate kernels after the
  SDPA call, on the same stream (`ring_merge`). Transformer Engine's ring corrects its output
  on a second stream beside the next step's attention, so `te` adds nothing here.
"""

from __future__ import annotations

from dataclasses import replace

from ..scenario.sharding import ShardingPlan
from .op import Op

MASK = 1  # dropout's mask: one byte per element (ops.MASK_BYTES)
ROPE_FP32 = 4  # apply_rotary_emb computes in fp32 (`.float()`)
FP32 = 4  # the upcast intermediates of RMSNorm's and the loss's eager chains
BIASED = ("qkv", "out_proj", "mlp_up", "mlp_down")  # the linears of a GPT-style block


def rmsnorm_chain(e: float, rows: float, ab: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(forward, backward) bytes of each kernel of LlamaRMSNorm's eager chain over `e` elements
    in `rows` rows (one statistic each, fp32)."""
    f, r = FP32, FP32 * rows
    forward = (e * (ab + f),            # x.to(float32)
               2 * f * e,               # pow(2)
               f * e + r,               # mean(-1)
               2 * r, 2 * r,            # + eps, rsqrt
               2 * f * e + r,           # x * r
               e * (f + ab),            # .to(bf16)
               2 * ab * e)              # weight * y
    backward = (2 * ab * e,             # dy * weight
                3 * ab * e, ab * e,     # the weight's gradient: dy * y, summed over rows
                e * (ab + f),           # back to fp32
                2 * f * e + r,          # dx = g * r
                3 * f * e, f * e + r,   # dr = sum(g * x) over each row
                6 * r,                  # rsqrt's and the mean's scalar backward
                f * e + r,              # mean's gradient spread over the row
                2 * f * e, 2 * f * e, 3 * f * e,  # pow's: x.pow(1), times 2, times the gradient
                3 * f * e,              # the two gradients of the fp32 x summed
                e * (f + ab))           # back to the input's width
    return forward, backward


def _eager_sequence(op, d) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """(forward, backward) bytes of each eager kernel of a memory-bound op, or None when eager
    PyTorch runs it as ops.py counts it (softmax, embedding, MoE dispatch; the loss as
    `training.kernels.loss` says, model/loss_kernels.py)."""
    e, kinds, ab = op.numel, op.kernels, d.ab
    if kinds == ("rmsnorm",) and d.norm == "composite":
        return rmsnorm_chain(e, e / d.h, ab)
    if kinds in (("layernorm",), ("rmsnorm",)):
        return (2 * e * ab,), (3 * e * ab, 2 * e * ab)
    if kinds == ("embedding",):
        table = d.vocab / d.tp * d.h
        return (2 * e * ab,), (ab * table, e * (ab + FP32 + ab))
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


def ring_merge(q: float, kv: float, lse: float, cp: int, ab: int, fused: bool
               ) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Bytes of each kernel PyTorch's ring attention adds around its cp SDPA calls, for Q query
    (= output) elements, KV elements of each of K and V, and LSE log-sum-exp values per rank.

    Forward: the first step's output upcast (read ab, write 4 bytes per element); every later
    step upcasts its block (ab -> 4), takes out - block (read 4 + 4, write 4), scales it by
    sigmoid(block_lse - lse) (read 4, write 4) and subtracts (read 4 + 4, write 4): 38 bytes an
    element; the steps where a rank's step holds the second half of its queries alone (half of
    them over the ranks, load balancing) do that on half the output and rebuild it whole with
    torch.cat (read 4, write 4): 27, so 32.5 on average; each lse update is three small
    kernels; K and V are concatenated to be sent on (read ab, write ab) before each of cp - 1
    steps; the merged output is cast back (read 4, write ab). Backward: zero-filled fp32
    gradients of Q, K and V; each step adds its dQ into the fp32 sum (read 4 + ab, write 4;
    the later steps that hold half the queries add into half and rebuild it: 13 bytes, so 11.5
    on average over the later steps), and each
    later step adds the dK, dV that arrive to its own (read 4 + ab, write 4) and concatenates
    them to send on (read 4, write 4), the K, V sent on as in forward; the sums are cast back.
    `fused` (Inductor): each step's merge is one kernel reading the running output and the
    block and writing the output, each dQ / dKV step one kernel likewise."""
    steps, later = cp, cp - 1
    up, down = q * (ab + FP32), q * (FP32 + ab)
    send = 2 * kv * 2 * ab
    if fused:
        merge = q * (FP32 + ab + FP32) + 3 * FP32 * lse
        fwd = (up, *[merge] * later, *[send] * later, down)
        dq = q * (FP32 + ab + FP32)
        dkv = 2 * kv * (FP32 + ab + FP32)
        bwd = (FP32 * (q + 2 * kv), *[dq] * steps, *[dkv] * later, *[send] * later,
               q * (FP32 + ab) + 2 * kv * (FP32 + ab))
        return fwd, bwd
    # a later step on the whole output (half the steps) or on its second half then rebuilt
    # whole (the other half): each kernel's bytes averaged over the two
    share = (1.0 + 0.5) / 2
    rebuild = 0.5 * 2 * FP32 * q
    merge = (share * q * (ab + FP32), share * q * 3 * FP32, share * q * 2 * FP32, share * q * 3 * FP32, rebuild,
             FP32 * lse, FP32 * lse, FP32 * lse)
    dkv = (kv * (FP32 + ab + FP32), kv * (FP32 + ab + FP32), 2 * kv * 2 * FP32)
    fwd = (up, *[m for _ in range(later) for m in merge], *[send] * later, down)
    bwd = (FP32 * q, FP32 * kv, FP32 * kv, q * (FP32 + ab + FP32), *[share * q * (FP32 + ab + FP32) + rebuild] * later,
           *[c for _ in range(later) for c in dkv], *[send] * later,
           q * (FP32 + ab), kv * (FP32 + ab), kv * (FP32 + ab))
    return fwd, bwd


def ring_merge_op(d, fused: bool) -> Op:
    """The merges of PyTorch's ring attention on one rank (`ring_merge`), as one memory-bound op."""
    q = d.b * d.sl * d.q_dim / d.tp
    return Op("cp_ring_merge", kernels=("cp_ring_merge",), numel=q,
              kernel_bytes=ring_merge(q, d.b * d.sl * d.kv_dim / d.tp, d.b * d.heads / d.tp * d.sl, d.cp, d.ab, fused))


def _backward_only(name: str, kernels: tuple[float, ...], numel: float):
    return Op(name, kernels=(name,), numel=numel, kernel_bytes=((), kernels))


def eager_ops(ops: list, d) -> list:
    """The layer's ops as eager PyTorch runs them: memory-bound ops carry their kernels' bytes,
    and autograd's extra kernels (the QKV split's concatenation, the bias gradients) follow
    the op whose backward launches them."""
    out = []
    for op in ops:
        if op.fwd_flops == 0 and op.attention is None and (seq := _eager_sequence(op, d)) is not None:
            op = replace(op, kernel_bytes=seq)
        out.append(op)
        if op.attention is not None and op.name == "core_attention" and d.cp > 1:
            out.append(ring_merge_op(d, fused=False))
        if op.attention is not None and op.name == "core_attention":
            qkv = d.b * d.sl * (d.q_dim + 2 * d.kv_dim) / d.tp
            out.append(_backward_only("qkv_split_grad", (2 * qkv * d.ab,), qkv))
        if d.gpt_style and op.name in BIASED and op.gemm is not None:
            m, n, _ = op.gemm
            out.append(_backward_only(f"{op.name}_bias_grad", (m * n * d.ab,), m * n))
    return out


def compiled_ops(ops: list, d) -> list:
    """The ops as Inductor runs them: ops.py's fused counts, but for the embedding's backward
    (its decomposition, see above) and the ring attention's merges (fused, `ring_merge`)."""
    table = d.vocab / d.tp * d.h
    out = []
    for op in ops:
        out.append(replace(op, kernel_bytes=((2 * op.numel * d.ab,),
                                             (FP32 * table, op.numel * (d.ab + 2 * FP32), table * (FP32 + d.ab))))
                   if op.kernels == ("embedding",) else op)
        if op.attention is not None and op.name == "core_attention" and d.cp > 1:
            out.append(ring_merge_op(d, fused=True))
    return out


def accumulation_bytes(how: str, dense: float, expert: float, sharding: ShardingPlan, microbatches: int,
                       weight_bytes: int, torch_stack: bool) -> float:
    """HBM bytes moved per micro-batch, averaged over the step, to accumulate a block's dense and
    expert weight gradients as `how` (training.kernels.grad_accumulation) says:

    * `fused`: none; the weight-gradient GEMMs add into main_grad in their epilogue.
    * `autograd`: AccumulateGrad keeps the first micro-batch's gradient and adds every later one
      into `.grad`, reading both and writing one at `.grad`'s width
      (torch/csrc/autograd/functions/accumulate_grad.h): the parameters' own under Megatron's or
      DeepSpeed's modules, the one a PyTorch stack (`torch_stack`) keeps its (sharded)
      gradients in; on the shard where the backward reduce-scatters each micro-batch.
    * `main_grad`: Megatron's backward hook, `param.main_grad.add_(param.grad.data)` for every
      parameter and micro-batch, the first included (main_grad is a buffer zeroed each step):
      the gradient read at the weights' width, main_grad read and written
      (megatron/model/distributed.py @b4bc51b _make_param_hook;
      megatron/core/distributed/distributed_data_parallel.py @d98e8a6). Megatron-FSDP with
      sharded gradients copies each into the bucket it reduce-scatters instead (main_grad.copy_,
      megatron/core/distributed/fsdp/src/megatron_fsdp/megatron_fsdp.py @d98e8a6): written once.
    * `upcast`: DeepSpeed's bf16 optimizer after every micro-batch's backward,
      `hp_grad.add_(lp.grad.to(fp32))` (deepspeed/runtime/bf16_optimizer.py update_hp_grads,
      called from pipe/engine.py _exec_backward_pass @56c5223): the cast reads the gradient and
      writes an fp32 copy, the add reads it and the fp32 gradient and writes that.
    """
    elements = dense + expert
    if how == "fused":
        return 0.0
    if how == "main_grad":
        return elements * (weight_bytes + (1 if sharding.reduces_in_compute else 2) * sharding.grad_bytes)
    if how == "upcast":
        return elements * (weight_bytes + FP32 + 3 * FP32)
    if microbatches < 2:
        return 0.0
    if sharding.reduces_in_compute:
        elements = dense / sharding.dense_group + expert / sharding.expert_group
    width = sharding.grad_bytes if torch_stack else weight_bytes
    return 3 * width * elements * (microbatches - 1) / microbatches
