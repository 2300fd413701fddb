"""Full fidelity at scale: Llama 3.1 405B as Meta trained it on 16,384 H100 (Llama 3 paper,
arXiv:2407.21783, Table 4: tp 8, cp 1, pp 16, dp 128, 2048 sequences of 8192 tokens per step)
with one straggler, the same model on 131,072 H100 (tp 8, pp 16, cp 2, dp 512) with one straggler,
and gpt3.yaml at full fidelity, each in a process of its own.

    python benchmarks/full_fidelity_scale.py

Prints wall time and peak memory of `sim3d run ... --full-fidelity --json` (the command a user
types; `--trace none --no-plots` where said), and the step against the folded one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

LLAMA_16K = ["--set", "parallel.tp=8", "--set", "parallel.pp=16", "--set", "parallel.cp=1", "--set", "parallel.dp=128",
             "--set", "parallel.vpp=2", "--set", "training.global_batch=2048", "--set", "cluster.nodes=2048"]
# issue 35's case: within the default limits since a ring is priced from the groups near it
LLAMA_131K = ["--set", "parallel.tp=8", "--set", "parallel.pp=16", "--set", "parallel.cp=2", "--set", "parallel.dp=512",
              "--set", "parallel.vpp=1", "--set", "schedule=1f1b", "--set", "training.global_batch=8192",
              "--set", "cluster.nodes=16384"]
STRAGGLER = ["--set", "faults=[{straggler: {rank: 12345, slowdown: 1.1}}]"]
QUIET = ["--trace", "none", "--no-plots"]
CASES = [  # name, scenario, --set arguments, faults, output flags
    ("gpt3.yaml, 1024 GPUs, all outputs", "scenarios/gpt3.yaml", [], [], []),
    ("gpt3.yaml, 1024 GPUs, --trace none --no-plots", "scenarios/gpt3.yaml", [], [], QUIET),
    ("Llama 3.1 405B, 16,384 GPUs, one straggler", "scenarios/llama3.1-405b.yaml", LLAMA_16K, STRAGGLER, QUIET),
    ("Llama 3.1 405B, 131,072 GPUs (cp 2, dp 512), one straggler", "scenarios/llama3.1-405b.yaml", LLAMA_131K,
     STRAGGLER, QUIET),
]


def run(path: str, extra: list[str], full: bool) -> tuple[float, float, dict]:
    """Wall seconds, peak resident GB (GNU time's maximum RSS of that process) and summary."""
    args = ["/usr/bin/time", "-f", "%M", sys.executable, "-m", "sim3d", "run", path, "--json",
            "--out", "/tmp/sim3d-bench"] + extra
    if full:
        args.append("--full-fidelity")
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    peak_kb = int(done.stderr.strip().splitlines()[-1])
    return wall, peak_kb / 2**20, json.loads(done.stdout)


def simulate_only(path: str, sets: list[str]) -> tuple[float, float, float]:
    """Wall seconds and peak GB of a process that imports sim3d and calls sim3d.simulate (no
    output files: at 131,072 GPUs the CLI's links.csv, one row per direction of ~600,000 links,
    costs more than the simulation), and the step."""
    code = ("import sys, sim3d; r = sim3d.simulate(sys.argv[1], sets=sys.argv[2:], full_fidelity=True); "
            "print(r.summary['step_time_s'])")
    args = ["/usr/bin/time", "-f", "%M", sys.executable, "-c", code, path] + [v for v in sets if v != "--set"]
    start = time.perf_counter()
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    return wall, int(done.stderr.strip().splitlines()[-1]) / 2**20, float(done.stdout)


def main() -> None:
    print(f"{'case':50} {'wall s':>7} {'peak GB':>8} {'step s':>9} {'healthy folded':>14} {'actions':>9}")
    name = "Llama 3.1 405B, 131,072 GPUs, straggler, API only"
    wall, peak, step = simulate_only("scenarios/llama3.1-405b.yaml", LLAMA_131K + STRAGGLER)
    print(f"{name:50} {wall:>7.1f} {peak:>8.2f} {step:>9.3f}")
    for name, path, sets, faults, flags in CASES:
        wall, peak, summary = run(path, sets + faults + flags, True)
        _, _, folded = run(path, sets + QUIET, False)  # healthy, one pipeline
        print(f"{name:50} {wall:>7.1f} {peak:>8.2f} {summary['step_time_s']:>9.3f} {folded['step_time_s']:>14.3f} "
              f"{summary['sim_events']:>9,}")


if __name__ == "__main__":
    main()
