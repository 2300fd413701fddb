"""Pure lowering passes: a compute-only `Schedule` becomes the form the engine and the
executor both run, with point-to-point and data-parallel actions in place.

`add_p2p` uses the rule of PyTorch's pipelining runtime (shared/reference/schedules.md
section 1.5): ranks are visited round-robin; a compute action is placed once its input is
local, and when its output must cross ranks the SEND is appended here and the matching RECV
is appended to the peer at the same moment. Receives are therefore posted early and in the
same order as the sends on every channel, which is what NCCL and gloo need.
"""

from __future__ import annotations

from .ir import Action, Kind, Schedule

F, B, BI, BW = Kind.F, Kind.B, Kind.BI, Kind.BW


class MalformedSchedule(ValueError):
    pass


def data_source(schedule: Schedule, rank: int, action: Action) -> tuple[int, int, Kind] | None:
    """(rank, chunk, kind) of the compute whose output `action` consumes, or None for the
    first stage's forward and the last stage's first backward (they consume local data).
    A BW consumes its own BI, which is always local."""
    stages, stage = schedule.stages, schedule.stage_of(rank, action)
    if action.kind is F:
        return None if stage == 0 else (*stages.locate(stage - 1), F)
    if action.kind in (B, BI):
        return None if stage == stages.num_stages - 1 else (*stages.locate(stage + 1), action.kind)
    return None


def add_p2p(schedule: Schedule) -> Schedule:
    if schedule.lowered:
        raise MalformedSchedule("schedule is already lowered")
    stages, pp = schedule.stages, schedule.pp
    todo = [list(actions) for actions in schedule.ranks]
    head = [0] * pp
    out: list[list[Action]] = [[] for _ in range(pp)]
    produced: set[tuple[int, Kind, int]] = set()  # (stage, kind family, mb) placed so far
    posted: set[tuple[int, Kind, int]] = set()  # receives posted: (stage, RECV kind, mb)

    def ready(rank: int, a: Action) -> bool:
        if a.kind is BW:
            return True
        src = data_source(schedule, rank, a)
        if src is None:
            return True
        stage = schedule.stage_of(rank, a)
        src_rank = src[0]
        prev_stage = stage - 1 if a.kind is F else stage + 1
        if src_rank == rank:  # V turnaround: producer on this rank
            return (prev_stage, _family(a.kind), a.mb) in produced
        recv = Kind.RECV_F if a.kind is F else Kind.RECV_B
        return (stage, recv, a.mb) in posted

    while any(head[r] < len(todo[r]) for r in range(pp)):
        progress = False
        for rank in range(pp):
            if head[rank] >= len(todo[rank]):
                continue
            a = todo[rank][head[rank]]
            if not ready(rank, a):
                continue
            head[rank] += 1
            progress = True
            out[rank].append(a)
            stage = schedule.stage_of(rank, a)
            produced.add((stage, _family(a.kind), a.mb))
            if a.kind is BW:
                continue
            consumer = stage + 1 if a.kind is F else stage - 1
            if not 0 <= consumer < stages.num_stages:
                continue
            peer, peer_chunk = stages.locate(consumer)
            if peer == rank:
                continue
            send, recv = (Kind.SEND_F, Kind.RECV_F) if a.kind is F else (Kind.SEND_B, Kind.RECV_B)
            out[rank].append(Action(send, a.mb, a.chunk, peer))
            out[peer].append(Action(recv, a.mb, peer_chunk, rank))
            posted.add((consumer, recv, a.mb))
        if not progress:
            stuck = [f"rank {r}: {todo[r][head[r]]}" for r in range(pp) if head[r] < len(todo[r])]
            raise MalformedSchedule("no rank can make progress (cyclic wait): " + "; ".join(stuck))
    return schedule.with_ranks(out, lowered=True)


def _family(kind: Kind) -> Kind:
    """B and BI both produce the input gradient the previous stage waits for."""
    return BI if kind in (B, BI) else kind


def add_dp(schedule: Schedule, buckets_per_chunk: int = 1, param_gather: bool = False) -> Schedule:
    """Append the data-parallel actions: the gradient buckets of a chunk are reduced right
    after that chunk's last backward (so they overlap with the rest of the step, as
    Megatron's overlap_grad_reduce does), then OPT_STEP, then, with the distributed
    optimizer, the parameter all-gather of every bucket."""
    if buckets_per_chunk < 1:
        raise ValueError(f"buckets_per_chunk must be >= 1, got {buckets_per_chunk}")
    m = schedule.num_microbatches
    out = []
    for actions in schedule.ranks:
        seen = {c: 0 for c in range(schedule.vpp)}
        done_kind = BW if any(a.kind is BW for a in actions) else B
        lowered: list[Action] = []
        ready: list[Action] = []  # reductions waiting for the SEND that follows their backward
        for a in actions:
            if ready and a.kind is not Kind.SEND_B:
                lowered += ready
                ready = []
            lowered.append(a)
            if a.kind is done_kind:
                seen[a.chunk] += 1
                if seen[a.chunk] == m:
                    first = a.chunk * buckets_per_chunk
                    ready = [Action(Kind.DP_REDUCE, chunk=a.chunk, bucket=b)
                             for b in range(first, first + buckets_per_chunk)]
        lowered += ready + [Action(Kind.OPT_STEP)]
        if param_gather:
            lowered += [Action(Kind.PARAM_GATHER, chunk=b // buckets_per_chunk, bucket=b)
                        for b in range(schedule.vpp * buckets_per_chunk)]
        out.append(lowered)
    return schedule.with_ranks(out)


def lower(schedule: Schedule, buckets_per_chunk: int = 1, param_gather: bool = False) -> Schedule:
    return add_dp(add_p2p(schedule), buckets_per_chunk, param_gather)


