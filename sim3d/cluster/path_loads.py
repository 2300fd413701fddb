"""Bytes sent over many GPU-to-GPU paths, summed per directed edge of the cluster graph without
routing each path.

A fixed route between two nodes is the sender's way out to its leaf, the two leaves' climb and
the receiver's way in (`Topology._route`), so bytes are summed per sending GPU, per leaf pair
and per receiving GPU, and each sum is laid on its edges once; inside a node a message takes
its GPU's NVLink up and the peer's down. Under ECMP a route depends on its two ranks, and each
path is laid whole. Edges are counted by number (`Topology.edge_order`: edge k is 2k one way
and 2k + 1 the other), so 131,072 GPUs' ring hops cost a few numpy passes, not a dictionary
update each.

The sums are taken in a fixed order: per GPU (or leaf pair) first, in the order the messages
were given, then per edge in the order its pieces are laid (inside a node, whole paths, ways
out, ways in, climbs); `np.bincount` adds in array order, so a table is the same to the last
bit from run to run.
"""

from __future__ import annotations

import numpy as np


def lay(topology, a, b, nbytes) -> np.ndarray:
    """Bytes on each directed edge (indexed by `Topology.edge_index`'s numbers) of messages of
    `nbytes` from rank a[i] to rank b[i]."""
    gpn = topology.gpus_per_node
    a, b, w = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64), np.asarray(nbytes, dtype=float)
    cross = a // gpn != b // gpn
    inside = ~cross & (a != b)
    ids, sums = [], []  # pieces: (directed edge numbers, bytes), in the order they are added
    for ranks, towards in ((a[inside], True), (b[inside], False)):
        gpu, total = _summed(ranks, w[inside])
        ids.append(2 * topology._gpu_edge[gpu] + (0 if towards else 1))  # GPU -> switch, switch -> GPU
        sums.append(total)
    a, b, w = a[cross], b[cross], w[cross]
    if topology.fabric.ecmp:
        index = topology.edge_index
        for x, y, z in zip(a.tolist(), b.tolist(), w.tolist()):
            route = [index[edge] for edge in topology.path(x, y)]
            ids.append(np.array(route, dtype=np.int64)), sums.append(np.full(len(route), z))
        return _total(topology, ids, sums)
    for ranks, out in ((a, True), (b, False)):
        gpu, total = _summed(ranks, w)
        way, per_gpu = _ways(topology, gpu, out)
        ids += way
        sums += [total] * per_gpu if per_gpu else [np.repeat(total, [len(e) for e in way])]
    leaves = _leaf_of(topology, a), _leaf_of(topology, b)
    span = int(max(leaves[0].max(initial=0), leaves[1].max(initial=0))) + 1
    pair, total = _summed(leaves[0] * span + leaves[1], w)
    index = topology.edge_index_of_fabric
    for key, nbytes in zip(pair.tolist(), total.tolist()):
        climb = [index[edge] for edge in topology.fabric.climb(*divmod(key, span))]
        ids.append(np.array(climb, dtype=np.int64)), sums.append(np.full(len(climb), nbytes))
    return _total(topology, ids, sums)


def _total(topology, ids: list, sums: list) -> np.ndarray:
    laid = np.bincount(np.concatenate(ids), weights=np.concatenate(sums), minlength=2 * len(topology.edge_order))
    return laid.astype(float, copy=False)  # bincount of nothing counts in integers


def _summed(keys: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each distinct key, in the order it first occurs, and the sum of its weights added in
    that order."""
    unique, first, where = np.unique(keys, return_index=True, return_inverse=True)
    sums = np.bincount(where, weights=weights, minlength=len(unique))
    order = np.argsort(first, kind="stable")
    return unique[order], sums[order]


def _ways(topology, gpu: np.ndarray, out: bool) -> tuple[list[np.ndarray], int]:
    """The edges from each GPU to its leaf (`out`) or back: (edge-number arrays, how many per
    GPU when every GPU has as many, listed edge by edge; else 0, listed GPU by GPU). A GPU whose
    NIC failed goes through a proxy GPU's (`Topology._to_nic`), and then each GPU is laid alone."""
    gpn, nics = topology.gpus_per_node, topology.nics
    node, local = np.divmod(gpu, gpn)
    own = node * nics + local * nics // gpn
    if not topology.has_failed_nic:  # GPU -> its NIC -> leaf, or leaf -> NIC -> GPU
        pcie, nic = 2 * topology._pcie_edge[node * gpn + local], 2 * topology._nic_edge[own]
        return ([pcie, nic] if out else [nic + 1, pcie + 1]), 2
    index, ways = topology.edge_index, []
    for n, g in zip(node.tolist(), local.tolist()):
        port = ("nic", n, topology.nic_of(n, g))
        path = topology._to_nic(n, g) + [(port, topology._leaf(n, port[2]))]
        edges = path if out else [(v, u) for u, v in reversed(path)]
        ways.append(np.array([index[edge] for edge in edges], dtype=np.int64))
    return ways, 0


def _leaf_of(topology, ranks: np.ndarray) -> np.ndarray:
    """The leaf each rank's GPU reaches the fabric through (its NIC's, or its proxy NIC's)."""
    gpn, nics = topology.gpus_per_node, topology.nics
    node, local = np.divmod(ranks, gpn)
    if not topology.has_failed_nic:
        return topology._nic_leaf[node * nics + local * nics // gpn]
    nic = np.array([topology.nic_of(n, g) for n, g in zip(node.tolist(), local.tolist())], dtype=np.int64)
    return topology._nic_leaf[node * nics + nic]
