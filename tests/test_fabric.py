"""Switch tiers: leaves, pods and a core with oversubscription per tier, by hand on small
clusters; the defaults leave the two-tier fabrics as they were."""

import pytest

import sim3d
from sim3d.costs.collectives import NETWORK_EFFICIENCY, collective_time
from sim3d.scenario.load import ScenarioError, load_scenario, scenario_from_dict
from sim3d.cluster.topology import GBIT, Topology, leaf_count

NIC = 400 * GBIT


def exactly(x):
    return pytest.approx(x, rel=1e-9, abs=0)


def three_tier(pod_oversubscription=1.0, fabric="fat-tree", nodes=8, gpus_per_node=1, ep=1, faults=(), **inter):
    """8 one-GPU servers, 2 per leaf, 4 per pod: leaves 0-3, pods {0, 1} and {2, 3}."""
    gpus = nodes * gpus_per_node
    model = dict(layers=4, hidden=1024, heads=16, vocab=32000, seq_len=2048)
    if ep > 1:
        model["moe"] = dict(experts=2 * ep, top_k=2, expert_ffn_hidden=2048)
    return scenario_from_dict(dict(
        name="tiers", model=model, parallel=dict(tp=1, pp=1, dp=gpus, ep=ep),
        training=dict(micro_batch=1, global_batch=gpus),
        cluster=dict(gpu="h100-sxm", nodes=nodes, gpus_per_node=gpus_per_node,
                     inter_node=dict(fabric=fabric, nic_gbps=400, nics_per_node=gpus_per_node,
                                     **{"nodes_per_leaf": 2, "nodes_per_pod": 4,
                                        "pod_oversubscription": pod_oversubscription, **inter})),
        faults=list(faults)))


def test_routes_climb_only_as_high_as_they_must():
    topo = Topology(three_tier())
    switches = lambda a, b: [v for _, v in topo.path(a, b) if v[0] in ("leaf", "spine", "core")]  # noqa: E731
    assert switches(0, 1) == [("leaf", 0)]  # same leaf
    assert switches(0, 2) == [("leaf", 0), ("spine", 0), ("leaf", 1)]  # same pod
    assert switches(0, 4) == [("leaf", 0), ("spine", 0), ("core", 0), ("spine", 1), ("leaf", 2)]
    # latency: a quarter of latency_us per switch hop, NIC ports included
    assert topo.path_cost(0, 4)[1] == exactly(6 * 5e-6 / 4)


@pytest.mark.parametrize("ratio", [1, 4, 7])
def test_the_core_carries_a_pods_leaf_uplinks_at_its_ratio(ratio):
    graph = Topology(three_tier(pod_oversubscription=ratio)).graph
    assert graph.edges[("leaf", 0), ("spine", 0)]["bw"] == exactly(2 * NIC)  # 2 ports, 1:1
    assert graph.edges[("spine", 0), ("core", 0)]["bw"] == exactly(4 * NIC / ratio)  # 2 leaves x 2 NICs
    assert graph.edges[("spine", 0), ("core", 0)]["kind"] == "core"


@pytest.mark.parametrize("ratio, ring", [(1, NIC), (4, NIC), (8, NIC / 2)])
def test_a_ring_across_pods_slows_only_when_the_core_is_thinner_than_a_nic(ratio, ring):
    # the data-parallel ring 0..7 crosses the core twice (3->4 and 7->0), once per direction
    # of each spine's core link: it is NIC-bound until the core link (4 NICs / ratio) is
    # below one NIC
    assert Topology(three_tier(pod_oversubscription=ratio)).group_link("dp").bw == exactly(ring)


@pytest.mark.parametrize("ratio, expected", [(1, 7 / 8 / NIC), (4, 2 / NIC)])
def test_an_all_to_all_across_pods_by_hand(ratio, expected):
    # each member sends 4 of its 8 eighths to the other pod: a pod's 4 members put 2 buffers on
    # its core link (4 NICs / ratio); a NIC carries 7/8, a leaf uplink 2 x 6/8 over 2 NICs
    link = Topology(three_tier(pod_oversubscription=ratio, ep=8)).group_link("ep")
    assert link.a2a_network_s == exactly(expected)
    assert collective_time("all_to_all", 2**26, link).seconds == exactly(
        7 * link.latency + expected / NETWORK_EFFICIENCY * 2**26)


