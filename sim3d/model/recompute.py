"""What each activation-recomputation policy (`training.recompute`) runs again in the backward
and what a layer keeps from its forward: the one owner of that rule, read by the FLOP counts
(flops.py), the memory model (memory.py) and the cost model (costs/cost_model.py).

* `none`: nothing runs again; every op keeps what its backward reads (`Op.act_bytes`).
* `selective`: the modules of `training.recompute_modules` (scenario/recompute_modules.py) run
  again; by default `core_attn`, Korthikanti et al. 2022, section 5: the core attention (the
  ops marked `recompute_selective`) runs again and keeps nothing. A module checkpointed whole
  (`mlp`, `moe`, `shared_experts`) keeps its input and runs again with its collectives; one
  run again for its output (`layernorm`, `moe_act`, `mla_up_proj`: Megatron-Core's
  CheckpointWithoutOutput) frees the output its consumer kept, as large as what the norms keep
  for `layernorm`, the experts' second GEMM's input for `moe_act`, Q, K and V for `mla_up_proj`.
* `full`: Megatron's `--recompute-granularity full`: the whole layer runs again; it keeps only
  its input.
* `op`: torchtitan's per-op selective checkpointing (torchtitan/distributed/activation_checkpoint.py
  @b5bcd76, SelectiveAC; `activation_checkpoint.mode = "selective"` with
  `selective_ac_option = "op"` in its train configs). Each block is checkpointed; when it runs
  again in the backward, the outputs of the ops on its save list are taken from memory:
  compute-intensive ops (matmuls, SDPA: torch._functorch's default op list) and the reduce-
  scatters and all-to-alls, *except every second matmul*, counted in forward order within the
  block, which runs again with everything else (norms, rotary embeddings, activations, adds,
  the all-gathers that enter a tensor-parallel region, and the router and the grouped expert
  GEMMs: `_grouped_mm` is not on the list and the router's shape is forced to recompute).
  torchtitan's Llama block runs wq, wk, wv, wo, then w1, w3, w2 (FeedForward:
  `w2(silu(w1(x)) * w3(x))`), so wk, wo and w3 run again: for Llama 3 8B 37% of the block's
  forward matmul FLOPs. A layer keeps its input and the saved outputs: q, v, the attention
  output and its log-sum-exp, w1's output and w2's (a row-parallel GEMM's output is its whole
  partial sum, before the reduction that the save list keeps too).

`training.recompute_num_layers: N` applies the policy to the first N layers of each pipeline
stage (model chunk) and `none` to the rest: Megatron's `--recompute-method block
--recompute-num-layers N` (megatron/core/transformer/transformer_block.py, `_checkpointed_forward`:
the first N layers of the chunk, each checkpointed whole), and torchtitan's `selective_ac_option
= "n"` (activation_checkpoint.py: every n-th block wrapped in full checkpointing, so a stage of L
layers recomputes L // n of them; which ones does not change a homogeneous stage's time or the
memory it keeps). Unset: every layer.
"""

from __future__ import annotations

from functools import lru_cache

from .op import Op
from .ops import Dims, embedding_dims_ops, head_dims_ops

POLICIES = ("none", "selective", "op", "full")

# the ops of each recompute module (ops.py names); core_attn is the ops marked recompute_selective
_MOE_OPS = frozenset({"router", "moe_dispatch", "moe_tp_gather", "moe_sort_by_expert", "expert_up", "expert_act",
                      "expert_down", "moe_unsort_by_expert", "moe_tp_scatter", "moe_tp_reduce", "moe_combine",
                      "shared_expert_add"})
_SHARED_OPS = frozenset({"shared_expert_gather", "shared_up", "shared_act", "shared_down"})
MODULE_OPS = {"mlp": frozenset({"mlp_up", "mlp_act", "mlp_down"}), "moe": _MOE_OPS | _SHARED_OPS,
              "shared_experts": _SHARED_OPS, "layernorm": frozenset({"input_norm", "post_norm"}),
              "moe_act": frozenset({"expert_act"}), "mla_up_proj": frozenset({"mla_q_up", "mla_kv_up", "rope"})}
