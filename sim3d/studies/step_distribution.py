"""What N sampled steps say: the distribution's statistics with confidence intervals, and
what the slowest samples had in common.

Percentiles are numpy's default (linear interpolation between order statistics, Hyndman
and Fan's type 7). Their intervals are distribution-free: the pair of order statistics
(X_(l), X_(u)) that holds the true quantile with probability at least 95%, from the
binomial count of samples below it (David and Nagaraja, Order Statistics, 2003, section
7.1). Where too few samples lie beyond a percentile, an end of its interval is unknown
(null): p99 needs about 370 samples for both ends. The mean's interval is a percentile
bootstrap (Efron and Tibshirani, An Introduction to the Bootstrap, 1993: a thousand
resamples or more) under 1,000 samples, and the normal one of the central limit theorem
above; a bootstrap undercovers skewed mixtures at a few dozen samples, so small runs show
wide, honest-looking intervals that are still optimistic.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np

PERCENTILES = {"p50": 0.50, "p95": 0.95, "p99": 0.99}
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 2000
NORMAL_FROM = 1000  # samples: the mean's interval is the central limit theorem's from here
Z_975 = 1.959963984540054  # the standard normal's 97.5th percentile
TAIL_SHARE = 0.05  # the tail: the slowest 5% of the samples


def binomial_cdf(n: int, p: float) -> np.ndarray:
    """P(B <= k) for k = 0..n, B ~ Binomial(n, p), in log space (exact up to rounding)."""
    k = np.arange(n + 1)
    log_choose = np.concatenate([[0.0], np.cumsum(np.log((n - k[1:] + 1) / k[1:]))])
    log_pmf = log_choose + k * math.log(p) + (n - k) * math.log1p(-p)
    return np.cumsum(np.exp(log_pmf - log_pmf.max())) * math.exp(log_pmf.max())


def quantile_interval(sorted_steps: np.ndarray, q: float, confidence: float = CONFIDENCE) -> list:
    """[low, high] holding the q-quantile with probability >= `confidence`; an end is None
    where no order statistic is far enough out."""
    n = len(sorted_steps)
    if n < 2:
        return [None, None]
    cdf = binomial_cdf(n, q)
    alpha = (1 - confidence) / 2
    # X_(l) <= quantile unless fewer than l samples fall below it: P(B <= l - 1) <= alpha
    low = int(np.searchsorted(cdf, alpha, side="right"))  # the largest l with cdf[l-1] <= alpha
    # X_(u) >= quantile unless u or more fall below it: P(B <= u - 1) >= 1 - alpha
    high = int(np.searchsorted(cdf, 1 - alpha, side="left")) + 1
    return [float(sorted_steps[low - 1]) if low >= 1 else None,
            float(sorted_steps[high - 1]) if high <= n else None]


def bounded_mean(steps: np.ndarray) -> float:
    """The mean, within [min, max]: a sum of equal floats can round past them (1,000 steps of
    51.23098030755565 s average 7e-15 s more), and a summary must not show a mean above its max."""
    return float(np.clip(steps.mean(), steps.min(), steps.max()))


def mean_interval(steps: np.ndarray, seed: int) -> list:
    n = len(steps)
    if n < 2:
        return [None, None]
    if n >= NORMAL_FROM:
        half = Z_975 * steps.std(ddof=1) / math.sqrt(n)
        mean = bounded_mean(steps)
        return [mean - half, mean + half]
    rng = np.random.default_rng([seed, 2**31])  # apart from every sample's own stream
    means = steps[rng.integers(0, n, size=(BOOTSTRAP_RESAMPLES, n))].mean(axis=1)
    alpha = (1 - CONFIDENCE) / 2
    # a resample's mean lies within the samples' range; its rounded sum may not, by an ulp
    low, high = np.clip(np.quantile(means, [alpha, 1 - alpha]), steps.min(), steps.max())
    return [float(low), float(high)]


def describe(samples, placement) -> dict:
    """The distribution of `samples` (monte_carlo.StepSamples) as JSON-ready data: the mean
    and percentiles with their intervals, the deterministic step, and the tail (the slowest
    5% of the samples, at least one): how many slow GPUs and degraded nodes its samples drew
    against all samples, on which pipeline stages its slow GPUs sat, and which ranks ended
    its steps."""
    steps = samples.steps
    n = len(steps)
    ordered = np.sort(steps)
    intervals = {"mean": mean_interval(steps, samples.seed)}
    intervals.update({name: quantile_interval(ordered, q) for name, q in PERCENTILES.items()})
    tail = np.argsort(-steps, kind="stable")[:max(1, math.ceil(TAIL_SHARE * n))]
    slow_stage = Counter(int(placement.coords(int(g))["pp"]) for i in tail for g in samples.slow_gpus[i])
    return {
        "samples": n,
        "seed": samples.seed,
        "deterministic_step_s": samples.deterministic,
        "mean_s": bounded_mean(steps),
        **{f"{name}_s": float(np.quantile(steps, q)) for name, q in PERCENTILES.items()},
        "confidence": CONFIDENCE,
        "intervals_s": intervals,
        "min_s": float(ordered[0]),
        "max_s": float(ordered[-1]),
        "std_s": float(steps.std(ddof=1)) if n > 1 else 0.0,
        "distinct_steps": int(len(np.unique(steps))),
        "tail": {
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


def samples_table(samples) -> dict[str, list]:
    """One row per sample (samples.csv): its step, the rank that ended it, what it drew."""
    return {
        "sample": list(range(len(samples.steps))),
        "step_time_s": samples.steps.tolist(),
        "critical_rank": samples.critical_rank.tolist(),
        "slow_gpus": [" ".join(map(str, g)) for g in samples.slow_gpus],
        "flaky_nodes": [" ".join(map(str, g)) for g in samples.flaky_nodes],
    }
