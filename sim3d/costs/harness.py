"""What the calibration harness (calibrate/) records for a kernel whose time on a busy GPU the
analytical model prices: the bridge that lets a profile row check, or calibrate, the model.

Two things stand between a kernel's time inside a training step and a profile row:

* **the clock.** A training step holds the GPU at its power limit (the preset's sustained
  clock, cluster/gpus.py). The harness times each kernel in a short burst after an idle gap,
  so the first calls run at the boost clock and the clock falls as the board reaches its
  limit: a row of a kernel that runs `t` seconds reads, at its median repeat, as if the kernel
  ran `1 + a * exp(-t_median / CLOCK_TAU_S)` times faster than sustained, with `a` the gap
  between the GPU's burst figure and its sustained rate (1 / sustained_clock - 1) and
  `t_median` the busy time before the median repeat (calibrate/timing.py: warm-up calls, then
  repeats within a time budget).
* **the host.** A kernel shorter than the time PyTorch takes to issue it is timed at the
  issue rate: a row never reads less than the harness's floor for that call (its smallest
  measured row), which is the host's, not the GPU's.
"""

from __future__ import annotations

import math

# calibrate/kernels.py KernelBench: warm-up calls, repeats between MIN and MAX within a budget
# per measurement (full run, quick run)
WARMUP = {False: 3, True: 2}
MIN_REPEATS = 3
MAX_REPEATS = {False: 30, True: 15}
BUDGET_S = {False: 1.0, True: 0.3}
# Time constant of the fall from the boost clock to the power-limited clock under back-to-back
# tensor-core kernels. Calibrated: the one constant of this file fitted on the committed H100
# profile's GEMM rows (calibrate/profiles/h100-sxm5-80gb.csv; the GEMM model's other constants
# are not fitted; benchmarks/kernel_truth.py reports the fit). Physically plausible: the board
# reached 700 W "within a fraction of a second" in calibrate/profiles/h100-sxm5-80gb-study.
CLOCK_TAU_S = 0.043


def median_busy_seconds(seconds: float, quick: bool = False) -> float:
    """Busy time of the GPU before the median repeat of a kernel that runs `seconds`."""
    repeats = min(MAX_REPEATS[quick], max(MIN_REPEATS, BUDGET_S[quick] / max(seconds, 1e-9)))
    return (WARMUP[quick] + repeats / 2) * seconds


def clock_boost(gpu, precision: str, seconds: float, quick: bool = False, tau: float = CLOCK_TAU_S) -> float:
    """How much faster than at the sustained clock the harness sees a kernel that runs `seconds`
    in a training step."""
    gap = 1.0 / gpu.sustained_clock("bf16" if precision not in ("fp8",) else "fp8") - 1.0
    return 1.0 + gap * math.exp(-median_busy_seconds(seconds, quick) / tau)


def as_measured(gpu, precision: str, seconds: float, floor: float = 0.0, quick: bool = False,
                tau: float = CLOCK_TAU_S) -> float:
    """The profile row the harness would record for a kernel that runs `seconds` in a step."""
    return max(floor, seconds / clock_boost(gpu, precision, seconds, quick, tau))
