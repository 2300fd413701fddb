"""costs.network: flow — flows on the simpy clock against hand-computed timelines, the
shipped scenarios against the analytical model, folding against every GPU replayed, and
contention the analytical model cannot see."""

from pathlib import Path

import pytest
import simpy

import sim3d
import sim3d.cluster.topology
from sim3d.costs.flows import FlowSpec
from sim3d.engine.flow_network import FlowNetwork

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted(ROOT.joinpath("scenarios").glob("*.yaml"))


def run_flows(capacities, starts):
    """Start each (time, spec) and return when each arrived."""
    env = simpy.Environment()
    net = FlowNetwork(env, capacities.__getitem__)
    ends = {}

    def start(i, at, spec):
        yield env.timeout(at)
        yield net.transfer(spec)
        ends[i] = env.now

    for i, (at, spec) in enumerate(starts):
        env.process(start(i, at, spec))
    env.run()
    return ends, net.stats


def test_two_flows_share_a_link_then_the_survivor_speeds_up():
    # link 10 B/s: both at 5 until the 10-byte flow ends at t=2; the other has 10 of 20 left,
    # alone at 10 B/s it ends at t=3
    ends, stats = run_flows({"a": 10}, [(0, FlowSpec({"a": 1}, 10, float("inf"))),
                                        (0, FlowSpec({"a": 1}, 20, float("inf")))])
    assert ends == pytest.approx({0: 2, 1: 3})
    assert stats.slowed_s == pytest.approx((2 - 1) + (3 - 2))


def test_a_late_flow_and_latency_and_a_ceiling():
    # f0: 30 bytes from t=0, ceiling 6 on link 10. f1 joins at t=1 after 1 s latency (t=2),
    # 8 bytes: max-min gives 5 each (f0 below its ceiling). At t=2 f0 has 30-12=18 left.
    # f1 ends at 2 + 8/5 = 3.6; f0 then has 18-8=10 left at its ceiling 6: ends 3.6+10/6.
    ends, _ = run_flows({"a": 10}, [(0, FlowSpec({"a": 1}, 30, 6.0)),
                                    (1, FlowSpec({"a": 1}, 8, float("inf"), latency=1.0))])
    assert ends == pytest.approx({0: 3.6 + 10 / 6, 1: 3.6})


def test_a_flow_alone_takes_its_alone_time():
    # the ceiling 4 binds (links allow 10 and 100 / 2)
    ends, stats = run_flows({"a": 10, "b": 100}, [(0, FlowSpec({"a": 1, "b": 2}, 100, 4.0, latency=0.5))])
    assert ends[0] == pytest.approx(0.5 + 100 / 4) and stats.slowed_s == pytest.approx(0)
    # a link binds below the ceiling: b offers 6 / 2 = 3 < 4, and that counts as slowed
    ends, stats = run_flows({"a": 10, "b": 6}, [(0, FlowSpec({"a": 1, "b": 2}, 100, 4.0, latency=0.5))])
    assert ends[0] == pytest.approx(0.5 + 100 / 3) and stats.slowed_s == pytest.approx(100 / 3 - 100 / 4)


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_flow_agrees_with_analytical_on_every_shipped_scenario(path):
    """Both price a lone transfer alike: where no flow met another the steps are equal.
    Where flows met (the network says how much they slowed each other) the step may grow by
    no more than that, and may shrink by at most 1% (the analytical model divides links among
    groups that do not always overlap in time). Only the MoE scenarios (moe-1024, deepseek-v3:
    +1.4%) grow by over 1%: their backwards' all-to-alls share the NICs with the gradient
    buckets overlapped with them, which the analytical model, dividing links within one kind of
    traffic, cannot see."""
    analytical = sim3d.simulate(path)
    flow = sim3d.simulate(path, sets=["costs.network=flow"])
    stats = flow.sim.network
    assert stats is not None and analytical.sim.network is None
    if stats.slowed_s < 1e-9:
        assert flow.step_time == pytest.approx(analytical.step_time, rel=1e-9)
    assert analytical.step_time * 0.99 <= flow.step_time <= analytical.step_time + stats.slowed_s + 1e-9
    if path.stem not in ("moe-1024", "deepseek-v3"):
        assert flow.step_time == pytest.approx(analytical.step_time, rel=0.01)


