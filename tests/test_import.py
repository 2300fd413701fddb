"""Scenarios imported from a Megatron-LM command line and a NeMo config (fixtures written from
public argument lists) simulate with no edits, and match the hand-written scenarios."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import sim3d
from sim3d.cli.app import app
from sim3d.scenario.importers import from_megatron, parse_megatron_args
from sim3d.scenario.nemo_import import from_nemo
from sim3d.scenario.load import read_scenario_yaml, scenario_from_dict

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures"


def gpt3_args() -> list[str]:
    text = (FIXTURES / "megatron_gpt3_175b.args").read_text()
    return " ".join(line for line in text.splitlines() if not line.startswith("#")).split()


def test_megatron_gpt3_imports_to_the_hand_written_scenario():
    """The 2021 command line plus the two switches that name its era (attention scores in
    memory, serial TP all-reduce) is scenarios/gpt3.yaml: the same prediction to the bit."""
    imported = from_megatron(gpt3_args() + ["--attention-backend", "local",
                                            "--no-async-tensor-model-parallel-allreduce"],
                             name="gpt3-175b", gpu="a100-80gb", gpus=1024)
    assert imported.unmapped == []
    assert any("vocab 51200" in a for a in imported.assumed)
    # the 2021 default no flag of today's Megatron-LM names (--no-scatter-gather-tensors-in-pipeline was its off switch)
    imported.scenario["training"]["p2p_scatter_gather"] = True
    # and fp16 gradients summed by autograd: 2021's contiguous buffers were opt-in, the fusion came in 2022
    imported.scenario["training"]["kernels"]["grad_accumulation"] = "autograd"
    ours = sim3d.simulate(imported.scenario)
    theirs = sim3d.simulate(ROOT / "scenarios" / "gpt3.yaml")
    assert ours.step_time == theirs.step_time
    assert ours.scenario.dp == 8


def test_nemo_llama_imports_to_the_hand_written_scenario():
    imported = from_nemo(read_scenario_yaml(FIXTURES / "nemo_llama31_70b.yaml"), name="llama3.1-70b", gpu="h100-sxm")
    assert imported.unmapped == []
    s = scenario_from_dict(imported.scenario)
    hand = sim3d.load_scenario(ROOT / "scenarios" / "llama3.1-70b.yaml")
    assert s.training == hand.training
    assert s.parallel.model_dump(exclude={"dp"}) == hand.parallel.model_dump(exclude={"dp"}) and s.dp == hand.dp == 2
    assert s.model.model_dump(exclude={"vocab"}) == hand.model.model_dump(exclude={"vocab"})
    assert s.model.vocab == 128512  # Llama 3.1's 128,256 padded as Megatron pads it (128 x tp)
    ours, theirs = sim3d.simulate(s).step_time, sim3d.simulate(hand).step_time
    assert ours == pytest.approx(theirs, rel=0.005)


def test_what_is_not_mapped_or_assumed_is_said():
    imported = from_megatron("--num-layers 2 --hidden-size 256 --num-attention-heads 4 --seq-length 128 "
                             "--global-batch-size 8 --moe-grouped-gemm --frobnicate 3", name="x", gpu="h100-sxm")
    assert imported.unmapped == ["--moe-grouped-gemm", "--frobnicate 3"]
    assert any(a.startswith("training.precision fp32") for a in imported.assumed)
    assert any(a.startswith("4 GPUs") or a.startswith("1 GPUs") for a in imported.assumed)
    flags, stray = parse_megatron_args(["pretrain_gpt.py", "--lr=1e-4", "--rampup-batch-size", "16", "16", "100"])
    assert flags == {"lr": "1e-4", "rampup_batch_size": ["16", "16", "100"]} and stray == ["pretrain_gpt.py"]


def test_import_commands(tmp_path):
    runner = CliRunner()
    out = tmp_path / "gpt3.yaml"
    result = runner.invoke(app, ["import", "megatron", "--gpu", "a100-80gb", "--gpus", "1024", "--out", str(out), "--", *gpt3_args()])
    assert result.exit_code == 0, result.output
    assert sim3d.load_scenario(out).num_gpus == 1024
    result = runner.invoke(app, ["import", "nemo", str(FIXTURES / "nemo_llama31_70b.yaml"), "--gpu", "h100-sxm", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["scenario"]["parallel"]["vpp"] == 5 and data["not_mapped"] == []
    bad = runner.invoke(app, ["import", "megatron", "--gpu", "z100", "--", "--num-layers", "2"])
    assert bad.exit_code == 2 and "z100" in bad.output
    missing = runner.invoke(app, ["import", "megatron", "--gpu", "a100-80gb", "--", "--num-layers", "2", "--hidden-size", "64"])
    assert missing.exit_code == 2 and "--seq-length" in missing.output


@pytest.mark.parametrize("importer", ["megatron", "nemo", "torchtitan"])
def test_every_importer_requires_the_gpu(importer):
    """No importer's input names the GPU, so none guesses one (megatron used to assume A100 and
    the others H100 for the same flags)."""
    source = {"megatron": ["--", *gpt3_args()], "nemo": [str(FIXTURES / "nemo_llama31_70b.yaml")],
              "torchtitan": [str(FIXTURES / "torchtitan_llama3_70b.toml")]}[importer]
    done = CliRunner().invoke(app, ["import", importer, *source])
    assert done.exit_code == 2 and "--gpu" in done.output


@pytest.mark.parametrize("path", sorted(str(p.relative_to(ROOT)) for p in (ROOT / "scenarios").glob("*.yaml")))
def test_megatron_arguments_round_trip(path):
    """Export a shipped scenario's Megatron arguments, import them on the same cluster: the
    same model, layout and training settings come back, and nothing is left unmapped."""
    from sim3d.scenario.megatron_export import to_megatron_args
    s = sim3d.load_scenario(ROOT / path)
    imported = from_megatron(to_megatron_args(s), name=s.name, gpu=s.cluster.gpu, gpus=s.num_gpus,
                             gpus_per_node=s.gpus_per_node)
    assert imported.unmapped == []
    back = scenario_from_dict({**imported.scenario, "schedule": s.schedule})
    # Megatron-LM 2020-22's pipeline scatter/gather has no flag to switch it on (it was the default),
    # nor 2021's autograd accumulation of fp16 gradients (export_notes says so)
    kernels = s.training.kernels
    if kernels.accumulation in ("autograd", "upcast"):
        kernels = kernels.model_copy(update={"grad_accumulation": None})
    expected = s.training.model_copy(update={"p2p_scatter_gather": False, "kernels": kernels})
    assert back.model == s.model and back.training == expected
    assert back.dp == s.dp
    assert back.parallel.model_dump(exclude={"dp"}) == s.parallel.model_dump(exclude={"dp"})


def test_run_and_plan_print_megatron_arguments(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["run", str(ROOT / "scenarios" / "tiny.yaml"), "--json", "--no-plots",
                                 "--megatron-args", "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    flags = json.loads(result.stdout)["megatron_args"].split()
    assert flags[flags.index("--global-batch-size") + 1] == "8"
    result = runner.invoke(app, ["plan", str(ROOT / "scenarios" / "tiny.yaml"), "--gpus", "8", "--top", "2",
                                 "--json", "--workers", "1", "--out", str(tmp_path / "plan")])
    assert result.exit_code == 0, result.output
    for entry in json.loads(result.stdout)["ranked"]:
        flags = entry["megatron_args"].split()
        assert int(flags[flags.index("--tensor-model-parallel-size") + 1]) == entry["tp"]


def test_a_flat_megatron_argument_dict_is_a_scenario():
    """Megatron's argument names at the top level (as its args namespace or a NeMo model
    section has them) load like the sectioned file; a top-level --set with a Megatron name
    overrides the same value; one value given both ways is refused."""
    flat = {"name": "flat", "num_layers": 96, "hidden_size": 12288, "num_attention_heads": 96, "seq_length": 2048,
            "vocab_size": 51200, "tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 16,
            "micro_batch_size": 1, "global_batch_size": 1536, "fp16": True, "attention_backend": "local",
            "no_async_tensor_model_parallel_allreduce": True, "swiglu": False, "overlap_grad_reduce": False,
            "training": {"recompute": "full", "p2p_scatter_gather": True,
                         "kernels": {"loss": "vocab_parallel", "grad_accumulation": "autograd"}},
            "cluster": {"gpu": "a100-80gb", "nodes": 128, "gpus_per_node": 8}}
    assert sim3d.simulate(flat).step_time == sim3d.simulate(ROOT / "scenarios" / "gpt3.yaml").step_time
    assert sim3d.simulate(flat, sets=("tensor_model_parallel_size=4",)).scenario.dp == 16
    with pytest.raises(sim3d.ScenarioError, match="given twice"):
        scenario_from_dict({**flat, "parallel": {"tp": 8}})
    with pytest.raises(sim3d.ScenarioError, match="true or false"):
        scenario_from_dict({**flat, "sequence_parallel": "yes"})


def test_megatron_names_under_the_section_nemo_users_put_them_in():
    """The issue's examples: `swiglu`, `recompute_granularity`, `bf16` and `num_experts`
    directly under `model:` (as NeMo writes them) go where sim3d keeps them."""
    s = scenario_from_dict({
        "name": "nemo-style", "training": {"global_batch": 16},
        "model": {"num_layers": 8, "hidden_size": 1024, "num_attention_heads": 8, "seq_length": 1024,
                  "vocab_size": 32000, "swiglu": True, "bf16": True, "recompute_granularity": "selective",
                  "num_experts": 8, "moe_router_topk": 2, "tensor_model_parallel_size": 2},
        "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8}})
    assert (s.model.activation, s.training.precision, s.training.recompute) == ("swiglu", "bf16", "selective")
    assert (s.model.moe.experts, s.model.moe.top_k, s.tp, s.dp) == (8, 2, 2, 4)


@pytest.mark.parametrize("text,word", [
    ("model: 3", "model: expected a section"),
    ("trainer: {num_nodes: two, devices: 8}\nmodel: {num_layers: 2}", "trainer.num_nodes"),
    ("model: {virtual_pipeline_model_parallel_size: x, num_layers: 2}", "virtual_pipeline_model_parallel_size"),
    ("[1, 2]", "has a `model:` section"),
])
def test_broken_nemo_configs_are_named_not_crashed_on(tmp_path, text, word):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["import", "nemo", str(path), "--gpu", "h100-sxm"])
    assert result.exit_code == 2 and word in result.output, result.output


def test_a_tokenizer_that_is_not_a_section_is_ignored():
    imported = from_nemo({"model": {"tokenizer": 5, "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                    "encoder_seq_length": 32, "global_batch_size": 8}}, name="t", gpu="h100-sxm")
    assert imported.scenario["model"]["vocab"] == 50304  # GPT-2's, assumed and said


@pytest.mark.parametrize("precision,flag,fp32_grads", [("bf16", "--grad-reduce-in-bf16", False),
                                                        ("fp16", "--accumulate-allreduce-grads-in-fp32", True)])
def test_the_gradient_width_flags_round_trip(precision, flag, fp32_grads):
    """Megatron's two gradient-width flags (each turns off its precision's default) import as
    `grad_reduce_in_fp32` and are written back; the default writes neither."""
    from sim3d.scenario.megatron_export import to_megatron_args
    base = ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
            "--max-position-embeddings", "128", "--micro-batch-size", "1", "--global-batch-size", "8", f"--{precision}"]
    imported = from_megatron(base + [flag], name="w", gpu="h100-sxm", gpus=8, gpus_per_node=8)
    assert imported.unmapped == []
    s = scenario_from_dict(imported.scenario)
    assert s.training.grad_reduce_in_fp32 is fp32_grads and flag in to_megatron_args(s)
    plain = scenario_from_dict(from_megatron(base, name="w", gpu="h100-sxm", gpus=8, gpus_per_node=8).scenario)
    assert plain.training.grad_reduce_in_fp32 is None and flag not in to_megatron_args(plain)


BASE_ARGS = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --micro-batch-size 1 "
             "--global-batch-size 64 --pipeline-model-parallel-size 2 ")


@pytest.mark.parametrize("extra,words", [
    ("--num-layers-per-virtual-pipeline-stage 2 3", "needs one value"),
    ("--num-layers-per-virtual-pipeline-stage", "needs one value"),
    ("--num-layers-per-virtual-pipeline-stage 5", "24 layers do not split into pp=2 stages of whole 5-layer chunks"),
    ("--num-layers-per-virtual-pipeline-stage -3", "a positive whole number of layers"),
    ("--swiglu false", "--swiglu is a switch and takes no value"),
    ("--bf16 --fp16", "--bf16 and --fp16 contradict each other"),
])
def test_megatron_arguments_megatron_would_refuse_are_refused(extra, words):
    with pytest.raises(ValueError, match=words):
        from_megatron(BASE_ARGS + extra, name="x", gpu="h100-sxm", gpus=16)


def test_one_virtual_chunk_per_stage_is_plain_1f1b():
    """12 layers per virtual stage on 24 layers over pp 2: one chunk, no interleaving."""
    tree = from_megatron(BASE_ARGS + "--num-layers-per-virtual-pipeline-stage 12", name="x", gpu="h100-sxm",
                         gpus=16).scenario
    assert tree["schedule"] == "1f1b" and tree["parallel"]["vpp"] == 1
    scenario_from_dict(tree)


# A Llama 3 70B launch in Megatron-Core's current spelling (its examples/llama scripts write
# the interleaved depth as virtual stages per rank and the vocabulary as a Hugging Face tokenizer).
LLAMA3_70B = ("--num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 --num-attention-heads 64 "
              "--group-query-attention --num-query-groups 8 --seq-length 8192 --max-position-embeddings 8192 "
              "--swiglu --normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights "
              "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 "
              "--num-virtual-stages-per-pipeline-rank 5 --sequence-parallel --use-distributed-optimizer "
              "--micro-batch-size 1 --global-batch-size 512 --bf16 "
              "--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-70B")


def test_megatron_cores_current_llama3_launch_keeps_its_interleaving_and_vocabulary():
    imported = from_megatron(LLAMA3_70B, name="llama3-70b", gpu="h100-sxm", gpus=256)
    s = scenario_from_dict(imported.scenario)
    assert s.parallel.vpp == 5 and s.schedule == "interleaved-1f1b"  # was silently plain 1F1B
    # Meta-Llama-3's 128,256 tokens, padded as Megatron pads them: a multiple of 128 x tp 8
    assert s.model.vocab == 129_024 and 129_024 - 1024 < 128_256 <= 129_024
    assert any("128,256 tokens" in note for note in imported.assumed)
    assert not any("virtual" in item or "tokenizer" in item for item in imported.unmapped)
    with pytest.raises(ValueError, match="virtual-stages-per-pipeline-rank says 5"):
        from_megatron(LLAMA3_70B + " --num-layers-per-virtual-pipeline-stage 2", name="x", gpu="h100-sxm", gpus=256)


def test_an_unknown_tokenizer_is_named_not_silently_gpt2():
    imported = from_megatron(LLAMA3_70B.replace("meta-llama/Meta-Llama-3-70B", "acme/secret-tok"),
                             name="x", gpu="h100-sxm", gpus=256)
    assert any("acme/secret-tok" in item and "--vocab-size" in item for item in imported.unmapped)


def test_a_flat_megatron_namespace_with_recompute_method_and_padded_vocab_validates():
    flat = {"name": "ns", "num_layers": 8, "hidden_size": 1024, "num_attention_heads": 16, "seq_length": 2048,
            "vocab_size": 128256, "padded_vocab_size": 129024, "recompute_granularity": "full",
            "recompute_method": "uniform", "recompute_num_layers": 1, "lr": 3e-4, "tokenizer_model": "x",
            "tensor_model_parallel_size": 8, "micro_batch_size": 1, "global_batch_size": 8,
            "cluster": {"gpu": "h100-sxm", "nodes": 1, "gpus_per_node": 8}}
    s = scenario_from_dict(flat)
    assert s.model.vocab == 129_024 and s.training.recompute == "full"
    with pytest.raises(sim3d.ScenarioError, match="recompute_method"):  # not a Megatron dict: still refused
        scenario_from_dict({"name": "yaml", "recompute_method": "uniform", "model": {"layers": 2}})


@pytest.mark.parametrize("sets", [
    ["parallel.zero=2"],
    ["parallel.zero=3"],
    ["parallel.zero=3", "parallel.dp_shard=2"],  # HSDP: groups of 2 of dp*cp = 4 ranks
    ["parallel.zero=1", "parallel.dp_replicate=2"],  # Megatron's partial distributed optimizer
])
def test_sharded_layouts_round_trip_through_megatron_fsdp_arguments(sets):
    """ZeRO-2/3 leave as Megatron-FSDP's flags (examples/megatron_fsdp/README.md's required set),
    HSDP as distributed-optimizer instances, and come back as the same sharding, unmapped nothing."""
    from sim3d.scenario.megatron_export import to_megatron_args
    s = sim3d.load_scenario(ROOT / "scenarios" / "llama3.1-8b.yaml", sets)
    args = to_megatron_args(s)
    assert ("--use-megatron-fsdp" in args) == (s.parallel.zero >= 2)
    imported = from_megatron(args, name=s.name, gpu=s.cluster.gpu, gpus=s.num_gpus, gpus_per_node=s.gpus_per_node)
    assert imported.unmapped == []
    back = scenario_from_dict({**imported.scenario, "schedule": s.schedule})
    assert (back.parallel.zero, back.shard_group) == (s.parallel.zero, s.shard_group)
    replicas = s.dp * s.cp // s.shard_group
    assert ("--num-distributed-optimizer-instances" in args) == (replicas > 1)


def test_a_megatron_fsdp_command_line_imports_as_sharded():
    fsdp = ["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads_params", "--use-distributed-optimizer",
            "--ckpt-format", "fsdp_dtensor", "--no-gradient-accumulation-fusion"]
    args = gpt3_args() + fsdp
    s = scenario_from_dict(from_megatron(args, name="x", gpu="h100-sxm", gpus=1024).scenario)
    assert (s.parallel.zero, s.shard_group) == (3, s.dp * s.cp)
    hsdp = from_megatron(args + ["--num-distributed-optimizer-instances", "4", "--outer-dp-sharding-strategy",
                                 "no_shard"], name="x", gpu="h100-sxm", gpus=1024)
    assert hsdp.unmapped == [] and scenario_from_dict(hsdp.scenario).shard_group == s.dp * s.cp // 4
    hfsdp = from_megatron(args + ["--outer-dp-sharding-strategy", "optim"], name="x", gpu="h100-sxm", gpus=1024)
    assert [note for note in hfsdp.unmapped if note.startswith("--outer-dp-sharding-strategy optim")]
    # the strategy alone is Megatron-FSDP's setting: without it enabled, the distributed optimizer's ZeRO-1
    plain = from_megatron(gpt3_args() + ["--use-distributed-optimizer", "--data-parallel-sharding-strategy",
                                         "optim_grads_params"], name="x", gpu="h100-sxm", gpus=1024)
    assert scenario_from_dict(plain.scenario).parallel.zero == 1
    assert any("ignored" in note for note in plain.assumed)


def test_megatron_fsdp_reshards_after_the_forward_both_ways():
    """Megatron-FSDP's ZeRO-3 reshards after every forward (torchtitan's default keeps the
    parameters gathered when pp > 1): imported so, and a layout that keeps them is named as
    one Megatron would run otherwise."""
    from sim3d.scenario import megatron_fsdp
    from sim3d.scenario.megatron_export import to_megatron_args
    path = ROOT / "scenarios" / "llama3.1-8b.yaml"
    kept = sim3d.load_scenario(path, ["parallel.zero=3", "parallel.pp=2", "parallel.dp=2"])
    assert not kept.reshard_after_forward and "reshards" in megatron_fsdp.caveat(kept)
    resharded = sim3d.load_scenario(path, ["parallel.zero=3", "parallel.pp=2", "parallel.dp=2",
                                           "parallel.reshard_after_forward=true"])
    assert megatron_fsdp.caveat(resharded) is None
    imported = from_megatron(to_megatron_args(resharded), name="x", gpu="h100-sxm", gpus=resharded.num_gpus)
    back = scenario_from_dict({**imported.scenario, "schedule": "1f1b"})
    assert (back.parallel.zero, back.pp, back.reshard_after_forward) == (3, 2, True)


@pytest.mark.parametrize("extra, zero", [
    (["--use-megatron-fsdp"], 3),  # Megatron-Core 0.18's default strategy, said as assumed
    (["--use-megatron-fsdp", "--data-parallel-sharding-strategy", "no_shard", "--use-distributed-optimizer"], 0),
    (["--use-custom-fsdp", "--data-parallel-sharding-strategy", "optim_grads"], 2),  # 0.12-0.13's name
])
def test_megatron_fsdp_strategy_says_what_is_sharded(extra, zero):
    imported = from_megatron(gpt3_args() + extra, name="x", gpu="h100-sxm", gpus=1024)
    assert scenario_from_dict(imported.scenario).parallel.zero == zero
    assert ("--data-parallel-sharding-strategy" in extra) != any("default from 0.18" in n for n in imported.assumed)


def test_distributed_optimizer_instances_need_a_number():
    with pytest.raises(ValueError, match="num-distributed-optimizer-instances needs a positive whole number"):
        from_megatron(gpt3_args() + ["--num-distributed-optimizer-instances"], name="x", gpu="h100-sxm", gpus=1024)


def test_the_older_megatron_fsdp_switch_alone_shards_nothing():
    """--use-custom-fsdp is Megatron-Core 0.12-0.13's spelling, whose default strategy was no_shard."""
    imported = from_megatron(gpt3_args() + ["--use-custom-fsdp"], name="x", gpu="h100-sxm", gpus=1024)
    assert scenario_from_dict(imported.scenario).parallel.zero == 0
    assert any("0.12-0.13's default" in note for note in imported.assumed)


