"""Prove a schedule right without running it.

Checks: every (stage, micro-batch) has one forward and one backward (B, or BI then BW), in
that order on its rank; on every (src, dst, direction) channel the k-th SEND matches the k-th
RECV and precedes nothing it depends on; the cross-rank dependency graph is acyclic (else the
cycle is named). Reports the peak number of in-flight micro-batch activations per rank,
which the memory model multiplies by the per-chunk activation size.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .dependencies import RECV_OF, family, input_of, peak_inflight
from .ir import P2P, Action, Kind, Schedule

if TYPE_CHECKING:
    import networkx as nx

F, B, BI, BW = Kind.F, Kind.B, Kind.BI, Kind.BW
SENDS = frozenset({Kind.SEND_F, Kind.SEND_B})


class ScheduleError(ValueError):
    """The schedule is wrong; the message names the rank and the action."""


@dataclass(frozen=True)
class ScheduleReport:
    peak_inflight: tuple[int, ...]  # chunk-activations held at once, freed at B / BW
    num_actions: int



def _compute_order_errors(schedule: Schedule) -> list[str]:
    errors = []
    m, stages = schedule.num_microbatches, schedule.stages
    for rank, actions in enumerate(schedule.ranks):
        seen: dict[tuple[Kind, int, int], int] = {}
        for index, a in enumerate(actions):
            if not a.is_compute:
                continue
            where = f"rank {rank} action {index} ({a})"
            if a.chunk >= schedule.vpp or a.mb is None or not 0 <= a.mb < m:
                errors.append(f"{where}: micro-batch or chunk out of range (m={m}, vpp={schedule.vpp})")
                continue
            key = (a.kind, a.chunk, a.mb)
            if key in seen:
                errors.append(f"{where}: duplicate of action {seen[key]}")
            seen[key] = index
            if a.kind in (B, BI) and (F, a.chunk, a.mb) not in seen:
                errors.append(f"{where}: backward before its forward F{a.mb}" + (f".{a.chunk}" if a.chunk else ""))
            if a.kind is BW and (BI, a.chunk, a.mb) not in seen:
                errors.append(f"{where}: weight-gradient BW before its input-gradient BI")
        for chunk in range(schedule.vpp):
            stage = stages.stage(rank, chunk)
            for mb in range(m):
                has = {k for k in (F, B, BI, BW) if (k, chunk, mb) in seen}
                if F not in has:
                    errors.append(f"rank {rank}: stage {stage} never runs F{mb}" + (f".{chunk}" if chunk else ""))
                if not ({B} <= has or {BI, BW} <= has) or (B in has and (has & {BI, BW})):
                    errors.append(f"rank {rank}: stage {stage} micro-batch {mb} needs one B or a BI+BW pair, has "
                                  f"{sorted(k.value for k in has - {F}) or 'none'}")
    return errors


def _p2p_errors(schedule: Schedule) -> list[str]:
    """In-order matching on every (src, dst, direction) channel, as NCCL and gloo match."""
    errors = []
    sends: dict[tuple[int, int, str], list[tuple[int, Action]]] = defaultdict(list)
    recvs: dict[tuple[int, int, str], list[tuple[int, Action]]] = defaultdict(list)
    for rank, actions in enumerate(schedule.ranks):
        for index, a in enumerate(actions):
            if a.kind not in P2P:
                continue
            if a.peer is None or not 0 <= a.peer < schedule.pp or a.peer == rank:
                errors.append(f"rank {rank} action {index} ({a}): bad peer")
                continue
            direction = a.kind.value[-1]
            if a.kind in SENDS:
                sends[(rank, a.peer, direction)].append((index, a))
            else:
                recvs[(a.peer, rank, direction)].append((index, a))
    for channel in sorted(set(sends) | set(recvs)):
        src, dst, direction = channel
        out, into = sends.get(channel, []), recvs.get(channel, [])
        for k in range(max(len(out), len(into))):
            if k >= len(into):
                errors.append(f"rank {src} action {out[k][0]} ({out[k][1]}): no matching RECV_{direction} on rank {dst}")
            elif k >= len(out):
                errors.append(f"rank {dst} action {into[k][0]} ({into[k][1]}): no matching SEND_{direction} on rank {src}")
            else:
                s, r = out[k][1], into[k][1]
                want = schedule.stages.stage(src, s.chunk) + (1 if direction == "F" else -1)
                if r.mb != s.mb or schedule.stages.stage(dst, r.chunk) != want:
                    errors.append(f"channel {src}->{dst} message {k}: rank {src} sends {s} but rank {dst} "
                                  f"posts {r} (receives match sends in order)")
    return errors


def dependency_graph(schedule: Schedule) -> tuple[nx.DiGraph, list[str]]:
    """Nodes are (rank, index). Edges: program order within a rank, and data edges from the
    producer (its SEND when lowered) to the consuming compute. A cycle is a deadlock."""
    import networkx as nx  # here, not at the top: the trace contract and the plots import this package
    edges: list[tuple[tuple[int, int], tuple[int, int]]] = []
    errors: list[str] = []
    where: dict[tuple[int, Kind, int], tuple[int, int]] = {}  # (stage, family, mb) -> node
    sent: dict[tuple[int, Kind, int], tuple[int, int]] = {}
    posted: dict[tuple[int, Kind, int], int] = {}  # (consumer stage, RECV kind, mb) -> index
    for rank, actions in enumerate(schedule.ranks):
        edges += [((rank, i), (rank, i + 1)) for i in range(len(actions) - 1)]
        for index, a in enumerate(actions):
            if a.is_compute:
                where[(schedule.stage_of(rank, a), family(a.kind), a.mb)] = (rank, index)
            elif a.kind in SENDS:
                sent[(schedule.stage_of(rank, a), F if a.kind is Kind.SEND_F else BI, a.mb)] = (rank, index)
            elif a.kind in (Kind.RECV_F, Kind.RECV_B):
                posted[(schedule.stage_of(rank, a), a.kind, a.mb)] = index
    for rank, actions in enumerate(schedule.ranks):
        for index, a in enumerate(actions):
            if not a.is_compute:
                continue
            src = input_of(schedule.stages, rank, a)
            if src is None:
                continue
            src_stage, mb = src.stage, a.mb
            if src.rank != rank and schedule.lowered:
                recv = RECV_OF[a.kind]
                at = posted.get((schedule.stage_of(rank, a), recv, mb))
                if at is None:
                    errors.append(f"rank {rank} action {index} ({a}): no {recv} posted for its input")
                elif at > index:
                    errors.append(f"rank {rank} action {index} ({a}): its {recv} is posted later, at action {at}")
                origin = sent.get((src_stage, src.family, mb))
            else:
                origin = where.get((src_stage, src.family, mb))
            if origin is None:
                errors.append(f"rank {rank} action {index} ({a}): its input from stage {src_stage} is never "
                              + ("sent" if schedule.lowered and src.rank != rank else "produced"))
                continue
            edges.append((origin, (rank, index)))
    graph = nx.DiGraph()
    graph.add_nodes_from((rank, i) for rank, actions in enumerate(schedule.ranks) for i in range(len(actions)))
    graph.add_edges_from(edges)
    return graph, errors


def prove(schedule: Schedule) -> ScheduleReport:
    """Prove `schedule` well formed and deadlock-free (ScheduleError naming each problem
    otherwise), and count what it holds in flight."""
    if len(schedule.ranks) != schedule.pp:
        raise ScheduleError(f"schedule has {len(schedule.ranks)} rank lists for pp={schedule.pp}")
    errors = _compute_order_errors(schedule)
    graph, dep_errors = dependency_graph(schedule)
    errors += dep_errors
    if schedule.lowered:
        errors += _p2p_errors(schedule)
    import networkx as nx
    if not errors and not nx.is_directed_acyclic_graph(graph):
        cycle = nx.find_cycle(graph)
        steps = [f"rank {r} #{i} {schedule.ranks[r][i]}" for (r, i), _ in cycle]
        errors.append("deadlock: cyclic wait " + " -> ".join(steps) + " -> back to the start")
    if errors:
        shown = errors[:12] + ([f"... and {len(errors) - 12} more"] if len(errors) > 12 else [])
        raise ScheduleError(f"schedule {schedule.name!r} is invalid:\n  " + "\n  ".join(shown))
    return ScheduleReport(tuple(peak_inflight(actions) for actions in schedule.ranks),
                          sum(len(r) for r in schedule.ranks))
