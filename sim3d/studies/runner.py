"""Run many simulations: a local process pool by default, Ray when asked.

Each job is (label, scenario path, overrides); a worker loads the scenario, simulates one
step and returns the summary (or the reason it could not). Results stream back in
completion order so callers can show progress and save as they go.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Iterable, Iterator

from ..lifetime import die_with_parent


def simulate_job(job: tuple[str, str, tuple[str, ...]]) -> tuple[str, dict]:
    """Never raises: bad input and our own bugs alike become the point's error text."""
    label, path, overrides = job
    from ..api import simulate
    from ..scenario import ScenarioError
    from ..schedule import ScheduleConstraint, ScheduleError
    try:
        return label, {**simulate(path, sets=overrides).summary, "error": ""}
    except (ScenarioError, ScheduleConstraint, ScheduleError) as e:
        return label, {"error": str(e).splitlines()[-1]}
    except Exception as e:  # noqa: BLE001 - one broken point must not cost the others
        return label, {"error": f"internal error: {type(e).__name__}: {e}".splitlines()[0]}


def run_jobs(jobs: list[tuple[str, str, tuple[str, ...]]], workers: int | None = None,
             backend: str = "local") -> Iterator[tuple[str, dict]]:
    """(label, summary or {"error": ...}) per job, in completion order; every job yields once."""
    workers = workers or max(1, (os.cpu_count() or 1))
    if backend == "ray":
        yield from _run_ray(jobs)
        return
    if backend != "local":
        raise ValueError(f"--backend: expected local or ray, got {backend!r}")
    if workers == 1 or len(jobs) == 1:
        for job in jobs:
            yield simulate_job(job)
        return
    yield from _run_pool(jobs, workers)


def _run_pool(jobs, workers: int) -> Iterator[tuple[str, dict]]:
    """A worker that dies (out of memory, a signal) breaks the whole pool and every job in it:
    those jobs run again in a fresh pool, and a job broken twice runs alone, so that only the
    job that kills a worker by itself becomes an error row."""
    broken: dict[str, int] = {}
    pending = list(jobs)
    while pending:
        shared = [j for j in pending if broken.get(j[0], 0) < 2]
        alone = [[j] for j in pending if broken.get(j[0], 0) >= 2]
        pending = []
        for batch in ([shared] if shared else []) + alone:
            for job, result in _pool_round(batch, min(workers, len(batch))):
                if result is not None:
                    yield result
                elif len(batch) == 1 and broken.get(job[0], 0) >= 2:
                    yield job[0], {"error": "internal error: the worker process died simulating this point"}
                else:
                    broken[job[0]] = broken.get(job[0], 0) + 1
                    pending.append(job)


def _pool_round(batch, workers: int) -> Iterator[tuple[tuple, tuple[str, dict] | None]]:
    """(job, result), or (job, None) when the pool broke under it."""
    with ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent) as pool:
        futures = {pool.submit(simulate_job, job): job for job in batch}
        for future in as_completed(futures):
            try:
                yield futures[future], future.result()
            except BrokenProcessPool:
                yield futures[future], None


def _run_ray(jobs: Iterable) -> Iterator[tuple[str, dict]]:
    try:
        import ray
    except ImportError:
        raise ValueError("--backend ray: Ray is not installed (pip install 'ray[default]'), "
                         "or use --backend local") from None
    ray.init(ignore_reinit_error=True)
    remote = ray.remote(simulate_job)
    pending = [remote.remote(job) for job in jobs]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        yield ray.get(done[0])
