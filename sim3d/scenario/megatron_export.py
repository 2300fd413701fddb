"""Megatron-LM arguments from a scenario: the inverse of `importers.from_megatron` for
everything a scenario holds (the model, the layout, the training settings); data, optimizer and
logging arguments are the user's own. What Megatron-LM cannot run is refused with its nearest."""

from __future__ import annotations

from ..schedule.specs import SCHEDULES
from . import megatron_fsdp
from .moe_layers import moe_at


# Schedules Megatron-LM's own flags cannot ask for, and where they run instead.
SCHEDULE_ELSEWHERE = {name: spec.megatron_elsewhere for name, spec in SCHEDULES.items() if spec.megatron_elsewhere}


def export_notes(s) -> list[str]:
    """What Megatron-LM would run otherwise than the scenario says, for the arguments
    `to_megatron_args` writes: a schedule it runs elsewhere, Megatron-FSDP's resharding, a loss
    it has no kernel for, a gradient accumulation it does not do."""
    notes = [SCHEDULE_ELSEWHERE.get(s.schedule), megatron_fsdp.caveat(s)]
    if s.training.kernels.loss_kernels == "torch":
        notes.append("Megatron runs its vocab_parallel_cross_entropy (add --cross-entropy-loss-fusion for the fused "
                     "loss), not torch's cross_entropy as PyTorch model code calls it (training.kernels.loss: torch)")
    if (how := s.training.kernels.accumulation) in ("autograd", "upcast"):
        other = "with autograd" if how == "autograd" else "as DeepSpeed's bf16 optimizer upcasts them"
        notes.append(f"Megatron accumulates gradients in its main-gradient buffer (fused into the weight-gradient "
                     f"GEMMs, or with --no-gradient-accumulation-fusion by a kernel of its own), not {other} "
                     f"(training.kernels.grad_accumulation: {how})")
    return [note for note in notes if note]


