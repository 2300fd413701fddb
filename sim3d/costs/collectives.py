"""NCCL-like collective algorithms with alpha-beta costs over a group's bottleneck link.

Sizes follow nccl-tests (NVIDIA/nccl-tests doc/PERFORMANCE.md): `nbytes` is the per-rank
buffer of an all-reduce, the full (gathered) output of an all-gather, the full input of a
reduce-scatter, the per-rank send buffer of an all-to-all. The bus-bandwidth factors below
are the ones that document defines, so a measured busbw plugs in directly.

Of the algorithms NCCL implements we model ring, double binary tree (all-reduce only), NVLS
and the two-level hierarchical all-reduce (intra-node reduce-scatter, inter-node all-reduce,
intra-node all-gather); inside a node also the ring's low-latency protocol LL beside
Simple; and, like NCCL's tuner, take the fastest.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..cluster.topology import GroupLink

# Achievable fraction of the link rate for large messages (bus bandwidth / link rate):
# NVLink: per GPU preset, from measured ring busbw (hardware.py: A100 ~230 of 300 GB/s,
#   NVIDIA/nccl-tests#149; H100 ~370 of 450 GB/s, nccl-tests#212), carried by GroupLink.
# InfiniBand: 4x HDR 200 Gb/s per 8 A100 reach 96 GB/s peak of 100 GB/s busbw
#   (NVIDIA/nccl-tests issue #119, 2022); NCCL maintainers expect 46-48 of 50 GB/s per 400G
#   NIC (nccl-tests#290, #319). 0.94, the middle of the maintainers' range (large messages;
#   latency is separate). It was 0.90, below both sources; at 0.94 every network row of
#   validation/nccl.csv lands within 8% (the HDR all-reduce moved from -11.6% to -7.8%).
NETWORK_EFFICIENCY = 0.94
# Size dependence inside a node (Hockney's n_1/2 model, Hockney 1991 "Performance parameters
# and benchmarking of supercomputers"): a message of S bytes moves as if it were S + n_half at
# the peak bus bandwidth. n_half = 16 MiB reproduces the measured 8x H100 all-reduce sweep of
# NVIDIA/dgxc-benchmarking nccl/README.md within 7% from 16 MiB to 4 GiB (validation/nccl.csv;
# tests/test_costs.py); below 16 MiB (LL / LL128 protocols) it is pessimistic (1 MiB: 2.4x).
NVLINK_N_HALF_BYTES = 16 * 2**20
# NVLS all-reduce bus bandwidth by GPUs in the node, relative to 8 GPUs (user measurement on
# 8x H100, NVIDIA/nccl#1455: 370, 370, 420, 440, 460, 480 GB/s for 2..8 GPUs; <= 4 as ring).
NVLS_SCALING = {2: 370 / 480, 3: 370 / 480, 4: 370 / 480, 5: 420 / 480, 6: 440 / 480, 7: 460 / 480, 8: 1.0}




@dataclass(frozen=True)
class LowLatencyProtocol:
    """One of NCCL's low-latency protocols on a ring inside a node, as NCCL's own tuner
    prices it (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel, v2.19-2.21): a base
    latency, a latency per ring step over NVLink, and a bus bandwidth that is a fraction of
    the Simple protocol's (LL sends a flag with every 4 data bytes; LL128 one per 120 of 128),
    LL capped at llMaxBw. They win for small messages, where Simple's pipeline is still filling
    (the n_1/2 above)."""
    name: str
    base_s: float
    step_s: float
    cap: float = float("inf")  # bytes/s of bus bandwidth


# The scenario format's default NVLink hop latency (`cluster.intra_node.latency_us: 2.0`), at
# which NCCL's per-step constants are taken as they are.
DEFAULT_HOP_LATENCY_S = 2.0e-6
LOW_LATENCY_PROTOCOLS = (
    # ring LL: baseLat 6.6 us, NVLink hwLat 0.6 us; at most llMaxBw 87.7 GB/s (Ampere and
    # Hopper, one node)
    LowLatencyProtocol("LL", 6.6e-6, 0.6e-6, 87.7e9),
)
# LL128 (baseLat 14 us, hwLat 1.9 us, busBw x 0.92 in the same tuner) is not a candidate: the
# n_1/2 fit above was made on measured sweeps, so it already holds whatever protocol NCCL chose
# between 1 MiB and a few hundred MiB. Priced on top of it, LL128 made every mid-size A100
# collective ~20% faster than that fit and moved the Korthikanti step error from 6.2% to 6.9%.


@dataclass(frozen=True)
class Collective:
    """Everything the cost model knows about one collective; adding one is one `register_collective`."""
    name: str  # nccl-tests' name (all_reduce), the key of measured rows and profiles
    op_name: str | None  # Megatron's spelling in the op graph (all-reduce), None if ops never name it
    bus_factor: Callable[[int], float]  # nccl-tests PERFORMANCE.md: busbw = algbw * factor(n)
    ring_steps: Callable[[int], int]  # latency hops of its ring
    # NCCL's ring LL bus bandwidth as a fraction of Simple's (tuning.cc: busBw / 4 for
    # all-reduce, / 3 for one-node all-gather / reduce-scatter); None: LL is not priced
    ll_fraction: float | None
    # True: also double binary tree, hierarchical and NVLS (NCCL runs them for all-reduce only)
    reduction_trees: bool = False
    # True: across nodes every member sends 1/n to each other one at once (all-to-all)
    pairwise_across_nodes: bool = False
    aliases: tuple[str, ...] = ()  # other spellings in profiles (allreduce, p2p ...)


COLLECTIVES: dict[str, Collective] = {}
COLLECTIVE: dict[str, str] = {}  # Megatron's names -> nccl-tests' names, kept by register_collective


def register_collective(collective: Collective) -> Collective:
    COLLECTIVES[collective.name] = collective
    if collective.op_name is not None:
        COLLECTIVE[collective.op_name] = collective.name
    return collective


def _ring(n: int) -> int:
    return n - 1


for _collective in (
    Collective("all_reduce", "all-reduce", lambda n: 2 * (n - 1) / n, lambda n: 2 * (n - 1), 1 / 4,
               reduction_trees=True, aliases=("allreduce",)),
    Collective("all_gather", "all-gather", lambda n: (n - 1) / n, _ring, 1 / 3, aliases=("allgather",)),
    Collective("reduce_scatter", "reduce-scatter", lambda n: (n - 1) / n, _ring, 1 / 3,
               aliases=("reducescatter",)),
    Collective("all_to_all", "all-to-all", lambda n: (n - 1) / n, _ring, None, pairwise_across_nodes=True,
               aliases=("alltoall",)),
    Collective("send_recv", None, lambda n: 1.0, _ring, 1 / 4, aliases=("send", "recv", "p2p", "sendrecv")),
):
    register_collective(_collective)


def bus_factor(op: str, n: int) -> float:
    """nccl-tests bus-bandwidth factor: busbw = algbw * factor(n)."""
    return COLLECTIVES[op].bus_factor(n) if op in COLLECTIVES else 1.0


def collective_named(name: str) -> str | None:
    """The nccl-tests name a profile's spelling of a collective means, or None."""
    for collective in COLLECTIVES.values():
        if name == collective.name or name in collective.aliases:
            return collective.name
    return None


