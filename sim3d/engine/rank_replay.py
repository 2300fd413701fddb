"""One simulated rank: its lowered actions carried out on the shared simpy environment.

Each method returns what the rank's process yields from (simpy events, or nothing), so the
walk in `run` stays one line per action. What the ranks share has its own owner, handed out
by the `Engine`: the arrivals, the rendezvous and the trace (replay_state.py), and the
transport that carries messages and collectives (transport.py). What belongs to this rank
alone lives here: its compute stream's walk, its data-parallel stream (data_parallel.py)
and its ledger of where its time went.
"""

from __future__ import annotations

from collections import defaultdict

from ..schedule.dependencies import family, input_of, output_to
from ..schedule.interpreter import Interpreter
from ..schedule.ir import Action, Kind
from ..trace import TraceRow
from .data_parallel import NOTHING

_new = tuple.__new__  # builds a TraceRow without its keyword-handling constructor (sim3d.trace)
COMPUTE_KINDS = frozenset({Kind.F, Kind.B, Kind.BI, Kind.BW})


def action_plan(stages, pp_rank: int, actions: list[Action]) -> dict[tuple, tuple]:
    """What each (chunk, kind) of a pipeline rank needs that neither the clock nor the
    micro-batch changes. A compute: (stage, the arrival it waits on or None, kind, the family
    of what it produces where its consumer is on this rank or None, whether it ends a
    backward), the arrivals without their pipeline and micro-batch; a send: (stage, kind, its
    consumer, the matching receive's kind); a receive: its stage. Derived once per pipeline
    rank and (chunk, kind), not once per action of every simulated rank."""
    plan: dict[tuple, tuple] = {}
    for a in actions:
        key = (a.chunk, a.kind)
        if key in plan:
            continue
        if a.kind in (Kind.SEND_F, Kind.SEND_B):
            plan[key] = (stages.stage(pp_rank, a.chunk), a.kind.value, output_to(stages, pp_rank, a),
                         Kind.RECV_F if a.kind is Kind.SEND_F else Kind.RECV_B)
        elif a.kind in (Kind.RECV_F, Kind.RECV_B):
            plan[key] = stages.stage(pp_rank, a.chunk)
        elif a.kind in COMPUTE_KINDS:
            stage = stages.stage(pp_rank, a.chunk)
            src = input_of(stages, pp_rank, a)
            waits_on = None if src is None else (src.stage, src.family, "local" if src.rank == pp_rank else "remote")
            dst = output_to(stages, pp_rank, a)
            local_consumer = family(a.kind) if dst is not None and dst.rank == pp_rank else None
            plan[key] = (stage, waits_on, a.kind.value, local_consumer, a.kind in (Kind.B, Kind.BW))
    return plan


