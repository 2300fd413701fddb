"""The cluster as a networkx graph, and what a process group sees of it.

Nodes: ("gpu", node, local), ("switch", node) for the NVSwitch (or NVLink mesh / PCIe
switch), ("nic", node, i), ("leaf", i), ("spine", pod) and, with pods, ("core", 0). Edges
carry `bw` (bytes/s per direction, full duplex), `latency` (s) and `kind`. Which leaf a NIC
hangs under and how leaves reach each other is the fabric's (fabric.py: rail-optimized or
fat tree, two tiers or three, oversubscription per tier).

Paths follow the structure (GPU -> its NVSwitch -> GPU inside a node; GPU -> its rail NIC ->
leaf -> [spine -> [core -> spine] -> leaf] -> NIC -> GPU across nodes) instead of a graph
search, so that rings of ten thousand GPUs are costed in milliseconds (all-to-alls count
their shares per node and rail, all_to_all.py); bandwidth and latency are read off the
graph's edges.
"""

from __future__ import annotations

import copy

from collections import Counter
from dataclasses import dataclass, fields
from functools import cached_property

import networkx as nx
import numpy as np

from ..util.gc_control import gc_paused
from .fabric import Fabric
from .loads import GroupLoads
from .placement import Placement

GBIT = 1e9 / 8  # bytes/s per Gbit/s


def leaf_count(scenario) -> int:
    """Leaf switches of the scenario's fabric."""
    return Fabric(scenario).leaf_count


@dataclass(frozen=True)
class GroupLink:
    """What one member of a ring over a process group can count on."""
    size: int
    bw: float  # bytes/s per direction for one ring hop, after sharing with concurrent groups
    latency: float  # seconds per hop (worst hop)
    nodes: int  # distinct nodes the group spans
    per_node: int  # members per node (max)
    intra_bw: float  # NVLink bandwidth inside a node (bytes/s per direction)
    inter_bw: float  # per-member network bandwidth across nodes, after sharing (bytes/s)
    intra_latency: float
    inter_latency: float
    intra_efficiency: float = 0.77  # measured ring busbw / NVLink line rate (GpuSpec.nvlink_ring_busbw)
    nvls_busbw: float | None = None  # NVLink SHARP all-reduce busbw of a whole node, bytes/s (None: no NVLS)
    # of `bw`: the slowest hop inside a node, and the rate at which the ring crosses between
    # nodes (all the NICs its members on a node drive, shared with concurrent groups)
    ring_intra_bw: float = float("inf")
    ring_inter_bw: float = float("inf")
    # all-to-all across nodes (expert parallelism; `Topology.all_to_all_load`): seconds per
    # byte of every member's buffer on the most loaded network link (NIC, PCIe, leaf uplink
    # or core link) and NVLink link the group's shares cross, at line rate, while the groups that
    # run it concurrently share those links. None: not computed (axes without all-to-alls).
    a2a_network_s: float | None = None
    a2a_nvlink_s: float | None = None

    # A link keys the cost model's caches, which look it up for every action priced: its hash
    # is computed once (16 fields), and left out of a pickle (hash(None) differs between
    # processes before Python 3.12).
    def __hash__(self) -> int:
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}


# Cluster fields the graph does not depend on: a planner's headroom lowers hbm_gib, and its
# finalists, read again from the scenario file, must still share the graph it built.
_NOT_FABRIC = {"hbm_gib", "hbm_tbps", "bf16_tflops", "fp16_tflops", "fp8_tflops", "fp32_tflops", "tf32_tflops"}


def _fabric(scenario) -> dict:
    return scenario.cluster.model_dump(exclude=_NOT_FABRIC)


