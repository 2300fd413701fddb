"""Per-rank action lists (the IR), generators, lowering, validation, a reference evaluator and
the bubble's closed forms (bubble.py).

Imports neither simpy nor torch: the engine and the executor both consume these objects.
"""

from .generators import GENERATORS, ScheduleConstraint, build
from .ir import Action, Kind, Schedule, StageMap, parse_action
from .lowering import MalformedSchedule, add_dp, add_p2p, lower
from .proof import ScheduleError, ScheduleReport, prove

__all__ = ["Action", "Kind", "Schedule", "StageMap", "parse_action", "GENERATORS", "build",
           "ScheduleConstraint", "add_p2p", "add_dp", "lower", "MalformedSchedule", "prove",
           "ScheduleError", "ScheduleReport"]