def test_rail_optimized_scalable_units():
    # 4 servers of 8 GPUs, 2 servers per scalable unit: 2 x 8 rail leaves; rail k of SU 0 and
    # SU 1 meet at the spine
    s = three_tier(fabric="rail-optimized", nodes=4, gpus_per_node=8, nodes_per_pod=None)
    topo = Topology(s)
    assert leaf_count(s) == 16
    switches = [v for _, v in topo.path(3, 8 + 3) if v[0] in ("leaf", "spine")]
    assert switches == [("leaf", 3)]
    switches = [v for _, v in topo.path(3, 16 + 3) if v[0] in ("leaf", "spine")]
    assert switches == [("leaf", 3), ("spine", 0), ("leaf", 8 + 3)]


def test_default_fabrics_keep_one_spine():
    for fabric in ("rail-optimized", "fat-tree"):
        graph = Topology(three_tier(fabric=fabric, nodes_per_leaf=None, nodes_per_pod=None)).graph
        assert not [n for n in graph if n[0] == "core"]
        assert [n for n in graph if n[0] == "spine"] == [("spine", 0)]


@pytest.mark.parametrize("inter, message", [
    (dict(nodes_per_pod=3), "nodes_per_pod: 3 is not a whole number of leaves of 2 servers"),
    (dict(nodes_per_pod=None, pod_oversubscription=7), "pod_oversubscription: needs pods"),
    (dict(fabric="rail-optimized", nodes_per_leaf=None, nodes_per_pod=4), "nodes_per_leaf sets a scalable unit"),
])
def test_tier_mistakes_are_named(inter, message):
    with pytest.raises(ScenarioError, match=message):
        three_tier(**inter)


def test_a_thin_core_slows_the_step_that_crosses_it():
    """GPT-3 on a fat tree of 32-server pods: pipeline stages sit 8 servers apart, so every
    fourth stage boundary crosses the core. At 1:1 the core is as wide as the pod's uplinks
    and the step is the two-tier one but for latency; at 1:64 the 64 messages of a boundary share 4 NICs'
    worth of core and the step grows."""
    def step(ratio):
        return sim3d.simulate("scenarios/gpt3.yaml", sets=[
            "cluster.inter_node.fabric=fat-tree", "cluster.inter_node.nodes_per_pod=32",
            f"cluster.inter_node.pod_oversubscription={ratio}", "costs.network=flow"]).step_time
    two_tier = sim3d.simulate("scenarios/gpt3.yaml", sets=["cluster.inter_node.fabric=fat-tree",
                                                           "costs.network=flow"]).step_time
    assert 0 < step(1) - two_tier < 1e-4  # two more switch hops of latency per message, no less bandwidth
    assert step(64) > step(1) + 0.01



def test_a_failed_leaf_keeps_its_pods_core_link_as_cabled():
    """A dead rail leaf cuts its NICs off, not the core's cables: the pod's core link keeps
    the capacity of every leaf cabled under it, as a degraded uplink or a dead NIC leaves it."""
    kw = dict(fabric="rail-optimized", nodes=4, gpus_per_node=8, nodes_per_leaf=2, nodes_per_pod=2,
              pod_oversubscription=2)
    healthy = Topology(three_tier(**kw)).graph.edges[("spine", 0), ("core", 0)]["bw"]
    assert healthy == exactly(2 * 8 * NIC / 2)  # 2 servers x 8 rails, at 1:2
    broken = Topology(three_tier(**kw, faults=[{"leaf": {"leaf": 3}}])).graph
    assert ("leaf", 3) not in broken
    assert broken.edges[("spine", 0), ("core", 0)]["bw"] == exactly(healthy)


def test_a_pod_holding_every_server_is_named():
    s = three_tier(nodes_per_pod=8, pod_oversubscription=7)
    assert any("one pod, no core" in w for w in s.warnings())
    assert "pods of" not in Topology(s).describe()
    assert "pods of 4 servers joined at 7:1" in Topology(three_tier(pod_oversubscription=7)).describe()


