"""Wall time of Monte Carlo steps (`sim3d run --samples N`), and where it goes.

    python benchmarks/monte_carlo.py [--samples 100] [--repeats 3]

Cases: gpt3.yaml (1024 GPUs, 8 pipelines of 16 stages, 192 micro-batches) with per-compute
jitter on every GPU, alone and with slow GPUs and flaky links; llama3.1-405b.yaml (16,384
GPUs) with the same. For each: the library's time to compile the step (pricing every action
once), to replay the samples, and the whole command as a user types it (a fresh process,
imports and the deterministic run's outputs included, `--no-plots --trace none`). Medians of
`--repeats`. Do not run it beside the test suite: this machine has two cores.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

JITTER = '{"jitter": {"lognormal_sigma": 0.02}}'
EVERYTHING = '{"jitter": {"lognormal_sigma": 0.02}, "slow_gpus": {"fraction": 0.005, "slowdown": 1.2}, ' \
             '"flaky_links": {"probability": 0.009, "slowdown": 2.0}}'
CASES = [
    ("gpt3.yaml, jitter", "scenarios/gpt3.yaml", JITTER),
    ("gpt3.yaml, jitter + slow GPUs + flaky links", "scenarios/gpt3.yaml", EVERYTHING),
    ("llama3.1-405b.yaml, jitter + slow GPUs + flaky links", "scenarios/llama3.1-405b.yaml", EVERYTHING),
]


def library_times(path: str, variability: str, samples: int) -> tuple[float, float]:
    from sim3d.scenario.load import load_scenario
    from sim3d.studies.monte_carlo import Sampler
    s = load_scenario(path, [f"variability={variability}"])
    start = time.perf_counter()
    sampler = Sampler(s, seed=0)
    compiled = time.perf_counter()
    size = sampler.chunk(samples, 1)
    for first in range(0, samples, size):
        sampler.run(list(range(first, min(first + size, samples))))
    return compiled - start, time.perf_counter() - compiled


def command_time(path: str, variability: str, samples: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "sim3d", "run", path, "--set", f"variability={variability}",
                        "--samples", str(samples), "--no-plots", "--trace", "none", "--json", "--out", out],
                       check=True, capture_output=True)
        return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"{args.samples} samples, median of {args.repeats}")
    print(f"{'case':<55} {'compile s':>10} {'samples s':>10} {'ms/sample':>10} {'command s':>10}")
    for name, path, variability in CASES:
        lib = [library_times(path, variability, args.samples) for _ in range(args.repeats)]
        compile_s = statistics.median(c for c, _ in lib)
        sample_s = statistics.median(r for _, r in lib)
        whole = statistics.median(command_time(path, variability, args.samples) for _ in range(args.repeats))
        print(f"{name:<55} {compile_s:>10.2f} {sample_s:>10.2f} {1000 * sample_s / args.samples:>10.1f} {whole:>10.2f}")


if __name__ == "__main__":
    main()
