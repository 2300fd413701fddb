"""A step's kernel time in the parts a profiler trace shows, simulated and traced, to set side
by side (`sim3d compare REPORT TRACE.json`): GEMMs, attention, the memory-bound kernels
(norms, activations, casts, copies, the loss, the embedding, gradient accumulation) and the
optimizer, on the first pipeline stage's rank, for all of its micro-batches."""

from __future__ import annotations

from collections import Counter

from ..model.ops import Dims, embedding_ops, head_ops, is_moe_layer, layer_ops, mtp_ops, stage_layer_range
from ..model.recompute import redo_fraction, stage_policies
from .compute import is_memory_bound
from .cost_model import TRACED_BLOCKS, CostModel

PARTS = ("GEMMs", "attention", "memory-bound kernels", "optimizer")
# costs/kineto.py KINDS -> the part they are in; the rest (communication, conv, unclassified)
# stay under their own kind
KIND_PARTS = {"gemm": "GEMMs", "attention": "attention", "optimizer": "optimizer",
              **{kind: "memory-bound kernels" for kind in ("elementwise", "norm", "softmax", "reduction", "index",
                                                           "memcpy", "memset", "loss", "embedding")}}


def traced_parts(kinds_s: dict) -> dict[str, float]:
    """A traced step's kernel seconds per kind (StepTruth.kinds_s) gathered into parts."""
    parts: Counter = Counter()
    for kind, seconds in kinds_s.items():
        parts[KIND_PARTS.get(kind, f"{kind} kernels")] += seconds
    return dict(parts)


def simulated_parts(scenario) -> dict[str, float]:
    """Seconds per part of one step on the first stage's rank, as the cost model prices it
    (recomputed forwards included, communication and bubbles not)."""
    from .profile import load_profile
    costs = CostModel(scenario, profile=load_profile(scenario))
    model = costs.compute_model
    outside = scenario.training.recompute  # the embedding and head: as the cost model prices them
    blocks = [("embedding", "embedding_block", embedding_ops(scenario), outside)]
    blocks += [("moe_layer" if is_moe_layer(scenario, i) else "layer", "block", layer_ops(scenario, is_moe_layer(scenario, i)),
                policy) for i, policy in stage_policies(scenario, stage_layer_range(scenario, 0))]
    if scenario.num_stages == 1:  # each multi-token-prediction module, then the model's head and theirs
        blocks += [("mtp", "mtp_block", mtp_ops(scenario), costs.mtp_recompute)] * scenario.model.mtp_layers
        blocks += [("head", "head_block", head_ops(scenario), outside)] * (1 + scenario.model.mtp_layers)
    d = Dims.of(scenario)
    parts: Counter = Counter()
    for name, block, ops, recompute in blocks:
        for op, t in zip(ops, model.block_times(ops, TRACED_BLOCKS.get(block))[0]):
            seconds = t.fwd * (1 + redo_fraction(op, recompute, d)) + t.bwd_input + t.bwd_weight
            part = ("attention" if op.attention is not None or op.name.startswith("attn_") else
                    "GEMMs" if op.gemm is not None and op.fwd_flops > 0 else
                    "memory-bound kernels" if is_memory_bound(op) else None)
            if part:
                parts[part] += seconds * scenario.num_microbatches
        parts["memory-bound kernels"] += model.memory_time(costs.accumulated_bytes(name)) * scenario.num_microbatches
    parts["optimizer"] += costs.optimizer(0, (0,))
    return {part: parts[part] for part in PARTS}