# checkpointed whole: the op whose kept bytes are the module's input
MODULE_INPUT = {"mlp": "mlp_up", "moe": "router", "shared_experts": "shared_up"}
# run again for their output: the op whose kept bytes stand for that output
MODULE_OUTPUT = {"layernorm": ("input_norm", "post_norm"), "moe_act": ("expert_down",), "mla_up_proj": ("rope",)}


def _in_modules(op: Op, modules: tuple[str, ...]) -> bool:
    return (op.recompute_selective and "core_attn" in modules) or any(
        op.name in MODULE_OPS[m] for m in modules if m != "core_attn")


def layer_policy(recompute: str, recompute_num_layers: int | None, position: int) -> str:
    """The policy of the layer at `position` (0-based) within its pipeline stage."""
    return recompute if recompute_num_layers is None or position < recompute_num_layers else "none"


def mtp_policy(recompute: str, recompute_num_layers: int | None) -> str:
    """The policy of a multi-token-prediction module: the scenario's, but none under full
    recomputation of the first N layers (Megatron's block method skips the module:
    multi_token_prediction.py, "recompute_method == 'block' is not supported for MTP yet.
    Skipping recompute.")."""
    return "none" if recompute == "full" and recompute_num_layers is not None else recompute


def stage_policies(s, layers: range) -> list[tuple[int, str]]:
    """(global layer index, its policy) for the layers of one stage, in order."""
    t = s.training
    return [(layer, layer_policy(t.recompute, t.recompute_num_layers, i)) for i, layer in enumerate(layers)]


def _linears(d: Dims, moe: bool) -> list[tuple[str, float]]:
    """torchtitan's matmuls of one block in forward order: (the op of ops.py that holds it, its
    output width on this rank); qkv and mlp_up hold several (fused here, separate there). An
    MoE block's router and grouped experts are not counted (module docstring), its shared
    experts are a FeedForward after them."""
    t = d.tp
    attention = [("qkv", d.q_dim / t), ("qkv", d.kv_dim / t), ("qkv", d.kv_dim / t), ("out_proj", d.h)]
    up, down, width = ("shared_up", "shared_down", d.shared_ffn / t) if moe else ("mlp_up", "mlp_down", d.ffn / t)
    if moe and not d.shared_ffn:
        return attention
    return attention + [(up, width)] * (2 if d.gated else 1) + [(down, d.h)]


@lru_cache(maxsize=256)
def _saved_widths(d: Dims) -> dict[str, tuple[float, float]]:
    """op name -> (output width saved, output width run again) under `op`: every second
    matmul of a block runs again."""
    widths: dict[str, list[float]] = {}
    for moe in (False, True):  # the two kinds of block share their attention's counts
        for count, (name, width) in enumerate(_linears(d, moe), start=1):
            if name in widths and moe and name in ("qkv", "out_proj"):
                continue
            widths.setdefault(name, [0.0, 0.0])[count % 2 == 0] += width
    return {name: (w[0], w[1]) for name, w in widths.items()}


@lru_cache(maxsize=256)
def _outside_blocks(d: Dims) -> frozenset[str]:
    """The embedding's and the head's ops: every policy checkpoints transformer blocks only
    (Megatron's `_checkpointed_forward` runs over the block's layers; torchtitan wraps each
    TransformerBlock), so the LM head and the embedding never run again."""
    return frozenset(op.name for op in embedding_dims_ops(d) + head_dims_ops(d))


