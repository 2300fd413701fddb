"""FP8 recipes (`training.kernels.fp8`, model/fp8_recipes.py): each recipe's cast kernels
counted by hand from the stack's source, the direction each recipe moves a prediction, and
torchao's own linear microbenchmarks on an H100."""

from __future__ import annotations

import pytest

from sim3d.costs.compute import ComputeModel
from sim3d.model.fp8_recipes import SCALAR_BYTES, fp8_linear
from sim3d.model.op_parts import _gemm
from sim3d.model.ops import Dims, layer_ops
from sim3d.scenario import scenario_from_dict
from sim3d.scenario.load import ScenarioError
from sim3d.scenario.torchtitan import from_torchtitan, read_toml, to_torchtitan_toml

T, K, N = 1000.0, 300.0, 70.0  # tokens, in and out features: E_in 3e5, E_out 7e4, E_w 2.1e4
E_IN, E_OUT, E_W = T * K, T * N, K * N
S = SCALAR_BYTES


def test_transformer_engine_casts_each_activation_once_and_caches_its_weights():
    te = fp8_linear("te", "te", T, K, N)
    assert te.fwd_kernels == (4 * E_IN,) and te.bwd_kernels == (4 * E_OUT,)


def test_compiled_torchao_counts_are_torchaos_own_roofline():
    # torchao/testing/training/roofline_utils.py, the activations' amax fused into their producer
    tw = fp8_linear("tensorwise", "compiled", T, K, N)
    assert tw.fwd_kernels == (S, 4 * E_IN, 2 * E_W, S, 3 * E_W)
    assert tw.bwd_kernels == (S, 4 * E_OUT, 3 * E_W)
    assert (tw.weight_grad_fp8, tw.fwd_gemm_rate) == (True, 1.0)
    rw = fp8_linear("rowwise", "compiled", T, K, N)
    assert rw.fwd_kernels == (3 * E_IN, 3 * E_IN, 3 * E_W)
    # the weight's transpose and second cast, the gradient's two casts, the two outputs rescaled
    assert rw.bwd_kernels == (4 * E_W, 3 * E_W, 3 * E_OUT, 3 * E_OUT, 4 * E_IN, 4 * E_W)
    assert rw.fwd_gemm_rate == 0.95
    hp = fp8_linear("rowwise_with_gw_hp", "compiled", T, K, N)
    assert hp.fwd_kernels == (E_IN, 3 * E_W) and hp.bwd_kernels == (S, 3 * E_W, E_OUT)
    assert not hp.weight_grad_fp8


def test_eager_torchao_runs_every_aten_op_of_each_cast():
    cast = lambda e: (4 * e, 2 * e, S, S, S, 6 * e, 8 * e, 8 * e, 5 * e)  # noqa: E731  33 B/element, 9 kernels
    tw = fp8_linear("tensorwise", "eager", T, K, N)
    assert tw.fwd_kernels == cast(E_IN) + cast(E_W)
    # grad_output twice (both layouts), the weight again and the input again, and the copies
    # preprocess_addmm makes for torch._scaled_mm's operand layouts
    assert tw.bwd_kernels == cast(E_OUT) + cast(E_W) + (2 * E_W,) + cast(E_OUT) + cast(E_IN) + (2 * E_OUT, 2 * E_IN)


def test_an_fp8_all_gather_casts_the_shard_and_only_relays_the_weight_out_backward():
    tw = fp8_linear("tensorwise", "compiled", T, K, N, weight_shards=8)
    assert tw.fwd_kernels == (S, 4 * E_IN, 3 * E_W / 8) and tw.bwd_kernels == (S, 4 * E_OUT, 2 * E_W)
    # rowwise weights are gathered in 16 bits whatever the flag (fsdp_utils casts tensorwise only)
    assert fp8_linear("rowwise", "compiled", T, K, N, weight_shards=8) == fp8_linear("rowwise", "compiled", T, K, N)


