"""Megatron-Core's expert-parallel all-to-all overlap (`training.moe_a2a_overlap`;
--overlap-moe-expert-parallel-comm with --delay-wgrad-compute).

Its combined 1F1B schedule runs the forward of one micro-batch beside the backward of another,
layer by layer, on two streams: "EP A2A in forward step is hidden by the attention/mlp
computation in the backward step, and vice versa" (megatron/core/pipeline_parallel/
combined_1f1b.py, combined_1f1b_schedule_for_no_pipelining; the interleaved schedule pairs them
the same way, schedules.py). So an MoE layer's forward and backward together take their compute
plus what their all-to-alls do not hide under it: with g the pair's compute and c its
all-to-alls, max(g + min(g, c) x sms / (SMs - sms), c), the all-to-alls' NCCL kernels holding
COMM_SMS of the GPU while they run (tp_overlap.py: the no-margin overlap). Each of the two
actions keeps its own compute and its share of the rest, in proportion to its all-to-alls.

sim3d prices every forward and backward of an MoE layer as paired, though the schedule's
warm-up forwards and cool-down backwards run alone (about p x v of a rank's m x v chunk passes
each way): optimistic by their exposed all-to-alls. Nor does memory count the one extra warm-up
micro-batch the overlap schedules (schedules.py) in flight.
"""

from __future__ import annotations

from .action_cost import ActionCost
from .tp_overlap import COMM_SMS, Overlap, overlapped_seconds

EP_A2A = Overlap("ep all-to-all", COMM_SMS, None, False)


def paired(forward: ActionCost, backward: ActionCost, sms: int) -> tuple[ActionCost, ActionCost]:
    """(forward, backward) of one MoE layer as the overlap runs them together."""
    c_f, c_b = forward.exposed.get("ep", 0.0), backward.exposed.get("ep", 0.0)
    c = c_f + c_b
    if c <= 0.0:
        return forward, backward
    g = forward.seconds - c_f + backward.seconds - c_b
    left = overlapped_seconds(g, c, EP_A2A, sms) - g  # what the pair adds to its compute
    return _share(forward, c_f, left * c_f / c), _share(backward, c_b, left * c_b / c)


def _share(cost: ActionCost, all_to_alls: float, exposed: float) -> ActionCost:
    return ActionCost(cost.seconds - all_to_alls + exposed, cost.comm, cost.recompute,
                      {**cost.exposed, "ep": exposed}, cost.wire)
