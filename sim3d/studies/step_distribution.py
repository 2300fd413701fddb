"""What N sampled steps say: the distribution's statistics with bootstrap confidence
intervals, and what the slowest samples had in common."""

from __future__ import annotations

from collections import Counter

import numpy as np

from .monte_carlo import StepSamples

STATISTICS = ("mean", "p50", "p95", "p99")
CONFIDENCE = 0.95
# resamples of the bootstrap: percentile intervals want a thousand or more (Efron &
# Tibshirani, An Introduction to the Bootstrap, 1993); fewer for large N keep the resampling
# under ~10^7 draws
BOOTSTRAP_RESAMPLES = 2000
TAIL_QUANTILE = 0.95


def _statistics(steps: np.ndarray, axis: int = -1) -> dict[str, np.ndarray]:
    q = np.quantile(steps, [0.50, 0.95, 0.99], axis=axis)
    return {"mean": steps.mean(axis=axis), "p50": q[0], "p95": q[1], "p99": q[2]}


def describe(samples: StepSamples, placement) -> dict:
    """The distribution as JSON-ready data: each statistic with its percentile-bootstrap
    interval, the deterministic step, and the tail (samples at or above the 95th percentile):
    how many slow GPUs and degraded nodes its samples drew against all samples, on which
    pipeline stages its slow GPUs sat, and which ranks ended its steps."""
    steps = samples.steps
    n = len(steps)
    point = {k: float(v) for k, v in _statistics(steps).items()}
    resamples = max(200, min(BOOTSTRAP_RESAMPLES, 10**7 // n))
    rng = np.random.default_rng([samples.seed, 2**31])  # apart from every sample's own stream
    boot = _statistics(steps[rng.integers(0, n, size=(resamples, n))], axis=1)
    low, high = (1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2
    intervals = {k: [float(np.quantile(v, low)), float(np.quantile(v, high))] for k, v in boot.items()}
    tail = np.flatnonzero(steps >= np.quantile(steps, TAIL_QUANTILE))
    slow_stage = Counter(int(placement.coords(int(g))["pp"]) for i in tail for g in samples.slow_gpus[i])
    return {
        "samples": n,
        "seed": samples.seed,
        "deterministic_step_s": samples.deterministic,
        **{f"{k}_s": point[k] for k in STATISTICS},
        "confidence": CONFIDENCE,
        "bootstrap_resamples": resamples,
        "intervals_s": intervals,
        "min_s": float(steps.min()),
        "max_s": float(steps.max()),
        "std_s": float(steps.std(ddof=1)) if n > 1 else 0.0,
        "tail": {
            "from_quantile": TAIL_QUANTILE,
            "samples": len(tail),
            "slow_gpus_per_sample": {"tail": _mean_count(samples.slow_gpus, tail),
                                     "all": _mean_count(samples.slow_gpus, range(n))},
            "flaky_nodes_per_sample": {"tail": _mean_count(samples.flaky_nodes, tail),
                                       "all": _mean_count(samples.flaky_nodes, range(n))},
            "slow_gpus_by_stage": {str(k): v for k, v in sorted(slow_stage.items())},
            "critical_ranks": {str(k): v for k, v in Counter(samples.critical_rank[tail].tolist()).most_common(5)},
        },
    }


def _mean_count(drawn: list[np.ndarray], which) -> float:
    which = list(which)
    return float(np.mean([len(drawn[i]) for i in which])) if which else 0.0


def samples_table(samples: StepSamples) -> dict[str, list]:
    """One row per sample (samples.csv): its step, the rank that ended it, what it drew."""
    return {
        "sample": list(range(len(samples.steps))),
        "step_time_s": samples.steps.tolist(),
        "critical_rank": samples.critical_rank.tolist(),
        "slow_gpus": [" ".join(map(str, g)) for g in samples.slow_gpus],
        "flaky_nodes": [" ".join(map(str, g)) for g in samples.flaky_nodes],
    }
