"""Goodput under failures: how much of a long run's wall time trains, given how often a job of
this size is interrupted, how long a checkpoint takes to write and to read back, and how long
a restart takes; and the checkpoint interval that makes the most of it.

One interruption anywhere stops the whole synchronous job, so a job's failure rate is the sum
of its parts' (independent, exponential) rates. The interval and the expected fraction come
from the closed forms of the checkpoint/restart literature:

- Young (1974), "A first order approximation to the optimum checkpoint interval", CACM 17(9):
  tau = sqrt(2 C M) for checkpoint cost C and mean time between failures M;
- Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart dumps",
  FGCS 22(3): tau = sqrt(2 C M) (1 + sqrt(C / 2M) / 3 + (C / 2M) / 9) - C for C < 2M (else M),
  and the expected wall time of T of work, restart time R, T_w = M e^(R/M) (e^((tau+C)/M) - 1)
  T / tau, whose inverse ratio is the effective-training fraction reported here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..model.params import model_params

HOUR = 3600.0

# Llama 3 405B pre-training (Dubey et al. 2024, "The Llama 3 Herd of Models", arXiv:2407.21783,
# section 3.3.4): 419 unexpected interruptions in a 54-day snapshot on 16,384 H100 GPUs (2,048
# servers of 8), GPU issues (faulty GPUs, HBM3, SRAM, system processor, thermal, silent data
# corruption) 58.7% of them; the rest (software, network, host, NIC, power, ...) is booked per
# server here. The job held "higher than 90% effective training time".
LLAMA3_INTERRUPTIONS = 419
LLAMA3_DAYS = 54
LLAMA3_GPUS = 16_384
LLAMA3_GPUS_PER_NODE = 8
LLAMA3_GPU_SHARE = 0.587
LLAMA3_EFFECTIVE = 0.90  # "higher than 90%"
# Tectonic, the file system the Llama 3 checkpoints were written to: 2 TB/s sustained, 7 TB/s
# peak (same paper, section 3.3.1).
LLAMA3_STORAGE_BYTES_PER_S = 2e12
# Not published for Llama 3: rescheduling, process-group start and warm-up before the first
# step, on top of reading the checkpoint back (computed separately). An assumption, named as
# such wherever it is printed; --restart-minutes replaces it.
ASSUMED_RESTART_S = 600.0
# A checkpoint holds the model states of one replica: the weights in their training precision
# and the fp32 master copy and both Adam moments (12 bytes a parameter: K = 12 in Rajbhandari
# et al. 2020, "ZeRO", section 3.1); gradients are not saved.
OPTIMIZER_BYTES_PER_PARAM = 12


@dataclass(frozen=True)
class FailureModel:
    gpu_mtbf_s: float   # mean time between GPU-attributed interruptions, per GPU
    node_mtbf_s: float  # mean time between every other interruption, per server
    source: str

    def job_mtbf_s(self, gpus: int, gpus_per_node: int) -> float:
        nodes = math.ceil(gpus / gpus_per_node)
        return 1.0 / (gpus / self.gpu_mtbf_s + nodes / self.node_mtbf_s)


def llama3_failures() -> FailureModel:
    """The fleet rates that reproduce the Llama 3 report's interruptions at its own size."""
    exposure = LLAMA3_DAYS * 24 * HOUR
    gpu_events = LLAMA3_INTERRUPTIONS * LLAMA3_GPU_SHARE
    node_events = LLAMA3_INTERRUPTIONS - gpu_events
    return FailureModel(gpu_mtbf_s=LLAMA3_GPUS * exposure / gpu_events,
                        node_mtbf_s=LLAMA3_GPUS // LLAMA3_GPUS_PER_NODE * exposure / node_events,
                        source="Llama 3 405B: 419 unexpected interruptions in 54 days on 16,384 H100s, "
                               "58.7% GPU issues (arXiv:2407.21783, section 3.3.4)")


