"""Sharded data parallelism: the ZeRO stages and HSDP groups, as a scenario states them and as
the memory model holds them. Model states are checked against the closed forms of the ZeRO
paper (Rajbhandari et al. 2020, section 5.1) and Megatron's distrib_optimizer.md table, with the
parameter counts written out by hand for a GPT layer (12 h^2 + 13 h)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from sim3d.model.memory import memory_report
from sim3d.scenario import ScenarioError, scenario_from_dict

H, LAYERS, VOCAB, SEQ = 256, 4, 1024, 128


def gpt(dp=8, zero=None, **parallel) -> dict:
    par = {"tp": 1, "pp": 1, "dp": dp, **parallel}
    if zero is not None:
        par["zero"] = zero
    return {"name": "shard", "model": {"layers": LAYERS, "hidden": H, "heads": 4, "vocab": VOCAB, "seq_len": SEQ},
            "parallel": par, "training": {"micro_batch": 1, "global_batch": dp, "precision": "bf16"},
            "cluster": {"gpu": "a100-80gb", "nodes": max(1, dp * par.get("cp", 1) // 8),
                        "gpus_per_node": min(8, dp * par.get("cp", 1))}}


def states(raw: dict) -> tuple[float, float, float]:
    row = memory_report(scenario_from_dict(raw), check_schedule=False).rows[0]
    return row.weights, row.grads, row.optimizer


# By hand: a GPT layer holds QKV (3h^2 + 3h), the projection (h^2 + h), FC1 (4h^2 + 4h), FC2
# (4h^2 + h) and two LayerNorms (4h); the first stage the word and position embeddings; the LM
# head is tied to them on a single stage, leaving the final LayerNorm (2h).
LAYER = 12 * H * H + 13 * H
EMBEDDING = VOCAB * H + SEQ * H
PARAMS = LAYERS * LAYER + EMBEDDING + 2 * H
UNIT = max(LAYER, EMBEDDING)  # the largest unit gathered or reduced at once


@pytest.mark.parametrize("zero,weights,grads,optimizer", [
    (0, 2 * PARAMS, 4 * PARAMS, 12 * PARAMS),                       # DDP: 18 bytes per parameter
    (1, 2 * PARAMS, 4 * PARAMS, 12 * PARAMS / 8),                   # 6 + 12/N
    (2, 2 * PARAMS, 4 * PARAMS / 8 + 4 * UNIT, 12 * PARAMS / 8),    # 2 + 16/N, one unit's gradient in flight
    (3, 4 * PARAMS / 8 + 2 * 2 * UNIT, 4 * PARAMS / 8 + 4 * UNIT, 8 * PARAMS / 8),  # 16/N, two units gathered
])
def test_model_states_per_zero_stage_are_the_closed_forms(zero, weights, grads, optimizer):
    assert states(gpt(dp=8, zero=zero)) == pytest.approx((weights, grads, optimizer), rel=1e-12)


def test_zero3_without_resharding_keeps_every_parameter_gathered():
    w, g, o = states(gpt(dp=8, zero=3, reshard_after_forward=False))
    assert w == pytest.approx(4 * PARAMS / 8 + 2 * PARAMS)
    assert (g, o) == pytest.approx((4 * PARAMS / 8 + 4 * UNIT, PARAMS))


def test_fp8_parameter_gather_halves_what_is_gathered():
    raw = gpt(dp=8, zero=3)
    raw["training"].update(precision="fp8", fp8_param_gather=True)
    raw["cluster"]["gpu"] = "h100-sxm"
    w, _, _ = states(raw)
    assert w == pytest.approx(4 * PARAMS / 8 + 1 * 2 * UNIT)


@settings(max_examples=25, deadline=None)
@given(zero=st.sampled_from([1, 2, 3]), groups=st.sampled_from([1, 2, 4, 8]))
def test_hsdp_shards_over_its_group_only(zero, groups):
    """dp 16 in `groups` replicas of 16/groups ranks holds what dp 16/groups does fully sharded."""
    hsdp = states(gpt(dp=16, zero=zero, dp_shard=16 // groups))
    assert hsdp == pytest.approx(states(gpt(dp=16 // groups, zero=zero)), rel=1e-12)
    assert hsdp == pytest.approx(states(gpt(dp=16, zero=zero, dp_replicate=groups)), rel=1e-12)


@pytest.mark.parametrize("spelling,value,zero", [
    ("distributed_optimizer", True, 1), ("use_distributed_optimizer", False, 0),
    ("data_parallel_sharding_strategy", "optim_grads", 2), ("data_parallel_sharding_strategy", "optim_grads_params", 3),
    ("zero_optimization", {"stage": 3}, 3), ("zero_stage", 2, 2)])
def test_each_stack_spells_the_stage_its_own_way(spelling, value, zero):
    raw = gpt()
    raw["parallel"][spelling] = value
    s = scenario_from_dict(raw)
    assert s.parallel.zero == zero and s.parallel.distributed_optimizer == (zero >= 1)


@pytest.mark.parametrize("parallel,words", [
    ({"zero": 0, "distributed_optimizer": True}, ["zero: 0", "distributed_optimizer: True"]),
    ({"zero": 3, "data_parallel_sharding_strategy": "optim"}, ["zero: 3", "data_parallel_sharding_strategy: 'optim'"]),
    ({"zero": 5}, ["zero: 5"]),
    ({"data_parallel_sharding_strategy": "everything"}, ["optim_grads_params"]),
    ({"zero": 3, "dp_shard": 3}, ["parallel.dp_shard: 3", "dp*cp = 8*1 = 8"]),
    ({"zero": 3, "dp_shard": 4, "dp_replicate": 4}, ["4 x 4", "dp*cp = 8"]),
    ({"zero": 0, "dp_shard": 4}, ["parallel.dp_shard", "zero: 0"]),
    ({"zero": 1, "reshard_after_forward": True}, ["reshard_after_forward", "zero is 1"]),
])
def test_contradictions_are_refused_with_the_fields_named(parallel, words):
    raw = gpt()
    raw["parallel"].update(parallel)
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(raw)
    for word in words:
        assert word in str(err.value)


def test_an_override_of_the_stage_replaces_the_files_spelling():
    raw = gpt()
    raw["parallel"]["distributed_optimizer"] = True
    assert scenario_from_dict(raw, ["parallel.zero=3"]).parallel.zero == 3
    assert scenario_from_dict(raw, ["parallel.zero=0"]).parallel.zero == 0
    dumped = scenario_from_dict(raw).model_dump(exclude_none=True)
    assert scenario_from_dict(dumped, values={"parallel.distributed_optimizer": False}).parallel.zero == 0


def test_fp8_gather_needs_fp8_and_a_gather():
    raw = gpt(zero=0)
    raw["training"]["fp8_param_gather"] = True
    with pytest.raises(ScenarioError) as err:
        scenario_from_dict(raw)
    assert "training.precision: fp8" in str(err.value) and "parallel.zero: 0" in str(err.value)


def test_every_published_run_that_trained_is_predicted_to_fit():
    """Every row of every validation file that reports a whole run (a run that trained) fits in
    its GPUs' memory as sim3d reads it; Korthikanti's no-recompute memory bars are figures of
    layouts that did not train, not runs."""
    import pandas as pd

    from sim3d.model.memory import memory_report
    from sim3d.validation.published import LAYER_METRICS, MEMORY_METRICS, REPO_ROOT
    from sim3d.validation.published_row import read_row

    checked, refused = 0, []
    for csv in sorted((REPO_ROOT / "validation").glob("published_*.csv")):
        for record in pd.read_csv(csv).to_dict("records"):
            if record["metric"] in LAYER_METRICS + MEMORY_METRICS:
                continue
            try:
                s = scenario_from_dict(read_row(record)[0])
            except ScenarioError:
                continue  # a layout sim3d cannot express (the validation table says why)
            report = memory_report(s, check_schedule=False)
            checked += 1
            if not report.fits:
                refused.append(f"{csv.name} {record['id']}: {report.peak_gib:.1f} GiB > {report.hbm_bytes / 2**30:.0f}")
    assert checked > 100 and not refused, "\n".join(refused)


# ---- time: gathers and reduce-scatters inside compute (costs/sharded_dp.py) -----------------

def test_unit_pipeline_closed_forms():
    from sim3d.costs.sharded_dp import unit_pipeline
    from sim3d.costs.tp_overlap import COMM_SMS
    share = COMM_SMS / (132 - COMM_SMS)
    c, g, r, n = 3.0, 1.0, 0.5, 5
    assert unit_pipeline([c] * n, [0.0] * n, [0.0] * n, 132) == pytest.approx(n * c)
    # forward: the first gather exposed, each later one hidden under a unit slowed while it runs
    assert unit_pipeline([c] * n, [g] * n, [0.0] * n, 132) == pytest.approx(g + (n - 1) * (c + share * g) + c)
    # gathers longer than compute: the network sets the pace
    assert unit_pipeline([g] * n, [c] * n, [0.0] * n, 132) == pytest.approx(n * c + g)
    # backward with reduce-scatters only: the last one is exposed
    assert unit_pipeline([c] * n, [0.0] * n, [r] * n, 132) == pytest.approx(c + (n - 1) * (c + share * r) + r)


def _small(zero, dp_shard=None, **training) -> dict:
    raw = gpt(dp=16, zero=zero)
    raw["cluster"] = {"gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 8}
    raw["model"].update(layers=4, hidden=1024, heads=8, seq_len=1024)
    raw["training"].update(global_batch=16, **training)
    if dp_shard is not None:
        raw["parallel"]["dp_shard"] = dp_shard
    return raw


def test_zero3_step_is_zero1s_compute_plus_the_exposed_unit_collectives_by_hand():
    """pp 1, one micro-batch: ZeRO-3 replaces ZeRO-1's bucketed reduce-scatter and gather by
    per-unit gathers (forward and backward) and reduce-scatters (backward), each priced alone
    here from the group's link and replayed by the one-ahead prefetch rule."""
    import sim3d
    from sim3d.cluster.placement import SHARD_AXIS
    from sim3d.costs.collectives import collective_time
    from sim3d.costs.sharded_dp import unit_pipeline
    from sim3d.model.params import embedding_params, head_params, layer_params
    from sim3d.model.ops import Dims

    one, three = sim3d.simulate(_small(1)), sim3d.simulate(_small(3))
    s, costs = three.scenario, three.costs
    link = costs.topology.group_link(SHARD_AXIS, 0)
    d = Dims.of(s)
    params = [embedding_params(d)] + [layer_params(d, False).total] * 4 + [head_params(d, True)]
    links = dict(zip(("tp", "cp", "ep"), costs._links_of(0)))
    units = ["embedding"] + ["layer"] * 4 + ["head"]
    exposed = 0.0
    for kind, gather, reduce in (("F", True, False), ("B", True, True)):
        compute = [costs.block(u, kind, links).seconds for u in units]
        g = [collective_time("all_gather", p * 2, link).seconds if gather else 0.0 for p in params]
        r = [collective_time("reduce_scatter", p * 4, link).seconds if reduce else 0.0 for p in params]
        if kind == "B":
            compute, g, r = compute[::-1], g[::-1], r[::-1]
        exposed += unit_pipeline(compute, g, r, s.gpu.sms) - sum(compute)
    assert exposed > 0
    assert three.step_time == pytest.approx(one.step_time - one.breakdown["dp"] + exposed, rel=1e-9)
    assert three.breakdown["dp"] == pytest.approx(exposed, rel=1e-9)
    rows = three.trace[three.trace.kind == "DP_COMM"]
    assert len(rows) == 2 and set(rows.stream) == {"dp"}


