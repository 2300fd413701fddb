"""A GPU preset is one record: its compute-model facts reach the step, fp8 facts are needed only
with fp8 tensor cores, and a scenario's override cannot leave one out (a record registered
without one: tests/test_gpu_registry.py)."""

import dataclasses

import pytest

from sim3d.cluster import gpus
from sim3d.cluster.gpus import PRESETS, GpuSpec, register_preset
from sim3d.costs.compute import gemm_peak_efficiency
from sim3d.scenario.load import scenario_from_dict

TOY = GpuSpec("toy-gpu", 100.0, 100.0, 200.0, 10.0, 50.0, 16.0, 1.0, 800.0, 100.0, 8, 8, 32, 80.0,
              gemm_burst_efficiency_16=0.8, gemm_burst_efficiency_fp8=0.6,
              sustained_clock_16=0.5, sustained_clock_fp8=0.9, attention_family="hopper")


def _register(monkeypatch, spec):
    monkeypatch.setitem(PRESETS, spec.name, spec)  # undone after the test
    register_preset(spec)


def _scenario(gpu):
    return scenario_from_dict(dict(
        name="t", model=dict(layers=2, hidden=1024, heads=8, vocab=32000, seq_len=1024, activation="swiglu",
                             hidden_dropout=0.0, attention_dropout=0.0),
        parallel=dict(tp=2, pp=1, dp=1), training=dict(micro_batch=1, global_batch=4, precision="bf16"),
        cluster=dict(gpu=gpu, nodes=1, gpus_per_node=2)))


def test_registered_toy_preset_simulates(monkeypatch):
    from sim3d.api import simulate
    _register(monkeypatch, TOY)
    scenario = _scenario("toy-gpu")
    assert scenario.gpu == dataclasses.replace(TOY, gpus_per_node=2)  # the scenario override kept
    # burst x sustained clock, read from the record alone
    assert gemm_peak_efficiency(scenario.gpu, "bf16") == pytest.approx(0.8 * 0.5)
    assert gemm_peak_efficiency(scenario.gpu, "fp8") == pytest.approx(0.6 * 0.9)
    slow = simulate(scenario)
    _register(monkeypatch, dataclasses.replace(TOY, sustained_clock_16=1.0))
    fast = simulate(_scenario("toy-gpu"))
    assert slow.step_time > fast.step_time  # the record's clock factor reaches the step


def test_fp8_facts_are_needed_only_with_fp8_tensor_cores(monkeypatch):
    monkeypatch.setattr(gpus, "PRESETS", {})
    no_fp8 = dataclasses.replace(TOY, fp8_tflops=None, gemm_burst_efficiency_fp8=None, sustained_clock_fp8=None)
    assert register_preset(no_fp8) is no_fp8


def test_scenario_override_cannot_leave_a_fact_out():
    with pytest.raises(ValueError, match="'a100-80gb' lacks gemm_burst_efficiency_fp8, sustained_clock_fp8"):
        gpus.gpu_preset("a100-80gb", fp8_tflops=624.0)


def test_every_shipped_preset_is_complete():
    assert all(not gpus.missing_facts(spec) for spec in PRESETS.values())
