"""What a transfer or a data-parallel collective puts on the cluster graph, for
`costs.network: flow` (the engine's FlowNetwork shares the links among the flows in flight).

A flow carries `volume` bytes of progress; on each directed edge it crosses it puts `weight`
bytes per byte of progress; alone on the fabric it runs at `cap`, the rate at which the
analytical model moves it with the fabric to itself (`Topology.group_link(alone=True)`), so a
flow that meets no other takes exactly the analytical time. What the analytical model
pre-divides among concurrent groups, the flow network shares as the flows really meet.

* A pipeline transfer: the placed path, weight 1 on each edge; its latency before the first byte.
* A data-parallel bucket: one flow per group, the ring every member sends its bus bytes
  around (`Topology.ring_hop_edges`: inside a node over NVLink, across nodes spread over the
  group's NICs). An algorithm faster than that ring alone (NVLS, a tree) puts proportionally
  less on each link. The collective's latency terms ride in its rate.
* The expert-parallel all-to-alls of a compute action: one flow per group carrying every
  member's shares on their PXN routes (`Topology.all_to_all_load`), after the action's other
  work (Megatron issues them synchronously on the compute stream). Tensor- and
  context-parallel collectives stay inside their compute actions at their analytical times.

Links offer their bandwidth at the efficiency NCCL reaches on them (NVLink: the GPU preset's
measured ring busbw; network: NETWORK_EFFICIENCY). Folded costs stand a simulated rank for
every rank with its pipeline coordinate, so they hand out the flows of all of them.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property

from ..cluster.placement import EXPERT_GRADIENT_AXIS, GRADIENT_AXIS
from .collectives import COLLECTIVE, NETWORK_EFFICIENCY, collective_time, p2p_time


@dataclass(frozen=True, eq=False)  # compared by identity: the flow network keys flows by their spec
class FlowSpec:
    edges: dict  # directed graph edge -> bytes on it per byte of progress
    volume: float  # bytes of progress
    cap: float  # bytes/s with the fabric to itself
    latency: float = 0.0  # seconds before the first byte moves


class NetworkFlows:
    """The flows of one scenario's transfers and data-parallel collectives."""

    def __init__(self, costs):
        self.costs = costs
        self.topology = costs.topology
        self.placement = costs.placement
        self._graph = self.topology.graph
        self._nvlink = self.topology.nvlink_efficiency
        self._capacity: dict[tuple, float] = {}
        self._transfers: dict[tuple[int, int], FlowSpec] = {}
        self._groups: dict[tuple, FlowSpec] = {}
        self._stages: dict[tuple, FlowSpec] = {}
        self._dp_groups: dict[str, dict[int, list[list[int]]]] = {}  # axis -> pipeline coordinate -> its groups

    def capacity(self, edge: tuple) -> float:
        """Bytes/s one direction of a graph edge offers, at the efficiency NCCL reaches on it."""
        got = self._capacity.get(edge)
        if got is None:
            data = self._graph.edges[edge]
            got = self._capacity[edge] = data["bw"] * (self._nvlink if data["kind"] == "nvlink" else NETWORK_EFFICIENCY)
        return got

    def _fit(self, edges: dict, volume: float, seconds: float, latency: float = 0.0) -> FlowSpec:
        """A flow that, alone, takes `seconds`: its ceiling is the rate that gives that time;
        where that beats what the links allow at these weights, the weights shrink to fit."""
        moving = seconds - latency
        cap = volume / moving if moving > 0 and volume else float("inf")
        if edges and cap != float("inf"):
            room = min(self.capacity(e) / w for e, w in edges.items())
            if cap > room:
                edges = {e: w * room / cap for e, w in edges.items()}
        return FlowSpec(edges, volume, cap, latency)

    # ---- pipeline transfers ---------------------------------------------------------------
    @cached_property
    def _pipelines(self) -> list[list[int]]:
        return self.placement.pipelines()

    def transfer(self, src: int, dst: int) -> FlowSpec:
        """The flow of one micro-batch's activation (or gradient) from `src` to `dst`
        (folded: bundled with the same transfer in every pipeline `src` stands for)."""
        key = (src, dst)
        if key not in self._transfers:
            p = self.placement
            if self.costs.folded:
                a, b = p.coords(src)["pp"], p.coords(dst)["pp"]
                self._transfers[key] = bundle([self._pair(pipe[a], pipe[b]) for pipe in self._pipelines])
            else:
                self._transfers[key] = self._pair(src, dst)
        return self._transfers[key]

    def _pair(self, a: int, b: int) -> FlowSpec:
        costs, topo = self.costs, self.topology
        nbytes = costs.p2p_bytes
        bw, latency = topo.path_cost(a, b)
        measured = costs.profile.collective_seconds("send_recv", nbytes, 2) if costs.profile is not None else None
        crosses = topo.gpu_of(a)[0] != topo.gpu_of(b)[0]
        seconds = measured if measured is not None else p2p_time(nbytes, bw, latency, crosses, self._nvlink)
        gather = costs.p2p_gather_seconds(b)  # over NVLink at the receiver, after the message: a fixed delay here
        return self._fit({edge: 1.0 for edge in topo.path(a, b)}, nbytes, seconds + gather,
                         (latency if measured is None else 0.0) + gather)

    # ---- data-parallel collectives ----------------------------------------------------------
    def data_parallel(self, what: str, rank: int, stage: int, buckets: int, expert: bool = False) -> FlowSpec:
        """The flow of one bucket's reduction ("reduce") or parameter gather ("gather") of the
        dense parameters over `rank`'s gradient group (dp x cp), or of the experts over their
        replicas (folded: bundled over every such group of its pipeline stage)."""
        p = self.placement
        axis = EXPERT_GRADIENT_AXIS if expert else GRADIENT_AXIS
        if not self.costs.folded:
            return self._group(what, axis, p.group(axis, rank), stage, buckets)
        pp = p.coords(rank)["pp"]
        key = (what, axis, pp, stage, buckets)
        if key not in self._stages:
            if axis not in self._dp_groups:
                self._dp_groups[axis] = defaultdict(list)
                for g in p.groups(axis):
                    self._dp_groups[axis][p.coords(g[0])["pp"]].append(g)
            self._stages[key] = bundle([self._group(what, axis, g, stage, buckets) for g in self._dp_groups[axis][pp]])
        return self._stages[key]

    def _group(self, what: str, axis: str, group: list[int], stage: int, buckets: int) -> FlowSpec:
        key = (what, axis, group[0], stage, buckets)
        if len(group) < 2:
            return NO_FLOW
        if key not in self._groups:
            op = self.costs.gradient_op(what)
            expert = axis == EXPERT_GRADIENT_AXIS
            alone = self.topology.group_link(axis, group[0], alone=True)
            seconds, wire = self.costs.gradient_collective(op, alone, stage, buckets, expert)
            if not wire:
                self._groups[key] = NO_FLOW
                return NO_FLOW
            network = self._network_fraction(op, alone, stage, buckets, expert)
            edges: dict = defaultdict(float)
            for i in range(len(group)):
                if network < 1 and self.topology.gpu_of(group[i])[0] == self.topology.gpu_of(group[(i + 1) % len(group)])[0]:
                    continue  # an NVLink hop of a phased collective: priced in its latency
                for edge, share in self.topology.ring_hop_edges(group, i):
                    edges[edge] += share
            if network < 1:
                self._groups[key] = self._phased(dict(edges), wire, seconds, network)
            else:
                self._groups[key] = self._fit(dict(edges), wire, seconds)
        return self._groups[key]

    # ---- expert-parallel all-to-alls ----------------------------------------------------------
    def expert_parallel(self, rank: int, stage: int, kind: str) -> FlowSpec:
        """The flow of the all-to-alls inside one compute action (F, B, BI or BW) over `rank`'s
        expert-parallel group (folded: bundled over every group of its pipeline stage)."""
        p = self.placement
        if not self.costs.folded:
            return self._expert_group(p.group("ep", rank), stage, kind)
        pp = p.coords(rank)["pp"]
        key = ("all-to-all", pp, stage, kind)
        if key not in self._stages:
            groups = [g for g in p.groups("ep") if p.coords(g[0])["pp"] == pp]
            self._stages[key] = bundle([self._expert_group(g, stage, kind) for g in groups])
        return self._stages[key]

    def _expert_group(self, group: list[int], stage: int, kind: str) -> FlowSpec:
        """Every member's shares on their PXN routes (Topology.all_to_all_load of the group
        alone), at the pace the analytical model gives the group with the fabric to itself;
        the all-to-alls' latency before the first byte, so that a shared link stretches only
        their bytes, as in the analytical model."""
        key = ("all-to-all", group[0], stage, kind)
        if key not in self._groups:
            seconds, buffer, latency = self.costs.expert_alone(group[0], stage, kind)
            load = self.topology.all_to_all_load("ep", alone=group)
            self._groups[key] = self._fit(dict(load), buffer, seconds, latency)
        return self._groups[key]

    def _network_fraction(self, op: str, link, stage: int, buckets: int, expert: bool) -> float:
        """Of a bucket's collective, the share of its time spent crossing nodes: 1 for a ring
        or tree (every step crosses in lockstep); the inter-node phase for the hierarchical
        all-reduce (measured profiles give no phases: 1)."""
        if self.costs.profile is not None or link.nodes < 2:
            return 1.0
        nbytes = self.costs.bucket_bytes(op, stage, buckets, expert)
        got = collective_time(COLLECTIVE[op], nbytes, link)
        return got.network_s / got.seconds if got.network_s is not None and got.seconds > 0 else 1.0

    def _phased(self, edges: dict, volume: float, seconds: float, network: float) -> FlowSpec:
        """A collective whose NVLink phases take their alone time whatever the network does
        (they are its latency here), and whose inter-node phase is a flow over the crossings,
        weighted so that alone it is link-bound: shared k ways, that phase takes k times as
        long, as the analytical model divides it among the groups that share a NIC."""
        moving = seconds * network
        cap = volume / moving
        room = min(self.capacity(e) / w for e, w in edges.items())
        return FlowSpec({e: w * room / cap for e, w in edges.items()}, volume, cap, seconds - moving)


NO_FLOW = FlowSpec({}, 0.0, float("inf"))


def bundle(specs: list[FlowSpec]) -> FlowSpec:
    """One flow for the same transfer in every replica a folded rank stands for. Replicas
    move alike, so max-min fairness gives them one rate: the bundle crosses every replica's
    links (where two replicas share one, it carries both) at that rate, which under symmetry
    is exactly what each replica gets on its own; where replicas differ (a slow NIC), the
    bundle keeps the slowest one's pace, as folded costs do."""
    specs = [s for s in specs if s.volume and s.edges]
    if not specs:
        return NO_FLOW
    if len(specs) == 1:
        return specs[0]
    edges: dict = defaultdict(float)
    for spec in specs:
        for edge, weight in spec.edges.items():
            edges[edge] += weight
    return FlowSpec(dict(edges), max(s.volume for s in specs), min(s.cap for s in specs),
                    max(s.latency for s in specs))
