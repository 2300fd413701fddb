"""Multi-token prediction (`model.mtp_layers`, Megatron-Core's MultiTokenPredictionLayer; DeepSeek-V3,
arXiv:2412.19437 sec. 2.2) and the DeepSeek-V3 scenario that needs it: FLOPs, parameters and
placement against hand counts, and the published layout fitting with its recipe's recomputation."""

from __future__ import annotations

from pathlib import Path

import pytest

import sim3d
from sim3d.model.flops import layer_forward_flops, model_flops_per_step
from sim3d.model.memory import memory_report
from sim3d.model.params import model_params, stage_params
from sim3d.scenario import load_scenario, scenario_from_dict
from sim3d.scenario.importers import from_megatron
from sim3d.scenario.load import ScenarioError
from sim3d.scenario.megatron_export import to_megatron_args
from sim3d.costs.cost_model import CostModel
from sim3d.model.flops import hardware_flops_per_step, stage_flops
from sim3d.studies.estimate import Estimator
from sim3d.studies.space import Layout, Space

ROOT = Path(__file__).resolve().parent.parent
H, S, V, HEADS, FFN = 1024, 1024, 32000, 16, 4096


def _gpt(mtp: int = 0, pp: int = 1, **parallel) -> dict:
    return dict(name="mtp", model=dict(layers=4, hidden=H, heads=HEADS, ffn_hidden=FFN, vocab=V, seq_len=S,
                                       activation="swiglu", hidden_dropout=0.0, attention_dropout=0.0, mtp_layers=mtp),
                parallel=dict(tp=1, pp=pp, dp=1, **parallel), training=dict(micro_batch=1, global_batch=4 * pp),
                schedule="interleaved-1f1b" if parallel.get("vpp", 1) > 1 else "1f1b",
                cluster=dict(gpu="h100-sxm", nodes=1, gpus_per_node=pp))


def test_a_module_adds_a_layer_its_projection_and_a_second_lm_head_to_the_flops():
    """Forward per token: the layer's GEMMs, eh_proj 2 * 2h * h, the LM head 2 * h * V; the
    embedding lookup and the norms move bytes, not FLOPs. Training: 3x the forward."""
    base, one = scenario_from_dict(_gpt()), scenario_from_dict(_gpt(mtp=1))
    per_microbatch = 3 * (layer_forward_flops(base) + S * (2 * 2 * H * H + 2 * H * V))
    assert model_flops_per_step(one) - model_flops_per_step(base) == pytest.approx(4 * per_microbatch, rel=1e-12)


LAYER = 4 * H * H + 3 * H * FFN + 2 * H  # attention, SwiGLU, two RMSNorms
MODULE = LAYER + 2 * H * H + 3 * H  # and eh_proj, enorm, hnorm, its final norm


def test_a_module_holds_a_layer_eh_proj_its_norms_and_away_from_the_first_stage_the_embedding():
    base, one = scenario_from_dict(_gpt()), scenario_from_dict(_gpt(mtp=1))
    assert model_params(one) - model_params(base) == MODULE
    # on the last of two stages the module's stage also builds the embedding it reads; the LM
    # head it shares is that stage's own
    two = scenario_from_dict(_gpt(mtp=1, pp=2))
    assert stage_params(two, (1,)).total - stage_params(scenario_from_dict(_gpt(pp=2)), (1,)).total == MODULE + V * H


@pytest.mark.parametrize("layout, where", [("Et|t|t|t||mL", (0, 0, 0, 0, 0, 1)), ("Et|t|t|t|m|L", (0, 0, 0, 0, 1, 0))])
def test_the_layout_places_the_module_where_its_m_stands_and_its_head_on_the_loss_stage(layout, where):
    """gpt_model.py: the module runs where mtp_process holds; every module's logits and loss
    where post_process does (process_mtp_loss), through the one output layer built there."""
    s = scenario_from_dict(_gpt(mtp=1, pp=3, vpp=2, pipeline_layout=layout))
    plain = scenario_from_dict(_gpt(pp=3, vpp=2, pipeline_layout=layout.replace("m", "")))
    assert s.stage_mtp == where
    holder, last = where.index(1), s.num_stages - 1
    # set apart from the loss, Megatron's messages grow after it (mtp_standalone); sim3d says it keeps one size
    assert any("before the loss stage" in w for w in s.warnings()) == (holder != last)
    assert stage_params(s, (holder,)).total - stage_params(plain, (holder,)).total == MODULE + V * H
    head = 3 * 2 * S * H * V  # the module's LM head, forward and backward, on the loss stage
    module = 3 * (layer_forward_flops(plain) + S * 2 * 2 * H * H)
    assert stage_flops(s, last) - stage_flops(plain, last) == pytest.approx(head + module * (holder == last), rel=1e-12)
    assert sim3d.simulate(s).summary["step_time_s"] > sim3d.simulate(plain).summary["step_time_s"]


