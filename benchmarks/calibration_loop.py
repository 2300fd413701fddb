"""Close the loop on this machine: the simulator with the committed CPU profile against the
executor's measured median step, for scenarios/tiny.yaml at (tp, pp, dp) = (1,1,1), (1,2,1).

    python benchmarks/calibration_loop.py [--profile calibrate/profiles/cpu-amd-epyc.csv] [--steps 10] [--runs 5]

The profile must come from `sim3d calibrate --device cpu --quick --scenario scenarios/tiny.yaml`
on the same machine. Timing comparison: reported here, never asserted in tests.
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

from sim3d.costs.profile import Profile
from sim3d.engine import replay_step
from sim3d.executor import execute
from sim3d.scenario.load import load_scenario

LAYOUTS = [(1, 1, 1), (1, 2, 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, default=Path("calibrate/profiles/cpu-amd-epyc.csv"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5, help="repeat the executed side; report the spread")
    args = parser.parse_args()
    profile = Profile.load(args.profile)
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print(f"{'tp,pp,dp':10} {'simulated ms':>13} {'executed ms, median (min-max) of runs':>40} "
          f"{'error, median (range)':>24}")
    for tp, pp, dp in LAYOUTS:
        sets = [f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}", f"cluster.gpus_per_node={tp * pp * dp}"]
        scenario = load_scenario("scenarios/tiny.yaml", sets)
        sim = replay_step(scenario, profile=profile).result.step_time
        real = sorted(execute(scenario, steps=args.steps).median_step_s for _ in range(args.runs))
        errors = [(sim - r) / r for r in real]
        print(f"{tp},{pp},{dp:<6} {sim * 1e3:>13.1f} {statistics.median(real) * 1e3:>19.1f} "
              f"({real[0] * 1e3:.1f}-{real[-1] * 1e3:.1f}) {statistics.median(errors):>+13.1%} "
              f"({min(errors):+.1%} to {max(errors):+.1%})")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
