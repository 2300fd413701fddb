"""Where each cost of a CostModel comes from, in words: the rows of `sim3d run --explain`."""

from __future__ import annotations

from ..model.ops import ACT_BYTES, grad_bytes
from .model import ADAM_BYTES, COMM_SMS, GRAD_NORM_BYTES, MASTER_COPY_BYTES, PIPELINE_SPLITS, UNSCALE_BYTES


def explain(costs) -> list[tuple[str, str]]:
    compute = sorted(k for k in costs.sources if k.startswith("compute"))
    rows = [("cluster", costs.topology.describe())]
    rows += [(key, _describe(costs, key, costs.sources[key])) for key in compute]
    for key in sorted(k for k in costs.sources if not k.startswith("compute")):
        rows.append((key, _describe(costs, key, costs.sources[key])))
    if costs.s.costs.network == "flow":
        rows.append(("network", "flow: pipeline transfers, data-parallel buckets and each compute action's "
                     "expert-parallel all-to-alls are flows on their routed links, sharing them max-min fairly "
                     "as they meet (rates recomputed at every start and end); alone, each takes its analytical "
                     "time. TP / CP collectives inside compute stay analytical"))
    width = grad_bytes(costs.s.training)
    rows.append(("data-parallel bytes", f"gradients reduced at {width} B per parameter ("
                 + ("the fp32 gradient buffer: Megatron arguments.py, accumulate_allreduce_grads_in_fp32"
                    if width == 4 else "--grad-reduce-in-bf16")
                 + f"), parameters gathered at {ACT_BYTES[costs.s.training.precision]} B"))
    rows.append(("optimizer step", "memory-bound kernels, bytes per parameter: "
                 f"grad-norm {GRAD_NORM_BYTES} + Adam {ADAM_BYTES} + master copy {MASTER_COPY_BYTES}"
                 f"{f' + unscale {UNSCALE_BYTES}' if costs.s.training.precision == 'fp16' else ''} per shard, "
                 f"zero-grad {grad_bytes(costs.s.training)} per local parameter (Megatron optimizer.py)"))
    return rows


def _describe(costs, kind: str, sources: set[str]) -> str:
    parts = []
    if "profile" in sources and costs.profile is not None:
        parts.append(costs.profile.describe("compute" if kind.startswith("compute") else "collective"))
    if "analytical" in sources:
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
