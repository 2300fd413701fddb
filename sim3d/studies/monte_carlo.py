"""Monte Carlo over a scenario's `variability`: N draws of one step, replayed together.

Sample k draws from its own generator, seeded (seed, k), so a sample is the same whichever
worker or chunk replays it, and `--samples 100` extends `--samples 10`. What a sample draws,
in this order: which GPUs are slow, which nodes' networks are, and one jitter factor per
compute action and TP group.

A TP group meets at the end of every compute, so its compute takes its slowest member's
time. Where the members' persistent factors are equal (nearly always), the slowest of T
jitter draws is drawn at once from the distribution of a maximum (U^(1/T) through the
inverse CDF); where they differ (a slow GPU in the group), each member is drawn.
"""

from __future__ import annotations

import itertools
import math
import os
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..costs.cost_model import CostModel
from ..cluster.topology import Topology
from ..engine.replay import ReplayOptions
from ..engine.run import replay_step
from ..engine.sampled import SampledReplay
from ..errors import ScenarioError
from ..scenario.variability import Jitter, Variability
from ..step import step_schedule

# Jitter arrays of one chunk of samples stay under this (bytes): a 16k-GPU layout's samples
# are replayed a few dozen at a time instead of all at once.
CHUNK_BYTES = 256 * 2**20


def check_sampled(scenario, samples: int | None = None) -> None:
    """ScenarioError where samples cannot be replayed; WorkLimitExceeded where `samples` of
    this step are more work than SAMPLE_WORK allows."""
    if scenario.costs.network == "flow":
        raise ScenarioError("--samples: costs.network is flow; sampled steps need the analytical network (a flow's "
                            "duration depends on the flows it meets, so the samples cannot share one replay)")
    if scenario.network_asymmetric:
        raise ScenarioError("--samples: network faults or ECMP routing make ranks of one pipeline coordinate "
                            "unlike; sampled steps need a symmetric network (variability.flaky_links draws "
                            "degraded nodes per sample instead)")
    if samples is not None:
        check_work(samples, step_schedule(scenario), scenario.dp * scenario.cp)


# What a sample costs besides its lanes' actions (its draws, its row of the step table, its
# causes), in lane-actions: 1,000,000 samples of tiny.yaml (10 lane-actions each) take 38 s and
# 0.95 GB here, ~37 us a sample, where a lane-action costs ~0.1 us (SAMPLE_WORK's note).
SAMPLE_OVERHEAD_ACTIONS = 400


def check_work(samples: int, schedule, pipelines: int) -> None:
    """WorkLimitExceeded where `samples` replays of `schedule` over `pipelines` lanes are more
    than SAMPLE_WORK allows."""
    from ..scenario.limits import SAMPLE_WORK
    actions = sum(len(actions) for actions in schedule.ranks)
    SAMPLE_WORK.check(samples * (pipelines * actions + SAMPLE_OVERHEAD_ACTIONS),
                      f"{samples:,} samples x ({pipelines:,} pipelines x {actions:,} actions + "
                      f"{SAMPLE_OVERHEAD_ACTIONS} for the sample itself)")


class _InverseCdf:
    """The jitter factor at probability u: lognormal with mean 1, or measured quantiles."""

    # the standard normal's CDF tabulated on [-8.3, 8.3] (beyond: below 1e-16, under a
    # uniform draw's resolution), inverted by interpolation
    _z = np.linspace(-8.3, 8.3, 2**15 + 1)
    _cdf = 0.5 * (1.0 + np.frompyfunc(math.erf, 1, 1)(_z / math.sqrt(2.0)).astype(np.float64))

    def __init__(self, jitter: Jitter):
        self.sigma, self.quantiles = jitter.lognormal_sigma, jitter.quantiles
        if self.quantiles is not None:
            self._p = np.linspace(0.0, 1.0, len(self.quantiles))

    def __call__(self, u: np.ndarray) -> np.ndarray:
        if self.quantiles is not None:
            return np.interp(u, self._p, self.quantiles)
        z = np.interp(u, self._cdf, self._z)
        return np.exp(self.sigma * z - 0.5 * self.sigma ** 2)