def test_flow_agrees_with_analytical_where_no_traffic_overlaps_the_all_to_alls():
    """moe-1024 with its gradient buckets after the backwards: within 1% again."""
    sets = ["training.overlap_grad_reduce=false"]
    analytical = sim3d.simulate(ROOT / "scenarios" / "moe-1024.yaml", sets=sets)
    flow = sim3d.simulate(ROOT / "scenarios" / "moe-1024.yaml", sets=sets + ["costs.network=flow"])
    assert flow.step_time == pytest.approx(analytical.step_time, rel=0.01)


def layout(tp, pp, dp, nodes, gpus_per_node, **extra):
    cluster = dict(gpu="h100-sxm", nodes=nodes, gpus_per_node=gpus_per_node, **extra.pop("cluster", {}))
    return dict(name="flows", model=dict(layers=8, hidden=1024, heads=16, vocab=32000, seq_len=2048),
                parallel=dict(tp=tp, pp=pp, dp=dp, sequence_parallel=tp > 1),
                training=dict(micro_batch=1, global_batch=8 * dp, recompute="none", **extra.pop("training", {})),
                cluster=cluster, costs=dict(network="flow"), **extra)


@pytest.mark.parametrize("tp,pp,dp,nodes,gpn", [(2, 2, 4, 2, 8), (1, 4, 8, 4, 8), (4, 2, 4, 4, 8), (1, 2, 2, 4, 1)])
def test_folded_flows_equal_every_gpu_replayed(tp, pp, dp, nodes, gpn):
    """A folded rank's flows bundle those of every rank it stands for; on symmetric layouts
    that is what replaying every GPU's own flows gives."""
    s = layout(tp, pp, dp, nodes, gpn)
    folded, full = sim3d.simulate(s), sim3d.simulate(s, full_fidelity=True)
    assert folded.step_time == pytest.approx(full.step_time, rel=1e-9)


def test_folded_flows_keep_the_slowest_replica_where_pipelines_differ():
    """tp2 pp4 dp3 on three 8-GPU nodes: stage 1 straddles nodes 0 and 1, so some pipelines
    cross a node boundary where others stay on NVLink. A bundle moves at its slowest
    replica's pace at every boundary, so folding is pessimistic here, never optimistic."""
    s = layout(2, 4, 3, 3, 8)
    folded, full = sim3d.simulate(s), sim3d.simulate(s, full_fidelity=True)
    assert full.step_time <= folded.step_time <= full.step_time * 1.01


def test_pipeline_messages_queue_on_an_oversubscribed_uplink():
    """Two 8-GPU nodes, each its own fat-tree leaf, uplinks 8:1 oversubscribed: an uplink is as
    fast as one NIC. tp8 pp2: the eight TP ranks of stage 0 send their activations at once,
    each over its own NIC but all over the one uplink. The analytical model prices each path
    on its own bottleneck (one NIC); on the flow network the eight share the uplink and every
    message takes eight times as long."""
    s = layout(8, 2, 1, 2, 8, cluster=dict(inter_node=dict(fabric="fat-tree", oversubscription=8, nodes_per_leaf=1)))
    flow = sim3d.simulate(s)
    analytical = sim3d.simulate(s, sets=["costs.network=analytical"])
    topo = flow.costs.topology
    bw, latency = topo.path_cost(0, 8)
    rate = bw * sim3d.costs.collectives.NETWORK_EFFICIENCY
    message = flow.costs.p2p_bytes

    def sends(result):
        t = result.trace
        return t[t.kind == "SEND_F"]
    assert (sends(analytical).end_s - sends(analytical).start_s).to_numpy() == pytest.approx(latency + message / rate)
    durations = (sends(flow).end_s - sends(flow).start_s).to_numpy()
    assert durations.min() == pytest.approx(latency + 8 * message / rate)
    assert flow.step_time > analytical.step_time


def test_a_gradient_bucket_and_a_pipeline_message_share_a_nic():
    """pp2 dp2 on four one-GPU nodes: each GPU has one NIC, so stage 1's gradient all-reduce
    and its backward sends leave through the same port. The flow network makes them share
    it; the analytical model prices each alone. Nothing else differs."""
    s = layout(1, 2, 2, 4, 1)
    flow = sim3d.simulate(s)
    analytical = sim3d.simulate(s, sets=["costs.network=analytical"])
    assert flow.sim.network.slowed_s > 0
    assert flow.step_time >= analytical.step_time
    assert flow.breakdown["compute"] == pytest.approx(analytical.breakdown["compute"])

    def longest(result, kind):
        t = result.trace
        rows = t[t.kind == kind]
        return (rows.end_s - rows.start_s).max()
    shared = max(longest(flow, "DP_REDUCE") / longest(analytical, "DP_REDUCE"),
                 longest(flow, "SEND_B") / longest(analytical, "SEND_B"))
    assert 1.01 < shared <= 2 + 1e-9  # two flows on one port: at worst half the rate each


