"""Expert-parallel all-to-alls on the cluster graph: the loads of concurrent groups against
hand counts, PXN routes, and what an oversubscribed spine does to them."""

import pytest

import sim3d
from sim3d.costs.collectives import NETWORK_EFFICIENCY, collective_time
from sim3d.scenario.load import load_scenario, scenario_from_dict
from sim3d.cluster.topology import GBIT, Topology

NIC = 400 * GBIT


def moe(nodes=32, gpus_per_node=1, ep=32, fabric="fat-tree", oversubscription=1.0, tp=1, **extra):
    gpus = nodes * gpus_per_node
    return scenario_from_dict(dict(
        name="a2a", model=dict(layers=4, hidden=1024, heads=16, vocab=32000, seq_len=2048,
                               moe=dict(experts=ep * 2, top_k=2, expert_ffn_hidden=2048)),
        parallel=dict(tp=tp, pp=1, dp=gpus // tp, ep=ep),
        training=dict(micro_batch=1, global_batch=gpus // tp),
        cluster=dict(gpu="h100-sxm", nodes=nodes, gpus_per_node=gpus_per_node,
                     inter_node=dict(fabric=fabric, nic_gbps=400, nics_per_node=gpus_per_node,
                                     oversubscription=oversubscription)), **extra))


def exactly(x):
    return pytest.approx(x, rel=1e-9, abs=0)  # seconds per byte are ~1e-11: no absolute slack


@pytest.mark.parametrize("oversubscription, expected", [(1, 31 / 32 / NIC), (2, 1 / NIC), (4, 2 / NIC)])
def test_spine_bound_all_to_all_by_hand(oversubscription, expected):
    # 32 one-GPU nodes, 16 under each fat-tree leaf, one EP group of 32. A member sends 1/32
    # of its buffer to each of 31 others: 31/32 out of its NIC, 16/32 over the spine. A leaf's
    # uplink carries 16 members x 1/2 = 8 buffers at 16 NICs / oversubscription: below the
    # NIC's 31/32 when non-blocking, 1/NIC at 2:1, 2/NIC at 4:1.
    link = Topology(moe(oversubscription=oversubscription)).group_link("ep")
    assert link.nodes == 32
    assert link.a2a_network_s == exactly(expected)
    nbytes = 64 * 2**20
    got = collective_time("all_to_all", nbytes, link)
    assert got.seconds == exactly(31 * link.latency + expected / NETWORK_EFFICIENCY * nbytes)


def test_rail_optimized_all_to_all_stays_on_its_rails():
    # 4 nodes of 8 GPUs, EP over all 32: PXN hands each share to the GPU on the receiver's
    # rail, so nothing crosses the spine and each NIC carries 8 members' x 24/32 / 8 rails
    for oversubscription in (1, 8):
        topo = Topology(moe(nodes=4, gpus_per_node=8, fabric="rail-optimized", oversubscription=oversubscription))
        load = topo.all_to_all_load("ep")
        assert not [e for e in load if "spine" in (e[0][0], e[1][0])]
        assert topo.group_link("ep").a2a_network_s == exactly(24 / 32 / NIC)


def test_pxn_path_goes_out_on_the_receivers_rail():
    topo = Topology(moe(nodes=4, gpus_per_node=8, fabric="rail-optimized"))
    a, b = 3, 8 + 5  # node 0 GPU 3 -> node 1 GPU 5
    path = topo.pxn_path(a, b)
    assert path[0][0] == ("gpu", 0, 3) and path[-1][1] == ("gpu", 1, 5)
    assert all(edge[1] == after[0] for edge, after in zip(path, path[1:]))
    assert (("gpu", 0, 5), ("nic", 0, 5)) in path  # the proxy on rail 5 sends it
    assert topo.pxn_path(a, 8 + 3) == topo.path(a, 8 + 3)  # same rail: no detour


def test_concurrent_groups_share_the_uplinks():
    # tp 2 on 2-GPU nodes: two EP groups of 32 (one per TP rank), each on its own rail.
    # Alone, a group puts 16 x 16/32 = 8 buffers on each leaf's uplink (32 NIC ports / 4 =
    # 8 NICs of capacity: 1/NIC, above its NICs' 31/32); both at once put 16 there.
    s = moe(nodes=32, gpus_per_node=2, ep=32, tp=2, oversubscription=4)
    topo = Topology(s)
    shared, alone = topo.group_link("ep"), topo.group_link("ep", alone=True)
    assert alone.a2a_network_s == exactly(1 / NIC)
    assert shared.a2a_network_s == exactly(2 / NIC)


def test_oversubscribed_spine_slows_expert_parallel_time():
    """The whole chain: a 2-leaf EP group's step grows with the oversubscription, a 1-leaf
    group's does not (sim3d's moe scenario, EP widened to 64 across two fat-tree leaves)."""
    def ep_seconds(ep, ratio):
        s = load_scenario("scenarios/moe-1024.yaml", [f"parallel.ep={ep}", "cluster.inter_node.fabric=fat-tree",
                                                      f"cluster.inter_node.oversubscription={ratio}"])
        return sim3d.simulate(s).breakdown["ep"]
    assert ep_seconds(64, 4) > 1.4 * ep_seconds(64, 1)
    assert ep_seconds(8, 4) == pytest.approx(ep_seconds(8, 1))


def two_leaf_moe(*sets):
    return load_scenario("scenarios/moe-1024.yaml", ["parallel.ep=64", "cluster.inter_node.fabric=fat-tree",
                                                     "cluster.inter_node.oversubscription=4", *sets])


def test_all_to_all_flows_alone_take_the_analytical_time():
    """On the flow network a compute action's all-to-alls are one flow. The four EP groups of
    a pipeline stage, bundled, are what share the spine in the analytical model too, so each
    action's EP_COMM lasts exactly as long on both wherever nothing else crosses its links, and
    only longer where something does (some of stage 1's forward all-to-alls meet the pipeline's
    sends: 0.4% more EP time in all). The scenario runs one-chunk 1F1B, whose sends hold the
    compute stream: the sends that share the spine with all-to-alls take longer on the flow
    network, and the step grows by what its transfers and all-to-alls grew, nothing else."""
    analytical, flow = sim3d.simulate(two_leaf_moe()), sim3d.simulate(two_leaf_moe("costs.network=flow"))
    assert analytical.breakdown["ep"] * (1 - 1e-9) <= flow.breakdown["ep"] <= analytical.breakdown["ep"] * 1.01
    for part in ("compute", "recompute", "tp"):
        assert flow.breakdown[part] == pytest.approx(analytical.breakdown[part], rel=1e-9)
    longer = flow.step_time - analytical.step_time
    transfers = flow.breakdown["pipeline_p2p"] - analytical.breakdown["pipeline_p2p"]
    assert 0 <= longer and transfers == pytest.approx(longer, rel=0.1)

    def ep_rows(result):
        rows = result.trace[result.trace.kind == "EP_COMM"]
        return (rows.end_s - rows.start_s).to_numpy()
    longest = ep_rows(analytical).max()
    assert ep_rows(flow).min() == pytest.approx(ep_rows(analytical).min(), rel=1e-9)
    assert ep_rows(flow).max() >= longest * (1 - 1e-9)  # flows can only be slowed by others


def test_all_to_all_flows_meet_data_parallel_flows():
    """Without overlap the data-parallel buckets run after the backwards and nothing meets the
    all-to-alls; overlapped, the buckets cross the same NICs during the backwards' all-to-alls
    and slow them."""
    apart = sim3d.simulate(two_leaf_moe("costs.network=flow", "training.overlap_grad_reduce=false"))
    together = sim3d.simulate(two_leaf_moe("costs.network=flow", "training.overlap_grad_reduce=true"))
    assert together.breakdown["ep"] > apart.breakdown["ep"]


def small_moe(**extra):
    """EP groups of 4 over 4 of the 16 two-GPU nodes, under two 4:1 fat-tree leaves of 2 nodes."""
    return dict(name="a2a-flows", model=dict(layers=4, hidden=1024, heads=16, vocab=32000, seq_len=2048,
                                             moe=dict(experts=8, top_k=2, expert_ffn_hidden=2048)),
                parallel=dict(tp=2, pp=2, dp=8, ep=4, sequence_parallel=True),
                training=dict(micro_batch=1, global_batch=32, recompute="none"),
                cluster=dict(gpu="h100-sxm", nodes=16, gpus_per_node=2,
                             inter_node=dict(fabric="fat-tree", nodes_per_leaf=2, oversubscription=4)),
                costs=dict(network="flow"), **extra)


def test_folded_all_to_all_flows_equal_every_gpu_replayed():
    """Full fidelity replays every GPU, and each EP group starts its all-to-alls once all its
    members are there; on a symmetric layout that is what the folded bundle gives."""
    folded, full = sim3d.simulate(small_moe()), sim3d.simulate(small_moe(), full_fidelity=True)
    link = folded.costs.topology.group_link("ep")
    assert link.nodes == 4 and folded.breakdown["ep"] > 0
    assert folded.step_time == pytest.approx(full.step_time, rel=1e-9)


def test_a_straggler_holds_its_expert_group_at_the_all_to_all():
    s = small_moe(faults=[dict(straggler=dict(rank=0, slowdown=1.5))])
    result = sim3d.simulate(s, full_fidelity=True)
    peer = result.costs.placement.group("ep", 0)[1]
    assert result.sim.breakdown(peer)["ep"] > result.sim.breakdown(0)["ep"]


def test_link_traffic_lays_all_to_alls_on_their_routes():
    """links.csv: a member under leaf 0 sends 32 of its 63 shares to the other leaf, and the
    128 GPUs of stage 0 under leaf 0 all do (folded: rank 0's EP bytes stand for theirs)."""
    from sim3d.analysis.traffic import link_traffic
    result = sim3d.simulate(two_leaf_moe())
    rows = [row for row in result.sim.rows if row[4] == "EP_COMM"]
    links = link_traffic(rows, result.costs.topology, result.step_time, folded=True)
    per_member = sum(row[8] for row in rows if row[0] == 0)
    uplink = links[(links.src == "leaf0") & (links.dst == "spine0")].bytes.item()
    assert per_member > 0
    assert uplink == exactly(128 * per_member * 32 / 63)


LAYOUTS = [  # nodes, gpus per node, nics per node, tp, ep, fabric, extra inter_node fields
    (4, 8, 8, 1, 32, "rail-optimized", {}),
    (4, 8, 8, 4, 8, "rail-optimized", {}),
    (4, 8, 4, 2, 16, "rail-optimized", {"nodes_per_leaf": 2}),  # two GPUs per NIC, scalable units
    (8, 8, 8, 2, 32, "fat-tree", {"nodes_per_leaf": 2, "nodes_per_pod": 4, "oversubscription": 2}),
    (6, 4, 8, 1, 8, "fat-tree", {"nodes_per_leaf": 4}),  # more NICs than GPUs, a partial leaf
    (36, 4, 4, 4, 18, "rail-optimized", {"nodes_per_leaf": 18}),  # NVL72 domains (below)
]


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda x: f"{x[0]}x{x[1]}-nics{x[2]}-tp{x[3]}-ep{x[4]}-{x[5]}")
def test_counting_per_node_and_rail_gives_the_pairwise_loads(layout):
    from sim3d.cluster.all_to_all import group_load, pairwise_load
    nodes, gpn, nics, tp, ep, fabric, extra = layout
    gpus = nodes * gpn
    s = scenario_from_dict(dict(
        name="a2a", model=dict(layers=4, hidden=1024, heads=16, vocab=32000, seq_len=2048,
                               moe=dict(experts=ep * 2, top_k=2, expert_ffn_hidden=2048)),
        parallel=dict(tp=tp, pp=1, dp=gpus // tp, ep=ep), training=dict(micro_batch=1, global_batch=gpus // tp),
        cluster=dict(gpu="h100-sxm", nodes=nodes, gpus_per_node=gpn,
                     intra_node=dict(domain_nodes=18) if nodes == 36 else {},
                     inter_node=dict(fabric=fabric, nic_gbps=400, nics_per_node=nics, **extra))))
    topo = Topology(s)
    for group in topo.placement.groups("ep"):
        fast, reference = group_load(topo, group), pairwise_load(topo, group)
        assert set(fast) == set(reference)
        for edge, load in reference.items():
            assert fast[edge] == pytest.approx(load, rel=1e-12), edge


def test_a_failed_nic_routes_each_pair_on_its_own():
    s = moe(nodes=4, gpus_per_node=8, fabric="rail-optimized", faults=[{"nic": {"node": 1, "nic": 3, "gbps": 0}}])
    topo = Topology(s)
    assert topo.has_failed_nic
    load = topo.all_to_all_load("ep")
    assert ("nic", 1, 3) not in {u for u, _ in load}  # nothing leaves through the dead NIC
    assert sum(w for (u, v), w in load.items() if u == ("nic", 1, 4)) > sum(
        w for (u, v), w in load.items() if u == ("nic", 1, 5))  # its neighbour takes its shares


def test_folded_runs_wait_for_the_slowest_expert_group():
    """A thin uplink under leaf 2 slows only the EP groups whose shares cross it. Their ring
    bandwidth ties with everyone's, so picking the slowest group by ring would miss it: the
    folded step must price the slowest all-to-all, as replaying every GPU does."""
    s = two_leaf_moe("faults=[{uplink: {leaf: 2, gbps: 3200}}]")
    healthy = sim3d.simulate(two_leaf_moe()).breakdown["ep"]
    folded = sim3d.simulate(s).breakdown["ep"]
    assert folded > 1.5 * healthy
    links = [Topology(s).group_link("ep", g[0]) for g in Topology(s).placement.groups("ep")]
    assert len({link.bw for link in links}) == 1 and len({link.a2a_network_s for link in links}) > 1


def test_an_all_to_all_on_a_ring_link_is_refused_by_name():
    """Only expert-parallel links carry all-to-all loads; pricing one on another axis's link
    across nodes would silently use a ring's crossings, so it is refused."""
    link = Topology(moe()).group_link("dp")
    assert link.nodes > 1 and link.a2a_network_s is None
    with pytest.raises(ValueError, match="Topology.group_link computes them for the ep axis"):
        collective_time("all_to_all", 1 << 20, link)