def _scenario(precision="fp8", stack="compiled", fp8=None, **cluster):
    kernels = {"stack": stack} | ({"fp8": fp8} if fp8 else {})
    return scenario_from_dict(dict(
        name="t", model=dict(layers=2, hidden=4096, heads=32, vocab=32000, seq_len=4096, activation="swiglu",
                             hidden_dropout=0.0, attention_dropout=0.0),
        parallel=dict(tp=1, pp=1, dp=1), training=dict(micro_batch=1, global_batch=1, precision=precision,
                                                        kernels=kernels),
        cluster=dict(gpu="h100-sxm", nodes=1, gpus_per_node=1, **cluster)))


def _linear_seconds(s, m, k, n) -> float:
    t = ComputeModel(s).op_time(_gemm("linear", Dims.of(s), m, k, n))
    return t.fwd + t.bwd_input + t.bwd_weight


def test_the_default_recipe_follows_the_stack():
    assert _scenario(stack="te").training.kernels.fp8_recipe == "te"
    assert _scenario(stack="compiled").training.kernels.fp8_recipe == "tensorwise"
    assert _scenario(stack="eager").training.kernels.fp8_recipe == "tensorwise"


def test_torchao_shapes_too_small_for_float8_come_out_slower_than_bf16_and_large_ones_faster():
    # torchao/float8/README.md @0cf1281 (tensorwise, compiled, H100): 1024x2048x1024 runs at 0.80x
    # of bf16 ("leave this linear in bfloat16"), 4096x8192x16384 at 1.39x
    for (m, k, n), faster in [((1024, 2048, 1024), False), ((4096, 8192, 16384), True)]:
        bf16 = _linear_seconds(_scenario("bf16"), m, k, n)
        fp8 = _linear_seconds(_scenario(fp8="tensorwise"), m, k, n)
        assert (fp8 < bf16) is faster


# pytorch/ao#2185 (2025-05, H100, torch.compile): float8 rowwise Linear forward + backward, seconds
ROWWISE_MEASURED = {(16384, 8192, 1280): 1.757e-3, (16384, 1024, 8192): 1.193e-3,
                    (16384, 8192, 7168): 5.707e-3, (16384, 3584, 8192): 3.034e-3}


@pytest.mark.parametrize("shape", ROWWISE_MEASURED)
def test_rowwise_linears_within_15_percent_of_torchaos_measurements(shape):
    predicted = _linear_seconds(_scenario(fp8="rowwise"), *shape)
    assert abs(predicted / ROWWISE_MEASURED[shape] - 1) < 0.15


@pytest.mark.parametrize("shape", ROWWISE_MEASURED)
def test_recipes_order_as_their_kernels_say(shape):
    te, tw, rw = (_linear_seconds(_scenario(fp8=r, stack="te" if r == "te" else "compiled"), *shape)
                  for r in ("te", "tensorwise", "rowwise"))
    eager = _linear_seconds(_scenario(fp8="tensorwise", stack="eager"), *shape)
    assert te < tw < rw and tw < eager


def test_torchao_keeps_its_linears_inputs_in_16_bits():
    def kept(s):
        return sum(op.act_bytes for op in layer_ops(s) if op.gemm is not None)
    assert kept(_scenario(fp8="tensorwise")) == kept(_scenario("bf16")) > kept(_scenario(stack="te"))


def test_a_layer_pays_for_each_recipes_casts():
    def layer_seconds(s):
        model = ComputeModel(s)
        return sum(t.fwd + t.bwd_input + t.bwd_weight for t in map(model.op_time, layer_ops(s)))
    te, tw, rw = (layer_seconds(_scenario(fp8=r, stack="te" if r == "te" else "compiled"))
                  for r in ("te", "tensorwise", "rowwise"))
    assert te < tw < rw