@dataclass
class _Layout:
    """Where each lane's ranks sit: what a draw needs of the placement, computed once."""
    members: np.ndarray  # (lanes, pp, tp): global ranks of each lane's TP group
    node: np.ndarray  # (GPUs,): the node (its network) of each rank
    domain: np.ndarray  # (GPUs,): the NVLink domain of each rank (traffic between domains crosses the network)
    dp_nodes: list[list[np.ndarray]]  # [pp][lane] -> nodes of the data-parallel groups the lane's members are in
    nodes: int

    @classmethod
    def of(cls, scenario, replay: SampledReplay) -> "_Layout":
        placement, topology = replay.costs.placement, replay.costs.topology
        lanes, members = replay.lanes, replay.members
        gpus = np.arange(placement.world_size)
        node, domain = gpus // scenario.gpus_per_node, gpus // topology.gpus_per_node
        groups = [np.arange(lanes)] if replay.dp_groups is None else replay.dp_groups
        dp_nodes = []
        for r in range(placement.pp):
            per_lane = [np.empty(0, dtype=np.int64)] * lanes
            for group in groups:
                ranks = members[group, r, :]  # (members, tp)
                crossing = [t for t in range(placement.tp) if len(set(domain[ranks[:, t]])) > 1]
                nodes = np.unique(node[ranks[:, crossing]]) if crossing else np.empty(0, dtype=np.int64)
                for lane in group:
                    per_lane[lane] = nodes
            dp_nodes.append(per_lane)
        return cls(members, node, domain, dp_nodes, int(node.max()) + 1)


def _slow(rng, v: Variability, gpus: int, layout: _Layout) -> np.ndarray:
    """Which GPUs a sample slows: each alone, or each node's all together."""
    if v.slow_gpus is None:
        return np.zeros(gpus, bool)
    if v.slow_gpus.scope == "node":
        return (rng.random(layout.nodes) < v.slow_gpus.fraction)[layout.node]
    return rng.random(gpus) < v.slow_gpus.fraction


class SampleDraws:
    """The factors of a chunk of samples (engine.sampled.SampleFactors), with what each drew."""

    def __init__(self, variability: Variability, stragglers: dict[int, float], replay: SampledReplay,
                 layout: _Layout, seed: int, indices: list[int]):
        self.samples = len(indices)
        pp, lanes, tp = replay.schedule.pp, replay.lanes, layout.members.shape[2]
        v = variability
        gpus = layout.node.shape[0]
        base = np.ones(gpus)
        for rank, factor in stragglers.items():
            base[rank] = factor
        self.slow_gpus: list[np.ndarray] = []
        self.flaky_nodes: list[np.ndarray] = []
        gpu_factor = np.empty((self.samples, gpus))
        node_factor = np.ones((self.samples, layout.nodes))
        jitter = [np.empty((n, self.samples, lanes)) if v.jitter else None for n in replay.computes]
        inverse = _InverseCdf(v.jitter) if v.jitter else None
        for i, k in enumerate(indices):
            rng = np.random.default_rng([seed, k])
            slow = _slow(rng, v, gpus, layout)
            flaky = (rng.random(layout.nodes) < v.flaky_links.probability if v.flaky_links
                     else np.zeros(layout.nodes, bool))
            self.slow_gpus.append(np.flatnonzero(slow))
            self.flaky_nodes.append(np.flatnonzero(flaky))
            gpu_factor[i] = np.where(slow, base * v.slow_gpus.slowdown, base) if v.slow_gpus else base
            if v.flaky_links:
                node_factor[i, flaky] = v.flaky_links.slowdown
            if inverse is not None:
                member = gpu_factor[i][layout.members]  # (lanes, pp, tp)
                for r in range(pp):
                    slowest_of_tp = rng.random((replay.computes[r], lanes)) ** (1.0 / tp)
                    jitter[r][:, i, :] = member[:, r, 0] * inverse(slowest_of_tp)
                    for lane in np.flatnonzero(member[:, r].min(axis=1) != member[:, r].max(axis=1)):
                        each = member[lane, r] * inverse(rng.random((replay.computes[r], tp)))
                        jitter[r][:, i, lane] = each.max(axis=1)
        member = gpu_factor[:, layout.members]  # (samples, lanes, pp, tp)
        self._persistent = member.max(axis=3)  # (samples, lanes, pp)
        self._jitter = jitter
        self._node_factor = node_factor
        self._layout = layout
        self._stretched = bool(stragglers) or v.slow_gpus is not None

    def compute(self, pp_rank: int):
        if self._jitter[pp_rank] is not None:
            return self._jitter[pp_rank]
        return self._persistent[:, :, pp_rank] if self._stretched else None

    def optimizer(self, pp_rank: int):
        return self._persistent[:, :, pp_rank] if self._stretched else None

    def transfer(self, pp_rank: int, peer: int):
        if not (self._node_factor != 1.0).any():
            return None
        layout = self._layout
        src, dst = layout.members[:, pp_rank, :], layout.members[:, peer, :]  # (lanes, tp)
        crossing = layout.domain[src] != layout.domain[dst]
        f = np.maximum(self._node_factor[:, layout.node[src]], self._node_factor[:, layout.node[dst]])
        return np.where(crossing, f, 1.0)  # (samples, lanes, tp)

    def data_parallel(self, pp_rank: int):
        if not (self._node_factor != 1.0).any():
            return None
        out = np.ones((self.samples, len(self._layout.dp_nodes[pp_rank])))
        for lane, nodes in enumerate(self._layout.dp_nodes[pp_rank]):
            if len(nodes):
                out[:, lane] = self._node_factor[:, nodes].max(axis=1)
        return out


