"""The loads of process groups on the cluster's links: how many ring hops, crossings or
all-to-all shares of all the groups of one axis (running at once) cross each link, and the
rate a group's ring gets from the links it uses. A mixin of Topology, which owns the graph,
the placement and the paths these walk."""

from __future__ import annotations

from collections import Counter

from .all_to_all import group_load


class GroupLoads:
    """Topology's process-group loads (see topology.py for the graph and the paths)."""

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
        if isinstance(group, tuple):  # a placement's shared group: known by identity, not hashed whole
            held = self._members_by_id.get(id(group))
            if held is not None and held[0] is group:
                return held[1]
        key = tuple(group)
        if key not in self._members_by_nic:
            out: dict[int, dict[int, int]] = {}
            for rank in group:
                node, local = self.gpu_of(rank)
                out.setdefault(node, {}).setdefault(self.nic_of(node, local), rank)
            self._members_by_nic[key] = out
        if isinstance(group, tuple):  # held here, so its id cannot be another object's while cached
            self._members_by_id[id(group)] = (group, self._members_by_nic[key])
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
        return [(edge, share) for a, b, share in self.ring_hop_pairs(group, i) for edge in self.path(a, b)]

    def ring_hop_pairs(self, group, i: int) -> list[tuple[int, int, float]]:
        """`ring_hop_edges` as the (sender, receiver, share) whose paths carry it."""
        a, b = group[i], group[(i + 1) % len(group)]
        node_a, node_b = a // self.gpus_per_node, b // self.gpus_per_node
        if node_a == node_b:
            return [(a, b, 1.0)]
        return self._crossing_pairs(self._nic_members(group), node_a, node_b)

    def ring_crossings(self, group) -> dict[int, list[tuple[int, int, float]]]:
        """i -> `ring_hop_pairs(group, i)` for every member whose hop leaves its node, in one
        pass over the group (its NICs listed once, not once per member)."""
        gpn, n, out = self.gpus_per_node, len(group), {}
        nics = None
        for i, a in enumerate(group):
            node_a, node_b = a // gpn, group[(i + 1) % n] // gpn
            if node_a != node_b:
                nics = nics or self._nic_members(group)
                out[i] = self._crossing_pairs(nics, node_a, node_b)
        return out

    def _crossing_pairs(self, nics: dict, node_a: int, node_b: int) -> list[tuple[int, int, float]]:
        """(sender, receiver, share) of a ring hop from node_a to node_b: spread over the NICs the
        group drives on node_a, each share kept on its rail at node_b."""
        senders, receivers = nics[node_a], nics[node_b]
        share = 1 / len(senders)
        return [(src, receivers[self._rail_peer(nic, receivers)], share) for nic, src in senders.items()]

    def member_hops(self, axis: str, rank: int) -> tuple[tuple[tuple, float], ...]:
        """(directed edge, share of the rank's bytes) of one collective row of `rank` along
        `axis`: an all-to-all's shares over `ep`, a ring hop to its next member otherwise
        (nothing in a group of one). Computed once per rank and axis."""
        key = (axis, rank)
        hops = self._member_hops.get(key)
        if hops is None:
            group, i = self.placement.shared_group(axis, rank)
            hops = () if len(group) < 2 else tuple(
                self.all_to_all_edges(group, i) if axis == "ep" else self.ring_hop_edges(group, i))
            self._member_hops[key] = hops
        return hops

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
