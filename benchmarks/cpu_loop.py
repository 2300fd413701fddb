"""The CPU loop, measured: a profile of this machine for scenarios/tiny.yaml, then for each
layout (pp 2, dp 2, tp 2, cp 2, each alone) the executed step beside the simulated one.

    python benchmarks/cpu_loop.py [--profile P] [--steps 20] [--runs 3] [--layouts pp,dp,tp,cp,ppdp]

Without --profile it calibrates first, as `sim3d calibrate --device cpu --quick --scenario
scenarios/tiny.yaml` does (about two minutes on 2 cores), into a temporary folder. Each layout
is executed --runs times, --steps steps each (the executor times all but the first), after
waiting for the machine to be idle; the simulation is of the scenario.yaml the execution wrote,
priced with the profile. Each run's executed step is its median step; the table gives the
median over runs and the quickest run, whose error is the one to read on a shared machine:
another program's burst only ever slows a run, as the calibration keeps the quickest of its
rounds (calibrate/kernels.py). Reported, never asserted: CPU timings are the machine's.

A speed probe (one thread: 200 GELUs of a 64 x 64 matmul, timed back to back for half a
second) runs before the calibration and after each layout's runs, and prints its quickest and
median pass: a vCPU that changes speed between the calibration and the executions shows there.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from sim3d.api import simulate
from sim3d.costs.profile import load_profile
from sim3d.executor import execute
from sim3d.executor.sizing import launcher_cluster
from sim3d.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "scenarios" / "tiny.yaml"
LAYOUTS = {"pp": ["parallel.pp=2"], "dp": ["parallel.dp=2"], "tp": ["parallel.tp=2"], "cp": ["parallel.cp=2"],
           "ppdp": ["parallel.pp=2", "parallel.dp=2"]}  # ppdp: 4 ranks, the README's executed layout
DEFAULT = "pp,dp,tp,cp"
IDLE = 0.9  # the share of CPU time idle over 2 s that counts as a quiet machine


def idle_share(seconds: float = 2.0) -> float | None:
    """Share of the CPUs' time idle over `seconds` (Linux /proc/stat); None elsewhere."""
    def sample():
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
        return values[3] + values[4], sum(values)  # idle + iowait, all
    try:
        idle0, all0 = sample()
        time.sleep(seconds)
        idle1, all1 = sample()
    except OSError:
        return None
    return (idle1 - idle0) / max(all1 - all0, 1)


def speed_probe(seconds: float = 0.5) -> str:
    """This process's single-thread speed now: the quickest and median of repeated passes."""
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    a, b, passes = torch.randn(64, 64), torch.randn(64, 64), []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        start = time.perf_counter()
        for _ in range(200):
            torch.nn.functional.gelu(a @ b)
        passes.append(time.perf_counter() - start)
    torch.set_num_threads(threads)
    return f"speed probe: quickest {min(passes) * 1e3:.2f} ms, median {statistics.median(passes) * 1e3:.2f} ms"


def wait_for_quiet(limit_s: float) -> float:
    """Seconds waited (at most `limit_s`) for a quiet machine: another program's load slows the
    executed ranks and not the simulated ones."""
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        share = idle_share()
        if share is None or share >= IDLE:
            break
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", type=Path, help="a CPU profile of this machine for tiny.yaml (default: calibrate)")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3, help="executions per layout")
    parser.add_argument("--layouts", default=DEFAULT, help=f"of {', '.join(LAYOUTS)}")
    parser.add_argument("--quiet-wait", type=float, default=120.0, help="seconds to wait for an idle machine per run")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sim3d-cpu-loop-"))
    print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    profile = args.profile
    if profile is None:
        from sim3d_calibrate import run_calibration
        wait_for_quiet(args.quiet_wait)
        print(f"before calibrating, {speed_probe()}")
        t0 = time.perf_counter()
        profile = run_calibration("cpu", quick=True, scenario_path=str(TINY), out=str(work / "cpu.csv"))
        print(f"calibrated in {time.perf_counter() - t0:.0f} s: {profile}")
    header = (f"{'layout':14} {'ranks':>5} {'x compute':>9} {'simulated ms':>12} "
              f"{'executed ms: median (min-max of runs)':>38} {'error vs median':>15} {'vs quickest':>11}")
    print(header)
    for name in args.layouts.split(","):
        real, sim, scale, ranks = [], None, 1.0, 1
        for run in range(args.runs):
            waited = wait_for_quiet(args.quiet_wait)
            sets = [*LAYOUTS[name], *launcher_cluster(str(TINY), LAYOUTS[name], {})]  # as `sim3d execute` sizes it
            result = execute(TINY, steps=args.steps, out_dir=work / f"{name}-{run}", overrides=sets)
            if sim is None:  # the scenario the execution ran, priced with this machine's profile
                sets = [f"costs.profile={profile}"]
                sim = simulate(result.scenario_path, sets=sets).step_time
                bound = load_profile(load_scenario(result.scenario_path, sets))
                scale, ranks = bound.compute_scale, result.world_size
            real.append(result.median_step_s)
            if waited > 5:
                print(f"  ({name} run {run + 1}: waited {waited:.0f} s for an idle machine)")
        real.sort()
        median = statistics.median(real)
        print(f"{' '.join(x.split('.')[1] for x in LAYOUTS[name]):14} {ranks:5d} {scale:9.2f} {sim * 1e3:12.1f} "
              f"{median * 1e3:19.1f} ({real[0] * 1e3:.1f}-{real[-1] * 1e3:.1f}) {(sim - median) / median:>+14.1%} "
              f"{(sim - real[0]) / real[0]:>+11.1%}", flush=True)
        print(f"  after these runs, {speed_probe()}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
