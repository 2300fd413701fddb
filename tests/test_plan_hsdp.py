"""`sim3d plan` and sharded data parallelism's groups (HSDP, `parallel.dp_shard`): a base
scenario's shard group is kept in every layout, `--space parallel.dp_shard=8,all` searches
group sizes, and every layout the space holds is one the scenario checks accept."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim3d import ScenarioError
from sim3d.model.memory import memory_report
from sim3d.scenario.checks import consistency_problems
from sim3d.scenario.load import scenario_from_dict
from sim3d.studies.space import Space, parse_choices

SHARDED = {  # a small model on two 8-GPU nodes, ZeRO-3 in HSDP groups of 4
    "name": "sharded", "schedule": "1f1b",
    "model": {"layers": 8, "hidden": 64, "heads": 4, "vocab": 256, "seq_len": 64},
    "parallel": {"zero": 3, "dp_shard": 4},
    "training": {"micro_batch": 1, "global_batch": 32, "precision": "bf16"},
    "cluster": {"gpu": "h100-sxm", "nodes": 2, "gpus_per_node": 8},
}
NARROW = ["parallel.order=tp-cp-ep-dp-pp", "training.recompute=none", "parallel.sequence_parallel=false",
          "training.tp_comm_overlap=false"]


def _space(space_options=(), base=SHARDED, fix=NARROW):
    return Space(scenario_from_dict(base), 16, parse_choices(list(fix), list(space_options)))


def test_every_layout_keeps_the_base_groups_and_passes_the_scenario_checks():
    """A base with HSDP groups of 4 planned over layouts whose dp x cp is 1, 2, 4, 8 or 16:
    groups of 4 fit only where 4 divides dp x cp (else the layout is dropped as a shape, not
    priced and then refused as a finalist); with ZeRO 0 nothing is sharded and the layout stays."""
    space = _space()
    layouts, dropped = space.layouts()
    assert layouts and dropped["shape"] > 0
    for layout in layouts:
        ranks = layout.dp * layout.cp
        assert layout.dp_shard == (ranks if layout.zero == 0 else 4), layout
        assert consistency_problems(space.scenario(layout)) == [], layout
    assert {layout.zero for layout in layouts if layout.dp * layout.cp == 2} == {0}  # 4 groups of 4 ranks need 4


def test_the_shard_dimension_adds_one_layout_per_distinct_group():
    """`--space parallel.dp_shard=2,4,all`: per layout of the full-shard space, one layout per
    distinct group size dividing dp x cp (ZeRO 0: one in all); the exclusions account for the rest."""
    full = _space(base={**SHARDED, "parallel": {"zero": 3}})
    assert full.dimensions["dp_shard"] == ("all",)
    wide = _space(["parallel.dp_shard=2,4,all"], base={**SHARDED, "parallel": {"zero": 3}})
    layouts, dropped = wide.layouts()
    expected = 0
    for layout in full.layouts()[0]:
        ranks = layout.dp * layout.cp
        expected += 1 if layout.zero == 0 else len({g for g in (2, 4, ranks) if ranks % g == 0})
    assert len(layouts) == expected == len(set(layouts))
    assert len(layouts) + sum(dropped.values()) == wide.size() == 3 * full.size()
    hsdp = [x for x in layouts if x.dp_shard < x.dp * x.cp]
    assert hsdp and all(x.zero >= 1 for x in hsdp)


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_an_hsdp_layout_scenario_is_the_scenario_its_overrides_make(data):
    """The finalists are re-read from YAML with the overrides, which must set (or clear) the
    shard group as tier one's copy does, whatever the base said (dp_shard or dp_replicate)."""
    base = data.draw(st.sampled_from([SHARDED, {**SHARDED, "parallel": {"zero": 3, "dp_replicate": 2}}]))
    space = _space(["parallel.dp_shard=2,8,all"], base=base, fix=[])
    layout = data.draw(st.sampled_from(space.layouts()[0]))
    fast = space.scenario(layout)
    slow = scenario_from_dict(base, list(space.overrides(layout)))
    assert fast.model_dump() == slow.model_dump()
    assert fast.shard_group == slow.shard_group == layout.dp_shard
    assert memory_report(fast, check_schedule=False).peak_bytes == memory_report(slow).peak_bytes


def test_smaller_shard_groups_hold_more_of_the_model_states():
    """The same layout sharded over fewer ranks keeps more of the states per GPU (Rajbhandari
    et al., ZeRO: ZeRO-3 holds 16 bytes per parameter / shard group)."""
    space = _space(["parallel.dp_shard=2,4,all"], fix=NARROW + ["parallel.tp=1", "parallel.pp=1", "parallel.cp=1",
                                                                "parallel.zero=3", "training.micro_batch=1"])
    peaks = {x.dp_shard: memory_report(space.scenario(x), check_schedule=False).peak_bytes for x in space.layouts()[0]}
    assert sorted(peaks) == [2, 4, 16] and peaks[2] > peaks[4] > peaks[16]


@pytest.mark.parametrize("text, message", [("0", "positive"), ("eight", "whole number or .all."), ("", "expected KEY")])
def test_a_bad_shard_group_is_refused(text, message):
    with pytest.raises(ScenarioError, match=message):
        parse_choices([], [f"parallel.dp_shard={text}"])


def test_moe_hsdp_layouts_keep_the_experts_replicas_whole():
    """Megatron asserts that the distributed optimizer's instances divide the experts' data-parallel
    replicas: with 64 experts on 4 x 64 ranks of a stage, groups of 16 (4 instances) leave ep 32
    (2 expert replicas) and ep 64 (1) out; every layout left passes the scenario checks."""
    from pathlib import Path
    from sim3d.scenario.load import load_scenario
    base = load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / "moe-1024.yaml")
    fix = ["parallel.tp=4", "parallel.pp=4", "parallel.cp=1", "training.recompute=none", "schedule=1f1b",
           "parallel.order=tp-cp-ep-dp-pp", "training.tp_comm_overlap=false", "training.micro_batch=1",
           "parallel.zero=1"]
    space = Space(base, 1024, parse_choices(fix, ["parallel.dp_shard=16,all"]))
    layouts, _ = space.layouts()
    shards = {(x.ep, x.dp_shard) for x in layouts}
    assert (16, 16) in shards and (32, 64) in shards and (32, 16) not in shards and (64, 16) not in shards
    assert all(consistency_problems(space.scenario(x)) == [] for x in layouts)
    refused = base.model_copy(update={"parallel": base.parallel.model_copy(update={"ep": 32, "dp_shard": 16,
                                                                                   "zero": 1})})
    assert any("experts'" in problem for problem in consistency_problems(refused))


@pytest.mark.parametrize("sets, says, not_says", [
    (["parallel.ep=16", "parallel.zero=1", "parallel.dp_replicate=16"], "parallel.dp_replicate: the 16 replicas", None),
    (["parallel.zero=1", "parallel.dp_shard=5"], "do not divide the dp*cp", "experts'"),  # one problem, said once
])
def test_the_experts_replica_rule_names_what_was_set_and_only_where_it_applies(sets, says, not_says):
    from pathlib import Path
    from sim3d.scenario.load import load_scenario
    with pytest.raises(ScenarioError) as refused:
        load_scenario(Path(__file__).resolve().parents[1] / "scenarios" / "moe-1024.yaml", sets)
    assert says in str(refused.value) and (not_says is None or not_says not in str(refused.value))
