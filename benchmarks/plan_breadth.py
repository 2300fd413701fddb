"""`sim3d plan scenarios/gpt3.yaml --gpus 1024`: candidates considered, finalists simulated,
and the whole process's wall time (issue 14's target: >= 100,000 candidates and >= 100
finalists in under 60 s on the 2-core dev machine); then each tier timed on its own.

    python benchmarks/plan_breadth.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def whole_process(out: Path) -> tuple[float, dict]:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "sim3d", "plan", str(ROOT / "scenarios" / "gpt3.yaml"), "--gpus", "1024",
                           "--json", "--out", str(out)], capture_output=True, text=True, check=True)
    return time.perf_counter() - start, json.loads(done.stdout)


def tiers() -> dict[str, float]:
    from concurrent.futures import ProcessPoolExecutor

    from sim3d import load_scenario
    from sim3d.studies.plan import price, simulate_finalists
    from sim3d.studies.space import Space
    path = ROOT / "scenarios" / "gpt3.yaml"
    base = load_scenario(path)
    base.gpu
    space = Space(base, 1024, {})
    with ProcessPoolExecutor(max_workers=2) as pool:
        t0 = time.perf_counter()
        layouts, _ = space.layouts()
        t1 = time.perf_counter()
        candidates = price(space, layouts, pool, 2)
        t2 = time.perf_counter()
        simulate_finalists(path, space, candidates, 100, pool)
        t3 = time.perf_counter()
    return {"enumerate": t1 - t0, "tier one (2 workers)": t2 - t1, "tier two, 100 finalists (2 workers)": t3 - t2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            wall, report = whole_process(Path(tmp) / str(i))
            walls.append(wall)
            print(f"run {i + 1}: {wall:.1f} s", flush=True)
    err = report["estimate_error"]
    print(f"\ncandidates {report['considered']:,}, fitting {report['fitting']:,}, simulated {report['simulated']}; "
          f"whole process median {statistics.median(walls):.1f} s (min {min(walls):.1f}, max {max(walls):.1f}); "
          f"estimate vs simulation: median |error| {err['median']:.1%}, worst {err['worst']:+.1%} ({err['worst_layout']})")
    best = report["ranked"][0]
    print(f"best: tp{best['tp']} pp{best['pp']} dp{best['dp']} cp{best['cp']} vpp{best['vpp']} mb{best['micro_batch']} "
          f"{best['schedule']} {best['recompute']}: {best['step_time_s']:.2f} s")
    for name, seconds in tiers().items():
        print(f"{name}: {seconds:.1f} s")


if __name__ == "__main__":
    main()
