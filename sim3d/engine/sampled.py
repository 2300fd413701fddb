"""Many draws of one step at once: the replay of replay.py as max-plus arithmetic on arrays
with one entry per (sample, pipeline).

With priced durations (the analytical network) every queue of the replay is served in an
order the schedule fixes: a rank's actions in program order, a channel's messages in send
order, a data-parallel stream's buckets in issue order. So which event waits for which
never depends on the durations, and a step is a max-plus expression of them: each time is
the max of the times it waits for, plus a duration. Evaluating that expression on arrays
replays every sample and every pipeline in one pass, in the same floating-point operations
the simpy replay performs (so a sample whose draws are all 1 is today's step, bit for bit).

Lanes are the data-parallel (and context-parallel) pipelines; a lane stands for its TP
group. The group meets at the end of every compute, so the group's compute takes its
slowest member's time: the caller gives one factor per lane, the largest of its members'
(`SampleFactors`). Data-parallel groups meet at every gradient bucket: a max across the
lanes of the group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..cluster.placement import GRADIENT_AXIS
from ..schedule.ir import Kind, Schedule
from ..trace import TraceRow
from .rank_replay import COMPUTE_KINDS, action_plan
from .replay import DeadlockError, ReplayOptions


class SampleFactors(Protocol):
    """How much longer than priced each lane's work takes, per sample (arrays (samples, lanes);
    None: as priced)."""
    samples: int

    def compute(self, pp_rank: int) -> np.ndarray | None:
        """(computes of the rank, samples, lanes), or (samples, lanes) for every compute alike."""

    def optimizer(self, pp_rank: int) -> np.ndarray | None: ...

    def transfer(self, pp_rank: int, peer: int) -> np.ndarray | None:
        """(samples, lanes, tp): each TP member's factor on its messages to `peer`."""

    def data_parallel(self, pp_rank: int) -> np.ndarray | None: ...


