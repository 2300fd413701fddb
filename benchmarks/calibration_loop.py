"""Close the loop on this machine: the simulator with the committed CPU profile against the
executor's measured median step, for scenarios/tiny.yaml at (tp, pp, dp) = (1,1,1), (1,2,1).

    python benchmarks/calibration_loop.py [--profile calibrate/profiles/cpu-amd-epyc.csv] [--steps 10]

The profile must come from `sim3d calibrate --device cpu --quick --scenario scenarios/tiny.yaml`
on the same machine. Timing comparison: reported here, never asserted in tests.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sim3d.costs.profile import Profile
from sim3d.engine import simulate
from sim3d.executor import execute
from sim3d.scenario import load_scenario

LAYOUTS = [(1, 1, 1), (1, 2, 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, default=Path("calibrate/profiles/cpu-amd-epyc.csv"))
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    profile = Profile.load(args.profile)
    print(f"{'tp,pp,dp':10} {'executed ms':>12} {'simulated ms':>13} {'error':>8}")
    for tp, pp, dp in LAYOUTS:
        sets = [f"parallel.tp={tp}", f"parallel.pp={pp}", f"parallel.dp={dp}", f"cluster.gpus_per_node={tp * pp * dp}"]
        scenario = load_scenario("scenarios/tiny.yaml", sets)
        real = execute(scenario, steps=args.steps).median_step_s
        sim = simulate(scenario, profile=profile).result.step_time
        print(f"{tp},{pp},{dp:<6} {real * 1e3:>12.1f} {sim * 1e3:>13.1f} {(sim - real) / real:>+8.1%}")


if __name__ == "__main__":
    main()