def young_interval(checkpoint_s: float, mtbf_s: float) -> float:
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval(checkpoint_s: float, mtbf_s: float) -> float:
    if checkpoint_s >= 2.0 * mtbf_s:
        return mtbf_s
    ratio = checkpoint_s / (2.0 * mtbf_s)
    return young_interval(checkpoint_s, mtbf_s) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - checkpoint_s


def effective_fraction(interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Useful work over wall time, checkpointing every `interval_s` of work (Daly's T_w); in
    logarithms where the exponentials would overflow (a restart of days against an hour's MTBF:
    the fraction is then as good as 0)."""
    x, r = (interval_s + checkpoint_s) / mtbf_s, restart_s / mtbf_s
    if x + r < 700:
        return interval_s / (mtbf_s * math.exp(r) * math.expm1(x))
    return math.exp(math.log(interval_s) - math.log(mtbf_s) - r - x)  # expm1(x) = e^x to double precision here


def checkpoint_bytes(scenario) -> float:
    weight_bytes = 4 if scenario.training.precision == "fp32" else 2  # fp8 runs keep bf16 weights
    return model_params(scenario) * (weight_bytes + OPTIMIZER_BYTES_PER_PARAM)


@dataclass(frozen=True)
class Goodput:
    gpus: int
    mtbf_s: float
    checkpoint_bytes: float
    checkpoint_s: float
    restart_s: float        # the fixed part and the checkpoint's read-back
    young_s: float
    interval_s: float       # Daly's optimum
    effective: float

    @property
    def interruptions_per_day(self) -> float:
        return 24 * HOUR / self.mtbf_s

    @property
    def hours_lost_per_day(self) -> float:
        return 24 * (1 - self.effective)

    def row(self) -> dict:
        return {"gpus": self.gpus, "mtbf_h": self.mtbf_s / HOUR, "interruptions_per_day": self.interruptions_per_day,
                "checkpoint_tb": self.checkpoint_bytes / 1e12, "checkpoint_s": self.checkpoint_s,
                "restart_s": self.restart_s, "young_interval_min": self.young_s / 60,
                "interval_min": self.interval_s / 60, "effective_fraction": self.effective,
                "hours_lost_per_day": self.hours_lost_per_day}


def goodput(scenario, gpus: int, failures: FailureModel | None = None,
            write_bytes_per_s: float = LLAMA3_STORAGE_BYTES_PER_S, read_bytes_per_s: float | None = None,
            restart_s: float = ASSUMED_RESTART_S, checkpoint_s: float | None = None) -> Goodput:
    """The run of `scenario`'s model on `gpus` GPUs (its servers' size) under `failures`.
    ValueError for a bandwidth, restart or checkpoint time that is no real cost."""
    for name, value in (("write bandwidth", write_bytes_per_s), ("read bandwidth", read_bytes_per_s or 1.0),
                        ("checkpoint time", checkpoint_s if checkpoint_s is not None else 1.0)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} {value!r}: expected a finite number above 0 (a checkpoint that costs nothing "
                             "has no optimal interval)")
    if not (math.isfinite(restart_s) and restart_s >= 0):
        raise ValueError(f"restart time {restart_s!r}: expected a finite number of 0 or more")
    failures = failures or llama3_failures()
    size = checkpoint_bytes(scenario)
    save = size / write_bytes_per_s if checkpoint_s is None else checkpoint_s
    back = restart_s + size / (read_bytes_per_s or write_bytes_per_s)
    mtbf = failures.job_mtbf_s(gpus, scenario.cluster.gpus_per_node)
    interval = daly_interval(save, mtbf)
    return Goodput(gpus, mtbf, size, save, back, young_interval(save, mtbf), interval,
                   effective_fraction(interval, save, back, mtbf))


def gpu_counts(gpus_per_node: int, low: int = 1024, high: int = 131_072) -> list[int]:
    """Powers of two from `low` to `high`, in whole servers."""
    counts, n = [], low
    while n <= high:
        counts.append(max(gpus_per_node, n // gpus_per_node * gpus_per_node))
        n *= 2
    return counts
