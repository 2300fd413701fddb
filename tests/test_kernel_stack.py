"""training.kernels: the eager stack's kernel bytes against hand-computed closed forms, the
compiled stack's layers priced as `te`'s, the Triton flash family, and the llm-foundry rows
reading both from their notes."""

from __future__ import annotations

import pytest

import sim3d
from sim3d.cluster.gpus import PRESETS
from sim3d.costs.attention import AMPERE, TRITON_BWD_SLOWDOWN, TRITON_FWD_SLOWDOWN, triton_family
from sim3d.costs.compute import ComputeModel
from sim3d.costs.gemm import KERNEL_OVERHEAD_S, MEMORY_EFFICIENCY
from sim3d.model.kernel_stack import rmsnorm_chain
from sim3d.model.ops import Dims, ops_for
from sim3d.scenario.load import scenario_from_dict
from sim3d.validation.published_row import read_row

B, S, H, FFN = 2, 8, 16, 64
SMALL = dict(b=B, s=S, h=H, heads=2, kv_heads=2, head_dim=8, ffn=FFN, vocab=100, activation="gelu",
             precision="bf16", flash=True, hidden_dropout=False, attention_dropout=False)


def _ops(stack: str, **extra) -> dict:
    return {op.name: op for op in ops_for(Dims(**{**SMALL, **extra}, stack=stack))}


def test_eager_gpt_layer_bytes_are_the_closed_form():
    ops = _ops("eager")
    e, f, ab = B * S * H, B * S * FFN, 2  # residual-stream and MLP elements, bf16
    assert ops["input_norm"].kernel_bytes == ((2 * e * ab,), (3 * e * ab, 2 * e * ab))
    assert ops["post_norm"].kernel_bytes == ((2 * e * ab,), (3 * e * ab, 2 * e * ab))
    assert ops["attn_residual"].kernel_bytes == ((3 * e * ab,), (3 * e * ab,))
    assert ops["mlp_act"].kernel_bytes == ((2 * f * ab,), (3 * f * ab,))
    assert ops["qkv_split_grad"].kernel_bytes == ((), (2 * 3 * e * ab,))  # cat of dQ, dK, dV
    tokens = B * S
    bias = {"qkv_bias_grad": 3 * H, "out_proj_bias_grad": H, "mlp_up_bias_grad": FFN, "mlp_down_bias_grad": H}
    for name, width in bias.items():
        assert ops[name].kernel_bytes == ((), (tokens * width * ab,))
    # the whole layer: 2 norms (2E | 5E), 2 adds (3E | 3E), GeLU (2F | 3F), the split's cat
    # (6E), the four bias reductions (3E + E + F + E)
    fwd = sum(sum(op.kernel_bytes[0]) for op in ops.values() if op.kernel_bytes)
    bwd = sum(sum(op.kernel_bytes[1]) for op in ops.values() if op.kernel_bytes)
    assert fwd == ab * (2 * 2 * e + 2 * 3 * e + 2 * f)
    assert bwd == ab * (2 * 5 * e + 2 * 3 * e + 3 * f + 6 * e + 5 * e + f)


def test_eager_llama_kernels_and_no_biases():
    ops = _ops("eager", activation="swiglu", norm="composite")
    e, f, ab = B * S * H, B * S * FFN, 2
    assert ops["mlp_act"].kernel_bytes == ((2 * f * ab, 3 * f * ab), (3 * f * ab,) * 3)
    rope = B * S * 2 * H  # Q and K
    cast, rotate = rope * (ab + 4), 2 * rope * 4
    assert ops["rope"].kernel_bytes == ((cast, rotate, cast), (cast, rotate, cast))
    assert ops["input_norm"].kernel_bytes == rmsnorm_chain(e, B * S, ab)  # transformers' LlamaRMSNorm
    fused = _ops("eager", activation="swiglu", norm="fused")
    assert fused["input_norm"].kernel_bytes == ((2 * e * ab,), (3 * e * ab, 2 * e * ab))  # one kernel each way
    assert not any(name.endswith("_bias_grad") for name in ops)


