"""The switch tiers above the NICs: which leaf a NIC is cabled to, which pod a leaf belongs
to, and the switches a message climbs from one leaf to another.

Two tiers by default: leaf switches under one spine, a single switch holding all their
uplinks (`routing: adaptive`: traffic spreads evenly over every uplink of a leaf, as adaptive
routing or packet spraying approach). With `routing: ecmp` a leaf's uplinks go to separate
spine switches, one per uplink at line rate, and each flow is hashed by its two endpoints
onto one of them, as switches hash a flow's 5-tuple (an NCCL connection between two GPUs keeps
its 5-tuple; more queue pairs per connection, NCCL_IB_QPS_PER_CONNECTION, are not modelled):
flows that hash alike share an uplink while others idle. A
rail-optimized fabric cables NIC k of the servers of a scalable unit to rail leaf k (NVIDIA
DGX SuperPOD reference architecture); a fat tree puts whole servers under a leaf.

With `inter_node.nodes_per_pod`, three tiers (a Clos with oversubscription per tier): the
leaves of a pod hang under the pod's spine, and the pods under a core whose links carry the
pod's leaf uplinks divided by `pod_oversubscription`. Meta's Llama 3 cluster is one: 3,072
GPUs per pod at full bisection, pods joined at 1:7 (Llama Team, "The Llama 3 Herd of
Models", 2024, section 3.3.1).
"""

from __future__ import annotations

import zlib

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
        self.ecmp = inter.routing == "ecmp"
        self._climbs: dict[tuple[int, int], tuple] = {}
        self.oversubscription = inter.oversubscription
        # NICs a server cables to one leaf: one per rail on a rail-optimized fabric, all of
        # them on a fat tree (a server with more NICs than GPUs: one per GPU, topology.py)
        self.ports_per_server = 1 if self.rail_optimized else min(scenario.nics_per_node, scenario.gpus_per_node)
        # a modelled port's line rate (a GPU's share of its server's NICs), in Gb/s
        self.port_gbps = scenario.nic_gbps * scenario.nics_per_node / min(scenario.nics_per_node, scenario.gpus_per_node)
        self.uplink_faults = {f.uplink.leaf: f.uplink.gbps for f in scenario.faults if f.uplink}

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

    def ports(self, leaf: int) -> int:
        """NIC ports cabled to a leaf (the last leaf of a partial scalable unit has fewer)."""
        first = (leaf // self.rails) * self.nodes_per_leaf
        return min(self.nodes_per_leaf, self.servers - first) * self.ports_per_server

    def planes(self, leaf: int) -> int:
        """Spine switches a leaf's uplinks reach: one per uplink under ECMP (the uplinks its
        ports / oversubscription call for, or with a degraded leaf those its `gbps` still
        carry at line rate: some spine links down, flows hashed over the rest), else one."""
        if not self.ecmp:
            return 1
        if leaf in self.uplink_faults:
            return max(1, int(self.uplink_faults[leaf] / self.port_gbps + 0.5))
        return max(1, int(self.ports(leaf) / self.oversubscription + 0.5))

    def spine(self, pod: int, plane: int) -> tuple:
        return ("spine", pod, plane) if self.ecmp else ("spine", pod)

    def climb(self, leaf_a: int, leaf_b: int, flow: tuple[int, int] = (0, 0)) -> list[tuple]:
        """Switch-to-switch edges from leaf a to leaf b: up to a spine of a's pod, across the
        core to b's pod where they differ, and down. Under ECMP `flow` (its two end GPUs'
        ranks) picks the spines."""
        if leaf_a == leaf_b:
            return []
        if not self.ecmp:  # the route depends on the two leaves only: worked out once per pair
            key = (leaf_a, leaf_b)
            if key not in self._climbs:
                self._climbs[key] = tuple(self._climb(leaf_a, leaf_b, 0))
            return list(self._climbs[key])
        return self._climb(leaf_a, leaf_b, zlib.crc32(f"{flow[0]}>{flow[1]}".encode()))

    def _climb(self, leaf_a: int, leaf_b: int, hashed: int) -> list[tuple]:
        pod_a, pod_b = self.pod_of(leaf_a), self.pod_of(leaf_b)
        if pod_a == pod_b:  # one spine links both leaves: a plane they both have
            spine = self.spine(pod_a, hashed % min(self.planes(leaf_a), self.planes(leaf_b)))
            return [(("leaf", leaf_a), spine), (spine, ("leaf", leaf_b))]
        up = self.spine(pod_a, hashed % self.planes(leaf_a))
        down = self.spine(pod_b, (hashed >> 16) % self.planes(leaf_b))
        return [(("leaf", leaf_a), up), (up, ("core", 0)), (("core", 0), down), (down, ("leaf", leaf_b))]
