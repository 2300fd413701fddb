"""simpy replay of lowered schedules over the topology (see simulate.py)."""

from .run import SimRun, load_profile, simulate
from .simulate import TRACE_COLUMNS, DeadlockError, Engine, SimResult

__all__ = ["simulate", "load_profile", "SimRun", "Engine", "SimResult", "DeadlockError", "TRACE_COLUMNS"]
