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
from dataclasses import dataclass

import networkx as nx

from .all_to_all import group_load
from .fabric import Fabric
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


# Cluster fields the graph does not depend on: a planner's headroom lowers hbm_gib, and its
# finalists, read again from the scenario file, must still share the graph it built.
_NOT_FABRIC = {"hbm_gib", "hbm_tbps", "bf16_tflops", "fp16_tflops", "fp8_tflops", "fp32_tflops", "tf32_tflops"}


def _fabric(scenario) -> dict:
    return scenario.cluster.model_dump(exclude=_NOT_FABRIC)


class Topology:
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
        self._leaves: dict[tuple[int, int], tuple] = {}  # (node, NIC) -> its leaf; asked per route
        self.graph = self._build()
        self._link_load: dict[str, Counter] = {}

    def for_layout(self, scenario) -> "Topology":
        """The same fabric under another layout of the same cluster: a layout search builds
        the graph once. Loads and links are the new placement's own."""
        if _fabric(scenario) != _fabric(self.scenario) or scenario.faults != self.scenario.faults:
            raise ValueError("for_layout: a different cluster or faults need a topology of their own")
        other = copy.copy(self)
        other.scenario, other.placement, other._link_load, other._paths = scenario, Placement.of(scenario), {}, {}
        other._members_by_nic = {}
        return other

    def release_loads(self) -> None:
        """Forget the per-axis load tables (asked again, they are recomputed): a layout search
        keeps a topology per placement, and at thousands of GPUs each all-to-all table holds
        an entry per link."""
        self._link_load, self._members_by_nic = {}, {}

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

    def _build(self) -> nx.Graph:
        s = self.scenario
        intra, inter = s.cluster.intra_node, s.cluster.inter_node
        g = nx.Graph()
        nvlink = s.nvlink_gbps * GBIT
        for n in range(self.nodes):
            g.add_node(("switch", n), kind=intra.fabric)
            for local in range(self.gpus_per_node):
                g.add_edge(("gpu", n, local), ("switch", n), bw=nvlink, latency=intra.latency_us * 1e-6 / 2,
                           kind="nvlink")
            for i in range(self.nics):
                rate = self._nic_rate[(n, i)]
                if rate <= 0:  # failed: its GPUs go out through another NIC (nic_of)
                    continue
                g.add_edge(("nic", n, i), ("leaf", self.leaf_of(n, i)), bw=rate, latency=inter.latency_us * 1e-6 / 4, kind="ib")
            for local in range(self.gpus_per_node):
                own = self.own_nic(local)
                if self._nic_rate[(n, own)] > 0:
                    # PCIe Gen4/Gen5 x16 switch between GPU and NIC is faster than the NIC
                    g.add_edge(("gpu", n, local), ("nic", n, own), bw=max(self._nic_rate[(n, own)], 32e9),
                               latency=0.0, kind="pcie")
        # a leaf's uplinks are sized for the NIC ports cabled to it at their line rate: a slow
        # or dead server NIC does not shrink the switch's uplinks
        line_rate = s.nic_gbps * GBIT * s.nics_per_node * self.domain_nodes / self.nics
        ports: Counter = Counter(self.leaf_of(n, i) for n in range(self.nodes) for i in range(self.nics))
        uplink_faults = {f.uplink.leaf: f.uplink.gbps * GBIT for f in s.faults if f.uplink}
        hop = inter.latency_us * 1e-6 / 4
        fabric = self.fabric
        for leaf in sorted(x for x in g.nodes if x[0] == "leaf"):
            planes = fabric.planes(leaf[1])  # ECMP: its uplinks to as many spines, else one aggregate
            total = uplink_faults.get(leaf[1], ports[leaf[1]] * line_rate / inter.oversubscription)
            for plane in range(planes):
                g.add_edge(leaf, fabric.spine(fabric.pod_of(leaf[1]), plane), bw=total / planes, latency=hop,
                           kind="uplink")
        if fabric.pods > 1:  # the core carries a pod's leaf uplinks at the pod's ratio, as cabled
            pod_uplinks: Counter = Counter()
            for leaf, count in ports.items():
                pod_uplinks[fabric.pod_of(leaf)] += count * line_rate / inter.oversubscription
            spines = {pod: sorted({s for s in g.nodes if s[0] == "spine" and s[1] == pod}) for pod in pod_uplinks}
            for pod, capacity in pod_uplinks.items():
                for spine in spines[pod]:
                    g.add_edge(spine, ("core", 0), bw=capacity / fabric.pod_oversubscription / len(spines[pod]),
                               latency=hop, kind="core")
        return g

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
        if key not in self._nic_choice:
            own = self.own_nic(local)
            order = [(own + i) % self.nics for i in range(self.nics)]
            self._nic_choice[key] = next((i for i in order if self._nic_rate[(node, i)] > 0), own)
        return self._nic_choice[key]

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

    # ---- process groups ----------------------------------------------------------------
    def _ring_load(self, axis: str, alone: list[int] | None = None) -> Counter:
        """How many ring hops of all `axis` groups (running at once) cross each directed edge;
        with `alone`, of that one group only."""
        if alone is None and axis in self._link_load:
            return self._link_load[axis]
        load: Counter = Counter()
        for group in [alone] if alone is not None else self.placement.groups(axis):
            if len(group) < 2:
                continue
            for i, a in enumerate(group):
                for u, v in self.path(a, group[(i + 1) % len(group)]):
                    load[(u, v)] += 1
        if alone is None:
            self._link_load[axis] = load
        return load

    # A group's ring is priced by the loads on the links it uses. Those come only from the groups
    # with a member on its nodes (NVLink, NICs) or under the leaves its crossings climb from or
    # to (switch links), so at tens of thousands of GPUs summing those few groups, not every
    # group of the cluster, gives the same loads at a fraction of the cost. The groups are
    # summed in the cluster-wide order, so the fractional shares add up to the same floats.

    def _ring_load_near(self, axis: str, group: list[int]) -> Counter:
        """`_ring_load(axis)` on the NVLink edges of `group`'s nodes (the only ones group_link
        reads), from the groups that have a member there."""
        if axis in self._link_load or not self._near_pays(len({self.gpu_of(r)[0] for r in group})):
            return self._ring_load(axis)
        load: Counter = Counter()
        for other in self._groups_on(axis, {self.gpu_of(r)[0] for r in group}):
            if len(other) < 2:
                continue
            for i, a in enumerate(other):
                for u, v in self.path(a, other[(i + 1) % len(other)]):
                    load[(u, v)] += 1
        return load

    def _crossing_load(self, axis: str, alone: list[int] | None = None) -> Counter:
        """Share of concurrent `axis` groups' node crossings on each NIC ((node, nic) keys) and
        each leaf uplink (edge keys); with `alone`, of that one group only.

        NCCL runs a collective over several channels (rings with different orders), and with
        PXN a GPU hands data for another rail to that rail's GPU over NVLink (NCCL docs,
        NCCL_PXN_DISABLE, NCCL_CROSS_NIC), so a group's traffic into and out of a node spreads
        over the NICs of all its members there and stays on its rail where it can. A group
        with members behind m NICs on a node puts 1/m of its crossing on each of them."""
        key = f"crossings:{axis}"
        if alone is None and key in self._link_load:
            return self._link_load[key]
        load: Counter = Counter()
        for group in [alone] if alone is not None else self.placement.groups(axis):
            for edge, share in self._crossings(group):
                load[edge] += share
        if alone is None:
            self._link_load[key] = load
        return load

    def _crossing_load_near(self, axis: str, group: list[int]) -> Counter:
        """`_crossing_load(axis)` on the NICs and switch links `group`'s crossings use, from the
        groups with a member on a node of its own or under a leaf whose switch links it climbs."""
        crossings = self._crossings(group)
        nodes = {self.gpu_of(r)[0] for r in group}
        for edge, _ in crossings:
            if not isinstance(edge[0], int):  # a switch link: the nodes below its leaf or pod
                nodes |= self._nodes_below(edge)
        if axis in self._link_load or f"crossings:{axis}" in self._link_load or not self._near_pays(len(nodes)):
            return self._crossing_load(axis)
        load: Counter = Counter()
        for other in self._groups_on(axis, nodes):
            for edge, share in self._crossings(other):
                load[edge] += share
        return load

    def _near_pays(self, nodes: int) -> bool:
        """Summing the groups on `nodes` costs less than summing every group of the cluster."""
        return nodes * 4 <= self.nodes

    def _groups_on(self, axis: str, nodes: set[int]) -> list[list[int]]:
        """The `axis` groups with a member on one of `nodes`, in `placement.groups` order (by
        their smallest rank)."""
        leaders = {self.placement.group_leader(axis, node * self.gpus_per_node + local)
                   for node in nodes for local in range(self.gpus_per_node)}
        return sorted((self.placement.group(axis, leader) for leader in leaders), key=min)

    def _nodes_below(self, edge: tuple) -> set[int]:
        """Nodes whose crossings can use a switch link: those cabled to its leaf, or for a
        spine-core link, to any leaf of the spine's pod."""
        leaves = [x[1] for x in edge if x[0] == "leaf"]
        if not leaves:
            spine = next(x for x in edge if x[0] == "spine")
            leaves = [x[1] for x in self.graph if x[0] == "leaf" and self.fabric.pod_of(x[1]) == spine[1]]
        return {v[1] for leaf in leaves for v in self.graph[("leaf", leaf)] if v[0] == "nic"}

    def all_to_all_load(self, axis: str, alone: list[int] | None = None) -> Counter:
        """Bytes each directed edge carries per byte of every member's buffer while all `axis`
        groups run an all-to-all at once (symmetric ranks reach it together); with `alone`, that
        group's only. Each member sends 1/n of its buffer to each other member along `pxn_path`,
        so shares between leaves cross the spine: what an oversubscribed tier slows."""
        if alone is not None:
            return group_load(self, alone)
        key = f"all-to-all:{axis}"
        if key not in self._link_load:
            load: Counter = Counter()
            for group in self.placement.groups(axis):
                load.update(group_load(self, group))
            self._link_load[key] = load
        return self._link_load[key]

    def _all_to_all_seconds(self, group: list[int], axis: str, alone: bool) -> tuple[float, float]:
        """(network, NVLink) seconds per byte of buffer on the most loaded link of each kind
        that `group`'s all-to-all crosses, at line rate (GroupLink.a2a_*)."""
        own = group_load(self, group)
        load = own if alone else self.all_to_all_load(axis)
        worst = {"nvlink": 0.0, "network": 0.0}
        for edge in own:
            data = self.graph.edges[edge]
            kind = "nvlink" if data["kind"] == "nvlink" else "network"
            worst[kind] = max(worst[kind], load[edge] / data["bw"])
        return worst["network"], worst["nvlink"]

    def _nic_members(self, group: list[int]) -> dict[int, dict[int, int]]:
        """node -> the NICs the group's members there send through -> the first such member
        (kept per group: each member's ring hop asks for its group's)."""
        key = tuple(group)
        if key not in self._members_by_nic:
            out: dict[int, dict[int, int]] = {}
            for rank in group:
                node, local = self.gpu_of(rank)
                out.setdefault(node, {}).setdefault(self.nic_of(node, local), rank)
            self._members_by_nic[key] = out
        return self._members_by_nic[key]

    @staticmethod
    def _rail_peer(nic: int, receivers: dict[int, int]) -> int:
        """The receiving node's NIC for a share sent on `nic`: the same rail where it has one."""
        return nic if nic in receivers else next(iter(receivers))

    def _crossings(self, group: list[int]) -> list[tuple[tuple, float]]:
        """(NIC or uplink, share of the group's crossing it carries) for one group."""
        nics = self._nic_members(group)
        if len(nics) < 2:
            return []
        out = [((node, nic), 1 / len(used)) for node, used in nics.items() for nic in used]
        order = list(nics)  # nodes in ring order
        for a, b in zip(order, order[1:] + order[:1]):
            for nic in nics[a]:
                receiver = nics[b][self._rail_peer(nic, nics[b])]
                leaf_a, leaf_b = self._leaf(a, nic), self._leaf(b, self._rail_peer(nic, nics[b]))
                out += [(edge, 1 / len(nics[a])) for edge in self.fabric.climb(leaf_a[1], leaf_b[1],
                                                                                 (nics[a][nic], receiver))]
        return out

    def ring_hop_edges(self, group: list[int], i: int) -> list[tuple[tuple, float]]:
        """(directed edge, share) of what member i sends to member i+1 in a ring over `group`:
        its path inside a node; across nodes, spread over the NICs the group drives on the
        sending node, each share staying on its rail (the crossing model of `_crossings`)."""
        a, b = group[i], group[(i + 1) % len(group)]
        node_a, node_b = self.gpu_of(a)[0], self.gpu_of(b)[0]
        if node_a == node_b:
            return [(edge, 1.0) for edge in self.path(a, b)]
        nics = self._nic_members(group)
        senders, receivers = nics[node_a], nics[node_b]
        return [(edge, 1 / len(senders)) for nic, src in senders.items()
                for edge in self.path(src, receivers[self._rail_peer(nic, receivers)])]

    def all_to_all_edges(self, group: list[int], i: int) -> list[tuple[tuple, float]]:
        """(directed edge, share) of what member i sends in an all-to-all over `group`: an
        equal share to each other member, along `pxn_path`."""
        a, share = group[i], 1 / (len(group) - 1)
        return [(edge, share) for b in group if b != a for edge in self.pxn_path(a, b)]

    def _leaf(self, node: int, nic: int) -> tuple:
        leaf = self._leaves.get((node, nic))
        if leaf is None:
            leaf = self._leaves[(node, nic)] = next(v for v in self.graph[("nic", node, nic)] if v[0] == "leaf")
        return leaf

    def _crossing_rate(self, group: list[int], axis: str, alone: bool = False) -> tuple[float, float]:
        """(rate at which the group's ring crosses between nodes, the slowest node's rate per
        member), bytes/s per direction: the NICs and uplinks its crossings use, each shared
        with the concurrent groups that use it too (`alone`: with none)."""
        load = self._crossing_load(axis, group) if alone else self._crossing_load_near(axis, group)
        members = Counter(self.gpu_of(r)[0] for r in group)
        ring, per_member = float("inf"), float("inf")
        for edge, share in self._crossings(group):
            if isinstance(edge[0], int):  # (node, nic)
                capacity = self._nic_bw(*edge)
            else:
                capacity = self.graph.edges[edge]["bw"]
            rate = capacity / load[edge]  # the group's rate if this link were its bottleneck
            ring = min(ring, rate)
            if isinstance(edge[0], int):
                per_member = min(per_member, rate / members[edge[0]])
            else:
                per_member = min(per_member, rate / max(members.values()))
        return ring, per_member

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