@dataclass
class StepSamples:
    """N sampled steps of a scenario and what each drew; `describe()` gives the statistics."""
    deterministic: float  # the step without variability (today's answer)
    seed: int
    steps: np.ndarray
    critical_rank: np.ndarray  # per sample: the rank (TP rank 0 of its group) that ended the step
    slow_gpus: list[np.ndarray] = field(default_factory=list)
    flaky_nodes: list[np.ndarray] = field(default_factory=list)
    placement: object = None  # the scenario's cluster.placement.Placement

    def describe(self) -> dict:
        """Mean and percentiles with their confidence intervals, and the tail (step_distribution.py)."""
        from .step_distribution import describe
        return describe(self, self.placement)


class Sampler:
    """Compiles a scenario's step once; `run(indices)` replays those samples."""

    def __init__(self, scenario, seed: int):
        check_sampled(scenario)
        self.scenario, self.seed = scenario, seed
        self.variability = scenario.variability or Variability()
        self.stragglers = {f.straggler.rank: f.straggler.slowdown for f in scenario.faults if f.straggler}
        plain = scenario.model_copy(update={"faults": []})  # stragglers are drawn as factors, like slow GPUs
        costs = CostModel(plain, Topology(plain), _profile(plain), folded=False)
        self.replay = SampledReplay(step_schedule(plain), costs, ReplayOptions.of(plain))
        self.layout = _Layout.of(scenario, self.replay)

    def chunk(self, samples: int, workers: int) -> int:
        """Samples replayed at once: within CHUNK_BYTES, and about a tenth of the run (a quarter
        of a worker's share) so that progress shows, but not under 64: a walk over the actions
        costs as much for one sample as for dozens."""
        per_sample = 8 * self.replay.lanes * (sum(self.replay.computes) + 4 * self.replay.schedule.pp)
        share = math.ceil(samples / (10 if workers <= 1 else 4 * workers))
        return max(1, min(CHUNK_BYTES // per_sample, max(64, share)))

    def run(self, indices: list[int]) -> tuple[np.ndarray, np.ndarray, list, list]:
        draws = SampleDraws(self.variability, self.stragglers, self.replay, self.layout, self.seed, indices)
        steps = self.replay.run(draws)
        return steps.step_time, steps.critical_rank(), draws.slow_gpus, draws.flaky_nodes


    def trace(self, index: int) -> list:
        """The trace rows of sample `index` (as drawn in any run with this seed), one rank per
        TP group."""
        draws = SampleDraws(self.variability, self.stragglers, self.replay, self.layout, self.seed, [index])
        return self.replay.run(draws, record=True).rows


def _profile(scenario):
    if not scenario.costs.profile:
        return None
    from ..costs.profile import load_profile
    return load_profile(scenario)


_worker: Sampler | None = None


def _start_worker(scenario, seed: int) -> None:
    from ..util.lifetime import die_with_parent
    die_with_parent()
    global _worker
    _worker = Sampler(scenario, seed)


def _worker_run(indices: list[int]):
    return _worker.run(indices)


def sample_steps(scenario, samples: int, seed: int = 0, workers: int = 1, backend: str = "local",
                 deterministic: float | None = None, progress: Callable[[int], None] | None = None,
                 sampler: Sampler | None = None, sets: tuple[str, ...] | list[str] = ()) -> StepSamples:
    """`samples` draws of the scenario's step (a Scenario, a dict in the scenario format or a
    YAML path, with `sets` applied as `--set` does), in chunks; `workers` > 1 replays chunks in
    that many processes (or Ray tasks, `backend="ray"`). `deterministic`: the step without
    variability, where the caller has it. `progress(done)` after each chunk, in order.
    `sampler`: the scenario's Sampler with this seed, where the caller made one."""
    from ..api import _scenario
    scenario = _scenario(scenario, sets, {})
    if samples < 1:
        raise ScenarioError(f"--samples: {samples}; give at least 1")
    sampler = sampler or Sampler(scenario, seed)  # checks the network; the lowered step is then at hand
    check_work(samples, sampler.replay.schedule, sampler.replay.lanes)
    if deterministic is None:
        deterministic = replay_step(scenario).result.step_time
    size = sampler.chunk(samples, workers)
    chunks = (list(range(first, min(first + size, samples))) for first in range(0, samples, size))
    several = samples > size
    results, done = [], 0
    with _chunk_runner(sampler, workers if several else 1, backend) as run_chunks:
        for outcome in run_chunks(chunks):
            results.append(outcome)
            done += len(outcome[0])
            if progress:
                progress(done)
    return StepSamples(deterministic, seed, np.concatenate([r[0] for r in results]),
                       np.concatenate([r[1] for r in results]),
                       [s for r in results for s in r[2]], [n for r in results for n in r[3]],
                       sampler.replay.costs.placement)


@contextmanager
def _chunk_runner(sampler: Sampler, workers: int, backend: str):
    """A map over chunks of sample indices, results in order: in this process, a process pool
    whose workers compile the step once each, or Ray tasks (each compiles it)."""
    if backend == "ray":
        import ray
        ray.init(ignore_reinit_error=True)
        remote = ray.remote(_ray_chunk)
        scenario, seed = sampler.scenario, sampler.seed
        yield lambda chunks: _ray_in_order(ray, lambda c: remote.remote(scenario, seed, c), chunks, max(1, workers))
        return
    if workers <= 1:
        yield lambda chunks: map(sampler.run, chunks)
        return
    pool = ProcessPoolExecutor(max_workers=min(workers, os.cpu_count() or 1), initializer=_start_worker,
                               initargs=(sampler.scenario, sampler.seed))
    try:
        yield lambda chunks: pool.map(_worker_run, chunks)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _ray_chunk(scenario, seed: int, indices: list[int]):
    return Sampler(scenario, seed).run(indices)


def _ray_in_order(ray, submit, chunks: list[list[int]], workers: int):
    """At most `workers` chunks in flight; results in the chunks' order."""
    queue, pending = iter(chunks), deque()
    for chunk in itertools.islice(queue, workers):
        pending.append(submit(chunk))
    while pending:
        result = ray.get(pending.popleft())
        for chunk in itertools.islice(queue, 1):
            pending.append(submit(chunk))
        yield result
