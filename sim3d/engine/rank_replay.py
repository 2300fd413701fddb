"""One simulated rank: its lowered actions carried out on the shared simpy environment.

Each method returns what the rank's process yields from (simpy events, or nothing), so the
walk in `run` stays one line per action. Shared state (arrivals, channels, rendezvous, the
trace) lives on the `Engine`; what belongs to this rank alone (its streams' clocks and where
its time went) lives here.
"""

from __future__ import annotations

from collections import defaultdict

from simpy import Resource

from ..cluster.placement import GRADIENT_AXIS
from ..schedule.dependencies import family, input_of, output_to
from ..schedule.interpreter import Interpreter
from ..schedule.ir import Action, Kind

NOTHING = ()  # what a method that takes no simulated time yields from
COMPUTE_KINDS = frozenset({Kind.F, Kind.B, Kind.BI, Kind.BW})


def action_plan(stages, pp_rank: int, actions: list[Action]) -> dict[tuple, tuple]:
    """What each (chunk, kind) of a pipeline rank needs that neither the clock nor the
    micro-batch changes. A compute: (stage, the arrival it waits on or None, kind, the family
    of what it produces where its consumer is on this rank or None, whether it ends a
    backward), the arrivals without their pipeline and micro-batch; a send: (stage, kind, its consumer, the matching receive's kind); a receive:
    its stage. Derived once per pipeline rank and (chunk, kind), not once per action of every
    simulated rank."""
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
        self.engine, self.env, self.costs = engine, engine.env, engine.costs
        self.stages = engine.schedule.stages
        self.actions = engine.schedule.ranks[pp_rank]
        self.pp_rank, self.pipe_ranks = pp_rank, pipe_ranks
        self.me = pipe_ranks[pp_rank]
        self.pipe_id = tuple(sorted(pipe.items()))
        self.parts = engine.parts[self.me]
        self.last_backward: dict[int, tuple[float, float]] = {}  # chunk -> (start, duration)
        self.dp_free = self.gather_free = 0.0  # when the data-parallel stream is free again
        self.dp_seq = 0  # data-parallel collectives issued (rendezvous name at full fidelity)
        self.index = 0
        self.tp_peers = engine.tp_replayed(self.me) if engine.full else 1
        self.tp_key = engine.group_key("tp", self.me) if self.tp_peers > 1 else None
        self.dp_stand_ins = engine.dp_stand_ins.get(self.me, ())
        if pp_rank not in engine.action_plans:  # the same for this pipeline rank of every pipeline
            engine.action_plans[pp_rank] = action_plan(self.stages, pp_rank, self.actions)
        self.plan = engine.action_plans[pp_rank]
        self.cost_views: dict[tuple, tuple] = {}  # (stage, kind) -> _cost
        self.transfer_s: dict[int, float] = {}  # peer's pipeline rank -> seconds of a message
        self.computed: dict[tuple, int] = defaultdict(int)  # (stage, kind) -> computes done
        self.bucket_ready: dict[int, list[Action]] = {}
        if engine.network is not None:
            self._flow_streams()

    def _flow_streams(self) -> None:
        """On the flow network the data-parallel stream is a process of its own (a bucket's
        collective lasts until its flows arrive). With overlapped reduction a bucket is handed
        to it while the chunk's last backward runs, at the moment its gradients are ready:
        `bucket_ready` maps that backward's index to its chunk's DP_REDUCE actions."""
        self.dp_stream = Resource(self.env, capacity=1)
        self.reductions: list = []
        self.param_gathers: list = []
        self.handed_early: set[int] = set()
        if not self.engine.overlap_dp:
            return
        last_backward: dict[int, int] = {}
        for i, a in enumerate(self.actions):
            if a.kind in (Kind.B, Kind.BW):
                last_backward[a.chunk] = i
            elif a.kind is Kind.DP_REDUCE and a.chunk in last_backward:
                self.bucket_ready.setdefault(last_backward[a.chunk], []).append(a)
        self.handed_early = {id(a) for bucket in self.bucket_ready.values() for a in bucket}

    def run(self):
        """The rank's simpy process."""
        methods = self._methods
        for self.index, action in enumerate(self.actions):
            yield from methods[action.kind](action)
        env = self.env
        if self.engine.network is not None:
            yield from self._await_dp(self.reductions + ([] if self.engine.overlap_param_gather else self.param_gathers))
        if self.dp_free > env.now:
            self._dp_wait(self.dp_free - env.now)
            yield env.timeout(self.dp_free - env.now)
        self._account_computes()
        self.engine.finish[self.me] = env.now

    def _dp_wait(self, seconds: float) -> None:
        self.engine.dp_tail[self.me] += seconds
        self.parts["dp"] += seconds

    # ---- compute ---------------------------------------------------------------------------
    def compute(self, a: Action):
        env, engine = self.env, self.engine
        stage, waits_on, kind, produces, backward = self.plan[a.chunk, a.kind]
        if waits_on is not None:
            event = engine.arrival((self.pipe_id, waits_on[0], waits_on[1], a.mb, waits_on[2]))
            if not event.triggered:
                engine.waiting[self.me] = (self.index, a)  # named in a deadlock's message
                ready_at = env.now
                yield event
                # only the transfer is communication; waiting for the producer is bubble
                transfer = max(0.0, env.now - max(ready_at, event.value))
                self.parts["pipeline_p2p"] += transfer
                self.parts["pipeline_wait"] += env.now - ready_at - transfer
        view = self.cost_views.get((stage, kind)) or self._cost(stage, kind)
        seconds, comm_rows, all_to_alls = view[0], view[3], view[5]
        begin = env.now
        if self.bucket_ready and self.index in self.bucket_ready:
            for bucket in self.bucket_ready[self.index]:
                k = bucket.bucket - bucket.chunk * engine.buckets
                self._start_dp("reduce", bucket, begin + (k + 1) / engine.buckets * seconds)
        self.computed[stage, kind] += 1
        yield env.timeout(seconds - all_to_alls)
        if all_to_alls:  # on the flow network: as long as their flow takes
            issued = env.now
            yield from self._all_to_alls(stage, kind)
            took = env.now - issued
            comm_rows = tuple((*row[:2], took, row[3]) if row[1] == "ep" else row for row in comm_rows)
            self.parts["ep"] += took - all_to_alls
            engine.tp_busy[self.me] += took - all_to_alls
        if self.tp_key is not None:
            computed = env.now
            yield engine.gather((*self.tp_key, self.index), self.tp_peers).arrive(env.now)
            self.parts["tp_sync"] += env.now - computed
        now = env.now
        me = self.me
        engine.busy[me] += now - begin
        rows = engine.rows
        rows.append((me, stage, a.chunk, a.mb, kind, "compute", begin, now, 0, -1))
        for comm_kind, stream, comm_s, nbytes in comm_rows:
            rows.append((me, stage, a.chunk, a.mb, comm_kind, stream, now - comm_s, now, nbytes, -1))
        if backward:
            self.last_backward[a.chunk] = (begin, now - begin)
        if produces is not None:  # a consumer on this rank (V turnaround) finds the output here
            engine.arrival((self.pipe_id, stage, produces, a.mb, "local")).succeed(now)

    def _account_computes(self) -> None:
        """Where the computes' time went, added once per (stage, kind) at the end of the walk
        (their parts are the same every time; stretched all-to-alls were added as they ran)."""
        parts = self.parts
        for stage_kind, times in self.computed.items():
            seconds, recompute, exposed, _rows, tp_ep, _flowing = self.cost_views[stage_kind]
            parts["compute"] += times * (seconds - recompute - sum(exposed.values()))
            parts["recompute"] += times * recompute
            for stream, exposed_s in exposed.items():
                parts[stream] += times * exposed_s
            self.engine.tp_busy[self.me] += times * tp_ep

    def _all_to_alls(self, stage: int, kind: str):
        """A compute action's expert-parallel all-to-alls as one flow; at full fidelity it
        starts once every member of the group has reached it."""
        engine, key = self.engine, None
        if engine.full:
            key = (*engine.group_key("ep", self.me), self.index)
            yield engine.gather(key, len(engine.placement.group("ep", self.me))).arrive(self.env.now)
        yield engine.collective(key, lambda: self.costs.ep_flows(self.me, stage, kind))

    def _cost(self, stage: int, kind: str) -> tuple:
        """(seconds, recompute, exposed per stream, trace rows of its collectives, TP+EP busy
        seconds, the all-to-alls that run as flows) of a compute on this rank, derived once per
        (stage, kind) and rank."""
        key = (self.me, stage, kind)
        view = self.engine.cost_views.get(key)
        if view is None:
            cost = self.costs.compute(self.me, stage, kind)
            comm_rows = tuple((f"{stream.upper()}_COMM", stream, seconds, round(cost.wire.get(stream, 0.0)))
                              for stream, seconds in cost.comm.items() if seconds)
            flowing = cost.exposed.get("ep", 0.0) if self.engine.network is not None else 0.0
            view = self.engine.cost_views[key] = (cost.seconds, cost.recompute, cost.exposed, comm_rows,
                                                  sum(cost.comm.get(k, 0.0) for k in ("tp", "ep")), flowing)
        self.cost_views[stage, kind] = view
        return view

    forward = backward = backward_input = backward_weight = compute

    # ---- pipeline ----------------------------------------------------------------------------
    def send(self, a: Action):
        route = self.plan[a.chunk, a.kind]
        if self.engine.network is None:
            delivered = self._priced_transfer(a, route)
        else:
            delivered = self.env.process(self._transfer(a, route))
        if self.engine.overlap_p2p:
            return NOTHING
        return self._blocking(delivered)

    def _blocking(self, delivered):
        """A send that holds the compute stream until delivered (`overlap_p2p: false`)."""
        begin = self.env.now
        yield delivered
        self.parts["pipeline_p2p"] += self.env.now - begin

    def _priced_transfer(self, a: Action, route: tuple):
        """A transfer of known duration, without a process: its channel (messages go one at a
        time, in order, as in NCCL and gloo) is a free-at time, and one timeout delivers it."""
        env, channel_free = self.env, self.engine.channel_free
        key = (self.pipe_id, self.pp_rank, a.peer, a.kind is Kind.SEND_F)
        issued = env.now  # the producing compute just ended
        begin = max(issued, channel_free.get(key, 0.0))
        seconds = self.transfer_s.get(a.peer)
        if seconds is None:
            seconds = self.transfer_s[a.peer] = self.costs.transfer(self.me, self.pipe_ranks[a.peer])
        end = channel_free[key] = begin + seconds
        delivery = env.timeout(end - issued, (a, route, begin, issued))
        delivery.callbacks.append(self._on_delivery)
        return delivery

    def _on_delivery(self, delivery) -> None:
        self._delivered(*delivery.value)

    def recv(self, a: Action):
        """A post: it costs nothing; its trace row waits for the message (sim3d.trace)."""
        key = (self.pipe_id, self.plan[a.chunk, a.kind], a.mb, a.kind)
        row = self.engine.delivered.pop(key, None)
        if row is None:
            self.engine.posted[key] = self.env.now
        else:  # the message came before the post
            self.engine.rows.append(row[:6] + (self.env.now, self.env.now) + row[8:])
        return NOTHING

    def _transfer(self, a: Action, route: tuple):
        """A transfer on the flow network: its duration is known only when its flow arrives."""
        env, engine = self.env, self.engine
        issued = env.now  # the producing compute just ended
        with engine.channel((self.pipe_id, self.pp_rank, a.peer, a.kind is Kind.SEND_F)).request() as slot:
            yield slot
            begin = env.now
            yield engine.network.transfer(self.costs.transfer_flows(self.me, self.pipe_ranks[a.peer]))
        self._delivered(a, route, begin, issued)

    def _delivered(self, a: Action, route: tuple, begin: float, issued: float) -> None:
        """The message is in: its SEND row, its RECV row (or the note for the receiver's post),
        and the arrival its consumer waits on."""
        env, engine = self.env, self.engine
        stage, kind, consumer, recv = route
        src, dst = self.me, self.pipe_ranks[a.peer]
        nbytes = engine.p2p_bytes
        now = env.now
        engine.rows.append((src, stage, a.chunk, a.mb, kind, "pp", begin, now, nbytes, dst))
        row = (dst, consumer.stage, consumer.chunk, a.mb, recv.value, "pp", begin, now, nbytes, src)
        key = (self.pipe_id, consumer.stage, a.mb, recv)
        post = engine.posted.pop(key, None)
        if post is None:  # not posted yet: the receiver's RECV writes the row
            engine.delivered[key] = row
        else:
            engine.rows.append(row[:6] + (max(post, begin), now) + row[8:])
        engine.arrival((self.pipe_id, stage, consumer.family, a.mb, "remote")).succeed(issued)

    # ---- data parallel and optimizer -----------------------------------------------------------
    def reduce_gradients(self, a: Action):
        env, engine = self.env, self.engine
        if engine.network is not None:
            if id(a) not in self.handed_early:
                self._start_dp("reduce", a, env.now)
            return
        chunk, buckets = a.chunk, engine.buckets
        k = a.bucket - chunk * buckets  # the k-th bucket of its chunk
        seconds, nbytes = engine.dp_cost("reduce", self.me, self.stages.stage(self.pp_rank, chunk))
        ready = env.now
        if engine.overlap_dp and chunk in self.last_backward:
            b_start, b_dur = self.last_backward[chunk]
            ready = b_start + (k + 1) / buckets * b_dur
        members = engine.placement.gradient_group_size
        if engine.full and members > 1:
            gather = engine.gather((*engine.group_key(GRADIENT_AXIS, self.me), self.dp_seq), members).arrive(ready)
            for leader, count in self.dp_stand_ins:  # for the ranks this one stands for
                engine.gather((GRADIENT_AXIS, leader, self.dp_seq), members).arrive(ready, count)
            waited = env.now
            yield gather
            self.parts["dp"] += env.now - waited
            ready = gather.value
        self.dp_seq += 1
        begin = max(ready, self.dp_free)
        self.dp_free = begin + seconds
        engine.rows.append((self.me, self.stages.stage(self.pp_rank, chunk), chunk, a.bucket, "DP_REDUCE", "dp",
                            begin, self.dp_free, round(nbytes), -1))

    def optimizer_step(self, a: Action):
        env, engine = self.env, self.engine
        if engine.network is not None:
            yield from self._await_dp(self.reductions)
        if self.dp_free > env.now:  # the optimizer needs every reduced gradient
            self._dp_wait(self.dp_free - env.now)
            yield env.timeout(self.dp_free - env.now)
        begin = env.now
        held = tuple(self.stages.stage(self.pp_rank, chunk) for chunk in range(self.stages.vpp))
        yield env.timeout(self.costs.optimizer(self.me, held))
        self.parts["optimizer"] += env.now - begin
        engine.busy[self.me] += env.now - begin
        engine.rows.append((self.me, self.stages.stage(self.pp_rank, 0), -1, -1, "OPT_STEP", "compute",
                            begin, env.now, 0, -1))

    def gather_parameters(self, a: Action):
        engine = self.engine
        if engine.network is not None:
            self._start_dp("gather", a, self.env.now)
            return NOTHING
        seconds, nbytes = engine.dp_cost("gather", self.me, self.stages.stage(self.pp_rank, a.chunk))
        begin = max(self.env.now, self.dp_free, self.gather_free)
        self.gather_free = begin + seconds
        if not engine.overlap_param_gather:  # the step ends when the parameters are back
            self.dp_free = self.gather_free
        engine.rows.append((self.me, self.stages.stage(self.pp_rank, a.chunk), a.chunk, a.bucket, "PARAM_GATHER",
                            "dp", begin, self.gather_free, round(nbytes), -1))
        return NOTHING

    # ---- data parallel on the flow network ------------------------------------------------------
    def _start_dp(self, what: str, a: Action, ready: float) -> None:
        process = self.env.process(self._dp_collective(what, a, ready))
        (self.reductions if what == "reduce" else self.param_gathers).append(process)

    def _dp_collective(self, what: str, a: Action, ready: float):
        """One bucket on the rank's data-parallel stream: queued in the order buckets become
        ready, started once every member of the group has it (full fidelity), over when its
        flows arrive."""
        env, engine = self.env, self.engine
        if ready > env.now:
            yield env.timeout(ready - env.now)
        stage = self.stages.stage(self.pp_rank, a.chunk)
        with self.dp_stream.request() as slot:
            yield slot
            begin = None
            for axis, expert in self.costs.gradient_axes:  # dense, then experts, each over its group
                key = None
                members = engine.placement.group_size(axis) if engine.full else 1
                if members > 1:
                    key = (*engine.group_key(axis, self.me), self.dp_seq)  # no TP twins on flows
                    yield engine.gather(key, members).arrive(env.now)
                begin = env.now if begin is None else begin
                yield engine.collective(key, lambda expert=expert: self.costs.dp_flows(
                    what, self.me, stage, engine.buckets, expert))
            self.dp_seq += 1
        nbytes = engine.dp_cost(what, self.me, stage)[1]
        kind = "DP_REDUCE" if what == "reduce" else "PARAM_GATHER"
        engine.rows.append((self.me, stage, a.chunk, a.bucket, kind, "dp", begin, env.now, round(nbytes), -1))

    def _await_dp(self, processes):
        """Wait (as data-parallel time) until these buckets' collectives are over."""
        pending = [p for p in processes if not p.triggered]
        if pending:
            begin = self.env.now
            yield self.env.all_of(pending)
            self._dp_wait(self.env.now - begin)
