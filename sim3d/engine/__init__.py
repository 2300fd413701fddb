"""simpy replay of lowered schedules over the topology (replay.py); run.py prices and replays one step."""

from .run import SimRun, load_profile, replay_step
from .replay import DeadlockError, Engine, SimResult

__all__ = ["replay_step", "load_profile", "SimRun", "Engine", "SimResult", "DeadlockError"]