def to_megatron_args(s) -> list[str]:
    """The Megatron-LM arguments of a scenario's model, layout and training settings (the
    inverse of `from_megatron` for everything a scenario holds; data, optimizer and logging
    arguments are the user's own)."""
    m, p, t = s.model, s.parallel, s.training
    args = ["--num-layers", m.layers, "--hidden-size", m.hidden, "--num-attention-heads", m.heads,
            "--seq-length", m.seq_len, "--max-position-embeddings", m.seq_len,
            "--vocab-size", m.vocab, "--hidden-dropout", m.hidden_dropout, "--attention-dropout", m.attention_dropout]
    if m.ffn_hidden:
        args += ["--ffn-hidden-size", m.ffn_hidden]
    if m.kv_heads and m.kv_heads != m.heads:
        args += ["--group-query-attention", "--num-query-groups", m.kv_heads]
    if m.kv_channels:
        args += ["--kv-channels", m.kv_channels]
    if m.activation != "gelu":
        args.append(f"--{m.activation}")
    if m.mla:  # Megatron-Core's names (arguments.py _add_mla_args)
        args += ["--multi-latent-attention", "--kv-lora-rank", m.mla.kv_lora_rank, "--qk-head-dim",
                 m.mla.qk_nope_head_dim, "--qk-pos-emb-head-dim", m.mla.qk_rope_head_dim, "--v-head-dim",
                 m.mla.v_head_dim] + (["--q-lora-rank", m.mla.q_lora_rank] if m.mla.q_lora_rank else [])
    if m.moe:
        args += ["--num-experts", m.moe.experts, "--moe-router-topk", m.moe.top_k]
        # dense first layers: the layer pattern as the Python list Megatron evaluates (moe_freq_type)
        pattern = (f"[{','.join('1' if moe_at(i, m.moe.every, m.moe.first_dense_layers) else '0' for i in range(m.layers))}]"
                   if m.moe.first_dense_layers else m.moe.every if m.moe.every != 1 else None)
        for flag, value in (("--moe-ffn-hidden-size", m.moe.expert_ffn_hidden),
                            ("--moe-router-num-groups", m.moe.router_groups),
                            ("--moe-router-group-topk", m.moe.router_group_topk),
                            ("--moe-shared-expert-intermediate-size", m.moe.shared_expert_ffn),
                            ("--moe-expert-capacity-factor", m.moe.capacity_factor),
                            ("--moe-layer-freq", pattern)):
            if value is not None:
                args += [flag, value]
    if m.mtp_layers:
        args += ["--mtp-num-layers", m.mtp_layers]
    args += ["--tensor-model-parallel-size", s.tp, "--pipeline-model-parallel-size", s.pp]
    if p.order == "tp-cp-ep-pp-dp":
        args.append("--use-tp-pp-dp-mapping")
    if s.cp > 1:
        args += ["--context-parallel-size", s.cp]
    if s.ep > 1:
        args += ["--expert-model-parallel-size", s.ep]
    if p.etp is not None:
        args += ["--expert-tensor-parallel-size", p.etp]
    accounted = p.account_for_embedding_in_pipeline_split + p.account_for_loss_in_pipeline_split
    if p.pipeline_layout is not None:  # Megatron takes vpp from it and refuses the per-stage count beside it
        args += ["--pipeline-model-parallel-layout", p.pipeline_layout]
    elif s.vpp > 1:
        args += ["--num-layers-per-virtual-pipeline-stage", (m.layers + accounted) // (s.pp * s.vpp)]
    for flag, value in (("--decoder-first-pipeline-num-layers", p.decoder_first_pipeline_num_layers),
                        ("--decoder-last-pipeline-num-layers", p.decoder_last_pipeline_num_layers)):
        if value:
            args += [flag, value]
    args += [flag for flag, on in (("--sequence-parallel", p.sequence_parallel),
                                   ("--use-distributed-optimizer", p.distributed_optimizer),
                                   ("--account-for-embedding-in-pipeline-split", p.account_for_embedding_in_pipeline_split),
                                   ("--account-for-loss-in-pipeline-split", p.account_for_loss_in_pipeline_split)) if on]
    args += megatron_fsdp.args(s)
    args += ["--micro-batch-size", t.micro_batch, "--global-batch-size", t.global_batch]
    args += {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp8": ["--bf16", "--fp8-format", "hybrid"], "fp32": []}[t.precision]
    if t.recompute == "op":
        raise ValueError("training.recompute op is torchtitan's per-op selective checkpointing, which Megatron-LM "
                         "cannot run; its nearest is --recompute-granularity selective (training.recompute: selective)")
    if t.recompute != "none":
        args += ["--recompute-granularity", t.recompute]
        if t.recompute_modules is not None:
            args += ["--recompute-modules", *t.recompute_modules]
        if t.recompute_num_layers is not None:
            args += ["--recompute-method", "block", "--recompute-num-layers", t.recompute_num_layers]
        elif t.recompute == "full":
            args += ["--recompute-method", "uniform", "--recompute-num-layers", 1]
    args += ["--attention-backend", "flash" if t.attention_backend == "flash" else "local"]
    if m.moe:  # Megatron's default dispatcher is allgather: name the one priced
        args += (["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"]
                 if t.moe_dispatcher == "deepep" else ["--moe-token-dispatcher-type", t.moe_dispatcher])
    if t.grad_reduce_in_fp32 is not None and t.precision != "fp32":  # else Megatron's default
        if t.grad_reduce_in_fp32 and t.precision == "fp16":
            args.append("--accumulate-allreduce-grads-in-fp32")
        elif not t.grad_reduce_in_fp32 and t.precision != "fp16":
            args.append("--grad-reduce-in-bf16")
    if t.kernels.loss_kernels == "fused":  # else Megatron's default, vocab_parallel_cross_entropy
        args.append("--cross-entropy-loss-fusion")
    args += [flag for flag, on in (("--overlap-grad-reduce", t.overlap_grad_reduce),
                                   ("--overlap-param-gather", t.overlap_param_gather),
                                   ("--tp-comm-overlap", t.tp_comm_overlap),
                                   ("--overlap-moe-expert-parallel-comm", t.moe_a2a_overlap),
                                   ("--delay-wgrad-compute", t.moe_a2a_overlap),
                                   ("--no-async-tensor-model-parallel-allreduce",
                                    not t.async_tensor_model_parallel_allreduce),
                                   ("--no-gradient-accumulation-fusion", t.kernels.accumulation == "main_grad"))
            if on]
    return [str(a) for a in args]
