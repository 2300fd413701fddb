"""Tier one of `sim3d plan`: a memory verdict and a step estimate for the layouts of a space, in
worker processes, one group of layouts sharing tp, cp, ep and pp at a time (so that a
worker's caches serve a whole group).

A search that keeps only the best N estimates need not price every layout: each has a floor
(`Estimator.floor`, a lower bound of its estimate read from the blocks' prices alone, cheap),
the layouts are priced in the order of their floors, and those whose floor is above the Nth
best estimate found so far are left unpriced. None of them could have been among the best N,
so the finalists are those of the exhaustive search (tests/test_plan_bounds.py).
"""

from __future__ import annotations

import heapq
import math
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import fields
from typing import Callable

import numpy as np
import pandas as pd

from ..costs.profile import load_profile
from ..model.memory import GIB, RESERVE_FIXED_BYTES, memory_report, model_state_bytes
from ..scenario.limits import PLAN_SECONDS
from .estimate import Estimate, Estimator
from .space import Layout, Space

LAYOUT_COLUMNS = [f.name for f in fields(Layout)]
CANDIDATE_COLUMNS = LAYOUT_COLUMNS + ["fits", "peak_gib", "why_not", "est_step_s", "est_pipeline_s", "est_p2p_s",
                                     "est_dp_s", "est_optimizer_s"]
NO_ESTIMATE = (None,) * 5  # a layout that does not fit, or was left unpriced

# per process: the space, its estimator, and the memory verdicts (with the model states they
# start from) already reached, which later batches of the same space share
WORKER: dict[tuple, tuple[Space, Estimator, dict, dict]] = {}


def worker_state(key: tuple, base, gpus: int, choices: dict) -> tuple[Space, Estimator, dict, dict]:
    """This process's space, estimator and verdict caches, made on its first job for that space."""
    if key not in WORKER:
        WORKER.clear()
        space = Space(base, gpus, choices)
        WORKER[key] = (space, Estimator(space, load_profile(base)), {}, {})
    return WORKER[key]


def space_key(space: Space) -> tuple:
    return space.base.model_dump_json(), space.gpus, repr(sorted(space.choices.items()))


def price_batch(args: tuple) -> list[tuple]:
    """Memory verdict and estimate of a batch of layouts (in a worker process), as rows of
    CANDIDATE_COLUMNS (tuples: 100,000 of them cross a process boundary)."""
    key, base, gpus, choices, layouts = args
    space, estimator, memory, states = worker_state(key, base, gpus, choices)
    hbm = base.gpu.hbm_gib * GIB
    rows = []
    for layout in layouts:
        scenario = None
        # order and TP overlap change neither what a rank holds nor when
        mem_key = (layout.tp, layout.pp, layout.dp, layout.cp, layout.ep, layout.vpp, layout.micro_batch,
                   layout.schedule, layout.recompute, layout.sequence_parallel, layout.zero, layout.dp_shard)
        if mem_key not in memory:
            scenario = space.scenario(layout)
            # the model states depend on fewer fields: a layout whose states alone overflow
            # rules out every micro-batch, recompute and SP choice with the same states
            states_key = mem_key[:6] + (layout.schedule, layout.zero, layout.dp_shard)
            if states_key not in states:
                states[states_key] = model_state_bytes(scenario) + RESERVE_FIXED_BYTES
            memory[mem_key] = _memory_verdict(scenario, states[states_key], hbm)
        fits, peak, why = memory[mem_key]
        if fits:
            est: Estimate = estimator.estimate(layout, scenario or space.scenario(layout))
            rows.append(layout.values() + (fits, peak, why, est.step_s, est.pipeline_s, est.p2p_s, est.dp_s,
                                           est.optimizer_s))
        else:
            rows.append(layout.values() + (fits, peak, why) + NO_ESTIMATE)
    return rows


def floor_batch(args: tuple) -> list[float]:
    """The floor of each layout of a batch (in a worker process): a lower bound of its estimate."""
    key, base, gpus, choices, layouts = args
    estimator = worker_state(key, base, gpus, choices)[1]
    return [estimator.floor(layout) for layout in layouts]


def _memory_verdict(scenario, states: float, hbm: float) -> tuple[bool, float, str]:
    """(fits, peak GiB, why not) given the fullest rank's model states + reserve: the whole
    peak only where those fit (they are a lower bound of the peak, and enough for the verdict)."""
    if states > hbm:
        return False, states / GIB, f"model states + reserve {states / GIB:.1f} GiB > {hbm / GIB:g}"
    report = memory_report(scenario, check_schedule=False)
    if report.fits:
        return True, report.peak_gib, ""
    return False, report.peak_gib, f"peak {report.peak_gib:.1f} GiB > {hbm / GIB:g} (pipeline rank {report.worst.rank})"


