"""The executor's transformer block with its process group: tp 2 and cp 2 on this CPU.

A tensor- or context-parallel layer spends what no kernel row holds: its collectives as the
executor's gloo group runs them (a TP all-reduce after attention and after the MLP; for cp,
the ring attention's K/V exchange, one send and receive per step, and in the backward the
gradient accumulators' hops, sim3d/executor/context_parallel.py), and the Python of the ring's
blockwise attention and merges around them. On a CPU that is most of a cp layer's time (a
16 KB exchange costs about as much as the whole tp = 1 block). The harness runs the
executor's own Block in two processes joined by a gloo group, as two ranks of `sim3d execute`
run it (one thread each): micro-batches back to back, forward then backward, with no barrier
between them (their collectives hold the two in step, as in a run; a barrier per micro-batch
would add its own release skew to every one), the same count on both. A row is the median
micro-batch of each rank, averaged over the two, in the quicker of ROUNDS rounds: a gloo
exchange now and then stalls for milliseconds, which a mean would spread over every layer of
the prediction while the executed step it is compared with is the median of its steps.

Rows: op `block`, kind `block`, `group_size` 2, the shape key of the scenario at that tp and
cp (sim3d/costs/compute.py: block_shape). They were measured with two processes busy at
once, so the profile prices them relative to its concurrency rows' two-process slowdown
(sim3d/costs/profile.py: block_seconds). The smallest of ROUNDS is kept. CPU only: a GPU's
TP and cp layers are priced from kernels and NCCL rows.
"""
from __future__ import annotations

import os
import queue
import statistics
import time
from typing import Callable

from sim3d.costs.compute import block_shape

from .collectives import free_port
from .profile_io import make_row

LAYOUTS = ({"tp": 2}, {"cp": 2})  # the executor's tiny layouts with a group inside the layer
ROUNDS = 2
BUDGET_S = {True: 0.3, False: 1.0}
TIMEOUT_S = 300.0


def group_variants(scenario) -> list:
    """The scenario at each of LAYOUTS its model can be split for (heads and FFN by tp, the
    sequence in 2 cp chunks per rank), with everything else as it is."""
    m, out = scenario.model, []
    for layout in LAYOUTS:
        tp, cp = layout.get("tp", 1), layout.get("cp", 1)
        if m.heads % tp or m.num_kv_heads % tp or m.ffn % tp or m.seq_len % (2 * cp):
            continue
        parallel = scenario.parallel.model_copy(update={"tp": tp, "cp": cp, "pp": 1, "dp": 1})
        variant = scenario.model_copy(update={"parallel": parallel})
        for derived in ("stage_layers", "stage_mtp"):
            variant.__dict__.pop(derived, None)
        out.append(variant)
    return out


# A layer whose single-process forward + backward takes longer than this is not one the
# executor runs on a CPU: two processes of it would take minutes and twice its memory.
MAX_BLOCK_S = 0.5


def measure_group_blocks(scenario, dtype: str, quick: bool, progress: Callable[[str], None] | None = None,
                         alone_s: float | None = None) -> tuple[list[dict], str | None]:
    """Rows of the executor's block at tp 2 and at cp 2 (CPU, dense models), or ([], why not).
    `alone_s`: the block's forward + backward in one process, where measured (calibrate/blocks.py)."""
    if scenario.model.moe is not None:
        return [], "measured on dense blocks only"
    if alone_s is not None and alone_s > MAX_BLOCK_S:
        return [], (f"the layer takes {alone_s:.2f} s alone (forward + backward), more than the {MAX_BLOCK_S} s of "
                    "a layer the executor runs on a CPU")
    say = progress or (lambda _m: None)
    rows = []
    for variant in group_variants(scenario):
        say(f"block with its group: tp {variant.tp}, cp {variant.cp}, 2 processes (gloo)")
        best = _measure(variant, dtype, quick)
        if best is None:
            return rows, f"the tp {variant.tp} cp {variant.cp} block gave no result within {TIMEOUT_S:.0f} s"
        b, s, h = variant.training.micro_batch, variant.model.seq_len, variant.model.hidden
        rows += [make_row(op="block", kind="block", **{"pass": pass_}, shape=block_shape(variant), numel=b * s * h,
                          group_size=2, dtype=dtype, device="cpu", seconds=seconds)
                 for pass_, seconds in zip(("fwd", "bwd"), best)]
    return rows, None


