"""Replay a lowered schedule on a simpy environment, one process per simulated rank.

Each rank walks its action list in order. Compute actions occupy the rank's compute stream
(the process itself); a compute that consumes another rank's output first waits for the
message to arrive. SENDs start a transfer on the (src, dst, direction) channel, which
serialises messages in order, as NCCL and gloo do; RECVs are posts and cost nothing by
themselves (with `overlap_p2p: false` a SEND blocks the compute stream until delivered).
DP_REDUCE / PARAM_GATHER run on the rank's data-parallel stream; with
`overlap_grad_reduce` a chunk's buckets become ready one after another during its last
backward, as Megatron's bucketed hooks make them. OPT_STEP waits for every reduction.

Folded mode simulates one pipeline: data-parallel replicas and tensor-parallel peers are
symmetric, so one rank stands for its group and collectives are still costed with full
group sizes (costs/). Full fidelity simulates every GPU: TP groups synchronise at the end
of every compute action, DP groups at every bucket, and stragglers slow their own rank.
"""

from __future__ import annotations

import gc
import time
from collections import defaultdict
from dataclasses import dataclass

import simpy

from ..schedule.ir import TRACE_COLUMNS, Action, Kind, Schedule

F, B, BI, BW = Kind.F, Kind.B, Kind.BI, Kind.BW
COMPUTE = (F, B, BI, BW)
# Where a rank's step time goes, in the order a reader thinks of it. compute: its own work
# (collectives hidden under it included); recompute: forward work redone in backward;
# tp / cp / ep: collective time on the compute stream's path; tp_sync: waiting at a TP
# rendezvous for a slower peer (full fidelity); pipeline_wait: waiting for a producing stage
# (the bubble); pipeline_p2p: waiting for the transfer itself; dp: waiting for gradient
# reductions or parameter gathers; optimizer: the optimizer step.
BREAKDOWN_PARTS = ("compute", "recompute", "tp", "cp", "ep", "tp_sync", "pipeline_wait", "pipeline_p2p",
                   "dp", "optimizer")


class DeadlockError(RuntimeError):
    pass


@dataclass
class SimResult:
    rows: list[tuple]
    step_time: float
    compute_busy: dict[int, float]  # global rank -> seconds of compute
    tp_in_compute: dict[int, float]  # global rank -> seconds of TP/EP collectives inside compute
    p2p_wait: dict[int, float]  # global rank -> seconds a ready compute waited for a message
    dp_tail: dict[int, float]  # global rank -> seconds OPT_STEP waited for DP reductions
    events: int
    wall_s: float
    ranks: list[int]
    parts: dict[int, dict[str, float]]  # global rank -> where its step time went (BREAKDOWN_PARTS)
    finish: dict[int, float]  # global rank -> when its last action ended

    @property
    def critical_rank(self) -> int:
        """The rank that ends the step (of several, the one with the most compute)."""
        return max(self.ranks, key=lambda r: (self.finish[r], self.compute_busy[r], -r))

    def breakdown(self, rank: int | None = None) -> dict[str, float]:
        """Seconds of one rank's step (default: the critical rank's) by what the rank was
        doing; the parts add up to that rank's finish time, which is the step time for the
        critical rank."""
        got = self.parts[self.critical_rank if rank is None else rank]
        return {part: got.get(part, 0.0) for part in BREAKDOWN_PARTS}

    def trace(self):
        import pandas as pd
        return pd.DataFrame(self.rows, columns=list(TRACE_COLUMNS))

    @property
    def bubble_fraction(self) -> float:
        worst = min(self.compute_busy.values())
        return (self.step_time - worst) / self.step_time if self.step_time else 0.0

    @property
    def comm_exposed_s(self) -> float:
        """Communication the compute stream waits for, on the rank that waits most."""
        return max(self.tp_in_compute[r] + self.p2p_wait[r] + self.dp_tail[r] for r in self.ranks)


class _Gather:
    """A rendezvous of `size` members: fires with the latest arrival value once all arrived."""

    def __init__(self, env, size: int):
        self.size, self.values, self.event = size, [], env.event()

    def arrive(self, value: float):
        self.values.append(value)
        if len(self.values) == self.size:
            self.event.succeed(max(self.values))
        return self.event


