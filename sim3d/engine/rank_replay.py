"""One simulated rank: its lowered actions carried out on the shared simpy environment.

Each method returns what the rank's process yields from (simpy events, or nothing), so the
walk in `run` stays one line per action. Shared state (arrivals, channels, rendezvous, the
trace) lives on the `Engine`; what belongs to this rank alone (its streams' clocks and where
its time went) lives here.
"""

from __future__ import annotations

from ..schedule.dependencies import family, input_of, output_to
from ..schedule.interpreter import Interpreter
from ..schedule.ir import Action, Kind

NOTHING = ()  # what a method that takes no simulated time yields from


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

    def run(self):
        """The rank's simpy process."""
        for self.index, action in enumerate(self.actions):
            yield from self.dispatch(action)
        env = self.env
        if self.dp_free > env.now:
            self._dp_wait(self.dp_free - env.now)
            yield env.timeout(self.dp_free - env.now)
        self.engine.finish[self.me] = env.now

    def _dp_wait(self, seconds: float) -> None:
        self.engine.dp_tail[self.me] += seconds
        self.parts["dp"] += seconds

    # ---- compute ---------------------------------------------------------------------------
    def compute(self, a: Action):
        env, engine, parts, me = self.env, self.engine, self.parts, self.me
        stage = self.stages.stage(self.pp_rank, a.chunk)
        src = input_of(self.stages, self.pp_rank, a)
        if src is not None:
            event = engine.arrival((self.pipe_id, src.stage, src.family, a.mb,
                                    "local" if src.rank == self.pp_rank else "remote"))
            if not event.triggered:
                engine.waiting[me] = f"rank {me} at action {self.index} ({a})"
                ready_at = env.now
                yield event
                # only the transfer is communication; waiting for the producer is bubble
                transfer = max(0.0, env.now - max(ready_at, event.value))
                parts["pipeline_p2p"] += transfer
                parts["pipeline_wait"] += env.now - ready_at - transfer
        cost = self.costs.compute(me, stage, a.kind.value)
        begin = env.now
        yield env.timeout(cost.seconds)
        exposed = sum(cost.exposed.values())
        parts["compute"] += cost.seconds - cost.recompute - exposed
        parts["recompute"] += cost.recompute
        for stream, seconds in cost.exposed.items():
            parts[stream] += seconds
        if engine.full and engine.placement.tp > 1:
            computed = env.now
            yield engine.gather((*engine.group_key("tp", me), self.index), engine.placement.tp).arrive(env.now)
            parts["tp_sync"] += env.now - computed
        engine.busy[me] += env.now - begin
        engine.tp_busy[me] += sum(cost.comm.get(k, 0.0) for k in ("tp", "ep"))
        engine.rows.append((me, stage, a.chunk, a.mb, a.kind.value, "compute", begin, env.now, 0, -1))
        for stream, seconds in cost.comm.items():
            if seconds:
                engine.rows.append((me, stage, a.chunk, a.mb, f"{stream.upper()}_COMM", stream,
                                    env.now - seconds, env.now, round(cost.wire.get(stream, 0.0)), -1))
        if a.kind in (Kind.B, Kind.BW):
            self.last_backward[a.chunk] = (begin, env.now - begin)
        # a consumer on this rank (V turnaround) finds the output here
        engine.arrival((self.pipe_id, stage, family(a.kind), a.mb, "local")).succeed(env.now)

    forward = backward = backward_input = backward_weight = compute

    # ---- pipeline ----------------------------------------------------------------------------
    def send(self, a: Action):
        transfer = self.env.process(self._transfer(a))
        if self.engine.overlap_p2p:
            return NOTHING
        return self._blocking(transfer)

    def _blocking(self, transfer):
        """A send that holds the compute stream until delivered (`overlap_p2p: false`)."""
        begin = self.env.now
        yield transfer
        self.parts["pipeline_p2p"] += self.env.now - begin

    def recv(self, a: Action):
        """A post: it costs nothing; its trace row waits for the message (sim3d.trace)."""
        key = (self.pipe_id, self.stages.stage(self.pp_rank, a.chunk), a.mb, a.kind)
        row = self.engine.delivered.pop(key, None)
        if row is None:
            self.engine.posted[key] = self.env.now
        else:  # the message came before the post
            self.engine.rows.append(row[:6] + (self.env.now, self.env.now) + row[8:])
        return NOTHING

    def _transfer(self, a: Action):
        env, engine = self.env, self.engine
        stage = self.stages.stage(self.pp_rank, a.chunk)
        forward = a.kind is Kind.SEND_F
        issued = env.now  # the producing compute just ended
        with engine.channel((self.pipe_id, self.pp_rank, a.peer, forward)).request() as slot:
            yield slot
            begin = env.now
            yield env.timeout(self.costs.transfer(self.me, self.pipe_ranks[a.peer]))
        src, dst = self.me, self.pipe_ranks[a.peer]
        nbytes = round(self.costs.p2p_bytes)
        engine.rows.append((src, stage, a.chunk, a.mb, a.kind.value, "pp", begin, env.now, nbytes, dst))
        consumer = output_to(self.stages, self.pp_rank, a)
        recv = Kind.RECV_F if forward else Kind.RECV_B
        row = (dst, consumer.stage, consumer.chunk, a.mb, recv.value, "pp", begin, env.now, nbytes, src)
        key = (self.pipe_id, consumer.stage, a.mb, recv)
        post = engine.posted.pop(key, None)
        if post is None:  # not posted yet: the receiver's RECV writes the row
            engine.delivered[key] = row
        else:
            engine.rows.append(row[:6] + (max(post, begin), env.now) + row[8:])
        engine.arrival((self.pipe_id, stage, consumer.family, a.mb, "remote")).succeed(issued)

    # ---- data parallel and optimizer -----------------------------------------------------------
    def reduce_gradients(self, a: Action):
        env, engine = self.env, self.engine
        chunk, buckets = a.chunk, engine.buckets
        k = a.bucket - chunk * buckets  # the k-th bucket of its chunk
        seconds, nbytes = engine.dp_cost("reduce", self.me, self.stages.stage(self.pp_rank, chunk))
        ready = env.now
        if engine.overlap_dp and chunk in self.last_backward:
            b_start, b_dur = self.last_backward[chunk]
            ready = b_start + (k + 1) / buckets * b_dur
        if engine.full and engine.placement.dp > 1:
            gather = engine.gather((*engine.group_key("dp", self.me), self.dp_seq), engine.placement.dp).arrive(ready)
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
        seconds, nbytes = engine.dp_cost("gather", self.me, self.stages.stage(self.pp_rank, a.chunk))
        begin = max(self.env.now, self.dp_free, self.gather_free)
        self.gather_free = begin + seconds
        if not engine.overlap_param_gather:  # the step ends when the parameters are back
            self.dp_free = self.gather_free
        engine.rows.append((self.me, self.stages.stage(self.pp_rank, a.chunk), a.chunk, a.bucket, "PARAM_GATHER",
                            "dp", begin, self.gather_free, round(nbytes), -1))
        return NOTHING