def test_ecmp_flows_that_hash_alike_share_an_uplink():
    """Two 8-GPU servers, each its own fat-tree leaf with eight uplinks to eight spines. tp8
    pp2: the eight TP ranks of stage 0 send their activations at once. Adaptive routing
    spreads them over all uplinks, so each takes its NIC's time; under ECMP each is hashed onto
    one spine, and the m that land on the same one take m times as long, as counted here from
    the routes."""
    from collections import Counter

    from sim3d.costs.collectives import NETWORK_EFFICIENCY

    def run(routing):
        s = dict(name="ecmp", model=dict(layers=8, hidden=1024, heads=16, vocab=32000, seq_len=2048),
                 parallel=dict(tp=8, pp=2, dp=1, sequence_parallel=True),
                 training=dict(micro_batch=1, global_batch=8, recompute="none"),
                 cluster=dict(gpu="h100-sxm", nodes=2, gpus_per_node=8,
                              inter_node=dict(fabric="fat-tree", nodes_per_leaf=1, routing=routing)),
                 costs=dict(network="flow"))
        return sim3d.simulate(s, full_fidelity=True)
    ecmp, adaptive = run("ecmp"), run("adaptive")
    topo = ecmp.costs.topology
    spine_of = {i: next(v for u, v in topo.path(i, 8 + i) if v[0] == "spine") for i in range(8)}
    assert all(len(spine) == 3 for spine in spine_of.values())  # ("spine", pod, plane)
    sharing = Counter(spine_of.values())
    assert max(sharing.values()) > 1  # this hash puts some of the eight together...
    assert len(sharing) > 1  # ...and others apart
    bw, latency = topo.path_cost(0, 8)
    rate, message = bw * NETWORK_EFFICIENCY, ecmp.costs.p2p_bytes
    for result, crowd in ((ecmp, lambda i: sharing[spine_of[i]]), (adaptive, lambda i: 1)):
        sends = result.trace[result.trace.kind == "SEND_F"]
        for i in range(8):
            took = (sends.end_s - sends.start_s)[sends["rank"] == i].to_numpy()
            assert took == pytest.approx(latency + crowd(i) * message / rate, rel=1e-9), (i, crowd(i))
    assert ecmp.step_time > adaptive.step_time


def test_ecmp_with_one_uplink_per_leaf_is_adaptive_routing():
    """A leaf whose ports / oversubscription round to one uplink has one spine to hash onto."""
    sets = ["cluster.inter_node.fabric=fat-tree", "cluster.inter_node.oversubscription=128"]  # 16 servers x 8 NICs
    for network in ("analytical", "flow"):
        steps = [sim3d.simulate("scenarios/gpt3.yaml", sets=sets + [f"cluster.inter_node.routing={routing}",
                                                                    f"costs.network={network}"]).step_time
                 for routing in ("adaptive", "ecmp")]
        assert steps[1] == pytest.approx(steps[0], rel=1e-12)


def test_a_degraded_leaf_under_ecmp_loses_spine_links_not_their_speed():
    """16 servers of 8 NICs under a fat-tree leaf, 400 Gb/s each: 128 uplinks at line rate.
    Degraded to 1,600 Gb/s, four are left, each still at 400 Gb/s, and flows hash over them."""
    sets = ["cluster.inter_node.fabric=fat-tree", "cluster.inter_node.routing=ecmp", "cluster.inter_node.nic_gbps=400"]
    graph = Topology(load_scenario("scenarios/gpt3.yaml", sets + ["faults=[{uplink: {leaf: 1, gbps: 1600}}]"])).graph
    uplinks = [graph.edges[e]["bw"] for e in graph.edges(("leaf", 1)) if e[1][0] == "spine"]
    assert uplinks == [exactly(NIC)] * 4
    healthy = Topology(load_scenario("scenarios/gpt3.yaml", sets)).graph
    assert len([e for e in healthy.edges(("leaf", 1)) if e[1][0] == "spine"]) == 128
