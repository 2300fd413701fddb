"""training.recompute_modules (Megatron-Core --recompute-modules) under selective
recomputation: what each module runs again and what it frees, against hand counts on a Llama 3
8B layer, an MoE layer and DeepSeek-V3's latent attention."""

from __future__ import annotations

import pytest

import sim3d
from sim3d.errors import ScenarioError
from sim3d.model.ops import Dims, ops_for
from sim3d.model.recompute import kept_bytes, recompute_flops, reruns_forward_collective
from sim3d.scenario import scenario_from_dict
from sim3d.scenario.load import load_scenario

S, H, FFN, AB = 8192, 4096, 14336, 2  # llama3.1-8b.yaml: sequence 8192, micro-batch 1, bf16


def llama(*modules: str, **extra) -> Dims:
    sets = ["training.recompute=selective", "parallel.tp=1", "parallel.cp=1", "parallel.sequence_parallel=false",
            "parallel.dp=8", "cluster.nodes=1"]
    if modules:
        sets.append(f"training.recompute_modules=[{','.join(modules)}]")
    return Dims.of(load_scenario("scenarios/llama3.1-8b.yaml", sets))


def layer(d: Dims, moe: bool = False):
    return ops_for(d, moe)


def test_unset_is_the_attention_core():
    assert llama() == llama("core_attn")
    ops = layer(llama())
    assert kept_bytes(ops, "selective", llama()) == kept_bytes(ops, "selective", llama("core_attn"))


def test_the_mlp_keeps_its_input_and_runs_again_whole():
    """SwiGLU keeps the gate and up outputs (2 x ffn) and the down projection its input (ffn):
    3 x 2 bytes x 8192 x 14336 freed; the three GEMMs, 6 s h ffn FLOPs, run again."""
    base, mlp = llama("core_attn"), llama("core_attn", "mlp")
    freed = kept_bytes(layer(base), "selective", base) - kept_bytes(layer(mlp), "selective", mlp)
    assert freed == pytest.approx(3 * AB * S * FFN)
    again = recompute_flops(layer(mlp), "selective", mlp) - recompute_flops(layer(base), "selective", base)
    assert again == pytest.approx(6 * S * H * FFN)


def test_the_norms_free_their_outputs_and_cost_no_flops():
    base, norms = llama("core_attn"), llama("core_attn", "layernorm")
    freed = kept_bytes(layer(base), "selective", base) - kept_bytes(layer(norms), "selective", norms)
    assert freed == pytest.approx(2 * AB * S * H)  # two norm outputs of s x h
    assert recompute_flops(layer(norms), "selective", norms) == recompute_flops(layer(base), "selective", base)
    steps = [sim3d.simulate("scenarios/llama3.1-8b.yaml", sets=["training.recompute=selective",
                                                                 f"training.recompute_modules=[{m}]"])
             for m in ("core_attn", "core_attn,layernorm")]
    assert steps[1].step_time > steps[0].step_time
    assert steps[1].summary["peak_memory_gib"] < steps[0].summary["peak_memory_gib"]


def moe_dims(*modules: str) -> Dims:
    sets = ["training.recompute=selective", f"training.recompute_modules=[{','.join(modules)}]",
            "model.moe.shared_expert_ffn=4096"]
    return Dims.of(load_scenario("scenarios/moe-1024.yaml", sets))


def test_moe_modules():
    """moe-1024 (tp 4 with SP, ep 8, top-2, capacity 1.25, expert ffn 14336): moe_act frees the
    experts' second GEMM's input; moe keeps only the layer's input (the rank's 1024 tokens of
    4096) and runs its all-to-alls again; shared_experts inside moe counts once."""
    base = moe_dims("core_attn")
    by_name = {op.name: op for op in layer(base, True)}
    act = moe_dims("core_attn", "moe_act")
    freed = kept_bytes(layer(base, True), "selective", base) - kept_bytes(layer(act, True), "selective", act)
    assert freed == pytest.approx(by_name["expert_down"].act_bytes)
    whole = moe_dims("core_attn", "moe")
    moe_ops = [op for op in layer(base, True) if op.name in {
        "router", "moe_dispatch", "moe_tp_gather", "moe_sort_by_expert", "expert_up", "expert_act", "expert_down",
        "moe_unsort_by_expert", "moe_tp_scatter", "moe_combine", "shared_expert_gather", "shared_up", "shared_act",
        "shared_down", "shared_expert_add"}]
    own = 1 * 4096 // 4
    expected = kept_bytes(layer(base, True), "selective", base) - sum(op.act_bytes for op in moe_ops) + AB * own * H
    assert kept_bytes(layer(whole, True), "selective", whole) == pytest.approx(expected)
    both = moe_dims("core_attn", "moe", "shared_experts")
    assert kept_bytes(layer(both, True), "selective", both) == pytest.approx(expected)
    assert reruns_forward_collective(by_name["moe_dispatch"], "selective", whole)
    assert not reruns_forward_collective(by_name["moe_dispatch"], "selective", base)


