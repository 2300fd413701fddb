"""Whole-process wall time of `sim3d run` as a user types it (issue 16's first two targets).

    python benchmarks/run_wall.py [--repeats 5]

Each case runs in a fresh process (imports included); the median and range of `--repeats`
runs are printed with the peak resident memory (GNU time's maximum RSS: of the largest
single process, the caller or its plotting process, not their sum). A second table times the phases of one flagship run
inside one process, with the plots drawn serially (SIM3D_SERIAL_OUTPUTS=1) so that each phase
is measured alone; in a real run the plots overlap the simulation's tail and the writing.
Do not run it beside the test suite: this machine has two cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

CASES = [  # name, arguments after `sim3d run`
    ("flagship, default outputs", ["scenarios/gpt3.yaml"]),
    ("flagship, --no-plots --trace none", ["scenarios/gpt3.yaml", "--no-plots", "--trace", "none"]),
    ("flagship --full-fidelity --json (all outputs)", ["scenarios/gpt3.yaml", "--full-fidelity", "--json"]),
]


def one_run(args: list[str], out: str) -> tuple[float, float, str]:
    command = ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "sim3d", "run", *args, "--out", out]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return time.perf_counter() - start, int(done.stderr.strip().splitlines()[-1]) / 2**20, done.stdout


def phases() -> list[tuple[str, float]]:
    """Seconds of each phase of the flagship in this process (after its imports)."""
    env = dict(os.environ, SIM3D_SERIAL_OUTPUTS="1")
    code = r"""
import json, sys, tempfile, time
t0 = time.perf_counter()
import sim3d, sim3d.cli.app
t1 = time.perf_counter()
from pathlib import Path
from sim3d.report.outputs import write_run_outputs
result = sim3d.simulate("scenarios/gpt3.yaml")
result.summary
t2 = time.perf_counter()
result.trace, result.links
t3 = time.perf_counter()
folder = Path(tempfile.mkdtemp())
write_run_outputs(result, folder, plots=False)
t4 = time.perf_counter()
import sim3d.report.gantt, sim3d.report.links_plot
t5 = time.perf_counter()
write_run_outputs(result, folder, plots=True, trace_format="none")
t6 = time.perf_counter()
print(json.dumps([["imports (sim3d and its CLI)", t1 - t0], ["simulate + summary", t2 - t1],
                  ["trace and link tables", t3 - t2], ["tables and trace files", t4 - t3],
                  ["matplotlib import", t5 - t4], ["plots (+ tables again, ~0.3 s)", t6 - t5]]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    print(f"{'case':48} {'median s':>9} {'range s':>13} {'peak GB':>8}")
    steps = {}
    with tempfile.TemporaryDirectory() as out:
        for name, args in CASES:
            runs = [one_run(args, out) for _ in range(repeats)]
            walls = sorted(w for w, _, _ in runs)
            print(f"{name:48} {statistics.median(walls):9.2f} {walls[0]:6.2f}-{walls[-1]:<6.2f} "
                  f"{max(m for _, m, _ in runs):8.2f}")
            steps[name] = json.load(open(os.path.join(out, "summary.json")))["step_time_s"]
    print("step times:", ", ".join(f"{name}: {step:.3f} s" for name, step in steps.items()))
    print("\nphases of one flagship run, serial, in one process:")
    for name, seconds in phases():
        print(f"  {name:40} {seconds:6.2f} s")


if __name__ == "__main__":
    main()