class Engine:
    def __init__(self, scenario, schedule: Schedule, costs, full_fidelity: bool = False):
        if not schedule.lowered:
            raise ValueError("the engine replays lowered schedules: call sim3d.schedule.lower() first")
        self.s, self.schedule, self.costs = scenario, schedule, costs
        self.full = full_fidelity
        self.placement = costs.placement
        self._group_keys: dict[tuple[str, int], tuple] = {}
        self.env = simpy.Environment()
        self.rows: list[tuple] = []
        self.buckets = schedule.buckets_per_chunk
        self.overlap_dp = scenario.training.overlap_grad_reduce
        self.overlap_p2p = scenario.training.overlap_p2p
        # Megatron --overlap-param-gather: the all-gather of the updated parameters runs under
        # the next step's forwards (bucket by bucket as they are needed), so this step ends
        # with the optimizer; the gathers still occupy the data-parallel stream.
        self.overlap_param_gather = scenario.training.overlap_param_gather
        self.slowdown = defaultdict(lambda: 1.0)
        for fault in scenario.faults:
            if fault.straggler:
                self.slowdown[fault.straggler.rank] = fault.straggler.slowdown
        self.arrivals: dict[tuple, simpy.Event] = {}
        self.channels: dict[tuple, simpy.Resource] = {}
        self.gathers: dict[tuple, _Gather] = {}
        self.busy = defaultdict(float)
        self.tp_busy = defaultdict(float)
        self.dp_tail = defaultdict(float)
        self.parts: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.finish: dict[int, float] = {}
        self._bucket_cost = {}
        self._waiting: dict[int, str] = {}

    # ---- who is simulated -------------------------------------------------------------------
    def _pipelines(self) -> list[dict]:
        p = self.placement
        if not self.full:
            return [dict(tp=0, dp=0, cp=0)]
        return [dict(tp=t, dp=d, cp=c) for d in range(p.dp) for c in range(p.cp) for t in range(p.tp)]

    def run(self, progress=None, horizon: float | None = None) -> SimResult:
        """Replay the step; with `progress` and an expected end time `horizon`, report the
        fraction of simulated time done a hundred times along the way."""
        start = time.perf_counter()
        ranks, processes = [], []  # processes: one per simulated rank
        for pipe in self._pipelines():
            globals_ = self.placement.pipeline(**pipe)
            for pp_rank, actions in enumerate(self.schedule.ranks):
                ranks.append(globals_[pp_rank])
                processes.append(self.env.process(self._rank(pp_rank, globals_, actions, pipe)))
        if progress and horizon:
            self.env.process(self._monitor(len(processes), progress, horizon))
        # The replay allocates millions of small events and rows that live until the end and
        # hold no reference cycles worth collecting: the cyclic collector would only rescan them.
        collecting = gc.isenabled()
        gc.disable()
        try:
            self.env.run()
        finally:
            if collecting:
                gc.enable()
        missing = [r for r in ranks if r not in self.finish]
        if missing:
            waiting = "; ".join(self._waiting.get(r, f"rank {r}") for r in missing[:8])
            raise DeadlockError(f"deadlock: the event queue is empty but {len(missing)} rank(s) still wait: "
                                f"{waiting}")
        step = max(self.finish.values())
        events = len(self.rows)
        return SimResult(self.rows, step, {r: self.busy[r] for r in ranks}, {r: self.tp_busy[r] for r in ranks},
                         {r: self.parts[r]["pipeline_p2p"] for r in ranks}, {r: self.dp_tail[r] for r in ranks},
                         events, time.perf_counter() - start, ranks, {r: dict(self.parts[r]) for r in ranks},
                         dict(self.finish))

    def _monitor(self, ranks: int, progress, horizon: float):
        """Report progress every hundredth of the expected step; ends with the last rank
        (at most one tick later, which no rank observes)."""
        while len(self.finish) < ranks and not self._stalled():
            yield self.env.timeout(horizon / 100)
            progress(min(self.env.now / horizon, 1.0))

    def _stalled(self) -> bool:
        """Only this monitor is left to run: the ranks still waiting are deadlocked."""
        return self.env.peek() == float("inf")

    def _arrival(self, key: tuple) -> simpy.Event:
        if key not in self.arrivals:
            self.arrivals[key] = self.env.event()
        return self.arrivals[key]

    def _gather(self, key: tuple, size: int) -> _Gather:
        if key not in self.gathers:
            self.gathers[key] = _Gather(self.env, size)
        return self.gathers[key]

    def _group_key(self, axis: str, rank: int) -> tuple:
        """(axis, first rank of the group): the rendezvous name, without listing the group
        (listing it for every rank was O(GPUs^2) at full fidelity)."""
        key = (axis, rank)
        if key not in self._group_keys:
            self._group_keys[key] = (axis, self.placement.group_leader(axis, rank))
        return self._group_keys[key]

    # ---- one rank ----------------------------------------------------------------------
    def _rank(self, pp_rank: int, pipe_ranks: list[int], actions: tuple[Action, ...], pipe: dict):
        env, stages = self.env, self.schedule.stages
        me = pipe_ranks[pp_rank]
        parts = self.parts[me]
        pipe_id = tuple(sorted(pipe.items()))
        last_backward: dict[int, tuple[float, float]] = {}  # chunk -> (start, duration)
        dp_free = gather_free = 0.0
        dp_seq = 0
        for index, a in enumerate(actions):
            if a.kind in COMPUTE:
                stage = stages.stage(pp_rank, a.chunk)
                need = self._input_key(pipe_id, pp_rank, a, stage)
                if need is not None:
                    event = self._arrival(need)
                    if not event.triggered:
                        self._waiting[me] = f"rank {me} at action {index} ({a})"
                        ready_at = env.now
                        yield event
                        # only the transfer is communication; waiting for the producer is bubble
                        transfer = max(0.0, env.now - max(ready_at, event.value))
                        parts["pipeline_p2p"] += transfer
                        parts["pipeline_wait"] += env.now - ready_at - transfer
                cost = self.costs.action(stage, a.kind.value)
                begin = env.now
                slow = self.slowdown[me]
                yield env.timeout(cost.seconds * slow)
                exposed = sum(cost.exposed.values())
                parts["compute"] += (cost.seconds - cost.recompute - exposed) * slow
                parts["recompute"] += cost.recompute * slow
                for stream, seconds in cost.exposed.items():
                    parts[stream] += seconds * slow
                if self.full and self.placement.tp > 1:
                    group = self._group_key("tp", me)
                    computed = env.now
                    yield self._gather((*group, index), self.placement.tp).arrive(env.now)
                    parts["tp_sync"] += env.now - computed
                self.busy[me] += env.now - begin
                inside = sum(cost.comm.get(k, 0.0) for k in ("tp", "ep"))
                self.tp_busy[me] += inside
                self.rows.append((me, stage, a.chunk, a.mb, a.kind.value, "compute", begin, env.now, 0, -1))
                for stream, seconds in cost.comm.items():
                    if seconds:
                        self.rows.append((me, stage, a.chunk, a.mb, f"{stream.upper()}_COMM", stream,
                                          env.now - seconds, env.now, 0, -1))
                if a.kind in (B, BW):
                    last_backward[a.chunk] = (begin, env.now - begin)
                # local consumers (V turnaround, BW after BI) find the output here
                family = F if a.kind is F else (BW if a.kind is BW else BI)
                self._arrival((pipe_id, stage, family, a.mb, "local")).succeed(env.now)
            elif a.kind in (Kind.SEND_F, Kind.SEND_B):
                transfer = env.process(self._transfer(pipe_id, pipe_ranks, pp_rank, a))
                if not self.overlap_p2p:  # blocking send: the compute stream waits for delivery
                    begin = env.now
                    yield transfer
                    parts["pipeline_p2p"] += env.now - begin
            elif a.kind in (Kind.RECV_F, Kind.RECV_B):
                continue  # a post: the transfer process records the arrival
            elif a.kind is Kind.DP_REDUCE:
                chunk = a.chunk
                k = a.bucket - chunk * self.buckets  # the k-th bucket of its chunk
                seconds, nbytes = self._dp_cost("reduce", pp_rank, chunk)
                ready = env.now
                if self.overlap_dp and chunk in last_backward:
                    b_start, b_dur = last_backward[chunk]
                    ready = b_start + (k + 1) / self.buckets * b_dur
                if self.full and self.placement.dp > 1:
                    gather = self._gather((*self._group_key("dp", me), dp_seq), self.placement.dp).arrive(ready)
                    waited = env.now
                    yield gather
                    parts["dp"] += env.now - waited
                    ready = gather.value
                dp_seq += 1
                begin = max(ready, dp_free)
                dp_free = begin + seconds
                self.rows.append((me, stages.stage(pp_rank, chunk), chunk, a.bucket, "DP_REDUCE", "dp",
                                  begin, dp_free, nbytes, -1))
            elif a.kind is Kind.OPT_STEP:
                if dp_free > env.now:
                    self.dp_tail[me] += dp_free - env.now
                    parts["dp"] += dp_free - env.now
                    yield env.timeout(dp_free - env.now)
                begin = env.now
                yield env.timeout(self.costs.optimizer(pp_rank, stages) * self.slowdown[me])
                parts["optimizer"] += env.now - begin
                self.busy[me] += env.now - begin
                self.rows.append((me, stages.stage(pp_rank, 0), -1, -1, "OPT_STEP", "compute", begin, env.now, 0, -1))
            elif a.kind is Kind.PARAM_GATHER:
                chunk = a.chunk
                seconds, nbytes = self._dp_cost("gather", pp_rank, chunk)
                begin = max(env.now, dp_free, gather_free)
                gather_free = begin + seconds
                if not self.overlap_param_gather:  # the step ends when the parameters are back
                    dp_free = gather_free
                dp_end = gather_free
                self.rows.append((me, stages.stage(pp_rank, chunk), chunk, a.bucket, "PARAM_GATHER", "dp",
                                  begin, dp_end, nbytes, -1))
        if dp_free > env.now:
            self.dp_tail[me] += dp_free - env.now
            parts["dp"] += dp_free - env.now
            yield env.timeout(dp_free - env.now)
        self.finish[me] = env.now

    def _dp_cost(self, what: str, pp_rank: int, chunk: int) -> tuple[float, float]:
        key = (what, pp_rank, chunk)
        if key not in self._bucket_cost:
            fn = self.costs.dp_bucket if what == "reduce" else self.costs.param_gather
            self._bucket_cost[key] = fn(pp_rank, chunk, self.schedule.stages, self.buckets)
        return self._bucket_cost[key]

    def _input_key(self, pipe_id, pp_rank: int, a: Action, stage: int):
        stages = self.schedule.stages
        if a.kind is BW:
            return (pipe_id, stage, BI, a.mb, "local")
        if a.kind is F:
            if stage == 0:
                return None
            src_stage, family = stage - 1, F
        else:
            if stage == stages.num_stages - 1:
                return None
            src_stage, family = stage + 1, BI
        local = stages.locate(src_stage)[0] == pp_rank
        return (pipe_id, src_stage, family, a.mb, "local" if local else "remote")

    def _transfer(self, pipe_id, pipe_ranks: list[int], pp_rank: int, a: Action):
        env, stages = self.env, self.schedule.stages
        stage = stages.stage(pp_rank, a.chunk)
        forward = a.kind is Kind.SEND_F
        consumer = stage + 1 if forward else stage - 1
        channel_key = (pipe_id, pp_rank, a.peer, forward)
        if channel_key not in self.channels:
            self.channels[channel_key] = simpy.Resource(env, capacity=1)
        issued = env.now  # the producing compute just ended
        with self.channels[channel_key].request() as slot:
            yield slot
            begin = env.now
            yield env.timeout(self.costs.p2p(pp_rank, a.peer))
        src, dst = pipe_ranks[pp_rank], pipe_ranks[a.peer]
        nbytes = self.costs.p2p_bytes
        self.rows.append((src, stage, a.chunk, a.mb, a.kind.value, "pp", begin, env.now, nbytes, dst))
        recv = "RECV_F" if forward else "RECV_B"
        peer_chunk = stages.locate(consumer)[1]
        self.rows.append((dst, consumer, peer_chunk, a.mb, recv, "pp", begin, env.now, nbytes, src))
        self._arrival((pipe_id, stage, F if forward else BI, a.mb, "remote")).succeed(issued)
