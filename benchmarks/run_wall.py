"""Whole-process wall time of `sim3d run` as a user types it (issue 16's first two targets).

    python benchmarks/run_wall.py [--repeats 5] [--against SOURCE_TREE]

Each case runs in a fresh process (imports included); the median and range of `--repeats`
runs are printed with the median CPU time of the whole run (GNU time's user + system
seconds: the caller and its plotting process together; on a machine shared with other work
it moves far less than the wall time) and the peak resident memory (GNU time's maximum
RSS: of the largest single process, the caller or its plotting process, not their sum). A
second table times the phases of one flagship run inside one process, with the plots drawn
serially (SIM3D_SERIAL_OUTPUTS=1) so that each phase is measured alone; in a real run the
plots are drawn by a second process while the caller simulates and writes (the memory plot
while it simulates): see benchmarks/run_timeline.py for that run's timeline.
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


def one_run(args: list[str], out: str, source: str | None = None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system, the plotting process included) and peak GB;
    `source`: run the sim3d of that source tree instead of the installed one."""
    command = ["/usr/bin/time", "-f", "%M %U %S", sys.executable, "-m", "sim3d", "run", *args, "--out", out]
    env = dict(os.environ, PYTHONPATH=source) if source else None
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=env, cwd=source)
    wall = time.perf_counter() - start
    peak_kb, user, system = done.stderr.strip().splitlines()[-1].split()
    return wall, float(user) + float(system), int(peak_kb) / 2**20


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
from sim3d.trace import trace_columns
result = sim3d.simulate("scenarios/gpt3.yaml")
result.summary
t2 = time.perf_counter()
trace_columns(result.sim.rows), result.link_table  # what sim3d run writes: numpy columns, no pandas
t3 = time.perf_counter()
folder = Path(tempfile.mkdtemp())
write_run_outputs(result, folder, plots=False)
t4 = time.perf_counter()
write_run_outputs(result, folder, plots=False, trace_format="none")
t5 = time.perf_counter()
import sim3d.report.gantt, sim3d.report.links_plot, sim3d.report.memory_plot
t6 = time.perf_counter()
write_run_outputs(result, folder, plots=True, trace_format="none")
t7 = time.perf_counter()
print(json.dumps([["imports (sim3d and its CLI)", t1 - t0], ["simulate + summary", t2 - t1],
                  ["trace columns and link table", t3 - t2], ["tables and trace files", t4 - t3],
                  ["matplotlib import", t6 - t5], ["plots (memory, Gantt, links)", (t7 - t6) - (t5 - t4)]]))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    return json.loads(done.stdout)


def against(baseline: str, repeats: int) -> None:
    """The flagship's default run, this checkout and `baseline` (another source tree, e.g. a
    `git worktree` of an older commit) taken in turns: this machine's speed drifts by a
    quarter from minute to minute, so only runs side by side compare."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this checkout": here, f"baseline {baseline}": os.path.abspath(baseline)}
    runs: dict[str, list] = {name: [] for name in trees}
    with tempfile.TemporaryDirectory() as out:
        for _ in range(repeats):
            for name, tree in trees.items():
                runs[name].append(one_run(CASES[0][1], out, source=tree))
    print(f"{CASES[0][0]}, {repeats} runs of each in turn:")
    for name, done in runs.items():
        walls = sorted(w for w, _, _ in done)
        print(f"  {name:40} median {statistics.median(walls):5.2f} s ({walls[0]:.2f}-{walls[-1]:.2f}), "
              f"CPU {statistics.median(c for _, c, _ in done):5.2f} s")
    (mine, theirs) = runs.values()
    print(f"  median ratio of paired runs: {statistics.median(a[0] / b[0] for a, b in zip(mine, theirs)):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--against", metavar="SOURCE_TREE",
                        help="time the flagship alternately with another source tree's sim3d (a git worktree)")
    options = parser.parse_args()
    repeats = options.repeats
    if options.against:
        against(options.against, repeats)
        return
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        # an installed sim3d runs from cached bytecode; this setting recompiles it every run
        # (about half a second more for the flagship on this machine)
        print("note: PYTHONDONTWRITEBYTECODE is set, so every run compiles sim3d from source; run "
              "`python -m compileall -q sim3d` and `env -u PYTHONDONTWRITEBYTECODE` for an installed sim3d's time")
    print(f"{'case':48} {'median s':>9} {'range s':>13} {'cpu s':>6} {'peak GB':>8}")
    steps = {}
    with tempfile.TemporaryDirectory() as out:
        for name, args in CASES:
            runs = [one_run(args, out) for _ in range(repeats)]
            walls = sorted(w for w, _, _ in runs)
            print(f"{name:48} {statistics.median(walls):9.2f} {walls[0]:6.2f}-{walls[-1]:<6.2f} "
                  f"{statistics.median(c for _, c, _ in runs):6.2f} {max(m for _, _, m in runs):8.2f}")
            steps[name] = json.load(open(os.path.join(out, "summary.json")))["step_time_s"]
    print("step times:", ", ".join(f"{name}: {step:.3f} s" for name, step in steps.items()))
    print("\nphases of one flagship run, serial, in one process:")
    for name, seconds in phases():
        print(f"  {name:40} {seconds:6.2f} s")


if __name__ == "__main__":
    main()
