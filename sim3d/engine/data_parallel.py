"""One simulated rank's data-parallel stream: its gradient reductions and parameter gathers,
bucket by bucket, and what the optimizer and the step's end wait for. The transport picks
the kind (transport.py): with priced durations the stream is a clock; on the flow network
each bucket is a process that lasts until its flows arrive.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from simpy import Resource

from ..cluster.placement import GRADIENT_AXIS
from ..schedule.ir import Action, Kind
from ..trace import TraceRow

NOTHING = ()  # what a method that takes no simulated time yields from
_new = tuple.__new__  # builds a TraceRow without its keyword-handling constructor (sim3d.trace)


class DataParallelStream(ABC):
    """Each method returns what the rank's process yields from. `early` maps the index of a
    compute to the buckets handed to the stream when that compute starts (empty where the
    stream derives the buckets' ready times itself)."""

    def __init__(self, replay, engine):
        self.early: dict[int, list[Action]] = {}
        self.replay, self.env, self.costs = replay, engine.env, engine.costs
        self.me, self.ledger, self.record = replay.me, replay.ledger, engine.trace.add
        self.stage_of = lambda chunk: replay.stages.stage(replay.pp_rank, chunk)  # noqa: E731
        self.full, self.placement, self.rendezvous = engine.full, engine.placement, engine.rendezvous
        self.buckets, self.options = engine.buckets, engine.options
        self.seq = 0  # collectives issued: the rendezvous name at full fidelity
        self._cost: dict[tuple, tuple[float, float]] = {}

    def cost(self, what: str, stage: int) -> tuple[float, float]:
        """(seconds, bytes) of one bucket of a stage: "reduce" (gradients) or "gather" (parameters)."""
        key = (what, stage)
        if key not in self._cost:
            fn = self.costs.dp_reduce if what == "reduce" else self.costs.param_gather
            self._cost[key] = fn(self.me, stage, self.buckets)
        return self._cost[key]

    @abstractmethod
    def reduce(self, a: Action): ...

    @abstractmethod
    def gather(self, a: Action): ...

    def start_early(self, index: int, begin: float, seconds: float) -> None:
        """The compute at `index` began at `begin` and computes for `seconds`: its buckets
        become ready one after another while it runs."""

    @abstractmethod
    def drain(self, end_of_step: bool):
        """Wait, as data-parallel time, for the reductions (the optimizer needs every reduced
        gradient); at the end of the step also for the gathers that do not overlap the next."""


class ClockedDataParallel(DataParallelStream):
    """Buckets of known duration: the stream is a free-at time, and a bucket of an overlapped
    reduction is ready where its share of its chunk's last backward ends."""

    def __init__(self, replay, engine):
        super().__init__(replay, engine)
        self.free = self.gather_free = 0.0  # when the stream, and its gathers, are free again
        self.stand_ins = replay.dp_stand_ins

    def reduce(self, a: Action):
        env, chunk, buckets = self.env, a.chunk, self.buckets
        k = a.bucket - chunk * buckets  # the k-th bucket of its chunk
        stage = self.stage_of(chunk)
        seconds, nbytes = self.cost("reduce", stage)
        ready = env.now
        last_backward = self.replay.last_backward
        if self.options.overlap_grad_reduce and chunk in last_backward:
            b_start, b_dur = last_backward[chunk]
            ready = b_start + (k + 1) / buckets * b_dur
        members = self.placement.gradient_group_size
        if self.full and members > 1:
            rendezvous = self.rendezvous
            gather = rendezvous.gather((*rendezvous.group_key(GRADIENT_AXIS, self.me), self.seq), members).arrive(ready)
            for leader, count in self.stand_ins:  # for the ranks this one stands for
                rendezvous.gather((GRADIENT_AXIS, leader, self.seq), members).arrive(ready, count)
            waited = env.now
            yield gather
            self.ledger.parts["dp"] += env.now - waited
            ready = gather.value
        self.seq += 1
        begin = max(ready, self.free)
        self.free = begin + seconds
        self.record(_new(TraceRow, (self.me, stage, chunk, a.bucket, "DP_REDUCE", "dp", begin, self.free,
                                    round(nbytes), -1)))

    def gather(self, a: Action):
        stage = self.stage_of(a.chunk)
        seconds, nbytes = self.cost("gather", stage)
        begin = max(self.env.now, self.free, self.gather_free)
        self.gather_free = begin + seconds
        if not self.options.overlap_param_gather:  # the step ends when the parameters are back
            self.free = self.gather_free
        self.record(_new(TraceRow, (self.me, stage, a.chunk, a.bucket, "PARAM_GATHER", "dp", begin, self.gather_free,
                                    round(nbytes), -1)))
        return NOTHING

    def drain(self, end_of_step: bool):
        env = self.env
        if self.free > env.now:  # the gathers that must end the step are in `free` already
            self.ledger.waited_for_dp(self.free - env.now)
            yield env.timeout(self.free - env.now)


class FlowDataParallel(DataParallelStream):
    """Buckets as flows: the stream is a process of its own, one bucket at a time. With
    overlapped reduction a bucket is handed to it while its chunk's last backward runs, at
    the moment its gradients are ready."""

    def __init__(self, replay, engine, transport):
        super().__init__(replay, engine)
        self.transport = transport
        self.stream = Resource(self.env, capacity=1)
        self.reductions: list = []  # the buckets' processes
        self.param_gathers: list = []
        if self.options.overlap_grad_reduce:
            last_backward: dict[int, int] = {}
            for i, a in enumerate(replay.actions):
                if a.kind in (Kind.B, Kind.BW):
                    last_backward[a.chunk] = i
                elif a.kind is Kind.DP_REDUCE and a.chunk in last_backward:
                    self.early.setdefault(last_backward[a.chunk], []).append(a)
        self.handed_early = {id(a) for bucket in self.early.values() for a in bucket}

    def reduce(self, a: Action):
        if id(a) not in self.handed_early:
            self._start("reduce", a, self.env.now)
        return NOTHING

    def gather(self, a: Action):
        self._start("gather", a, self.env.now)
        return NOTHING

    def start_early(self, index: int, begin: float, seconds: float) -> None:
        buckets = self.buckets
        for bucket in self.early[index]:
            k = bucket.bucket - bucket.chunk * buckets
            self._start("reduce", bucket, begin + (k + 1) / buckets * seconds)

    def drain(self, end_of_step: bool):
        processes = self.reductions
        if end_of_step and not self.options.overlap_param_gather:
            processes = processes + self.param_gathers
        pending = [p for p in processes if not p.triggered]
        if pending:
            begin = self.env.now
            yield self.env.all_of(pending)
            self.ledger.waited_for_dp(self.env.now - begin)

    def _start(self, what: str, a: Action, ready: float) -> None:
        process = self.env.process(self._bucket(what, a, ready))
        (self.reductions if what == "reduce" else self.param_gathers).append(process)

    def _bucket(self, what: str, a: Action, ready: float):
        """One bucket: queued in the order buckets become ready, started once every member of
        the group has it (full fidelity), over when its flows arrive."""
        env, me, rendezvous = self.env, self.me, self.rendezvous
        if ready > env.now:
            yield env.timeout(ready - env.now)
        stage = self.stage_of(a.chunk)
        with self.stream.request() as slot:
            yield slot
            begin = None
            for axis, expert in self.costs.gradient_axes:  # dense, then experts, each over its group
                key = None
                members = self.placement.group_size(axis) if self.full else 1
                if members > 1:
                    key = (*rendezvous.group_key(axis, me), self.seq)  # no TP twins on flows
                    yield rendezvous.gather(key, members).arrive(env.now)
                begin = env.now if begin is None else begin
                yield self.transport.collective(key, lambda expert=expert: self.costs.dp_flows(
                    what, me, stage, self.buckets, expert))
            self.seq += 1
            copies = self.costs.gradient_copies(stage, self.buckets) if what == "reduce" else 0.0
            if copies:  # the executor's host copies around it, where a profile measured them
                yield self.env.timeout(copies)
        nbytes = self.cost(what, stage)[1]
        kind = "DP_REDUCE" if what == "reduce" else "PARAM_GATHER"
        self.record(_new(TraceRow, (me, stage, a.chunk, a.bucket, kind, "dp", begin, env.now, round(nbytes), -1)))
