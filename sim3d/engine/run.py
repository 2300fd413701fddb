"""One simulated training step of a scenario: schedule, costs, replay."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..costs.model import CostModel
from ..schedule import Schedule, build, lower
from ..topology import Topology
from .simulate import Engine, SimResult


@dataclass
class SimRun:
    scenario: object
    schedule: Schedule  # lowered, as replayed
    costs: CostModel
    result: SimResult


def plan_schedule(scenario, costs: CostModel | None = None) -> Schedule:
    """Generate and lower the scenario's schedule. Not re-proved here (the generators are
    property-tested, `sim3d validate` proves a scenario's schedule, and the engine itself
    reports a deadlock with the waiting ranks): this is the hot path of `sim3d run`."""
    compute_only = build(scenario.schedule, scenario.pp, scenario.num_microbatches, scenario.vpp)
    buckets = costs.buckets_per_chunk(compute_only.stages) if costs is not None else 1
    lowered = lower(compute_only, buckets_per_chunk=buckets,
                    param_gather=scenario.parallel.distributed_optimizer and scenario.dp > 1)
    return lowered


def simulate(scenario, full_fidelity: bool = False, profile=None, costs: CostModel | None = None,
             progress: Callable[[float], None] | None = None) -> SimRun:
    """One step. Stragglers need every GPU simulated, so they imply full fidelity.
    `progress(fraction)` is called during a full-fidelity run, against the folded step time
    (simulated first, in a fraction of the time) as the expected end."""
    if costs is None:
        costs = CostModel(scenario, Topology(scenario), profile)
    schedule = plan_schedule(scenario, costs)
    full = full_fidelity or any(f.straggler for f in scenario.faults)
    horizon = Engine(scenario, schedule, costs).run().step_time if full and progress else None
    result = Engine(scenario, schedule, costs, full).run(progress=progress, horizon=horizon)
    return SimRun(scenario, schedule, costs, result)
