"""Where each cost of a CostModel comes from, in words: the rows of `sim3d run --explain`."""

from __future__ import annotations

from ..model.ops import ACT_BYTES, grad_bytes
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
                 f"{ACT_BYTES[costs.s.training.precision]} B"))
    kernels = step_bytes(costs.s.training)
    per = {where: " + ".join(f"{name} {nbytes}" for name, (nbytes, at) in kernels.items() if at == where)
           for where in ("shard", "local")}
    rows.append(("optimizer step", f"memory-bound kernels, bytes per parameter: {per['shard']} per shard, "
                 f"{per['local']} per local parameter (Megatron optimizer.py)"))
    return rows


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
    if ANALYTICAL in sources:
        if kind.startswith("compute"):
            parts.append(costs.compute_model.describe(kind))
        elif kind == "pipeline p2p":
            parts.append(f"analytical: latency + {costs.p2p_bytes / 2**20:.2f} MiB / bandwidth of the placed path")
        elif kind.startswith("tp overlap"):
            parts.append({
                "tp overlap: ring exchange": "all-gather in tp chunks over the copy engines (1 SM), pipelined "
                                            "with the GEMM cut into tp row slices",
                "tp overlap: pipelined": f"reduce-scatter on {COMM_SMS} SMs pipelined with the GEMM cut into "
                                         f"{PIPELINE_SPLITS} slices",
                "tp overlap: bulk": f"one collective beside the whole GEMM, taking {COMM_SMS} SMs from it",
            }[kind] + " (TE userbuffers module/base.py defaults; Megatron async grad all-reduce)")
        else:
            parts.append("analytical: NCCL-like ring / tree / NVLS / hierarchical on the placed links, measured "
                         "busbw per GPU preset, Hockney n_1/2 inside a node" + (
                             "; all-to-alls across nodes on their most loaded link (PXN routes)"
                             if kind.startswith("ep") else ""))
    return "; ".join(parts)
