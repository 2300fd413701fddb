"""How much slower a rank computes when several run at once on this CPU.

`sim3d execute` runs a process per rank, each on one thread (sim3d/executor/runtime.py). Where
the ranks outnumber the cores, or the cores are not all the machine's own (a VM's vCPUs share
the host's), their kernels slow each other down. The harness runs the executor's transformer
block of the scenario in n processes at once, in step as the ranks of a tensor-, context- or
data-parallel group are (a barrier before every micro-batch, as their collectives hold them
together), for every n in COUNTS. On the 2-vCPU VM of the committed CPU profiles a micro-batch
of two processes in step takes 1.0-1.35x as long as one alone, of three 2.5-2.8x, of four
3.5-4.2x: four busy processes share about one core's worth of the host. The same two
processes kept busy for seconds take 2.8x, which is not the rhythm of a training step.
sim3d/costs/profile_cpu.py turns the rows into a rank's slowdown.

Rows: op `block`, kind `concurrency`, `group_size` the processes running at once, seconds the
mean over micro-batches of the group's time: from the first process starting it to the last
finishing it, as a group waits for its slowest member at its next collective (a process that
gets no core until another finishes shows its wait there, not in its own timer; the clock,
CLOCK_MONOTONIC behind time.perf_counter on Linux, is the machine's, shared by the processes).
The smallest over ROUNDS sweeps is kept, so a burst from another program spoils one sweep,
not the row.
"""
from __future__ import annotations

import queue
import statistics
import time
from typing import Callable

from sim3d.costs.compute import block_shape

from .profile_io import make_row

COUNTS = {True: (1, 2, 3, 4), False: (1, 2, 3, 4, 6, 8)}  # quick, full: the tiny layouts run up to 4 ranks
ROUNDS = 2
BUDGET_S = {True: 0.3, False: 1.0}  # of one process's repeats in one measurement
TIMEOUT_S = 300.0


def measure_concurrency(scenario, dtype: str, quick: bool, progress: Callable[[str], None] | None = None,
                        counts: tuple[int, ...] | None = None) -> tuple[list[dict], str | None]:
    """Rows for each n of `counts` (default COUNTS; 1 first) processes running the scenario's
    block at once (CPU only), or ([], why not)."""
    if scenario.model.moe is not None:
        return [], "measured on dense blocks only"
    import torch.multiprocessing as mp
    say = progress or (lambda _m: None)
    counts = tuple(sorted(set(counts or COUNTS[quick]) | {1}))
    ctx = mp.get_context("spawn")
    barriers = {n: ctx.Barrier(n) for n in counts}
    commands = [ctx.Queue() for _ in range(max(counts))]
    results = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(i, scenario, dtype, barriers, commands[i], results), daemon=True)
             for i in range(max(counts))]
    for p in procs:
        p.start()
    best: dict[int, tuple[float, float]] = {}
    try:
        for r in range(ROUNDS):
            for n in counts:
                say(f"concurrency round {r + 1}/{ROUNDS}: {n} process(es) running the block at once")
                # the same number of micro-batches in every process of a measurement (they share barriers)
                per_call = sum(best.get(1, (0.0, 0.0))) or None
                reps = max(10, min(300, round(BUDGET_S[quick] / per_call))) if per_call else 20
                for i in range(n):
                    commands[i].put((n, reps))
                # from each process: (start, forward's end, end) of every micro-batch
                got = [results.get(timeout=TIMEOUT_S) for _ in range(n)]
                fwd = statistics.fmean(max(g[k][1] for g in got) - min(g[k][0] for g in got) for k in range(reps))
                bwd = statistics.fmean(max(g[k][2] for g in got) - max(g[k][1] for g in got) for k in range(reps))
                if n not in best or fwd + bwd < sum(best[n]):
                    best[n] = (fwd, bwd)
    except queue.Empty:
        return [], f"a worker gave no result within {TIMEOUT_S:.0f} s"
    finally:
        for c in commands:
            c.put(None)
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    b, s, h = scenario.training.micro_batch, scenario.model.seq_len, scenario.model.hidden
    return [make_row(op="block", kind="concurrency", **{"pass": pass_}, shape=block_shape(scenario),
                     numel=b * s * h, group_size=n, dtype=dtype, device="cpu", seconds=seconds)
            for n, times in sorted(best.items()) for pass_, seconds in zip(("fwd", "bwd"), times)], None


def _worker(index: int, scenario, dtype: str, barriers: dict, commands, results) -> None:
    import torch

    from .blocks import executor_modules
    torch.set_num_threads(1)  # as every rank of `sim3d execute`
    (block, _, _), x, _, _, _ = executor_modules(scenario, "cpu", dtype)
    for _ in range(5):  # warm-up: the allocator, the first autograd graph
        block(x).sum().backward()
    while (command := commands.get()) is not None:
        n, reps = command
        times = []
        for _ in range(reps):
            barriers[n].wait()
            x.grad = None
            t0 = time.perf_counter()
            out = block(x)
            t1 = time.perf_counter()
            torch.autograd.backward(out, torch.ones_like(out))
            times.append((t0, t1, time.perf_counter()))
        results.put(times)