# A batch is what a worker prices between two progress updates: a few seconds of work.
SECONDS_PER_BATCH = 2.0
# A bounded search prices its layouts in chunks of a four-hundredth of the space (within these
# bounds), CHUNKS_PER_WAVE at a time, and tightens its bound between waves.
BOUNDED_CHUNK = (50, 2000)
CHUNKS_PER_WAVE = 16
# the share of the floors after which a bounded search extrapolates their time (PLAN_SECONDS)
FLOORS_CHECKED_AT = 0.1


def batches(layouts: list[Layout], workers: int, rate: float | None = None) -> list[list[Layout]]:
    """Layouts grouped by (tp, cp, ep, pp), the groups dealt into batches of similar size:
    enough batches to show progress and balance the workers, few enough to keep caches warm.
    With the measured `rate` (layouts a second per worker), no batch holds more than
    SECONDS_PER_BATCH of work, so progress shows within seconds."""
    target = max(1, math.ceil(len(layouts) / max(8 * workers, 1)))
    if rate:
        target = max(1, min(target, int(rate * SECONDS_PER_BATCH)))
    out, current = [], []
    for group in layout_groups(layouts).values():
        for start in range(0, len(group), target):
            current += group[start:start + target]
            if len(current) >= target:
                out.append(current)
                current = []
    if current:
        out.append(current)
    return out


def layout_groups(layouts: list[Layout]) -> dict[tuple, list[Layout]]:
    """Layouts by (tp, cp, ep, pp): the ones that share a worker's priced group links."""
    groups: dict[tuple, list[Layout]] = {}
    for layout in layouts:
        groups.setdefault((layout.tp, layout.cp, layout.ep, layout.pp), []).append(layout)
    return groups


def price(space: Space, layouts: list[Layout], pool: ProcessPoolExecutor | None = None, workers: int = 1,
          progress: Callable[[int], None] | None = None, rate: float | None = None,
          priced: list[tuple] = (), keep: int | None = None,
          bounding: Callable[[int], None] | None = None) -> pd.DataFrame:
    """Tier one over `layouts`: a row each, in `pool`'s `workers` processes (no pool: here).
    `priced`: rows of layouts already priced (the pilot's), which `layouts` leaves out. With
    `keep`, only what the best `keep` estimates need is priced (the module's docstring); the
    other rows say why they were not. `progress(n)`: n more layouts priced or left out;
    `bounding(n)`: n more floors."""
    key = space_key(space)
    rows: list[tuple] = list(priced)
    if keep is not None and (priced or keep < 1):
        raise ValueError("a bounded search keeps at least one estimate, and prices every layout it needs itself")
    if keep is None:
        jobs = [(key, space.base, space.gpus, space.choices, batch) for batch in batches(layouts, workers, rate)]
        for done, job in completed(pool, price_batch, jobs):
            rows += done
            if progress:
                progress(len(job[-1]))
    else:
        rows += _bounded(space, key, layouts, pool, workers, progress, keep, bounding)
    frame = pd.DataFrame.from_records(rows, columns=CANDIDATE_COLUMNS)
    if frame["fits"].isna().any():  # layouts left unpriced: neither fitting nor not
        frame["fits"] = frame["fits"].astype("boolean")
    # equal estimates in layout order, not in the order the workers finished them: the
    # finalists are the head of this table, and must not change from one run to the next
    keys = ["fits", "est_step_s", *LAYOUT_COLUMNS]
    return frame.sort_values(keys, ascending=[False] + [True] * (len(keys) - 1), kind="stable").reset_index(drop=True)


