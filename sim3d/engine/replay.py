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
group sizes (costs/). Full fidelity simulates every GPU: TP groups synchronise at the
end of every compute action, DP groups at every bucket, and stragglers slow their own rank.
Where no network fault and no flow network tell them apart (`unfolded` is not None), what
is provably identical is replayed once: TP peers off a straggler's pipeline by TP rank 0,
and healthy pipelines whose transfers take the same times by one of them, which arrives at
each data-parallel rendezvous for every rank it stands for. The pipelines in `unfolded` (a
straggler's) are replayed rank by rank. With `ReplayOptions.flows`, transfers and
data-parallel buckets are flows on the FlowNetwork instead of fixed durations: the engine
picks the transport (transport.py) once, and the ranks never ask which it is.
"""

from __future__ import annotations

import time
from collections import defaultdict
from functools import cached_property
from dataclasses import dataclass, field

import simpy

from ..costs.interface import RankCosts
from ..schedule.ir import Kind, Schedule
from ..schedule.specs import sends_overlap
from ..trace import TraceRow
from ..util.gc_control import gc_paused
from ..cluster.placement import GRADIENT_AXIS
from ..trace import rows_to_frame
from .flow_network import NetworkStats
from .rank_replay import RankReplay, action_plan
from .replay_state import Arrivals, RankLedger, Rendezvous, TraceRecorder
from .transport import AnalyticalTransport, FlowTransport

# Where a rank's step time goes, in the order a reader thinks of it. compute: its own work
# (collectives hidden under it included); recompute: forward work redone in backward;
# tp / cp / ep: collective time on the compute stream's path; tp_sync: waiting at a TP
# rendezvous for a slower peer (full fidelity); pipeline_wait: waiting for a producing stage
# (the bubble); pipeline_p2p: waiting for the transfer itself; dp: waiting for gradient
# reductions or parameter gathers; embedding_sync: the tied word embedding's gradient
# all-reduce between the first and last stage; optimizer: the optimizer step's kernels.
BREAKDOWN_PARTS = ("compute", "recompute", "tp", "cp", "ep", "tp_sync", "pipeline_wait", "pipeline_p2p",
                   "dp", "embedding_sync", "optimizer")


class DeadlockError(RuntimeError):
    pass


@dataclass
class SimResult:
    rows: list[TraceRow]
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


@dataclass(frozen=True)
class ReplayOptions:
    """How the step overlaps its communication (Megatron's switches; defaults as in the
    scenario format; pipeline sends as the schedule allows, schedule/specs.py `sends_overlap`).
    overlap_param_gather (Megatron --overlap-param-gather): the all-gather
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
        return cls(t.overlap_grad_reduce, sends_overlap(scenario.schedule, t.overlap_p2p), t.overlap_param_gather,
                   scenario.costs.network == "flow")


class Engine:
    """Replays `schedule` with costs asked per global rank (`sim3d.costs.RankCosts`); it
    never sees the scenario."""

    def __init__(self, schedule: Schedule, costs: RankCosts, options: ReplayOptions = ReplayOptions(),
                 full_fidelity: bool = False, unfolded: frozenset[tuple[int, int]] | None = None):
        """`unfolded` (full fidelity): fold what is symmetric, replaying every rank only of the
        pipelines at these (dp, cp) coordinates. Elsewhere TP rank 0 stands for its TP group,
        and one pipeline for every healthy pipeline whose transfers take the same times: they
        do the same work at the same times, so the step is exactly the unfolded one. The
        caller unfolds the pipelines a straggler sits on, and passes None (no folding) where
        the network or its faults tell ranks apart."""
        if not schedule.lowered:
            raise ValueError("the engine replays lowered schedules: call sim3d.schedule.lower() first")
        self.schedule, self.costs = schedule, costs
        self.full = full_fidelity
        self.placement = costs.placement
        self.unfolded = unfolded if full_fidelity else None
        self.represented: dict[int, int] = {}  # rank not replayed -> the replayed rank standing for it
        # replayed rank -> (dp group leader, how many ranks it arrives for there)
        self.dp_stand_ins: dict[int, list[tuple[int, int]]] = {}
        self.env = simpy.Environment()
        self.options = options
        self.buckets = schedule.buckets_per_chunk
        self.p2p_bytes = round(costs.p2p_bytes)  # of every pipeline message
        self._action_plans: dict[int, dict] = {}  # pipeline rank -> rank_replay.action_plan
        # what the simulated ranks share, one owner each (replay_state.py, transport.py)
        self.arrivals = Arrivals(self.env)
        self.rendezvous = Rendezvous(self.env, self.placement)
        self.trace = TraceRecorder()
        self.transport = FlowTransport(self) if options.flows else AnalyticalTransport(self)
        self._ledgers: dict[int, RankLedger] = {}  # simulated rank -> its ledger, written by its RankReplay

    # ---- who is simulated -------------------------------------------------------------------
    def _pipelines(self) -> list[dict]:
        p = self.placement
        if not self.full:
            return [dict(tp=0, dp=0, cp=0)]
        if self.unfolded is None:
            return p.pipeline_coords()
        pipes = [dict(tp=t, dp=d, cp=c) for d, c in sorted(self.unfolded) for t in range(p.tp)]
        for members in self._twin_pipelines():
            d0, c0 = members[0]
            pipes.append(dict(tp=0, dp=d0, cp=c0))
            for stage in range(p.pp):
                twin = p.rank(tp=0, pp=stage, dp=d0, cp=c0)
                for d, c in members:
                    for t in range(p.tp):
                        rank = p.rank(tp=t, pp=stage, dp=d, cp=c)
                        if rank != twin:
                            self.represented[rank] = twin
        self._stand_in(pipes)
        return pipes

    def _twin_pipelines(self) -> list[list[tuple[int, int]]]:
        """The healthy pipelines ((dp, cp) off `unfolded`) grouped into twins. Without network
        faults every rank's compute, data-parallel and optimizer costs are the same (costs/), so
        what can tell two pipelines apart is the time of their transfers (a fat tree's leaf
        boundary falls between some stages of some pipelines)."""
        p = self.placement
        sends = sorted({(i, a.peer) for i, actions in enumerate(self.schedule.ranks) for a in actions
                        if a.kind in (Kind.SEND_F, Kind.SEND_B)})
        twins: dict[tuple, list[tuple[int, int]]] = {}
        for d in range(p.dp):
            for c in range(p.cp):
                if (d, c) not in self.unfolded:
                    pipe = p.pipeline(tp=0, dp=d, cp=c)
                    times = tuple(self.costs.transfer(pipe[i], pipe[j]) for i, j in sends)
                    twins.setdefault(times, []).append((d, c))
        return list(twins.values())

    def _stand_in(self, pipes: list[dict]) -> None:
        """A replayed rank arrives at the data-parallel rendezvous of every rank it stands for,
        as that rank would have, where some replayed rank waits there (elsewhere nobody does)."""
        p = self.placement
        waited = {p.group_leader(GRADIENT_AXIS, p.rank(pp=stage, **pipe)) for pipe in pipes for stage in range(p.pp)}
        arrivals: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for rank, twin in self.represented.items():
            leader = p.group_leader(GRADIENT_AXIS, rank)
            if leader in waited:
                arrivals[twin][leader] += 1
        self.dp_stand_ins = {twin: list(leaders.items()) for twin, leaders in arrivals.items()}

    def tp_replayed(self, rank: int) -> int:
        """How many members of `rank`'s TP group are replayed (1: folded into TP rank 0)."""
        if self.unfolded is None:
            return self.placement.tp
        c = self.placement.coords(rank)
        return self.placement.tp if (c["dp"], c["cp"]) in self.unfolded else 1

    @cached_property
    def pipelines(self) -> list[dict]:
        """The replayed pipelines' coordinates (decided once: it also records who stands for whom)."""
        return self._pipelines()

    @property
    def actions_replayed(self) -> int:
        """Schedule actions this replay runs: every action of each replayed pipeline's ranks."""
        return len(self.pipelines) * sum(len(actions) for actions in self.schedule.ranks)

    def run(self, progress=None, horizon: float | None = None) -> SimResult:
        """Replay the step; with `progress` and an expected end time `horizon`, report the
        fraction of simulated time done a hundred times along the way."""
        start = time.perf_counter()
        ranks, processes = [], []  # processes: one per simulated rank
        for pipe in self.pipelines:
            globals_ = self.placement.pipeline(**pipe)
            for pp_rank in range(self.schedule.pp):
                ranks.append(globals_[pp_rank])
                processes.append(self.env.process(RankReplay(self, pp_rank, globals_, pipe).run()))
        if progress and horizon:
            self.env.process(self._monitor(self.env.all_of(processes), progress, horizon))
        with gc_paused():  # millions of events and rows, no cycles worth collecting
            self.env.run()
        ledgers = [self._ledgers[r] for r in ranks]
        missing = [(r, ledger.waiting) for r, ledger in zip(ranks, ledgers) if ledger.finish is None]
        if missing:
            waiting = "; ".join(f"rank {r} at action {at[0]} ({at[1]})" if at else f"rank {r}" for r, at in missing[:8])
            raise DeadlockError(f"deadlock: the event queue is empty but {len(missing)} rank(s) still wait: "
                                f"{waiting}")
        rows = self.trace.rows
        return SimResult(rows, max(ledger.finish for ledger in ledgers),
                         {r: ledger.compute_busy for r, ledger in zip(ranks, ledgers)},
                         {r: ledger.tp_in_compute for r, ledger in zip(ranks, ledgers)},
                         {r: ledger.parts["pipeline_p2p"] for r, ledger in zip(ranks, ledgers)},
                         {r: ledger.dp_tail for r, ledger in zip(ranks, ledgers)},
                         len(rows), time.perf_counter() - start, ranks,
                         {r: dict(ledger.parts) for r, ledger in zip(ranks, ledgers)},
                         {r: ledger.finish for r, ledger in zip(ranks, ledgers)}, self.transport.stats,
                         dict(self.represented))

    def _monitor(self, all_done: simpy.Event, progress, horizon: float):
        """Report progress every hundredth of the expected step; ends with the last rank
        (at most one tick later, which no rank observes)."""
        while not all_done.triggered and not self._stalled():
            yield self.env.timeout(horizon / 100)
            progress(min(self.env.now / horizon, 1.0))

    def _stalled(self) -> bool:
        """Only this monitor is left to run: the ranks still waiting are deadlocked."""
        return self.env.peek() == float("inf")

    def ledger(self, rank: int) -> RankLedger:
        """A new ledger for simulated `rank`, to be written by its RankReplay alone."""
        ledger = self._ledgers[rank] = RankLedger()
        return ledger

    def action_plan(self, pp_rank: int) -> dict:
        """rank_replay.action_plan of a pipeline rank: the same in every pipeline, so derived once."""
        if pp_rank not in self._action_plans:
            self._action_plans[pp_rank] = action_plan(self.schedule.stages, pp_rank, self.schedule.ranks[pp_rank])
        return self._action_plans[pp_rank]
