"""The library entry point: `sim3d.simulate(...)` computes a whole prediction once and returns
a `Result` that the CLI, sweeps, plans and notebooks read.

    import sim3d
    r = sim3d.simulate("scenarios/gpt3.yaml", **{"parallel.tp": 4, "parallel.dp": 16})
    r.summary["step_time_s"], r.breakdown, r.memory.peak_gib, r.trace.head()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

from .costs.cost_model import CostModel
from .engine import SimResult
from .engine import replay_step
from .scenario.limits import WorkLimitExceeded
from .model.memory import MemoryReport, memory_report
from .analysis.summary import summarize
from .scenario.load import Scenario, load_scenario, scenario_from_dict
from .errors import ScenarioError
from .schedule import Schedule


@dataclass
class Result:
    scenario: Scenario
    schedule: Schedule  # lowered, as replayed
    costs: CostModel
    sim: SimResult
    memory: MemoryReport
    summary: dict = field(repr=False)
    full_fidelity: bool = False  # every GPU replayed (else one pipeline stands for all)

    @property
    def step_time(self) -> float:
        return self.sim.step_time

    @property
    def breakdown(self) -> dict[str, float]:
        """Seconds of the critical rank's step by part (`sim3d.engine.replay.BREAKDOWN_PARTS`);
        they add up to the step time."""
        return self.sim.breakdown()

    @cached_property
    def trace(self):
        """One row per simulated action (pandas DataFrame, docs/contracts.md#trace-columns)."""
        return self.sim.trace()

    @cached_property
    def links(self):
        """Bytes and busy fraction per direction of every graph edge over the step (pandas
        DataFrame, busiest first; `sim3d.analysis.traffic` says how traffic is laid on links)."""
        import pandas as pd
        return pd.DataFrame(self.link_table)

    @cached_property
    def link_table(self) -> dict:
        """`links` as numpy columns: what `sim3d run` writes and plots, without pandas."""
        from .analysis.traffic import gradient_split, link_table
        return link_table(self.sim.rows, self.costs.topology, self.step_time, folded=not self.full_fidelity,
                          represented=self.sim.represented, split=gradient_split(self.costs))

    def link_timelines(self, top: int = 8) -> dict[str, list[tuple[float, float]]]:
        """The `top` busiest link directions' busy fraction over time: "src->dst" ->
        [(time s, busy fraction from then on)] (the Perfetto trace's counter tracks)."""
        from .analysis.traffic import gradient_split, link_timelines
        return link_timelines(self.sim.rows, self.costs.topology, self.link_table, folded=not self.full_fidelity,
                              top=top, represented=self.sim.represented, split=gradient_split(self.costs))

    def explain(self) -> list[tuple[str, str]]:
        """(cost, where it came from) for every cost the prediction used."""
        return self.costs.explain()


def _scenario(scenario, sets: tuple[str, ...] | list[str], values: dict[str, Any]) -> Scenario:
    if isinstance(scenario, Scenario):
        if not sets and not values:
            return scenario
        return scenario_from_dict(scenario.model_dump(exclude_none=True), sets, values)
    if isinstance(scenario, dict):
        return scenario_from_dict(scenario, sets, values)
    if isinstance(scenario, (str, Path)):
        return load_scenario(scenario, sets, values)
    raise ScenarioError(f"simulate: expected a Scenario, a scenario dict or a YAML path, got {type(scenario).__name__}")


def simulate(scenario: Scenario | dict | str | Path, *, sets: tuple[str, ...] | list[str] = (),
             full_fidelity: bool = False, progress: Callable[[float], None] | None = None,
             **overrides: Any) -> Result:
    """One training step of `scenario` (a Scenario, a dict in the scenario format, or a YAML
    path), with `sets` (a list of "parallel.tp=4" texts, as `--set`; a str alone is refused, not
    read as one override per character) and `overrides` ({"parallel.tp": 4}, typed: an integer
    field takes any integer, numpy's included, a float field any finite real number) applied.
    The scenario's calibration profile is loaded here; stragglers imply full fidelity. Raises
    ScenarioError (bad input, missing profile) and ScheduleError; NonFiniteResult is a bug."""
    if getattr(getattr(full_fidelity, "dtype", None), "kind", None) == "b" and getattr(full_fidelity, "ndim", 1) == 0:
        full_fidelity = bool(full_fidelity)  # numpy's True is a truth, "no" is not
    if not isinstance(full_fidelity, bool):  # "no" would be true
        raise TypeError(f"full_fidelity must be True or False, not {full_fidelity!r}")
    s = _scenario(scenario, sets, overrides)
    full_fidelity = s.full_fidelity(full_fidelity)
    try:
        run = replay_step(s, full_fidelity=full_fidelity, progress=progress)
    except WorkLimitExceeded as e:
        raise ScenarioError(str(e)) from None
    memory = memory_report(s, check_schedule=False)  # the replayed schedule is the proven one
    summary = summarize(run, memory)
    profile = run.costs.profile
    if profile is not None:
        from .costs.profile import profile_warnings
        summary["warnings"] += profile_warnings(s, profile)
    if profile is not None and not run.costs.priced_by_profile():
        summary["warnings"].append(f"costs.profile {s.costs.profile} priced none of this scenario's kernels or "
                                   f"collectives (its dtypes: {', '.join(sorted(set(profile.table.dtype)))}); "
                                   "every cost is analytical")
    return Result(s, run.schedule, run.costs, run.result, memory, summary, full_fidelity)
