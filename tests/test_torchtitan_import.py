"""`sim3d import torchtitan`: a torchtitan train config (TOML) becomes a scenario that loads and
simulates; the Llama 3 flavors' FFN sizes are the published ones (Llama 3 paper,
arXiv:2407.21783, Table 3: 14,336 / 28,672 / 53,248)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sim3d
from sim3d.cli.app import app
from sim3d.scenario import scenario_from_dict
from sim3d.scenario.torchtitan import LLAMA3_FLAVORS, from_torchtitan, llama3_ffn_hidden, read_toml

FIXTURE = Path(__file__).parent / "fixtures" / "torchtitan_llama3_70b.toml"


@pytest.mark.parametrize("flavor,ffn", [("8B", 14336), ("70B", 28672), ("405B", 53248)])
def test_flavor_ffn_sizes_are_llama3s(flavor, ffn):
    f = LLAMA3_FLAVORS[flavor]
    assert llama3_ffn_hidden(f["dim"], f["ffn_dim_multiplier"], f["multiple_of"]) == ffn


def test_the_fixture_imports_and_simulates(tmp_path):
    out = tmp_path / "tt.yaml"
    result = CliRunner().invoke(app, ["import", "torchtitan", str(FIXTURE), "--gpu", "h100-sxm", "--gpus", "64", "--out", str(out),
                                      "--json"])
    assert result.exit_code == 0, result.output
    said = json.loads(result.output)
    s = said["scenario"]
    assert (s["model"]["layers"], s["model"]["hidden"], s["model"]["kv_heads"]) == (80, 8192, 8)
    assert s["parallel"] == {"tp": 8, "pp": 1, "cp": 1, "dp": 8, "zero": 3, "sequence_parallel": True}
    assert s["training"]["precision"] == "fp8" and s["training"]["fp8_param_gather"]
    assert (s["training"]["micro_batch"], s["training"]["global_batch"], s["training"]["recompute"]) == (8, 64, "full")
    # the fixture compiles; its float8 section names no recipe: torchao's default, tensorwise
    assert s["training"]["kernels"] == {"stack": "compiled", "norm": "fused", "fp8": "tensorwise"}
    assert not any("compile" in u for u in said["not_mapped"])
    run = sim3d.simulate(out)
    assert run.summary["num_gpus"] == 64 and run.memory.fits
    assert run.scenario.shard_group == 8


def _config(**parallelism) -> dict:
    config = read_toml(FIXTURE)
    config["parallelism"].update(parallelism)
    return config


def test_replicas_and_shards_make_hsdp():
    imported = from_torchtitan(_config(data_parallel_replicate_degree=2, data_parallel_shard_degree=4),
                               name="hsdp", gpu="h100-sxm")
    s = scenario_from_dict(imported.scenario)
    assert (s.dp, s.parallel.zero, s.shard_group, s.num_gpus) == (8, 3, 4, 64)


def test_replicas_alone_are_ddp():
    imported = from_torchtitan(_config(data_parallel_replicate_degree=8, data_parallel_shard_degree=1),
                               name="ddp", gpu="h100-sxm")
    assert imported.scenario["parallel"]["zero"] == 0


def test_a_pipeline_takes_the_schedule_and_its_chunks():
    config = _config(tensor_parallel_degree=4, pipeline_parallel_degree=4, data_parallel_shard_degree=4,
                     pipeline_parallel_schedule="Interleaved1F1B", pipeline_parallel_layers_per_stage=5,
                     pipeline_parallel_microbatch_size=2)
    s = scenario_from_dict(from_torchtitan(config, name="pp", gpu="h100-sxm").scenario)
    assert (s.schedule, s.vpp, s.training.micro_batch, s.num_microbatches) == ("interleaved-1f1b", 4, 2, 4)
    assert not s.reshard_after_forward  # torchtitan keeps parameters gathered under pipelining


def test_a_shard_degree_left_to_the_gpu_count_needs_it():
    result = CliRunner().invoke(app, ["import", "torchtitan", str(FIXTURE), "--gpu", "h100-sxm"])
    assert result.exit_code == 2 and "data_parallel_shard_degree = -1" in result.output and "--gpus" in result.output


@pytest.mark.parametrize("change,words", [
    ({"tensor_parallel_degree": 0}, ["tensor_parallel_degree", "0"]),
    ({"pipeline_parallel_degree": 2, "pipeline_parallel_schedule": "LoopedBFS"}, ["LoopedBFS", "Interleaved1F1B"]),
    ({"data_parallel_shard_degree": 3}, ["24 GPUs", "--gpus 64"]),
])
def test_bad_configs_are_refused_with_the_field_named(change, words):
    with pytest.raises(ValueError) as err:
        from_torchtitan(_config(**change), name="bad", gpu="h100-sxm", gpus=64)
    for word in words:
        assert word in str(err.value)


def test_not_toml_is_refused(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text("[model\nname=")
    result = CliRunner().invoke(app, ["import", "torchtitan", str(path), "--gpu", "h100-sxm", "--gpus", "8"])
    assert result.exit_code == 2 and "not TOML" in result.output


@pytest.mark.parametrize("parallelism", [
    {},
    {"data_parallel_replicate_degree": 2, "data_parallel_shard_degree": 4},
    {"tensor_parallel_degree": 4, "pipeline_parallel_degree": 4, "data_parallel_shard_degree": 4,
     "pipeline_parallel_schedule": "Interleaved1F1B", "pipeline_parallel_layers_per_stage": 5,
     "pipeline_parallel_microbatch_size": 2, "fsdp_reshard_after_forward": "always"},
])
def test_export_then_import_gives_the_same_scenario(parallelism):
    """`run --torchtitan-toml` writes the layout sections; read back over the same model, they
    make the same scenario."""
    from sim3d.scenario.torchtitan import to_torchtitan_toml
    import tomllib
    config = _config(**({"data_parallel_shard_degree": 8} | parallelism))
    first = scenario_from_dict(from_torchtitan(config, name="x", gpu="h100-sxm").scenario)
    exported = tomllib.loads(to_torchtitan_toml(first))
    again = {**config, **{k: v for k, v in exported.items() if k not in ("model", "quantize")}}
    again["model"] = {**config["model"], **exported.get("model", {})}
    second = scenario_from_dict(from_torchtitan(again, name="x", gpu="h100-sxm").scenario)
    assert second.model_dump() == first.model_dump()


def test_export_refuses_what_torchtitan_cannot_shard():
    from sim3d.scenario.torchtitan import to_torchtitan_toml
    gpt3 = str(Path(__file__).resolve().parents[1] / "scenarios" / "gpt3.yaml")
    result = CliRunner().invoke(app, ["run", gpt3, "--set", "parallel.zero=1", "--torchtitan-toml"])
    assert result.exit_code == 2 and "zero=1" in result.output
    s = scenario_from_dict(from_torchtitan(_config(data_parallel_shard_degree=8), name="x", gpu="h100-sxm").scenario)
    assert "data_parallel_shard_degree = 8" in to_torchtitan_toml(s)


def test_the_export_names_what_it_cannot_carry():
    """A Megatron-style scenario (Transformer Engine, userbuffer TP overlap) exported to
    torchtitan says, in the config itself, what torchtitan will not run."""
    from sim3d.scenario.torchtitan import to_torchtitan_toml
    import tomllib
    base = scenario_from_dict(from_torchtitan(_config(data_parallel_shard_degree=8), name="x", gpu="h100-sxm").scenario)
    assert not to_torchtitan_toml(base).startswith("# not carried")
    te = base.model_copy(update={"training": base.training.model_copy(update={
        "kernels": base.training.kernels.model_copy(update={"stack": "te"}), "tp_comm_overlap": True})})
    text = to_torchtitan_toml(te)
    carried_not = [line for line in text.splitlines() if line.startswith("# not carried:")]
    assert len(carried_not) == 2 and "tp_comm_overlap" in carried_not[1] and "stack te" in carried_not[0]
    assert tomllib.loads(text) == tomllib.loads(to_torchtitan_toml(base).replace("[compile]\nenable = true\n", ""))


def test_the_planner_proposes_no_userbuffer_overlap_to_a_torch_stack():
    from sim3d.studies.space import Space
    s = scenario_from_dict(from_torchtitan(_config(data_parallel_shard_degree=8), name="x", gpu="h100-sxm").scenario)
    assert Space(s, s.num_gpus, {}).dimensions["tp_comm_overlap"] == (False,)
    te = s.model_copy(update={"training": s.training.model_copy(update={
        "kernels": s.training.kernels.model_copy(update={"stack": "te"})})})
    assert True in Space(te, te.num_gpus, {}).dimensions["tp_comm_overlap"]


@pytest.mark.parametrize("pp", [1, 2])
def test_the_exported_batches_import_back_as_they_were(pp):
    """Gradient accumulation (global batch over micro-batch x dp > 1) survives the round trip:
    without a pipeline torchtitan's local batch is the micro-batch (it wrote global / dp)."""
    from sim3d.scenario.torchtitan import to_torchtitan_toml
    import tomllib
    config = _config(data_parallel_shard_degree=8, pipeline_parallel_degree=pp)
    first = scenario_from_dict(from_torchtitan(config, name="x", gpu="h100-sxm").scenario,
                               ["training.global_batch=256", "training.micro_batch=2"])
    assert first.num_microbatches > 1
    exported = tomllib.loads(to_torchtitan_toml(first))
    again = {**config, **{k: v for k, v in exported.items() if k not in ("model", "quantize")}}
    second = scenario_from_dict(from_torchtitan(again, name="x", gpu="h100-sxm").scenario)
    assert (second.training.micro_batch, second.training.global_batch) == (2, 256)