@dataclass
class SampledSteps:
    step_time: np.ndarray  # (samples,)
    finish: np.ndarray  # (samples, pipeline ranks, lanes): when each lane's rank ended
    lane_ranks: np.ndarray  # (lanes, pipeline ranks): the global rank (TP rank 0) of each
    rows: list[TraceRow] | None = None  # the trace of a recorded sample

    def critical_rank(self) -> np.ndarray:
        """Per sample, the global rank whose TP group ended the step."""
        samples, pp, lanes = self.finish.shape
        flat = self.finish.reshape(samples, -1).argmax(axis=1)
        return self.lane_ranks[flat % lanes, flat // lanes]


# op codes of a compiled action
_COMPUTE, _SEND, _REDUCE, _GATHER, _OPTIMIZER = range(5)


class SampledReplay:
    """Compiles a lowered schedule's actions with their prices once; `run` replays any number
    of samples of it. `costs` must price every rank on its own groups (a CostModel with
    folded=False) on a network where ranks at the same pipeline coordinate are alike: only
    pipeline transfers are priced per lane (a leaf boundary may fall between two stages of
    some pipelines only)."""

    def __init__(self, schedule: Schedule, costs, options: ReplayOptions = ReplayOptions()):
        if options.flows:
            raise ValueError("sampled steps need priced durations (costs.network: analytical); on the flow "
                             "network a flow's duration depends on which others it meets")
        if not schedule.lowered:
            raise ValueError("the sampled replay runs lowered schedules: call sim3d.schedule.lower() first")
        self.schedule, self.costs, self.options = schedule, costs, options
        placement = costs.placement
        lanes = [c for c in placement.pipeline_coords() if c["tp"] == 0]
        self.lane_ranks = np.array([placement.pipeline(**c) for c in lanes], dtype=np.int64)  # (lanes, pp)
        self.lanes = len(lanes)
        # (lanes, pp, tp): the global ranks of each lane's TP groups
        self.members = np.array([[[placement.rank(tp=t, pp=r, dp=c["dp"], cp=c["cp"]) for t in range(placement.tp)]
                                  for r in range(placement.pp)] for c in lanes], dtype=np.int64)
        self.dp_groups = self._gradient_groups(placement)
        self.programs = [self._compile(r) for r in range(schedule.pp)]
        self.computes = [sum(op[0] == _COMPUTE for op in program) for program in self.programs]

    def _gradient_groups(self, placement) -> list[np.ndarray] | None:
        """Lanes of each data-parallel group; None where one group holds every lane."""
        if placement.gradient_group_size < 2:
            return [np.array([lane]) for lane in range(self.lanes)]
        leaders = np.array([placement.group_leader(GRADIENT_AXIS, int(r)) for r in self.lane_ranks[:, 0]])
        groups = [np.flatnonzero(leaders == leader) for leader in np.unique(leaders)]
        if any(len(g) != placement.gradient_group_size for g in groups):
            raise AssertionError("a data-parallel group spans lanes that are not whole pipelines")
        return None if len(groups) == 1 else groups

    @staticmethod
    def _priced(price, ranks: np.ndarray):
        """The price of a compute on the lanes' `ranks`: on a network where the lanes are
        alike, the same on all of them (what folding relies on too)."""
        return price(int(ranks[0]))

    @staticmethod
    def _slowest_member(price, members: np.ndarray) -> float:
        """A bucket's or an optimizer step's price for a lane: its slowest TP member's (the
        members' data-parallel groups may span different leaves of a fat tree), which ends
        the lane's step."""
        return max(price(int(rank)) for rank in members[0])

    def _compile(self, r: int) -> list[tuple]:
        schedule, costs = self.schedule, self.costs
        stages, buckets = schedule.stages, schedule.buckets_per_chunk
        actions = schedule.ranks[r]
        plan = action_plan(stages, r, actions)
        ranks, peers, members = self.lane_ranks[:, r], self.lane_ranks, self.members[:, r]
        slowest = self._slowest_member
        program: list[tuple] = []
        transfers: dict[int, np.ndarray] = {}  # peer -> (lanes, tp) seconds of a message
        for a in actions:
            if a.kind in COMPUTE_KINDS:
                stage, waits_on, kind, produces, backward = plan[a.chunk, a.kind]
                waits = None if waits_on is None else (waits_on[0], waits_on[1], a.mb, waits_on[2])
                made = None if produces is None else (stage, produces, a.mb, "local")
                cost = self._priced(lambda rank: costs.action(stage, kind, rank), ranks)
                program.append((_COMPUTE, waits, cost.seconds, a.chunk if backward else None, made,
                                (stage, a.chunk, a.mb, kind, "compute", 0, None), cost.exposed.get("dp", 0.0)))
            elif a.kind in (Kind.SEND_F, Kind.SEND_B):
                stage, _kind, consumer, _recv = plan[a.chunk, a.kind]
                if a.peer not in transfers:  # each TP member's own path (a group may span a leaf boundary)
                    transfers[a.peer] = np.array([[costs.transfer(int(src), int(dst))
                                                   for src, dst in zip(mine, theirs)]
                                                  for mine, theirs in zip(members, self.members[:, a.peer])])
                row = (stage, a.chunk, a.mb, a.kind.value, "pp", round(costs.p2p_bytes), peers[:, a.peer])
                program.append((_SEND, (a.peer, a.kind is Kind.SEND_F), transfers[a.peer],
                                (stage, consumer.family, a.mb, "remote"), a.peer, row))
            elif a.kind in (Kind.DP_REDUCE, Kind.PARAM_GATHER):
                stage = stages.stage(r, a.chunk)
                price = costs.dp_reduce if a.kind is Kind.DP_REDUCE else costs.param_gather
                seconds = slowest(lambda rank: price(rank, stage, buckets)[0], members)
                nbytes = price(int(ranks[0]), stage, buckets)[1]
                row = (stage, a.chunk, a.bucket, a.kind.value, "dp", round(nbytes), None)
                program.append((_REDUCE, a.chunk, a.bucket - a.chunk * buckets, seconds, row)
                               if a.kind is Kind.DP_REDUCE else (_GATHER, seconds, row))
            elif a.kind is Kind.OPT_STEP:
                held = tuple(stages.stage(r, chunk) for chunk in range(stages.vpp))
                program.append((_OPTIMIZER, slowest(lambda rank: costs.optimizer(rank, held), members),
                                slowest(lambda rank: costs.embedding_sync(rank, held), members),
                                (held[0], -1, -1, "OPT_STEP", "compute", 0, None)))
            elif a.kind not in (Kind.RECV_F, Kind.RECV_B):  # a receive is a post: it takes no time
                raise ValueError(f"the sampled replay does not know action kind {a.kind}")
        return program

    def run(self, factors: SampleFactors, record: bool = False) -> SampledSteps:
        """Replays `factors.samples` draws. Ranks are walked until each waits for an output not
        yet produced; another rank produces it, so the walk ends when every rank is done.
        `record` (one sample): also the trace rows of its computes, sends, buckets and
        optimizer steps, one per lane (TP rank 0 standing for its group)."""
        if record and factors.samples != 1:
            raise ValueError("the sampled replay records the trace of one sample at a time")
        shape = (factors.samples, self.lanes)
        rows: list[TraceRow] | None = [] if record else None
        walks = [_RankWalk(self, r, factors, shape, rows) for r in range(self.schedule.pp)]
        arrivals: dict[tuple, np.ndarray] = {}
        pending = list(walks)
        while pending:
            moved = [walk.advance(arrivals) for walk in pending]
            if not any(moved):
                waiting = "; ".join(f"pipeline rank {w.r} at action {w.at}" for w in pending[:8])
                raise DeadlockError(f"deadlock: {len(pending)} rank(s) wait for outputs nobody produces: {waiting}")
            pending = [walk for walk in pending if not walk.done]
        finish = np.stack([walk.now for walk in walks], axis=1)  # (samples, pp, lanes)
        return SampledSteps(finish.max(axis=(1, 2)), finish, self.lane_ranks, rows)


class _RankWalk:
    """One pipeline rank's walk over every lane and sample: its clocks are arrays."""

    def __init__(self, replay: SampledReplay, r: int, factors: SampleFactors, shape: tuple[int, int],
                 rows: list | None):
        self.replay, self.r, self.program, self.rows = replay, r, replay.programs[r], rows
        self.ranks = replay.lane_ranks[:, r].tolist()
        self.options, self.buckets = replay.options, replay.schedule.buckets_per_chunk
        self.groups = replay.dp_groups
        self.meets = self.groups is None or len(self.groups[0]) > 1
        self.jitter = factors.compute(r)
        self.optimizer_factor = factors.optimizer(r)
        self.dp_factor = factors.data_parallel(r)
        # a message of the lane takes its slowest member's time: every member's transfer must be
        # in before the TP group's next compute ends
        self.transfer_seconds = {op[4]: _slowest(op[2], factors.transfer(r, op[4]))
                                 for op in self.program if op[0] == _SEND}
        self.now = np.zeros(shape)
        self.free = np.zeros(shape)  # the data-parallel stream is free again at
        self.gather_free = np.zeros(shape)
        self.channels: dict[tuple, np.ndarray] = {}  # (peer, forward) -> free again at
        self.last_backward: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # chunk -> (begin, duration)
        self.at = 0
        self.computed = 0

    @property
    def done(self) -> bool:
        return self.at == len(self.program)

    def advance(self, arrivals: dict) -> bool:
        """Carries out actions until one waits for an output that is not there yet."""
        start, program = self.at, self.program
        while self.at < len(program):
            op = program[self.at]
            if op[0] == _COMPUTE:
                if op[1] is not None and op[1] not in arrivals:
                    break
                self._compute(op, arrivals)
            elif op[0] == _SEND:
                self._send(op, arrivals)
            elif op[0] == _REDUCE:
                self._reduce(op)
            elif op[0] == _GATHER:
                self._gather(op)
            else:
                self._optimizer(op)
            self.at += 1
        if self.done:
            self._drain()
        return self.at > start

    def _compute(self, op, arrivals) -> None:
        _, waits, seconds, backward_chunk, made, row, exposed_dp = op
        if waits is not None:
            self.now = np.maximum(self.now, arrivals.pop(waits))
        jitter = self.jitter
        if jitter is not None:
            seconds = seconds * (jitter if jitter.ndim == 2 else jitter[self.computed])
        if exposed_dp and self.dp_factor is not None:  # sharded data parallelism's exposed collectives
            seconds = seconds + exposed_dp * (self.dp_factor - 1.0)
        self.computed += 1
        begin = self.now
        self.now = begin + seconds
        if backward_chunk is not None:
            self.last_backward[backward_chunk] = (begin, self.now - begin)
        if made is not None:
            arrivals[made] = self.now
        if self.rows is not None:
            self._record(row, begin, self.now)

    def _send(self, op, arrivals) -> None:
        _, channel, _, delivers, peer, row = op
        seconds = self.transfer_seconds[peer]
        issued = self.now
        free = self.channels.get(channel)
        begin = issued if free is None else np.maximum(issued, free)
        end = self.channels[channel] = begin + seconds
        delivered = issued + (end - issued)  # as simpy schedules it: now + delay
        arrivals[delivers] = delivered
        if not self.options.overlap_p2p:
            self.now = delivered
        if self.rows is not None:
            self._record(row, begin, end)

    def _reduce(self, op) -> None:
        _, chunk, k, seconds, row = op
        ready = self.now
        if self.options.overlap_grad_reduce and chunk in self.last_backward:
            begin, duration = self.last_backward[chunk]
            ready = begin + (k + 1) / self.buckets * duration
        if self.meets:  # every member must have the bucket: the stream waits for the last
            self.now, ready = self._group_max(self.now), self._group_max(ready)
        if self.dp_factor is not None:
            seconds = seconds * self.dp_factor
        begin = np.maximum(ready, self.free)
        self.free = begin + seconds
        if self.rows is not None:
            self._record(row, begin, self.free)

    def _group_max(self, times: np.ndarray) -> np.ndarray:
        if self.groups is None:
            return np.broadcast_to(times.max(axis=1, keepdims=True), times.shape)
        out = np.empty_like(times)
        for lanes in self.groups:
            out[:, lanes] = times[:, lanes].max(axis=1, keepdims=True)
        return out

    def _gather(self, op) -> None:
        _, seconds, row = op
        if self.dp_factor is not None:
            seconds = seconds * self.dp_factor
        begin = np.maximum(np.maximum(self.now, self.free), self.gather_free)
        self.gather_free = begin + seconds
        if self.rows is not None:
            self._record(row, begin, self.gather_free)
        if not self.options.overlap_param_gather:  # the step ends when the parameters are back
            self.free = self.gather_free

    def _optimizer(self, op) -> None:
        _, seconds, sync, row = op
        self._drain()  # the optimizer needs every reduced gradient
        if self.optimizer_factor is not None:
            seconds = seconds * self.optimizer_factor
        begin = self.now
        self.now = begin + (seconds + sync)
        if self.rows is not None:
            self._record(row, begin, self.now)

    def _drain(self) -> None:
        self.now = np.where(self.free > self.now, self.now + (self.free - self.now), self.now)

    def _record(self, row: tuple, begin: np.ndarray, end: np.ndarray) -> None:
        stage, chunk, mb, kind, stream, nbytes, peers = row
        begin, end = np.broadcast_to(begin, end.shape)[0].tolist(), end[0].tolist()
        for lane, rank in enumerate(self.ranks):
            peer = -1 if peers is None else int(peers[lane])
            self.rows.append(TraceRow(rank, stage, chunk, mb, kind, stream, begin[lane], end[lane], nbytes, peer))


def _slowest(seconds: np.ndarray, factor: np.ndarray | None) -> np.ndarray:
    """A lane's message time from its members' (lanes, tp) prices and (samples, lanes, tp) factors."""
    if factor is None:
        return seconds.max(axis=1)
    return (seconds * factor).max(axis=2)
