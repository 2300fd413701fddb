"""Reference evaluator: start and end time of every compute action by longest path.

Pure Python and deliberately independent of the simpy engine (which the tests compare
against it): a compute starts when the previous compute of its rank has ended and the
compute whose output it consumes has ended (plus an optional transfer delay). Communication
actions take no time here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from .dependencies import family, input_of
from .ir import Action, Kind, Schedule
from .proof import ScheduleError

Cost = Callable[[int, Action], float]


@dataclass(frozen=True)
class Timeline:
    spans: dict[tuple[int, int], tuple[float, float]]  # (rank, index) -> (start, end)
    step_time: float
    busy: tuple[float, ...]  # compute time per rank

    @property
    def bubble_fraction(self) -> float:
        """Idle time of the compute stream on the worst rank / step time (the summary's
        bubble_fraction, docs/contracts.md#summary-keys)."""
        return max(self.step_time - b for b in self.busy) / self.step_time if self.step_time else 0.0


def uniform_costs(forward: float = 1.0, backward: float = 2.0, input_grad: float | None = None,
                  weight_grad: float | None = None) -> Cost:
    bi = backward / 2 if input_grad is None else input_grad
    bw = backward - bi if weight_grad is None else weight_grad
    table = {Kind.F: forward, Kind.B: backward, Kind.BI: bi, Kind.BW: bw}
    return lambda rank, action: table[action.kind]


def evaluate(schedule: Schedule, cost: Cost, transfer: float = 0.0) -> Timeline:
    stages = schedule.stages
    done: dict[tuple[int, Kind, int], float] = {}  # (stage, kind family, mb) -> end time
    heads = [0] * schedule.pp
    clock = [0.0] * schedule.pp
    busy = [0.0] * schedule.pp
    spans: dict[tuple[int, int], tuple[float, float]] = {}
    compute = [[(i, a) for i, a in enumerate(actions) if a.is_compute] for actions in schedule.ranks]
    remaining = sum(len(c) for c in compute)
    while remaining:
        progressed = False
        for rank in range(schedule.pp):
            while heads[rank] < len(compute[rank]):
                index, a = compute[rank][heads[rank]]
                stage = stages.stage(rank, a.chunk)
                src = input_of(stages, rank, a)
                need = (src.stage, src.family, a.mb) if src is not None else None
                if need is not None and need not in done:
                    break
                ready = 0.0 if src is None else done[need] + (transfer if src.rank != rank else 0.0)
                start = max(clock[rank], ready)
                end = start + cost(rank, a)
                spans[(rank, index)] = (start, end)
                clock[rank] = end
                busy[rank] += end - start
                done[(stage, family(a.kind), a.mb)] = end
                heads[rank] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            raise ScheduleError("evaluate: no rank can progress (the schedule deadlocks; run prove() for details)")
    return Timeline(spans, max(clock), tuple(busy))
