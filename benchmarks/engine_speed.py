"""Simulator speed: wall time and simulated actions per second, folded vs full fidelity.

    python benchmarks/engine_speed.py

Timing lives here, never in tests (machines differ). Prints one row per configuration.
"""

from __future__ import annotations

import gc
import time

from sim3d.engine import replay_step
from sim3d.scenario.load import load_scenario

CASES = [  # name, scenario, --set texts, mode: folded, full (twins folded) or every (every rank replayed)
    ("gpt3.yaml (1024 GPUs)", "scenarios/gpt3.yaml", [], "folded"),
    ("gpt3.yaml (1024 GPUs)", "scenarios/gpt3.yaml", [], "full"),
    ("gpt3.yaml (1024 GPUs)", "scenarios/gpt3.yaml", [], "every"),
    ("gpt3-512-interleaved.yaml", "scenarios/gpt3-512-interleaved.yaml", [], "folded"),
    ("gpt-1t.yaml (4096 GPUs)", "scenarios/gpt-1t.yaml", [], "folded"),
    ("gpt-1t.yaml x4 = 16384 GPUs", "scenarios/gpt-1t.yaml", ["parallel.dp=32", "cluster.nodes=2048"], "folded"),
    ("moe-1024.yaml", "scenarios/moe-1024.yaml", [], "folded"),
]


def main() -> None:
    print(f"{'scenario':32} {'mode':8} {'GPUs':>6} {'actions':>9} {'sim s':>7} {'wall s':>7} {'actions/s':>10} {'step s':>9}")
    for name, path, sets, mode in CASES:
        scenario = load_scenario(path, sets)
        start = time.perf_counter()
        run = replay_step(scenario, full_fidelity=mode != "folded", fold=mode != "every")
        wall = time.perf_counter() - start
        r = run.result
        print(f"{name:32} {mode:8} {scenario.num_gpus:>6} {r.events:>9,} "
              f"{r.wall_s:>7.2f} {wall:>7.2f} {r.events / r.wall_s:>10,.0f} {r.step_time:>9.4f}")
        # each case starts from a clean heap: a full-fidelity result left alive (1.5 M rows)
        # makes the cyclic collector rescan it while the next case builds its schedule (2.5x)
        del run, r
        gc.collect()


if __name__ == "__main__":
    main()
