"""Traffic per link of the cluster graph over one simulated step.

Every trace row that moves data is laid on the graph (topology.py's routed paths):

* a SEND on the path from its rank to its peer (the matching RECV row is the same message);
* a collective row (TP / CP / EP_COMM inside compute, DP_REDUCE, PARAM_GATHER) as a ring: the
  rank sends its `bytes` (the ring's bus bytes, see `ActionCost.wire`) to the next member of
  its group along that axis; a hop between nodes is spread over the NICs the group drives
  there, on their own rails, as the cost model prices it (`Topology.ring_hop_edges`). Tree, NVLS and hierarchical algorithms move the same bus bytes
  over other hops; the ring placement is the accounting, not a claim about the algorithm.
  Expert-parameter reductions ride the data-parallel ring too.

Folded runs replay one pipeline; each simulated rank stands for every rank with its pipeline
coordinate, whose actions (and so bytes) are the same, so its bytes are laid on the paths of
all of them. `busy_fraction` is bytes / (bandwidth x step time) for one direction of a link:
its mean utilisation over the step (links are full duplex).
"""

from __future__ import annotations

from collections import defaultdict

AXIS_OF_STREAM = {"tp": "tp", "cp": "cp", "ep": "ep", "dp": "dp"}
LINK_COLUMNS = ("src", "dst", "kind", "bandwidth_Bps", "bytes", "busy_fraction")


def link_traffic(rows, topology, step_time: float, folded: bool):
    """DataFrame with LINK_COLUMNS: one row per direction of every graph edge, busiest first."""
    import pandas as pd

    placement = topology.placement
    sent: dict[tuple[int, str], float] = defaultdict(float)  # (rank, axis) -> ring bytes
    p2p: dict[tuple[int, int], float] = defaultdict(float)  # (src, dst) -> bytes
    for rank, _, _, _, kind, stream, _, _, nbytes, peer in rows:
        if not nbytes:
            continue
        if stream == "pp":
            if kind.startswith("SEND"):
                p2p[(rank, peer)] += nbytes
        elif stream in AXIS_OF_STREAM:
            sent[(rank, AXIS_OF_STREAM[stream])] += nbytes
    if folded:  # a simulated rank stands for every rank with its pipeline coordinate
        by_stage = {(placement.coords(rank)["pp"], axis): b for (rank, axis), b in sent.items()}
        bytes_of = lambda rank, axis: by_stage.get((placement.coords(rank)["pp"], axis), 0.0)  # noqa: E731
        stage_p2p = {(placement.coords(a)["pp"], placement.coords(b)["pp"]): n for (a, b), n in p2p.items()}
        p2p = {}
        for pipe in _pipelines(placement):
            for (a, b), n in stage_p2p.items():
                p2p[(pipe[a], pipe[b])] = n
    else:
        bytes_of = lambda rank, axis: sent.get((rank, axis), 0.0)  # noqa: E731
    load: dict[tuple, float] = defaultdict(float)  # directed edge -> bytes
    for axis in sorted({axis for _, axis in sent}):
        for group in placement.groups(axis):
            for i, rank in enumerate(group):
                nbytes = bytes_of(rank, axis)
                if nbytes and len(group) > 1:
                    for edge, share in topology.ring_hop_edges(group, i):
                        load[edge] += nbytes * share
    for (a, b), nbytes in p2p.items():
        for edge in topology.path(a, b):
            load[edge] += nbytes
    records = []
    for u, v, data in topology.graph.edges(data=True):
        for src, dst in ((u, v), (v, u)):
            nbytes = load.get((src, dst), 0.0)
            busy = nbytes / (data["bw"] * step_time) if step_time > 0 else 0.0
            records.append((_name(src), _name(dst), data["kind"], data["bw"], nbytes, busy))
    table = pd.DataFrame(records, columns=list(LINK_COLUMNS))
    return table.sort_values(["busy_fraction", "src", "dst"], ascending=[False, True, True], ignore_index=True)


def _pipelines(placement) -> list[list[int]]:
    return [placement.pipeline(tp=t, dp=d, cp=c)
            for d in range(placement.dp) for c in range(placement.cp) for t in range(placement.tp)]


def _name(node: tuple) -> str:
    """("gpu", 3, 5) -> "gpu3.5", ("leaf", 2) -> "leaf2": a link end readable in a CSV."""
    kind, *where = node
    return kind + ".".join(str(w) for w in where)
