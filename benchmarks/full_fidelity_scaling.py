"""How full-fidelity replay cost grows with GPUs: gpt3.yaml's layout (tp 8, pp 16) with 1 to 32
data-parallel replicas (128 to 4,096 GPUs), the global batch growing with them so every
pipeline runs 192 micro-batches, and the exponent of a log-log least-squares fit.

    python benchmarks/full_fidelity_scaling.py

Three columns. "every rank": every rank replayed (`fold=False`), which measures the engine
itself. "bare simpy": the least a simpy program can do for the same work (bare_simpy.py),
one copy of the pipeline per tensor rank and replica, so as many rank processes as the
every-rank replay: how much of the growth is simpy's and the machine's, not sim3d's. "straggler": the default, with one straggler (rank 12, slowed 1.1x) so that full
fidelity matters: its pipeline is replayed rank by rank and one pipeline stands for its
healthy twins, so what grows with the GPUs is only the bookkeeping of who stands for whom.
"""

from __future__ import annotations

import gc
import math

from bare_simpy import bare
from sim3d.costs.cost_model import CostModel
from sim3d.engine import replay_step
from sim3d.scenario.load import load_scenario
from sim3d.step import step_schedule

REPLICAS = (1, 2, 4, 8, 16, 32)
STRAGGLER = "faults=[{straggler: {rank: 12, slowdown: 1.1}}]"


def slope(points: list[tuple[float, float]]) -> float:
    xs, ys = [math.log(g) for g, _ in points], [math.log(w) for _, w in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    print(f"{'GPUs':>6} {'every rank: actions':>20} {'replay s':>9} {'bare simpy s':>13} {'straggler: actions':>19} "
          f"{'replay s':>9} {'step s':>9}")
    every, reference, straggler = [], [], []
    for dp in REPLICAS:
        sets = [f"parallel.dp={dp}", f"cluster.nodes={16 * dp}", f"training.global_batch={192 * dp}"]
        healthy = load_scenario("scenarios/gpt3.yaml", sets)
        gc.collect()
        a = replay_step(healthy, full_fidelity=True, fold=False).result
        every.append((healthy.num_gpus, a.wall_s))
        gc.collect()
        _, bare_wall = bare(step_schedule(healthy), CostModel(healthy), copies=healthy.tp * healthy.dp)
        reference.append((healthy.num_gpus, bare_wall))
        gc.collect()
        b = replay_step(load_scenario("scenarios/gpt3.yaml", sets + [STRAGGLER]), full_fidelity=True).result
        straggler.append((healthy.num_gpus, b.wall_s))
        print(f"{healthy.num_gpus:>6} {a.events:>20,} {a.wall_s:>9.2f} {bare_wall:>13.2f} {b.events:>19,} "
              f"{b.wall_s:>9.2f} {b.step_time:>9.4f}")
        del a, b
    print(f"replay time ~ GPUs^{slope(every):.2f} every rank (bare simpy with as many rank processes: "
          f"GPUs^{slope(reference):.2f}), GPUs^{slope(straggler):.2f} with a straggler and twins folded "
          f"(least squares on log-log, {len(every)} points)")


if __name__ == "__main__":
    main()
