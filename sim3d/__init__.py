"""sim3d: a discrete-event simulator of 3D-parallel LLM training.

    import sim3d
    result = sim3d.simulate("scenarios/gpt3.yaml")
    result.summary["step_time_s"], result.breakdown
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("sim3d")
except PackageNotFoundError:  # a source tree that was not installed
    __version__ = "0+unknown"

__all__ = ["simulate", "Result", "Scenario", "ScenarioError", "load_scenario", "__version__"]
_HOME = {"simulate": "api", "Result": "api", "Scenario": "scenario", "ScenarioError": "scenario",
         "load_scenario": "scenario"}


def __getattr__(name: str):
    """The public names, imported when first used: `sim3d run` starts its plotting process
    before it pays for the simulator's imports (PEP 562)."""
    if name not in _HOME:
        raise AttributeError(f"module 'sim3d' has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
