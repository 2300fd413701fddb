"""Activation recomputation by policy (sim3d/model/recompute.py), checked against hand counts:
torchtitan's per-op selective checkpointing (`op`) runs every second matmul of a block again
with everything that is not a matmul or the attention, and keeps the block input and the saved
outputs; Korthikanti's `selective` and Megatron's `full` as before."""
from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import sim3d
from sim3d.cli.app import app
from sim3d.model.flops import hardware_flops_per_step, model_flops_per_step
from sim3d.model.memory import layer_activation_bytes
from sim3d.model.ops import Dims, layer_ops
from sim3d.model.recompute import POLICIES, kept_bytes, recompute_flops, redo_fraction
from sim3d.scenario.load import scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
# Llama 3 8B's block (arXiv:2407.21783 Table 3), two sequences of 4096 on one GPU
LLAMA = dict(name="llama-block", model=dict(layers=4, hidden=4096, ffn_hidden=14336, heads=32, kv_heads=8,
                                            vocab=128256, seq_len=4096, activation="swiglu", hidden_dropout=0.0,
                                            attention_dropout=0.0),
             training=dict(micro_batch=2, global_batch=8, precision="bf16", attention_backend="flash",
                           kernels="compiled"),
             cluster=dict(gpu="h100-sxm", nodes=1, gpus_per_node=1))


def _scenario(recompute: str, **parallel):
    gpus = max(1, parallel.get("tp", 1))
    return scenario_from_dict({**LLAMA, "training": {**LLAMA["training"], "recompute": recompute},
                               "parallel": parallel, "cluster": {**LLAMA["cluster"], "gpus_per_node": gpus}})


def test_op_runs_every_second_matmul_again():
    """torchtitan's block runs wq, wk, wv, wo, w1, w3, w2: wk, wo and w3 run again."""
    s = _scenario("op")
    d = Dims.of(s)
    fractions = {op.name: redo_fraction(op, "op", d) for op in layer_ops(s)}
    assert fractions["qkv"] == pytest.approx(1024 / (4096 + 2 * 1024))  # wk of wq|wk|wv
    assert (fractions["out_proj"], fractions["mlp_up"], fractions["mlp_down"]) == (1.0, 0.5, 0.0)
    assert fractions["core_attention"] == 0.0  # SDPA is saved
    assert fractions["input_norm"] == fractions["rope"] == fractions["mlp_act"] == 1.0
    from sim3d.model.ops import embedding_ops, head_ops
    outside = embedding_ops(s) + head_ops(s)  # torchtitan checkpoints the transformer blocks alone
    assert [redo_fraction(op, "op", d) for op in outside] == [0.0] * len(outside)
    tokens = 2 * 4096
    hand = 2 * tokens * (4096 * 1024 + 4096 * 4096 + 4096 * 14336)  # wk + wo + w3, forward
    assert recompute_flops(layer_ops(s), "op", d) == pytest.approx(hand)


def test_op_keeps_the_block_input_and_the_saved_outputs():
    s = _scenario("op")
    d = Dims.of(s)
    tokens = 2 * 4096
    # input, q, v, attention output, w1 and w2 outputs (bf16) and the attention's fp32 log-sum-exp
    hand = 2 * tokens * (4096 + 4096 + 1024 + 4096 + 14336 + 4096) + 4 * 32 * tokens
    assert kept_bytes(layer_ops(s), "op", d) == pytest.approx(hand)
    assert layer_activation_bytes(s) == pytest.approx(hand)
    full, none = layer_activation_bytes(s, recompute="full"), layer_activation_bytes(s, recompute="none")
    assert full < hand < none


def test_op_under_sequence_parallelism_keeps_a_row_parallel_output_whole():
    """With tp 2 and SP the saved w2 output is its whole partial sum (before the reduce-scatter,
    whose output the save list keeps as well); the block input is a shard."""
    s = _scenario("op", tp=2, sequence_parallel=True)
    d = Dims.of(s)
    tokens = 2 * 4096
    shard = tokens * 4096 / 2
    hand = 2 * (shard + tokens * (4096 / 2 + 1024 / 2 + 4096 / 2 + 14336 / 2 + 4096)) + 4 * 16 * tokens
    hand += 2 * 2 * shard  # the two reduce-scatters' outputs (after wo and after w2)
    assert kept_bytes(layer_ops(s), "op", d) == pytest.approx(hand)


def test_policies_order_time_and_memory_as_their_definitions_say():
    runs = {r: sim3d.simulate(_scenario(r)) for r in POLICIES}
    steps = {r: runs[r].step_time for r in POLICIES}
    assert steps["none"] < steps["selective"] < steps["op"] < steps["full"]
    peaks = {r: runs[r].memory.peak_gib for r in POLICIES}
    assert peaks["full"] < peaks["op"] < peaks["selective"] <= peaks["none"]
    s = _scenario("op")
    extra = hardware_flops_per_step(s) - model_flops_per_step(s)
    assert extra == pytest.approx(recompute_flops(layer_ops(s), "op", Dims.of(s).unsharded()) * 4 * 4)  # 4 layers x 4 mb
    # the recomputed share is the forward of what runs again, priced as its forward
    assert runs["op"].breakdown["recompute"] > runs["selective"].breakdown["recompute"]


def test_torchtitan_per_op_checkpointing_imports_as_op_and_exports_back(tmp_path):
    config = tmp_path / "op.toml"
    config.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\nseq_len = 8192\n'
                      '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "op"\n')
    imported = CliRunner().invoke(app, ["import", "torchtitan", str(config), "--gpu", "h100-sxm", "--gpus", "8",
                                        "--json"])
    assert imported.exit_code == 0, imported.output
    import json
    scenario = json.loads(imported.stdout)["scenario"]
    assert scenario["training"]["recompute"] == "op"
    from sim3d.scenario.torchtitan import to_torchtitan_toml
    toml = to_torchtitan_toml(scenario_from_dict(scenario))
    assert 'mode = "selective"' in toml and 'selective_ac_option = "op"' in toml
    from sim3d.scenario.megatron_export import to_megatron_args
    with pytest.raises(ValueError, match="Megatron-LM cannot run"):
        to_megatron_args(scenario_from_dict(scenario))
