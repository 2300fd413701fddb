"""Whole-block benchmarks: the executor's own transformer layer, embedding and head.

Kernel rows miss what a real layer also spends: the reshapes, transposes, masks and copies
between the GEMMs, and the framework's per-op dispatch, which on a CPU or for small models
is most of the time. Timing sim3d's executor modules at a scenario's exact shapes captures
all of it; the cost model uses these rows only for layers of exactly that shape
(`sim3d/costs/profile.py: block_seconds`) and falls back to the per-op rows otherwise.

Measured single-process, so only for tp = cp = 1 dense layers (a tensor-parallel block
needs its process group); other scenarios skip this part and say so in the provenance.
"""
from __future__ import annotations

from typing import Callable

import torch

from sim3d.costs.compute import block_shape

from .profile_io import make_row
from .timing import measure


def measure_blocks(scenario, device: str, dtype: str, quick: bool,
                   progress: Callable[[str], None] | None = None) -> tuple[list[dict], str | None]:
    """Rows for `block`, `embedding_block` and `head_block` (fwd and bwd), or ([], reason)."""
    if scenario.tp != 1 or scenario.cp != 1 or scenario.model.moe is not None:
        return [], "blocks are measured for tp = cp = 1 dense models only"
    from sim3d.executor.gpt import Block, Embedding, GPTConfig, Head, _Builder, token_batch
    from sim3d.executor.tensor_parallel import TPContext

    say = progress or (lambda _m: None)
    tdtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    cfg = GPTConfig.of(scenario)
    builder = _Builder(0, TPContext(), tdtype, device)
    b, s, h = scenario.training.micro_batch, cfg.seq_len, cfg.hidden
    shape = block_shape(scenario)
    ids = token_batch(0, 0, b, cfg).to(device)
    tokens, targets = ids[:, :s], ids[:, 1:s + 1]
    block, embed, head = Block(builder, 0, cfg), Embedding(builder, cfg), Head(builder, cfg)
    x = torch.randn(s, b, h, device=device, dtype=tdtype, requires_grad=True)
    cases = {
        "block": (lambda: block(x), [x, *block.parameters()]),
        "embedding_block": (lambda: embed(tokens), list(embed.parameters())),
        "head_block": (lambda: head(x, targets), [x, *head.parameters()]),
    }
    rows = []
    for op, (fn, inputs) in cases.items():
        say(f"block {op} {shape} ({dtype}, {device})")
        fwd = _time(lambda: fn(), device, quick)
        out = fn()
        grad = torch.randn_like(out) if out.dim() else torch.ones_like(out)
        bwd = _time(lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True), device, quick)
        for pass_, seconds in (("fwd", fwd), ("bwd", bwd)):
            rows.append(make_row(op=op, kind="block", **{"pass": pass_}, shape=shape, m=b * s, n=h, k=cfg.ffn,
                                 numel=b * s * h, dtype=dtype, device=device, seconds=seconds))
    return rows, None


def _time(fn, device: str, quick: bool) -> float:
    return measure([fn], device, warmup=3, min_repeats=5, max_repeats=20 if quick else 50,
                   budget_s=0.5 if quick else 2.0)
