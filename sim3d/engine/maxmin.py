"""Max-min fair rates of flows that share links: progressive filling.

All unfrozen flows raise their rate together; a link freezes the flows crossing it when it
is full, a flow freezes at its own ceiling (`cap`: what its algorithm reaches alone). The
result is the unique max-min fair allocation (Bertsekas & Gallager, *Data Networks*, 2nd ed.
1992, section 6.5.2). A flow may put more or less than one byte on a link per byte of its
progress (`edges` weights): a ring collective advances all its hops at one rate, so a link two
of its hops cross carries twice its rate; the filling raises rates, and links fill by weight.

`FlowSet` keeps the allocation current as flows come and go and recomputes only the
connected component (flows linked by shared links) that a change touches, as flow-level
simulators do to stay fast (SimGrid's lazy, partial update of its max-min system: Donassolo
et al., "Fast and scalable simulation of volunteer computing systems using SimGrid", LSAP
2010).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Hashable, Iterable

# Relative slack under which a link counts as full or a flow as at its ceiling: progressive
# filling subtracts rates from capacities, so exact equality is not reached in floating point.
SATURATED = 1e-9


@dataclass(eq=False)
class Flow:
    """One flow: `edges` maps each link it crosses to the bytes it puts there per byte of its
    progress; `cap` is its own ceiling in bytes/s (inf: only the links limit it)."""
    edges: dict[Hashable, float]
    cap: float = float("inf")
    rate: float = field(default=0.0, compare=False)


def max_min_rates(flows: Iterable[Flow], capacity: Callable[[Hashable], float]) -> None:
    """Set `flow.rate` of every flow to its max-min fair share of the links' `capacity`."""
    flows = [f for f in flows]
    users: dict[Hashable, list[Flow]] = {}
    for f in flows:
        f.rate = 0.0
        for edge, weight in f.edges.items():
            if weight > 0:
                users.setdefault(edge, []).append(f)
    residual = {edge: capacity(edge) for edge in users}
    active = {f for f in flows if f.cap > 0}
    while active:
        load = {edge: sum(f.edges[edge] for f in fs if f in active) for edge, fs in users.items()}
        step = min((residual[e] / w for e, w in load.items() if w > 0), default=float("inf"))
        step = min([step] + [f.cap - f.rate for f in active])
        if step == float("inf"):
            raise ValueError("a flow crosses no link of finite capacity and has no ceiling: its rate is unbounded")
        for f in active:
            f.rate += step
        for edge, w in load.items():
            residual[edge] -= step * w
        full = {e for e, w in load.items() if w > 0 and residual[e] <= SATURATED * capacity(e)}
        done = {f for f in active if f.rate >= f.cap * (1 - SATURATED)}
        done |= {f for e in full for f in users[e] if f in active}
        active -= done


class FlowSet:
    """The flows in flight and their rates, updated one arrival or departure at a time."""

    def __init__(self, capacity: Callable[[Hashable], float]):
        self.capacity = capacity
        self.flows: set[Flow] = set()
        self.on_link: dict[Hashable, set[Flow]] = {}
        self.most_sharing = 0  # the most flows ever on one link at once

    def add(self, flow: Flow) -> set[Flow]:
        """Add a flow; returns the flows whose rate was recomputed (the new one among them)."""
        self.flows.add(flow)
        for edge in flow.edges:
            sharing = self.on_link.setdefault(edge, set())
            sharing.add(flow)
            self.most_sharing = max(self.most_sharing, len(sharing))
        return self._refill(flow.edges)

    def remove(self, flow: Flow) -> set[Flow]:
        """Remove a flow; returns the flows whose rate was recomputed."""
        self.flows.discard(flow)
        for edge in flow.edges:
            sharing = self.on_link[edge]
            sharing.discard(flow)
            if not sharing:
                del self.on_link[edge]
        return self._refill(flow.edges)

    def component(self, edges: Iterable[Hashable]) -> set[Flow]:
        """Every flow connected to these links through shared links."""
        seen_edges, found = set(), set()
        todo = [e for e in edges if e in self.on_link]
        while todo:
            edge = todo.pop()
            if edge in seen_edges:
                continue
            seen_edges.add(edge)
            for f in self.on_link[edge]:
                if f not in found:
                    found.add(f)
                    todo.extend(e for e in f.edges if e not in seen_edges)
        return found

    def _refill(self, edges: Iterable[Hashable]) -> set[Flow]:
        touched = self.component(edges)
        max_min_rates(touched, self.capacity)
        return touched