def test_hsdp_over_every_rank_is_zero3_and_over_one_rank_is_ddp():
    import sim3d
    zero3 = sim3d.simulate(_small(3)).step_time
    assert sim3d.simulate(_small(3, dp_shard=16)).step_time == zero3
    ddp = sim3d.simulate(_small(0))
    replicas = sim3d.simulate(_small(3, dp_shard=1))
    assert replicas.step_time == pytest.approx(ddp.step_time, rel=1e-12)
    assert replicas.breakdown["dp"] == pytest.approx(ddp.breakdown["dp"], rel=1e-12)
    assert zero3 != ddp.step_time


def test_an_hsdp_shard_group_inside_a_node_gathers_on_nvlink():
    import sim3d
    from sim3d.cluster.placement import REPLICA_AXIS, SHARD_AXIS
    run = sim3d.simulate(_small(3, dp_shard=8))
    topo = run.costs.topology
    assert topo.group_link(SHARD_AXIS, 0).nodes == 1 and topo.group_link(REPLICA_AXIS, 0).size == 2
    assert run.links.bytes.sum() > 0


def test_the_executor_refuses_what_it_does_not_shard():
    from sim3d.executor import ExecutorRefusal, execute
    with pytest.raises(ExecutorRefusal, match="parallel.zero=3"):
        execute(scenario_from_dict(gpt(dp=2, zero=3)), steps=1)