def test_run_json_carries_what_megatron_would_run_otherwise(tmp_path):
    """ZeRO-3 that keeps its parameters gathered (pp > 1, torchtitan's default) has no Megatron-FSDP
    spelling: the JSON says so beside the arguments, as the table output does."""
    runner = CliRunner()
    base = ["run", str(ROOT / "scenarios" / "llama3.1-8b.yaml"), "--json", "--no-plots", "--trace", "none",
            "--megatron-args", "--set", "parallel.zero=3", "--set", "parallel.pp=2", "--set", "parallel.dp=2"]
    kept = json.loads(runner.invoke(app, base + ["--out", str(tmp_path / "a")]).stdout)
    assert "--use-megatron-fsdp" in kept["megatron_args"] and "reshards" in kept["megatron_args_note"]
    resharded = json.loads(runner.invoke(app, base + ["--set", "parallel.reshard_after_forward=true",
                                                      "--out", str(tmp_path / "b")]).stdout)
    assert "megatron_args_note" not in resharded


def test_a_misspelled_megatron_argument_is_refused_with_the_one_meant():
    """--tensor-model-paralel-size 8 was 'not mapped' and the scenario imported with tp 1."""
    from sim3d.scenario.importers import from_megatron
    base = ["--num-layers", "4", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "512",
            "--micro-batch-size", "1", "--global-batch-size", "8"]
    with pytest.raises(ValueError, match="did you mean --tensor-model-parallel-size"):
        from_megatron([*base, "--tensor-model-paralel-size", "8"], name="x", gpu="a100-80gb", gpus=8)
    # three edits on a long argument (issue 49: they imported as tp 1), one on a short one
    for typo, meant in (("--tensr-model-paralel-siz", "tensor-model-parallel-size"),
                        ("--pipline-model-paralel-sze", "pipeline-model-parallel-size"),
                        ("--global-batch-sise", "global-batch-size"), ("--num-layer", "num-layers"),
                        ("--tensor-model-parallel", "tensor-model-parallel-size")):
        with pytest.raises(ValueError, match=f"did you mean --{meant}"):
            from_megatron([*base, typo, "8"], name="x", gpu="a100-80gb", gpus=8)
    real = from_megatron([*base, "--tp-comm-overlap-rs-dgrad", "--log-interval", "1"], name="x", gpu="a100-80gb",
                         gpus=8)  # Megatron's own arguments sim3d does not map are noted, not refused
    assert any("tp-comm-overlap-rs-dgrad" in u for u in real.unmapped)


@pytest.mark.parametrize("value, precision", [(32, "fp32"), ("32-true", "fp32"), ("bf16-mixed", "bf16"),
                                              ("16-mixed", "fp16"), (16, "fp16")])
def test_nemo_trainer_precision_is_read_as_lightning_names_it(value, precision):
    config = read_scenario_yaml(FIXTURES / "nemo_llama31_70b.yaml")
    config["trainer"]["precision"] = value
    imported = from_nemo(config, name="x", gpu="h100-sxm")
    assert imported.scenario["training"]["precision"] == precision
    assert not any(a.startswith("training.precision") for a in imported.assumed)  # the config said it


def test_nemo_precision_unknown_is_refused_and_missing_is_said():
    config = read_scenario_yaml(FIXTURES / "nemo_llama31_70b.yaml")
    config["trainer"]["precision"] = "transformer-engine"
    with pytest.raises(ValueError, match="trainer.precision 'transformer-engine'"):
        from_nemo(config, name="x", gpu="h100-sxm")
    del config["trainer"]["precision"]
    imported = from_nemo(config, name="x", gpu="h100-sxm")
    assert imported.scenario["training"]["precision"] == "bf16"
    assert any(a.startswith("training.precision bf16: trainer.precision not given") for a in imported.assumed)
