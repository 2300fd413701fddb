"""Where each cost of a CostModel comes from, in words: the rows of `sim3d run --explain`."""

from __future__ import annotations

from ..scenario.sharding import grad_bytes
from .tp_overlap import COMM_SMS, PIPELINE_SPLITS
from .optimizer_step import step_bytes
from .provenance import ANALYTICAL, PROFILE


def explain(costs) -> list[tuple[str, str]]:
    used = costs.provenance.by_what()
    compute = sorted(k for k in used if k.startswith("compute"))
    rows = [("cluster", costs.topology.describe())]
    rows += [(key, _describe(costs, key, used[key])) for key in compute]
    for key in sorted(k for k in used if not k.startswith("compute")):
        rows.append((key, _describe(costs, key, used[key])))
    if costs.s.costs.network == "flow":
        rows.append(("network", "flow: pipeline transfers, data-parallel buckets and each compute action's "
                     "expert-parallel all-to-alls are flows on their routed links, sharing them max-min fairly "
                     "as they meet (rates recomputed at every start and end); alone, each takes its analytical "
                     "time. TP / CP collectives inside compute stay analytical"))
    rows.append(("data-parallel bytes", f"gradients reduced at {grad_bytes(costs.s.training)} B per parameter "
                 f"({_gradient_width_source(costs.s.training)}), parameters gathered at "
                 f"{costs.sharding.gather_bytes} B"))
    kernels = step_bytes(costs.s.training)
    per = {where: " + ".join(f"{name} {nbytes}" for name, (nbytes, at) in kernels.items() if at == where)
           for where in ("shard", "local")}
    rows.append(("optimizer step", f"memory-bound kernels, bytes per parameter: {per['shard']} per shard, "
                 f"{per['local']} per local parameter (Megatron optimizer.py)"))
    return rows


def _largest_kernel(costs, kind: str) -> str | None:
    """The largest kernel of a compute class in one layer (or the head), priced by
    `sim3d.kernel_seconds` from the scenario's profile where it has it: what a row's model means
    in seconds. None for classes it does not price one by one (grouped GEMMs, lookups)."""
    from ..model.ops import head_ops, layer_ops
    from .compute import op_class
    from .kernel_price import MEMORY_KERNELS, kernel_seconds
    s = costs.s
    moe = [layer_ops(s, moe_layer=True)] if s.model.moe else []
    ops = [op for group in [layer_ops(s), head_ops(s)] + moe for op in group
           if f"compute: {op_class(op)}" == kind and op.gemm_groups == 1]
    if not ops:
        return None
    op = max(ops, key=lambda o: (o.fwd_flops, o.fwd_bytes))
    gpu, profile = s.gpu, costs.profile
    if op.attention is not None:
        bh, sq, sk, head_dim = op.attention
        price = kernel_seconds(gpu, "attention", profile=profile, batch=1, heads=bh, seq=sq, head_dim=head_dim,
                               causal=op.causal)
        what = (f"{op.name} {bh} heads x {sq} queries, head dim {head_dim}" + (" (per ring step)" if sk != sq else "")
                + ("" if op.causal else ", every key block (a materialized mask)"))
    elif op.gemm is not None:
        m, n, k = op.gemm
        precision = "fp8" if op.fp8 else costs.compute_model.precision16
        price = kernel_seconds(gpu, "gemm", profile=profile, m=m, n=n, k=k, precision=precision)
        what = f"{op.name} [{m} x {k}] @ [{k} x {n}] {precision}"
    else:
        kernel = next((k for k in op.kernels if k in MEMORY_KERNELS), None)
        if kernel is None or op.numel <= 0 or op.fwd_bytes <= 0:
            return None
        # as the op is priced: its kernels one by one from a profile, else its bytes at once
        price = kernel_seconds(gpu, kernel, profile=profile, numel=int(op.numel), precision=costs.compute_model.dtype)
        what = f"{op.name} {kernel} over {int(op.numel):,} elements"
        if price.source != PROFILE:
            price = kernel_seconds(gpu, "memory", nbytes=op.fwd_bytes)
            what = f"{op.name} ({'+'.join(op.kernels)}) moving {op.fwd_bytes / 2**20:,.1f} MiB"
    return f"largest: {what} forward {price.seconds * 1e6:,.1f} us ({price.source}, sim3d kernel)"