def test_without_a_layout_the_module_runs_on_the_last_stage():
    s = scenario_from_dict(_gpt(mtp=1, pp=2, vpp=2))
    assert s.stage_mtp == (0, 0, 0, 1)


@pytest.mark.parametrize("layout, pp, mtp, words", [
    ("Et|tttL", 2, 1, "0 multi-token-prediction module(s) (m), but model.mtp_layers is 1"),
    ("Et|ttmtL", 2, 1, "come after the last layer"),
    ("Et|tttLm", 2, 1, "the loss (L) closes the last"),
    ("Etttt|m||L", 2, 1, "the last chunk of a pipeline rank"),  # rank 1's first chunk
    ("Et|t|t|t|m|mL", 3, 2, "share one stage"),
])
def test_layouts_megatron_refuses_for_the_module_are_refused(layout, pp, mtp, words):
    """Megatron-Core's validate_layer_layout (pipeline_parallel_layer_layout.py)."""
    vpp = 1 if layout.count("|") + 1 == pp else 2
    with pytest.raises((ScenarioError, ValueError), match=words.replace("(", r"\(").replace(")", r"\)")):
        scenario_from_dict(_gpt(mtp=mtp, pp=pp, vpp=vpp, pipeline_layout=layout)).stage_layers


def test_the_module_is_dense_where_the_last_layer_is():
    """Its layer takes the decoder's last layer spec (gpt_builders.py decoder_layer_specs[-1])."""
    moe = dict(experts=8, top_k=2, every=2)  # layers 0 and 2 MoE, the last (3) dense
    raw = _gpt(mtp=1)
    base = scenario_from_dict({**raw, "model": {**raw["model"], "moe": moe, "mtp_layers": 0}})
    one = scenario_from_dict({**raw, "model": {**raw["model"], "moe": moe}})
    assert model_params(one) - model_params(base) == MODULE


def test_block_recomputation_leaves_the_module_alone():
    """Megatron's block method skips the module ("recompute_method == 'block' is not supported
    for MTP yet. Skipping recompute."); full recomputation of every layer runs it again."""
    def extra(**training):
        raw = _gpt()
        with_, without = ({**raw, "model": {**raw["model"], "mtp_layers": m}, "training": {**raw["training"], **training}}
                          for m in (1, 0))
        return (hardware_flops_per_step(scenario_from_dict(with_))
                - hardware_flops_per_step(scenario_from_dict(without)))
    once = extra(recompute="none")
    assert extra(recompute="full", recompute_num_layers=1) == pytest.approx(once, rel=1e-12)
    assert extra(recompute="full") > once


def test_an_untied_model_all_reduces_the_embedding_gradient_with_the_modules_stage():
    """finalize_model_grads.py: share_embeddings_and_output_weights or mtp_num_layers."""
    assert CostModel(scenario_from_dict(_gpt(pp=2))).embedding_sync(0, (0,)) == 0.0  # untied, no module
    assert CostModel(scenario_from_dict(_gpt(mtp=1, pp=2))).embedding_sync(0, (0,)) > 0.0


