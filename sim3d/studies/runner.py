"""Run many simulations: a local process pool by default, Ray when asked.

Each job is (label, scenario path, overrides); a worker loads the scenario, simulates one
step and returns the summary (or the reason it could not). Results stream back in
completion order so callers can show progress and save as they go.
"""

from __future__ import annotations

import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Callable, Iterable, Iterator


def simulate_job(job: tuple[str, str, tuple[str, ...]]) -> tuple[str, dict]:
    label, path, overrides = job
    from ..api import simulate
    from ..scenario import ScenarioError
    from ..schedule import ScheduleConstraint, ScheduleError
    try:
        return label, {**simulate(path, sets=overrides).summary, "error": ""}
    except (ScenarioError, ScheduleConstraint, ScheduleError) as e:
        return label, {"error": str(e).splitlines()[-1]}


def run_jobs(jobs: list[tuple[str, str, tuple[str, ...]]], workers: int | None = None, backend: str = "local",
             on_result: Callable[[str, dict], None] | None = None) -> Iterator[tuple[str, dict]]:
    workers = workers or max(1, (os.cpu_count() or 1))
    if backend == "ray":
        yield from _run_ray(jobs, on_result)
        return
    if backend != "local":
        raise ValueError(f"--backend: expected local or ray, got {backend!r}")
    if workers == 1 or len(jobs) == 1:
        for job in jobs:
            result = simulate_job(job)
            if on_result:
                on_result(*result)
            yield result
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(simulate_job, job) for job in jobs]
        for future in as_completed(futures):
            result = future.result()
            if on_result:
                on_result(*result)
            yield result


def _run_ray(jobs: Iterable, on_result) -> Iterator[tuple[str, dict]]:
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
        result = ray.get(done[0])
        if on_result:
            on_result(*result)
        yield result
