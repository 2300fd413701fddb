"""The scenario's `variability` section (docs/contracts.md#scenario-file): what makes one step differ from
the next, drawn anew for every sample of `sim3d run --samples N --seed S`.

* `jitter`: every compute action takes its priced time times a factor drawn for that action
  on that GPU, either lognormal with mean 1 (`lognormal_sigma`) or from measured quantiles.
* `slow_gpus`: each GPU is, for the whole step, slower by `slowdown` with probability
  `fraction` (throttling, a weak card).
* `flaky_links`: each node's network is, for the whole step, slower by `slowdown` with
  probability `probability` (a degraded NIC or cable): its pipeline transfers to other nodes
  and the data-parallel collectives of the groups it belongs to take that much longer.

A preset names one of the settings below; keys given beside it replace the preset's.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Probability = Annotated[float, Field(ge=0.0, le=1.0)]
Slowdown = Annotated[float, Field(ge=1.0, le=100.0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


# A measured jitter spreads kernel times around their price: the fastest kernels of a run are a
# few percent under it (the variation MegaScale reports, arXiv:2402.15627, is slow machines), so
# a factor below a half, or an average under 0.9, says the price is wrong, and the jitter would
# hide that (quantiles of [0.05, 1.0] made a step 48% faster).
FASTEST_JITTER = 0.5
LEAST_MEAN = 0.9


class Jitter(_Strict):
    """One of: lognormal with mean 1 and this sigma (of the log); or quantiles of the factor at
    evenly spaced probabilities from 0 to 1 (the minimum first, the maximum last), as a
    measurement gives them."""
    lognormal_sigma: float | None = Field(None, gt=0.0, le=2.0)
    quantiles: list[Annotated[float, Field(gt=0.0, le=100.0)]] | None = None

    @model_validator(mode="after")
    def _one_distribution(self):
        if (self.lognormal_sigma is None) == (self.quantiles is None):
            raise ValueError("give one of lognormal_sigma or quantiles")
        if self.quantiles is not None:
            q = self.quantiles
            if len(q) < 2:
                raise ValueError(f"quantiles: {len(q)} value(s); give at least the minimum and the maximum")
            if any(b < a for a, b in zip(q, q[1:])):
                raise ValueError(f"quantiles: {q} must not decrease (they are the factor at rising probabilities)")
            if not q[0] <= 1.0 <= q[-1]:
                # jitter spreads a kernel's time around its price; a factor that is never 1 moves every
                # kernel (0.01: a hundred times faster), which slow_gpus or a straggler says openly
                raise ValueError(f"quantiles: {q} must reach from at most 1 to at least 1 (jitter spreads kernel "
                                 "times around their price; a GPU slow throughout is slow_gpus or a straggler)")
            if q[0] < FASTEST_JITTER:
                raise ValueError(f"quantiles: {q} start below {FASTEST_JITTER}: a kernel more than "
                                 f"{1 / FASTEST_JITTER:g}x faster than its price is a wrong price, not jitter")
            mean = (sum(q) - (q[0] + q[-1]) / 2) / (len(q) - 1)  # of the piecewise-linear inverse CDF
            if mean < LEAST_MEAN:
                raise ValueError(f"quantiles: {q} average {mean:.3g}: kernels faster than their price on average "
                                 f"(below {LEAST_MEAN}) is a wrong price, not jitter; calibrate the price instead")
        return self


class SlowGpus(_Strict):
    """Each GPU (scope gpu), or each node with all its GPUs (scope node), is slow with
    probability `fraction`."""
    fraction: Probability
    slowdown: Slowdown
    scope: Literal["gpu", "node"] = "gpu"


class FlakyLinks(_Strict):
    probability: Probability  # per node and sample
    slowdown: Slowdown


# Each preset is one published measurement; docs/variability.md says what each measured and
# where it does not apply. No per-kernel jitter distribution of LLM training has been
# published that we know of, so no preset sets `jitter`.
PRESETS: dict[str, dict] = {
    # Jiang et al., "MegaScale", NSDI'24 (arXiv 2402.15627): "approximately 0.5%" of machines
    # substantially slower (section 5.1, Fig. 7); such hosts "took approximately 10% more time"
    # for the same forward computations (section 6.3). >10,000 Ampere GPUs.
    "megascale-slow-nodes": {"slow_gpus": {"fraction": 0.005, "slowdown": 1.10, "scope": "node"}},
    # Wu et al., "GREYHOUND: Hunting Fail-Slows in Hybrid-Parallel Training at Scale", ATC'25
    # (arXiv 2410.12588), section 3.2: a GPU "20% slower" by thermal throttling, GPU degradation
    # in about 0.5% of probe jobs (2 of 392, 4x H800).
    "greyhound-thermal": {"slow_gpus": {"fraction": 0.005, "slowdown": 1.20, "scope": "gpu"}},
    # Qian et al., "Alibaba HPN", SIGCOMM'24, section 2.3: 0.057% of NIC-ToR links fail each
    # month. Per node: 16 links (8 dual-port NICs, dual-ToR), each taken as down for the whole
    # month it fails in (an upper bound): 1 - (1 - 0.00057)^16 = 0.9%. A dual-ToR NIC that
    # loses one of its two ports keeps half its bandwidth: its transfers take twice as long.
    "hpn-link-failure": {"flaky_links": {"probability": 0.009, "slowdown": 2.0}},
}


class Variability(_Strict):
    preset: str | None = None
    jitter: Jitter | None = None
    slow_gpus: SlowGpus | None = None
    flaky_links: FlakyLinks | None = None

    @model_validator(mode="before")
    @classmethod
    def _expand_preset(cls, raw):
        if isinstance(raw, dict) and raw.get("preset") is not None:
            name = raw["preset"]
            if not isinstance(name, str) or name not in PRESETS:
                raise ValueError(f"unknown preset {name!r} (known: {', '.join(sorted(PRESETS))})")
            preset = PRESETS[name]
            # a key beside the preset replaces that key only: slow_gpus.slowdown keeps the fraction
            raw = {**preset, **{key: {**preset[key], **value} if isinstance(value, dict) and isinstance(
                preset.get(key), dict) else value for key, value in raw.items()}}
        return raw

    @property
    def off(self) -> bool:
        """Nothing varies: every sample is the deterministic step."""
        return self.jitter is None and self.slow_gpus is None and self.flaky_links is None