def test_eager_op_time_is_each_kernel_over_the_bandwidth_plus_its_launch():
    s = scenario_from_dict({**_tiny(), "training": {**_tiny()["training"], "kernels": "eager"}})
    op = next(op for op in ops_for(Dims.of(s)) if op.name == "input_norm")
    hbm = s.gpu.hbm_tbps * 1e12 * MEMORY_EFFICIENCY
    t = ComputeModel(s).op_time(op)
    fwd, bwd = op.kernel_bytes
    assert t.fwd == pytest.approx(sum(b / hbm + KERNEL_OVERHEAD_S for b in fwd), rel=1e-12)
    assert t.bwd_input == pytest.approx(sum(b / hbm + KERNEL_OVERHEAD_S for b in bwd), rel=1e-12)
    assert len(bwd) == 2 and t.bwd_weight == 0.0


def test_compiled_layers_price_as_te_and_the_step_pays_autograds_extras():
    """Inductor fuses a layer's pointwise chains as Transformer Engine does; what a compiled
    step adds is outside the layers (the embedding's decomposed backward, AccumulateGrad:
    tests/test_torch_stacks.py)."""
    assert [op.kernel_bytes for op in _ops("compiled").values()] == [None] * len(_ops("te"))
    assert list(_ops("compiled")) == list(_ops("te"))
    steps = {stack: sim3d.simulate({**_tiny(), "training": {**_tiny()["training"], "kernels": stack}}).summary
             for stack in ("te", "compiled", "eager")}
    assert steps["eager"]["step_time_s"] > steps["compiled"]["step_time_s"] > steps["te"]["step_time_s"]
    assert steps["eager"]["peak_memory_gib"] == steps["compiled"]["peak_memory_gib"] == steps["te"]["peak_memory_gib"]


def test_triton_family_scales_the_flash_rates_by_the_paper_figures():
    triton = triton_family(AMPERE)
    assert triton.fwd_efficiency == AMPERE.fwd_efficiency / TRITON_FWD_SLOWDOWN == AMPERE.fwd_efficiency / 1.4
    assert triton.bwd_efficiency == AMPERE.bwd_efficiency / TRITON_BWD_SLOWDOWN == AMPERE.bwd_efficiency / 2.0
    assert triton.fwd_cta_blocks == AMPERE.fwd_cta_blocks
    raw = {**_tiny(), "training": {**_tiny()["training"], "attention_backend": "flash", "precision": "bf16"}}
    slow = {**raw, "training": {**raw["training"], "kernels": {"stack": "te", "attention": "triton"}}}
    attention = [op for op in ops_for(Dims.of(scenario_from_dict(raw))) if op.attention][0]
    fast_t = ComputeModel(scenario_from_dict(raw)).op_time(attention)
    slow_t = ComputeModel(scenario_from_dict(slow)).op_time(attention)
    assert slow_t.fwd > fast_t.fwd and slow_t.bwd_input > fast_t.bwd_input


def test_kernels_setting_shorthand_and_errors():
    s = scenario_from_dict({**_tiny(), "training": {**_tiny()["training"], "kernels": "eager"}})
    assert (s.training.kernels.stack, s.training.kernels.attention) == ("eager", "default")
    with pytest.raises(sim3d.errors.ScenarioError, match="training.kernels"):
        scenario_from_dict({**_tiny(), "training": {**_tiny()["training"], "kernels": "fused"}})


def test_llm_foundry_rows_run_eager_with_their_attn_impl():
    row = {"id": "foundry_x", "model": "MPT-7B", "layers": 32, "hidden": 4096, "heads": 32, "ffn_hidden": 16384,
           "vocab": 50368, "seq_len": 2048, "gpu": "A100 80GB", "num_gpus": 8, "tp": 1, "pp": 1, "dp": 8,
           "micro_batch": 6, "global_batch": 96, "recompute": "none", "distributed_optimizer": "fsdp",
           "notes": "precision=bf16; attn_impl triton (submit_benchmarks.py default --attn_impl triton)"}
    assert read_row(row)[0]["training"]["kernels"] == {"stack": "eager", "attention": "triton"}
    row["notes"] = "precision=bf16; attn_impl flash"
    assert read_row(row)[0]["training"]["kernels"] == {"stack": "eager", "attention": "default"}


def _tiny() -> dict:
    import yaml
    from pathlib import Path
    return yaml.safe_load((Path(__file__).resolve().parents[1] / "scenarios" / "tiny.yaml").read_text())
