"""What the simulated ranks of one replay share, each table with one owner and one job.

* `RankLedger`: where one rank's time went; written only by that rank's `RankReplay`.
* `Arrivals`: an output and the one compute that consumes it meet on an event.
* `Rendezvous`: the members of a group meet before a collective (full fidelity).
* `TraceRecorder`: the trace rows, and the RECV rows waiting for their message or post.

The tables hold what is in flight, not the whole step: an arrival or a rendezvous leaves its
table once both sides met, which keeps full fidelity (millions of them) in memory.
"""

from __future__ import annotations

from collections import defaultdict

import simpy

from ..trace import TraceRow

_new = tuple.__new__  # builds a TraceRow without its keyword-handling constructor (sim3d.trace)


class RankLedger:
    """One simulated rank's accounting: seconds of compute, of TP/EP collectives inside it,
    of the optimizer's wait for data-parallel work, where its step went (`parts`, keys of
    replay.BREAKDOWN_PARTS), when it finished, and where it last waited (for a deadlock's
    message)."""

    __slots__ = ("compute_busy", "tp_in_compute", "dp_tail", "parts", "finish", "waiting")

    def __init__(self):
        self.compute_busy = self.tp_in_compute = self.dp_tail = 0.0
        self.parts: dict[str, float] = defaultdict(float)
        self.finish: float | None = None
        self.waiting: tuple | None = None  # (action index, action)

    def waited_for_dp(self, seconds: float) -> None:
        """The compute stream waited this long for the data-parallel stream."""
        self.dp_tail += seconds
        self.parts["dp"] += seconds


class Arrivals:
    """The event of an output and its one consumer, named (pipeline, stage, family, mb, where)."""

    __slots__ = ("env", "_pending")

    def __init__(self, env: simpy.Environment):
        self.env = env
        self._pending: dict[tuple, simpy.Event] = {}

    def of(self, key: tuple) -> simpy.Event:
        """The first of the two to ask makes the event, the second takes it off the table."""
        event = self._pending.pop(key, None)
        if event is None:
            event = self._pending[key] = simpy.Event(self.env)
        return event

    def __len__(self) -> int:
        """Arrivals waiting for their other side."""
        return len(self._pending)


class _Gather:
    """A rendezvous of `size` members: fires with the latest arrival value once all arrived,
    and leaves its table then."""

    __slots__ = ("size", "latest", "event", "table", "key")

    def __init__(self, env, size: int, table: dict, key: tuple):
        self.size, self.latest, self.event = size, float("-inf"), env.event()
        self.table, self.key = table, key

    def arrive(self, value: float, count: int = 1):
        """`count` members arrive at `value` (a replayed rank and the ranks it stands for)."""
        self.size -= count
        if value > self.latest:
            self.latest = value
        if self.size == 0:
            del self.table[self.key]
            self.event.succeed(self.latest)
        return self.event


class Rendezvous:
    """Where the members of a group meet, named (axis, group leader, sequence number)."""

    __slots__ = ("env", "placement", "_gathers", "_group_keys")

    def __init__(self, env: simpy.Environment, placement):
        self.env, self.placement = env, placement
        self._gathers: dict[tuple, _Gather] = {}
        self._group_keys: dict[tuple[str, int], tuple] = {}

    def gather(self, key: tuple, size: int) -> _Gather:
        gather = self._gathers.get(key)
        if gather is None:
            gather = self._gathers[key] = _Gather(self.env, size, self._gathers, key)
        return gather

    def group_key(self, axis: str, rank: int) -> tuple:
        """(axis, first rank of the group): the rendezvous name, without listing the group
        (listing it for every rank was O(GPUs^2) at full fidelity)."""
        key = (axis, rank)
        if key not in self._group_keys:
            self._group_keys[key] = (axis, self.placement.group_leader(axis, rank))
        return self._group_keys[key]

    def __len__(self) -> int:
        """Rendezvous some member is still waiting at."""
        return len(self._gathers)


class TraceRecorder:
    """The replay's trace rows (sim3d.trace), in the order they were written. A RECV row spans
    from the later of its post and its message's start until the message is in, so it is
    written by whichever of the two comes last; the other waits here, named (pipeline,
    stage, mb, RECV kind)."""

    __slots__ = ("rows", "add", "_posted", "_unposted")

    def __init__(self):
        self.rows: list[TraceRow] = []
        self.add = self.rows.append  # the replay writes a row per action: no call in between
        self._posted: dict[tuple, float] = {}  # -> when the receive was posted
        self._unposted: dict[tuple, TraceRow] = {}  # -> the RECV row of a message that came first

    @property
    def unmatched(self) -> int:
        """Receives posted whose message never came, and messages never received."""
        return len(self._posted) + len(self._unposted)

    def receive_posted(self, key: tuple, now: float) -> None:
        row = self._unposted.pop(key, None)
        if row is None:
            self._posted[key] = now
        else:  # the message came before the post: the row spans no time
            self.rows.append(_new(TraceRow, row[:6] + (now, now) + row[8:]))

    def message_in(self, key: tuple, row: TraceRow) -> None:
        """The RECV row of a message just in, spanning its whole transfer."""
        post = self._posted.pop(key, None)
        if post is None:  # not posted yet: the receiver's post writes the row
            self._unposted[key] = row
        else:
            self.rows.append(_new(TraceRow, row[:6] + (max(post, row[6]), row[7]) + row[8:]))