def _bounded(space: Space, key: tuple, layouts: list[Layout], pool: ProcessPoolExecutor | None, workers: int,
             progress: Callable[[int], None] | None, keep: int,
             bounding: Callable[[int], None] | None) -> list[tuple]:
    """Rows of `layouts` priced in the order of their floors until the next floor is above the
    slowest of the best `keep` estimates, and of the rest unpriced. Refused (PLAN_SECONDS) on its
    own measured progress: once a round of the workers' batches, and a tenth of the floors, say
    the floors alone would pass the limit, and, before a second wave, once the first wave's rate
    times the layouts still under its bound would."""
    base, gpus, choices = space.base, space.gpus, space.choices
    at = {id(layout): i for i, layout in enumerate(layouts)}  # a batch's layouts are these objects
    floors = np.empty(len(layouts))
    jobs = [(key, base, gpus, choices, batch) for batch in batches(layouts, workers)]
    started, floored, returned, checked = time.perf_counter(), 0, 0, False
    for done, job in completed(pool, floor_batch, jobs):
        floors[[at[id(layout)] for layout in job[-1]]] = done
        floored, returned = floored + len(done), returned + 1
        # the workers' first batches end together: extrapolate from a round of them, not part of one
        if (not checked and returned >= workers and floored >= FLOORS_CHECKED_AT * len(layouts)
                and floored < len(layouts)):
            checked = True  # the floors alone, at the rate measured so far
            elapsed = time.perf_counter() - started
            PLAN_SECONDS.check(math.ceil(elapsed * len(layouts) / floored),
                               f"the floors of {len(layouts):,} layouts, {floored:,} done in {elapsed:.1f} s")
        if bounding:
            bounding(len(done))
    # by floor, equal floors in layout order: numbers sorted, not a million layouts compared
    rank = np.empty(len(layouts), dtype=np.int64)
    rank[sorted(range(len(layouts)), key=layouts.__getitem__)] = np.arange(len(layouts))
    order = np.lexsort((rank, floors))
    ordered, floors = [layouts[i] for i in order.tolist()], floors[order]
    # chunks and waves of a fixed size, and the bound updated between waves only: which layouts
    # are priced depends on the space alone, not on the workers, their speed or their order
    size = min(BOUNDED_CHUNK[1], max(BOUNDED_CHUNK[0], len(ordered) // 400))
    chunks = [ordered[i:i + size] for i in range(0, len(ordered), size)]
    best: list[float] = []  # the `keep` best estimates so far, as a max-heap (negated)
    step = CANDIDATE_COLUMNS.index("est_step_s")

    def bound() -> float:
        return -best[0] if len(best) == keep else math.inf

    rows: list[tuple] = []
    next_chunk, waves = 0, 0
    while True:
        if waves == 1:  # once: the bound only tightens, so no later wave can need more
            left = sum(len(chunks[i]) for i in range(next_chunk, len(chunks)) if floors[i * size] <= bound())
            if left:
                _check_the_rest(started, wave_started, len(rows), left)
        wave_started, waves = time.perf_counter(), waves + 1
        wave = []
        while (next_chunk < len(chunks) and len(wave) < CHUNKS_PER_WAVE
               and floors[next_chunk * size] <= bound()):
            wave.append((key, base, gpus, choices, chunks[next_chunk]))
            next_chunk += 1
        if not wave:
            break
        for done, _ in completed(pool, price_batch, wave):
            rows += done
            for row in done:
                if row[step] is not None:
                    heapq.heappush(best, -row[step])
                    if len(best) > keep:
                        heapq.heappop(best)
            if progress:
                progress(len(done))
    left = [layout for chunk in chunks[next_chunk:] for layout in chunk]
    if left:
        why = (f"not priced: its floor (a lower bound of its estimate) is above the slowest of the {keep:,} "
               f"best estimates ({bound():.4g} s)")
        rows += [layout.values() + (None, None, why) + NO_ESTIMATE for layout in left]
        if progress:
            progress(len(left))
    return rows


def _check_the_rest(started: float, wave_started: float, priced: int, left: int) -> None:
    """Refuse a bounded search whose first wave (`priced` layouts) says the rest would pass
    PLAN_SECONDS: at most the `left` layouts of the chunks still under the bound, at the first
    wave's rate (an estimate: later chunks may reach groups whose caches are cold)."""
    now = time.perf_counter()
    each = (now - wave_started) / max(priced, 1)
    PLAN_SECONDS.check(math.ceil(now - started + left * each),
                       f"{now - started:.1f} s for the floors and {priced:,} layouts, then at most {left:,} more "
                       f"under the bound at {each:.2g} s each (the first wave's rate)")


def completed(pool: ProcessPoolExecutor | None, fn, jobs: list):
    """(fn(job), job) as each finishes: in `pool`, or here in order."""
    if pool is None:
        for job in jobs:
            yield fn(job), job
        return
    futures = {pool.submit(fn, job): job for job in jobs}
    for future in as_completed(futures):
        yield future.result(), futures[future]
