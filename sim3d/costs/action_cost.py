"""What one compute action costs: its seconds and, inside them, its collectives."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class ActionCost:
    seconds: float
    comm: dict[str, float] = field(default_factory=dict)  # stream -> seconds of collectives inside
    recompute: float = 0.0  # of `seconds`: forward work redone in a backward (activation recomputation)
    # of `seconds`: collective time on the action's critical path, per stream (a CP ring step
    # hidden behind its attention is in `comm` but not here)
    exposed: dict[str, float] = field(default_factory=dict)
    # stream -> bytes this rank puts on the wire for those collectives, counted as a ring
    # moves them (nccl-tests' bus bytes: 2(n-1)/n of the buffer for an all-reduce, (n-1)/n for
    # an all-gather, reduce-scatter or all-to-all; the whole of a context-parallel ring's exchanges)
    wire: dict[str, float] = field(default_factory=dict)

    def __add__(self, other: "ActionCost") -> "ActionCost":
        return ActionCost(self.seconds + other.seconds, _sum(self.comm, other.comm), self.recompute + other.recompute,
                          _sum(self.exposed, other.exposed), _sum(self.wire, other.wire))

    @staticmethod
    def total(costs) -> "ActionCost":
        """`costs[0] + costs[1] + ...` without the intermediate records: the same additions in
        the same order (so the same floats), for a stage's many alike layers."""
        seconds, recompute = 0.0, 0.0
        comm: dict[str, float] = {}
        exposed: dict[str, float] = {}
        wire: dict[str, float] = {}
        for cost in costs:
            seconds += cost.seconds
            recompute += cost.recompute
            for into, parts in ((comm, cost.comm), (exposed, cost.exposed), (wire, cost.wire)):
                for key, value in parts.items():
                    into[key] = into.get(key, 0.0) + value
        return ActionCost(seconds, comm, recompute, exposed, wire)

    def slowed(self, factor: float) -> "ActionCost":
        """On a straggler: its own work and the collective time on its path stretch; the
        collectives' own durations (`comm`) and bytes are the network's."""
        return ActionCost(self.seconds * factor, self.comm, self.recompute * factor,
                          {k: v * factor for k, v in self.exposed.items()}, self.wire)


def _sum(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    out = defaultdict(float, a)
    for key, value in b.items():
        out[key] += value
    return dict(out)
