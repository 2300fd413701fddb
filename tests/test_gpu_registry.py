"""Adding a GPU preset is one record: a made-up GPU registered here with every fact is named by a
scenario, simulated, found by its aliases in free text and offered its attention kernels, and
the scenario checks and the published-row reader go by its facts, never by its name."""

import dataclasses
import math

import pytest

import sim3d
from sim3d.cluster import gpus
from sim3d.cluster.gpus import GpuSpec, attention_kernels, preset_named_in, register_preset
from sim3d.scenario import ScenarioError, scenario_from_dict
from sim3d.validation.published_row import scenario_dict_of

# a made-up GPU with every fact a preset carries
TOY = GpuSpec("toy-9000", 400.0, 400.0, 800.0, 40.0, 200.0, 96.0, 4.0, 3200.0, 400.0, 8, 8, 100, 300.0, 380.0,
              gemm_burst_efficiency_16=0.8, gemm_burst_efficiency_fp8=0.7, sustained_clock_16=0.9,
              sustained_clock_fp8=0.85, attention_family="hopper", attention_kernels_with_figures=("cudnn", "fa3"),
              compute_capability=9.0, nvlink_domain_nodes=1, aliases=("Toy 9000", "T9K-SXM"))


@pytest.fixture
def register():
    """`register_preset`, with every preset registered through it removed after the test."""
    added = []

    def add(spec: GpuSpec) -> GpuSpec:
        added.append(spec.name)
        return register_preset(spec)

    yield add
    for name in added:
        gpus.PRESETS.pop(name, None)


def _scenario(gpu: str, **training) -> dict:
    """A small model on one node of `gpu`, as many GPUs as its preset puts in a node (8)."""
    return dict(name="t", model=dict(layers=2, hidden=1024, heads=8, vocab=32000, seq_len=1024, activation="swiglu",
                                     hidden_dropout=0.0, attention_dropout=0.0),
                parallel=dict(tp=2, pp=1, dp=4), training=dict(micro_batch=1, global_batch=8, **training),
                cluster=dict(gpu=gpu, nodes=1))


def test_a_scenario_naming_it_validates(register):
    register(TOY)
    assert scenario_from_dict(_scenario("toy-9000")).gpu == TOY  # its node of 8 GPUs and every fact


def test_it_simulates_to_a_finite_step(register):
    register(TOY)
    step = sim3d.simulate(_scenario("toy-9000")).step_time
    assert math.isfinite(step) and step > 0


def test_its_aliases_name_it_in_free_text(register):
    register(TOY)
    assert preset_named_in("8x Toy-9000 96GB") == "toy-9000"
    assert preset_named_in("t9k sxm") == "toy-9000"  # any case, with -, _ and spaces alike
    assert preset_named_in("Toy 9000 PCIe") is None  # a PCIe card is no SXM preset
    assert preset_named_in("H100-SXM5-80GB") == "h100-sxm"  # the shipped presets keep theirs


def test_its_attention_kernels_are_offered_and_no_others(register):
    register(TOY)
    assert attention_kernels("toy-9000") == ("default", "triton", "cudnn", "fa3")
    scenario_from_dict(_scenario("toy-9000", kernels={"attention": "fa3"}))
    with pytest.raises(ScenarioError, match="fa2 has no figures for toy-9000"):
        scenario_from_dict(_scenario("toy-9000", kernels={"attention": "fa2"}))


def test_the_scenario_checks_read_its_architecture(register):
    register(dataclasses.replace(TOY, compute_capability=7.0))
    with pytest.raises(ScenarioError, match="flash attention needs an Ampere or newer GPU.*unfused for toy-9000"):
        scenario_from_dict(_scenario("toy-9000", attention_backend="flash"))
    scenario_from_dict(_scenario("toy-9000", attention_backend="unfused"))


def _published_row() -> dict:
    """A published run of a small GPT on 32 toy GPUs, saying nothing of its software or year."""
    return dict(id="other_run", source="a source", model="GPT 1B", layers=4, hidden=1024, heads=16, ffn_hidden=None,
                vocab=32000, seq_len=2048, gpu="Toy-9000", num_gpus=32, tp=2, pp=2, dp=8, cp=1, ep=1, vp=None,
                micro_batch=1, global_batch=16, sequence_parallel=None, recompute="none",
                distributed_optimizer=None, metric="step_time_s", value=1.0, notes="")


def test_a_published_run_on_it_takes_its_servers_domain_and_era(register):
    register(dataclasses.replace(TOY, gpus_per_node=4, nics_per_node=4, nvlink_domain_nodes=4))
    cluster = scenario_dict_of(_published_row())["cluster"]
    assert cluster["gpu"] == "toy-9000"
    assert (cluster["nodes"], cluster["gpus_per_node"], cluster["intra_node"]["domain_nodes"]) == (8, 4, 4)
    assert (cluster["inter_node"]["nic_gbps"], cluster["inter_node"]["nics_per_node"]) == (400.0, 4)
    assert scenario_dict_of(_published_row())["training"]["attention_backend"] == "flash"  # a Hopper-class GPU
    register(dataclasses.replace(TOY, gpus_per_node=4, nics_per_node=4, nvlink_domain_nodes=4, compute_capability=8.0))
    assert scenario_dict_of(_published_row())["training"]["attention_backend"] == "unfused"  # older: 2021-22 runs


@pytest.mark.parametrize("fact", ["gemm_burst_efficiency_16", "gemm_burst_efficiency_fp8", "sustained_clock_16",
                                  "sustained_clock_fp8", "attention_family"])
def test_a_record_missing_a_fact_is_refused_naming_it(register, fact):
    with pytest.raises(ValueError, match=f"GPU preset 'toy-9000' lacks {fact}"):
        register(dataclasses.replace(TOY, **{fact: None}))
    assert "toy-9000" not in gpus.PRESETS and preset_named_in("Toy 9000") is None