@dataclass(frozen=True)
class CollectiveTime:
    seconds: float
    algorithm: str
    # of `seconds`: the phase that crosses nodes, where it is not the whole collective (the
    # hierarchical all-reduce's inter-node all-reduce between its two NVLink phases)
    network_s: float | None = None


def _effective_bw(link: GroupLink) -> float:
    """Ring bus bandwidth: the slower of its NVLink hops and its node crossings, each at the
    efficiency measured for that kind of link."""
    if link.nodes == 1:
        return link.bw * link.intra_efficiency
    return min(link.ring_intra_bw * link.intra_efficiency, link.ring_inter_bw * NETWORK_EFFICIENCY)


def _size_penalty(nbytes: float, link: GroupLink) -> float:
    """Bytes a message moves as (Hockney's n_1/2) inside a node; as is across nodes."""
    return nbytes + NVLINK_N_HALF_BYTES if link.nodes == 1 else nbytes


def collective_time(op: str, nbytes: float, link: GroupLink) -> CollectiveTime:
    n = link.size
    if n <= 1 or nbytes <= 0:
        return CollectiveTime(0.0, "none")
    if op not in COLLECTIVES:
        raise ValueError(f"unknown collective {op!r}; expected one of {', '.join(COLLECTIVES)}")
    coll = COLLECTIVES[op]
    bw = _effective_bw(link)
    moved = _size_penalty(nbytes, link)
    candidates = [CollectiveTime(coll.ring_steps(n) * link.latency + coll.bus_factor(n) * moved / bw, "ring")]
    if link.nodes == 1 and coll.ll_fraction is not None:
        candidates += [_low_latency_ring(p, coll, nbytes, n, bw, link.intra_latency) for p in LOW_LATENCY_PROTOCOLS]
    if coll.reduction_trees:
        # double binary tree: 2 log2(n) latency hops, each rank moves the buffer twice
        candidates.append(CollectiveTime(2 * math.ceil(math.log2(n)) * link.latency + 2 * moved / bw, "tree"))
        if link.nodes > 1 and link.per_node > 1:
            candidates.append(_hierarchical_all_reduce(nbytes, link))
        if link.nodes == 1 and link.nvls_busbw and n in NVLS_SCALING:
            # NVLink SHARP: the switch reduces; measured busbw by group size (one latency each way)
            nvls = link.nvls_busbw * NVLS_SCALING[n] * (link.bw / link.intra_bw)  # shared links scale it
            candidates.append(CollectiveTime(2 * link.latency + coll.bus_factor(n) * moved / nvls, "nvls"))
    if coll.pairwise_across_nodes and link.nodes > 1:
        # every member sends 1/n of its buffer to each other one at once: the most loaded link,
        # shared with the concurrent groups, sets the pace (Topology.all_to_all_load)
        candidates = [CollectiveTime((n - 1) * link.latency + all_to_all_s_per_byte(link) * nbytes, "pairwise")]
    return min(candidates, key=lambda c: c.seconds)


