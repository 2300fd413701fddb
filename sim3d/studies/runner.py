"""Run many simulations: a local process pool by default, Ray when asked.

Each job is (label, scenario path, overrides); a worker loads the scenario, simulates one
step and returns the summary (or the reason it could not). Results stream back in
completion order so callers can show progress and save as they go.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures import TimeoutError as WaitedTooLong  # the builtin only from Python 3.11
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Iterable, Iterator

from ..util.lifetime import die_with_parent, is_stopped


# Not a property of the point (another job's memory, a signal): `--resume` runs such rows again.
WORKER_DIED = "internal error: the worker process died simulating this point"
# How often a pool waiting for its points looks for a stopped worker (SIGSTOP): one never
# finishes and never dies, so it would hold the sweep forever
STOPPED_POLL_S = 5.0


def simulate_job(job: tuple[str, str, tuple[str, ...]]) -> tuple[str, dict]:
    """Never raises: bad input and our own bugs alike become the point's error text."""
    label, path, overrides = job
    from ..api import simulate
    from ..errors import ScenarioError
    from ..schedule import ScheduleConstraint, ScheduleError
    try:
        return label, {**simulate(path, sets=overrides).summary, "error": ""}
    except (ScenarioError, ScheduleConstraint, ScheduleError) as e:
        return label, {"error": str(e).splitlines()[-1]}
    except Exception as e:  # noqa: BLE001 - one broken point must not cost the others
        return label, {"error": f"internal error: {type(e).__name__}: {e}".splitlines()[0]}


def check_backend(backend: str) -> None:
    """ValueError unless `backend` can run here (called before any work starts)."""
    if backend not in ("local", "ray"):
        raise ValueError(f"--backend: expected local or ray, got {backend!r}")
    if backend == "ray" and importlib.util.find_spec("ray") is None:
        raise ValueError("--backend ray: Ray is not installed (pip install 'ray[default]'), or use --backend local")


def run_jobs(jobs: list[tuple[str, str, tuple[str, ...]]], workers: int | None = None,
             backend: str = "local") -> Iterator[tuple[str, dict]]:
    """(label, summary or {"error": ...}) per job, in completion order; every job yields once."""
    check_backend(backend)
    workers = workers or max(1, (os.cpu_count() or 1))
    if backend == "ray":
        yield from _run_ray(jobs, workers)
        return
    if workers == 1 or len(jobs) == 1:
        for job in jobs:
            yield simulate_job(job)
        return
    yield from _run_pool(jobs, workers)


def _run_pool(jobs, workers: int) -> Iterator[tuple[str, dict]]:
    """A worker that dies (out of memory, a signal) breaks the whole pool and every job in it:
    those jobs run again in a fresh pool; a job broken twice runs in a pool of its own (up to
    `workers` such pools at once), so that only the job that kills a worker by itself becomes
    an error row."""
    broken: dict[str, int] = {}
    pending = list(jobs)
    while pending:
        shared = [j for j in pending if broken.get(j[0], 0) < 2]
        suspects = [j for j in pending if broken.get(j[0], 0) >= 2]
        pending = []
        rounds = [_pool_round(shared, min(workers, len(shared)))] if shared else []
        for job, result in itertools.chain(*rounds, _isolated(suspects, workers)):
            if result is not None:
                yield result
            elif broken.get(job[0], 0) >= 2:
                yield job[0], {"error": WORKER_DIED}
            else:
                broken[job[0]] = broken.get(job[0], 0) + 1
                pending.append(job)


def _pool_round(batch, workers: int) -> Iterator[tuple[tuple, tuple[str, dict] | None]]:
    """(job, result), or (job, None) when the pool broke under it. Leaving early (Ctrl-C, an
    error while saving a row) cancels the queued jobs and stops the workers at once."""
    pool = ProcessPoolExecutor(max_workers=workers, initializer=die_with_parent)
    finished = False
    try:
        futures = {}
        for job in batch:
            try:
                futures[pool.submit(simulate_job, job)] = job
            except BrokenProcessPool:  # a job already submitted killed its worker
                yield job, None
        yield from _outcomes(futures, [pool])
        finished = True
    finally:
        _close(pool, finished)


def _isolated(jobs, workers: int) -> Iterator[tuple[tuple, tuple[str, dict] | None]]:
    for first in range(0, len(jobs), workers):
        group = jobs[first:first + workers]
        pools = [ProcessPoolExecutor(max_workers=1, initializer=die_with_parent) for _ in group]
        finished = False
        try:
            yield from _outcomes({pool.submit(simulate_job, job): job for pool, job in zip(pools, group)}, pools)
            finished = True
        finally:
            for pool in pools:
                _close(pool, finished)


def _outcomes(futures: dict, pools: list) -> Iterator[tuple[tuple, tuple[str, dict] | None]]:
    """(job, result) as futures complete; None for a job whose pool broke under it. A worker
    found stopped is killed, which breaks its pool like any other death of a worker."""
    pending = set(futures)
    while pending:
        try:
            for future in as_completed(pending, timeout=STOPPED_POLL_S):
                pending.discard(future)
                try:
                    yield futures[future], future.result()
                except BrokenProcessPool:
                    yield futures[future], None
        except WaitedTooLong:
            for pool in pools:
                for process in list((getattr(pool, "_processes", None) or {}).values()):
                    if is_stopped(process.pid):
                        process.kill()


def _close(pool: ProcessPoolExecutor, finished: bool) -> None:
    if finished:
        pool.shutdown(wait=True)
        return
    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in workers:
        process.terminate()


def _run_ray(jobs: Iterable, workers: int) -> Iterator[tuple[str, dict]]:
    """Jobs on a Ray cluster, at most `workers` in flight. Workers on other machines cannot
    read this machine's files, so each job carries the scenario's contents, not its path
    (a calibration profile it names must still exist where the workers run)."""
    import ray

    from ..scenario.load import read_scenario_yaml
    ray.init(ignore_reinit_error=True)
    remote = ray.remote(simulate_job)
    contents: dict[str, dict] = {}
    queue = []
    for label, source, overrides in jobs:
        if isinstance(source, str):
            source = contents.setdefault(source, read_scenario_yaml(Path(source)))
        queue.append((label, source, overrides))
    labels, pending = {}, []
    while queue or pending:
        while queue and len(pending) < workers:
            job = queue.pop(0)
            ref = remote.remote(job)
            labels[ref] = job[0]
            pending.append(ref)
        done, pending = ray.wait(pending, num_returns=1)
        try:
            yield ray.get(done[0])
        except Exception as e:  # noqa: BLE001 - a lost task or worker is that point's error row
            yield labels[done[0]], {"error": f"internal error: {type(e).__name__}: {e}".splitlines()[0]}
