"""A scenario file (or dict, or importer's output) becomes a typed, validated `Scenario`:
`schema` defines the fields and their aliases, `checks` the rules across fields, `load` reads
YAML and `--set` overrides, `importers` translate other tools' configurations, `limits`
bounds the work one input may ask for."""

from ..errors import ScenarioError
from .load import Scenario, load_scenario, scenario_from_dict

__all__ = ["Scenario", "ScenarioError", "load_scenario", "scenario_from_dict"]
