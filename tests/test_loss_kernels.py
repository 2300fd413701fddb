"""`training.kernels.loss`: the cross-entropy's kernels counted by hand from the code each
stack runs (sim3d/model/loss_kernels.py), and the Megatron importer and exporter carrying it."""

from __future__ import annotations

from pathlib import Path

import pytest

import sim3d
from sim3d.costs.compute import ComputeModel, memory_bytes
from sim3d.costs.gemm import KERNEL_OVERHEAD_S, MEMORY_EFFICIENCY
from sim3d.model.ops import head_ops
from sim3d.scenario import load_scenario
from sim3d.scenario.load import scenario_from_dict
from sim3d.scenario.importers import from_megatron
from sim3d.scenario.megatron_export import export_notes, to_megatron_args
from sim3d.scenario.torchtitan import to_torchtitan_toml

GPT3 = Path(__file__).resolve().parents[1] / "scenarios" / "gpt3.yaml"


def _loss(loss: str):
    s = load_scenario(GPT3, [f"training.kernels.loss={loss}"])
    op = next(op for op in head_ops(s) if op.name == "cross_entropy")
    logits = s.training.micro_batch * s.model.seq_len * s.model.vocab / s.tp  # 2048 x 6400 per rank
    return s, op, logits


def test_megatrons_vocab_parallel_loss_makes_six_passes_over_fp32_logits_and_two_back():
    s, op, v = _loss("vocab_parallel")
    forward, backward = op.kernel_bytes
    # .float() 2+4, max 4, sub_ 8, exp 8, sum 4, div_ 8 / mul_ 8, the upcast's backward 4+2
    assert [b / v for b in forward] == pytest.approx([6, 4, 8, 8, 4, 8])
    assert [b / v for b in backward] == pytest.approx([8, 6])
    fused_s, fused, _ = _loss("fused")
    assert memory_bytes(fused) == pytest.approx((6 * v, 12 * v))  # one kernel each way
    # each kernel is its bytes at the HBM rate plus a launch: 38 + 14 bytes over 8 launches
    # against 6 + 12 over 2
    cm = ComputeModel(s)
    t, t_fused = cm.op_time(op), ComputeModel(fused_s).op_time(fused)
    hbm = cm.hbm * MEMORY_EFFICIENCY
    extra = (38 - 6 + 14 - 12) * v / hbm + 6 * KERNEL_OVERHEAD_S
    assert (t.fwd + t.bwd_input) - (t_fused.fwd + t_fused.bwd_input) == pytest.approx(extra, rel=1e-6)


def test_the_loss_defaults_to_the_stacks_own():
    tiny = GPT3.parent / "tiny.yaml"
    assert load_scenario(tiny, ["training.kernels.stack=eager"]).training.kernels.loss_kernels == "torch"
    assert load_scenario(tiny, ["training.kernels.stack=compiled"]).training.kernels.loss_kernels == "fused"
    assert load_scenario(tiny).training.kernels.loss_kernels == "fused"
    base = load_scenario(GPT3).training.kernels
    assert base.loss == "vocab_parallel"  # the 2021 scenario says so
    assert sim3d.simulate(GPT3).step_time > sim3d.simulate(GPT3, sets=("training.kernels.loss=fused",)).step_time


ARGS = ("--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --seq-length 2048 --vocab-size 51200 "
        "--micro-batch-size 1 --global-batch-size 8 --bf16")


def test_megatron_arguments_without_the_fusion_flag_run_the_vocab_parallel_loss():
    plain = from_megatron(ARGS, name="x", gpu="h100-sxm", gpus=8).scenario
    fused = from_megatron(ARGS + " --cross-entropy-loss-fusion", name="x", gpu="h100-sxm", gpus=8).scenario
    assert plain["training"]["kernels"]["loss"] == "vocab_parallel"
    assert "loss" not in fused["training"].get("kernels", {})
    for loss, flag in (("vocab_parallel", False), ("fused", True)):
        args = to_megatron_args(load_scenario(GPT3, [f"training.kernels.loss={loss}"]))
        assert ("--cross-entropy-loss-fusion" in args) is flag
    torch_loss = load_scenario(GPT3, ["training.kernels.loss=torch"])
    assert "--cross-entropy-loss-fusion" not in to_megatron_args(torch_loss)
    assert any("not torch's cross_entropy" in note for note in export_notes(torch_loss))
    assert not any("cross_entropy" in note for note in export_notes(load_scenario(GPT3)))


def test_a_torchtitan_config_says_it_cannot_carry_megatrons_loss():
    llama = GPT3.parent / "llama3.1-8b.yaml"
    sets = ["training.kernels.stack=eager", "parallel.zero=3"]
    toml = to_torchtitan_toml(load_scenario(llama, [*sets, "training.kernels.loss=vocab_parallel"]))
    assert "# not carried: training.kernels.loss vocab_parallel" in toml
    assert "kernels.loss" not in to_torchtitan_toml(load_scenario(llama, sets))


def test_plan_and_run_say_what_megatron_runs_instead_of_torchs_loss(tmp_path):
    from typer.testing import CliRunner
    from sim3d.cli.app import app
    runner = CliRunner()
    tiny = str(GPT3.parent / "tiny.yaml")
    planned = runner.invoke(app, ["plan", tiny, "--set", "training.kernels.stack=eager", "--gpus", "8", "--top", "2",
                                  "--json", "--workers", "1", "--no-plots", "--out", str(tmp_path / "plan")])
    assert planned.exit_code == 0, planned.output
    assert "not torch's cross_entropy" in planned.stdout
    ran = runner.invoke(app, ["run", tiny, "--set", "training.kernels.stack=eager", "--megatron-args", "--json",
                              "--no-plots", "--out", str(tmp_path / "run")])
    assert ran.exit_code == 0, ran.output
    assert "not torch's cross_entropy" in ran.stdout
    refused = runner.invoke(app, ["run", tiny, "--set", "training.recompute=op", "--megatron-args", "--no-plots",
                                  "--out", str(tmp_path / "op")])
    assert refused.exit_code == 2 and "Megatron-LM" in refused.stderr and "internal error" not in refused.output


def test_a_flat_megatron_argument_dict_reads_the_loss_fusion_switch():
    flat = {"name": "flat", "num_layers": 2, "hidden_size": 1024, "num_attention_heads": 16, "seq_length": 2048,
            "vocab_size": 51200, "micro_batch_size": 1, "global_batch_size": 8, "bf16": True,
            "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8}}
    loss = lambda **more: scenario_from_dict({**flat, **more}).training.kernels.loss_kernels  # noqa: E731
    assert loss() == "vocab_parallel"
    assert loss(cross_entropy_loss_fusion=False) == "vocab_parallel"
    assert loss(cross_entropy_loss_fusion=True) == "fused"
