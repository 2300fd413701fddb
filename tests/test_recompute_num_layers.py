"""`training.recompute_num_layers: N`: the first N layers of each pipeline stage recompute under
the policy, the others keep everything (sim3d/model/recompute.py), as Megatron's
`--recompute-method block --recompute-num-layers N` and torchtitan's every-n-th-block option
run. Checked against Korthikanti's activation formula, Narayanan's FLOP count, and the step's
linearity in N; and the embedding and LM head are never recomputed, under any policy."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import sim3d
from sim3d.cli.app import app
from sim3d.errors import ScenarioError
from sim3d.model.flops import hardware_flops_per_step, model_flops_per_step
from sim3d.model.memory import stage_activation_bytes
from sim3d.scenario.importers import from_megatron
from sim3d.scenario.megatron_export import to_megatron_args
from sim3d.scenario.load import scenario_from_dict
from sim3d.scenario.torchtitan import to_torchtitan_toml

# a GPT of Korthikanti's form (no dropout switches off, MHA, ffn 4h), 8 layers on 2 stages
B, S, H, A, L, V = 1, 2048, 2048, 16, 8, 51200


def gpt(recompute: str = "full", layers_recomputed: int | None = None, pp: int = 2) -> dict:
    training = dict(micro_batch=B, global_batch=8, recompute=recompute, precision="bf16",
                    attention_backend="unfused")
    if layers_recomputed is not None:
        training["recompute_num_layers"] = layers_recomputed
    return dict(name="gpt", model=dict(layers=L, hidden=H, heads=A, vocab=V, seq_len=S),
                parallel=dict(tp=1, pp=pp, dp=1), training=training,
                cluster=dict(gpu="a100-80gb", nodes=1, gpus_per_node=pp))


def test_a_stage_keeps_the_inputs_of_its_recomputed_layers_and_everything_of_the_rest():
    sbh = S * B * H
    none_layer = sbh * (34 + 5 * A * S / H)  # Korthikanti eq. 2
    full_layer = 2 * sbh  # the layer input, bf16
    for n in range(0, 5):
        s = scenario_from_dict(gpt("full" if n else "none", n if n else None))
        layers, _ = stage_activation_bytes(s, 0)
        assert layers == pytest.approx(n * full_layer + (4 - n) * none_layer)


def test_recomputed_flops_scale_with_the_layers_recomputed():
    """Narayanan eq. 3: full recomputation adds one forward of every layer, 24 B s l h^2
    (1 + s / 6h) per micro-batch, and nothing of the LM head's; N of a stage's 4 layers add N/4."""
    steps = 8 / B
    layer_forward = 24 * B * S * H**2 * (1 + S / (6 * H))
    base = model_flops_per_step(scenario_from_dict(gpt("none")))
    assert hardware_flops_per_step(scenario_from_dict(gpt("full"))) - base == pytest.approx(
        steps * L * layer_forward, rel=1e-9)
    for n in (1, 2, 3):
        added = hardware_flops_per_step(scenario_from_dict(gpt("full", n))) - base
        assert added == pytest.approx(steps * (2 * n) * layer_forward, rel=1e-9)  # n on each of 2 stages


def test_the_step_grows_linearly_with_the_layers_recomputed():
    """One stage, no pipeline: every recomputed layer adds the same forward to each backward."""
    steps = [sim3d.simulate(gpt("full" if n else "none", n if n else None, pp=1)).summary["step_time_s"]
             for n in range(0, L + 1)]
    rise = [b - a for a, b in zip(steps, steps[1:])]
    assert min(rise) > 0 and max(rise) == pytest.approx(min(rise), rel=1e-6)
    assert steps[-1] == pytest.approx(sim3d.simulate(gpt("full", pp=1)).summary["step_time_s"], rel=1e-12)


def test_no_policy_recomputes_the_embedding_or_the_head():
    """The cost model charged the LM head's forward again under full recomputation while the
    FLOP count did not; both now follow Megatron (only the blocks are checkpointed)."""
    result = sim3d.simulate(gpt("full", pp=1))
    redo = result.summary["breakdown"]["recompute"]
    per_layer = (sim3d.simulate(gpt("full", 1, pp=1)).summary["breakdown"]["recompute"])
    assert redo == pytest.approx(L * per_layer, rel=1e-9)


def test_a_count_without_a_policy_is_refused():
    for policy in ("none", "selective"):
        with pytest.raises(ScenarioError, match=f"training.recompute_num_layers: 2 layers .* is {policy}: set it"):
            scenario_from_dict(gpt(policy, 2))


def test_megatron_block_recomputation_imports_and_exports():
    args = ["--num-layers", "8", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
            "--micro-batch-size", "1", "--global-batch-size", "8", "--pipeline-model-parallel-size", "2",
            "--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "3"]
    imported = from_megatron(args, name="x", gpu="a100-80gb", gpus=2)
    assert imported.scenario["training"]["recompute_num_layers"] == 3
    exported = to_megatron_args(scenario_from_dict(gpt("full", 3)))
    assert "--recompute-method block --recompute-num-layers 3" in " ".join(map(str, exported))
    uniform = from_megatron(args[:-4] + ["--recompute-method", "uniform", "--recompute-num-layers", "1"],
                            name="x", gpu="a100-80gb", gpus=2)
    assert "recompute_num_layers" not in uniform.scenario["training"]
    no_granularity = from_megatron([a for a in args if a not in ("--recompute-granularity", "full")],
                                   name="x", gpu="a100-80gb", gpus=2)
    assert "recompute_num_layers" not in no_granularity.scenario.get("training", {})
    assert any("ignored" in note for note in no_granularity.assumed)
    none_at_all = from_megatron(args[:-1] + ["0"], name="x", gpu="a100-80gb", gpus=2)
    assert none_at_all.scenario["training"]["recompute"] == "none"


def test_torchtitans_every_nth_block_imports_as_a_count_and_exports_back(tmp_path):
    config = tmp_path / "every2.toml"
    config.write_text('[model]\nname = "llama3"\nflavor = "8B"\n[training]\nlocal_batch_size = 1\nseq_len = 8192\n'
                      '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "2"\n')
    ran = CliRunner().invoke(app, ["import", "torchtitan", str(config), "--gpu", "h100-sxm", "--gpus", "8", "--json"])
    assert ran.exit_code == 0, ran.output
    scenario = json.loads(ran.stdout)["scenario"]
    assert (scenario["training"]["recompute"], scenario["training"]["recompute_num_layers"]) == ("full", 16)  # of 32
    toml = to_torchtitan_toml(scenario_from_dict(scenario))
    assert 'mode = "selective"' in toml and 'selective_ac_option = "2"' in toml


def test_the_planner_keeps_the_count_for_its_own_policy_only(tmp_path):
    """A base that recomputes 2 layers of each stage: the planner's other policies apply to every
    layer, and every finalist it simulates loads (a count beside `none` is refused)."""
    from pathlib import Path
    tiny = str(Path(__file__).resolve().parents[1] / "scenarios" / "tiny.yaml")
    ran = CliRunner().invoke(app, ["plan", tiny, "--set", "training.recompute=full", "--set",
                                   "training.recompute_num_layers=2", "--gpus", "2", "--no-plots", "--json",
                                   "--out", str(tmp_path)])
    assert ran.exit_code == 0, ran.output
    import pandas as pd
    finalists = pd.read_csv(tmp_path / "finalists.csv")
    assert set(finalists["recompute"]) == {"none", "selective", "full"}
    assert finalists["step_time_s"].notna().all()
