"""A group's ring is priced from the loads of the groups near it (topology.py): the same
numbers as summing every group of the cluster, and the full-fidelity work limit counts what is
really replayed after folding."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim3d.cluster.topology import Topology
from sim3d.engine.run import replay_step
from sim3d.scenario.load import scenario_from_dict
from sim3d.scenario.limits import WorkLimitExceeded

AXES = ("tp", "cp", "dp", "dp-cp", "pp")


@st.composite
def clusters(draw):
    gpus_per_node = draw(st.sampled_from([2, 4, 8]))
    nodes = draw(st.sampled_from([8, 16, 32]))
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8, 16) if t <= gpus_per_node * 2]))
    cp = draw(st.sampled_from([1, 2]))
    pp = draw(st.sampled_from([1, 2, 4]))
    world = nodes * gpus_per_node
    if world % (tp * cp * pp):
        tp, cp, pp = 1, 1, 1
    dp = world // (tp * cp * pp)
    fabric = draw(st.sampled_from(["rail-optimized", "fat-tree"]))
    inter = dict(fabric=fabric, nic_gbps=400, nics_per_node=draw(st.sampled_from([1, gpus_per_node])),
                 nodes_per_leaf=draw(st.sampled_from([2, 4])), oversubscription=draw(st.sampled_from([1, 2])))
    if draw(st.booleans()):
        inter.update(nodes_per_pod=8)
    faults = []
    if draw(st.booleans()):
        faults.append({"nic": {"node": draw(st.integers(0, nodes - 1)), "nic": 0, "gbps": 100}})
    return scenario_from_dict(dict(
        name="near", model=dict(layers=4 * pp, hidden=1024, heads=16, vocab=32000, seq_len=2048),
        parallel=dict(tp=tp, pp=pp, dp=dp, cp=cp), training=dict(micro_batch=1, global_batch=dp * 2),
        cluster=dict(gpu="h100-sxm", nodes=nodes, gpus_per_node=gpus_per_node, inter_node=inter),
        faults=faults))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.data())
def test_the_loads_near_a_group_price_its_ring_as_the_whole_cluster_does(scenario, data):
    near, whole = Topology(scenario), Topology(scenario)
    for axis in AXES:
        whole._ring_load(axis), whole._crossing_load(axis)  # cached: group_link reads these
        for rank in data.draw(st.lists(st.integers(0, scenario.num_gpus - 1), min_size=1, max_size=3)):
            assert near.group_link(axis, rank) == whole.group_link(axis, rank), (axis, rank)


def straggler_run(actions_limit, monkeypatch):
    monkeypatch.setenv("SIM3D_MAX_ACTIONS", str(actions_limit))
    scenario = scenario_from_dict(dict(
        name="folded", model=dict(layers=8, hidden=1024, heads=16, vocab=32000, seq_len=2048),
        parallel=dict(tp=2, pp=4, dp=8), training=dict(micro_batch=1, global_batch=64),
        cluster=dict(gpu="h100-sxm", nodes=8, gpus_per_node=8), faults=[{"straggler": {"rank": 3, "slowdown": 1.5}}]))
    return replay_step(scenario)


def test_the_full_fidelity_limit_counts_the_actions_replayed_after_folding(monkeypatch):
    run = straggler_run(10**9, monkeypatch)
    replayed = run.result.compute_busy  # one entry per replayed rank
    stage_of = {rank: run.costs.placement.coords(rank)["pp"] for rank in replayed}
    actions = sum(len(run.schedule.ranks[stage_of[rank]]) for rank in replayed)
    assert len(replayed) < run.scenario.num_gpus  # folding replayed fewer ranks than the cluster has
    straggler_run(actions, monkeypatch)  # exactly at the limit: runs
    with pytest.raises(WorkLimitExceeded, match=f"= {actions:,} schedule actions"):
        straggler_run(actions - 1, monkeypatch)
