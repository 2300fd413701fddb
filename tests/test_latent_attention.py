"""Multi-head latent attention (model.mla; DeepSeek-V2/V3, Megatron-Core MLASelfAttention):
FLOPs, parameters, the tensor-parallel boundary and the context-parallel ring against hand
counts on DeepSeek-V3's attention (hidden 7168, 128 heads, q_lora 1536, kv_lora 512, nope 128,
rope 64, v 128; its config.json)."""

from __future__ import annotations

import pytest

import sim3d
from sim3d.errors import ScenarioError
from sim3d.model.flops import layer_forward_flops
from sim3d.model.ops import Dims, ops_for
from sim3d.model.params import layer_params
from sim3d.scenario import scenario_from_dict

H, HEADS, Q_LORA, KV_LORA, NOPE, ROPE, V, FFN, S = 7168, 128, 1536, 512, 128, 64, 128, 18432, 4096
MLA = {"q_lora_rank": Q_LORA, "kv_lora_rank": KV_LORA, "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE,
       "v_head_dim": V}


def scenario(tp=1, cp=1, sp=False, **mla) -> dict:
    return {"name": "dsv3-attention",
            "model": {"layers": 4, "hidden": H, "heads": HEADS, "ffn_hidden": FFN, "vocab": 129280, "seq_len": S,
                      "activation": "swiglu", "hidden_dropout": 0.0, "attention_dropout": 0.0, "mla": {**MLA, **mla}},
            "parallel": {"tp": tp, "pp": 1, "dp": 1, "cp": cp, "sequence_parallel": sp},
            "training": {"micro_batch": 1, "global_batch": 4},
            "cluster": {"gpu": "h800", "nodes": 1, "gpus_per_node": tp * cp}}


# per token: the down projections to the latents (7168 x 2112), the query up projection
# (1536 x 128 * 192), the key-value up projection (512 x 128 * 256), the output projection
# (128 * 128 x 7168)
PROJECTIONS = H * (Q_LORA + KV_LORA + ROPE) + Q_LORA * HEADS * (NOPE + ROPE) + KV_LORA * HEADS * (NOPE + V) + HEADS * V * H


def test_a_layers_forward_flops_are_its_projections_attention_and_mlp():
    """2 FLOPs per multiply-add; the attention, as the papers count it, without causal
    halving: QK^T 2 s (nope + rope) and PV 2 s v per head and token; SwiGLU's three GEMMs."""
    assert PROJECTIONS == 187_105_280
    per_token = 2 * PROJECTIONS + 2 * S * HEADS * (NOPE + ROPE) + 2 * S * HEADS * V + 2 * 3 * H * FFN
    assert layer_forward_flops(scenario_from_dict(scenario())) == pytest.approx(S * per_token, rel=1e-12)


def test_parameters_split_over_tp_but_the_down_projections():
    norms = Q_LORA + KV_LORA + 2 * H
    mlp = 3 * H * FFN
    one = layer_params(Dims.of(scenario_from_dict(scenario())), moe_layer=False).total
    assert one == pytest.approx(PROJECTIONS + norms + mlp)
    eight = layer_params(Dims.of(scenario_from_dict(scenario(tp=8, sp=True))), moe_layer=False).total
    down = H * (Q_LORA + KV_LORA + ROPE)
    assert eight == pytest.approx(down + (PROJECTIONS - down) / 8 + norms + mlp / 8)


def test_without_query_compression_the_queries_come_from_the_input():
    ops = {op.name: op for op in ops_for(Dims.of(scenario_from_dict(scenario(q_lora_rank=None))))}
    assert "mla_q_up" not in ops and ops["mla_q"].gemm == (S, HEADS * (NOPE + ROPE), H)
    assert ops["mla_down"].gemm == (S, KV_LORA + ROPE, H)


