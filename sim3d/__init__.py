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

from .api import Result, simulate  # noqa: E402 - after __version__, which the summary records
from .scenario import Scenario, ScenarioError, load_scenario  # noqa: E402

__all__ = ["simulate", "Result", "Scenario", "ScenarioError", "load_scenario", "__version__"]
