"""Timing primitives shared by the kernel and collective benchmarks.

* warm-up calls first (allocator, autotuning, lazy init are not measured);
* CUDA: one ``torch.cuda.Event`` pair per call, read after a single synchronize;
  CPU: ``time.perf_counter`` around each call;
* the caller passes one callable per pre-allocated input set and calls are rotated among
  them, so a small working set does not sit in cache between repeats;
* the result is the median of the repeats; the number of repeats adapts to a time budget
  (at least ``min_repeats``), so big shapes do not blow the calibration's total time.

The median keeps what a call costs when nothing interrupts it. On a CPU shared by processes the
interruptions are part of the cost: the scheduler takes the core away for whole ticks (4 ms at
Linux's CONFIG_HZ=250) and a gloo message waits for its receiver to be woken, so a share of the
calls take a tick longer. A training step pays the sum of its calls, whose expectation is the
mean, so the CPU measurements that price the executor (whole blocks, collectives) take it
(`STATISTICS`, blocks.py, collectives.py).
"""
from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

import torch


def cache_bytes(device: str) -> int:
    """Largest cache in front of memory (GPU L2, CPU last-level cache), 32 MiB if unknown."""
    if device == "cuda":
        try:
            return int(torch.cuda.get_device_properties(0).L2_cache_size)
        except Exception:  # noqa: BLE001
            return 64 << 20
    best = 0
    try:
        from pathlib import Path
        for idx in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
            txt = (idx / "size").read_text().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(txt[-1:], 1)
            best = max(best, int(txt.rstrip("KMG")) * mult)
    except (OSError, ValueError):
        pass
    return best or (32 << 20)


def num_sets(set_bytes: int, device: str, max_sets: int = 4) -> int:
    """How many input sets to rotate so that together they overflow the cache (2..max_sets)."""
    need = -(-2 * cache_bytes(device) // max(set_bytes, 1))
    return int(min(max(need, 2), max_sets))


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# what a repeated measurement keeps: "median" on a GPU, "mean" for the CPU's blocks and collectives
STATISTICS = {"median": statistics.median, "mean": statistics.fmean}


def measure(calls: Sequence[Callable[[], object]], device: str, *, warmup: int = 2,
            min_repeats: int = 3, max_repeats: int = 20, budget_s: float = 1.0, statistic: str = "median") -> float:
    """Seconds of one call, rotating among ``calls``: the `statistic` (STATISTICS) of the repeats."""
    n = len(calls)
    t0 = time.perf_counter()
    for i in range(max(warmup, 1)):
        calls[i % n]()
    sync(device)
    est = (time.perf_counter() - t0) / max(warmup, 1)
    reps = int(min(max_repeats, max(min_repeats, budget_s / max(est, 1e-9))))
    times: list[float] = []
    if device == "cuda":
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(reps)]
        for i, (a, b) in enumerate(ev):
            a.record()
            calls[i % n]()
            b.record()
        torch.cuda.synchronize()
        times = [a.elapsed_time(b) / 1e3 for a, b in ev]
    else:
        for i in range(reps):
            t = time.perf_counter()
            calls[i % n]()
            times.append(time.perf_counter() - t)
    return STATISTICS[statistic](times)
