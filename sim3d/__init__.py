"""sim3d: a discrete-event simulator of 3D-parallel LLM training.

    import sim3d
    result = sim3d.simulate("scenarios/gpt3.yaml")
    result.summary["step_time_s"], result.breakdown
    sim3d.kernel_seconds("h100-sxm", "gemm", m=8192, n=8192, k=8192)  # one kernel's price and its source
    sim3d.sample_steps("scenarios/gpt3.yaml", 100, sets=["variability.preset=greyhound-thermal"]).describe()
"""

from typing import TYPE_CHECKING

__all__ = ["simulate", "Result", "Scenario", "ScenarioError", "load_scenario", "kernel_seconds", "KernelPrice",
           "sample_steps", "__version__"]
_HOME = {"simulate": "api", "Result": "api", "Scenario": "scenario", "ScenarioError": "scenario",
         "load_scenario": "scenario", "kernel_seconds": "costs.kernel_price", "KernelPrice": "costs.kernel_price",
         "sample_steps": "studies.monte_carlo"}

if TYPE_CHECKING:  # what type checkers and editors see; at run time the names come on first use
    from .api import Result, simulate
    from .costs.kernel_price import KernelPrice, kernel_seconds
    from .studies.monte_carlo import sample_steps
    from .scenario import Scenario, ScenarioError, load_scenario


def __getattr__(name: str):
    """The public names, and submodules (`sim3d.cluster.topology`), imported when first used: `sim3d
    run` starts its plotting process before it pays for the simulator's imports (PEP 562)."""
    import importlib
    import importlib.util
    if name == "__version__":  # read when asked: importlib.metadata costs `sim3d run` 0.04 s
        value = _version()
    elif name in _HOME:
        value = getattr(importlib.import_module(f".{_HOME[name]}", __name__), name)
    elif not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module 'sim3d' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(name for name in set(globals()) | set(__all__) if not name.startswith("_") or name == "__version__")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("sim3d")
    except PackageNotFoundError:  # a source tree that was not installed
        return "0+unknown"
