"""Replay a lowered schedule on a simpy environment, one process per simulated rank.

Each rank walks its action list in order (rank_replay.py). Compute actions occupy the rank's compute stream
(the process itself); a compute that consumes another rank's output first waits for the
message to arrive. SENDs start a transfer on the (src, dst, direction) channel, which
serialises messages in order, as NCCL and gloo do; RECVs are posts and cost nothing by
themselves (with `overlap_p2p: false` a SEND blocks the compute stream until delivered).
DP_REDUCE / PARAM_GATHER run on the rank's data-parallel stream; with
`overlap_grad_reduce` a chunk's buckets become ready one after another during its last
backward, as Megatron's bucketed hooks make them. OPT_STEP waits for every reduction.

Folded mode simulates one pipeline: data-parallel replicas and tensor-parallel peers are
symmetric, so one rank stands for its group and collectives are still costed with full
group sizes (costs/). Full fidelity simulates every pipeline: TP groups synchronise at the
end of every compute action, DP groups at every bucket, and stragglers slow their own rank;
TP peers that are twins (no straggler on their pipeline, no network fault, no flows) are
replayed once, by TP rank 0 (`unfolded_tp`). With `ReplayOptions.flows`, transfers and
data-parallel buckets are flows on the FlowNetwork instead of fixed durations.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

import simpy

from ..costs.interface import RankCosts
from ..schedule.ir import Schedule
from ..gc_paused import gc_paused
from ..trace import rows_to_frame
from .flow_network import FlowNetwork, NetworkStats
from .rank_replay import RankReplay

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
    network: NetworkStats | None = None  # how the flows fared (costs.network: flow)
    # full fidelity with tensor-parallel folding: rank not replayed -> the rank of its TP
    # group that was replayed for it (its twin: same work, same times)
    represented: dict[int, int] = field(default_factory=dict)

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
        return rows_to_frame(self.rows)

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


@dataclass(frozen=True)
class ReplayOptions:
    """How the step overlaps its communication (Megatron's switches; defaults as in the
    scenario format). overlap_param_gather (Megatron --overlap-param-gather): the all-gather
    of the updated parameters runs under the next step's forwards, bucket by bucket as they
    are needed, so this step ends with the optimizer; the gathers still occupy the
    data-parallel stream."""
    overlap_grad_reduce: bool = True
    overlap_p2p: bool = True
    overlap_param_gather: bool = False
    # costs.network: flow: pipeline transfers and data-parallel collectives are flows that
    # share the links they cross as they meet (flow_network.py), instead of fixed durations
    flows: bool = False

    @classmethod
    def of(cls, scenario) -> "ReplayOptions":
        t = scenario.training
        return cls(t.overlap_grad_reduce, t.overlap_p2p, t.overlap_param_gather, scenario.costs.network == "flow")


class Engine:
    """Replays `schedule` with costs asked per global rank (`sim3d.costs.RankCosts`); it
    never sees the scenario."""

    def __init__(self, schedule: Schedule, costs: RankCosts, options: ReplayOptions = ReplayOptions(),
                 full_fidelity: bool = False, unfolded_tp: frozenset[tuple[int, int]] | None = None):
        """`unfolded_tp` (full fidelity): fold tensor-parallel groups, replaying every TP rank
        only of the pipelines at these (dp, cp) coordinates and TP rank 0 elsewhere, standing
        for its group. Healthy TP peers do the same work at the same times, so the step is
        exactly the unfolded one; the caller unfolds the pipelines a straggler sits on, and
        passes None (no folding) where the network or its faults tell TP peers apart."""
        if not schedule.lowered:
            raise ValueError("the engine replays lowered schedules: call sim3d.schedule.lower() first")
        self.schedule, self.costs = schedule, costs
        self.full = full_fidelity
        self.placement = costs.placement
        self.unfolded_tp = unfolded_tp if full_fidelity and costs.placement.tp > 1 else None
        self.represented: dict[int, int] = {}
        self.dp_stand_ins: dict[int, list[int]] = {}  # rank -> dp group leaders it also arrives for
        self._group_keys: dict[tuple[str, int], tuple] = {}
        self.env = simpy.Environment()
        self.rows: list[tuple] = []
        self.buckets = schedule.buckets_per_chunk
        self.overlap_dp = options.overlap_grad_reduce
        self.overlap_p2p = options.overlap_p2p
        self.overlap_param_gather = options.overlap_param_gather
        self.arrivals: dict[tuple, simpy.Event] = {}
        self.compute_plans: dict[int, list] = {}  # pipeline rank -> rank_replay.compute_plan
        self.cost_views: dict[tuple, tuple] = {}  # (rank, stage, kind) -> RankReplay._cost
        self.channels: dict[tuple, simpy.Resource] = {}  # on the flow network
        self.channel_free: dict[tuple, float] = {}  # (pipeline, src, dst, direction) -> free again at
        # RECV rows: (pipeline, stage, mb, kind) -> when posted / the row of a message that came first
        self.posted: dict[tuple, float] = {}
        self.delivered: dict[tuple, tuple] = {}
        self.gathers: dict[tuple, _Gather] = {}
        self.busy = defaultdict(float)
        self.tp_busy = defaultdict(float)
        self.dp_tail = defaultdict(float)
        self.parts: dict[int, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.finish: dict[int, float] = {}
        self._bucket_cost = {}
        self.waiting: dict[int, tuple] = {}  # rank -> (action index, action) it last waited at
        self.network = FlowNetwork(self.env, costs.link_capacity) if options.flows else None
        self._collectives: dict[tuple, simpy.Event] = {}

    # ---- who is simulated -------------------------------------------------------------------
    def _pipelines(self) -> list[dict]:
        p = self.placement
        if not self.full:
            return [dict(tp=0, dp=0, cp=0)]
        if self.unfolded_tp is None:
            return [dict(tp=t, dp=d, cp=c) for d in range(p.dp) for c in range(p.cp) for t in range(p.tp)]
        pipes = []
        for d in range(p.dp):
            for c in range(p.cp):
                if (d, c) in self.unfolded_tp:
                    pipes += [dict(tp=t, dp=d, cp=c) for t in range(p.tp)]
                else:
                    pipes.append(dict(tp=0, dp=d, cp=c))
                    self._stand_in(d, c)
        return pipes

    def _stand_in(self, d: int, c: int) -> None:
        """TP rank 0 of pipeline (d, c) replays for its TP peers: it is their twin in the trace
        accounting, and it joins the data-parallel rendezvous of every peer whose group has a
        replayed member (a group along an unfolded pipeline), as the peer would have."""
        p = self.placement
        joined = any((other, c) in self.unfolded_tp for other in range(p.dp))
        for stage in range(p.pp):
            me = p.rank(tp=0, pp=stage, dp=d, cp=c)
            for t in range(1, p.tp):
                peer = p.rank(tp=t, pp=stage, dp=d, cp=c)
                self.represented[peer] = me
                if joined:
                    self.dp_stand_ins.setdefault(me, []).append(p.group_leader("dp", peer))

    def tp_replayed(self, rank: int) -> int:
        """How many members of `rank`'s TP group are replayed (1: folded into TP rank 0)."""
        if self.unfolded_tp is None:
            return self.placement.tp
        c = self.placement.coords(rank)
        return self.placement.tp if (c["dp"], c["cp"]) in self.unfolded_tp else 1

    def run(self, progress=None, horizon: float | None = None) -> SimResult:
        """Replay the step; with `progress` and an expected end time `horizon`, report the
        fraction of simulated time done a hundred times along the way."""
        start = time.perf_counter()
        ranks, processes = [], []  # processes: one per simulated rank
        for pipe in self._pipelines():
            globals_ = self.placement.pipeline(**pipe)
            for pp_rank in range(self.schedule.pp):
                ranks.append(globals_[pp_rank])
                processes.append(self.env.process(RankReplay(self, pp_rank, globals_, pipe).run()))
        if progress and horizon:
            self.env.process(self._monitor(len(processes), progress, horizon))
        with gc_paused():  # millions of events and rows, no cycles worth collecting
            self.env.run()
        missing = [r for r in ranks if r not in self.finish]
        if missing:
            waiting = "; ".join(f"rank {r} at action {self.waiting[r][0]} ({self.waiting[r][1]})" if r in self.waiting
                                else f"rank {r}" for r in missing[:8])
            raise DeadlockError(f"deadlock: the event queue is empty but {len(missing)} rank(s) still wait: "
                                f"{waiting}")
        step = max(self.finish.values())
        events = len(self.rows)
        return SimResult(self.rows, step, {r: self.busy[r] for r in ranks}, {r: self.tp_busy[r] for r in ranks},
                         {r: self.parts[r]["pipeline_p2p"] for r in ranks}, {r: self.dp_tail[r] for r in ranks},
                         events, time.perf_counter() - start, ranks, {r: dict(self.parts[r]) for r in ranks},
                         dict(self.finish), self.network.stats if self.network else None, dict(self.represented))

    def _monitor(self, ranks: int, progress, horizon: float):
        """Report progress every hundredth of the expected step; ends with the last rank
        (at most one tick later, which no rank observes)."""
        while len(self.finish) < ranks and not self._stalled():
            yield self.env.timeout(horizon / 100)
            progress(min(self.env.now / horizon, 1.0))

    def _stalled(self) -> bool:
        """Only this monitor is left to run: the ranks still waiting are deadlocked."""
        return self.env.peek() == float("inf")

    def arrival(self, key: tuple) -> simpy.Event:
        if key not in self.arrivals:
            self.arrivals[key] = self.env.event()
        return self.arrivals[key]

    def gather(self, key: tuple, size: int) -> _Gather:
        if key not in self.gathers:
            self.gathers[key] = _Gather(self.env, size)
        return self.gathers[key]

    def group_key(self, axis: str, rank: int) -> tuple:
        """(axis, first rank of the group): the rendezvous name, without listing the group
        (listing it for every rank was O(GPUs^2) at full fidelity)."""
        key = (axis, rank)
        if key not in self._group_keys:
            self._group_keys[key] = (axis, self.placement.group_leader(axis, rank))
        return self._group_keys[key]

    def collective(self, key: tuple | None, flow) -> simpy.Event:
        """The end of a group's collective on the flow network: started by the first member
        that asks (`flow()` gives its flow), shared by the rest (key None: one member asks)."""
        if key is None:
            return self.network.transfer(flow())
        if key not in self._collectives:
            self._collectives[key] = self.network.transfer(flow())
        return self._collectives[key]

    def channel(self, key: tuple) -> simpy.Resource:
        """The (pipeline, src, dst, direction) channel: its messages go one at a time, in order."""
        if key not in self.channels:
            self.channels[key] = simpy.Resource(self.env, capacity=1)
        return self.channels[key]

    def dp_cost(self, what: str, rank: int, stage: int) -> tuple[float, float]:
        """(seconds, bytes) of one bucket of a stage: "reduce" (gradients) or "gather" (parameters)."""
        key = (what, rank, stage)
        if key not in self._bucket_cost:
            fn = self.costs.dp_reduce if what == "reduce" else self.costs.param_gather
            self._bucket_cost[key] = fn(rank, stage, self.buckets)
        return self._bucket_cost[key]
