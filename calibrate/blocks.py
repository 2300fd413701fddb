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
from .timing import STATISTICS, sync


def measure_blocks(scenario, device: str, dtype: str, quick: bool,
                   progress: Callable[[str], None] | None = None) -> tuple[list[dict], str | None]:
    """Rows for `block`, `embedding_block` and `head_block` (fwd and bwd), or ([], reason)."""
    if scenario.tp != 1 or scenario.cp != 1 or scenario.model.moe is not None:
        return [], "blocks are measured for tp = cp = 1 dense models only"
    say = progress or (lambda _m: None)
    shape = block_shape(scenario)
    block, embed, head, x, tokens, targets = executor_modules(scenario, device, dtype)
    cases = {"block": lambda: block(x), "embedding_block": lambda: embed(tokens),
             "head_block": lambda: head(x, targets)}
    b, s, h = scenario.training.micro_batch, scenario.model.seq_len, scenario.model.hidden
    rows = []
    for op, fn in cases.items():
        say(f"block {op} {shape} ({dtype}, {device})")
        fwd, bwd = _time(fn, x, device, quick)
        for pass_, seconds in (("fwd", fwd), ("bwd", bwd)):
            rows.append(make_row(op=op, kind="block", **{"pass": pass_}, shape=shape, m=b * s, n=h,
                                 k=scenario.model.ffn, numel=b * s * h, dtype=dtype, device=device, seconds=seconds))
    return rows, None


def executor_modules(scenario, device: str, dtype: str) -> tuple:
    """(layer, embedding, head, a received activation x, tokens, targets) of one micro-batch
    of the scenario as the executor builds them (tp = 1), with its gradient hooks."""
    from sim3d.executor.gpt import Block, Embedding, GPTConfig, Head, _Builder, token_batch
    from sim3d.executor.optimizer import _accumulate_main_grad
    from sim3d.executor.precision import resolve_precision
    from sim3d.executor.tensor_parallel import TPContext

    tdtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    # the gradient buffer of a run in this format (fp32 under bf16, as Megatron keeps it)
    grad_dtype = resolve_precision(scenario.training.model_copy(update={"precision": dtype}), False).dtype("grad")
    cfg = GPTConfig.of(scenario)
    builder = _Builder(0, TPContext(), tdtype, device)
    b, s, h = scenario.training.micro_batch, cfg.seq_len, cfg.hidden
    ids = token_batch(0, 0, b, cfg).to(device)
    modules = Block(builder, 0, cfg), Embedding(builder, cfg), Head(builder, cfg)
    for module in modules:
        for p in module.parameters():
            p.main_grad = torch.zeros_like(p, dtype=grad_dtype)
            p.register_post_accumulate_grad_hook(_accumulate_main_grad)
    x = torch.randn(s, b, h, device=device, dtype=tdtype, requires_grad=True)
    return (*modules, x, ids[:, :s], ids[:, 1:s + 1])


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
