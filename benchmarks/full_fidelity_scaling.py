"""How full-fidelity replay cost grows with GPUs: gpt3.yaml's layout (tp 8, pp 16) with 1 to 32
data-parallel replicas (128 to 4,096 GPUs), the global batch growing with them so every
pipeline runs 192 micro-batches, and the exponent of a log-log least-squares fit.

    python benchmarks/full_fidelity_scaling.py

Every rank is replayed (`fold=False`): this measures the engine, not the folding of twins,
which replays one pipeline of this healthy layout whatever its size.
"""

from __future__ import annotations

import gc
import math

from sim3d.engine import replay_step
from sim3d.scenario import load_scenario

REPLICAS = (1, 2, 4, 8, 16, 32)


def main() -> None:
    print(f"{'GPUs':>6} {'actions':>9} {'replay s':>9} {'step s':>9}")
    points = []
    for dp in REPLICAS:
        scenario = load_scenario("scenarios/gpt3.yaml", [f"parallel.dp={dp}", f"cluster.nodes={16 * dp}",
                                                          f"training.global_batch={192 * dp}"])
        gc.collect()
        result = replay_step(scenario, full_fidelity=True, fold=False).result
        points.append((scenario.num_gpus, result.wall_s))
        print(f"{scenario.num_gpus:>6} {result.events:>9,} {result.wall_s:>9.2f} {result.step_time:>9.4f}")
        del result
    xs, ys = [math.log(g) for g, _ in points], [math.log(w) for _, w in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    print(f"replay time ~ GPUs^{slope:.2f} (least squares on log-log, {len(points)} points)")


if __name__ == "__main__":
    main()
