"""`sim3d plan scenarios/gpt3.yaml --gpus 1024`: candidates considered, priced, finalists
simulated, and the whole process's wall time (issue 51's target: >= 1,000,000 candidates and
>= 100 finalists in under 60 s on the 2-core dev machine); then each tier timed on its own,
the bounded tier one beside the exhaustive one.

    python benchmarks/plan_breadth.py [--runs 3] [--space KEY=V1,V2 ...]

`--space` widens the search as `sim3d plan --space` does. The default space holds the
scenario's own shard group and the planned schedules (236,856 candidates); with every HSDP
group and every schedule it holds 1,126,308:

    python benchmarks/plan_breadth.py --space parallel.dp_shard=2,4,8,16,32,64,128,256,all \
        --space schedule=gpipe,1f1b,interleaved-1f1b,zb-h1,zb-h2,zbv,dualpipev
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "gpt3.yaml"
GPUS = 1024


def whole_process(out: Path, space: list[str]) -> tuple[float, dict]:
    start = time.perf_counter()
    extra = [arg for text in space for arg in ("--space", text)]
    done = subprocess.run([sys.executable, "-m", "sim3d", "plan", str(SCENARIO), "--gpus", str(GPUS), "--json",
                           "--out", str(out), *extra], capture_output=True, text=True, check=True)
    return time.perf_counter() - start, json.loads(done.stdout)


def tiers(space_texts: list[str]) -> dict[str, float]:
    from concurrent.futures import ProcessPoolExecutor

    from sim3d import load_scenario
    from sim3d.studies import tier_one
    from sim3d.studies.plan import simulate_finalists
    from sim3d.studies.space import Space, parse_choices
    base = load_scenario(SCENARIO)
    base.gpu
    space = Space(base, GPUS, parse_choices([], space_texts))
    times = {}
    with ProcessPoolExecutor(max_workers=2) as pool:
        t0 = time.perf_counter()
        layouts, _ = space.layouts()
        times["enumerate"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        candidates = tier_one.price(space, layouts, pool, 2, keep=100)
        times["tier one, bounded by the 100th best (2 workers, floors included)"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        simulate_finalists(SCENARIO, space, candidates, 100, pool)
        times["tier two, 100 finalists (2 workers)"] = time.perf_counter() - t0
    with ProcessPoolExecutor(max_workers=2) as pool:  # fresh workers: nothing cached from the bounded pass
        t0 = time.perf_counter()
        tier_one.price(space, layouts, pool, 2)
        times["tier one, exhaustive (2 workers)"] = time.perf_counter() - t0
    return times


def main() -> None:
    os.environ.setdefault("SIM3D_MAX_PLAN_SECONDS", str(10**8))  # a timing, not a refusal, is wanted here
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--space", action="append", default=[], metavar="KEY=V1,V2",
                        help="a dimension's values, as sim3d plan --space takes them (repeatable)")
    args = parser.parse_args()
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            wall, report = whole_process(Path(tmp) / str(i), args.space)
            walls.append(wall)
            print(f"run {i + 1}: {wall:.1f} s", flush=True)
    err = report["estimate_error"]
    print(f"\ncandidates {report['considered']:,}, priced {report['priced']:,}, fitting {report['fitting']:,}, "
          f"simulated {report['simulated']}; whole process median {statistics.median(walls):.1f} s "
          f"(min {min(walls):.1f}, max {max(walls):.1f}); estimate vs simulation: median |error| "
          f"{err['median']:.1%}, worst {err['worst']:+.1%} ({err['worst_layout']})")
    best = report["ranked"][0]
    print(f"best: tp{best['tp']} pp{best['pp']} dp{best['dp']} cp{best['cp']} vpp{best['vpp']} mb{best['micro_batch']} "
          f"{best['schedule']} {best['recompute']}: {best['step_time_s']:.2f} s")
    for name, seconds in tiers(args.space).items():
        print(f"{name}: {seconds:.1f} s")


if __name__ == "__main__":
    main()
