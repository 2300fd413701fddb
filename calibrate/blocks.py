"""Whole-block benchmarks: the executor's own transformer layer, embedding and head.

Kernel rows miss what a real layer also spends: the reshapes, transposes, masks and copies
between the GEMMs, and the framework's per-op dispatch, which on a CPU or for small models
is most of the time. Timing sim3d's executor modules at a scenario's exact shapes captures
all of it; the cost model uses these rows only for layers of exactly that shape
(`sim3d/costs/profile.py: block_seconds`) and falls back to the per-op rows otherwise.

Each block runs as a rank of `sim3d execute` runs it (sim3d/executor/runtime.py): a forward,
then `torch.autograd.backward` from the output's gradient into the parameters' `.grad`, which
the executor's post-accumulate hook adds into `main_grad` (sim3d/executor/optimizer.py) in the
run's gradient format. Forward and backward are timed in each repeat, on that repeat's graph.
On a CPU the rows keep the mean of the repeats (timing.py says why), on a GPU the median.

Each block's parameters also get the executor's own optimizer step and the host copies around
a bucket's data-parallel all-reduce (sim3d/executor/optimizer.py: `step`, `flatten_grads` and
`average_back`): rows of kind `optimizer`, ops `<block>.step` and `<block>.grad_copies`. The
executor steps every parameter tensor on its own, so on a CPU these cost a dispatch per tensor
that the byte count of an optimizer kernel (sim3d/costs/optimizer_step.py) does not see.

Measured single-process, so only for tp = cp = 1 dense layers; other scenarios skip this part
and say so in the provenance. On a CPU, calibrate/group_blocks.py measures the same block at
tp 2 and cp 2 with its process group.
"""
from __future__ import annotations

import time
from typing import Callable

import torch

from sim3d.costs.compute import block_shape

from .profile_io import make_row
from .timing import STATISTICS, measure, sync


def measure_blocks(scenario, device: str, dtype: str, quick: bool,
                   progress: Callable[[str], None] | None = None) -> tuple[list[dict], str | None]:
    """Rows for `block`, `embedding_block` and `head_block` (fwd and bwd), or ([], reason)."""
    if scenario.tp != 1 or scenario.cp != 1 or scenario.model.moe is not None:
        return [], "blocks are measured for tp = cp = 1 dense models only"
    say = progress or (lambda _m: None)
    shape = block_shape(scenario)
    (block, embed, head), x, tokens, targets, optimizers = executor_modules(scenario, device, dtype)
    cases = {"block": (lambda: block(x), block), "embedding_block": (lambda: embed(tokens), embed),
             "head_block": (lambda: head(x, targets), head)}
    b, s, h = scenario.training.micro_batch, scenario.model.seq_len, scenario.model.hidden
    rows = []
    for op, (fn, module) in cases.items():
        say(f"block {op} {shape} ({dtype}, {device})")
        fwd, bwd = _time(fn, x, device, quick)
        for pass_, seconds in (("fwd", fwd), ("bwd", bwd)):
            rows.append(make_row(op=op, kind="block", **{"pass": pass_}, shape=shape, m=b * s, n=h,
                                 k=scenario.model.ffn, numel=b * s * h, dtype=dtype, device=device, seconds=seconds))
        opt, params = optimizers[module], list(module.parameters())
        numel = sum(p.numel() for p in params)
        for what, call in (("step", opt.step), ("grad_copies", lambda: opt.average_back(opt.flatten_grads(params), params))):
            seconds = measure([call], device, warmup=3, min_repeats=5, max_repeats=200 if quick else 1000,
                              budget_s=0.1 if quick else 0.5, statistic="mean" if device == "cpu" else "median")
            rows.append(make_row(op=f"{op}.{what}", kind="optimizer", shape=shape, numel=numel, dtype=dtype,
                                 device=device, seconds=seconds))
    return rows, None


def executor_modules(scenario, device: str, dtype: str) -> tuple:
    """((layer, embedding, head), a received activation x, tokens, targets, {module: its
    optimizer}) of one micro-batch of the scenario as the executor builds them (tp = 1): each
    module's parameters held by the executor's GradientsAndOptimizer, whose gradient hooks add
    every backward into `main_grad` in the run's gradient format (fp32 under bf16)."""
    from sim3d.executor.gpt import Block, Embedding, GPTConfig, Head, _Builder, token_batch
    from sim3d.executor.optimizer import GradientsAndOptimizer
    from sim3d.executor.precision import resolve_precision
    from sim3d.executor.runtime import RunSpec
    from sim3d.executor.tensor_parallel import TPContext

    tdtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    precision = resolve_precision(scenario.training.model_copy(update={"precision": dtype}), False)
    cfg = GPTConfig.of(scenario)
    builder = _Builder(0, TPContext(), tdtype, device)
    b, s, h = scenario.training.micro_batch, cfg.seq_len, cfg.hidden
    ids = token_batch(0, 0, b, cfg).to(device)
    modules = Block(builder, 0, cfg), Embedding(builder, cfg), Head(builder, cfg)
    optimizers = {m: GradientsAndOptimizer({0: list(m.parameters())}, precision, TPContext(), TPContext(),
                                           dist_opt=False, lr=RunSpec.lr) for m in modules}
    x = torch.randn(s, b, h, device=device, dtype=tdtype, requires_grad=True)
    return modules, x, ids[:, :s], ids[:, 1:s + 1], optimizers


def _time(fn, x: torch.Tensor, device: str, quick: bool) -> tuple[float, float]:
    """(forward, backward) seconds of `fn`: warm-up, then repeats within a time budget."""
    budget, warmup, most = (0.5, 3, 200) if quick else (2.0, 5, 1000)
    fwd, bwd, spent = [], [], 0.0
    for i in range(warmup + most):
        x.grad = None  # a fresh received activation each micro-batch
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        t1 = time.perf_counter()
        torch.autograd.backward(out, torch.ones_like(out) if out.dim() else None)
        sync(device)
        t2 = time.perf_counter()
        if i >= warmup:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
            spent += t2 - t0
            if spent > budget and len(fwd) >= 5:
                break
    stat = STATISTICS["mean" if device == "cpu" else "median"]
    return stat(fwd), stat(bwd)
