"""The switch tiers above the NICs: which leaf a NIC is cabled to, which pod a leaf belongs
to, and the switches a message climbs from one leaf to another.

Two tiers by default: leaf switches under one spine, a single switch holding all their
uplinks (traffic spreads over every uplink of a leaf: ideal ECMP, no hash collisions). A
rail-optimized fabric cables NIC k of the servers of a scalable unit to rail leaf k (NVIDIA
DGX SuperPOD reference architecture); a fat tree puts whole servers under a leaf.

With `inter_node.nodes_per_pod`, three tiers (a Clos with oversubscription per tier): the
leaves of a pod hang under the pod's spine, and the pods under a core whose links carry the
pod's leaf uplinks divided by `pod_oversubscription`. Meta's Llama 3 cluster is one: 3,072
GPUs per pod at full bisection, pods joined at 1:7 (Llama Team, "The Llama 3 Herd of
Models", 2024, section 3.3.1).
"""

from __future__ import annotations

# A fat-tree leaf switch serves this many servers by default: 40 ports down / 40 up on a
# 80-port HDR/NDR leaf in a non-blocking two-level tree (NVIDIA QM8700/QM9700 have 40/64
# ports; the split is a modelling choice, documented here). `inter_node.nodes_per_leaf`
# overrides it.
FAT_TREE_NODES_PER_LEAF = 16


class Fabric:
    def __init__(self, scenario):
        inter = scenario.cluster.inter_node
        self.servers = scenario.cluster.nodes
        self.rail_optimized = inter.fabric == "rail-optimized"
        # a server with more NICs than GPUs is modelled with one NIC per GPU (topology.py)
        self.rails = min(scenario.nics_per_node, scenario.gpus_per_node) if self.rail_optimized else 1
        default = self.servers if self.rail_optimized else FAT_TREE_NODES_PER_LEAF
        self.nodes_per_leaf = inter.nodes_per_leaf or default
        self.nodes_per_pod = inter.nodes_per_pod
        self.pod_oversubscription = inter.pod_oversubscription

    @property
    def leaf_count(self) -> int:
        return -(-self.servers // self.nodes_per_leaf) * self.rails

    def leaf_of(self, server: int, rail: int) -> int:
        """The leaf a server's NIC on `rail` is cabled to (the rail is ignored on a fat tree)."""
        return (server // self.nodes_per_leaf) * self.rails + (rail if self.rail_optimized else 0)

    def pod_of(self, leaf: int) -> int:
        if self.nodes_per_pod is None:
            return 0
        return (leaf // self.rails) * self.nodes_per_leaf // self.nodes_per_pod

    @property
    def pods(self) -> int:
        return 1 if self.nodes_per_pod is None else -(-self.servers // self.nodes_per_pod)

    def climb(self, leaf_a: int, leaf_b: int) -> list[tuple]:
        """Switch-to-switch edges from leaf a to leaf b: up to the spine of a's pod, across the
        core to b's pod where they differ, and down."""
        if leaf_a == leaf_b:
            return []
        pod_a, pod_b = self.pod_of(leaf_a), self.pod_of(leaf_b)
        up, down = (("leaf", leaf_a), ("spine", pod_a)), (("spine", pod_b), ("leaf", leaf_b))
        if pod_a == pod_b:
            return [up, down]
        return [up, (("spine", pod_a), ("core", 0)), (("core", 0), ("spine", pod_b)), down]