@pytest.mark.parametrize("training,message", [
    (dict(precision="fp8", kernels={"stack": "te", "fp8": "rowwise"}), "torchao.float8 recipe"),
    (dict(precision="bf16", kernels={"stack": "compiled", "fp8": "tensorwise"}), "training.precision is bf16"),
])
def test_recipes_that_cannot_run_are_refused(training, message):
    with pytest.raises((ScenarioError, ValueError), match=message):
        scenario_from_dict(dict(
            name="t", model=dict(layers=2, hidden=4096, heads=32, vocab=32000, seq_len=4096, activation="swiglu"),
            parallel=dict(tp=1, pp=1, dp=1), training=dict(micro_batch=1, global_batch=1, **training),
            cluster=dict(gpu="h100-sxm", nodes=1, gpus_per_node=1)))


def test_rowwise_weights_are_not_gathered_in_fp8():
    with pytest.raises((ScenarioError, ValueError), match="tensorwise recipe only"):
        scenario_from_dict(dict(
            name="t", model=dict(layers=2, hidden=4096, heads=32, vocab=32000, seq_len=4096, activation="swiglu"),
            parallel=dict(tp=1, pp=1, dp=8, zero=3),
            training=dict(micro_batch=1, global_batch=8, precision="fp8", fp8_param_gather=True,
                          kernels={"stack": "compiled", "fp8": "rowwise"}),
            cluster=dict(gpu="h100-sxm", nodes=1, gpus_per_node=8)))


FIXTURE = "tests/fixtures/torchtitan_llama3_70b.toml"


@pytest.mark.parametrize("recipe", ["rowwise", "rowwise_with_gw_hp", "tensorwise"])
def test_torchtitans_recipe_name_is_imported_and_exported(recipe):
    config = read_toml(FIXTURE)
    config["quantize"]["linear"]["float8"]["recipe_name"] = recipe
    config["quantize"]["linear"]["float8"]["enable_fsdp_float8_all_gather"] = False
    s = scenario_from_dict(from_torchtitan(config, name="tt", gpu="h100-sxm", gpus=64).scenario)
    assert s.training.kernels.fp8_recipe == recipe
    exported = to_torchtitan_toml(s)
    # tensorwise is torchao's default config, which torchtitan builds without a recipe_name
    assert (f'recipe_name = "{recipe}"' in exported) is (recipe != "tensorwise")


def test_a_recipe_name_beside_fp8_gathers_is_refused_as_torchtitan_refuses_it():
    config = read_toml(FIXTURE)  # its float8 section gathers in FP8
    config["quantize"]["linear"]["float8"]["recipe_name"] = "tensorwise"
    with pytest.raises(ValueError, match="torchtitan refuses the pair"):
        from_torchtitan(config, name="tt", gpu="h100-sxm", gpus=64)
    s = scenario_from_dict(from_torchtitan(read_toml(FIXTURE), name="tt", gpu="h100-sxm", gpus=64).scenario)
    assert s.training.fp8_param_gather and "recipe_name" not in to_torchtitan_toml(s)


def test_torchao_leaves_the_experts_grouped_gemm_in_16_bits():
    def experts(stack, recipe):
        s = scenario_from_dict(dict(
            name="moe", model=dict(layers=2, hidden=2048, heads=16, vocab=32000, seq_len=2048, activation="swiglu",
                                   moe=dict(experts=8, top_k=2)),
            parallel=dict(tp=1, pp=1, dp=1), training=dict(micro_batch=1, global_batch=1, precision="fp8",
                                                           kernels={"stack": stack, "fp8": recipe}),
            cluster=dict(gpu="h100-sxm", nodes=1, gpus_per_node=1)))
        return {op.name: op.fp8 for op in layer_ops(s, moe_layer=True) if op.gemm is not None}
    torchao, te = experts("compiled", "tensorwise"), experts("te", "te")
    assert torchao["expert_up"] is False and torchao["qkv"] is True  # torchtitan converts nn.Linear only
    assert te["expert_up"] is True  # Transformer Engine's GroupedLinear runs FP8


def test_an_unknown_recipe_name_is_refused():
    config = read_toml(FIXTURE)
    config["quantize"]["linear"]["float8"]["recipe_name"] = "mxfp8"
    with pytest.raises(ValueError, match="recipe_name 'mxfp8'"):
        from_torchtitan(config, name="tt", gpu="h100-sxm", gpus=64)
