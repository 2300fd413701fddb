"""Flows on the simpy clock (`costs.network: flow`): every transfer in flight shares the
links it crosses max-min fairly with the others (maxmin.py).

Rates change only when a flow starts or ends; then the flows of the touched component settle
their progress at the old rates, get new rates, and are scheduled to end at those rates. A
flow's end event carries the version of its rate, so an end scheduled before a later change
is recognised as stale and ignored (cheaper than cancelling it in simpy's queue).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Hashable

import simpy

from .maxmin import Flow, FlowSet


class _Live(Flow):
    """A flow in flight: its progress is settled at `since` and moves at `rate` after."""

    def __init__(self, spec, done: Callable[[], None], now: float, alone_rate: float, seq: int):
        super().__init__(spec.edges, spec.cap, key=spec, seq=seq)
        self.remaining, self.since, self.version, self.done = spec.volume, now, 0, done
        self.started, self.alone = now - spec.latency, spec.latency + spec.volume / alone_rate
        self.planned = None  # the rate its pending end event was scheduled at


@dataclass
class NetworkStats:
    """How the flows fared: `slowed_s` is the time flows spent beyond what they take alone
    at their ceilings (the analytical model's time for them), summed over flows."""
    flows: int = 0
    rate_updates: int = 0
    slowed_s: float = 0.0
    most_slowed: float = 1.0  # the largest ratio of a flow's time to its alone time


class FlowNetwork:
    def __init__(self, env: simpy.Environment, capacity: Callable[[Hashable], float]):
        self.env = env
        self.links = FlowSet(capacity, memo=True)
        self.stats = NetworkStats()
        self._alone: dict = {}  # spec -> its rate with the links to itself

    def transfer(self, spec) -> simpy.Event:
        """An event that fires (with the time) when the flow of `spec` has arrived: it waits
        its latency, then joins the links."""
        done = self.env.event()
        arrive = lambda: done.succeed(self.env.now)  # noqa: E731
        if spec.latency > 0:
            self.env.timeout(spec.latency).callbacks.append(lambda _e: self._join(spec, arrive))
        else:
            self._join(spec, arrive)
        return done

    def _join(self, spec, done: Callable[[], None]) -> None:
        self.stats.flows += 1
        if spec.volume <= 0 or not spec.edges:
            done()
            return
        flow = _Live(spec, done, self.env.now, self._alone_rate(spec), self.stats.flows)
        self._reschedule(self.links.add(flow, before=self._settle))

    def _alone_rate(self, spec) -> float:
        """The rate its time is measured against: its ceiling (the analytical model's rate for
        it), or where it has none, what its links allow it alone."""
        rate = self._alone.get(spec)
        if rate is None:
            if spec.cap != float("inf"):
                rate = spec.cap
            else:
                capacity = self.links.capacity
                rate = min(capacity(e) / w for e, w in spec.edges.items() if w > 0)
            self._alone[spec] = rate
        return rate

    def _settle(self, flows) -> None:
        now = self.env.now
        for f in flows:
            f.remaining -= f.rate * (now - f.since)
            f.since = now

    def _reschedule(self, flows) -> None:
        for f in flows:
            if f.rate == f.planned:  # its pending end still holds
                continue
            self.stats.rate_updates += 1
            f.version, f.planned = f.version + 1, f.rate
            if f.rate > 0:
                wait = max(0.0, f.remaining) / f.rate
                self.env.timeout(wait).callbacks.append(lambda _e, f=f, v=f.version: self._end(f, v))

    def _end(self, flow: _Live, version: int) -> None:
        if version != flow.version:  # its rate changed after this end was scheduled
            return
        now = self.env.now
        self._reschedule(self.links.remove(flow, before=self._settle))
        flow.version += 1
        took = now - flow.started
        self.stats.slowed_s += max(0.0, took - flow.alone)
        if flow.alone > 0:
            self.stats.most_slowed = max(self.stats.most_slowed, took / flow.alone)
        flow.done()