def sends_from(result, rank, kind="SEND_F"):
    t = result.trace
    rows = t[(t.kind == kind) & (t["rank"] == rank)]
    return (rows.end_s - rows.start_s).to_numpy()


def test_a_failed_nic_reroutes_its_gpu_through_a_neighbour_and_they_share_its_port():
    """tp8 pp2 on two 8-GPU nodes, NIC 3 of node 0 failed: GPU 3 reaches the network over
    NVLink through GPU 4 and its NIC (NCCL's PXN). Its activations and GPU 4's then leave
    through one port at the same moments. By hand, with L the path latency, D the data time
    alone and d the extra latency of the detour (two NVLink half-hops, and the spine: rail 4
    leads to node 1's rail-3 NIC through another leaf): GPU 4's message runs alone for d,
    then both share the port at half rate, so GPU 4's ends at L + 2D - d and GPU 3's at L + 2D."""
    healthy = layout(8, 2, 1, 2, 8)
    failed = {**healthy, "faults": [{"nic": {"node": 0, "nic": 3, "gbps": 0}}]}
    ok, broken = sim3d.simulate(healthy, full_fidelity=True), sim3d.simulate(failed, full_fidelity=True)
    topo = broken.costs.topology
    assert list(topo.path(3, 11)[:3]) == [(("gpu", 0, 3), ("switch", 0)), (("switch", 0), ("gpu", 0, 4)),
                                    (("gpu", 0, 4), ("nic", 0, 4))]
    alone = sends_from(ok, 3)
    bw, latency = ok.costs.topology.path_cost(3, 11)
    assert alone == pytest.approx(latency + ok.costs.p2p_bytes / (bw * sim3d.costs.collectives.NETWORK_EFFICIENCY))
    data = alone - latency
    detour = topo.path_cost(3, 11)[1] - latency
    assert detour == pytest.approx((broken.scenario.cluster.intra_node.latency_us
                                    + broken.scenario.cluster.inter_node.latency_us / 2) * 1e-6)
    assert sends_from(broken, 3) == pytest.approx(latency + 2 * data)
    assert sends_from(broken, 4) == pytest.approx(latency + 2 * data - detour)
    assert sends_from(broken, 2) == pytest.approx(alone)  # its own NIC, untouched
    assert broken.step_time > ok.step_time
    # folded: one bundle stands for the 8 TP ranks' messages, at the slowest one's latency
    # and pace, so it sees the fault too, a little pessimistically: 1F1B's sends hold the
    # compute stream, so by no more than its transfers took longer
    folded = sim3d.simulate(failed)
    slower_sends = folded.breakdown["pipeline_p2p"] - broken.breakdown["pipeline_p2p"]
    assert broken.step_time <= folded.step_time <= broken.step_time + slower_sends * (1 + 1e-9)
    assert folded.step_time <= broken.step_time * 1.002


def test_a_degraded_uplink_slows_what_crosses_it_in_both_network_models():
    """Two one-leaf nodes; leaf 0's uplink degraded to 100 Gb/s: the pipeline path's
    bottleneck is that uplink, for the analytical model and the flows alike."""
    s = layout(1, 2, 1, 2, 1, cluster=dict(inter_node=dict(fabric="fat-tree", nodes_per_leaf=1)),
               faults=[{"uplink": {"leaf": 0, "gbps": 100}}])
    for network in ("analytical", "flow"):
        r = sim3d.simulate(s, sets=[f"costs.network={network}"])
        bw, latency = r.costs.topology.path_cost(0, 1)
        assert bw == pytest.approx(100e9 / 8)
        expected = latency + r.costs.p2p_bytes / (bw * sim3d.costs.collectives.NETWORK_EFFICIENCY)
        assert sends_from(r, 0) == pytest.approx(expected)


