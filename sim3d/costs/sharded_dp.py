"""Sharded data parallelism inside compute actions: what per-unit parameter gathers and gradient
reduce-scatters add to a forward or backward.

ZeRO-3 / FSDP keeps each unit's parameters sharded; a unit (a transformer layer, the embedding,
the head: FSDP2 wraps each, torchtitan models/llama3/infra/parallelize.py apply_fsdp) is all-
gathered before its forward and, when resharded after the forward, again before its backward.
ZeRO-2 and ZeRO-3 reduce-scatter each unit's gradient after its backward, every micro-batch.
FSDP2 issues these on their own streams and prefetches one unit ahead (the gather of the next
unit starts when the current one starts computing), so they overlap the compute of the
neighbouring units; what they cannot hide is the first gather, the last reduce-scatter, and
any unit whose collectives outlast its neighbour's compute.

`unit_pipeline` replays that on two resources, the compute stream and the network (gathers and
reduce-scatters share the NIC, served in the order they are issued). Overlapped collectives
are not free: their NCCL kernels take COMM_SMS of the GPU's SMs from the compute they overlap
(as the TP overlap is charged, tp_overlap.py).
"""

from __future__ import annotations

from .tp_overlap import COMM_SMS


def unit_pipeline(compute: list[float], gathers: list[float], reduces: list[float], sms: int) -> float:
    """Seconds from the first gather to the last reduce-scatter of units computed in the given
    order. `gathers[i]` must end before unit i computes; `reduces[i]` starts after it. The
    gather of unit i+1 is issued when unit i starts, its own reduce-scatter when it ends."""
    n = len(compute)
    share = COMM_SMS / (sms - COMM_SMS)
    # compute slowed for the collectives it overlaps: the next unit's gather and the previous
    # unit's reduce-scatter run beside it
    slowed = [c + share * min(c, (gathers[i + 1] if i + 1 < n else 0.0) + (reduces[i - 1] if i else 0.0))
              for i, c in enumerate(compute)]
    network = gathered = gathers[0] if n else 0.0
    busy = 0.0  # compute stream free from
    for i in range(n):
        start = max(busy, gathered)
        if i + 1 < n:  # prefetch the next unit
            network = max(network, start) + gathers[i + 1]
            next_gathered = network
        busy = start + slowed[i]
        if reduces[i]:
            network = max(network, busy) + reduces[i]
        if i + 1 < n:
            gathered = next_gathered
    return max(busy, network)
