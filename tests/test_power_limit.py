"""`cluster.power_limit_w`: a board capped below its rated limit (`nvidia-smi -pl`) runs its
tensor cores at the clock where it draws the cap; the clock goes as the cube root of the power
above idle (sim3d/cluster/gpus.py, GpuSpec.power_clock_factor); HBM-bound kernels keep their
rate. Hand counts against the H100's measured idle (129 W) and rated 700 W."""

from __future__ import annotations

import re

import pytest

import sim3d
from sim3d.cluster.gpus import PRESETS, gpu_preset
from sim3d.costs.compute import ComputeModel
from sim3d.errors import ScenarioError
from sim3d.model.ops import layer_ops
from sim3d.scenario import scenario_from_dict


def raw(gpu: str = "h100-sxm", limit: float | None = None) -> dict:
    cluster = dict(gpu=gpu, nodes=1, gpus_per_node=1)
    if limit is not None:
        cluster["power_limit_w"] = limit
    return dict(name="capped", model=dict(layers=2, hidden=4096, heads=32, kv_heads=8, ffn_hidden=14336,
                                          vocab=32000, seq_len=4096, activation="swiglu", hidden_dropout=0.0,
                                          attention_dropout=0.0),
                parallel=dict(tp=1, pp=1, dp=1), training=dict(micro_batch=1, global_batch=2, recompute="none"),
                cluster=cluster)


def op_times(limit: float | None) -> dict:
    scenario = scenario_from_dict(raw(limit=limit))
    model = ComputeModel(scenario)
    return {op.name: model.op_time(op) for op in layer_ops(scenario)}


def test_the_clock_is_the_cube_root_of_the_power_above_idle():
    capped = gpu_preset("h100-sxm", power_limit_w=500.0)
    factor = ((500 - 129) / (700 - 129)) ** (1 / 3)  # 0.866
    assert capped.power_clock_factor() == pytest.approx(factor, rel=1e-9)
    assert capped.sustained_clock("bf16") == pytest.approx(PRESETS["h100-sxm"].sustained_clock("bf16") * factor)
    assert capped.sustained_clock("fp8") == pytest.approx(PRESETS["h100-sxm"].sustained_clock("fp8") * factor)
    # at the rated limit, or unset, nothing moves
    assert gpu_preset("h100-sxm", power_limit_w=700.0).sustained_clock("bf16") == PRESETS["h100-sxm"].sustained_clock("bf16")


def test_a_cap_slows_gemms_and_attention_by_the_clock_and_leaves_memory_bound_kernels():
    rated, capped = op_times(None), op_times(500.0)
    factor = gpu_preset("h100-sxm", power_limit_w=500.0).power_clock_factor()
    launch = 3e-6  # the kernel's fixed cost does not move with the clock
    for name in ("qkv", "mlp_up", "mlp_down"):  # compute-bound GEMMs at these shapes
        assert (capped[name].fwd - launch) == pytest.approx((rated[name].fwd - launch) / factor, rel=1e-6)
    assert capped["core_attention"].fwd > rated["core_attention"].fwd * 1.1  # the fused kernel's tensor cores slow too
    memory_bound = [n for n in rated if n not in ("qkv", "out_proj", "mlp_up", "mlp_down", "core_attention")]
    assert memory_bound and all(capped[n] == rated[n] for n in memory_bound)


def test_lower_limits_give_longer_steps():
    steps = [sim3d.simulate(raw(limit=w)).summary["step_time_s"] for w in (700, 600, 500, 400, 300)]
    assert steps == sorted(steps) and steps[-1] > steps[0] * 1.2
    assert steps[0] == sim3d.simulate(raw()).summary["step_time_s"]


@pytest.mark.parametrize("gpu, limit, says", [
    ("h100-sxm", 800, "at most its rated limit (700 W)"),
    ("h100-sxm", 120, "above its idle draw (129 W)"),
    ("a100-80gb", 450, "at most its rated limit (400 W)"),
    ("v100", 300, "records no rated power limit"),
])
def test_limits_the_board_cannot_run_are_refused(gpu, limit, says):
    scenario = raw(gpu, limit)
    if gpu == "v100":
        scenario["training"].update(precision="fp16", attention_backend="unfused")
    with pytest.raises(ScenarioError, match=rf"cluster.power_limit_w: .*{re.escape(says)}"):
        scenario_from_dict(scenario)


def test_the_explanation_names_the_limit():
    lines = dict(sim3d.simulate(raw(limit=500.0)).explain())
    assert "at a 500 W power limit, x 0.866 of the rated" in lines["compute: GEMMs (16-bit)"]