class Topology(GroupLoads):
    def __init__(self, scenario):
        self.scenario = scenario
        self.placement = Placement.of(scenario)
        # Below, a "node" is an NVLink domain: a server, or with `intra_node.domain_nodes` > 1
        # several compute trays behind shared NVLink switches (NVL72), with all their NICs.
        self.domain_nodes = scenario.cluster.intra_node.domain_nodes
        self.gpus_per_node = scenario.gpus_per_node * self.domain_nodes
        self.nodes = scenario.cluster.nodes // self.domain_nodes
        # A node with more NICs than GPUs (8 NICs, 4 GPUs) gives each GPU several rails; it is
        # modelled as one NIC per GPU carrying their summed bandwidth.
        self.nics = min(scenario.nics_per_node * self.domain_nodes, self.gpus_per_node)
        self.fabric = Fabric(scenario)
        self._nic_rate = self._nic_rates()
        # some GPU sends through a NIC other than its own (failed NIC or leaf); asked once per
        # group priced, so counted here once
        self.has_failed_nic = any(rate <= 0 for rate in self._nic_rate.values())
        self._refuse_cut_off_nodes()
        self._nic_choice: dict[tuple[int, int], int] = {}
        self._paths: dict[tuple[int, int], tuple] = {}
        self._gpu_routes: dict[tuple, tuple] = {}  # shared with for_layout's copies
        self._members_by_nic: dict[tuple, dict] = {}
        self._members_by_id: dict[int, tuple] = {}  # id of a shared group tuple -> (it, its NIC members)
        self._leaves: dict[tuple[int, int], tuple] = {}  # (node, NIC) -> its leaf; asked per route
        self._member_hops: dict[tuple[str, int], tuple] = {}  # link_table and link_timelines both lay them
        self.graph = self._build()
        self._link_load: dict[str, Counter] = {}

    def for_layout(self, scenario) -> "Topology":
        """The same fabric under another layout of the same cluster: a layout search builds
        the graph once. Loads and links are the new placement's own."""
        if _fabric(scenario) != _fabric(self.scenario) or scenario.faults != self.scenario.faults:
            raise ValueError("for_layout: a different cluster or faults need a topology of their own")
        other = copy.copy(self)
        other.scenario, other.placement, other._link_load, other._paths = scenario, Placement.of(scenario), {}, {}
        other._members_by_nic, other._member_hops, other._members_by_id = {}, {}, {}
        return other

    def release_loads(self) -> None:
        """Forget the per-axis load tables (asked again, they are recomputed): a layout search
        keeps a topology per placement, and at thousands of GPUs each all-to-all table holds
        an entry per link."""
        self._link_load, self._members_by_nic, self._member_hops, self._members_by_id = {}, {}, {}, {}

    # ---- graph ---------------------------------------------------------------------------
    def _nic_rates(self) -> dict[tuple[int, int], float]:
        """(node, modelled NIC) -> bytes/s per direction: the physical NICs it stands for,
        each at the preset speed, its node's slowed speed (`faults: link`) or its own
        (`faults: nic`, 0 = failed)."""
        s = self.scenario
        per_server = s.nics_per_node
        physical = per_server * self.domain_nodes
        slow = {f.link.node: f.link.nic_gbps for f in s.faults if f.link}
        own = {(f.nic.node, f.nic.nic): f.nic.gbps for f in s.faults if f.nic}
        rates: dict[tuple[int, int], float] = {}
        for server in range(s.cluster.nodes):
            domain, tray = divmod(server, self.domain_nodes)
            for k in range(per_server):
                gbps = own.get((server, k), slow.get(server, s.nic_gbps))
                key = (domain, (tray * per_server + k) * self.nics // physical)
                rates[key] = rates.get(key, 0.0) + gbps * GBIT
        down = {f.leaf.leaf for f in s.faults if f.leaf}
        for node, nic in rates:
            if self.leaf_of(node, nic) in down:
                rates[(node, nic)] = 0.0
        return rates

    def _refuse_cut_off_nodes(self) -> None:
        if self.nodes < 2:
            return
        cut = [n for n in range(self.nodes) if all(self._nic_rate[(n, i)] <= 0 for i in range(self.nics))]
        if cut:
            from ..errors import ScenarioError
            what = "node" if self.domain_nodes == 1 else "NVLink domain"
            raise ScenarioError(f"faults: every NIC of {what} {cut[0]}" + (f" (and {len(cut) - 1} more)" if len(cut) > 1
                                else "") + " has failed or lost its leaf, so its GPUs cannot reach the other nodes")

    def leaf_of(self, node: int, nic: int) -> int:
        per_server = self.nics // self.domain_nodes
        return self.fabric.leaf_of(node * self.domain_nodes + nic // per_server, nic % per_server)

    @gc_paused()  # hundreds of thousands of node and edge tuples, no cycles among them
    def _build(self) -> nx.Graph:
        s = self.scenario
        intra, inter = s.cluster.intra_node, s.cluster.inter_node
        g = nx.Graph()
        nvlink = s.nvlink_gbps * GBIT
        nvlink_edge = dict(bw=nvlink, latency=intra.latency_us * 1e-6 / 2, kind="nvlink")  # copied per edge
        # Every edge is numbered as it is added (`edge_order`), and a GPU's and a NIC's own edges
        # are kept by number, so that a link table sums bytes over numbers (path_loads.py).
        order: list[tuple] = []
        gpu_edge, pcie_edge, nic_edge, nic_leaf = [], [], [], []  # -1: no such edge (failed NIC)
        for n in range(self.nodes):
            g.add_node(("switch", n), kind=intra.fabric)
            edges = [(("gpu", n, local), ("switch", n), nvlink_edge) for local in range(self.gpus_per_node)]
            gpu_edge += range(len(order), len(order) + self.gpus_per_node)
            for i in range(self.nics):
                leaf = ("leaf", self.leaf_of(n, i))
                nic_leaf.append(leaf[1])
                rate = self._nic_rate[(n, i)]
                if rate <= 0:  # failed: its GPUs go out through another NIC (nic_of)
                    nic_edge.append(-1)
                    continue
                self._leaves[(n, i)] = leaf
                nic_edge.append(len(order) + len(edges))
                edges.append((("nic", n, i), leaf, dict(bw=rate, latency=inter.latency_us * 1e-6 / 4, kind="ib")))
            for local in range(self.gpus_per_node):
                own = self.own_nic(local)
                if self._nic_rate[(n, own)] > 0:
                    # PCIe Gen4/Gen5 x16 switch between GPU and NIC is faster than the NIC
                    pcie_edge.append(len(order) + len(edges))
                    edges.append((("gpu", n, local), ("nic", n, own),
                                  dict(bw=max(self._nic_rate[(n, own)], 32e9), latency=0.0, kind="pcie")))
                else:
                    pcie_edge.append(-1)
            g.add_edges_from(edges)  # a node's edges at once, in the order they were always added
            order += [(u, v) for u, v, _ in edges]
        self._gpu_edge, self._pcie_edge, self._nic_edge, self._nic_leaf = (
            np.array(ids, dtype=np.int64) for ids in (gpu_edge, pcie_edge, nic_edge, nic_leaf))
        # a leaf's uplinks are sized for the NIC ports cabled to it at their line rate: a slow
        # or dead server NIC does not shrink the switch's uplinks
        line_rate = s.nic_gbps * GBIT * s.nics_per_node * self.domain_nodes / self.nics
        ports: Counter = Counter(self.leaf_of(n, i) for n in range(self.nodes) for i in range(self.nics))
        uplink_faults = {f.uplink.leaf: f.uplink.gbps * GBIT for f in s.faults if f.uplink}
        hop = inter.latency_us * 1e-6 / 4
        fabric = self.fabric
        self._fabric_start = len(order)
        for leaf in sorted(x for x in g.nodes if x[0] == "leaf"):
            planes = fabric.planes(leaf[1])  # ECMP: its uplinks to as many spines, else one aggregate
            total = uplink_faults.get(leaf[1], ports[leaf[1]] * line_rate / inter.oversubscription)
            for plane in range(planes):
                spine = fabric.spine(fabric.pod_of(leaf[1]), plane)
                order += [] if g.has_edge(leaf, spine) else [(leaf, spine)]
                g.add_edge(leaf, spine, bw=total / planes, latency=hop, kind="uplink")
        if fabric.pods > 1:  # the core carries a pod's leaf uplinks at the pod's ratio, as cabled
            pod_uplinks: Counter = Counter()
            for leaf, count in ports.items():
                pod_uplinks[fabric.pod_of(leaf)] += count * line_rate / inter.oversubscription
            spines = {pod: sorted({s for s in g.nodes if s[0] == "spine" and s[1] == pod}) for pod in pod_uplinks}
            for pod, capacity in pod_uplinks.items():
                for spine in spines[pod]:
                    order += [] if g.has_edge(spine, ("core", 0)) else [(spine, ("core", 0))]
                    g.add_edge(spine, ("core", 0), bw=capacity / fabric.pod_oversubscription / len(spines[pod]),
                               latency=hop, kind="core")
        self.edge_order = order
        return g

    @cached_property
    def edge_index(self) -> dict[tuple, int]:
        """Directed edge -> its number: edge k of `edge_order` is 2k as listed, 2k + 1 reversed."""
        index = {}
        for k, (u, v) in enumerate(self.edge_order):
            index[(u, v)], index[(v, u)] = 2 * k, 2 * k + 1
        return index

    @cached_property
    def edge_index_of_fabric(self) -> dict[tuple, int]:
        """`edge_index` of the switches' edges alone (leaf, spine, core): a leaf pair's climb."""
        index = {}
        for k in range(self._fabric_start, len(self.edge_order)):
            u, v = self.edge_order[k]
            index[(u, v)], index[(v, u)] = 2 * k, 2 * k + 1
        return index

    def gpu_of(self, rank: int) -> tuple[int, int]:
        """(node, local GPU) of a global rank: ranks fill nodes in order."""
        return divmod(rank, self.gpus_per_node)

    def rail_gpu(self, nic: int) -> int:
        """The first local GPU wired to a NIC (a PXN proxy for that rail)."""
        return next(g for g in range(self.gpus_per_node) if self.own_nic(g) == nic)

    def own_nic(self, local: int) -> int:
        """The NIC (rail) a GPU is wired to: GPUs are shared out over the NICs in order."""
        return local * self.nics // self.gpus_per_node

    def nic_of(self, node: int, local: int) -> int:
        """The NIC a GPU sends through: its own, or where that one failed, the next working NIC
        of the node, reached over NVLink through a GPU wired to it (NCCL's PXN)."""
        key = (node, local)
        nic = self._nic_choice.get(key)
        if nic is None:
            own = self.own_nic(local)
            order = [(own + i) % self.nics for i in range(self.nics)]
            nic = self._nic_choice[key] = next((i for i in order if self._nic_rate[(node, i)] > 0), own)
        return nic

    def _to_nic(self, node: int, local: int) -> list[tuple]:
        """Edges from a GPU to the NIC it sends through (via a proxy GPU if its own failed)."""
        nic = self.nic_of(node, local)
        gpu, port = ("gpu", node, local), ("nic", node, nic)
        if nic == self.own_nic(local):
            return [(gpu, port)]
        proxy = ("gpu", node, self.rail_gpu(nic))
        return [(gpu, ("switch", node)), (("switch", node), proxy), (proxy, port)]

    def path(self, a: int, b: int) -> tuple:
        """Edges (u, v) from GPU of rank a to GPU of rank b (routes are fixed: computed once;
        but for ECMP's hash of the ranks, a route is the two GPUs', which every layout a
        search prices shares)."""
        route = self._paths.get((a, b))
        if route is None:
            if self.fabric.ecmp:
                route = tuple(self._route(a, b))
            else:
                gpus = (self.gpu_of(a), self.gpu_of(b))
                route = self._gpu_routes.get(gpus)
                if route is None:
                    route = self._gpu_routes[gpus] = tuple(self._route(a, b))
            self._paths[(a, b)] = route
        return route

    def _route(self, a: int, b: int) -> list[tuple]:
        (na, la), (nb, lb) = self.gpu_of(a), self.gpu_of(b)
        ga, gb = ("gpu", na, la), ("gpu", nb, lb)
        if na == nb:
            return [] if la == lb else [(ga, ("switch", na)), (("switch", nb), gb)]
        nic_a, nic_b = ("nic", na, self.nic_of(na, la)), ("nic", nb, self.nic_of(nb, lb))
        leaf_a, leaf_b = self._leaf(*nic_a[1:]), self._leaf(*nic_b[1:])
        edges = self._to_nic(na, la) + [(nic_a, leaf_a)] + self.fabric.climb(leaf_a[1], leaf_b[1], (a, b))
        return edges + [(leaf_b, nic_b)] + [(v, u) for u, v in reversed(self._to_nic(nb, lb))]

    def pxn_path(self, a: int, b: int) -> tuple:
        """Edges a share of an all-to-all takes from rank a to rank b. Across nodes NCCL's PXN
        (NCCL 2.12 release notes; NCCL_PXN_DISABLE) first moves it over NVLink to the GPU of a's
        node wired to b's rail, which sends it out of that rail's NIC: on a rail-optimized
        fabric it then stays on its rail, climbing to the spine only between scalable units."""
        (na, la), (nb, lb) = self.gpu_of(a), self.gpu_of(b)
        rail = self.nic_of(nb, lb)
        if na == nb or self.nic_of(na, la) == rail or self._nic_rate[(na, rail)] <= 0:
            return self.path(a, b)
        proxy = na * self.gpus_per_node + self.rail_gpu(rail)
        return self.path(a, proxy) + self.path(proxy, b)

    def path_cost(self, a: int, b: int) -> tuple[float, float]:
        """(bottleneck bytes/s, latency s) of a lone transfer from rank a to rank b."""
        edges = self.path(a, b)
        if not edges:
            return float("inf"), 0.0
        data = [self.graph.edges[e] for e in edges]
        return min(d["bw"] for d in data), sum(d["latency"] for d in data)

    # ---- process groups: the loads on their links are GroupLoads' (loads.py) ----------------
    def _nic_bw(self, node: int, nic: int) -> float:
        port = ("nic", node, nic)
        return min(self.graph.edges[port, v]["bw"] for v in self.graph[port] if v[0] == "leaf")

    @property
    def nvlink_efficiency(self) -> float:
        """Measured ring busbw as a fraction of the GPU preset's NVLink line rate, so that a
        what-if NVLink speed scales it."""
        gpu = self.scenario.gpu
        return gpu.nvlink_ring_busbw * 1e9 / (gpu.nvlink_gbps * GBIT)

    def group_link(self, axis: str, rank: int = 0, alone: bool = False) -> GroupLink:
        """Bottleneck of `rank`'s ring along `axis` while every group of that axis runs the
        same collective concurrently (they do: symmetric ranks reach it together); `alone`:
        with the fabric to itself (flow-level costs share links as flows meet instead)."""
        group = self.placement.group(axis, rank)
        n = len(group)
        nodes = Counter(self.gpu_of(r)[0] for r in group)
        intra = self.scenario.nvlink_gbps * GBIT
        intra_lat = self.scenario.cluster.intra_node.latency_us * 1e-6
        inter_lat = self.scenario.cluster.inter_node.latency_us * 1e-6
        gpu = self.scenario.gpu
        efficiency = self.nvlink_efficiency
        nvls = (gpu.nvlink_nvls_busbw * 1e9 / (gpu.nvlink_gbps * GBIT) * intra
                if gpu.nvlink_nvls_busbw and self.scenario.cluster.intra_node.fabric == "nvswitch" else None)
        if n < 2:
            return GroupLink(1, float("inf"), 0.0, 1, 1, intra, float("inf"), intra_lat, inter_lat, efficiency, nvls)
        load = self._ring_load(axis, group) if alone else self._ring_load_near(axis, group)
        ring_intra, lat = float("inf"), 0.0
        for i, a in enumerate(group):
            b = group[(i + 1) % n]
            edges = self.path(a, b)
            lat = max(lat, sum(self.graph.edges[e]["latency"] for e in edges))
            if self.gpu_of(a)[0] == self.gpu_of(b)[0]:
                ring_intra = min(ring_intra, min(self.graph.edges[e]["bw"] / load[e] for e in edges))
        ring_inter, inter_bw = self._crossing_rate(group, axis, alone) if len(nodes) > 1 else (float("inf"), float("inf"))
        a2a = self._all_to_all_seconds(group, axis, alone) if axis == "ep" and len(nodes) > 1 else (None, None)
        return GroupLink(n, min(ring_intra, ring_inter), lat, len(nodes), max(nodes.values()), intra, inter_bw,
                         intra_lat, inter_lat, efficiency, nvls, ring_intra, ring_inter, *a2a)

    def slowest_group_link(self, axis: str, slowness=None) -> GroupLink:
        """The slowest of all groups along `axis`: the largest `slowness(link)`, by default the
        lowest ring bandwidth, then the lowest network bandwidth, then the highest latency.
        With a degraded link somewhere, the groups are no longer alike and the step waits for
        the slowest one."""
        groups = self.placement.groups(axis)
        if len(groups) > 1:  # every group's ring is priced: the cluster-wide loads, summed once
            self._ring_load(axis), self._crossing_load(axis)
        links = (self.group_link(axis, group[0]) for group in groups)
        return max(links, key=slowness or (lambda g: (-g.bw, -g.inter_bw, g.latency)))

    def describe(self) -> str:
        s = self.scenario
        nodes = (f"{self.nodes} NVLink domains of {self.domain_nodes} nodes x {s.gpus_per_node}"
                 if self.domain_nodes > 1 else f"{self.nodes} nodes x {self.gpus_per_node}")
        pods = (f", pods of {self.fabric.nodes_per_pod} servers joined at {self.fabric.pod_oversubscription:g}:1"
                if self.fabric.pods > 1 else "")
        return (f"{nodes} {s.cluster.gpu}, {s.cluster.intra_node.fabric} "
                f"{s.nvlink_gbps:g} Gb/s per GPU, {s.cluster.inter_node.fabric} {self.nics} x {s.nic_gbps:g} Gb/s "
                f"per node, {self.fabric.leaf_count} leaves of {self.fabric.nodes_per_leaf} servers, "
                f"oversubscription {s.cluster.inter_node.oversubscription:g}{pods}")