def test_the_tensor_parallel_boundary_carries_the_latent():
    """Under SP the latents (2112 per token, 16-bit) are all-gathered, not the 7168-wide input;
    the down projection runs on the rank's 512 tokens."""
    ops = {op.name: op for op in ops_for(Dims.of(scenario_from_dict(scenario(tp=8, sp=True))))}
    down = ops["mla_down"]
    assert down.comm == "all-gather" and down.bwd_comm == "reduce-scatter"
    assert down.comm_bytes == S * (Q_LORA + KV_LORA + ROPE) * 2
    assert down.gemm == (S // 8, Q_LORA + KV_LORA + ROPE, H)
    assert ops["input_norm"].comm is None
    assert ops["out_proj"].comm == "reduce-scatter"


def test_the_context_parallel_ring_passes_every_heads_keys_and_values():
    """cp 2: one step passes K (128 x 192) and V (128 x 128) of the rank's 2048 tokens."""
    ops = {op.name: op for op in ops_for(Dims.of(scenario_from_dict(scenario(cp=2))))}
    ring = ops["mla_kv_up"]
    assert ring.comm == "ring" and ring.comm_bytes == (S // 2) * HEADS * (NOPE + ROPE + V) * 2


def test_it_simulates_and_the_executor_refuses_it():
    result = sim3d.simulate(scenario(tp=8, sp=True))
    assert result.step_time > 0 and result.summary["fits_in_memory"]
    from sim3d.executor.launch import ExecutorRefusal, make_spec
    with pytest.raises(ExecutorRefusal, match="model.mla"):
        make_spec(scenario_from_dict(scenario(tp=8, sp=True)))


def test_a_missing_rank_is_refused():
    raw = scenario()
    del raw["model"]["mla"]["kv_lora_rank"]
    with pytest.raises(ScenarioError, match="kv_lora_rank"):
        scenario_from_dict(raw)


def test_the_first_layers_stay_dense():
    """model.moe.first_dense_layers (DeepSeek-V3's first_k_dense_replace: 3): those layers are
    dense MLPs, the rest MoE; the model's parameters are each kind's per-layer count times its
    layers, and the stage that holds the dense ones is lighter in expert parameters."""
    from sim3d.model.ops import is_moe_layer
    from sim3d.model.params import embedding_params, head_params, model_params, stage_params
    raw = scenario()
    raw["model"].update(layers=8, moe={"experts": 8, "top_k": 2, "expert_ffn_hidden": 2048, "first_dense_layers": 3})
    raw["parallel"]["pp"], raw["cluster"]["gpus_per_node"] = 2, 2
    s = scenario_from_dict(raw)
    assert [is_moe_layer(s, i) for i in range(8)] == [False] * 3 + [True] * 5
    d = Dims.of(s)
    dense, moe = (layer_params(d, m).total for m in (False, True))
    total = model_params(s)
    assert total == pytest.approx(3 * dense + 5 * moe + embedding_params(d) + head_params(d, True), rel=1e-9)
    assert stage_params(s, (0,)).expert < stage_params(s, (1,)).expert
    raw["model"]["moe"]["first_dense_layers"] = 8
    with pytest.raises(ScenarioError, match="leaves no MoE layer"):
        scenario_from_dict(raw)


@pytest.mark.parametrize("training, message", [
    ({"attention_backend": "unfused"}, "fused kernel and a causal mask"),
    ({"kernels": {"stack": "compiled", "mask": "materialized"}}, "fused kernel and a causal mask"),
    ({"kernels": "eager"}, "as Megatron-Core runs it"),
    ({"recompute": "op"}, "as Megatron-Core runs it"),
])
def test_latent_attention_outside_what_it_is_priced_for_is_refused(training, message):
    raw = scenario()
    raw["training"].update(training)
    with pytest.raises(ScenarioError, match=message):
        scenario_from_dict(raw)
    raw = scenario()
    raw["model"]["kv_heads"] = 8
    with pytest.raises(ScenarioError, match="kv_heads and model.kv_channels do not apply"):
        scenario_from_dict(raw)


def test_without_query_compression_tp_gathers_the_layer_input():
    """q_lora_rank null: the queries are a column-parallel projection of the layer's input, so
    under SP the 7168-wide input is all-gathered (not the latent) and the down projection runs
    on every token."""
    ops = {op.name: op for op in ops_for(Dims.of(scenario_from_dict(scenario(tp=8, sp=True, q_lora_rank=None))))}
    assert ops["input_norm"].comm == "all-gather" and ops["input_norm"].comm_bytes == S * H * 2
    assert ops["mla_down"].comm is None and ops["mla_down"].gemm == (S, KV_LORA + ROPE, H)


def test_megatron_arguments_carry_latent_attention_and_dense_first_layers_both_ways():
    from sim3d.scenario.importers import from_megatron
    from sim3d.scenario.megatron_export import to_megatron_args
    raw = scenario()
    raw["model"]["moe"] = {"experts": 8, "top_k": 2, "expert_ffn_hidden": 2048, "first_dense_layers": 2}
    raw["parallel"].update(dp=8, ep=8)
    raw["cluster"]["gpus_per_node"] = 8
    raw["training"]["global_batch"] = 8
    s = scenario_from_dict(raw)
    args = [str(a) for a in to_megatron_args(s)]
    assert "--multi-latent-attention" in args and args[args.index("--moe-layer-freq") + 1] == "[0,0,1,1]"
    back = scenario_from_dict(from_megatron(args, name="back", gpu="h800", gpus=8).scenario)
    assert back.model.mla == s.model.mla and back.model.moe.first_dense_layers == 2
    model = ["--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "2048", "--micro-batch-size", "1",
             "--global-batch-size", "8"]
    deepseek = from_megatron(model + ["--num-layers", "61", "--num-experts", "256", "--moe-layer-freq", "([0]*3+[1]*58)"],
                             name="d", gpu="h800", gpus=8).scenario["model"]["moe"]
    assert deepseek["first_dense_layers"] == 3 and deepseek["every"] == 1
    with pytest.raises(ValueError, match="moe-layer-freq"):  # not dense-first-then-every-N
        from_megatron(model + ["--num-layers", "4", "--num-experts", "8", "--moe-layer-freq", "[1,1,0,1]"],
                      name="bad", gpu="h800", gpus=8)


def test_dense_first_layers_that_leave_no_moe_layer_or_reach_the_executor_are_refused():
    raw = scenario()
    raw["model"].update(layers=8, moe={"experts": 8, "top_k": 2, "every": 4, "first_dense_layers": 5})
    with pytest.raises(ScenarioError, match="leaves no MoE layer"):
        scenario_from_dict(raw)
    from sim3d.executor.launch import ExecutorRefusal, make_spec
    tiny = {"name": "t", "model": {"layers": 4, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 32,
                                   "moe": {"experts": 2, "top_k": 1, "first_dense_layers": 2}},
            "training": {"micro_batch": 2, "global_batch": 4, "precision": "fp32"},
            "cluster": {"gpu": "a100-80gb", "nodes": 1, "gpus_per_node": 1}}
    with pytest.raises(ExecutorRefusal, match="first_dense_layers"):
        make_spec(scenario_from_dict(tiny))
