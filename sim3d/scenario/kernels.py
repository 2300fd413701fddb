"""`training.kernels`: which kernels the training software launches besides its GEMMs.

The GEMMs are the same cuBLAS kernels whatever the stack; what differs is everything around
them, and the flash-attention kernel:

* `stack` -- `te`: Megatron-Core / NeMo with Transformer Engine (fused norms, bias-GeLU,
  bias-dropout-add; bias gradients from the GEMM epilogue; packed QKV into the fused attention);
  `compiled`: torch.compile (Inductor fuses each pointwise chain into one kernel, priced as
  `te`'s counts); `eager`: plain PyTorch modules, one ATen kernel per operator
  (sim3d/model/kernel_stack.py counts their bytes).
* `attention` -- the flash-attention kernel: `default`, the GPU's own (FlashAttention-2 on
  Ampere; cuDNN's fused attention on Hopper and later, which Transformer Engine prefers there:
  transformer_engine/pytorch/attention/dot_product_attention/utils.py get_attention_backend);
  or by name, `cudnn`, `fa2` (FlashAttention-2: torch SDPA's first choice on H100 in torch
  2.5.1-2.8, pytorch/pytorch#138522; cuDNN again from 2.9 or 2.11, #162073, #171627), `fa3`
  (FlashAttention-3, Hopper only) or `triton` (FlashAttention written in Triton, as
  llm-foundry's `attn_impl: triton` runs it). A kernel a GPU has no figures for is refused
  (cluster/gpus.py: the preset's attention_kernels_with_figures).

* `norm` -- how an RMSNorm runs: `fused`, one kernel each way (Transformer Engine, Inductor,
  torch.nn.RMSNorm in recent PyTorch: aten::_fused_rms_norm); `composite`, the chain of eight
  pointwise and reduction ops Hugging Face's LlamaRMSNorm writes (four over fp32 copies).
  Unset: composite under `eager` (plain PyTorch model code, as transformers' Llama), fused
  otherwise. LayerNorm is one ATen kernel in every stack.
* `mask` -- what the model code hands the attention kernel: `causal` (`is_causal=True`, TE's
  causal mask type), so the kernel skips the key blocks above the diagonal; or `materialized`,
  a 4-D mask tensor, as Hugging Face transformers' models pass one under torch.compile (its
  masking_utils.py `_ignore_causal_mask_sdpa` keeps the mask whenever dynamo is tracing) or for
  a padded batch: SDPA then runs the kernel without its causal flag, every key block of every
  query block computed under the mask, and with a mask transformers repeats the grouped K and V
  to every query head before the call (integrations/sdpa_attention.py `use_gqa_in_sdpa`,
  `repeat_kv`). Only the PyTorch stacks take it (Transformer Engine passes its mask type).
* `fp8` -- under `training.precision: fp8`, how the linears' operands are scaled and cast
  (model/fp8_recipes.py counts each recipe's kernels): `te`, Transformer Engine's recipes
  (one cast-transpose per operand, the weights cast once per step); or torchao.float8's, which
  torchtitan's float8 converter runs: `tensorwise` (one scale per tensor; torchao's default,
  torchtitan's before 2026), `rowwise` (one scale per row; torchtitan's default since) or
  `rowwise_with_gw_hp` (rowwise, the weight gradient in 16 bits). Unset: `te` under the `te`
  stack, `tensorwise` under the PyTorch stacks.

* `loss` -- how the cross-entropy over the logits runs (model/kernel_stack.py counts each):
  `fused`, one kernel each way (Megatron-Core's `--cross-entropy-loss-fusion`, Transformer
  Engine's or Inductor's fused loss); `vocab_parallel`, Megatron's vocab_parallel_cross_entropy
  on the logits upcast to fp32, five in-place passes and a backward product (Megatron-LM's
  default until today: megatron/mpu/cross_entropy.py of 2021, megatron/core/tensor_parallel/
  cross_entropy.py since); `torch`, torch's cross_entropy on the fp32 upcast, as Hugging Face
  transformers and torchtitan call it. Unset: `torch` under `eager`, `fused` otherwise.

* `grad_accumulation` -- how each micro-batch's weight gradients reach the buffer the optimizer
  reads (model/kernel_stack.py counts each): `fused`, in the weight-gradient GEMMs' epilogue
  (Megatron's gradient accumulation fusion, its default since 83b1e42, 2022-02-13); `main_grad`,
  Megatron's backward hook adding each gradient into the main-gradient buffer (before that
  commit, or `--no-gradient-accumulation-fusion`); `upcast`, DeepSpeed's bf16 optimizer adding
  an fp32 copy of each gradient into its fp32 gradients (DeepSpeed 56c5223,
  runtime/bf16_optimizer.py update_hp_grads, every micro-batch under its pipeline engine);
  `autograd`, torch's AccumulateGrad summing into `.grad` (PyTorch modules, and Megatron-LM's
  fp16 runs of 2021 without contiguous gradient buffers). Unset: `autograd` under the PyTorch
  stacks, `fused` under `te`.

A scenario may write the stack alone (`kernels: eager`), as docs/contracts.md#scenario-file
gives it, or both (`kernels: {stack: eager, attention: triton}`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

STACKS = ("te", "compiled", "eager")
# the stacks that are plain PyTorch modules: torch autograd sums their gradients (AccumulateGrad)
# and torch.distributed.pipelining runs their pipelines
TORCH_STACKS = ("eager", "compiled")
ATTENTION_KERNELS = ("default", "cudnn", "fa2", "fa3", "triton")
MASKS = ("causal", "materialized")
FP8_RECIPES = ("te", "tensorwise", "rowwise", "rowwise_with_gw_hp")
TORCHAO_RECIPES = FP8_RECIPES[1:]


class Kernels(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    stack: Literal["te", "compiled", "eager"] = "te"
    attention: Literal["default", "cudnn", "fa2", "fa3", "triton"] = "default"
    norm: Literal["fused", "composite"] | None = None
    mask: Literal["causal", "materialized"] = "causal"
    fp8: Literal["te", "tensorwise", "rowwise", "rowwise_with_gw_hp"] | None = None
    loss: Literal["fused", "vocab_parallel", "torch"] | None = None
    grad_accumulation: Literal["fused", "main_grad", "upcast", "autograd"] | None = None

    @property
    def norm_kernels(self) -> str:
        """How an RMSNorm runs: as given, else composite under eager and fused otherwise."""
        return self.norm or ("composite" if self.stack == "eager" else "fused")

    @property
    def loss_kernels(self) -> str:
        """How the cross-entropy runs: as given, else torch's under eager and fused otherwise."""
        return self.loss or ("torch" if self.stack == "eager" else "fused")

    @property
    def accumulation(self) -> str:
        """How gradients accumulate: as given, else autograd's under the PyTorch stacks and in
        the weight-gradient GEMMs (Megatron's gradient accumulation fusion) under te."""
        return self.grad_accumulation or ("autograd" if self.stack in TORCH_STACKS else "fused")

    @property
    def fp8_recipe(self) -> str:
        """How an FP8 linear scales its operands: as given, else Transformer Engine's under `te`
        and torchao's default (tensorwise) under the PyTorch stacks."""
        return self.fp8 or ("te" if self.stack == "te" else "tensorwise")

    @model_validator(mode="before")
    @classmethod
    def _stack_alone(cls, raw):
        # `kernels: eager` (docs/contracts.md#scenario-file) names the stack with the default attention
        return {"stack": raw} if isinstance(raw, str) else raw

    @model_validator(mode="after")
    def _mask_of_a_torch_stack(self):
        if self.mask == "materialized" and self.stack not in TORCH_STACKS:
            raise ValueError("mask: materialized is how PyTorch model code (Hugging Face transformers under "
                             "torch.compile, or a padded batch) calls SDPA; Transformer Engine passes its causal "
                             "mask type: use stack eager or compiled, or mask: causal")
        return self

    @model_validator(mode="after")
    def _megatron_accumulation_of_te(self):
        if self.grad_accumulation not in (None, "autograd") and self.stack in TORCH_STACKS:
            raise ValueError(f"grad_accumulation: {self.grad_accumulation} is how Megatron's (or DeepSpeed's) modules "
                             "accumulate gradients; PyTorch model code accumulates them with autograd: use stack te, "
                             "or grad_accumulation: autograd")
        return self

    @model_validator(mode="after")
    def _torchao_recipe_of_a_torch_stack(self):
        if self.fp8 in TORCHAO_RECIPES and self.stack not in TORCH_STACKS:
            raise ValueError(f"fp8: {self.fp8} is a torchao.float8 recipe, which PyTorch model code runs (torchtitan's "
                             "float8 converter); Megatron-Core and NeMo scale FP8 with Transformer Engine: use stack "
                             "eager or compiled, or fp8: te")
        return self