@pytest.mark.parametrize("faults,message", [
    ([{"nic": {"node": 0, "nic": i, "gbps": 0}} for i in range(8)], "every NIC of node 0 has failed"),
    ([{"nic": {"node": 0, "nic": 8, "gbps": 0}}], "is not one of the 8 NICs"),
    ([{"uplink": {"leaf": 9, "gbps": 100}}], "is not one of the 8 leaves"),
    ([{"nic": {"node": 0, "nic": 1, "gbps": 0}, "straggler": {"rank": 1, "slowdown": 2}}], "exactly one of"),
])
def test_network_faults_that_cannot_be_are_refused(faults, message):
    with pytest.raises(sim3d.ScenarioError, match=message):
        sim3d.simulate({**layout(8, 2, 1, 2, 8), "faults": faults})


def domain_layout(gpus_per_node, nodes, domain_nodes, nics, network="analytical"):
    s = layout(8, 2, 2, nodes, gpus_per_node)
    s["cluster"].update(gpu="b200", intra_node=dict(domain_nodes=domain_nodes), inter_node=dict(nics_per_node=nics))
    s["costs"]["network"] = network
    return s


@pytest.mark.parametrize("network", ["analytical", "flow"])
def test_an_nvlink_domain_of_two_4_gpu_trays_prices_like_one_8_gpu_node(network):
    """NVL72-class racks join the GPUs of several trays behind NVLink switches. Two trays of 4
    GPUs and 4 NICs in one domain are, to the network, one node of 8 GPUs and 8 NICs: the same
    step time to the last bit, with tp 8 on NVLink. Without the domain, tp 8 crosses InfiniBand."""
    trays = sim3d.simulate(domain_layout(4, 8, 2, 4, network))
    servers = sim3d.simulate(domain_layout(8, 4, 1, 8, network))
    assert trays.step_time == pytest.approx(servers.step_time, rel=1e-12)
    link = trays.costs.topology.group_link("tp")
    assert link.nodes == 1 and link.size == 8
    apart = sim3d.simulate(domain_layout(4, 8, 1, 4, network))
    assert apart.costs.topology.group_link("tp").nodes == 2
    assert apart.step_time > trays.step_time * 1.05
    assert any("exceeds the 4 GPUs of an NVLink domain" in w for w in apart.summary["warnings"])


def test_a_72_gpu_domain_keeps_tensor_parallel_traffic_off_the_nics():
    s = domain_layout(4, 18, 18, 4)
    s["parallel"].update(tp=8, pp=3, dp=3)
    s["training"]["global_batch"] = 24
    r = sim3d.simulate(s)
    nic = r.links[r.links.kind.isin(["ib", "pcie"])]
    assert r.costs.topology.nodes == 1 and nic.bytes.sum() == 0
    assert "1 NVLink domains of 18 nodes x 4" in r.costs.topology.describe()


def test_domains_must_be_whole_and_switched():
    with pytest.raises(sim3d.ScenarioError, match="do not make whole NVLink domains"):
        sim3d.simulate(domain_layout(4, 8, 3, 4))
    bad = domain_layout(4, 8, 2, 4)
    bad["cluster"]["intra_node"]["fabric"] = "pcie"
    with pytest.raises(sim3d.ScenarioError, match="needs NVLink switches"):
        sim3d.simulate(bad)


def test_a_failed_rail_leaf_moves_its_gpus_to_the_neighbouring_rail():
    """Leaf 3 of a rail-optimized fabric down: NIC 3 of every node is cut off, so GPU 3 of each
    node goes out through GPU 4's NIC, exactly as with NIC 3 failed on both nodes."""
    healthy = layout(8, 2, 1, 2, 8)
    leaf = sim3d.simulate({**healthy, "faults": [{"leaf": {"leaf": 3}}]}, full_fidelity=True)
    nics = sim3d.simulate({**healthy, "faults": [{"nic": {"node": n, "nic": 3, "gbps": 0}} for n in (0, 1)]},
                          full_fidelity=True)
    assert leaf.costs.topology.path(3, 11) == nics.costs.topology.path(3, 11)
    assert ("nic", 0, 3) not in leaf.costs.topology.graph
    assert leaf.step_time == pytest.approx(nics.step_time, rel=1e-12)
    assert leaf.step_time > sim3d.simulate(healthy, full_fidelity=True).step_time
    tree = {**healthy, "cluster": {**healthy["cluster"], "inter_node": {"fabric": "fat-tree", "nodes_per_leaf": 1}},
            "faults": [{"leaf": {"leaf": 1}}]}
    with pytest.raises(sim3d.ScenarioError, match="every NIC of node 1 has failed or lost its leaf"):
        sim3d.simulate(tree)


