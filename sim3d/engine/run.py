"""One simulated training step of a scenario: schedule, costs, replay."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..costs.cost_model import CostModel
from ..schedule import Schedule
from ..step import step_schedule
from ..cluster.topology import Topology
from ..scenario.limits import ACTIONS
from .replay import Engine, ReplayOptions, SimResult


@dataclass
class SimRun:
    scenario: object
    schedule: Schedule  # lowered, as replayed
    costs: CostModel
    result: SimResult


def replay_step(scenario, full_fidelity: bool = False, profile=None, costs: CostModel | None = None,
             progress: Callable[[float], None] | None = None, fold: bool = True) -> SimRun:
    """One step. Stragglers need every GPU simulated, so they imply full fidelity; there
    `fold=False` replays every rank instead of one of each set of twins (the same step).
    The scenario's `costs.profile` is loaded unless `profile` or `costs` is given.
    `progress(fraction)` is called during a full-fidelity run, against the folded step time
    (simulated first, in a fraction of the time) as the expected end."""
    full = scenario.full_fidelity(full_fidelity)
    if costs is None:
        if profile is None and scenario.costs.profile:
            from ..costs.profile import load_profile  # imports pandas: only when a profile is named
            profile = load_profile(scenario)
        costs = CostModel(scenario, Topology(scenario), profile, folded=not full)
    schedule = step_schedule(scenario)
    options = ReplayOptions.of(scenario)
    engine = Engine(schedule, costs, options, full, unfolded=unfolded_pipelines(scenario) if fold else None)
    if full and fold:  # counted after folding: what will really be replayed (fold=False is a check of the folding)
        ACTIONS.check(engine.actions_replayed,
                      f"full fidelity: {len(engine.pipelines):,} pipeline(s) of {schedule.pp} rank(s) replayed "
                      f"(the others fold into their twins), {sum(map(len, schedule.ranks)):,} actions a pipeline")
    horizon = None
    if full and progress:
        folded = CostModel(scenario, costs.topology, costs.profile, folded=True)
        horizon = Engine(schedule, folded, options).run().step_time
    result = engine.run(progress=progress, horizon=horizon)
    return SimRun(scenario, schedule, costs, result)


def unfolded_pipelines(scenario) -> frozenset[tuple[int, int]] | None:
    """At full fidelity, the (dp, cp) pipelines whose ranks are each replayed: those a
    straggler sits on (it holds its TP peers back at every rendezvous); the rest fold
    (Engine). None (replay every rank) where ranks are not twins: a network fault or ECMP
    gives them different NICs and paths, and on the flow network each rank's messages are
    flows of their own."""
    if scenario.costs.network == "flow" or scenario.network_asymmetric:
        return None
    from ..cluster.placement import Placement
    placement = Placement.of(scenario)
    return frozenset((placement.coords(f.straggler.rank)["dp"], placement.coords(f.straggler.rank)["cp"])
                     for f in scenario.faults if f.straggler)
