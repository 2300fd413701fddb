"""Traffic per link of the cluster graph over one simulated step.

Every trace row that moves data is laid on the graph (topology.py's routed paths):

* a SEND on the path from its rank to its peer (the matching RECV row is the same message);
* an EP_COMM row (all-to-alls) as equal shares of its `bytes` to every other member of the
  rank's expert-parallel group, on their PXN routes (`Topology.all_to_all_edges`), as the cost
  model prices it: shares between leaves cross the spine;
* the other collective rows (TP / CP_COMM inside compute, DP_REDUCE, PARAM_GATHER) as a ring:
  the rank sends its `bytes` (the ring's bus bytes, see `ActionCost.wire`) to the next member
  of its group along that axis; a hop between nodes is spread over the NICs the group drives
  there, on their own rails, as the cost model prices it (`Topology.ring_hop_edges`). Tree,
  NVLS and hierarchical algorithms move the same bus bytes over other hops; the ring
  placement is the accounting, not a claim about the algorithm. A data-parallel row's bytes
  are split as the cost model splits a bucket (`gradient_split`): the dense parameters' share
  on the dp x cp ring, an MoE model's experts' share on the ring of their replicas.

Folded runs replay one pipeline; each simulated rank stands for every rank with its pipeline
coordinate, whose actions (and so bytes) are the same, so its bytes are laid on the paths of
all of them. `busy_fraction` is bytes / (bandwidth x step time) for one direction of a link:
its mean utilisation over the step (links are full duplex).
"""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache

import numpy as np

from ..cluster.path_loads import lay
from ..cluster.placement import GRADIENT_AXIS, SHARD_AXIS
from ..costs.moe_dispatch import network_share

AXIS_OF_STREAM = {"tp": "tp", "cp": "cp", "ep": "ep", "dp": GRADIENT_AXIS}
LINK_COLUMNS = ("src", "dst", "kind", "bandwidth_Bps", "bytes", "busy_fraction")


def twin_pair(placement, twin: int, peer: int) -> int:
    """The rank `twin` (a TP peer of `peer`'s sender) sends to: `peer`'s stage on its own pipeline."""
    return twin + (placement.coord(peer, "pp") - placement.coord(twin, "pp")) * placement.stride("pp")


def gradient_split(costs):
    """stage -> [(group axis, share of a data-parallel row's bytes)], as the cost model splits
    one bucket between the dense parameters' group and the experts' (CostModel.gradient_parts)."""
    @lru_cache(maxsize=None)
    def split(stage: int) -> tuple[tuple[str, float], ...]:
        parts = [(axis, wire) for axis, _, wire in costs.gradient_parts("reduce", 0, stage, 1) if wire]
        total = sum(wire for _, wire in parts)
        return tuple((axis, wire / total) for axis, wire in parts)
    return split


def _axes(stream: str, stage: int, split, kind: str = "") -> tuple[tuple[str, float], ...]:
    """(group axis, share of the row's bytes) a collective row's bytes go over: a sharded data-
    parallel unit's gathers and reduce-scatters (DP_COMM) over its shard group."""
    if kind == "DP_COMM":
        return ((SHARD_AXIS, 1.0),)
    if stream == "dp" and split is not None:
        return split(stage)
    return ((AXIS_OF_STREAM[stream], 1.0),)


def link_traffic(rows, topology, step_time: float, folded: bool, represented: dict[int, int] | None = None,
                 split=None):
    """`link_table` as a pandas DataFrame."""
    import pandas as pd
    return pd.DataFrame(link_table(rows, topology, step_time, folded, represented, split))


