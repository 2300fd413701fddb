"""The memory-bound kernels of a traced step, as the rate a layer and the head ran them at.

A stack's norms, activations, rotary embeddings, casts, copies and its loss are many small
kernels whose number and speed depend on the stack's own code (an eager Hugging Face Llama
layer launches ~60 of them, a compiled one ~10; PyTorch's strided and dtype-casting
elementwise kernels run at a third of the HBM bandwidth its contiguous ones reach). sim3d
counts their bytes (model/kernel_stack.py); the trace times them. With the scenario the trace
ran, `memory_rows` divides the one by the other: rows `layer.memory` and `head.memory`
(pass fwd / bwd) whose `bytes` are sim3d's count for one layer (the head) and one micro-batch
and whose `seconds` are what the traced step spent on them, so that `Profile.block_memory_rate`
prices every layout's memory-bound ops at the traced stack's rate (costs/compute.py,
`ComputeModel.block_times`).

Which traced kernels count: every memory-bound kind (costs/kineto.py: elementwise, norm,
softmax, reduction, index, memcpy, memset, loss) launched inside a ProfilerStep, except the
kernels GEMM and attention ops launch (their rows hold them), the optimizer's and the
embedding's (priced apart), and AccumulateGrad's additions into parameter gradients (an add
over two tensors of a parameter's shape: the cost model prices gradient accumulation itself,
model/kernel_stack.py accumulation_bytes). A kernel launched on the thread that launched the
step's first kernel is forward, on any other thread backward (autograd's device thread,
torch/csrc/autograd/engine.cpp). A kernel whose launching op holds a tensor ending in the
vocabulary (shard) belongs to the head (the logits' cast, log-softmax, loss); the rest to the
layers and the final norm, shared by their byte counts (one rate for both).
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from ..model.ops import Dims, head_ops, is_moe_layer, layer_ops
from .compute import block_numel, is_memory_bound, memory_bytes
from .kineto import RankTrace
from .trace_profile import _ATTENTION_OPS, _GEMM_OPS

MEMORY_KINDS = ("elementwise", "norm", "softmax", "reduction", "index", "memcpy", "memset", "loss")
_ACCUMULATING = ("aten::add_", "aten::add")
PASSES = ("fwd", "bwd")


def _parameter_shapes(s) -> set[tuple[int, ...]]:
    """The shapes of the scenario's parameters on one rank: every GEMM's weight (either
    orientation) and the hidden-size vectors of norms."""
    d = Dims.of(s)
    shapes = {(int(d.h),)}
    for op in layer_ops(s) + head_ops(s):
        if op.gemm is not None:
            _, n, k = op.gemm
            shapes |= {(int(n), int(k)), (int(k), int(n))}
    return shapes


def _is_accumulation(op, params: set) -> bool:
    tensors = [tuple(x) for x in op.dims if isinstance(x, list) and x]
    return op.name in _ACCUMULATING and len(tensors) == 2 and tensors[0] == tensors[1] and tensors[0] in params


def _step_seconds(trace: RankTrace, step, vocab: int, params: set) -> dict:
    """(block, pass) -> seconds of the counted kernels of one rank's step."""
    end = step.start_us + step.dur_us
    inside = sorted((k for k in trace.kernels if k.launch_us is not None and step.start_us <= k.launch_us < end),
                    key=lambda k: k.launch_us)
    out: dict = defaultdict(float)
    if not inside:
        return out
    forward_thread = inside[0].launch_thread
    for k in inside:
        op = trace.ops.get(k.launch_id)
        if k.kind not in MEMORY_KINDS or op is None or op.name in _GEMM_OPS or op.name in _ATTENTION_OPS:
            continue
        if _is_accumulation(op, params):
            continue
        logits = any(isinstance(x, list) and x and x[-1] == vocab for x in op.dims)
        out[("head" if logits else "rest", "fwd" if k.launch_thread == forward_thread else "bwd")] += k.dur_us / 1e6
    return out


def memory_rows(traces: list[RankTrace], s) -> tuple[list[dict], dict]:
    """Profile rows `layer.memory` / `head.memory` for scenario `s` (the job the traces ran),
    and why any were left out (reason -> count)."""
    notes: dict = {}
    if s.pp > 1 or s.training.recompute != "none" or s.model.mtp_layers:
        notes["memory-bound rows: written for traces of a job without pipeline stages, recomputation or "
              "multi-token prediction"] = 1
        return [], notes
    d = Dims.of(s)
    vocab = int(round(d.vocab / d.tp))
    params = _parameter_shapes(s)
    per_step = [_step_seconds(t, step, vocab, params) for t in traces for step in t.steps]
    traced = {key: statistics.fmean(step.get(key, 0.0) for step in per_step) for key in
              [(b, p) for b in ("head", "rest") for p in PASSES]} if per_step else {}
    if not traced or not all(traced[("rest", p)] > 0 and traced[("head", p)] > 0 for p in PASSES):
        notes["memory-bound rows: the steps hold no forward and backward kernels over the scenario's vocabulary "
              f"({vocab}) on two threads; is --scenario the traced job?"] = 1
        return [], notes
    layers = [layer_ops(s, is_moe_layer(s, i)) for i in range(s.model.layers)]
    head = head_ops(s)
    m = s.num_microbatches
    dtype = "bf16" if s.training.precision == "fp8" else s.training.precision
    rows = []
    for i, p in enumerate(PASSES):
        layer_bytes = statistics.fmean(sum(memory_bytes(op)[i] for op in ops if is_memory_bound(op)) for ops in layers)
        loss = [op for op in head if is_memory_bound(op) and "cross_entropy" in op.kernels]
        norm_bytes = sum(memory_bytes(op)[i] for op in head if is_memory_bound(op) and op not in loss)
        loss_bytes = sum(memory_bytes(op)[i] for op in loss)
        rate = (len(layers) * layer_bytes + norm_bytes) * m / traced[("rest", p)]  # bytes per second
        shape = f"tokens={int(d.b * d.sl)},h={int(d.h)},tp={d.tp},cp={s.cp},stack={s.training.kernels.stack}"
        rows.append(_memory_row("layer.memory", p, shape, block_numel(layers[0]), layer_bytes, layer_bytes / rate, dtype))
        rows.append(_memory_row("head.memory", p, shape, block_numel(head), norm_bytes + loss_bytes,
                                norm_bytes / rate + traced[("head", p)] / m, dtype))
    return rows, notes


def _memory_row(op: str, pass_: str, shape: str, numel: int, nbytes: float, seconds: float, dtype: str) -> dict:
    return dict(op=op, kind="elementwise", **{"pass": pass_}, shape=shape, numel=numel, bytes=nbytes, dtype=dtype,
                device="cuda", seconds=seconds, gbps=nbytes / seconds / 1e9)
