"""A 1,000-point sweep and a 10,000-sample Monte Carlo run, on the local process pool and on Ray.

    python benchmarks/ray_scale.py                    # a Ray instance of this machine's cores
    RAY_ADDRESS=ray://HEAD:10001 python benchmarks/ray_scale.py   # an existing Ray cluster

The sweep is scenarios/llama3.1-8b.yaml over 10 NIC speeds x 2 micro-batch sizes x 25 global
batches x 2 recomputation policies (1,000 layouts, every one simulated); the Monte Carlo run is scenarios/gpt3.yaml
with 2% lognormal compute jitter, 10,000 samples. Each runs as a user types it (`sim3d sweep`,
`sim3d run --samples`), in a fresh process, once per backend; the wall times and the
equality of what each backend wrote are printed. On one machine Ray only adds its start-up;
what it buys is the cores of other machines (the workers: `--workers`, one task each).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
# 10 NIC speeds x 2 micro-batches x 25 global batches x 2 recomputation policies = 1,000 layouts
GRID = ["--grid", "cluster.inter_node.nic_gbps=" + ",".join(str(25 * 2**i) for i in range(10)),
        "--grid", "training.micro_batch=1,2",
        "--grid", "training.global_batch=" + ",".join(str(64 * k) for k in range(1, 26)),
        "--grid", "training.recompute=none,selective"]
SAMPLES = 10_000


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    # 10,000 samples of GPT-3's 8 x 17,936 actions are 1.4e9 replayed actions: past the default
    # work limit (a few minutes here), on purpose
    env = {**os.environ, "SIM3D_MAX_SAMPLE_WORK": "2000000000"}
    done = subprocess.run([sys.executable, "-m", "sim3d", *command], cwd=ROOT, capture_output=True, text=True,
                          env=env)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--samples", type=int, default=SAMPLES)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        tables = {}
        for backend in ("local", "ray"):
            out = Path(tmp) / f"sweep-{backend}"
            seconds = timed(["sweep", "scenarios/llama3.1-8b.yaml", *GRID, "--backend", backend,
                             "--workers", str(args.workers), "--out", str(out)])
            table = pd.read_csv(out / "results.csv").sort_values("label").reset_index(drop=True)
            tables[backend] = table
            rows.append((f"sweep, {len(table):,} points", backend, seconds))
        same_sweep = tables["local"].equals(tables["ray"])
        samples = {}
        for backend in ("local", "ray"):
            out = Path(tmp) / f"samples-{backend}"
            seconds = timed(["run", "scenarios/gpt3.yaml", "--set", "variability.jitter.lognormal_sigma=0.02",
                             "--samples", str(args.samples), "--workers", str(args.workers), "--backend", backend,
                             "--no-plots", "--trace", "none", "--out", str(out)])
            samples[backend] = pd.read_csv(out / "samples.csv")
            rows.append((f"Monte Carlo, {args.samples:,} samples", backend, seconds))
        same_samples = samples["local"].equals(samples["ray"])
    print(f"{'case':<32} {'backend':<8} {'wall s':>8}")
    for case, backend, seconds in rows:
        print(f"{case:<32} {backend:<8} {seconds:>8.1f}")
    errors = int(tables["local"]["error"].notna().sum())
    print(f"sweep tables identical: {same_sweep} ({errors} points failed); samples identical: {same_samples}; "
          f"workers {args.workers}; "
          f"Ray at {os.environ.get('RAY_ADDRESS') or 'a local instance'}")


if __name__ == "__main__":
    main()