def all_to_all_s_per_byte(link: GroupLink) -> float:
    """Seconds per byte of every member's buffer of an all-to-all across nodes: each member
    sends 1/n of it to each other one at once, so the most loaded link, shared with the
    concurrent groups, sets the pace (Topology.all_to_all_load)."""
    if link.a2a_network_s is None:
        raise ValueError("an all-to-all across nodes needs the group's all-to-all loads: "
                         "Topology.group_link computes them for the ep axis")
    return max(link.a2a_network_s / NETWORK_EFFICIENCY, link.a2a_nvlink_s / link.intra_efficiency)


def _low_latency_ring(protocol: LowLatencyProtocol, coll: Collective, nbytes: float, n: int, simple_bw: float,
                      hop_latency: float) -> CollectiveTime:
    """NCCL's constants hold at the default hop latency; a what-if on the hop latency
    (`cluster.intra_node.latency_us`, or a slower fabric) scales the per-step latency with it."""
    bus_bw = min(simple_bw * coll.ll_fraction, protocol.cap)
    step = protocol.step_s * hop_latency / DEFAULT_HOP_LATENCY_S
    return CollectiveTime(protocol.base_s + coll.ring_steps(n) * step + coll.bus_factor(n) * nbytes / bus_bw,
                          f"ring {protocol.name}")


def _hierarchical_all_reduce(nbytes: float, link: GroupLink) -> CollectiveTime:
    k, nodes = link.per_node, link.nodes
    intra = link.intra_bw * link.intra_efficiency
    inter = link.inter_bw * NETWORK_EFFICIENCY
    rs = (k - 1) * link.intra_latency + (k - 1) / k * (nbytes + NVLINK_N_HALF_BYTES) / intra
    ar = 2 * (nodes - 1) * link.inter_latency + 2 * (nodes - 1) / nodes * (nbytes / k) / inter
    return CollectiveTime(2 * rs + ar, "hierarchical", ar)


def p2p_time(nbytes: float, bw: float, latency: float, crosses_nodes: bool, intra_efficiency: float = 0.77) -> float:
    if nbytes <= 0 or bw == float("inf"):
        return latency
    return latency + nbytes / (bw * (NETWORK_EFFICIENCY if crosses_nodes else intra_efficiency))
