"""sim3d: a discrete-event simulator of 3D-parallel LLM training.

    import sim3d
    result = sim3d.simulate("scenarios/gpt3.yaml")
    result.summary["step_time_s"], result.breakdown
"""

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

try:
    __version__ = version("sim3d")
except PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0+unknown"

__all__ = ["simulate", "Result", "Scenario", "ScenarioError", "load_scenario", "__version__"]
_HOME = {"simulate": "api", "Result": "api", "Scenario": "scenario", "ScenarioError": "scenario",
         "load_scenario": "scenario"}

if TYPE_CHECKING:  # what type checkers and editors see; at run time the names come on first use
    from .api import Result, simulate
    from .scenario import Scenario, ScenarioError, load_scenario


def __getattr__(name: str):
    """The public names, and submodules (`sim3d.cluster.topology`), imported when first used: `sim3d
    run` starts its plotting process before it pays for the simulator's imports (PEP 562)."""
    import importlib
    import importlib.util
    if name in _HOME:
        value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'sim3d' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(name for name in set(globals()) | set(__all__) if not name.startswith("_") or name == "__version__")
