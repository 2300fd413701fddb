"""Single-process reference for `execute(..., check=True)`: the same GPT (tp=1, one chunk
holding every layer), the same initial weights, the same token stream and the same optimizer
(plain SGD), run on the whole global batch at once.

The executed run computes, per step, (1/dp) * sum over replicas of (1/m) * sum over its
micro-batches of the mean token loss; with equal-sized micro-batches that is the mean token
loss over the global batch, which is what the reference differentiates. Gradients therefore
agree up to floating-point reduction order (TP splits sums, all-reduces reorder them).

The error of a tensor is max|a - b| / max(max|b|, floor x the largest |value| of its kind)
(relative to the tensor's scale, not element-wise, so entries that happen to be ~0 cannot
blow it up). The floor exists for gradients that are zero in exact arithmetic (the key bias:
softmax is shift-invariant) or small by cancellation (query and key weights): their rounding
error is set by the larger terms that cancel, not by the sum. The loss, the final (master)
weights and the last step's gradients all count; the check passes when the largest error is
within the run's tolerance (see `tolerance`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .gpt import GPTChunk, GPTConfig, sgd_step, shard, token_batch
from .tensor_parallel import TPContext

CHECK_RTOL = 1e-9  # float64 runs (a checked fp32 scenario)
FLOAT64_FLOOR = 1e-6
SIXTEEN_BIT_FLOOR = 1e-3
# Unit roundoff u = 2^-p of a format with p significand bits (implicit bit included): the
# largest relative error of one rounding to nearest (Higham, "Accuracy and Stability of
# Numerical Algorithms", 2002, section 2.1). bf16 keeps 8 bits, fp16 11.
UNIT_ROUNDOFF = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}
REFERENCE_LAYERS = 4  # the depth the 16-bit tolerance was derived and measured at (tiny.yaml)


def tolerance(precision: str, layers: int) -> tuple[float, float]:
    """(largest relative error that passes, floor) for a run in `precision` of a model of
    `layers` layers, against the float64 reference.

    float64: unit roundoff 1.1e-16; a few hundred additions per dot product and a few
    optimizer steps amplify reordering differences to ~1e-13 in the worst case (measured
    7e-13 on the key-bias gradient, zero in exact arithmetic, ~1e-15 elsewhere), so 1e-9 leaves four orders of magnitude
    of head-room while any real bug (a missing reduction, a wrong slice, a micro-batch scaled
    twice) gives errors of order 1e-3..1.

    bf16 / fp16: every GEMM accumulates in fp32 and rounds its output once (relative error
    <= u), as do the weights themselves, the norms, the activation functions and the
    attention. A gradient of the first layer goes through about 12 such roundings per layer,
    forward and backward: ~48 for 4 layers. Independent roundings add like a random walk,
    sqrt(48) u ~ 7u for one element, and the largest of a tensor's thousands of elements sits
    in the tail of that walk. Measured on tiny.yaml (4 layers, 3 steps; GPT, SwiGLU + GQA +
    RMSNorm and squared-ReLU models; sdpa and unfused attention; tp, pp, dp, sequence
    parallelism, distributed optimizer, split-backward and V schedules; seeds 0 and 1): the
    loss within 3e-5 (an average over 256 tokens), the master weights within 1.3u (their
    initial rounding to 16 bits), the gradients within 8u (bf16) and 9.4u (fp16), the worst
    on norm weights and biases, whose gradients are sums over tokens that largely cancel.
    The tolerance is 16u: 6.25e-2 for bf16, 7.8e-3 for fp16, 1.7x the worst correct run,
    scaled by sqrt(layers / 4) for deeper models (more roundings in the walk). A broken run
    is far above it: skipping the tensor-parallel all-reduce or the data-parallel gradient
    average (the `sabotage` hooks) moves the weights after 3 steps by 0.16 of their scale
    (2.5x the bf16 tolerance, 20x fp16's) and the gradients by 1.5 (24x).
    The floor of a 16-bit run is 1e-3 of the largest value of its kind: rounding noise on
    the exactly-zero key-bias gradient measured 3e-6 of the largest gradient in bf16, and the
    last layer's query and key weight gradients (3e-4 of the largest, by cancellation) carry
    errors of up to 12u of their own scale but 1e-6 of the largest.
    """
    if precision == "float64":
        return CHECK_RTOL, FLOAT64_FLOOR
    u = UNIT_ROUNDOFF[precision]
    return 16 * u * max(1.0, (layers / REFERENCE_LAYERS) ** 0.5), SIXTEEN_BIT_FLOOR


@dataclass
class ReferenceRun:
    losses: list[float]
    params: dict[str, np.ndarray]  # global name -> full final value
    grads: dict[str, np.ndarray]  # global name -> full gradient of the last step


def run_reference(scenario, steps: int, seed: int, lr: float, dtype=torch.float64,
                  skipped_steps=(), routing: str = "topk") -> ReferenceRun:
    """`skipped_steps`: steps whose update the executed run skipped (an fp16 overflow: loss
    scaling is part of the algorithm being checked, so the reference skips them too)."""
    cfg = GPTConfig.of(scenario, routing)
    model = GPTChunk(cfg, (cfg.layers,), 0, TPContext(), seed, dtype=dtype)
    losses = []
    for step in range(steps):
        tokens = token_batch(seed, step, scenario.training.global_batch, cfg)
        for p in model.parameters():
            p.grad = None
        loss = model(tokens[:, :-1], tokens[:, 1:])
        loss.backward()
        losses.append(float(loss.detach()))
        if step < steps - 1 and step not in skipped_steps:
            sgd_step(model.parameters(), lr)
    grads = {p.global_name: p.grad.detach().numpy().copy() for p in model.parameters()}
    if steps - 1 not in skipped_steps:
        sgd_step(model.parameters(), lr)
    params = {p.global_name: p.detach().numpy().copy() for p in model.parameters()}
    return ReferenceRun(losses, params, grads)


def _rel(a: np.ndarray, b: np.ndarray, floor: float) -> tuple[float, float]:
    err = float(np.max(np.abs(a - b))) if a.size else 0.0
    scale = max(float(np.max(np.abs(b))) if b.size else 0.0, floor)
    return err, err / scale if scale > 0 else (0.0 if err == 0 else float("inf"))


def compare_with_reference(ref: ReferenceRun, losses: list[float], shards: list[dict],
                           precision: str = "float64", layers: int = REFERENCE_LAYERS) -> dict:
    """`shards`: one dict per rank {'tp_rank', 'tp', 'params': {name: (tp_dim, array)},
    'grads': {name: array}}. Every rank's shard is compared with the same slice of the
    reference, so data-parallel replicas are checked too. Returns the error summary."""
    out = {"loss_abs": 0.0, "loss_rel": 0.0, "param_abs": 0.0, "param_rel": 0.0,
           "grad_abs": 0.0, "grad_rel": 0.0, "worst": ""}
    for got, want in zip(losses, ref.losses, strict=True):
        err = abs(got - want)
        out["loss_abs"] = max(out["loss_abs"], err)
        out["loss_rel"] = max(out["loss_rel"], err / abs(want))
    rtol, floor = tolerance(precision, layers)
    floors = {what: floor * max(float(np.max(np.abs(v))) for v in table.values())
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
    out["tolerance"] = rtol
    out["passed"] = out["max_rel"] <= out["tolerance"]
    return out