def _gradient_width_source(training) -> str:
    if training.precision == "fp32":
        return "fp32 training"
    if training.grad_reduce_in_fp32 is None:
        return ("Megatron's default for fp16: its gradient buffer in fp16" if training.precision == "fp16" else
                "Megatron's default for bf16: arguments.py forces accumulate_allreduce_grads_in_fp32")
    return ("grad_reduce_in_fp32 set (--accumulate-allreduce-grads-in-fp32)" if training.grad_reduce_in_fp32 else
            "grad_reduce_in_fp32 unset (--grad-reduce-in-bf16)")


def _describe(costs, kind: str, sources: set[str]) -> str:
    parts = []
    if PROFILE in sources and costs.profile is not None:
        parts.append(costs.profile.describe("compute" if kind.startswith("compute") else "collective"))
    if kind.startswith("compute"):
        if ANALYTICAL in sources:
            parts.append(costs.compute_model.describe(kind))
        if example := _largest_kernel(costs, kind):
            parts.append(example)
        if kind.startswith("compute: GEMMs") and costs.s.model.moe and costs.compute_model.gemm_streams:
            parts.append(f"a rank's experts: one GEMM each, {costs.compute_model.gemm_streams} at a time "
                         "(Transformer Engine's multi-stream grouped GEMM)")
    elif ANALYTICAL in sources:
        if kind == "pipeline p2p":
            parts.append(f"analytical: latency + {costs.p2p_bytes / 2**20:.2f} MiB / bandwidth of the placed path"
                         + (", then the receiver's all-gather over TP (pipeline scatter/gather)"
                            if costs.p2p_gather_seconds(0) else ""))
        elif kind == "ep all-to-all overlap":
            parts.append("an MoE layer's forward beside another micro-batch's backward (Megatron's combined 1F1B): "
                         f"their all-to-alls under their compute, holding {COMM_SMS} SMs while they run (a2a_overlap.py)")
        elif kind.startswith("tp overlap"):
            parts.append({
                "tp overlap: ring exchange": "all-gather in tp chunks over the copy engines (1 SM), pipelined "
                                            "with the GEMM cut into tp row slices",
                "tp overlap: pipelined": f"reduce-scatter on {COMM_SMS} SMs pipelined with the GEMM cut into "
                                         f"{PIPELINE_SPLITS} slices",
                "tp overlap: bulk": f"one collective beside the whole GEMM, launched on {COMM_SMS} SMs fewer "
                                    "(TE userbuffers module/base.py defaults, set_sm_margin)",
                "tp overlap: nccl stream": f"an NCCL collective on its own stream beside the GEMM, holding {COMM_SMS} "
                                           "SMs only while it runs (Megatron / TE async all-reduce and reduce-scatter)",
            }[kind] + ("" if kind.endswith(("bulk", "nccl stream")) else " (TE userbuffers module/base.py defaults)"))
        else:
            parts.append("analytical: NCCL-like ring / tree / NVLS / hierarchical on the placed links, measured "
                         "busbw per GPU preset, Hockney n_1/2 inside a node" + (
                             "; all-to-alls across nodes on their most loaded link (PXN routes)"
                             if kind.startswith("ep") and costs.s.training.moe_dispatcher != "allgather" else "") + (
                             "; the allgather dispatcher: the group's tokens all-gathered to every rank, "
                             "reduce-scattered back (model/expert_dispatch.py)"
                             if kind.startswith("ep") and costs.s.training.moe_dispatcher == "allgather" else "") + (
                             "; DeepEP: one copy per other node a token's experts are on (moe_dispatch.py)"
                             if kind.startswith("ep") and costs.s.training.moe_dispatcher == "deepep" else ""))
    return "; ".join(parts)
