"""The sharding plan is the one statement of how data parallelism shards model states: the
widths parameters are gathered in and where gradients are reduced, read alike by the memory
model, the bucket traffic and the per-unit collectives. Checked against the closed forms of
the ZeRO paper (Rajbhandari et al. 2020, section 5.1) and against what the pipelines do with
sharded gradients: torch.distributed.pipelining (the eager and compiled stacks) turns FSDP2's
gradient sync off for every micro-batch and reduces once after the last backward (stage.py);
Megatron-style pipelines reduce-scatter every micro-batch's gradients (Llama 3, section 3.3.2)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

import sim3d
from sim3d.model.memory import memory_report
from sim3d.model.params import stage_params
from sim3d.scenario import scenario_from_dict
from sim3d.scenario.sharding import ShardingPlan

H, LAYERS, VOCAB, SEQ = 256, 8, 1024, 128
LAYER = 12 * H * H + 13 * H  # QKV, projection, FC1, FC2 and two LayerNorms, written out by hand


def gpt(dp=4, pp=2, zero=1, micro=8, stack="eager", **training) -> dict:
    gpus = dp * pp
    return {"name": "plan", "model": {"layers": LAYERS, "hidden": H, "heads": 4, "vocab": VOCAB, "seq_len": SEQ},
            "parallel": {"tp": 1, "pp": pp, "dp": dp, "zero": zero},
            "training": {"micro_batch": 1, "global_batch": dp * micro, "precision": "bf16", "kernels": stack,
                         **training},
            "cluster": {"gpu": "h100-sxm", "nodes": max(1, gpus // 8), "gpus_per_node": min(8, gpus)}}


def states(raw: dict) -> list[tuple[float, float, float]]:
    return [(r.weights, r.grads, r.optimizer) for r in memory_report(scenario_from_dict(raw), check_schedule=False).rows]


def trace_bytes(raw: dict, kind: str, rank: int = 0) -> float:
    """What `rank` sends for its `kind` actions: a ring all-gather or reduce-scatter over n ranks
    sends (n - 1) / n of its buffer."""
    trace = sim3d.simulate(raw).trace
    return float(trace[(trace["kind"] == kind) & (trace["rank"] == rank)]["bytes"].sum())


def test_fp8_parameter_gathers_move_one_byte_per_parameter_in_the_buckets_as_in_memory():
    bf16 = gpt(pp=1, micro=2, overlap_param_gather=True)
    fp8 = gpt(pp=1, micro=2, overlap_param_gather=True, fp8_param_gather=True)
    fp8["training"]["precision"] = "fp8"
    params, ring = stage_params(scenario_from_dict(bf16), (0,)).total, 3 / 4
    assert trace_bytes(bf16, "PARAM_GATHER") == pytest.approx(2 * params * ring)
    assert trace_bytes(fp8, "PARAM_GATHER") == pytest.approx(1 * params * ring)
    assert states(fp8)[0][0] == pytest.approx(1 * params)  # the parameter buffer, one byte wide
    assert ShardingPlan.of(scenario_from_dict(fp8)).gather_bytes == 1


@pytest.mark.parametrize("zero", [2, 3])
def test_under_a_torch_pipeline_gradients_accumulate_unsharded_and_are_reduced_once(zero):
    """torch.distributed.pipelining keeps FSDP's gradients unsharded across micro-batches and
    reduce-scatters them once: the memory holds every gradient at the reduce width (ZeRO-1's),
    the step moves each gradient once (ZeRO-1's buckets), and ZeRO-3 needs no more than ZeRO-2."""
    one, sharded = gpt(zero=1), gpt(zero=zero)
    for (_, g1, _), (_, g, _) in zip(states(one), states(sharded)):
        assert g == pytest.approx(g1)
    params, ring = stage_params(scenario_from_dict(one), (0,)), 3 / 4
    assert trace_bytes(sharded, "DP_REDUCE") == pytest.approx(4 * params.dense * ring)
    assert trace_bytes(sharded, "DP_REDUCE") == pytest.approx(trace_bytes(one, "DP_REDUCE"))
    z2, z3 = memory_report(scenario_from_dict(gpt(zero=2))), memory_report(scenario_from_dict(gpt(zero=3)))
    assert max(r.model_states for r in z3.rows) <= max(r.model_states for r in z2.rows) * (1 + 1e-12)


@pytest.mark.parametrize("zero", [2, 3])
def test_under_a_megatron_pipeline_every_micro_batch_reduce_scatters_its_gradients(zero):
    """Sharded gradients under a pipeline cost a reduce-scatter per micro-batch (priced inside
    the backward, not in the step's buckets) and hold a shard: ZeRO-3 at most ZeRO-2's memory."""
    plan = ShardingPlan.of(scenario_from_dict(gpt(zero=zero, stack="te")))
    assert plan.reduces_in_compute and not plan.gathers_in_compute  # kept gathered across micro-batches
    one, sharded = gpt(zero=1, stack="te"), gpt(zero=zero, stack="te")
    assert trace_bytes(sharded, "DP_REDUCE") == 0  # no replicas: nothing left for the buckets
    assert sim3d.simulate(sharded).summary["step_time_s"] > sim3d.simulate(one).summary["step_time_s"]
    assert all(g < g1 for (_, g, _), (_, g1, _) in zip(states(sharded), states(one)))
    z2 = memory_report(scenario_from_dict(gpt(zero=2, stack="te")))
    z3 = memory_report(scenario_from_dict(gpt(zero=3, stack="te")))
    assert max(r.model_states for r in z3.rows) <= max(r.model_states for r in z2.rows) * (1 + 1e-12)


def test_zero2_under_a_torch_pipeline_is_zero1_in_time():
    assert sim3d.simulate(gpt(zero=2)).summary["step_time_s"] == pytest.approx(
        sim3d.simulate(gpt(zero=1)).summary["step_time_s"], rel=1e-9)


def test_zero3_resharding_under_a_pipeline_pays_its_gathers_in_every_micro_batch():
    keep = gpt(zero=3)
    keep["parallel"]["reshard_after_forward"] = False
    reshard = gpt(zero=3)
    reshard["parallel"]["reshard_after_forward"] = True
    plan = ShardingPlan.of(scenario_from_dict(reshard))
    assert plan.gathers_in_compute and plan.regathers_in_backward and not plan.reduces_in_compute
    assert trace_bytes(reshard, "PARAM_GATHER") == 0  # no bucketed gather after the step
    assert trace_bytes(keep, "PARAM_GATHER") > 0
    assert sim3d.simulate(reshard).summary["step_time_s"] > sim3d.simulate(keep).summary["step_time_s"]


def test_without_a_pipeline_gradients_are_reduce_scattered_inside_the_backward():
    plan = ShardingPlan.of(scenario_from_dict(gpt(pp=1, zero=2)))
    assert plan.reduces_in_compute and plan.bucket_reduction == "all-reduce"
    assert not ShardingPlan.of(scenario_from_dict(gpt(pp=1, zero=1))).reduces_in_compute


@settings(max_examples=25, deadline=None)
@given(pp=st.sampled_from([1, 2, 4]), dp=st.sampled_from([2, 4, 8]), reshard=st.booleans(),
       stack=st.sampled_from(["te", "eager"]))
def test_each_zero_stage_holds_no_more_model_state_than_the_one_below(pp, dp, reshard, stack):
    """ZeRO's promise, stage by stage (Rajbhandari et al. 2020, figure 1), on every layout."""
    totals = []
    for zero in range(4):
        raw = gpt(dp=dp, pp=pp, zero=zero, stack=stack)
        if zero == 3:
            raw["parallel"]["reshard_after_forward"] = reshard
        totals.append(max(w + g + o for w, g, o in states(raw)))
    for lower, higher in zip(totals, totals[1:]):
        assert higher <= lower * (1 + 1e-12)


def test_only_the_sharding_record_reads_the_zero_stage_outside_the_scenario_package():
    """`x.parallel.zero` is read in sim3d/scenario/ (schema, importers, exporters, the record)
    and nowhere else: the rest asks the ShardingPlan."""
    import ast
    from pathlib import Path
    package = Path(sim3d.__file__).parent
    readers = []
    for path in package.rglob("*.py"):
        if path.parent.name == "scenario":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr == "zero" and isinstance(node.value, ast.Attribute)
                    and node.value.attr == "parallel"):
                readers.append(f"{path.relative_to(package)}:{node.lineno}")
    assert readers == []