class RankReplay(Interpreter):
    def __init__(self, engine, pp_rank: int, pipe_ranks: list[int], pipe: dict):
        super().__init__()
        self.env, self.costs, self.transport = engine.env, engine.costs, engine.transport
        self.arrivals, self.rendezvous, self.trace = engine.arrivals, engine.rendezvous, engine.trace
        self.record = engine.trace.add
        self.stages = engine.schedule.stages
        self.actions = engine.schedule.ranks[pp_rank]
        self.pp_rank, self.pipe_ranks = pp_rank, pipe_ranks
        self.me = pipe_ranks[pp_rank]
        self.pipe_id = tuple(sorted(pipe.items()))
        self.ledger = engine.ledger(self.me)
        self.parts = self.ledger.parts
        self.overlap_p2p, self.p2p_bytes = engine.options.overlap_p2p, engine.p2p_bytes
        self.last_backward: dict[int, tuple[float, float]] = {}  # chunk -> (start, duration)
        self.index = 0
        self.tp_peers = engine.tp_replayed(self.me) if engine.full else 1
        self.tp_key = engine.rendezvous.group_key("tp", self.me) if self.tp_peers > 1 else None
        self.dp_stand_ins = engine.dp_stand_ins.get(self.me, ())
        self.plan = engine.action_plan(pp_rank)
        self.cost_views: dict[tuple, tuple] = {}  # (stage, kind) -> _cost
        self.computed: dict[tuple, int] = defaultdict(int)  # (stage, kind) -> computes done
        self.dp = engine.transport.data_parallel(self, engine)
        self.early_buckets = self.dp.early

    def run(self):
        """The rank's simpy process."""
        methods = self._methods
        for self.index, action in enumerate(self.actions):
            yield from methods[action.kind](action)
        yield from self.dp.drain(end_of_step=True)
        self._account_computes()
        self.ledger.finish = self.env.now

    # ---- compute ---------------------------------------------------------------------------
    def compute(self, a: Action):
        env = self.env
        stage, waits_on, kind, produces, backward = self.plan[a.chunk, a.kind]
        if waits_on is not None:
            event = self.arrivals.of((self.pipe_id, waits_on[0], waits_on[1], a.mb, waits_on[2]))
            if not event.triggered:
                self.ledger.waiting = (self.index, a)  # named in a deadlock's message
                ready_at = env.now
                yield event
                # only the transfer is communication; waiting for the producer is bubble
                transfer = max(0.0, env.now - max(ready_at, event.value))
                self.parts["pipeline_p2p"] += transfer
                self.parts["pipeline_wait"] += env.now - ready_at - transfer
        view = self.cost_views.get((stage, kind)) or self._cost(stage, kind)
        seconds, comm_rows, all_to_alls = view[0], view[3], view[5]
        begin = env.now
        if self.early_buckets and self.index in self.early_buckets:
            self.dp.start_early(self.index, begin, seconds)
        self.computed[stage, kind] += 1
        yield env.timeout(seconds - all_to_alls)
        if all_to_alls:  # carried apart by the transport: as long as it takes
            issued = env.now
            yield from self.transport.expert_all_to_all(self, stage, kind)
            took = env.now - issued
            comm_rows = tuple((*row[:2], took, row[3]) if row[1] == "ep" else row for row in comm_rows)
            self.parts["ep"] += took - all_to_alls
            self.ledger.tp_in_compute += took - all_to_alls
        if self.tp_key is not None:
            computed = env.now
            yield self.rendezvous.gather((*self.tp_key, self.index), self.tp_peers).arrive(env.now)
            self.parts["tp_sync"] += env.now - computed
        now = env.now
        me = self.me
        self.ledger.compute_busy += now - begin
        record = self.record
        record(_new(TraceRow, (me, stage, a.chunk, a.mb, kind, "compute", begin, now, 0, -1)))
        for comm_kind, stream, comm_s, nbytes in comm_rows:
            record(_new(TraceRow, (me, stage, a.chunk, a.mb, comm_kind, stream, now - comm_s, now, nbytes, -1)))
        if backward:
            self.last_backward[a.chunk] = (begin, now - begin)
        if produces is not None:  # a consumer on this rank (V turnaround) finds the output here
            self.arrivals.of((self.pipe_id, stage, produces, a.mb, "local")).succeed(now)

    def _account_computes(self) -> None:
        """Where the computes' time went, added once per (stage, kind) at the end of the walk
        (their parts are the same every time; stretched all-to-alls were added as they ran)."""
        parts, ledger = self.parts, self.ledger
        for stage_kind, times in self.computed.items():
            seconds, recompute, exposed, _rows, tp_ep, _apart = self.cost_views[stage_kind]
            parts["compute"] += times * (seconds - recompute - sum(exposed.values()))
            parts["recompute"] += times * recompute
            for stream, exposed_s in exposed.items():
                parts[stream] += times * exposed_s
            ledger.tp_in_compute += times * tp_ep

    def _cost(self, stage: int, kind: str) -> tuple:
        """(seconds, recompute, exposed per stream, trace rows of its collectives, TP+EP busy
        seconds, the all-to-alls the transport carries apart) of a compute on this rank,
        derived once per (stage, kind)."""
        cost = self.costs.compute(self.me, stage, kind)
        comm_rows = tuple((f"{stream.upper()}_COMM", stream, seconds, round(cost.wire.get(stream, 0.0)))
                          for stream, seconds in cost.comm.items() if seconds)
        view = self.cost_views[stage, kind] = (cost.seconds, cost.recompute, cost.exposed, comm_rows,
                                               sum(cost.comm.get(k, 0.0) for k in ("tp", "ep")),
                                               self.transport.expert_share(cost))
        return view

    forward = backward = backward_input = backward_weight = compute

    # ---- pipeline ----------------------------------------------------------------------------
    def send(self, a: Action):
        channel = (self.pipe_id, self.pp_rank, a.peer, a.kind is Kind.SEND_F)
        delivered = self.transport.message(channel, self.me, self.pipe_ranks[a.peer], self._delivered,
                                           (a, self.plan[a.chunk, a.kind], self.env.now))
        if self.overlap_p2p:
            return NOTHING
        return self._blocking(delivered)

    def _blocking(self, delivered):
        """A send that holds the compute stream until delivered (`overlap_p2p: false`)."""
        begin = self.env.now
        yield delivered
        self.parts["pipeline_p2p"] += self.env.now - begin

    def recv(self, a: Action):
        """A post: it costs nothing; its trace row waits for the message (sim3d.trace)."""
        self.trace.receive_posted((self.pipe_id, self.plan[a.chunk, a.kind], a.mb, a.kind), self.env.now)
        return NOTHING

    def _delivered(self, begin: float, context: tuple) -> None:
        """The message sent at `issued` is in: its SEND row, its RECV row (now or at the
        receiver's post), and the arrival its consumer waits on."""
        a, (stage, kind, consumer, recv), issued = context
        src, dst = self.me, self.pipe_ranks[a.peer]
        nbytes = self.p2p_bytes
        now = self.env.now
        self.record(_new(TraceRow, (src, stage, a.chunk, a.mb, kind, "pp", begin, now, nbytes, dst)))
        self.trace.message_in((self.pipe_id, consumer.stage, a.mb, recv),
                              _new(TraceRow, (dst, consumer.stage, consumer.chunk, a.mb, recv.value, "pp", begin, now,
                                              nbytes, src)))
        self.arrivals.of((self.pipe_id, stage, consumer.family, a.mb, "remote")).succeed(issued)

    # ---- data parallel and optimizer -----------------------------------------------------------
    def reduce_gradients(self, a: Action):
        return self.dp.reduce(a)

    def gather_parameters(self, a: Action):
        return self.dp.gather(a)

    def optimizer_step(self, a: Action):
        env = self.env
        yield from self.dp.drain(end_of_step=False)  # the optimizer needs every reduced gradient
        begin = env.now
        held = tuple(self.stages.stage(self.pp_rank, chunk) for chunk in range(self.stages.vpp))
        # the tied embedding's all-reduce runs first, on the same stream; it is network time,
        # so the breakdown books it apart from the optimizer's memory-bound kernels
        sync = self.costs.embedding_sync(self.me, held)
        yield env.timeout(self.costs.optimizer(self.me, held) + sync)
        self.parts["embedding_sync"] += sync
        self.parts["optimizer"] += env.now - begin - sync
        self.ledger.compute_busy += env.now - begin
        self.record(_new(TraceRow, (self.me, self.stages.stage(self.pp_rank, 0), -1, -1, "OPT_STEP", "compute",
                                    begin, env.now, 0, -1)))
