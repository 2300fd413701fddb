"""simpy replay of lowered schedules over the topology (replay.py); run.py prices and replays one step."""

from .run import SimRun, replay_step
from .replay import DeadlockError, Engine, SimResult

__all__ = ["replay_step", "SimRun", "Engine", "SimResult", "DeadlockError"]
