"""Single-process reference for `execute(..., check=True)`: the same GPT (tp=1, one chunk
holding every layer), the same initial weights, the same token stream and the same optimizer
(plain SGD), run on the whole global batch at once.

The executed run computes, per step, (1/dp) * sum over replicas of (1/m) * sum over its
micro-batches of the mean token loss; with equal-sized micro-batches that is the mean token
loss over the global batch, which is what the reference differentiates. Gradients therefore
agree up to floating-point reduction order (TP splits sums, all-reduces reorder them).

Tolerance: check runs use float64 (unit roundoff 1.1e-16). A few hundred additions per dot
product and a few optimizer steps amplify reordering differences to ~1e-13 relative in
practice (measured: ~1e-15), so 1e-9 relative leaves four orders of magnitude of head-room while any real
bug (a missing reduction, a wrong slice, a micro-batch scaled twice) gives errors of order
1e-3..1, far above it. The error of a tensor is max|a - b| / max|b| (relative to the tensor's
scale, not element-wise, so entries that happen to be ~0 cannot blow it up).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .gpt import GPTChunk, GPTConfig, sgd_step, shard, token_batch
from .tensor_parallel import TPContext

CHECK_RTOL = 1e-9


@dataclass
class ReferenceRun:
    losses: list[float]
    params: dict[str, np.ndarray]  # global name -> full final value
    grads: dict[str, np.ndarray]  # global name -> full gradient of the last step


def run_reference(scenario, steps: int, seed: int, lr: float, dtype=torch.float64) -> ReferenceRun:
    cfg = GPTConfig.of(scenario)
    model = GPTChunk(cfg, (cfg.layers,), 0, TPContext(), seed, dtype=dtype)
    losses = []
    for step in range(steps):
        tokens = token_batch(seed, step, scenario.training.global_batch, cfg)
        for p in model.parameters():
            p.grad = None
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        losses.append(float(loss.detach()))
        if step < steps - 1:
            sgd_step(model.parameters(), lr)
    grads = {p.global_name: p.grad.detach().numpy().copy() for p in model.parameters()}
    sgd_step(model.parameters(), lr)
    params = {p.global_name: p.detach().numpy().copy() for p in model.parameters()}
    return ReferenceRun(losses, params, grads)


def _rel(a: np.ndarray, b: np.ndarray, floor: float) -> tuple[float, float]:
    err = float(np.max(np.abs(a - b))) if a.size else 0.0
    scale = max(float(np.max(np.abs(b))) if b.size else 0.0, floor)
    return err, err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))


def compare_with_reference(ref: ReferenceRun, losses: list[float], shards: list[dict]) -> dict:
    """`shards`: one dict per rank {'tp_rank', 'tp', 'params': {name: (tp_dim, array)},
    'grads': {name: array}}. Every rank's shard is compared with the same slice of the
    reference, so data-parallel replicas are checked too. Returns the error summary."""
    out = {"loss_abs": 0.0, "loss_rel": 0.0, "param_abs": 0.0, "param_rel": 0.0,
           "grad_abs": 0.0, "grad_rel": 0.0, "worst": ""}
    for got, want in zip(losses, ref.losses, strict=True):
        err = abs(got - want)
        out["loss_abs"] = max(out["loss_abs"], err)
        out["loss_rel"] = max(out["loss_rel"], err / abs(want))
    # Some gradients are exactly zero in exact arithmetic (e.g. the key bias: softmax is
    # shift-invariant) and pure rounding noise in practice; measure each tensor against
    # max(its own scale, 1e-6 x the largest value of its kind) so noise on zero is not an error.
    floors = {what: 1e-6 * max(float(np.max(np.abs(v))) for v in table.values())
              for what, table in (("param", ref.params), ("grad", ref.grads))}
    seen: set[str] = set()
    worst = 0.0
    for rank_shards in shards:
        tp = TPContext(size=rank_shards["tp"], rank=rank_shards["tp_rank"])
        for name, (tp_dim, value) in rank_shards["params"].items():
            seen.add(name)
            for what, table in (("param", ref.params), ("grad", ref.grads)):
                got = value if what == "param" else rank_shards["grads"][name]
                want = shard(torch.from_numpy(table[name]), tp_dim, tp).numpy()
                if got.shape != want.shape:
                    raise AssertionError(f"{name}: shard shape {got.shape} != reference slice {want.shape}")
                err, rel = _rel(got, want, floors[what])
                out[f"{what}_abs"] = max(out[f"{what}_abs"], err)
                out[f"{what}_rel"] = max(out[f"{what}_rel"], rel)
                if rel > worst:
                    worst, out["worst"] = rel, f"{what} {name} (tp rank {tp.rank})"
    missing = sorted(set(ref.params) - seen)
    if missing:
        raise AssertionError(f"parameters never seen on any rank: {missing[:5]}")
    out["max_rel"] = max(out["loss_rel"], out["param_rel"], out["grad_rel"])
    out["passed"] = out["max_rel"] <= CHECK_RTOL
    return out