def test_mla_up_projections_free_q_k_v():
    """DeepSeek-V3's attention: Q and K of 128 x 192 and V of 128 x 128 per token, 16-bit."""
    raw = {"name": "mla", "model": {"layers": 2, "hidden": 7168, "heads": 128, "ffn_hidden": 18432, "vocab": 129280,
                                    "seq_len": 4096, "activation": "swiglu", "hidden_dropout": 0.0,
                                    "attention_dropout": 0.0,
                                    "mla": {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                                            "qk_rope_head_dim": 64, "v_head_dim": 128}},
           "parallel": {"tp": 1, "pp": 1, "dp": 1}, "training": {"global_batch": 1, "recompute": "selective"},
           "cluster": {"gpu": "h800", "nodes": 1, "gpus_per_node": 1}}
    base = Dims.of(scenario_from_dict(raw))
    raw["training"]["recompute_modules"] = ["core_attn", "mla_up_proj"]
    up = Dims.of(scenario_from_dict(raw))
    freed = kept_bytes(ops_for(base), "selective", base) - kept_bytes(ops_for(up), "selective", up)
    assert freed == pytest.approx(AB * 4096 * (2 * 128 * 192 + 128 * 128))
    again = recompute_flops(ops_for(up), "selective", up) - recompute_flops(ops_for(base), "selective", base)
    assert again == pytest.approx(2 * 4096 * (1536 * 128 * 192 + 512 * 128 * 256))


@pytest.mark.parametrize("sets, message", [
    (["training.recompute=full", "training.recompute_modules=[mlp]"], "selective only"),
    (["training.recompute=selective", "training.recompute_modules=[moe]"], "moe needs model.moe"),
    (["training.recompute=selective", "training.recompute_modules=[mla_up_proj]"], "needs model.mla"),
    (["training.recompute=selective", "training.recompute_modules=[attention]"], "recompute_modules"),
])
def test_modules_the_model_or_policy_cannot_take_are_refused(sets, message):
    with pytest.raises(ScenarioError, match=message):
        load_scenario("scenarios/llama3.1-8b.yaml", sets)


def test_megatron_and_nemo_carry_the_modules_both_ways():
    from sim3d.scenario.importers import from_megatron
    from sim3d.scenario.nemo_import import from_nemo
    from sim3d.scenario.megatron_export import to_megatron_args
    args = ("--num-layers 4 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --micro-batch-size 1 "
            "--global-batch-size 8 --bf16 --recompute-granularity selective --recompute-modules core_attn layernorm")
    imported = from_megatron(args, name="m", gpu="h100-sxm", gpus=8)
    assert imported.scenario["training"]["recompute_modules"] == ["core_attn", "layernorm"]
    s = scenario_from_dict(imported.scenario)
    assert s.training.recompute_modules == ("core_attn", "layernorm")
    assert "--recompute-modules core_attn layernorm" in " ".join(map(str, to_megatron_args(s)))
    nemo = {"trainer": {"num_nodes": 1, "devices": 8},
            "model": {"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 16, "encoder_seq_length": 2048,
                      "micro_batch_size": 1, "global_batch_size": 8, "activations_checkpoint_granularity": "selective",
                      "recompute_modules": ["core_attn", "mlp"]}}
    assert from_nemo(nemo, name="n", gpu="h100-sxm").scenario["training"]["recompute_modules"] == ["core_attn", "mlp"]
