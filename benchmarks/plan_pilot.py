"""How close plan's pilot estimate of tier one (studies/pilot.py) comes to tier one's
wall time, per scenario: the estimate, then the measured time of the whole search on this
machine's cores (minutes each; a timing, so a benchmark, not a test).

    python benchmarks/plan_pilot.py                       # the shipped cases
    python benchmarks/plan_pilot.py scenarios/gpt3.yaml 1024
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [("scenarios/llama3.1-8b.yaml", 8), ("scenarios/llama3.1-70b.yaml", 64), ("scenarios/gpt3.yaml", 1024)]


def main() -> None:
    os.environ["SIM3D_MAX_PLAN_SECONDS"] = str(10**8)
    from sim3d.scenario.load import load_scenario
    from sim3d.studies import pilot as plan_pilot, tier_one
    from sim3d.studies.space import Space
    from sim3d.util.lifetime import die_with_parent
    cases = [(sys.argv[1], int(sys.argv[2]))] if len(sys.argv) == 3 else CASES
    workers = os.cpu_count() or 1
    print(f"{'scenario':34} {'GPUs':>7} {'layouts':>9} {'estimate s':>11} {'tier one s':>11}  ({workers} workers)")
    for path, gpus in cases:
        space = Space(load_scenario(ROOT / path), gpus, {}, ())
        layouts, _ = space.layouts()
        key = tier_one.space_key(space)
        tier_one.worker_state(key, space.base, space.gpus, space.choices)
        sample, rows, rate = plan_pilot.pilot(tier_one.layout_groups(layouts), lambda chunk: tier_one.price_batch(
            (key, space.base, space.gpus, space.choices, chunk)), workers)
        rest = len(layouts) - len(sample)
        estimate = rest / rate / max(1, min(workers, rest))
        chosen = set(map(id, sample))
        started = time.perf_counter()
        with ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent) as pool:
            tier_one.price(space, [x for x in layouts if id(x) not in chosen], pool, workers, rate=rate, priced=rows)
        print(f"{path:34} {gpus:>7,} {len(layouts):>9,} {estimate:>11.0f} {time.perf_counter() - started:>11.0f}",
              flush=True)
        tier_one.WORKER.clear()


if __name__ == "__main__":
    main()
