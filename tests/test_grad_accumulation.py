"""`training.kernels.grad_accumulation`: how each micro-batch's weight gradients reach the
buffer the optimizer reads (model/kernel_stack.py accumulation_bytes), counted here by hand for
a GPT layer."""

from __future__ import annotations

import pytest

from sim3d.costs.cost_model import CostModel
from sim3d.scenario import ScenarioError, scenario_from_dict
from sim3d.scenario.importers import from_megatron
from sim3d.scenario.megatron_export import export_notes, to_megatron_args
from sim3d.scenario.nemo_import import from_nemo

H, TP, M = 1024, 2, 4


def gpt(how=None, precision="bf16", zero=0, dp=1, stack="te"):
    kernels = {"stack": stack, **({"grad_accumulation": how} if how else {})}
    return scenario_from_dict(dict(
        name="t", model=dict(layers=4, hidden=H, heads=8, vocab=1024, seq_len=1024),
        parallel=dict(tp=TP, pp=1, dp=dp, zero=zero),
        training=dict(micro_batch=1, global_batch=M * dp, precision=precision, kernels=kernels),
        cluster=dict(gpu="a100-80gb", nodes=1, gpus_per_node=TP * dp)))


def layer_params(h: int = H, tp: int = TP) -> int:
    """A GPT layer's parameters on one tensor-parallel rank: QKV and the 4h MLP's first GEMM
    split by column (weights and biases), the projections split by row (their biases whole),
    two LayerNorms whole."""
    return (3 * h * h + 3 * h + 4 * h * h + 4 * h) // tp + (h * h + 4 * h * h) // tp + 2 * h + 2 * 2 * h


@pytest.mark.parametrize("how, precision, per_param", [
    ("fused", "bf16", 0),
    ("main_grad", "bf16", 2 + 4 + 4),  # bf16 gradient read; fp32 main_grad read and written
    ("main_grad", "fp16", 2 + 2 + 2),  # an fp16 run keeps fp16 main grads
    ("upcast", "bf16", 2 + 4 + 4 + 4 + 4),  # cast to an fp32 copy; add it into the fp32 gradient
    ("autograd", "fp16", 3 * 2 * (M - 1) / M),  # .grad += new, all but the first micro-batch
])
def test_each_way_moves_its_hand_count(how, precision, per_param):
    costs = CostModel(gpt(how, precision))
    assert costs.accumulated_bytes("layer") == pytest.approx(layer_params() * per_param, rel=1e-12)


def test_the_stacks_defaults():
    assert CostModel(gpt()).accumulated_bytes("layer") == 0  # te: in the weight-gradient GEMMs
    assert gpt(stack="eager").training.kernels.accumulation == "autograd"
    with pytest.raises(ScenarioError, match="PyTorch model code accumulates them with autograd"):
        gpt("main_grad", stack="eager")


def test_the_backward_grows_by_exactly_that_kernel():
    fused, hooked = CostModel(gpt()), CostModel(gpt("main_grad"))
    links = {axis: fused._link(axis, 0) for axis in ("tp", "cp", "ep")}
    extra = hooked.compute_model.memory_time(hooked.accumulated_bytes("layer"))
    assert extra > 0
    for kind in ("B", "BW"):
        got = hooked.block("layer", kind, links).seconds - fused.block("layer", kind, links).seconds
        assert got == pytest.approx(extra, rel=1e-9)
    assert hooked.block("layer", "F", links).seconds == fused.block("layer", "F", links).seconds


def test_megatron_fsdp_copies_sharded_gradients_once():
    """Megatron-FSDP with sharded gradients copies each into the bucket it reduce-scatters."""
    costs = CostModel(gpt("main_grad", zero=3, dp=2))
    assert costs.accumulated_bytes("layer") == pytest.approx(layer_params() * (2 + 4), rel=1e-12)