@pytest.mark.parametrize("text", ["a" + ".a" * 30000 + " = 1\n", "x = " + "[" * 5000 + "]" * 5000 + "\n",
                                  "x = " + "{a = " * 40 + "1" + "}" * 40 + "\n"])
def test_deep_toml_is_refused_before_it_is_parsed(tmp_path, text):
    """A 60 KB config with a 30,000-level dotted key took 5.2 GB and 16 s; deep arrays hit
    RecursionError."""
    from sim3d.scenario.torchtitan import read_toml
    path = tmp_path / "deep.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match="levels deep"):
        read_toml(path)
    assert read_toml(FIXTURE)["parallelism"]  # the real config passes


@pytest.mark.parametrize("converters, precision, unmapped", [
    (["quantize.linear.float8"], "fp8", []), (["float8"], "fp8", []),
    (["quantize.linear.mx"], "bf16", ["quantize.linear.mx"]), (["bogus"], "bf16", ["bogus"]),
])
def test_converters_sim3d_does_not_price_are_named(converters, precision, unmapped):
    config = read_toml(FIXTURE)
    config["model"]["converters"] = converters
    imported = from_torchtitan(config, name="x", gpu="h100-sxm", gpus=64)
    assert imported.scenario["training"]["precision"] == precision
    assert [u for u in imported.unmapped if u.startswith("model.converters")] == \
        [f"model.converters: {c} (not priced: the run is priced without it)" for c in unmapped]


def test_converters_given_as_text_not_a_list_are_refused():
    config = read_toml(FIXTURE)
    config["model"]["converters"] = "quantize.linear.float8"
    with pytest.raises(ValueError, match="a list of converter names"):
        from_torchtitan(config, name="x", gpu="h100-sxm", gpus=64)
