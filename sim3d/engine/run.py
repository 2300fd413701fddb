"""One simulated training step of a scenario: schedule, costs, replay."""

from __future__ import annotations

from dataclasses import dataclass

from ..costs.model import CostModel
from ..schedule import Schedule, ScheduleReport, build, lower, validate
from ..topology import Topology
from .simulate import Engine, SimResult


@dataclass
class SimRun:
    scenario: object
    schedule: Schedule  # lowered, as replayed
    report: ScheduleReport  # validator's findings (peak in-flight activations per rank)
    costs: CostModel
    result: SimResult


def plan_schedule(scenario, costs: CostModel | None = None) -> tuple[Schedule, ScheduleReport]:
    """Generate, lower and validate the scenario's schedule."""
    compute_only = build(scenario.schedule, scenario.pp, scenario.num_microbatches, scenario.vpp)
    buckets = costs.buckets_per_chunk(compute_only.stages) if costs is not None else 1
    lowered = lower(compute_only, buckets_per_chunk=buckets,
                    param_gather=scenario.parallel.distributed_optimizer and scenario.dp > 1)
    return lowered, validate(lowered)


def simulate(scenario, full_fidelity: bool = False, profile=None, costs: CostModel | None = None) -> SimRun:
    if costs is None:
        costs = CostModel(scenario, Topology(scenario), profile)
    schedule, report = plan_schedule(scenario, costs)
    needs_every_gpu = any(f.straggler for f in scenario.faults)
    result = Engine(scenario, schedule, costs, full_fidelity or needs_every_gpu).run()
    return SimRun(scenario, schedule, report, costs, result)
