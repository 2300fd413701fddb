"""NCCL-like collective algorithms with alpha-beta costs over a group's bottleneck link.

Sizes follow nccl-tests (NVIDIA/nccl-tests doc/PERFORMANCE.md): `nbytes` is the per-rank
buffer of an all-reduce, the full (gathered) output of an all-gather, the full input of a
reduce-scatter, the per-rank send buffer of an all-to-all. The bus-bandwidth factors below
are the ones that document defines, so a measured busbw plugs in directly.

Of the algorithms NCCL implements we model ring, double binary tree (all-reduce only) and
the two-level hierarchical all-reduce (intra-node reduce-scatter, inter-node all-reduce,
intra-node all-gather), and, like NCCL's tuner, take the fastest.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..topology import GroupLink

# Achievable fraction of the link rate for large messages (bus bandwidth / link rate):
# NVLink: 8x A100-SXM4-80GB all_reduce_perf reaches ~200 GB/s busbw of the 300 GB/s per
#   direction (NVIDIA/nccl-tests issue #149, 2023; issue #178 reports 208 GB/s) -> 0.70.
# InfiniBand: 4x HDR 200 Gb/s per 8 A100 reach 96 GB/s peak of 100 GB/s busbw
#   (NVIDIA/nccl-tests issue #119, 2022) -> 0.90 (large messages; latency is separate).
NVLINK_EFFICIENCY = 0.70
NETWORK_EFFICIENCY = 0.90

BUS_FACTOR = {  # nccl-tests PERFORMANCE.md: busbw = algbw * factor(n)
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "send_recv": lambda n: 1.0,
}


def bus_factor(op: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor: busbw = algbw * factor(n)."""
    return BUS_FACTOR[op](n) if op in BUS_FACTOR else 1.0


@dataclass(frozen=True)
class CollectiveTime:
    seconds: float
    algorithm: str


def _effective_bw(link: GroupLink) -> float:
    eff = NETWORK_EFFICIENCY if link.nodes > 1 else NVLINK_EFFICIENCY
    return link.bw * eff


def collective_time(op: str, nbytes: float, link: GroupLink) -> CollectiveTime:
    n = link.size
    if n <= 1 or nbytes <= 0:
        return CollectiveTime(0.0, "none")
    if op not in BUS_FACTOR:
        raise ValueError(f"unknown collective {op!r}; expected one of {', '.join(BUS_FACTOR)}")
    bw = _effective_bw(link)
    steps = 2 * (n - 1) if op == "all_reduce" else (n - 1)
    candidates = [CollectiveTime(steps * link.latency + BUS_FACTOR[op](n) * nbytes / bw, "ring")]
    if op == "all_reduce":
        # double binary tree: 2 log2(n) latency hops, each rank moves the buffer twice
        candidates.append(CollectiveTime(2 * math.ceil(math.log2(n)) * link.latency + 2 * nbytes / bw, "tree"))
        if link.nodes > 1 and link.per_node > 1:
            candidates.append(_hierarchical_all_reduce(nbytes, link))
    if op == "all_to_all" and link.nodes > 1:
        # off-node share over the network, on-node share over NVLink, concurrently
        off = (n - link.per_node) / n * nbytes / (link.inter_bw * NETWORK_EFFICIENCY)
        on = (link.per_node - 1) / n * nbytes / (link.intra_bw * NVLINK_EFFICIENCY)
        candidates = [CollectiveTime((n - 1) * link.latency + max(off, on), "pairwise")]
    return min(candidates, key=lambda c: c.seconds)


def _hierarchical_all_reduce(nbytes: float, link: GroupLink) -> CollectiveTime:
    k, nodes = link.per_node, link.nodes
    intra = link.intra_bw * NVLINK_EFFICIENCY
    inter = link.inter_bw * NETWORK_EFFICIENCY
    rs = (k - 1) * link.intra_latency + (k - 1) / k * nbytes / intra
    ar = 2 * (nodes - 1) * link.inter_latency + 2 * (nodes - 1) / nodes * (nbytes / k) / inter
    return CollectiveTime(2 * rs + ar, "hierarchical")


def p2p_time(nbytes: float, bw: float, latency: float, crosses_nodes: bool) -> float:
    if nbytes <= 0 or bw == float("inf"):
        return latency
    return latency + nbytes / (bw * (NETWORK_EFFICIENCY if crosses_nodes else NVLINK_EFFICIENCY))
