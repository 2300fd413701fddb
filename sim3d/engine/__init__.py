"""simpy replay of lowered schedules over the topology (see simulate.py)."""

from .run import SimRun, plan_schedule, simulate
from .simulate import TRACE_COLUMNS, DeadlockError, Engine, SimResult

__all__ = ["simulate", "plan_schedule", "SimRun", "Engine", "SimResult", "DeadlockError", "TRACE_COLUMNS"]