@pytest.mark.parametrize("zero", [0, 3])  # the planner's fast path, and the one through the cost model
def test_the_planners_estimate_prices_the_module(zero):
    raw = _gpt(mtp=1, pp=2)
    base = scenario_from_dict({**raw, "model": {**raw["model"], "layers": 8}, "parallel": {"tp": 1, "pp": 2, "dp": 2},
                               "training": {"micro_batch": 1, "global_batch": 16},
                               "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 4}})
    space = Space(base, 4, {})
    layout = Layout(tp=1, pp=2, dp=2, cp=1, ep=1, vpp=1, micro_batch=1, schedule="1f1b", recompute="none",
                    sequence_parallel=False, zero=zero, tp_comm_overlap=False, order="tp-cp-ep-dp-pp", dp_shard=2)
    s = space.scenario(layout)
    assert s.stage_mtp == (0, 1)
    assert Estimator(space).estimate(layout, s).step_s == pytest.approx(sim3d.simulate(s).step_time, rel=0.03)


def test_mtp_num_layers_goes_out_and_comes_back_as_a_megatron_argument():
    s = scenario_from_dict(_gpt(mtp=1))
    args = [str(a) for a in to_megatron_args(s)]
    assert args[args.index("--mtp-num-layers") + 1] == "1"
    back = from_megatron(args, name="back", gpu="h100-sxm", gpus=1, gpus_per_node=1)
    assert back.scenario["model"]["mtp_layers"] == 1


# ---- DeepSeek-V3 as the Megatron-Core MoE model zoo runs it (scenarios/deepseek-v3.yaml) ----------------
DSV3 = ROOT / "scenarios" / "deepseek-v3.yaml"
D_H, D_S, D_HEADS, Q_LORA, KV_LORA, NOPE, ROPE, D_V, VOCAB = 7168, 4096, 128, 1536, 512, 128, 64, 128, 129280
EXPERTS, TOP_K, EXPERT_FFN, DENSE_FFN = 256, 8, 2048, 18432


def _attention_per_token() -> int:
    """Forward FLOPs per token of MLA: the latents' down projections, the up projections, the
    output projection (2 per multiply-add), and QK^T and PV over all 4,096 keys (no causal halving)."""
    projections = (D_H * (Q_LORA + KV_LORA + ROPE) + Q_LORA * D_HEADS * (NOPE + ROPE)
                   + KV_LORA * D_HEADS * (NOPE + D_V) + D_HEADS * D_V * D_H)
    return 2 * projections + 2 * D_S * D_HEADS * (NOPE + ROPE) + 2 * D_S * D_HEADS * D_V


def test_deepseek_v3_per_layer_flops_match_a_hand_count():
    s = load_scenario(DSV3)
    dense = _attention_per_token() + 2 * 3 * D_H * DENSE_FFN
    # the router's scores over 256 experts, eight routed experts and the shared one (SwiGLU each)
    moe = _attention_per_token() + 2 * D_H * EXPERTS + (TOP_K + 1) * 2 * 3 * D_H * EXPERT_FFN
    assert layer_forward_flops(s, moe_layer=False) == pytest.approx(D_S * dense, rel=1e-12)
    assert layer_forward_flops(s, moe_layer=True) == pytest.approx(D_S * moe, rel=1e-12)


def test_deepseek_v3_has_671b_parameters_and_its_module_11_6b_more():
    """arXiv:2412.19437: 671B total; the MTP module's own layer and projection add 11.6B (its
    embedding and head are the main model's: "14B" on the model card counts them again)."""
    total = model_params(load_scenario(DSV3))
    assert 682.4e9 < total < 682.8e9
    module = model_params(load_scenario(DSV3)) - model_params(
        scenario_from_dict({**_raw(), "model": {**_raw()["model"], "mtp_layers": 0},
                            "parallel": {**_raw()["parallel"], "pipeline_layout": "Et|(tt|)*30L"}}))
    assert module == pytest.approx(11.6e9, rel=0.01)


def _raw() -> dict:
    import yaml
    return yaml.safe_load(DSV3.read_text())


def test_deepseek_v3_fits_with_its_recipes_recompute_modules_and_not_without():
    s = load_scenario(DSV3)
    assert s.stage_layers[0] == 1 and s.stage_layers[-1] == 0 and s.stage_mtp[-1] == 1
    assert memory_report(s).fits
    core_only = scenario_from_dict({**_raw(), "training": {**_raw()["training"], "recompute_modules": ["core_attn"]}})
    assert not memory_report(core_only).fits
