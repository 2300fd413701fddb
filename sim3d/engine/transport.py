"""How communication between simulated ranks takes time: one interface, two networks.

`AnalyticalTransport` (`costs.network: analytical`) gives every transfer the duration the
cost model prices for it. `FlowTransport` (`costs.network: flow`) makes transfers flows that
share the links they cross as they meet (flow_network.py), so a duration is known only when
the flow arrives. The engine picks one when it is built; a simulated rank (rank_replay.py)
asks it to carry a pipeline message, its compute's expert all-to-alls, and for the
data-parallel stream its buckets run on (data_parallel.py), without knowing which it has.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable

import simpy

from .data_parallel import ClockedDataParallel, DataParallelStream, FlowDataParallel
from .flow_network import FlowNetwork, NetworkStats

# delivered(begin, context): a message is in; `begin` is when it started on the wire
Delivered = Callable[[float, tuple], None]


class Transport(ABC):
    stats: NetworkStats | None = None  # how the flows fared, where there are flows

    def __init__(self, engine):
        self.env, self.costs = engine.env, engine.costs

    @abstractmethod
    def message(self, channel: tuple, src: int, dst: int, delivered: Delivered, context: tuple) -> simpy.Event:
        """Carry one pipeline message from global rank `src` to `dst` on `channel` (pipeline,
        src stage rank, dst stage rank, direction), whose messages go one at a time, in order,
        as in NCCL and gloo. `delivered(begin, context)` is called the moment it is in, before
        anything waiting on the returned event, which fires then."""

    @abstractmethod
    def expert_share(self, cost) -> float:
        """Seconds of a compute's priced time (`cost`, a costs.ComputeCost) that are its
        expert all-to-alls carried apart by `expert_all_to_all`; 0 where they stay priced
        inside the compute."""

    @abstractmethod
    def expert_all_to_all(self, replay, stage: int, kind: str):
        """Yields (in the rank's process) until a compute's expert all-to-alls are over."""

    @abstractmethod
    def data_parallel(self, replay, engine) -> DataParallelStream:
        """The data-parallel stream of one simulated rank."""


class AnalyticalTransport(Transport):
    """Priced durations: a channel is a free-at time and one timeout delivers a message (no
    process per message: the replay makes hundreds of thousands)."""

    def __init__(self, engine):
        super().__init__(engine)
        self._free: dict[tuple, float] = {}  # channel -> free again at
        self._seconds: dict[tuple[int, int], float] = {}  # (src, dst) -> seconds of a message

    def message(self, channel, src, dst, delivered, context):
        env = self.env
        issued = env.now  # the producing compute just ended
        begin = max(issued, self._free.get(channel, 0.0))
        seconds = self._seconds.get((src, dst))
        if seconds is None:
            seconds = self._seconds[src, dst] = self.costs.transfer(src, dst)
        end = self._free[channel] = begin + seconds
        delivery = env.timeout(end - issued, (delivered, begin, context))
        delivery.callbacks.append(_on_delivery)
        return delivery

    def expert_share(self, cost) -> float:
        return 0.0

    def expert_all_to_all(self, replay, stage, kind):
        """Never asked (their share is 0): the all-to-alls are part of the compute's time."""
        raise AssertionError("analytical all-to-alls are priced inside the compute")

    def data_parallel(self, replay, engine) -> DataParallelStream:
        return ClockedDataParallel(replay, engine)


def _on_delivery(delivery: simpy.Event) -> None:
    delivered, begin, context = delivery.value
    delivered(begin, context)


class FlowTransport(Transport):
    """Flows on the graph: a message waits for its channel, then for its flow; a group's
    collective is one flow bundle, started by the first member that asks."""

    def __init__(self, engine):
        super().__init__(engine)
        self.full, self.placement, self.rendezvous = engine.full, engine.placement, engine.rendezvous
        self.network = FlowNetwork(self.env, self.costs.link_capacity)
        self.stats = self.network.stats
        self._channels: dict[tuple, simpy.Resource] = {}
        self._collectives: dict[tuple, simpy.Event] = {}

    def message(self, channel, src, dst, delivered, context):
        return self.env.process(self._carry(channel, src, dst, delivered, context))

    def _carry(self, channel, src, dst, delivered, context):
        if channel not in self._channels:
            self._channels[channel] = simpy.Resource(self.env, capacity=1)
        with self._channels[channel].request() as slot:
            yield slot
            begin = self.env.now
            yield self.network.transfer(self.costs.transfer_flows(src, dst))
        delivered(begin, context)

    def expert_share(self, cost) -> float:
        # under the EP all-to-all overlap what is left of them is priced with the compute
        # (costs/a2a_overlap.py): the flows would carry them whole
        return 0.0 if self.costs.s.training.moe_a2a_overlap else cost.exposed.get("ep", 0.0)

    def expert_all_to_all(self, replay, stage, kind):
        """One flow bundle; at full fidelity it starts once every member of the expert group
        has reached it."""
        me, key = replay.me, None
        if self.full:
            key = (*self.rendezvous.group_key("ep", me), replay.index)
            yield self.rendezvous.gather(key, len(self.placement.group("ep", me))).arrive(self.env.now)
        yield self.collective(key, lambda: self.costs.ep_flows(me, stage, kind))

    def collective(self, key: tuple | None, flow: Callable[[], object]) -> simpy.Event:
        """The end of a group's collective: started by the first member that asks (`flow()`
        gives its flows), shared by the rest (key None: one member asks)."""
        if key is None:
            return self.network.transfer(flow())
        if key not in self._collectives:
            self._collectives[key] = self.network.transfer(flow())
        return self._collectives[key]

    def data_parallel(self, replay, engine) -> DataParallelStream:
        return FlowDataParallel(replay, engine, self)
