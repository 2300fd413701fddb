"""The kernels the cross-entropy over V = tokens x vocabulary-shard logits launches under each
`training.kernels.loss`, as the bytes each moves through HBM (the cost model prices each as its
bytes over the achievable bandwidth plus a launch; costs/compute.py). `ab` is the logits' width
(2 bytes in 16-bit training); the per-token statistics and the target gathers are negligible.

* `fused`: one kernel each way, reading the 16-bit logits and keeping an fp32 softmax
  (ops.py's count: Megatron-Core's `--cross-entropy-loss-fusion`, Transformer Engine's or
  Inductor's fused loss).
* `vocab_parallel`: Megatron's vocab_parallel_cross_entropy on `output.float()`
  (megatron/model/gpt_model.py and megatron/mpu/cross_entropy.py @de7dc40; the same passes in
  megatron/core/tensor_parallel/cross_entropy.py): the upcast (read ab, write 4), the row
  maximum (read 4), `sub_` of it in place (read and write 4), `torch.exp(out=)` in place (read
  and write 4), the row sum (read 4) and `div_` by it in place (read and write 4), which leaves
  the softmax saved for the backward. Backward: `mul_` by the loss gradient in place (read and
  write 4) and the upcast's backward (read 4, write ab).
* `torch`: torch's cross_entropy on the fp32 upcast, as Hugging Face's ForCausalLMLoss
  (loss/loss_utils.py: `logits.float()`) and torchtitan's cross_entropy_loss (`pred.float()`)
  call it: the upcast (read ab, write 4); log_softmax, whose CUDA kernel for a row too long for
  shared memory (128k fp32 values: 513 KB) reads the row three times (max, sum of
  exponentials, output) and writes it once (aten/src/ATen/native/cuda/SoftMax.cu,
  cunn_SoftMaxForward); nll_loss (a gather). Backward: nll_loss_backward zero-fills a gradient
  of V fp32 values before scattering the targets', log_softmax's backward reads the gradient
  to sum it, then the gradient and the output to write the input gradient
  (cunn_SoftMaxBackward), and the upcast's backward casts it back to ab bytes.
"""

from __future__ import annotations

FP32 = 4


def vocab_parallel_cross_entropy(v: float, ab: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(forward, backward) bytes of each kernel of Megatron's vocab_parallel_cross_entropy over
    `v` logits upcast from `ab` bytes."""
    f = FP32
    return ((v * (ab + f), f * v, 2 * f * v, 2 * f * v, f * v, 2 * f * v),
            (2 * f * v, v * (f + ab)))


def fp32_cross_entropy(v: float, ab: int) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(forward, backward) bytes of each kernel of cross_entropy(logits.float()) over `v` logits."""
    f = FP32
    return ((v * (ab + f), 3 * f * v + f * v),
            (f * v, f * v, 3 * f * v, v * (f + ab)))


def loss_kernel_bytes(loss: str, v: float, ab: int) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The kernels' bytes of `loss` over `v` logits; None for `fused` (ops.py's one-kernel count)."""
    if loss == "vocab_parallel":
        return vocab_parallel_cross_entropy(v, ab)
    if loss == "torch":
        return fp32_cross_entropy(v, ab)
    return None