@pytest.mark.parametrize("faults,message", [
    ([{"nic": {"node": 0, "nic": 1, "gbps": 1e-6}}], "give 0 for a failed NIC"),
    ([{"nic": {"node": 0, "nic": 1, "gbps": 0}}, {"nic": {"node": 0, "nic": 1, "gbps": 100}}], "the same nic as faults.0"),
    ([{"leaf": {"leaf": 2}}, {"leaf": {"leaf": 2}}], "the same leaf as faults.0"),
])
def test_contradictory_or_meaningless_faults_are_refused(faults, message):
    with pytest.raises(sim3d.ScenarioError, match=message):
        sim3d.simulate({**layout(8, 2, 1, 2, 8), "faults": faults})


def test_a_slow_server_nic_does_not_shrink_its_leafs_uplinks():
    base = layout(1, 2, 2, 4, 1, cluster=dict(inter_node=dict(fabric="fat-tree", oversubscription=4, nodes_per_leaf=2)))
    healthy = sim3d.simulate(base).costs.topology.graph.edges[("leaf", 0), ("spine", 0)]["bw"]
    slowed = sim3d.simulate({**base, "faults": [{"nic": {"node": 0, "nic": 0, "gbps": 1}}]})
    assert slowed.costs.topology.graph.edges[("leaf", 0), ("spine", 0)]["bw"] == healthy
    assert any("costs.network: flow makes them share it" in w for w in
               sim3d.simulate({**base, "costs": {}, "faults": [{"nic": {"node": 0, "nic": 0, "gbps": 1}}]}).summary["warnings"])


def test_plan_refuses_gpus_that_are_not_whole_nvlink_domains(tmp_path):
    import yaml
    from sim3d.studies.plan import check_space
    from sim3d.studies.space import Space
    path = tmp_path / "trays.yaml"
    path.write_text(yaml.safe_dump(domain_layout(4, 8, 2, 4)))
    with pytest.raises(sim3d.ScenarioError, match="not a whole number of 8-GPU NVLink domains"):
        check_space(path, 12)
    layouts, _ = Space(sim3d.load_scenario(path), 16, {}).layouts()
    assert max(layout.tp for layout in layouts) == 8  # tensor parallelism spans the domain's two trays


def test_a_hierarchical_all_reduce_stretches_only_its_network_phase():
    """tp2 dp16 over 2-NIC nodes: the gradient all-reduce is hierarchical (NVLink reduce-scatter,
    all-reduce between nodes, NVLink all-gather), and four groups share each NIC. The analytical
    model divides only the inter-node phase among them; the flow stretches only that phase too,
    so the two steps agree (a flow spanning the NVLink phases made this one 4.9% slow)."""
    s = {"name": "hier", "model": {"layers": 4, "hidden": 2048, "heads": 16, "vocab": 32000, "seq_len": 2048},
         "parallel": {"tp": 2, "pp": 1, "dp": 16}, "training": {"micro_batch": 1, "global_batch": 32,
                                                               "overlap_grad_reduce": False},
         "cluster": {"gpu": "h100-sxm", "nodes": 4, "gpus_per_node": 8, "inter_node": {"nics_per_node": 2}}}
    analytical = sim3d.simulate(s)
    flow = sim3d.simulate(s, sets=["costs.network=flow"])
    dp = analytical.costs.topology.group_link("dp", alone=True)
    from sim3d.costs.collectives import collective_time
    assert collective_time("all_reduce", 64 * 2**20, dp).algorithm == "hierarchical"
    assert flow.step_time == pytest.approx(analytical.step_time, rel=0.005)


def test_flow_runs_lay_their_events_out_the_same_way_under_any_hash_seed():
    """Flows sharing links are re-rated, and their ends scheduled, in the order they came,
    not in the order of sets hashed by object ids and strings: two processes with different
    hash seeds write the same trace rows in the same order (full fidelity, EP all-to-alls
    meeting data-parallel buckets; the row order used to differ from seed to seed)."""
    import os
    import subprocess
    import sys

    script = ("import hashlib; from sim3d.scenario.load import load_scenario; from sim3d.engine import replay_step; "
              "s = load_scenario('scenarios/moe-1024.yaml', ['costs.network=flow', 'parallel.dp=8', "
              "'cluster.nodes=16', 'training.global_batch=32']); "
              "print(hashlib.sha256(repr(replay_step(s, full_fidelity=True).result.rows).encode()).hexdigest())")
    digests = {subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONHASHSEED": seed}, cwd=ROOT).stdout for seed in ("1", "2", "3")}
    assert len(digests) == 1
