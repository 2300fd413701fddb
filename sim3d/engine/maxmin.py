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
    key: Hashable | None = None  # flows with one key share edges and cap (FlowSet)
    rate: float = field(default=0.0, compare=False)
    # the order flows are re-rated in (and so their ends scheduled): the order they came, not
    # that of sets hashed by object ids, so that a run's events fall the same way every time
    seq: int = field(default=0, compare=False)


def _arrival_order(flow: Flow) -> int:
    return flow.seq


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
    """The flows in flight and their rates, updated one arrival or departure at a time.

    Flows with the same `key` must have the same edges and ceiling (FlowNetwork keys a flow
    by the FlowSpec it came from). Keys make the bookkeeping cheap: which keys can share a
    link is worked out once per key, not per flow; and with `memo`, the rates of a component
    are remembered by which keys it holds how often (a pipeline step repeats a handful of
    such mixes thousands of times)."""

    def __init__(self, capacity: Callable[[Hashable], float], memo: bool = False):
        self.capacity = capacity
        self.live: dict[Hashable, list[Flow]] = {}
        self._users: dict[Hashable, set] = {}  # link -> keys that ever crossed it
        self._neighbours: dict[Hashable, set] = {}  # key -> keys sharing a link with it (itself too)
        self._memo: dict[tuple, dict] | None = {} if memo else None

    @staticmethod
    def key(flow: Flow) -> Hashable:
        return flow if flow.key is None else flow.key

    def add(self, flow: Flow, before: Callable[[list[Flow]], None] | None = None) -> list[Flow]:
        """Add a flow; returns the flows whose rate was recomputed (the new one among them).
        `before` sees the flows about to be re-rated while they still have their old rates."""
        key = self.key(flow)
        self._register(key, flow)
        if before is not None:
            before(self.component(key))
        self.live.setdefault(key, []).append(flow)
        return self._refill(key)

    def remove(self, flow: Flow, before: Callable[[list[Flow]], None] | None = None) -> list[Flow]:
        """Remove a flow; returns the flows whose rate was recomputed (`before`: as in add)."""
        key = self.key(flow)
        if before is not None:
            before(self.component(key))
        same = self.live[key]
        same.remove(flow)
        if not same:
            del self.live[key]
        touched = self._refill(key)
        if flow.key is None:  # an unkeyed flow never comes back: forget it
            for other in self._neighbours.pop(key):
                self._neighbours.get(other, set()).discard(key)
            for edge in flow.edges:
                self._users[edge].discard(key)
        return touched

    def _register(self, key, flow: Flow) -> None:
        if key in self._neighbours:
            return
        near = {key}
        for edge in flow.edges:
            users = self._users.setdefault(edge, set())
            near |= users
            users.add(key)
        self._neighbours[key] = near
        for other in near:
            self._neighbours[other].add(key)

    def component(self, key) -> list[Flow]:
        """The live flows connected to `key`'s links through shared links (`key`'s own too),
        in the order they came."""
        seen, todo, found = {key}, [key], []
        while todo:
            k = todo.pop()
            found.extend(self.live.get(k, ()))
            for near in self._neighbours[k]:
                if near not in seen and near in self.live:
                    seen.add(near)
                    todo.append(near)
        found.sort(key=_arrival_order)
        return found

    def _refill(self, key) -> list[Flow]:
        touched = self.component(key)
        if self._memo is None:
            max_min_rates(touched, self.capacity)
            return touched
        counts: dict = {}
        for f in touched:
            k = self.key(f)
            counts[k] = counts.get(k, 0) + 1
        signature = tuple(sorted(counts.items(), key=lambda kv: id(kv[0])))
        rates = self._memo.get(signature)
        if rates is None:
            max_min_rates(touched, self.capacity)
            rates = self._memo[signature] = {self.key(f): f.rate for f in touched}
        else:
            for f in touched:
                f.rate = rates[self.key(f)]
        return touched
