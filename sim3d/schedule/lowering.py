"""Pure lowering passes: a compute-only `Schedule` becomes the form the engine and the
executor both run, with point-to-point and data-parallel actions in place.

`add_p2p` uses the rule of PyTorch's pipelining runtime (shared/reference/schedules.md
section 1.5): ranks are visited round-robin; a compute action is placed once its input is
local, and when its output must cross ranks the SEND is appended here and the matching RECV
is appended to the peer at the same moment. Receives are therefore posted early and in the
same order as the sends on every channel, which is what NCCL and gloo need.
"""

from __future__ import annotations

from .dependencies import RECV_OF, SEND_OF, family, input_of, output_to
from .ir import Action, Kind, Schedule

F, B, BI, BW = Kind.F, Kind.B, Kind.BI, Kind.BW


class MalformedSchedule(ValueError):
    pass


def add_p2p(schedule: Schedule) -> Schedule:
    if schedule.lowered:
        raise MalformedSchedule("schedule is already lowered")
    stages, pp = schedule.stages, schedule.pp
    todo = [list(actions) for actions in schedule.ranks]
    head = [0] * pp
    left = sum(len(actions) for actions in todo)
    out: list[list[Action]] = [[] for _ in range(pp)]
    produced: set[tuple[int, Kind, int]] = set()  # (stage, kind family, mb) placed so far
    posted: set[tuple[int, Kind, int]] = set()  # receives posted: (stage, RECV kind, mb)
    # What an action waits for and sends depends on its rank, kind and chunk, not on its
    # micro-batch: worked out once per (rank, kind, chunk), not for each of thousands of actions.
    edges: dict[tuple[int, Kind, int], tuple] = {}

    def edges_of(rank: int, a: Action) -> tuple:
        key = (rank, a.kind, a.chunk)
        if key not in edges:
            stage = schedule.stage_of(rank, a)
            src = input_of(stages, rank, a)
            if src is None:
                needs = None  # its input is on the stage already
            elif src.rank == rank:  # V turnaround: producer on this rank
                needs = (produced, src.stage, src.family)
            else:
                needs = (posted, stage, RECV_OF[a.kind])
            dst = output_to(stages, rank, a)
            sends = None if dst is None or dst.rank == rank else (SEND_OF[a.kind], RECV_OF[a.kind], dst)
            edges[key] = (needs, stage, family(a.kind), sends)
        return edges[key]

    while left:
        progress = False
        for rank in range(pp):
            if head[rank] >= len(todo[rank]):
                continue
            a = todo[rank][head[rank]]
            needs, stage, produces, sends = edges_of(rank, a)
            if needs is not None and (needs[1], needs[2], a.mb) not in needs[0]:
                continue
            head[rank] += 1
            left -= 1
            progress = True
            out[rank].append(a)
            produced.add((stage, produces, a.mb))
            if sends is None:
                continue
            send, recv, dst = sends
            out[rank].append(Action(send, a.mb, a.chunk, dst.rank))
            out[dst.rank].append(Action(recv, a.mb, dst.chunk, rank))
            posted.add((dst.stage, recv, a.mb))
        if not progress:
            stuck = [f"rank {r}: {todo[r][head[r]]}" for r in range(pp) if head[r] < len(todo[r])]
            raise MalformedSchedule("no rank can make progress (cyclic wait): " + "; ".join(stuck))
    return schedule.with_ranks(out, lowered=True)


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
        lowered: list[Action] = []
        ready: list[Action] = []  # reductions waiting for the SEND that follows their backward
        for a in actions:
            if ready and a.kind is not Kind.SEND_B:
                lowered += ready
                ready = []
            lowered.append(a)
            if a.kind is B or a.kind is BW:  # a micro-batch's weight gradients are complete
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


