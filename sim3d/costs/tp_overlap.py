"""Which tensor-parallel collectives hide under which GEMM, and what running the two together
costs: Megatron's overlap switches (`training.tp_comm_overlap`,
`training.async_tensor_model_parallel_allreduce`) turned into a plan over a layer's ops."""

from __future__ import annotations

from dataclasses import dataclass

# SMs a communication kernel takes from the GEMM it overlaps: Transformer Engine's userbuffer
# default for the pipeline and bulk methods (transformer_engine/pytorch/module/base.py,
# initialize_ub: num_sm 16, num_splits 4; ring_exchange uses 1 SM and the copy engines with
# tp splits). An NCCL collective overlapping a GEMM (Megatron's async grad all-reduce) is
# charged the same 16 SMs (NCCL runs one CTA per channel; 16 channels on NVSwitch nodes is our
# assumption).
COMM_SMS = 16
PIPELINE_SPLITS = 4


@dataclass(frozen=True)
class Overlap:
    """How a collective hides under a GEMM: `splits` chunks pipelined with it (None: one bulk
    transfer alongside the whole GEMM), taking `sms` SMs from it. `margin`: the GEMM is launched
    on the other SMs for its whole length (Transformer Engine's userbuffers: set_sm_margin for
    its bulk and pipelined methods, module/base.py initialize_ub); without it (an NCCL
    collective on its own stream, as Megatron's async all-reduce and TE's async reduce-scatter
    run) the GEMM takes the collective's SMs back as soon as the collective ends."""
    method: str
    sms: int
    splits: int | None
    margin: bool = True


def overlapped_seconds(gemm: float, comm: float, overlap: Overlap, sms: int) -> float:
    """Time of a GEMM and a collective run together. The GEMM slows by the SMs the
    communication kernel takes; in a pipeline of n chunks one chunk of the shorter side is
    exposed: max(g, c) + min(g, c) / n. Without a margin (one collective, no splits) the GEMM
    is slowed only while the collective runs, charged as a sharded unit under its gather is
    (sharded_dp.py: the collective's time x its SMs over the others')."""
    if not overlap.margin:
        assert overlap.splits is None, "a pipelined overlap runs under userbuffers' margin"
        return max(gemm + min(gemm, comm) * overlap.sms / (sms - overlap.sms), comm)
    slowed = gemm * sms / (sms - overlap.sms) if overlap.sms else gemm
    tail = min(slowed, comm) / overlap.splits if overlap.splits else 0.0
    return max(slowed, comm) + tail


def overlap_plan(training, tp: int, ops,
                 recompute: str | None = None) -> dict[tuple[int, str], tuple[int, str, Overlap]]:
    """(collective's op index, "fwd" | "bwd") -> (GEMM op index, GEMM part, overlap).

    `training.tp_comm_overlap` (Megatron --tp-comm-overlap, Transformer Engine userbuffers,
    needs sequence parallelism): the all-gather into a column-parallel GEMM is a ring
    exchange with its forward; the reduce-scatter after a row-parallel GEMM pipelines with
    it; in backward the gradient all-gather pipelines with the row-parallel dgrad and the
    input-gradient reduce-scatter runs in bulk beside the column-parallel wgrad (TE's
    defaults per GEMM, module/base.py initialize_ub).
    `training.async_tensor_model_parallel_allreduce` (Megatron's default): the backward
    input-gradient all-reduce (reduce-scatter with SP) of a column-parallel linear runs on
    its own stream beside the weight-gradient GEMM (megatron/core/tensor_parallel/layers.py,
    LinearWithGradAccumulationAndAsyncCommunication). `recompute`: the policy the layer runs
    under (model/recompute.py; default the scenario's): a layer recomputed whole gathers its
    input again with the recomputation, not for the wgrad."""
    tr = training
    plan = {}
    if tp < 2:
        return plan
    ring = Overlap("ring exchange", 1, tp)
    pipeline = Overlap("pipelined", COMM_SMS, PIPELINE_SPLITS)
    # without userbuffers the backward's collectives are NCCL calls on their own stream
    # (megatron/core/tensor_parallel/layers.py, handle = all_gather / reduce_scatter async_op=True)
    bulk = Overlap("bulk", COMM_SMS, None) if tr.tp_comm_overlap else Overlap("nccl stream", COMM_SMS, None, False)
    for i, op in enumerate(ops):
        if op.group != "tp":
            continue
        following = ops[i + 1] if i + 1 < len(ops) else None
        feeds_gemm = following is not None and following.gemm is not None and following.group in (None, "tp") \
            and not following.name.startswith(("attn_", "lm_head", "router"))
        # the token dispatcher's TP gather and scatter (moe_*) are plain autograd collectives
        # (Megatron-Core token_dispatcher.py), and a rank's experts run as TE's grouped linear,
        # which has no userbuffers: neither overlaps, whether or not a sort sits between them
        if op.gemm is None and feeds_gemm and not op.name.startswith("moe_"):  # norm -> column-parallel GEMM
            if tr.tp_comm_overlap and op.comm:
                plan[(i, "fwd")] = (i + 1, "fwd", ring)
            if op.bwd_comm and (tr.tp_comm_overlap or tr.async_tensor_model_parallel_allreduce):
                plan[(i, "bwd")] = (i + 1, "bwd_weight", bulk)
            if op.comm == "all-gather" and (recompute or tr.recompute) != "full" and (
                    tr.tp_comm_overlap or tr.async_tensor_model_parallel_allreduce):
                # sequence parallelism keeps only the input shard: backward all-gathers it
                # again for the wgrad, beside the dgrad GEMM (Megatron layers.py; TE bulk).
                # With both switches off the serial model of 2021 Megatron is kept as it was.
                plan[(i, "regather")] = (i + 1, "bwd_input", bulk)
        elif op.gemm is not None and tr.tp_comm_overlap and not op.name.startswith(("lm_head", "router")):
            if op.comm:  # row-parallel GEMM -> reduce-scatter
                plan[(i, "fwd")] = (i, "fwd", pipeline)
            if op.bwd_comm:  # gradient all-gather -> row-parallel dgrad
                plan[(i, "bwd")] = (i, "bwd_input", ring)
    return plan
