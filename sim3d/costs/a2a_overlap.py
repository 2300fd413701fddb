"""Megatron-Core's expert-parallel all-to-all overlap (`training.moe_a2a_overlap`;
--overlap-moe-expert-parallel-comm with --delay-wgrad-compute).

Its combined 1F1B schedule runs an MoE layer's forward for one micro-batch beside its backward
for another, on two streams: "EP A2A in forward step is hidden by the attention/mlp computation
in the backward step, and vice versa" (megatron/core/pipeline_parallel/combined_1f1b.py). Each
all-to-all runs beside one piece of the other pass, and the pieces wait on each other in turn
(megatron/core/models/common/model_chunk_schedule_plan.py, the layer's schedule): the
backward's combine beside the forward up to its dispatch (attention, norm, router), the
forward's dispatch beside the MLP's input-gradient pass, the backward's dispatch beside the
MLP's weight gradients and forward, the forward's combine beside the backward of the part before
the dispatch. A window of compute g beside all-to-alls c
takes max(g + min(g, c) x sms / (SMs - sms), c), the NCCL kernels holding COMM_SMS of the GPU
while they run (tp_overlap.py: the no-margin overlap); the pair takes its compute plus what the
four windows add to it. Each pass keeps its own compute and a share of that in proportion to its
all-to-alls.

sim3d prices every forward and backward of an MoE layer as paired, though the schedule's
warm-up forwards and cool-down backwards run alone (about p x v of a rank's m x v chunk passes
each way): optimistic by their exposed all-to-alls. The one extra warm-up forward the overlap
schedules (schedules.py) holds one more chunk in flight on every rank (model/memory.py).
"""

from __future__ import annotations

from ..model.ops import layer_ops
from .action_cost import ActionCost
from .tp_overlap import COMM_SMS, Overlap, overlapped_seconds

EP_A2A = Overlap("ep all-to-all", COMM_SMS, None, False)


def paired_layer(costs, links: dict, recompute: str) -> tuple[ActionCost, ActionCost]:
    """(F, B) of one MoE layer micro-batch as the overlap runs them (`costs`: a CostModel)."""
    key = ("moe_layer", "paired", tuple(links.values()), recompute)
    if key not in costs._layer_cache:
        forward, backward = (costs.block("moe_layer", kind, links, recompute, raw=True) for kind in "FB")
        costs._layer_cache[key] = paired(forward, backward, _windows(costs, links, recompute), costs.s.gpu.sms)
    return costs._layer_cache[key]


def _windows(costs, links: dict, recompute: str) -> list[tuple[float, float]]:
    """(compute, all-to-alls) of the four windows, in the order the overlap runs them."""
    ops = layer_ops(costs.s, True)
    cut = next(i for i, op in enumerate(ops) if op.name == "moe_dispatch")
    attention, mlp = ops[:cut], ops[cut:]  # Megatron's pre_dispatch_computation (to the router), the rest

    def compute(part, kind: str) -> float:
        cost = costs.ops_cost(part, kind, links, recompute=recompute)
        return cost.seconds - cost.exposed.get("ep", 0.0)

    def exchange(name: str, backward: bool) -> float:
        op = next(op for op in ops if op.name == name)
        return costs._collective(op.bwd_comm if backward else op.comm,
                                 op.bwd_comm_bytes if backward else op.comm_bytes, op.group, links)

    return [(compute(attention, "F"), exchange("moe_combine", True)),
            (compute(mlp, "BI"), exchange("moe_dispatch", False)),
            (compute(mlp, "BW") + compute(mlp, "F"), exchange("moe_dispatch", True)),
            (compute(attention, "B"), exchange("moe_combine", False))]


def paired(forward: ActionCost, backward: ActionCost, windows: list[tuple[float, float]],
           sms: int) -> tuple[ActionCost, ActionCost]:
    """(forward, backward) with their all-to-alls replaced by what the `windows` (compute,
    all-to-alls) leave exposed beside their compute."""
    c_f, c_b = forward.exposed.get("ep", 0.0), backward.exposed.get("ep", 0.0)
    c = c_f + c_b
    if c <= 0.0:
        return forward, backward
    left = sum(overlapped_seconds(g, a2a, EP_A2A, sms) - g for g, a2a in windows)
    return _share(forward, c_f, left * c_f / c), _share(backward, c_b, left * c_b / c)


def _share(cost: ActionCost, all_to_alls: float, exposed: float) -> ActionCost:
    """`cost` with its all-to-alls cut to `exposed`, as communication and on its critical path
    alike (as an overlapped TP collective counts only what it adds: cost_model.py)."""
    return ActionCost(cost.seconds - all_to_alls + exposed, {**cost.comm, "ep": exposed}, cost.recompute,
                      {**cost.exposed, "ep": exposed}, cost.wire)