def link_table(rows, topology, step_time: float, folded: bool, represented: dict[int, int] | None = None,
               split=None) -> dict[str, np.ndarray]:
    """LINK_COLUMNS as numpy arrays (no pandas: `sim3d run` writes and plots them without it):
    one row per direction of every graph edge, busiest first (then by src, dst). `represented`
    (full fidelity with TP folding): rank not replayed -> its replayed twin, whose bytes it
    moved too. `split` (`gradient_split`): how data-parallel rows divide between gradient
    groups; without it they all go over dp x cp."""
    placement = topology.placement
    sent: dict[tuple[int, str], float] = defaultdict(float)  # (rank, axis) -> ring bytes
    p2p: dict[tuple[int, int], float] = defaultdict(float)  # (src, dst) -> bytes
    for rank, stage, _, _, kind, stream, _, _, nbytes, peer in rows:
        if not nbytes:
            continue
        if stream == "pp":
            if kind.startswith("SEND"):
                p2p[(rank, peer)] += nbytes
        elif stream in AXIS_OF_STREAM:
            for axis, share in _axes(stream, stage, split, kind):
                sent[(rank, axis)] += nbytes * share
    ranks = np.arange(placement.world_size)
    if folded:  # a simulated rank stands for every rank with its pipeline coordinate
        stage_of = (ranks // placement.stride("pp")) % placement.pp
        by_stage = {(placement.coord(rank, "pp"), axis): b for (rank, axis), b in sent.items()}
        bytes_of = lambda rank, axis: by_stage.get((placement.coord(rank, "pp"), axis), 0.0)  # noqa: E731
        stage_p2p = {(placement.coord(a, "pp"), placement.coord(b, "pp")): n for (a, b), n in p2p.items()}
        p2p = {}
        for pipe in _pipelines(placement):
            for (a, b), n in stage_p2p.items():
                p2p[(pipe[a], pipe[b])] = n
        laid, size, at = by_stage, placement.pp, stage_of  # bytes by stage, read at each rank's stage
    else:
        twin_of = represented or {}
        bytes_of = lambda rank, axis: sent.get((twin_of.get(rank, rank), axis), 0.0)  # noqa: E731
        replayed = ranks.copy()
        if twin_of:
            replayed[np.fromiter(twin_of, dtype=np.int64)] = np.fromiter(twin_of.values(), dtype=np.int64)
            by_src: dict[int, list] = defaultdict(list)
            for (a, b), n in p2p.items():
                by_src[a].append((b, n))
            for twin, replayed_rank in twin_of.items():
                for b, n in by_src.get(replayed_rank, ()):
                    p2p[(twin, twin_pair(placement, twin, b))] += n
        laid, size, at = sent, placement.world_size, replayed  # bytes by rank, read at each rank's twin

    def weights(axis: str) -> np.ndarray:
        """What each rank sends along `axis`."""
        own = np.zeros(size)
        for (where, on), b in laid.items():
            if on == axis:
                own[where] = b
        return own[at]
    load: dict[tuple, float] = defaultdict(float)  # directed edge -> bytes
    hops = []  # every ring hop and pipeline send, laid at once: (senders, receivers, bytes)
    for axis in sorted({axis for _, axis in sent}):
        if axis == "ep":
            _lay_all_to_alls(topology, placement, bytes_of, load)
            continue
        hops.append(_ring_hops(topology, placement, axis, weights(axis)))
    sends = list(p2p)  # after the rings, as they were always summed
    hops.append((np.array([a for a, _ in sends], dtype=np.int64), np.array([b for _, b in sends], dtype=np.int64),
                 np.array(list(p2p.values()), dtype=float)))
    nbytes = lay(topology, *(np.concatenate(column) for column in zip(*hops)))  # cluster/path_loads.py
    if load:  # the all-to-alls first, as they were always summed
        index = topology.edge_index
        nbytes = np.bincount([index[edge] for edge in load], weights=list(load.values()),
                             minlength=len(nbytes)) + nbytes
    graph, names = topology.graph, {}
    us, vs = zip(*topology.edge_order)  # each edge both ways: (u, v) then (v, u)
    adjacency = graph.adj
    data = [adjacency[u][v] for u, v in topology.edge_order]
    kinds = np.repeat(np.array([d["kind"] for d in data], dtype=object), 2)
    bandwidth = np.repeat(np.array([d["bw"] for d in data], dtype=float), 2)
    for node in graph:
        names[node] = _name(node)
    src, dst = np.empty(len(nbytes), dtype=object), np.empty(len(nbytes), dtype=object)
    src[0::2] = dst[1::2] = [names[u] for u in us]
    src[1::2] = dst[0::2] = [names[v] for v in vs]
    busy = nbytes / (bandwidth * step_time) if step_time > 0 else np.zeros(len(nbytes))
    order = np.lexsort((dst, src, -busy))  # stable, as pandas' sort_values was
    return {name: column[order] for name, column in zip(
        LINK_COLUMNS, (src, dst, kinds, bandwidth, nbytes, busy))}


def _ring_hops(topology, placement, axis: str, weights: np.ndarray):
    """(senders, receivers, bytes) of every member's ring hop along `axis`, each member sending
    `weights[rank]`, in group order (the order the loads are summed in). A hop inside a node is
    itself; one that leaves it is spread over the NICs its group drives there
    (`Topology.ring_crossings`). Where every group lies in one node or has one member per node,
    each crossing is the hop itself too, and the whole axis is laid at once."""
    groups = placement.group_array(axis)
    if groups.shape[1] < 2:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0)
    nodes = np.sort(groups // topology.gpus_per_node, axis=1)
    one_node, spread = nodes[:, 0] == nodes[:, -1], np.all(np.diff(nodes, axis=1) != 0, axis=1)
    if np.all(one_node | spread):
        sent = weights[groups]
        moved = sent != 0
        return groups[moved], np.roll(groups, -1, axis=1)[moved], sent[moved]
    return _ring_hops_group_by_group(topology, placement, axis, weights, groups)


def _ring_hops_group_by_group(topology, placement, axis: str, weights: np.ndarray, groups: np.ndarray):
    """`_ring_hops` for any groups, each crossing spread over its NICs by the topology."""
    senders, receivers, sizes = [], [], []
    for first in groups[:, 0].tolist():
        group = placement.shared_group(axis, first)[0]  # the tuple the topology caches by
        crossings = topology.ring_crossings(group)
        for i, nbytes in enumerate(weights[list(group)].tolist()):
            if not nbytes:
                continue
            if i not in crossings:  # inside a node: the hop itself
                senders.append(group[i]), receivers.append(group[(i + 1) % len(group)]), sizes.append(nbytes)
                continue
            for a, b, share in crossings[i]:
                senders.append(a), receivers.append(b), sizes.append(nbytes * share)
    return np.array(senders, dtype=np.int64), np.array(receivers, dtype=np.int64), np.array(sizes, dtype=float)


def _lay_all_to_alls(topology, placement, bytes_of, load: dict) -> None:
    """Expert-parallel rows on their PXN routes: a group whose members all moved the same
    bytes as its all-to-all at once, else each member's shares."""
    for group in placement.groups("ep"):
        if len(group) < 2:
            continue
        sizes = {bytes_of(rank, "ep") for rank in group}
        if len(sizes) == 1:
            (nbytes,) = sizes
            for edge, share in group_edges(topology, group) if nbytes else ():
                load[edge] += nbytes * share
            continue
        for rank in group:
            nbytes = bytes_of(rank, "ep")
            for edge, share in dispatched(topology, group, topology.member_hops("ep", rank)) if nbytes else ():
                load[edge] += nbytes * share


def link_timelines(rows, topology, links, folded: bool, top: int = 8,
                   represented: dict[int, int] | None = None, split=None) -> dict[str, list[tuple[float, float]]]:
    """How busy each of the `top` busiest link directions of `links` (link_table's columns, or
    link_traffic's table) was over time: "src->dst" -> [(time s, busy fraction from then on)],
    one point wherever a message or collective row that crosses it starts or ends. A row's
    bytes are spread evenly over its duration, laid as link_table lays them."""
    moved = np.flatnonzero(np.asarray(links["bytes"]) > 0)[:top]
    src, dst, bandwidth = (np.asarray(links[name])[moved].tolist() for name in ("src", "dst", "bandwidth_Bps"))
    named = {(a, b): (f"{a}->{b}", bw) for a, b, bw in zip(src, dst, bandwidth)}
    if not named:
        return {}
    placement = topology.placement
    pipelines = _pipelines(placement) if folded else None
    twins: dict[int, list[int]] = defaultdict(list)  # replayed rank -> the TP peers it stands for
    for twin, replayed in (represented or {}).items():
        twins[replayed].append(twin)
    laid: dict[tuple, list[tuple[tuple, float]]] = {}

    key_of: dict[tuple, tuple | None] = {}  # directed edge -> its names when it is one of the busiest

    def on_busiest(edges_shares):
        out: dict[tuple, float] = defaultdict(float)
        for edge, share in edges_shares:
            key = key_of.get(edge, False)
            if key is False:
                names = (_name(edge[0]), _name(edge[1]))
                key = key_of[edge] = names if names in named else None
            if key is not None:
                out[key] += share
        return list(out.items())

    stage_of: dict[int, int] = {}

    def pp_of(rank: int) -> int:
        if rank not in stage_of:
            stage_of[rank] = placement.coord(rank, "pp")
        return stage_of[rank]

    def lay(rank, stage, stream, peer, kind):
        """(link, share of the row's bytes) on the busiest links, for everything the row stands for."""
        pp = pp_of(rank)
        unit = kind == "DP_COMM"
        key = (pp, stream, pp_of(peer) if stream == "pp" else stage, unit) if folded else (rank, stream, peer, stage, unit)
        if key not in laid:
            if stream == "pp":
                pairs = ([(pipe[pp], pipe[key[2]]) for pipe in pipelines] if folded else
                         [(rank, peer)] + [(t, twin_pair(placement, t, peer)) for t in twins.get(rank, ())])
                laid[key] = on_busiest((edge, 1.0) for a, b in pairs for edge in topology.path(a, b))
            else:
                members = [pipe[pp] for pipe in pipelines] if folded else [rank] + twins.get(rank, [])
                laid[key] = on_busiest((edge, share * fraction) for axis, fraction in _axes(stream, stage, split, kind)
                                       for edge, share in _row_edges(topology, axis, members, folded))
        return laid[key]

    changes: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for rank, stage, _, _, kind, stream, start, end, nbytes, peer in rows:
        if not nbytes or end <= start or not (stream in AXIS_OF_STREAM or kind.startswith("SEND")):
            continue
        for link, share in lay(rank, stage, stream, peer, kind):
            rate = nbytes * share / (end - start) / named[link][1]
            changes[link] += [(start, rate), (end, -rate)]
    out = {}
    for link, deltas in changes.items():
        deltas.sort()
        level, points = 0.0, []
        for t, delta in deltas:
            level = max(0.0, level + delta)
            if points and points[-1][0] == t:
                points[-1] = (t, level)
            else:
                points.append((t, level))
        out[named[link][0]] = points
    return out


def _row_edges(topology, axis: str, members: list[int], folded: bool) -> list[tuple[tuple, float]]:
    """(directed edge, share of a row's bytes) of one collective row along `axis`, for every
    rank it stands for (folded: an expert-parallel row lays its stage's whole groups)."""
    placement, hops = topology.placement, []
    if axis == "ep" and folded:
        for group in {tuple(placement.group(axis, m)) for m in members}:
            hops += group_edges(topology, list(group)) if len(group) > 1 else []
        return hops
    for member in members:
        hops += (dispatched(topology, placement.group(axis, member), topology.member_hops(axis, member))
                 if axis == "ep" else topology.member_hops(axis, member))
    return hops


def group_edges(topology, group: list[int]) -> list[tuple[tuple, float]]:
    """(directed edge, bytes on it per byte each member sends) of a whole group's all-to-all:
    `member_edges` summed over the members, counted at once (sim3d/all_to_all.py)."""
    n = len(group)
    return dispatched(topology, group, [(edge, load * n / (n - 1))
                                        for edge, load in topology.all_to_all_load("ep", alone=group).items()])


def dispatched(topology, group, edges: list[tuple[tuple, float]]) -> list[tuple[tuple, float]]:
    """An expert all-to-all's edges with the share of its network bytes the scenario's
    dispatcher sends (costs/moe_dispatch.py); NVLink carries every copy."""
    share = network_share(topology.scenario, len({topology.gpu_of(rank)[0] for rank in group}))
    if share == 1.0:
        return edges
    return [(edge, load * (1.0 if topology.graph.edges[edge]["kind"] == "nvlink" else share)) for edge, load in edges]


def _pipelines(placement) -> list[list[int]]:
    return [placement.pipeline(tp=t, dp=d, cp=c)
            for d in range(placement.dp) for c in range(placement.cp) for t in range(placement.tp)]


@lru_cache(maxsize=None)
def _name(node: tuple) -> str:
    """("gpu", 3, 5) -> "gpu3.5", ("leaf", 2) -> "leaf2": a link end readable in a CSV."""
    return node[0] + ".".join(map(str, node[1:]))
