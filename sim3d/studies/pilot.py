"""How long `sim3d plan`'s first tier would take, measured on a sample before it starts, and its
refusal when that is more than PLAN_SECONDS (scenario/limits.py): tier one's rate depends on
the model and the cluster (MoE layouts on 131,072 GPUs take seconds each, dense ones on 1,024
GPUs about a millisecond), so it is timed, not assumed (benchmarks/plan_pilot.py sets the
estimate beside the wall time)."""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable

from ..scenario.limits import PLAN_SECONDS
from .space import Layout

# Places spread over the search where a layout, then a batch of its neighbours, are priced
# first, to measure tier one's rates on this model and cluster; a layout slower than
# SLOW_LAYOUT_S alone is followed by one neighbour, not a batch.
PILOT_PLACES = 12
PILOT_BATCH = 16
SLOW_LAYOUT_S = 0.25
# the estimate after one place, then after two or more, that ends the pilot at once (x the limit)
EARLY_REFUSAL = (10.0, 2.0)


def pilot(groups: dict[tuple, list[Layout]], price: Callable[[list[Layout]], list[tuple]], workers: int,
          progress: Callable[[int], None] | None = None,
          bounded: bool = False) -> tuple[list[Layout], list[tuple], float | None]:
    """Time tier one here at PILOT_PLACES places spread over the whole search and refuse it when
    the rest would take longer than PLAN_SECONDS. At each place one layout is priced alone
    (it pays its (tp, cp, ep, pp) group's warm-up: the group's process groups placed and linked
    on this cluster, seconds at tens of thousands of GPUs), then its neighbours as one batch,
    as a worker prices them (sharing the batch's memory verdicts): a layout's own price differs
    across the space (a verdict is microseconds, an estimate of a layout that fits is not). So
    the rest costs (groups) x (warm-up) + (layouts left) x (the mean layout). This process's own
    set-up (the space, the cluster) is the caller's, paid before. `groups`: the layouts by
    (tp, cp, ep, pp), in the order the batches run them; `price(layouts)`: their rows. An estimate far over the limit
    (EARLY_REFUSAL) ends the pilot early, so such a refusal comes in seconds. `bounded`: the
    search prices only the layouts its floors let through (tier_one.py), a share the pilot
    cannot know, and each of its layouts at a rate the pilot's small batches overstate (their
    caches are cold: 2.4 ms a layout sampled against 0.06 ms a floor and 0.19 ms a priced
    layout in the search, gpt3 on 1,024 GPUs): only the early refusals apply, and the search
    checks itself on its own measured progress (tier_one.py, _bounded). Returns (the layouts
    priced, their rows, layouts a second per worker once warm)."""
    order = [layout for group in groups.values() for layout in group]  # as the batches run them
    if not order:
        return [], [], None
    step = max(2, len(order) // PILOT_PLACES)
    sample, rows, cold, batch_s, batched = [], [], [], 0.0, 0
    places = list(range(0, len(order) - 1, step))[:PILOT_PLACES] or [0]

    def timed(chunk: list[Layout]) -> float:
        nonlocal rows
        started = time.perf_counter()
        rows += price(chunk)
        sample.extend(chunk)
        if progress:
            progress(len(chunk))
        return time.perf_counter() - started

    for measured, place in enumerate(places, start=1):
        cold.append(timed(order[place:place + 1]))
        neighbours = order[place + 1:place + 1 + (1 if cold[-1] > SLOW_LAYOUT_S else PILOT_BATCH)]
        if neighbours:
            batch_s, batched = batch_s + timed(neighbours), batched + len(neighbours)
        each = batch_s / batched if batched else cold[-1]
        seconds, how = _rest_of_tier_one(len(groups), len(order) - len(sample), cold, each, batched, workers)
        if ((measured < len(places) or bounded)
                and seconds > EARLY_REFUSAL[min(measured, 2) - 1] * PLAN_SECONDS.value):
            PLAN_SECONDS.check(math.ceil(seconds), how + f", from {measured} place(s) of the search")
    if not bounded:
        PLAN_SECONDS.check(math.ceil(seconds), how)
    return sample, rows, 1.0 / max(each, 1e-6)


def _rest_of_tier_one(groups: int, rest: int, cold: list, each: float, measured: int,
                      workers: int) -> tuple[float, str]:
    warm_up = max(0.0, statistics.fmean(cold) - each)
    busy = max(1, min(workers, rest))
    seconds = (groups * warm_up + rest * each) / busy
    return seconds, (f"{rest:,} more layouts in {groups:,} (tp, cp, ep, pp) groups, at {warm_up:.2g} s to warm up "
                     f"a group and {each:.2g} s a layout (the mean of {measured or 1} over the search, measured here), "
                     f"on {busy} worker(s)")
