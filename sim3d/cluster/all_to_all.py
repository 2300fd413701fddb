"""Where an all-to-all's shares lie on the cluster graph (Topology.all_to_all_load).

Each member of a group of n sends 1/n of its buffer to every other member. Inside a node a
share crosses the NVSwitch. Across nodes NCCL's PXN (NCCL 2.12 release notes;
NCCL_PXN_DISABLE) first moves it over NVLink to the GPU of the sender's node wired to the
receiver's rail, which sends it out of that rail's NIC (Topology.pxn_path).

`pairwise_load` walks every ordered pair of members: O(n^2) paths per group, so O(GPUs x n)
for all groups of an axis (16 s at 16,384 GPUs with groups of 64). `group_load` gives the
same loads by counting members per node and rail: every share bound for rail r of node B
leaves node A by the same NIC, leaf and switches, so those edges take the counts at once,
and the links between leaves take the product of the members each leaf sends and receives
on that rail. It holds while every GPU sends through its own NIC and every flow between two
leaves takes the same spine; with a failed NIC, or under ECMP (each flow hashed onto its own
spine), the routes are no longer alike and `pairwise_load` is used.
"""

from __future__ import annotations

from collections import Counter, defaultdict


def pairwise_load(topology, group: list[int]) -> Counter:
    """Bytes per byte of every member's buffer on each directed edge: one path per pair."""
    crossings: Counter = Counter()
    for a in group:
        for b in group:
            if a != b:
                crossings.update(topology.pxn_path(a, b))
    return Counter({edge: count / len(group) for edge, count in crossings.items()})


def group_load(topology, group: list[int]) -> Counter:
    """The same loads as `pairwise_load`, counted per node and rail."""
    if topology.has_failed_nic or topology.fabric.ecmp:  # routes differ pair by pair
        return pairwise_load(topology, group)
    n = len(group)
    members: dict[int, list[int]] = defaultdict(list)  # node -> local GPUs of members
    for rank in group:
        node, local = topology.gpu_of(rank)
        members[node].append(local)
    rail = topology.own_nic
    on_rail = {node: Counter(rail(local) for local in locals_) for node, locals_ in members.items()}
    everywhere: Counter = Counter()
    for counts in on_rail.values():
        everywhere.update(counts)
    load: Counter = Counter()
    sent: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))  # rail -> leaf -> members sending
    received: dict[int, dict[int, float]] = defaultdict(lambda: defaultdict(float))  # rail -> leaf -> receivers
    for node, locals_ in members.items():
        m, switch = len(locals_), ("switch", node)
        elsewhere = everywhere - on_rail[node]  # rail -> members on other nodes
        for local in locals_:
            gpu, own = ("gpu", node, local), rail(local)
            if m > 1:  # to and from the node's other members
                load[(gpu, switch)] += (m - 1) / n
                load[(switch, gpu)] += (m - 1) / n
            if n > m:  # from every member elsewhere, through its own NIC
                load[(("nic", node, own), gpu)] += (n - m) / n
            for r, count in elsewhere.items():  # to every member elsewhere, on that member's rail
                source = gpu
                if r != own:  # PXN: over NVLink to the GPU wired to rail r
                    source = ("gpu", node, topology.rail_gpu(r))
                    load[(gpu, switch)] += count / n
                    load[(switch, source)] += count / n
                load[(source, ("nic", node, r))] += count / n
        for r, count in elsewhere.items():
            leaf = ("leaf", topology.leaf_of(node, r))
            load[(("nic", node, r), leaf)] += m * count / n
            sent[r][leaf[1]] += m
        for r, count in on_rail[node].items() if n > m else ():
            leaf = ("leaf", topology.leaf_of(node, r))
            load[(leaf, ("nic", node, r))] += count * (n - m) / n
            received[r][leaf[1]] += count
    for r, leaves in sent.items():  # shares between leaves climb the tiers above them
        for leaf_a, senders in leaves.items():
            for leaf_b, receivers in received[r].items():
                for edge in topology.fabric.climb(leaf_a, leaf_b):
                    load[edge] += senders * receivers / n
    return load