def redo_fraction(op: Op, recompute: str, d: Dims) -> float:
    """The share of `op`'s forward that runs again in the backward."""
    if recompute == "none" or op.name in _outside_blocks(d):
        return 0.0
    if recompute == "full":
        return 1.0
    if recompute == "selective":
        return 1.0 if _in_modules(op, d.recompute_modules) else 0.0
    if op.attention is not None or op.name in ("attn_qk", "attn_av"):
        return 0.0  # SDPA and batched matmuls are saved
    if op.fwd_flops > 0 and op.gemm is not None:
        saved, again = _saved_widths(d).get(op.name, (0.0, 1.0))  # the router, grouped experts: again
        return again / (saved + again)
    return 1.0  # memory-bound: norms, rotary embeddings, activations, adds, permutations


def reruns_forward_collective(op: Op, recompute: str, d: Dims) -> bool:
    """Whether the op's forward collective runs again with the recomputation: all of a
    block's under `full`; under `op` those off the save list (all-gathers, all-reduces)."""
    if op.name in _outside_blocks(d):
        return False
    if recompute == "selective":  # a module checkpointed whole runs its collectives again
        return any(op.name in MODULE_OPS[m] for m in d.recompute_modules if m in MODULE_INPUT)
    return recompute == "full" or (recompute == "op" and op.comm in ("all-gather", "all-reduce"))


def recompute_flops(ops: list[Op], recompute: str, d: Dims) -> float:
    """Forward FLOPs run again in the backward of one layer."""
    return sum(op.fwd_flops * redo_fraction(op, recompute, d) for op in ops)


def kept_bytes(ops: list[Op], recompute: str, d: Dims) -> float:
    """Activation bytes one layer keeps per micro-batch on one rank."""
    if recompute == "full":
        return ops[0].act_bytes  # the input norm keeps exactly the layer input
    if recompute == "selective":
        return _selective_kept_bytes(ops, d)
    if recompute == "op":
        return _op_kept_bytes(ops, d)
    return sum(op.act_bytes for op in ops)


def _selective_kept_bytes(ops: list[Op], d: Dims) -> float:
    """What a layer keeps under selective recomputation of `d.recompute_modules` (module
    docstring): the ops outside the modules checkpointed whole and their inputs; of a module run
    again for its output, everything but that output."""
    modules = d.recompute_modules

    def freed(op: Op) -> bool:  # inside the attention core or a module checkpointed whole
        return (op.recompute_selective and "core_attn" in modules) or any(
            op.name in MODULE_OPS[m] for m in modules if m in MODULE_INPUT)

    kept = sum(op.act_bytes for op in ops if not freed(op))
    by_name = {op.name: op for op in ops}
    for module in modules:
        if (first := MODULE_INPUT.get(module)) in by_name and not (module == "shared_experts" and "moe" in modules):
            op = by_name[first]
            # the router keeps its input and its logits: the MoE layer's input is the first part
            kept += op.act_bytes if first != "router" else d.ab * op.gemm[0] * d.h
        for name in MODULE_OUTPUT.get(module, ()):
            if name in by_name and not freed(by_name[name]):
                kept -= by_name[name].act_bytes
    return kept


def _op_kept_bytes(ops: list[Op], d: Dims) -> float:
    """The block input and the outputs of the saved ops (module docstring)."""
    ab, tokens = d.ab, d.b * d.sl
    kept = ops[0].act_bytes  # the checkpointed block's input
    saved = _saved_widths(d)
    for op in ops:
        if op.gemm is not None and op.name in saved:
            kept += ab * tokens * saved[op.name][0]
        elif op.attention is not None:
            kept += ab * tokens * d.q_dim / d.tp + op.act_bytes  # the output and its log-sum-exp
        elif op.name == "attn_qk":  # an unfused attention's batched matmuls keep their outputs
            kept += ab * d.heads / d.tp * tokens * d.s
        elif op.name == "attn_av":
            kept += ab * tokens * d.q_dim / d.tp
        if op.comm == "reduce-scatter":  # its output, a shard of the full activation it reduced
            kept += op.comm_bytes / d.tp
        elif op.comm == "all-to-all":  # the tokens it brought
            kept += op.comm_bytes
    return kept
