"""How much a calibration can be trusted: its own noise, and the machine's load.

Every kernel is measured in `rounds` passes over the whole plan (kernels.py); the spread of
one kernel's per-round medians, (max - min) / min, is the noise that a profile built from the
minimum cannot show. A profile is flagged unstable, in its provenance and in every prediction
that uses it, when the spread is large for many kernels or the machine was busy.
"""

from __future__ import annotations

import os
import statistics
from collections import defaultdict

# A quiet 2-core machine repeats a kernel's median within ~5% round to round; 25% on the 90th
# percentile kernel means other work was competing for the cores.
MAX_P90_SPREAD = 0.25
# A load average above half the cores: another runnable process for every second core, which
# stalls OpenMP regions by whole scheduler ticks.
MAX_LOAD_PER_CORE = 0.5


def round_spreads(rows: list[dict]) -> dict[tuple, float]:
    """(op, pass, shape, dtype) -> (max - min) / min of its per-round medians (rows of all rounds)."""
    by_key: dict[tuple, list[float]] = defaultdict(list)
    for row in rows:
        by_key[(row["op"], row["pass"], row["shape"], row["dtype"])].append(float(row["seconds"]))
    return {k: (max(v) - min(v)) / min(v) for k, v in by_key.items() if len(v) > 1 and min(v) > 0}


def noise_summary(rows: list[dict]) -> dict:
    spreads = sorted(round_spreads(rows).items(), key=lambda kv: kv[1])
    if not spreads:
        return {"kernels": 0}
    values = [v for _, v in spreads]
    p90 = values[min(len(values) - 1, int(0.9 * len(values)))]
    return {"kernels": len(values), "median_round_spread": round(statistics.median(values), 4),
            "p90_round_spread": round(p90, 4),
            "worst": [{"op": k[0], "pass": k[1], "shape": k[2], "spread": round(v, 3)} for k, v in spreads[-3:]]}


def stability(noise: dict, loadavg_start: list[float] | None, loadavg_end: list[float] | None,
              cores: int | None = None, own_threads: int = 0) -> list[str]:
    """Reasons to distrust the profile (empty: stable). The load at the end includes the
    calibration's own `own_threads` busy threads, which are not competition."""
    cores = cores or os.cpu_count() or 1
    reasons = []
    if noise.get("p90_round_spread", 0.0) > MAX_P90_SPREAD:
        reasons.append(f"90th-percentile round-to-round spread {noise['p90_round_spread']:.0%} "
                       f"(over {MAX_P90_SPREAD:.0%}): the kernels did not repeat")
    for when, load, ours in (("start", loadavg_start, 0), ("end", loadavg_end, own_threads)):
        if load and load[0] > ours + MAX_LOAD_PER_CORE * cores:
            reasons.append(f"load average {load[0]:.1f} on {cores} cores at the {when}: other processes competed")
    return reasons
