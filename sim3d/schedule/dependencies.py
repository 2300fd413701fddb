"""The dependency rules of the IR, in one place: which compute feeds which, what a backward
counts as, and how long a micro-batch's activations live.

Lowering, the proof, the reference evaluator, the memory model, the simpy engine and the
torch executor all ask here, so a new schedule family (or a new kind) changes one file.
"""

from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple

from .ir import Action, Kind, StageMap

F, B, BI, BW = Kind.F, Kind.B, Kind.BI, Kind.BW
# A micro-batch's activations on a stage live from its F to the end of its backward: a full
# B, or the BW of a split one (BI still needs them for the weight gradient). Schedules may
# mix both (DualPipeV).
FREES_ACTIVATIONS = frozenset({B, BW})
SEND_OF = {F: Kind.SEND_F, B: Kind.SEND_B, BI: Kind.SEND_B}
RECV_OF = {F: Kind.RECV_F, B: Kind.RECV_B, BI: Kind.RECV_B}


def family(kind: Kind) -> Kind:
    """What a compute produces for others: F its activation; B and BI alike the input
    gradient (called BI here); BW nothing but weight gradients (BW)."""
    return BI if kind in (B, BI) else kind


class Endpoint(NamedTuple):
    """A compute on the other side of a data edge: its global stage, the pipeline rank and
    chunk that hold that stage, and the family of what travels (F or BI)."""
    stage: int
    rank: int
    chunk: int
    family: Kind


def input_of(stages: StageMap, rank: int, action: Action) -> Endpoint | None:
    """The compute whose output `action` consumes, or None where the input is already on the
    stage: the first stage's forward reads tokens, the last stage's backward starts from
    its own loss, and BW reuses its own BI (program order, which `prove` checks, covers
    those)."""
    stage = stages.stage(rank, action.chunk)
    if action.kind is F and stage > 0:
        src = stage - 1
    elif action.kind in (B, BI) and stage < stages.num_stages - 1:
        src = stage + 1
    else:
        return None
    return Endpoint(src, *stages.locate(src), family(action.kind))


def output_to(stages: StageMap, rank: int, action: Action) -> Endpoint | None:
    """The compute that consumes what `action` (a compute, or the SEND carrying its output)
    produces, or None for the last stage's forward (the loss stays), the first stage's
    backward and every BW."""
    stage = stages.stage(rank, action.chunk)
    step = _DIRECTION.get(action.kind, 0)
    if not step or not 0 <= stage + step < stages.num_stages:
        return None
    dst = stage + step
    return Endpoint(dst, *stages.locate(dst), F if step > 0 else BI)


_DIRECTION = {F: 1, Kind.SEND_F: 1, B: -1, BI: -1, Kind.SEND_B: -1}  # where outputs travel along the stages


def activation_changes(actions: Iterable[Action]) -> Iterator[tuple[Action, int]]:
    """(action, +1) where a micro-batch's chunk activations come to life, (action, -1) where
    they are freed, in the rank's order."""
    for a in actions:
        if a.kind is F:
            yield a, 1
        elif a.kind in FREES_ACTIVATIONS:
            yield a, -1


def peak_inflight(actions: Iterable[Action]) -> int:
    """Most chunk activations one rank holds at once."""
    live = peak = 0
    for _, change in activation_changes(actions):
        live += change
        peak = max(peak, live)
    return peak