def _measure(variant, dtype: str, quick: bool) -> tuple[float, float] | None:
    import torch.multiprocessing as mp
    if "GLOO_SOCKET_IFNAME" not in os.environ and os.path.exists("/sys/class/net/lo"):
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # localhost only; inherited by the workers
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_worker, args=(rank, port, variant, dtype, quick, results), daemon=True)
             for rank in range(2)]
    for p in procs:
        p.start()
    got: dict = {}
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while len(got) < len(procs) and time.monotonic() < deadline:
            try:
                rank, times = results.get(timeout=1.0)
                got[rank] = times
            except queue.Empty:
                if any(p.exitcode not in (None, 0) for p in procs):  # died without a word
                    raise RuntimeError("group block: a process exited with code "
                                       f"{next(p.exitcode for p in procs if p.exitcode not in (None, 0))}") from None
        if len(got) < len(procs):
            return None
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.kill()
    errors = {rank: times for rank, times in got.items() if isinstance(times, str)}
    if errors:  # the first rank's own error first: a peer's is often its consequence ("connection closed")
        raise RuntimeError("group block: " + "\n".join(f"rank {rank}: {text}" for rank, text in sorted(errors.items())))
    best = None
    for r in range(len(got[0])):  # each round: the median micro-batch of each rank, averaged over both
        fwd = statistics.fmean(statistics.median(t1 - t0 for t0, t1, _ in got[rank][r]) for rank in got)
        bwd = statistics.fmean(statistics.median(t2 - t1 for _, t1, t2 in got[rank][r]) for rank in got)
        if best is None or fwd + bwd < sum(best):
            best = (fwd, bwd)
    return best


def _worker(rank: int, port: int, variant, dtype: str, quick: bool, results) -> None:
    import traceback
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)  # as every rank of `sim3d execute`
    try:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                                timeout=timedelta(seconds=TIMEOUT_S))
        block, x = _block(variant, rank, dtype)

        def micro_batch() -> tuple[float, float, float]:
            x.grad = None  # a fresh received activation each micro-batch
            t0 = time.perf_counter()
            out = block(x)
            t1 = time.perf_counter()
            torch.autograd.backward(out, torch.ones_like(out))
            return t0, t1, time.perf_counter()
        for _ in range(5):  # warm-up: the allocator, the first autograd graph, the group's connections
            micro_batch()
        first, *_, last = [micro_batch() for _ in range(3)]
        reps = torch.tensor([float(min(300, max(10, round(BUDGET_S[quick] / ((last[2] - first[0]) / 3)))))])
        dist.all_reduce(reps, op=dist.ReduceOp.MAX)  # as many on both: their collectives pair one to one
        rounds = []
        for _ in range(ROUNDS):
            dist.barrier()
            rounds.append([micro_batch() for _ in range(int(reps.item()))])  # back to back, as a rank runs them
        results.put((rank, rounds))
        dist.destroy_process_group()
    except Exception:  # noqa: BLE001 - reported to the parent
        results.put((rank, traceback.format_exc()))


def _block(variant, rank: int, dtype: str):
    """The executor's layer 0 of `variant` as its `rank` of the tp or cp group builds it, and
    a received activation of that rank's shape."""
    import torch
    import torch.distributed as dist
    from sim3d.executor.context_parallel import CPContext
    from sim3d.executor.gpt import Block, GPTConfig, _Builder, activation_shape
    from sim3d.executor.optimizer import GradientsAndOptimizer
    from sim3d.executor.precision import resolve_precision
    from sim3d.executor.runtime import RunSpec
    from sim3d.executor.tensor_parallel import TPContext

    tdtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    group = dist.new_group([0, 1])  # a group of its own, as the executor makes its tp and cp groups
    tp = TPContext(variant.tp, rank % variant.tp, group if variant.tp > 1 else None,
                   variant.parallel.sequence_parallel)
    cp = CPContext(variant.cp, rank % variant.cp, group if variant.cp > 1 else None, tuple(range(variant.cp)))
    cfg = GPTConfig.of(variant)
    block = Block(_Builder(0, tp, tdtype, "cpu", cp), 0, cfg)
    precision = resolve_precision(variant.training.model_copy(update={"precision": dtype}), False)
    # the executor's gradient buffer and its hooks, as calibrate/blocks.py holds its blocks
    GradientsAndOptimizer({0: list(block.parameters())}, precision, tp, TPContext(), dist_opt=False, lr=RunSpec.lr)
    shape = activation_shape(cfg, variant.training.micro_batch, tp, variant.cp)
    return block, torch.randn(*shape, dtype=tdtype, requires_grad=True)
