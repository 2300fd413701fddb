"""How much the engine's replay costs over the least a simpy program can do for the same step.

    python benchmarks/bare_simpy.py

The bare program replays the same lowered schedule with the same costs, looked up in a dict
filled before the clock starts: one process per rank; a compute waits for its input's
arrival event, then one timeout; a send is a channel free-at time and one timeout that
triggers the arrival; receives, data-parallel buckets and the optimizer cost nothing. No
trace rows, no breakdown, no rendezvous; the cyclic collector is paused for both, as the
engine pauses it. It gives the same step time as the engine where
data-parallel time is hidden (asserted below, so the comparison is like for like). Printed:
both walls (medians of alternating runs, 7 of the small case, 3 of the large) and their
ratio, folded gpt3 (pp 16, 192 micro-batches) and a pp 96 x 1024 micro-batch pipeline.
"""

from __future__ import annotations

import gc
import statistics
import time

import simpy

from sim3d.costs.cost_model import CostModel
from sim3d.engine.replay import Engine, ReplayOptions
from sim3d.util.gc_control import gc_paused
from sim3d.scenario.load import load_scenario
from sim3d.schedule.dependencies import family, input_of, output_to
from sim3d.schedule.ir import Kind
from sim3d.step import step_schedule

CASES = [("gpt3.yaml folded (pp16, m192)", "scenarios/gpt3.yaml", [], 7),
         ("pp96 x m1024", "scenarios/gpt3.yaml", ["parallel.pp=96", "parallel.dp=1", "cluster.nodes=96",
                                                    "training.global_batch=1024", "training.recompute=full"], 3)]
COMPUTE = (Kind.F, Kind.B, Kind.BI, Kind.BW)


def bare(schedule, costs, copies: int = 1) -> tuple[float, float]:
    """(step time, wall seconds of the replay alone); `copies` independent pipelines in one
    environment, as an every-rank replay runs one per tensor rank and data-parallel replica."""
    stages, pipe = schedule.stages, costs.placement.pipeline()
    price = {}
    for rank, actions in enumerate(schedule.ranks):
        for a in actions:
            if a.kind in COMPUTE:
                price[(rank, a.chunk, a.kind)] = costs.compute(pipe[rank], stages.stage(rank, a.chunk), a.kind.value).seconds
            elif a.kind in (Kind.SEND_F, Kind.SEND_B):
                price[(rank, a.peer)] = costs.transfer(pipe[rank], pipe[a.peer])
    env = simpy.Environment()
    arrivals, free, finish = {}, {}, []

    def arrival(key):
        if key not in arrivals:
            arrivals[key] = env.event()
        return arrivals[key]

    def rank_process(copy, rank, actions):
        for a in actions:
            if a.kind in COMPUTE:
                src = input_of(stages, rank, a)
                if src is not None:
                    yield arrival((copy, src.stage, src.family, a.mb, src.rank == rank))
                yield env.timeout(price[(rank, a.chunk, a.kind)])
                arrival((copy, stages.stage(rank, a.chunk), family(a.kind), a.mb, True)).succeed()
            elif a.kind in (Kind.SEND_F, Kind.SEND_B):
                key = (copy, rank, a.peer, a.kind)
                begin = max(env.now, free.get(key, 0.0))
                free[key] = begin + price[(rank, a.peer)]
                out = output_to(stages, rank, a)
                done = arrival((copy, stages.stage(rank, a.chunk), out.family, a.mb, False))
                env.timeout(free[key] - env.now).callbacks.append(lambda _e, done=done: done.succeed())
        finish.append(env.now)

    for copy in range(copies):
        for rank, actions in enumerate(schedule.ranks):
            env.process(rank_process(copy, rank, actions))
    start = time.perf_counter()
    with gc_paused():  # as the engine does: the comparison is of the bookkeeping alone
        env.run()
    return max(finish), time.perf_counter() - start


def main() -> None:
    print(f"{'case':32} {'actions':>9} {'engine s':>9} {'bare s':>8} {'ratio':>6} {'step (engine)':>14} {'step (bare)':>12}")
    for name, path, sets, runs in CASES:
        scenario = load_scenario(path, sets + ["training.overlap_grad_reduce=true"])
        schedule, costs = step_schedule(scenario), CostModel(scenario)
        engine_walls, bare_walls = [], []
        for _ in range(runs):
            gc.collect()
            result = Engine(schedule, costs, ReplayOptions.of(scenario)).run()
            engine_walls.append(result.wall_s)
            gc.collect()
            step, wall = bare(schedule, costs)
            bare_walls.append(wall)
        # the optimizer step (the embedding all-reduce before it included) and any exposed
        # data-parallel tail are the engine's alone
        parts = result.breakdown()
        tail = parts["optimizer"] + parts["embedding_sync"] + parts["dp"]
        assert abs(result.step_time - tail - step) < 1e-6 * step, (result.step_time, tail, step)
        engine_wall, bare_wall = statistics.median(engine_walls), statistics.median(bare_walls)
        print(f"{name:32} {result.events:>9,} {engine_wall:>9.3f} {bare_wall:>8.3f} "
              f"{engine_wall / bare_wall:>6.2f} {result.step_time:>14.4f} {step:>12.4f}")


if __name__ == "__main__":
    main()