def test_importers_and_the_exporter_carry_megatrons_switch():
    base = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "8", "--seq-length", "1024",
            "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16"]
    for flags, how in ((base, "fused"), (base + ["--no-gradient-accumulation-fusion"], "main_grad")):
        s = scenario_from_dict(from_megatron(flags, name="x", gpu="h100-sxm", gpus=8).scenario)
        assert s.training.kernels.accumulation == how
        assert ("--no-gradient-accumulation-fusion" in to_megatron_args(s)) is (how == "main_grad")
    assert any("autograd" in note for note in export_notes(gpt("autograd")))
    nemo = {"trainer": {"num_nodes": 1, "devices": 8, "precision": "bf16-mixed"},
            "model": {"num_layers": 4, "hidden_size": 1024, "num_attention_heads": 8, "encoder_seq_length": 1024,
                      "micro_batch_size": 1, "global_batch_size": 8, "gradient_accumulation_fusion": False}}
    assert scenario_from_dict(from_nemo(nemo, name="x", gpu="h100-sxm").scenario).training.kernels.accumulation \
        == "main_grad"
    flat = {"name": "flat", "num_layers": 4, "hidden_size": 1024, "num_attention_heads": 8, "seq_length": 1024,
            "vocab_size": 1024, "micro_batch_size": 1, "global_batch_size": 8,
            "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8}}
    for value, how in ((True, "fused"), (False, "main_grad")):  # Megatron's args namespace, as a flat dict
        s = scenario_from_dict({**flat, "gradient_accumulation_fusion": value})
        assert s.training.kernels.accumulation == how


def test_a_flat_dict_naming_the_stack_alone_keeps_megatrons_defaults():
    flat = {"name": "flat", "num_layers": 4, "hidden_size": 1024, "num_attention_heads": 8, "seq_length": 1024,
            "vocab_size": 1024, "micro_batch_size": 1, "global_batch_size": 8, "gradient_accumulation_fusion": False,
            "training": {"kernels": "te"}, "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8}}
    kernels = scenario_from_dict(flat).training.kernels
    assert (kernels.stack, kernels.accumulation, kernels.loss_kernels) == ("te", "main_grad", "vocab_parallel")


def test_autograd_under_megatrons_modules_sums_at_the_weights_width():
    """AccumulateGrad sums into `.grad`, the parameter's dtype (bf16: 2 bytes), not Megatron's
    fp32 gradient buffer."""
    costs = CostModel(gpt("autograd", "bf16"))
    assert costs.sharding.grad_bytes == 4
    assert costs.accumulated_bytes("layer") == pytest.approx(layer_params() * 3 * 2 * (M - 1) / M, rel=1e-12)



@pytest.mark.parametrize("how", ["main_grad", "autograd"])
def test_the_planner_shares_block_prices_but_not_the_accumulation(how):
    """Tier one shares a block's price across layouts whose gradient accumulation differs
    (estimate.py BLOCK_KEY) and adds each layout's own: one estimator pricing many layouts in
    turn gives what a fresh estimator gives each."""
    from sim3d.model.memory import memory_report
    from sim3d.studies.estimate import Estimator
    from sim3d.studies.space import Space
    base = scenario_from_dict({
        "name": "small", "schedule": "1f1b", "model": {"layers": 8, "hidden": 512, "heads": 8, "vocab": 256, "seq_len": 64},
        "training": {"micro_batch": 1, "global_batch": 16, "precision": "fp16", "kernels": {"grad_accumulation": how}},
        "cluster": {"gpu": "a100-80gb", "nodes": 1, "gpus_per_node": 8}})
    space = Space(base, 16, {})
    fitting = [layout for layout in space.layouts()[0]
               if memory_report(space.scenario(layout), check_schedule=False).fits][::7][:40]
    assert len({space.scenario(layout).num_microbatches for layout in fitting}) > 1
    shared = Estimator(space)
    for layout in fitting:
        alone = Estimator(space).estimate(layout, space.scenario(layout))
        assert shared.estimate(layout, space.scenario(layout)) == alone, layout
